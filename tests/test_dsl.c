// Tests of the DSL frontend (frontend/): the examples, the error corpus and a
// mutation fuzz.
//
//   test_dsl EXAMPLES_DIR ERRORS_DIR
//
// 1. examples/mlp.mtc and examples/gpt2.mtc load, with and without -D
//    defines, into graphs with the expected params, shapes and block ids,
//    that pass ir_verify and print the same after an ir_parse round trip.
// 2. Every ERRORS_DIR/*.mtc starts with
//        # expect: LINE:COL: SUBSTRING
//    and optionally
//        # defines: NAME=VALUE ...
//    and must fail to load with exactly that location and a message that
//    contains SUBSTRING.
// 3. 2000 mutations of gpt2.mtc (deterministic) each either load into a
//    graph that verifies or fail with a located message; none crashes (CI
//    runs this under ASan and UBSan).
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "frontend.h"

static char *path_join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  snprintf(p, n, "%s/%s", dir, name);
  return p;
}

// The whole file, NUL-terminated; *len its length.
static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  size_t got;
  while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (n + 1 == cap)
      buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  buf[n] = '\0';
  if (len)
    *len = n;
  return buf;
}

// ---- 1. examples -------------------------------------------------------------------

static int count_role(const IrGraph *g, IrRole role) {
  int n = 0;
  for (int i = 0; i < g->nvalues; i++)
    n += g->values[i]->role == role && !g->values[i]->producer;
  return n;
}

static int max_block(const IrGraph *g) {
  int m = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->block > m)
      m = g->nodes[i]->block;
  return m;
}

// The shape of a named value as text, "(none)" when there is no such value.
static const char *shape_of(IrGraph *g, const char *name) {
  IrValue *v = ir_value_find(g, name);
  return v ? ir_shape_str(g, v) : "(none)";
}

// Checks what every good graph must satisfy: it verifies, it has a scalar
// loss, all nodes are forward nodes with a DSL location, and its text reads
// back to the same text.
static void check_graph(IrGraph *g, const char *what) {
  IrDiag d;
  int rc = ir_verify(g, "dsl", &d);
  check(rc == 0, "%s: ir_verify: %s", what, rc ? d.msg : "");
  check(g->loss && g->loss->rank == 0, "%s: a scalar loss", what);
  bool fwd = true, located = true;
  for (int i = 0; i < g->nnodes; i++) {
    fwd &= g->nodes[i]->phase == PHASE_FORWARD;
    located &= g->nodes[i]->loc.file != NULL && g->nodes[i]->loc.line > 0;
  }
  check(fwd, "%s: all nodes in the forward phase", what);
  check(located, "%s: all nodes have a source location", what);
  char *text = ir_print_str(g);
  IrGraph *g2 = ir_parse(text, what, &d);
  if (check(g2 != NULL, "%s: ir_parse of the printed graph: %s", what, g2 ? "" : d.msg)) {
    char *text2 = ir_print_str(g2);
    check(strcmp(text, text2) == 0, "%s: print(parse(print(g))) == print(g)", what);
    free(text2);
    ir_graph_free(g2);
  }
  free(text);
}

static IrGraph *load(const char *dir, const char *file, const FeDefine *defs, int ndefs) {
  char *path = path_join(dir, file);
  IrDiag d;
  IrGraph *g = fe_dsl_load(path, defs, ndefs, 0, &d);
  if (!check(g != NULL, "load %s: %s:%d:%d: %s", file, d.loc.file ? d.loc.file : "?", d.loc.line,
             d.loc.col, d.msg))
    ir_diag_print(stdout, &d);
  free(path);
  return g;
}

static void test_mlp(const char *dir) {
  IrGraph *g = load(dir, "mlp.mtc", NULL, 0);
  if (g) {
    check_graph(g, "mlp");
    check(strcmp(g->name, "mlp") == 0, "mlp: graph name '%s'", g->name);
    check(count_role(g, ROLE_PARAM) == 6, "mlp: 6 params, got %d", count_role(g, ROLE_PARAM));
    check(count_role(g, ROLE_INPUT) == 2, "mlp: 2 inputs");
    check(strcmp(shape_of(g, "logits"), "[B,K]") == 0, "mlp: logits %s", shape_of(g, "logits"));
    check(max_block(g) == 0, "mlp: no blocks");
    IrValue *y = ir_value_find(g, "y");
    check(y && y->dtype == DT_I32 && y->input_kind == INPUT_CLASSES, "mlp: y is i32 classes");
    ir_graph_free(g);
  }
  FeDefine defs[] = {{"B", 128}, {"H", 512}};
  g = load(dir, "mlp.mtc", defs, 2);
  if (g) {
    check_graph(g, "mlp -D");
    int b = symtab_find(&g->syms, "B"), h = symtab_find(&g->syms, "H");
    check(b >= 0 && g->syms.value[b] == 128 && h >= 0 && g->syms.value[h] == 512,
          "mlp -D B=128 -D H=512: bindings");
    ir_graph_free(g);
  }
}

static void test_gpt2(const char *dir) {
  IrGraph *g = load(dir, "gpt2.mtc", NULL, 0);
  if (g) {
    check_graph(g, "gpt2");
    check(count_role(g, ROLE_PARAM) == 2 + 12 * 4 + 2, "gpt2: %d params, want 52",
          count_role(g, ROLE_PARAM));
    check(max_block(g) == 4, "gpt2: blocks 1..4, max %d", max_block(g));
    bool seen[5] = {0};
    for (int i = 0; i < g->nnodes; i++)
      if (g->nodes[i]->block <= 4)
        seen[g->nodes[i]->block] = true;
    check(seen[0] && seen[1] && seen[2] && seen[3] && seen[4], "gpt2: nodes in blocks 0..4");
    check(strcmp(shape_of(g, "logits"), "[B,T,V]") == 0, "gpt2: logits %s",
          shape_of(g, "logits"));
    check(strcmp(shape_of(g, "h.0.qkv_w"), "[C,3*C]") == 0, "gpt2: h.0.qkv_w %s",
          shape_of(g, "h.0.qkv_w"));
    check(strcmp(shape_of(g, "h.3.q.1"), "[B,NH,T,C/NH]") == 0, "gpt2: h.3.q.1 %s",
          shape_of(g, "h.3.q.1"));
    IrValue *p = ir_value_find(g, "h.3.fcproj_w");
    check(p && p->init.kind == INIT_NORMAL && p->init.std > 0.00707 && p->init.std < 0.00708,
          "gpt2: h.3.fcproj_w init normal(0.02/sqrt(8))");
    IrValue *idx = ir_value_find(g, "idx");
    check(idx && idx->input_kind == INPUT_TOKENS && idx->range, "gpt2: idx is tokens(V)");
    printf("gpt2: %d nodes, %d values, logits %s\n", g->nnodes, g->nvalues,
           shape_of(g, "logits"));
    ir_graph_free(g);
  }

  FeDefine l2[] = {{"L", 2}};
  g = load(dir, "gpt2.mtc", l2, 1);
  if (g) {
    check_graph(g, "gpt2 -D L=2");
    check(count_role(g, ROLE_PARAM) == 28, "gpt2 -D L=2: 28 params, got %d",
          count_role(g, ROLE_PARAM));
    check(max_block(g) == 2, "gpt2 -D L=2: 2 blocks, got %d", max_block(g));
    ir_graph_free(g);
  }

  FeDefine gpt2_124m[] = {{"L", 12}, {"C", 768}, {"NH", 12}, {"V", 50257}, {"T", 1024}};
  g = load(dir, "gpt2.mtc", gpt2_124m, 5);
  if (g) {
    check_graph(g, "gpt2 124M");
    check(count_role(g, ROLE_PARAM) == 148, "gpt2 124M: 148 params");
    check(max_block(g) == 12, "gpt2 124M: 12 blocks");
    int64_t total = 0;
    for (int i = 0; i < g->nvalues; i++)
      if (g->values[i]->role == ROLE_PARAM)
        total += ir_eval(g, ir_numel(g, g->values[i]));
    // 124,475,904 with llm.c's padded vocabulary 50304; 124,439,808 with 50257.
    check(total == 124439808, "gpt2 124M: %lld parameters", (long long)total);
    ir_graph_free(g);
  }
}

// GPT as Megatron-LM trained it: the scores written out, a causal softmax, dropout on them and on
// each residual branch; one step counter ticked first, outside the blocks; every dropout its own
// key. Without dropout (-D KEEP=100) none of it: no dropout nodes and no counter.
static void test_gpt_megatron(const char *dir) {
  IrGraph *g = load(dir, "gpt_megatron.mtc", NULL, 0);
  if (g) {
    check_graph(g, "gpt_megatron");
    int ndrop = 0, ncausal = 0, ntick = 0, first_tick = -1;
    int64_t keys = 0;
    for (int i = 0; i < g->nnodes; i++) {
      const IrNode *n = g->nodes[i];
      if (n->op == OP_DROPOUT) {
        ndrop++;
        keys |= (int64_t)1 << ir_attr_i(n, "key");
        check(ir_attr_f(n, "ratio") > 0.0999 && ir_attr_f(n, "ratio") < 0.1001 &&
                  strcmp(n->in[1]->name, "dropout.step") == 0,
              "gpt_megatron: dropout ratio 0.1 over the step counter");
      }
      ncausal += n->op == OP_SOFTMAX && ir_attr_i(n, "causal");
      if (n->op == OP_TICK && ntick++ == 0)
        first_tick = i;
    }
    check(ndrop == 12 && keys == 0x1ffe, "gpt_megatron: 12 dropouts, keys 1..12 (%d)", ndrop);
    check(ncausal == 4, "gpt_megatron: 4 causal softmaxes, got %d", ncausal);
    check(ntick == 1 && first_tick == 0 && g->nodes[0]->block == 0,
          "gpt_megatron: one tick, the first node, outside the blocks (%d at %d)", ntick,
          first_tick);
    ir_graph_free(g);
  }
  // the loader's seed is every dropout's (--seed)
  IrDiag d;
  g = fe_dsl_parse("dim B = 2, K = 4;\ninput x: [B, K];\ninput y: i32[B] classes(K);\n"
                   "loss cross_entropy(dropout(x, 0.5), y);\n", "seeded.mtc", NULL, 0, 1337, &d);
  if (check(g != NULL, "seeded: %s", g ? "" : d.msg)) {
    const IrNode *dr = NULL;
    for (int i = 0; i < g->nnodes; i++)
      dr = g->nodes[i]->op == OP_DROPOUT ? g->nodes[i] : dr;
    check(dr && ir_attr_i(dr, "seed") == 1337, "seeded: the dropout's seed is the loader's");
    ir_graph_free(g);
  }
  FeDefine none[] = {{"KEEP", 100}};
  g = load(dir, "gpt_megatron.mtc", none, 1);
  if (g) {
    int nodes = 0;
    for (int i = 0; i < g->nnodes; i++)
      nodes += g->nodes[i]->op == OP_DROPOUT || g->nodes[i]->op == OP_TICK;
    check(nodes == 0 && !ir_value_find(g, "dropout.step"),
          "gpt_megatron -D KEEP=100: no dropout, no counter");
    ir_graph_free(g);
  }
}

// fe_dsl_parse on strings: names, the file stem, a missing file.
static void test_api(void) {
  IrDiag d;
  const char *mini = "dim B = 2, K = 3;\n"
                     "input x: [B, K];\n"
                     "input y: i32[B] classes(K);\n"
                     "param w: [K, K] = normal(0.5 * 2 / 10);\n"
                     "let z = -(x @ w.T) * 2 + 1 - x / 4;\n"
                     "loss cross_entropy(softmax(z, axis=-1), y);\n";
  IrGraph *g = fe_dsl_parse(mini, "dir/mini.model.mtc", NULL, 0, 0, &d);
  if (check(g != NULL, "mini: %s", g ? "" : d.msg)) {
    check_graph(g, "mini");
    check(strcmp(g->name, "mini.model") == 0, "mini: the stem names the graph, got '%s'", g->name);
    IrValue *w = ir_value_find(g, "w");
    check(w && w->init.kind == INIT_NORMAL && w->init.std == 0.1, "mini: normal(0.1)");
    int nscale = 0;
    for (int i = 0; i < g->nnodes; i++)
      nscale += g->nodes[i]->op == OP_SCALE;
    check(nscale == 4, "mini: 4 scale nodes (-, *2, +1, /4), got %d", nscale);
    ir_graph_free(g);
  }
  g = fe_dsl_parse("", "empty.mtc", NULL, 0, 0, &d);
  check(!g && d.loc.line == 1 && d.loc.col == 1 && strstr(d.msg, "empty model"),
        "empty text: %s", d.msg);
  g = fe_dsl_load("/nonexistent/model.mtc", NULL, 0, 0, &d);
  check(!g && d.loc.line == 1 && strstr(d.msg, "cannot read /nonexistent/model.mtc"),
        "missing file: %s", d.msg);
  g = fe_dsl_load("/", NULL, 0, 0, &d);
  check(!g && strstr(d.msg, "cannot read /"), "a directory: %s", d.msg);
  g = fe_dsl_parse("dim B = 4;", NULL, NULL, 0, 0, NULL);
  check(!g, "NULL diag: fails quietly");
}

// ---- 2. the error corpus ---------------------------------------------------------------

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

// Runs one corpus file; returns false when its header is malformed.
static void run_error_file(const char *dir, const char *name) {
  char *path = path_join(dir, name);
  char *text = read_file(path, NULL);
  if (!check(text != NULL, "%s: cannot read", name)) {
    free(path);
    return;
  }
  int line, col, off = 0;
  if (!check(sscanf(text, "# expect: %d:%d: %n", &line, &col, &off) == 2 && off > 0,
             "%s: first line must be '# expect: LINE:COL: SUBSTRING'", name)) {
    free(text);
    free(path);
    return;
  }
  char *want = text + off;
  char *eol = strchr(want, '\n');
  char *rest = eol ? eol + 1 : want + strlen(want);
  if (eol)
    *eol = '\0';

  // # defines: A=1 B=2
  FeDefine defs[8];
  int ndefs = 0;
  char names[8][32];
  if (strncmp(rest, "# defines:", 10) == 0) {
    char *p = rest + 10;
    int n;
    long long value;
    while (ndefs < 8 && sscanf(p, " %31[A-Za-z0-9_]=%lld%n", names[ndefs], &value, &n) == 2) {
      defs[ndefs].name = names[ndefs];
      defs[ndefs].value = value;
      ndefs++;
      p += n;
    }
  }

  IrDiag d;
  IrGraph *g = fe_dsl_load(path, defs, ndefs, 0, &d);
  if (g) {
    check(false, "%s: loaded, but should fail with %d:%d: %s", name, line, col, want);
    ir_graph_free(g);
  } else {
    bool ok = d.loc.line == line && d.loc.col == col && strstr(d.msg, want) &&
              d.loc.file && strcmp(d.loc.file, path) == 0;
    check(ok, "%s: got %d:%d: %s\n      want %d:%d: %s", name, d.loc.line, d.loc.col, d.msg, line,
          col, want);
  }
  free(text);
  free(path);
}

static void test_errors(const char *dir) {
  DIR *dp = opendir(dir);
  if (!check(dp != NULL, "cannot open %s", dir))
    return;
  char *files[1024];
  int n = 0;
  struct dirent *de;
  while ((de = readdir(dp)) && n < 1024) {
    size_t len = strlen(de->d_name);
    if (len > 4 && strcmp(de->d_name + len - 4, ".mtc") == 0)
      files[n++] = strdup(de->d_name);
  }
  closedir(dp);
  qsort(files, (size_t)n, sizeof *files, cmp_str);
  check(n >= 25, "at least 25 error files, found %d", n);
  for (int i = 0; i < n; i++) {
    run_error_file(dir, files[i]);
    free(files[i]);
  }
  printf("error corpus: %d files\n", n);
}

// ---- 3. mutation fuzz -------------------------------------------------------------------

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng(void) { // xorshift64*
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1Dull;
}

static size_t below(size_t n) { return n ? (size_t)(rng() % n) : 0; }

// Bytes and fragments that make interesting programs: tokens, digits,
// keywords, odd characters.
static const char *const fragments[] = {
  "(", ")", "[", "]", "{", "}", ",", ";", ":", "=", "+", "-", "*", "/", "@", ".", ".T", "0", "1",
  "9", "-1", "1e9", "99999999999", "2.5", "x", "C", "HS", "L", "repeat ", "let ", "return ",
  "loss ", "param ", "block ", "dim ", "input ", " as ", "split(", "reshape(", "layer(", "#",
  "\n", " ", "\t", "$", "\x80", "\xff", "i32", "tokens(V)", "sizes=[", "axis=", "zeros",
  "normal(", "sqrt(", "@ wte", "concat(", "sum(", "mean(", "relu(", "softmax(",
};

static void test_fuzz(const char *dir, int count) {
  char *path = path_join(dir, "gpt2.mtc");
  size_t len = 0;
  char *base = read_file(path, &len);
  free(path);
  if (!check(base != NULL, "fuzz: cannot read gpt2.mtc"))
    return;
  size_t cap = len * 2 + 1024;
  char *buf = malloc(cap);
  int ok = 0, errors = 0, bad = 0;
  for (int it = 0; it < count; it++) {
    memcpy(buf, base, len + 1);
    size_t n = len;
    int edits = 1 + (int)below(4);
    for (int k = 0; k < edits; k++) {
      size_t at = below(n + 1);
      switch (below(6)) {
      case 0: { // delete a few bytes
        size_t del = 1 + below(8);
        if (at + del > n)
          del = n - at;
        memmove(buf + at, buf + at + del, n - at - del + 1);
        n -= del;
        break;
      }
      case 1: { // insert a fragment
        const char *f = fragments[below(sizeof fragments / sizeof *fragments)];
        size_t fl = strlen(f);
        if (n + fl + 1 > cap)
          break;
        memmove(buf + at + fl, buf + at, n - at + 1);
        memcpy(buf + at, f, fl);
        n += fl;
        break;
      }
      case 2: // replace a byte with a random non-NUL byte
        if (at < n)
          buf[at] = (char)(1 + below(255));
        break;
      case 3: // truncate
        if (below(4) == 0) {
          buf[at] = '\0';
          n = at;
        }
        break;
      case 4: { // duplicate a range (repeats lines and statements)
        size_t from = below(n), l = 1 + below(64);
        if (from + l > n)
          l = n - from;
        if (n + l + 1 > cap)
          break;
        memmove(buf + at + l, buf + at, n - at + 1);
        memmove(buf + at, buf + (from < at ? from : from + l), l);
        n += l;
        break;
      }
      default: // swap two bytes
        if (n > 1) {
          size_t b = below(n);
          if (at < n) {
            char t = buf[at];
            buf[at] = buf[b];
            buf[b] = t;
          }
        }
      }
    }
    IrDiag d;
    IrGraph *g = fe_dsl_parse(buf, "fuzz.mtc", NULL, 0, 0, &d);
    if (g) {
      IrDiag vd;
      if (ir_verify(g, "dsl", &vd) != 0 || !g->loss) {
        bad++;
        printf("fuzz %d: a graph that does not verify: %s\n", it, vd.msg);
      } else {
        ok++;
      }
      ir_graph_free(g);
    } else if (d.msg[0] && d.loc.line >= 1 && d.loc.col >= 1 && d.loc.file &&
               strcmp(d.loc.file, "fuzz.mtc") == 0) {
      errors++;
    } else {
      bad++;
      printf("fuzz %d: failed without a located message (%d:%d: %s)\n", it, d.loc.line,
             d.loc.col, d.msg);
    }
  }
  check(bad == 0, "fuzz: %d bad outcomes", bad);
  printf("fuzz: %d mutations: %d loaded, %d errors, %d bad\n", count, ok, errors, bad);
  free(buf);
  free(base);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s EXAMPLES_DIR ERRORS_DIR\n", argv[0]);
    return 2;
  }
  test_mlp(argv[1]);
  test_gpt2(argv[1]);
  test_gpt_megatron(argv[1]);
  test_api();
  test_errors(argv[2]);
  test_fuzz(argv[1], 2000);
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail ? 1 : 0;
}
