// mtc: an ahead-of-time compiler for training.
//
//   mtc compile MODEL -o DIR [options]   plan and emit a training program
//   mtc inspect MODEL [options]          print the IR (after any pass) and the memory plan
//
// The pipeline, as `compile` runs it:
//   frontend (DSL or IR text) -> passes (shapes, autodiff, optimizer, memplan) -> codegen (C)
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "frontend.h"
#include "ir.h"
#include "passes.h"

#define MAX_DEFINES 32

typedef struct Args {
  const char *cmd;
  const char *model;
  const char *outdir;
  FeDefine defines[MAX_DEFINES];
  int ndefines;
  PassOptions pass;
  uint64_t seed;
  bool dot;
} Args;

static void usage(FILE *f) {
  fputs("usage: mtc compile MODEL -o DIR [options]\n"
        "       mtc inspect MODEL [--dump-after PASS] [--dot] [options]\n"
        "\n"
        "MODEL is a .mtc DSL file or an .ir IR text file.\n"
        "\n"
        "options:\n"
        "  -D NAME=VALUE          set a dim (e.g. -D L=12); repeatable\n"
        "  -o DIR                 output folder (compile)\n"
        "  --optimizer adamw|sgd  the update rule (default adamw)\n"
        "  --lr X --beta1 X --beta2 X --eps X --weight-decay X\n"
        "                         optimizer defaults compiled into the program (train's\n"
        "                         flags override them; 1e-3, 0.9, 0.999, 1e-8, 0)\n"
        "  --seed N               seed of the initial weights (default 1337)\n"
        "  --dump-after PASS      print the IR after PASS (shapes, autodiff, optimizer,\n"
        "                         memplan, or all)\n"
        "  --dot                  print Graphviz instead of IR text\n"
        "  -h, --help             this text\n",
        f);
}

// One line on stderr, exit 2: the command line is wrong.
static _Noreturn void bad_usage(const char *fmt, const char *what) {
  fputs("mtc: error: ", stderr);
  fprintf(stderr, fmt, what);
  fputs(" (see mtc --help)\n", stderr);
  exit(2);
}

static double parse_double(const char *flag, const char *s) {
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (!*s || *end || errno)
    bad_usage("%s takes a number", flag);
  return x;
}

static void parse_define(Args *a, const char *s) {
  const char *eq = strchr(s, '=');
  if (!eq || eq == s)
    bad_usage("-D takes NAME=VALUE, not '%s'", s);
  char *end;
  errno = 0;
  long long v = strtoll(eq + 1, &end, 10);
  if (!eq[1] || *end || errno || v <= 0)
    bad_usage("-D %s: the value must be a positive integer", s);
  if (a->ndefines == MAX_DEFINES)
    bad_usage("too many -D options (at most %s)", "32");
  FeDefine *d = &a->defines[a->ndefines++];
  d->name = strndup(s, (size_t)(eq - s));
  d->value = v;
}

static Args parse_args(int argc, char **argv) {
  Args a = {.pass = pass_default_options(), .seed = 1337};
  if (argc < 2) {
    usage(stderr);
    exit(2);
  }
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    const char *next = i + 1 < argc ? argv[i + 1] : NULL;
#define VALUE() (next ? (i++, next) : (bad_usage("%s needs a value", s), ""))
    if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(s, "-D")) {
      parse_define(&a, VALUE());
    } else if (!strncmp(s, "-D", 2)) {
      parse_define(&a, s + 2);
    } else if (!strcmp(s, "-o")) {
      a.outdir = VALUE();
    } else if (!strcmp(s, "--optimizer")) {
      const char *o = VALUE();
      if (!strcmp(o, "adamw"))
        a.pass.optimizer = OPTIM_ADAMW;
      else if (!strcmp(o, "sgd"))
        a.pass.optimizer = OPTIM_SGD;
      else
        bad_usage("--optimizer takes adamw or sgd, not '%s'", o);
    } else if (!strcmp(s, "--lr")) {
      a.pass.lr = parse_double(s, VALUE());
    } else if (!strcmp(s, "--beta1")) {
      a.pass.beta1 = parse_double(s, VALUE());
    } else if (!strcmp(s, "--beta2")) {
      a.pass.beta2 = parse_double(s, VALUE());
    } else if (!strcmp(s, "--eps")) {
      a.pass.eps = parse_double(s, VALUE());
    } else if (!strcmp(s, "--weight-decay")) {
      a.pass.weight_decay = parse_double(s, VALUE());
    } else if (!strcmp(s, "--seed")) {
      a.seed = (uint64_t)parse_double(s, VALUE());
    } else if (!strcmp(s, "--dump-after")) {
      a.pass.dump_after = VALUE();
      if (strcmp(a.pass.dump_after, "all") && !pass_exists(a.pass.dump_after))
        bad_usage("--dump-after: no pass named '%s' (shapes, autodiff, optimizer, memplan, all)",
                  a.pass.dump_after);
    } else if (!strcmp(s, "--dot")) {
      a.dot = a.pass.dot = true;
    } else if (s[0] == '-') {
      bad_usage("unknown option '%s'", s);
    } else if (!a.cmd) {
      a.cmd = s;
    } else if (!a.model) {
      a.model = s;
    } else {
      bad_usage("unexpected argument '%s'", s);
    }
#undef VALUE
  }
  if (!a.cmd || (strcmp(a.cmd, "compile") && strcmp(a.cmd, "inspect")))
    bad_usage("unknown command '%s' (compile, inspect)", a.cmd ? a.cmd : "");
  if (!a.model)
    bad_usage("%s needs a model file", a.cmd);
  if (!strcmp(a.cmd, "compile") && !a.outdir)
    bad_usage("compile needs an output folder: -o %s", "DIR");
  return a;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

static char *read_file(const char *path, IrDiag *d) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    ir_error(d, (IrLoc){0}, "cannot read %s: %s", path, strerror(errno));
    return NULL;
  }
  size_t cap = 1 << 16, len = 0, n;
  char *buf = malloc(cap);
  while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0)
    if ((len += n) + 1 == cap)
      buf = realloc(buf, cap *= 2);
  fclose(f);
  if (buf)
    buf[len] = '\0';
  return buf;
}

// The frontend: a DSL file, or IR text (with -D overriding its bindings).
static IrGraph *load(const Args *a, IrDiag *d) {
  if (ends_with(a->model, ".onnx")) {
    ir_error(d, (IrLoc){0}, "%s: ONNX input is not supported yet; write the model in the DSL",
             a->model);
    return NULL;
  }
  if (!ends_with(a->model, ".ir"))
    return fe_dsl_load(a->model, a->defines, a->ndefines, d);
  char *text = read_file(a->model, d);
  IrGraph *g = text ? ir_parse(text, a->model, d) : NULL;
  free(text);
  for (int i = 0; g && i < a->ndefines; i++) {
    int var = symtab_find(&g->syms, a->defines[i].name);
    if (var < 0) {
      ir_error(d, (IrLoc){0}, "-D %s: the model has no dim %s", a->defines[i].name,
               a->defines[i].name);
      ir_graph_free(g);
      return NULL;
    }
    symtab_bind(&g->syms, var, a->defines[i].value);
  }
  return g;
}

static void print_memory(IrGraph *g) {
  printf("# memory plan: arena %lld bytes = persistent %lld + transient %lld\n",
         (long long)g->arena_bytes, (long long)g->persistent_bytes,
         (long long)(g->arena_bytes - g->persistent_bytes));
  printf("# peak live %lld bytes at schedule position %d = %s\n", (long long)g->peak_live_bytes,
         g->peak_at, sym_str(&g->arena, g->peak_formula, &g->syms));
}

int main(int argc, char **argv) {
  Args a = parse_args(argc, argv);
  IrDiag diag = {0};
  PassCtx ctx = {.opt = a.pass, .diag = &diag};
  bool inspect = !strcmp(a.cmd, "inspect");
  if (inspect && !a.pass.dump_after)
    ctx.opt.dump_after = "memplan";

  IrGraph *g = load(&a, &diag);
  int rc = g ? pass_run_all(g, &ctx) : -1;
  if (!rc && inspect && !a.dot)
    print_memory(g);
  if (!rc && !inspect) {
    CgOptions co = {.outdir = a.outdir, .seed = a.seed, .source = a.model,
                    .runtime_dir = getenv("MTC_RUNTIME_DIR") ? getenv("MTC_RUNTIME_DIR")
                                                             : MTC_SOURCE_DIR "/runtime"};
    rc = cg_emit_c(g, &co, &diag);
    if (!rc)
      printf("mtc: wrote %s (arena %lld bytes); build with: make -C %s cpu\n", a.outdir,
             (long long)g->arena_bytes, a.outdir);
  }
  if (rc)
    ir_diag_print(stderr, &diag);
  ir_graph_free(g);
  for (int i = 0; i < a.ndefines; i++)
    free((char *)a.defines[i].name);
  return rc ? 1 : 0;
}
