// The ONNX frontend against PyTorch and against broken files.
//
//   test_onnx DIR [N]    DIR = tests/onnx (fixtures from tools/onnx_models.py);
//                        N mutants per fuzzed fixture (default 600)
//
// 1. Every fixture NAME.onnx loads with the dims and options of NAME.ref;
//    the interpreter's loss on the fixed input of NAME.ref equals PyTorch's
//    (with the fusion pass and without it), and the fused graph has the
//    fused ops NAME.ref lists.
// 2. The error corpus (bad_*.onnx and a few cases made here) gives the
//    expected messages.
// 3. Mutations of valid fixtures (truncations and byte flips from a
//    fixed-seed generator) load or fail with a message, and never crash;
//    those that load also go through the pass pipeline.
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen.h"
#include "frontend.h"
#include "passes.h"
#include "rng.h"

static int passed, failed;

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s ", ok ? "ok  " : "FAIL");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  ok ? passed++ : failed++;
}

// ---- NAME.ref -------------------------------------------------------------------------------

#define MAX_ITEMS 16

typedef struct RefInput {
  char name[64];
  bool is_int;
  long n;
  double *v;
} RefInput;

typedef struct Ref {
  FeDefine dims[MAX_ITEMS];
  char dim_names[MAX_ITEMS][32];
  int ndims;
  char loss_kind[32], labels[64];
  RefInput in[MAX_ITEMS];
  int nin;
  bool has_loss;
  double loss;
  char fused[MAX_ITEMS][32];
  int fused_count[MAX_ITEMS];
  int nfused;
} Ref;

// dim NAME V | option FLAG [VALUE] | input NAME i32|f32 N v... | loss X | fused OP N
static bool read_ref(const char *path, Ref *r) {
  memset(r, 0, sizeof *r);
  FILE *f = fopen(path, "r");
  if (!f)
    return false;
  char word[64], *pending_option = NULL;
  while (fscanf(f, "%63s", word) == 1) {
    if (word[0] == '#') {
      int c;
      while ((c = fgetc(f)) != '\n' && c != EOF) {
      }
    } else if (!strcmp(word, "dim") && r->ndims < MAX_ITEMS) {
      long long v;
      if (fscanf(f, "%31s %lld", r->dim_names[r->ndims], &v) != 2)
        break;
      r->dims[r->ndims].name = r->dim_names[r->ndims];
      r->dims[r->ndims++].value = v;
    } else if (!strcmp(word, "option")) {
      char val[64];
      if (fscanf(f, "%63s", val) != 1)
        break;
      if (pending_option)
        snprintf(pending_option, 64, "%s", val), pending_option = NULL;
      else if (!strcmp(val, "--loss"))
        pending_option = r->loss_kind;
      else if (!strcmp(val, "--labels"))
        pending_option = r->labels;
    } else if (!strcmp(word, "input") && r->nin < MAX_ITEMS) {
      RefInput *in = &r->in[r->nin++];
      char type[8];
      if (fscanf(f, "%63s %7s %ld", in->name, type, &in->n) != 3 || in->n < 0 || in->n > 1 << 24)
        break;
      in->is_int = !strcmp(type, "i32");
      in->v = calloc((size_t)in->n + 1, sizeof *in->v);
      for (long i = 0; i < in->n; i++)
        if (fscanf(f, "%lf", &in->v[i]) != 1)
          break;
    } else if (!strcmp(word, "loss")) {
      r->has_loss = fscanf(f, "%lf", &r->loss) == 1;
    } else if (!strcmp(word, "fused") && r->nfused < MAX_ITEMS) {
      if (fscanf(f, "%31s %d", r->fused[r->nfused], &r->fused_count[r->nfused]) != 2)
        break;
      r->nfused++;
    }
  }
  fclose(f);
  return true;
}

static void free_ref(Ref *r) {
  for (int i = 0; i < r->nin; i++)
    free(r->in[i].v);
}

static FeOnnxOptions ref_options(const Ref *r) {
  return (FeOnnxOptions){.defines = r->dims, .ndefines = r->ndims,
                         .loss = r->loss_kind[0] ? r->loss_kind : NULL,
                         .labels = r->labels[0] ? r->labels : NULL, .seed = 1337};
}

// ---- 1. fixtures --------------------------------------------------------------------------------

// Forward nodes of op `name`; a GELU that went on into its GEMM's epilogue (passes/epilogue.c,
// matmul_bias act=1) counts as one.
static int count_op(const IrGraph *g, const char *name) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *x = g->nodes[i];
    // a GELU in a GEMM's epilogue, a loss fused with its gradient, a norm with its residual's
    // add (passes/epilogue.c)
    bool gelu = x->op == OP_MATMUL_BIAS && ir_attr_i(x, "act") && !strcmp(name, "gelu");
    bool loss = x->op == OP_CROSS_ENTROPY_FUSED && !strcmp(name, "cross_entropy");
    bool norm = x->op == OP_ADD_LAYERNORM && !strcmp(name, "layernorm");
    n += x->phase == PHASE_FORWARD && (gelu || loss || norm || !strcmp(ir_op_name(x->op), name));
  }
  return n;
}

// Load, run the pipeline, feed the ref's inputs, run the forward: the loss.
static bool fixture_loss(const char *path, const Ref *r, bool fusion, double *loss, IrGraph **out) {
  IrDiag d = {0};
  FeOnnxOptions o = ref_options(r);
  IrGraph *g = fe_onnx_load(path, &o, &d);
  PassCtx ctx = {.opt = pass_default_options(), .diag = &d};
  ctx.opt.no_fusion = !fusion;
  if (!g || pass_run_all(g, &ctx)) {
    printf("     %s: ", path);
    ir_diag_print(stdout, &d);
    pass_memplan_free(ctx.mem);
    ir_graph_free(g);
    return false;
  }
  CgInterp *it = cg_interp_new(g, ctx.mem, &d);
  if (!it) {
    ir_diag_print(stdout, &d);
    pass_memplan_free(ctx.mem);
    ir_graph_free(g);
    return false;
  }
  cg_interp_init_params(it, 1337);
  bool ok = true;
  for (int i = 0; i < r->nin; i++) {
    const IrValue *v = ir_value_find(g, r->in[i].name);
    if (!v || v->role != ROLE_INPUT || ir_eval(g, ir_numel(g, v)) != r->in[i].n) {
      printf("     %s: input '%s' is missing or has the wrong size\n", path, r->in[i].name);
      ok = false;
      continue;
    }
    for (long k = 0; k < r->in[i].n; k++)
      if (v->dtype == DT_I32)
        cg_interp_i32(it, v)[k] = (int32_t)r->in[i].v[k];
      else
        cg_interp_f32(it, v)[k] = (float)r->in[i].v[k];
  }
  cg_interp_run(it, PHASE_FORWARD, NULL);
  *loss = *cg_interp_f32(it, g->loss);
  cg_interp_free(it);
  pass_memplan_free(ctx.mem);
  if (out)
    *out = g;
  else
    ir_graph_free(g);
  return ok;
}

static void check_fixture(const char *dir, const char *name) {
  char path[1024], refpath[1024];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
  snprintf(refpath, sizeof refpath, "%s/%s.ref", dir, name);
  Ref r;
  if (!read_ref(refpath, &r)) {
    check(false, "%s: cannot read %s", name, refpath);
    return;
  }
  double fused_loss = NAN, plain_loss = NAN;
  IrGraph *g = NULL;
  bool ok1 = fixture_loss(path, &r, true, &fused_loss, &g);
  bool ok2 = fixture_loss(path, &r, false, &plain_loss, NULL);
  if (r.has_loss) {
    double tol = 2e-5 * fmax(1.0, fabs(r.loss));
    check(ok1 && fabs(fused_loss - r.loss) <= tol, "%s: loss %.7f, reference %.7f (diff %.2e)", name,
          fused_loss, r.loss, fabs(fused_loss - r.loss));
    check(ok2 && fabs(plain_loss - r.loss) <= tol, "%s: unfused loss %.7f (diff %.2e)", name,
          plain_loss, fabs(plain_loss - r.loss));
  } else { // dropout: no PyTorch reference; the loss must be a number
    check(ok1 && ok2 && isfinite(fused_loss) && isfinite(plain_loss),
          "%s: loss %.6f (fused), %.6f (unfused): finite (dropout: no reference)", name,
          fused_loss, plain_loss);
  }
  for (int i = 0; g && i < r.nfused; i++) {
    int have = count_op(g, r.fused[i]);
    check(have == r.fused_count[i], "%s: %d %s op(s) after fusion (want %d)", name, have,
          r.fused[i], r.fused_count[i]);
  }
  ir_graph_free(g);
  free_ref(&r);
}

// ---- 2. the error corpus --------------------------------------------------------------------------

// Loading `path` must fail with a message containing `want`.
static void expect_error(const char *label, const char *path, const FeOnnxOptions *o,
                         const char *want) {
  IrDiag d = {0};
  IrGraph *g = fe_onnx_load(path, o, &d);
  char printed[4096] = "";
  if (!g) {
    FILE *f = fmemopen(printed, sizeof printed - 1, "w");
    ir_diag_print(f, &d);
    fclose(f);
  }
  check(!g && strstr(printed, want), "%s: error '%.*s' (want '%s')", label,
        (int)strcspn(printed, "\n"), printed, want);
  ir_graph_free(g);
}

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(p, 1, n, f);
    fclose(f);
  }
}

static void check_errors(const char *dir, const char *tmp) {
  static const struct {
    const char *file, *want;
  } corpus[] = {
      {"bad_unsupported_op", "node 'my_celu': error: unsupported ONNX op 'Celu' (domain 'ai.onnx', opset 17)"},
      {"bad_unsupported_op", "mtc supports (domain ai.onnx, opsets 13 to 17): Abs, Add, And,"},
      {"bad_sequence_op", "node 'split_seq': error: unsupported ONNX op 'SplitToSequence'"},
      {"bad_sequence_op", "Where. Control flow and sequences are not read: torch.onnx.export writes "
                          "them for data-dependent Python (with dynamic_axes, repeat_interleave "
                          "becomes a Loop over sequences); export with fixed shapes"},
      {"bad_dangling", "node 'mm': error: MatMul: input 1 'nowhere' is not defined"},
      {"bad_tensor_size", "initializer 'w': raw data has 20 bytes; 12 float elements need 48"},
      {"bad_opset", "opset 11; mtc reads opsets 13 to 17"},
      {"bad_external", "initializer 'w': external data: cannot read"},
      {"bad_shapes", "node 'mm': error: MatMul: matmul: inner dims differ"},
      {"bad_known_size", "node 'trilu': error: Trilu: a tensor known at compile time would hold "
                         "268435456 elements; mtc keeps at most 67108864"},
      {"bad_int64_min_shape", "node 'reshape': error: Reshape: target dim 0 is -9223372036854775808"},
      {"bad_range_size", "node 'range': error: Range: 1.84467e+19 elements is too many"},
      {"bad_nesting", "messages nested more than 64 deep"},
      {"bad_conv_group", "node 'conv': error: Conv: group=3 does not divide X's 4 channels and "
                         "W's 6 filters"},
      {"bad_conv_pads", "node 'conv': error: Conv: attribute 'pads' has 2 values; a 2-D "
                        "convolution takes 4"},
      {"bad_conv_strides", "node 'conv': error: Conv: attribute 'strides' value 0 is out of range"},
      {"bad_conv_kernel", "node 'conv': error: Conv: kernel_shape [3,2] differs from W's [6,4,3,3]"},
      {"bad_conv_auto_pad", "node 'conv': error: Conv: auto_pad=SAME_UPPER: mtc takes explicit pads"},
      {"bad_maxpool_ceil", "node 'pool': error: MaxPool: ceil_mode=1: mtc rounds the pooled size "
                           "down"},
      {"bad_maxpool_dilation", "node 'pool': error: MaxPool: dilations [2, 2]: mtc max-pools "
                               "without dilation"},
      {"bad_maxpool_pads", "node 'pool': error: MaxPool: maxpool2d: pads [2, 2, 2, 2] must each be "
                           "less than the kernel [2, 2]"},
      {"bad_batchnorm_running", "the running mean output of BatchNormalization in training mode"},
      {"bad_scatter_pattern", "node 'scatter': error: ScatterND: mtc runs ScatterND when it "
                              "writes one contiguous range of one axis"},
      {"bad_compare_types", "node 'less': error: Less: compares 'h' (f32) with 'ids' (i32); mtc "
                            "compares two floats or two integers"},
      {"bad_pad_mode", "node 'pad': error: Pad: mode 'reflect': mtc pads with a constant only"},
      {"bad_mod_runtime", "node 'mod': error: Mod: input 'h' is only known at run time; mtc "
                          "evaluates Mod at compile time"},
      {"bad_selection_softmax", "node 'softmax': error: Softmax: reads 'sel', the elements the "
                                "run-time mask 'm' selects (x[mask], from NonZero and GatherND)"},
      {"bad_int_div_runtime", "node 'div': error: Div: input 0 'ids' is an integer tensor; mtc "
                              "computes Div on integers at run time only as Add, Sub and Mul"},
  };
  FeDefine n8 = {"N", 8};
  FeOnnxOptions o = {.defines = &n8, .ndefines = 1};
  char path[1024];
  for (size_t i = 0; i < sizeof corpus / sizeof corpus[0]; i++) {
    snprintf(path, sizeof path, "%s/%s.onnx", dir, corpus[i].file);
    expect_error(corpus[i].file, path, &o, corpus[i].want);
  }
  // values at the ends of int64 that a valid model may hold: they load and compile
  static const char *const edges[] = {"edge_int64_min_unused", "edge_range_int64_min",
                                      "edge_slice_step_max", "edge_trilu_k_max", "edge_trilu_k_min"};
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
    snprintf(path, sizeof path, "%s/%s.onnx", dir, edges[i]);
    IrDiag d = {0};
    IrGraph *g = fe_onnx_load(path, &o, &d);
    PassCtx ctx = {.opt = pass_default_options(), .diag = &d};
    check(g && !pass_run_all(g, &ctx), "%s: loads and runs the passes: %s", edges[i], d.msg);
    pass_memplan_free(ctx.mem);
    ir_graph_free(g);
  }
  snprintf(path, sizeof path, "%s/mlp_ce_o14_eval.onnx", dir);
  FeOnnxOptions none = {0};
  expect_error("missing -D", path, &none, "the symbol 'N', which has no value: pass -D N=VALUE");
  FeDefine bad = {"Q", 3};
  FeOnnxOptions extra = {.defines = (FeDefine[]){{"N", 8}, bad}, .ndefines = 2};
  expect_error("unknown -D", path, &extra, "-D Q: the model has no dim Q (its dims: N)");
  snprintf(path, sizeof path, "%s/mlp_logits_o17_eval.onnx", dir);
  expect_error("no loss", path, &o, "no scalar float output to train on (outputs: 'logits')");
  FeOnnxOptions wrong = {.defines = &n8, .ndefines = 1, .loss = "mse", .labels = "nope"};
  expect_error("--labels", path, &wrong, "--labels names no graph output");
  snprintf(path, sizeof path, "%s/no_such_file.onnx", dir);
  expect_error("missing file", path, &o, "cannot read");
  snprintf(path, sizeof path, "%s/empty.onnx", tmp);
  write_bytes(path, "", 0);
  expect_error("empty file", path, &o, "it is empty");
  snprintf(path, sizeof path, "%s/text.onnx", tmp);
  const char *text = "graph \"not a protobuf\"\n\xff\xff\xff\xff\xff";
  write_bytes(path, text, strlen(text));
  expect_error("text file", path, &o, "is not a valid ONNX model");
}

// ---- 3. mutations ---------------------------------------------------------------------------------

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc((size_t)len + 1);
  *n = p ? fread(p, 1, (size_t)len, f) : 0;
  fclose(f);
  return p;
}

// One mutated file: loads (then the pipeline runs) or fails with a message.
static bool try_mutant(const char *path, const FeOnnxOptions *o) {
  IrDiag d = {0};
  IrGraph *g = fe_onnx_load(path, o, &d);
  if (!g)
    return d.msg[0] != '\0';
  PassCtx ctx = {.opt = pass_default_options(), .diag = &d};
  int rc = pass_run_all(g, &ctx);
  bool ok = rc == 0 || d.msg[0] != '\0';
  pass_memplan_free(ctx.mem);
  ir_graph_free(g);
  return ok;
}

static void fuzz(const char *dir, const char *tmp, const char *name, int count) {
  char path[1024], refpath[1024], mpath[1024];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
  snprintf(refpath, sizeof refpath, "%s/%s.ref", dir, name);
  snprintf(mpath, sizeof mpath, "%s/mutant.onnx", tmp);
  Ref r;
  size_t n;
  unsigned char *orig = slurp(path, &n), *buf = orig ? malloc(n) : NULL;
  if (!buf || !read_ref(refpath, &r)) {
    check(false, "fuzz %s: cannot read the fixture", name);
    free(orig);
    return;
  }
  FeOnnxOptions o = ref_options(&r);
  rt_rng rng;
  rt_rng_seed(&rng, 20240607);
  int bad = 0, loaded = 0;
  for (int i = 0; i < count; i++) {
    memcpy(buf, orig, n);
    size_t len = n;
    if (i % 3 == 0) { // truncation
      len = rt_rng_below(&rng, n);
    } else { // 1 to 8 random bytes, half of them among the first 2 KiB (the graph)
      int flips = 1 + (int)rt_rng_below(&rng, 8);
      for (int k = 0; k < flips; k++) {
        size_t at = rt_rng_below(&rng, k % 2 ? n : (n < 2048 ? n : 2048));
        buf[at] = (unsigned char)rt_rng_below(&rng, 256);
      }
    }
    write_bytes(mpath, buf, len);
    IrDiag d = {0};
    IrGraph *g = fe_onnx_load(mpath, &o, &d);
    loaded += g != NULL;
    ir_graph_free(g);
    if (!try_mutant(mpath, &o)) {
      bad++;
      printf("     mutant %d of %s gives no message\n", i, name);
    }
  }
  check(bad == 0, "fuzz %s: %d mutants (%d still load), every failure has a message", name, count,
        loaded);
  unlink(mpath);
  free(orig);
  free(buf);
  free_ref(&r);
}

// ---- main -----------------------------------------------------------------------------------------

static const char *const fixtures[] = {
    "gpt_o14_eval", "gpt_o17_eval", "gpt_o14_train", "gpt_o17_train", "gpt_o17_train_p0",
    "gpt_erf_o17_eval", "gpt_logits_o17_eval", "encoder_o14_eval", "encoder_o17_eval",
    "encoder_o17_train", "encoder_relu_prenorm_o17_eval", "mha_o14_eval", "mha_o17_train",
    "mlp_ce_o14_eval", "mlp_ce_o17_train", "mlp_nll_o17_eval", "mlp_softmax_nll_o14_eval",
    "mlp_logsoftmax_o17_eval", "mlp_mse_o17_eval", "mlp_mse_o14_train", "mlp_logits_o17_eval",
    "mlp_ext", "handmade_o17", "math_o17", "seq2seq_o17", "gpt_o13_eval", "cnn_o14_eval",
    "cnn_o17_train", "cnn1d_o17_eval", "cnn_grouped_o17_eval", "cnn_pool_o17_eval", "pool_o17", "gather_elements_o17", "cumsum_o17", "compare_o17", NULL};

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_onnx DIR (tests/onnx)\n");
    return 2;
  }
  const char *dir = argv[1];
  char tmp[] = "/tmp/mtc_test_onnx_XXXXXX";
  if (!mkdtemp(tmp)) {
    perror("mkdtemp");
    return 2;
  }
  for (int i = 0; fixtures[i]; i++)
    check_fixture(dir, fixtures[i]);
  check_errors(dir, tmp);
  int mutants = argc > 2 ? atoi(argv[2]) : 600;
  fuzz(dir, tmp, "mlp_ce_o14_eval", mutants);
  fuzz(dir, tmp, "mha_o17_train", mutants / 2);
  fuzz(dir, tmp, "gpt_o14_train", mutants / 4);
  char path[1100];
  snprintf(path, sizeof path, "%s/empty.onnx", tmp), unlink(path);
  snprintf(path, sizeof path, "%s/text.onnx", tmp), unlink(path);
  rmdir(tmp);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
