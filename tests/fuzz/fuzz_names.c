// Names are data. The input's bytes, split at NUL bytes (each byte the code
// point of its value, in UTF-8), become every name of an ONNX model (values,
// nodes, the graph: tests/fixtures/parity/mlp) and,
// each byte taken into [A-Za-z0-9_], every identifier of the same MLP in the
// DSL (the model, its dims, inputs, parameters and lets). Whatever the names,
// the emitted model.c must be the plain-named model's token for token outside
// comments and string literals, its identifiers renamed one-to-one, and
// weights.bin the same bytes. model.c is tokenized as C11 reads it: trigraphs,
// then line splices, then comments, literals, identifiers, numbers and
// punctuation. A name the frontend refuses (a DSL keyword, two values of one
// name) skips the input.
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <sys/stat.h>

#include "../onnx_rename.h"
#include "codegen.h"
#include "frontend.h"
#include "fuzz.h"

// ---- C tokens

typedef struct {
  char kind;  // 'i' identifier, 'n' number, 's' string or character literal, 'p' punctuation
  char *text;
} Tok;

typedef struct {
  Tok *t;
  int n, cap;
} Toks;

static void push(Toks *ts, char kind, const char *s, size_t n) {
  if (ts->n == ts->cap) {
    ts->cap = ts->cap ? 2 * ts->cap : 4096;
    ts->t = realloc(ts->t, (size_t)ts->cap * sizeof *ts->t);
    if (!ts->t)
      abort();
  }
  char *text = malloc(n + 1);
  memcpy(text, s, n);
  text[n] = '\0';
  ts->t[ts->n++] = (Tok){kind, text};
}

static void toks_free(Toks *ts) {
  for (int i = 0; i < ts->n; i++)
    free(ts->t[i].text);
  free(ts->t);
  *ts = (Toks){0};
}

static bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// Translation phases 1-3 of C11 over src (modified in place). false: a
// literal or comment that does not end (model.c would not compile).
static bool tokenize(char *src, Toks *ts) {
  // phase 1: trigraphs
  static const char tri[] = "=(/)'<!>-", rep[] = "#[\\]^{|}~";
  size_t w = 0;
  for (size_t r = 0; src[r]; r++) {
    const char *k;
    if (src[r] == '?' && src[r + 1] == '?' && src[r + 2] && (k = strchr(tri, src[r + 2]))) {
      src[w++] = rep[k - tri];
      r += 2;
    } else {
      src[w++] = src[r];
    }
  }
  src[w] = '\0';
  // phase 2: line splices
  w = 0;
  for (size_t r = 0; src[r]; r++) {
    if (src[r] == '\\' && src[r + 1] == '\n')
      r++;
    else
      src[w++] = src[r];
  }
  src[w] = '\0';
  // phase 3
  for (const char *p = src; *p;) {
    if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == '\v') {
      p++;
    } else if (p[0] == '/' && p[1] == '/') {
      while (*p && *p != '\n')
        p++;
    } else if (p[0] == '/' && p[1] == '*') {
      const char *end = strstr(p + 2, "*/");
      if (!end)
        return false;
      p = end + 2;
    } else if (*p == '"' || *p == '\'') {
      const char *q = p + 1;
      while (*q && *q != *p && *q != '\n')
        q += q[0] == '\\' && q[1] ? 2 : 1;
      if (*q != *p)
        return false;
      push(ts, 's', "", 0);  // a name's text: compared apart from the code
      p = q + 1;
    } else if (ident_char(*p) && !(*p >= '0' && *p <= '9')) {
      const char *q = p;
      while (ident_char(*q))
        q++;
      push(ts, 'i', p, (size_t)(q - p));
      p = q;
    } else if ((*p >= '0' && *p <= '9') || (*p == '.' && p[1] >= '0' && p[1] <= '9')) {
      const char *q = p;
      while (ident_char(*q) || *q == '.' ||
             ((*q == '+' || *q == '-') && strchr("eEpP", q[-1])))
        q++;
      push(ts, 'n', p, (size_t)(q - p));
      p = q;
    } else {
      push(ts, 'p', p, 1);
      p++;
    }
  }
  return true;
}

// Same code up to a one-to-one renaming of identifiers? (a finding traps)
static void same_code(const Toks *a, const Toks *b) {
  if (a->n != b->n)
    __builtin_trap();
  // the renaming, both ways, as parallel arrays searched linearly (models are small)
  const char **from = calloc((size_t)a->n + 1, sizeof *from), **to = calloc((size_t)a->n + 1, sizeof *to);
  int n = 0;
  for (int i = 0; i < a->n; i++) {
    const Tok *x = &a->t[i], *y = &b->t[i];
    if (x->kind != y->kind)
      __builtin_trap();
    if (x->kind != 'i') {
      if (strcmp(x->text, y->text))
        __builtin_trap();
      continue;
    }
    int k = 0;
    while (k < n && strcmp(from[k], x->text) && strcmp(to[k], y->text))
      k++;
    if (k == n)
      from[n] = x->text, to[n] = y->text, n++;
    else if (strcmp(from[k], x->text) || strcmp(to[k], y->text))
      __builtin_trap();  // one name became two, or two became one
  }
  free(from), free(to);
}

// ---- compiling a model into a folder

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n)
    free(s), s = NULL;
  fclose(f);
  if (s)
    s[n] = '\0', *len = (size_t)n;
  return s;
}

// The model at `path` compiled into `dir` (mtc compile's pipeline). false: the
// frontend or a pass refused it (with a message; none is a finding).
static bool compile(const char *path, const char *dir, const char *loss) {
  IrDiag d = {0};
  static const FeDefine batch[] = {{"B", 16}};  // the ONNX MLP's batch dim (the DSL's has one)
  FeLoadOptions o = {.loss = loss, .seed = 1337, .defines = loss ? batch : NULL,
                     .ndefines = loss ? 1 : 0};
  IrGraph *g = fe_load(path, &o, &d);
  if (!g) {
    if (!d.msg[0])
      __builtin_trap();
    if (getenv("MTC_FUZZ_VERBOSE"))
      fprintf(stderr, "%s: %s\n", path, d.msg);
    return false;
  }
  PassCtx ctx = {.opt = pass_default_options(), .diag = &d};
  int rc = pass_run_all(g, &ctx);
  if (!rc) {
    CgOptions co = {.mem = ctx.mem, .outdir = dir, .seed = 1337, .source = path,
                    .runtime_dir = MTC_SOURCE_DIR "/runtime"};
    rc = cg_emit_c(g, &co, &d);
  }
  if (rc && !d.msg[0])
    __builtin_trap();
  if (rc && getenv("MTC_FUZZ_VERBOSE"))
    fprintf(stderr, "%s: %s\n", path, d.msg);
  pass_memplan_free(ctx.mem);
  ir_graph_free(g);
  return rc == 0;
}

typedef struct {
  Toks code;
  char *weights;
  size_t nweights;
} Emitted;

static bool emitted(const char *dir, Emitted *e) {
  char path[512];
  size_t n;
  snprintf(path, sizeof path, "%s/model.c", dir);
  char *src = slurp(path, &n);
  snprintf(path, sizeof path, "%s/weights.bin", dir);  // absent: the program draws them
  e->nweights = 0;
  e->weights = slurp(path, &e->nweights);
  e->code = (Toks){0};
  bool ok = src && tokenize(src, &e->code);
  free(src);
  return ok;
}

// The model compiled with plain names once, then with the input's: the same code.
static void check(const char *path, const char *loss, Emitted *plain, const char *tag) {
  char dir[256];
  snprintf(dir, sizeof dir, "%s/mtc-fuzz-names-%ld-%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (long)getpid(), tag);
  if (!compile(path, dir, loss))
    return;
  Emitted got;
  if (!emitted(dir, &got))
    __builtin_trap();  // an unterminated literal or comment
  same_code(&plain->code, &got.code);
  if (!got.weights != !plain->weights || got.nweights != plain->nweights ||
      (got.weights && memcmp(got.weights, plain->weights, got.nweights)))
    __builtin_trap();
  toks_free(&got.code);
  free(got.weights);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

// The scratch folders go when the process ends.
static void remove_scratch(void) {
  static const char *const tags[] = {"onnx-plain", "dsl-plain", "onnx", "dsl"};
  for (int i = 0; i < 4; i++) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s/mtc-fuzz-names-%ld-%s",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid(), tags[i]);
    nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
  }
  for (int i = 0; i < 2; i++) {  // fuzz_file's
    char path[256];
    snprintf(path, sizeof path, "%s/mtc-fuzz-%ld%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (long)getpid(), i ? ".mtc" : ".onnx");
    remove(path);
  }
}

static void reference(const char *path, const char *loss, Emitted *e, const char *tag) {
  char dir[256];
  snprintf(dir, sizeof dir, "%s/mtc-fuzz-names-%ld-%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (long)getpid(), tag);
  if (!compile(path, dir, loss) || !emitted(dir, e)) {
    fprintf(stderr, "fuzz_names: the plain model %s does not compile\n", path);
    abort();  // the fixture itself: not a finding, a broken setup
  }
}

// ---- the names

typedef struct {
  const uint8_t *data;
  size_t size;
  char given[64][64];  // the names handed out so far (kept distinct)
  int ngiven;
  char ident[16][40];  // the DSL's identifiers so far (fuzz_ident)
} Names;

// The index-th name of the input (NUL-separated, cycling), made distinct from
// those handed out before by "#index" (an empty name, ONNX's "absent", too).
static const char *nth_name(Names *in, int index, char *buf, size_t cap) {
  size_t count = 1;
  for (size_t i = 0; i < in->size; i++)
    count += in->data[i] == 0;
  size_t k = (size_t)index % count, start = 0;
  for (size_t i = 0; i < in->size && k; i++)
    if (in->data[i] == 0 && --k == 0)
      start = i + 1;
  // each byte as the code point of its value, in UTF-8 (ONNX names are UTF-8)
  size_t n = 0;
  for (size_t i = start; i < in->size && in->data[i] && n + 14 < cap; i++) {
    uint8_t c = in->data[i];
    if (c < 0x80) {
      buf[n++] = (char)c;
    } else {
      buf[n++] = (char)(0xc0 | c >> 6);
      buf[n++] = (char)(0x80 | (c & 0x3f));
    }
  }
  buf[n] = '\0';
  bool dup = n == 0;
  for (int i = 0; i < in->ngiven && !dup; i++)
    dup = !strcmp(in->given[i], buf);
  if (dup)
    snprintf(buf + n, cap - n, "#%d", index);
  if (in->ngiven < 64)
    snprintf(in->given[in->ngiven++], sizeof in->given[0], "%s", buf);
  return buf;
}

static const char *pick(void *ctx, int kind, int index, const char *old) {
  static char buf[256];
  if (kind == RENAME_DIM)
    return old;
  return nth_name(ctx, index * 4 + kind, buf, sizeof buf);
}

// The MLP in the DSL, its identifiers @0 .. @15
static const char dsl_template[] =
    "model @0;\n"
    "dim @1 = 16, @2 = 24, @3 = 32, @4 = 10;\n"
    "input @5: [@1, @2];\n"
    "input @6: i32[@1] classes(@4);\n"
    "param @7: [@2, @3] = normal(0.02);\n"
    "param @8: [@3] = zeros;\n"
    "param @9: [@3] = ones;\n"
    "param @10: [@3] = zeros;\n"
    "param @11: [@3, @3] = normal(0.02);\n"
    "param @12: [@3] = zeros;\n"
    "param @13: [@3, @4] = normal(0.02);\n"
    "param @14: [@4] = zeros;\n"
    "let @15 = layernorm(relu(@5 @ @7 + @8), @9, @10);\n"
    "let @15 = gelu(@15 @ @11 + @12);\n"
    "loss cross_entropy(@15 @ @13 + @14, @6);\n";

static const char *const dsl_plain[] = {"mlp", "B", "D", "H", "K", "x", "y", "fc1_w", "fc1_b",
                                        "ln_w", "ln_b", "fc2_w", "fc2_b", "fc3_w", "fc3_b", "h"};

// The template with each @k replaced by name(k).
static char *dsl_text(const char *(*name)(void *, int, char *, size_t), void *ctx) {
  size_t cap = sizeof dsl_template * 40, n = 0;
  char *out = malloc(cap), buf[64];
  for (const char *p = dsl_template; *p;) {
    if (*p == '@' && p[1] >= '0' && p[1] <= '9') {
      int k = (int)strtol(p + 1, (char **)&p, 10);
      const char *s = name(ctx, k, buf, sizeof buf);
      size_t len = strlen(s);
      memcpy(out + n, s, len);
      n += len;
    } else {
      out[n++] = *p++;
    }
  }
  out[n] = '\0';
  return out;
}

static const char *plain_ident(void *ctx, int k, char *buf, size_t cap) {
  (void)ctx, (void)buf, (void)cap;
  return dsl_plain[k];
}

// The k-th input name as a DSL identifier (a letter or '_' first, then
// [A-Za-z0-9_]); one that another @k took or that the template uses for
// itself gets "_k" (the DSL would refuse it, or read it as the op).
static const char *fuzz_ident(void *ctx, int k, char *buf, size_t cap) {
  static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789";
  static const char *const words[] = {"model", "dim", "input", "param", "block", "let", "return",
                                      "loss", "repeat", "as", "i32", "f32", "classes", "tokens",
                                      "targets", "normal", "zeros", "ones", "layernorm", "relu",
                                      "gelu", "cross_entropy", NULL};
  Names *in = ctx;
  if (in->ident[k][0])
    return in->ident[k];  // @k again
  char raw[64];
  nth_name(in, k, raw, sizeof raw);
  size_t n = strlen(raw);
  n = n < 24 ? n : 24;
  for (size_t i = 0; i < n; i++)
    buf[i] = alphabet[(unsigned char)raw[i] % (i ? 63 : 53)];
  buf[n] = '\0';
  bool taken = !n;
  for (int i = 0; words[i] && !taken; i++)
    taken = !strcmp(words[i], buf);
  for (int i = 0; i < k && !taken; i++)
    taken = !strcmp(in->ident[i], buf);
  if (taken)
    snprintf(buf + n, cap - n, "_%d", k);
  snprintf(in->ident[k], sizeof in->ident[0], "%s", buf);
  return buf;
}

static const char *write_text(const char *text, const char *suffix) {
  return fuzz_file((const uint8_t *)text, strlen(text), suffix);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static Emitted onnx_plain, dsl_ref;
  static Onnx__ModelProto *model;
  if (!model) {
    size_t n;
    char *bytes = slurp(MTC_SOURCE_DIR "/tests/fixtures/parity/mlp/model_o17.onnx", &n);
    model = bytes ? onnx__model_proto__unpack(NULL, n, (const uint8_t *)bytes) : NULL;
    free(bytes);
    if (!model)
      abort();
    atexit(remove_scratch);
    reference(MTC_SOURCE_DIR "/tests/fixtures/parity/mlp/model_o17.onnx", "cross-entropy",
              &onnx_plain, "onnx-plain");
    char *text = dsl_text(plain_ident, NULL);
    reference(write_text(text, ".mtc"), NULL, &dsl_ref, "dsl-plain");
    free(text);
  }
  Names in = {.data = data, .size = size};

  // ONNX: a fresh copy of the model, renamed, packed into this process's scratch file
  size_t len = onnx__model_proto__get_packed_size(model);
  uint8_t *buf = malloc(len);
  onnx__model_proto__pack(model, buf);
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
  free(buf);
  if (!m || !onnx_rename(m, pick, &in))
    abort();
  len = onnx__model_proto__get_packed_size(m);
  buf = malloc(len);
  onnx__model_proto__pack(m, buf);
  onnx__model_proto__free_unpacked(m, NULL);
  const char *path = fuzz_file(buf, len, ".onnx");
  free(buf);
  if (path)
    check(path, "cross-entropy", &onnx_plain, "onnx");

  // the DSL
  in.ngiven = 0;
  memset(in.ident, 0, sizeof in.ident);
  char *text = dsl_text(fuzz_ident, &in);
  path = write_text(text, ".mtc");
  free(text);
  if (path)
    check(path, NULL, &dsl_ref, "dsl");
  return 0;
}
