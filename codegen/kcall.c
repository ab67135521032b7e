// Lowering: which runtime kernel calls execute each IR node (lower_<op>,
// expanded from ops.def). Sizes stay formulas so the emitted C reads
// `rt_layernorm_fwd(out, x, w, b, B*T, C, 1e-05f)`.
#include "codegen.h"
#include "kernels.h"

#include <string.h>

static const char *const kernel_names[] = {
#define K(name, ...) #name,
#define KT K
#define KTU K
#include "kernels.def"
};

const char *cg_kernel_name(CgKernel k) { return kernel_names[k]; }

// Which element types each kernel is generic in (kernels.def's K, KT, KTU).
enum { FIXED, GENERIC_T, GENERIC_TU };
static const unsigned char generic[] = {
#define K(name, ...) FIXED,
#define KT(name, ...) GENERIC_T,
#define KTU(name, ...) GENERIC_TU,
#include "kernels.def"
};

// The variants of the typed kernels (RT_T_VARIANTS, RT_TU_VARIANTS in
// runtime/kernels.h): their element types and the suffix of their names.
static const struct {
  IrDType t;
  const char *suffix;
} t_variants[] = {
#define X(suffix, T, ...) {DT_##T, #suffix},
    RT_T_VARIANTS(X, _)
#undef X
};
static const struct {
  IrDType t, u;
  const char *suffix;
} tu_variants[] = {
#define X(suffix, T, U, ...) {DT_##T, DT_##U, #suffix},
    RT_TU_VARIANTS(X, _)
#undef X
};
#define NT_VARIANTS (int)(sizeof t_variants / sizeof t_variants[0])
#define NTU_VARIANTS (int)(sizeof tu_variants / sizeof tu_variants[0])

// The variant of a call of a typed kernel, from its element types; -1: none.
static int variant_of(CgKernel k, IrDType t, IrDType u) {
  for (int i = 0; generic[k] == GENERIC_T && i < NT_VARIANTS; i++)
    if (t_variants[i].t == t)
      return i;
  for (int i = 0; generic[k] == GENERIC_TU && i < NTU_VARIANTS; i++)
    if (tu_variants[i].t == t && tu_variants[i].u == u)
      return i;
  return generic[k] == FIXED ? 0 : -1;
}

const char *cg_call_suffix(const CgCall *c) {
  int v = variant_of(c->k, c->t, c->u);
  IR_ASSERT(v >= 0);
  return generic[c->k] == GENERIC_T ? t_variants[v].suffix
         : generic[c->k] == GENERIC_TU ? tu_variants[v].suffix : "";
}

// What each argument of each kernel must be (runtime/kernels.def), encoded as
// position * 8 + kind, so that a call can be checked against the table.
enum { WANT_T, WANT_U, WANT_F32, WANT_I32, WANT_BF16, WANT_INT, WANT_FLT, WANT_DIMS };
#define K_OUT(i, x) (i) * 8 + WANT_T
#define K_IN(i, x) (i) * 8 + WANT_T
#define K_OUTU(i, x) (i) * 8 + WANT_U
#define K_OUTF(i, x) (i) * 8 + WANT_F32
#define K_INF(i, x) (i) * 8 + WANT_F32
#define K_OUTI(i, x) (i) * 8 + WANT_I32
#define K_OUTH(i, x) (i) * 8 + WANT_BF16
#define K_INI(i, x) (i) * 8 + WANT_I32
#define K_LONG(i, x) (i) * 8 + WANT_INT
#define K_INT(i, x) (i) * 8 + WANT_INT
#define K_FLT(i, x) (i) * 8 + WANT_FLT
#define K_DIMS(i, x) (i) * 8 + WANT_DIMS
#define K(name, ...) static const unsigned char want_##name[] = {__VA_ARGS__};
#define KT K
#define KTU K
#include "kernels.def"
static const struct {
  const unsigned char *arg;
  int n;
} want[] = {
#define K(name, ...) {want_##name, (int)sizeof want_##name},
#define KT K
#define KTU K
#include "kernels.def"
};

// The device scratch of each kernel's GPU twin (KS in runtime/kernels.def).
static const struct {
  int64_t bytes;
  int a, b;  // argument positions; b -1: none; bytes 0: the kernel needs none
} scratch[CG_K_COUNT] = {
#define KS(name, bytes_, a_, b_) [CG_K_##name] = {.bytes = (bytes_), .a = (a_), .b = (b_)},
#define K(name, ...)
#define KT K
#define KTU K
#include "kernels.def"
};

// The float32 sum a bf16-output variant keeps before rounding once
// (runtime/kernels_cuda.cu's temp_f32), in bytes: reduce_sum's and
// embedding_bwd's whole output; matmul's when its products add into one
// output (sc = 0, several items), or all of them when its operands are
// float32. The argument positions are kernels.def's.
static int64_t bf16_sum_scratch(const IrGraph *g, const CgCall *c) {
  if (c->u != DT_BF16)
    return 0;
#define ARG(pos) ir_eval(g, c->args[pos].i)
  switch (c->k) {
  case CG_K_reduce_sum: return 4 * ARG(5);             // onumel
  case CG_K_embedding_bwd: return 4 * ARG(4) * ARG(5);     // v x c
  case CG_K_embedding_vp_bwd: return 4 * ARG(5) * ARG(6);  // this rank's v x c
  case CG_K_matmul: {
    int64_t batch = ARG(3), mn = ARG(4) * ARG(5), sc = ARG(11);
    if (c->t == DT_F32)
      return 4 * (sc == 0 || batch <= 1 ? 1 : batch) * mn;
    return sc == 0 && batch > 1 ? 4 * mn : 0;
  }
  case CG_K_matmul_bgrad: {   // (as matmul's product, then reduce_sum's sums)
    int64_t mn = ARG(4) * ARG(5), len = ARG(9) ? ARG(5) : ARG(4);
    return 4 * (c->t == DT_F32 && mn > len ? mn : len);
  }
  default: return 0;
  }
#undef ARG
}

int64_t cg_call_scratch(const IrGraph *g, const CgCall *c) {
  int64_t sum = bf16_sum_scratch(g, c);
  if (!scratch[c->k].bytes)
    return sum;
  int64_t n = scratch[c->k].bytes * ir_eval(g, c->args[scratch[c->k].a].i);
  n = scratch[c->k].b < 0 ? n : n * ir_eval(g, c->args[scratch[c->k].b].i);
  return n > sum ? n : sum;
}

// Does argument a fit the kind? A tensor of kind T or U must be a float
// type, the same for every argument of that kind (*t, *u: DT_COUNT until the
// first sets it).
static bool arg_fits(const CgArg *a, int kind, IrDType *t, IrDType *u) {
  switch (a->kind) {
  case CG_BUF: {
    IrDType dt = a->buf->dtype;
    if (kind == WANT_F32)
      return dt == DT_F32;
    if (kind == WANT_I32)
      return dt == DT_I32;
    if (kind == WANT_BF16)
      return dt == DT_BF16;
    IrDType *want = kind == WANT_T ? t : kind == WANT_U ? u : NULL;
    if (!want || dt == DT_I32)
      return false;
    if (*want == DT_COUNT)
      *want = dt;
    return *want == dt;
  }
  case CG_INT:
  case CG_ENUM: return kind == WANT_INT;
  case CG_FLOAT: return kind == WANT_FLT;
  case CG_INTS: return kind == WANT_DIMS;
  case CG_HPARAM: return kind == WANT_FLT || kind == WANT_INT;
  case CG_NONE: return kind == WANT_T || kind == WANT_U || kind == WANT_F32 || kind == WANT_I32;
  }
  return false;
}

// A call against its kernel's declaration: the count of arguments, each
// one's kind and element type at its position, and a variant of the kernel
// in those types. Sets c->t and c->u (DT_F32 where no tensor says).
static int check_call(CgCall *c, const IrNode *n, IrDiag *d) {
  const char *name = kernel_names[c->k];
  if (c->nargs != want[c->k].n)
    return ir_error(d, n->loc, "internal error: %s calls rt_%s with %d arguments, it takes %d",
                    ir_op_name(n->op), name, c->nargs, want[c->k].n);
  IrDType t = DT_COUNT, u = DT_COUNT;
  for (int i = 0; i < c->nargs; i++)
    if (want[c->k].arg[i] / 8 != i || !arg_fits(&c->args[i], want[c->k].arg[i] % 8, &t, &u))
      return ir_error(d, n->loc, "internal error: %s calls rt_%s with argument %d of another "
                      "kind or element type than runtime/kernels.def declares", ir_op_name(n->op),
                      name, i);
  c->t = t == DT_COUNT ? DT_F32 : t;
  c->u = u == DT_COUNT ? DT_F32 : u;
  if (variant_of(c->k, c->t, c->u) < 0)
    return ir_error(d, n->loc, "internal error: %s calls rt_%s in %s (and %s), which the runtime "
                    "has no variant of", ir_op_name(n->op), name, ir_dtype_name(c->t),
                    ir_dtype_name(c->u));
  return 0;
}

// ---- call builders -------------------------------------------------------------------

typedef struct Lower {
  IrGraph *g;
  const MemPlan *mem;   // NULL: before the memory plan (every reshape copies)
  CgCall *calls;
  int ncalls, max;
  bool alone;           // the node on its own: an assign its update fused gets its cast
} Lower;

static CgCall *call(Lower *L, CgKernel k) {
  IR_ASSERT(L->ncalls < L->max);
  CgCall *c = &L->calls[L->ncalls++];
  memset(c, 0, sizeof *c);
  c->k = k;
  return c;
}

static CgArg *arg(CgCall *c, CgArgKind kind) {
  IR_ASSERT(c->nargs < CG_MAXARGS);
  CgArg *a = &c->args[c->nargs++];
  a->kind = kind;
  return a;
}

static void buf(CgCall *c, const IrValue *v) { arg(c, CG_BUF)->buf = v; }
// An optional tensor: v's buffer, or NULL when v is NULL.
static void opt_buf(CgCall *c, const IrValue *v) {
  if (v)
    buf(c, v);
  else
    arg(c, CG_NONE);
}
static void num(CgCall *c, const Sym *s) { arg(c, CG_INT)->i = s; }
static void flt(CgCall *c, double f) { arg(c, CG_FLOAT)->f = f; }
static void numk(Lower *L, CgCall *c, int64_t k) { num(c, sym_const(&L->g->arena, k)); }

// An enum argument: its name in the program and its value in the interpreter.
#define OP_CODE(e) #e, e

const char *cg_rt_axis_name(IrMeshAxis a) {
  static const char *const names[] = {"RT_AXIS_NONE",   "RT_AXIS_DP",     "RT_AXIS_TP",
                                      "RT_AXIS_ROW",    "RT_AXIS_COL",    "RT_AXIS_SUB",
                                      "RT_AXIS_SUBDP",  "RT_AXIS_SUBROW", "RT_AXIS_ALL",
                                      "RT_AXIS_SUBREP"};
  _Static_assert(sizeof names / sizeof *names == IR_MESH_SUBREP + 1, "one name per axis");
  int rt = ir_rt_axis(a) + 1;
  IR_ASSERT(rt >= 0 && rt < (int)(sizeof names / sizeof *names));
  return names[rt];
}

static void enm(Lower *L, CgCall *c, const char *name, int64_t v) {
  CgArg *a = arg(c, CG_ENUM);
  a->name = name;
  a->i = sym_const(&L->g->arena, v);
}

static void ints(CgCall *c, int n, const Sym *const *v) {
  CgArg *a = arg(c, CG_INTS);
  a->n = n;
  for (int i = 0; i < n; i++)
    a->ints[i] = v[i];
}

static const Sym *numel(Lower *L, const IrValue *v) { return ir_numel(L->g, v); }

// Product of dims [from, to).
static const Sym *dims(Lower *L, const IrValue *v, int from, int to) {
  const Sym *p = sym_const(&L->g->arena, 1);
  for (int i = from; i < to; i++)
    p = sym_mul(&L->g->arena, p, v->shape[i]);
  return p;
}

static const Sym *last(const IrValue *v) { return v->shape[v->rank - 1]; }
static const Sym *rows(Lower *L, const IrValue *v) { return dims(L, v, 0, v->rank - 1); }

// Contiguous strides of v viewed with `rank` dims aligned to the right of an
// output of that rank; broadcast (size-1 or missing) dims get stride 0.
static void broadcast_strides(Lower *L, const IrValue *v, const IrValue *out, const Sym **st) {
  IrArena *a = &L->g->arena;
  const Sym *s = sym_const(a, 1);
  for (int i = out->rank - 1; i >= 0; i--) {
    int j = i - (out->rank - v->rank);
    int64_t one = 0;
    bool is1 = j < 0 || (sym_is_const(v->shape[j], &one) && one == 1);
    bool out1 = sym_is_const(out->shape[i], &one) && one == 1;
    st[i] = is1 && !out1 ? sym_const(a, 0) : s;
    if (j >= 0)
      s = sym_mul(a, s, v->shape[j]);
  }
}

// ---- lowering rules ---------------------------------------------------------------------

typedef void LowerFn(Lower *L, const IrNode *n);

// rt_matmul(c, a, b, batch, m, n, k, ta, tb, sa, sb, sc): ir_matmul_gemm's GEMMs.
static void lower_matmul(Lower *L, const IrNode *n) {
  IrGemm m = ir_matmul_gemm(L->g, n);
  CgCall *c = call(L, CG_K_matmul);
  buf(c, n->out[0]), buf(c, n->in[0]), buf(c, n->in[1]);
  num(c, m.batch), num(c, m.m), num(c, m.n), num(c, m.k);
  numk(L, c, ir_attr_i(n, "ta")), numk(L, c, ir_attr_i(n, "tb"));
  num(c, m.sa), num(c, m.sb), num(c, m.sc);
}

// rt_matmul_bias(y, pre, a, b, bias, batch, m, n, k, ta, tb, sa, sb, act): the matmul's GEMMs
// with the bias (and GELU) of passes/epilogue.c.
static void lower_matmul_bias(Lower *L, const IrNode *n) {
  IrGemm m = ir_matmul_gemm(L->g, n);
  CgCall *c = call(L, CG_K_matmul_bias);
  buf(c, n->out[0]), opt_buf(c, n->nout > 1 ? n->out[1] : NULL);
  buf(c, n->in[0]), buf(c, n->in[1]), buf(c, n->in[2]);
  num(c, m.batch), num(c, m.m), num(c, m.n), num(c, m.k);
  numk(L, c, ir_attr_i(n, "ta")), numk(L, c, ir_attr_i(n, "tb"));
  num(c, m.sa), num(c, m.sb), numk(L, c, ir_attr_i(n, "act"));
}

// rt_matmul_bgrad(c, db, a, b, m, n, k, ta, tb, of): one GEMM (ir_matmul_gemm's, of one item)
// and the bias gradient of passes/epilogue.c.
static void lower_matmul_bgrad(Lower *L, const IrNode *n) {
  IrGemm m = ir_matmul_gemm(L->g, n);
  IR_ASSERT(ir_eval(L->g, m.batch) == 1);
  CgCall *c = call(L, CG_K_matmul_bgrad);
  buf(c, n->out[0]), buf(c, n->out[1]), buf(c, n->in[0]), buf(c, n->in[1]);
  num(c, m.m), num(c, m.n), num(c, m.k);
  numk(L, c, ir_attr_i(n, "ta")), numk(L, c, ir_attr_i(n, "tb")), numk(L, c, ir_attr_i(n, "of"));
}

// ---- convolution: im2col (or col2im) and one batched GEMM over the images

// rt_im2col / rt_col2im's arguments after the two buffers: the planes of the
// images x [N,C,H,W], the filter's KH KW, the output's OH OW, then the window.
static void conv_dims(Lower *L, CgCall *c, const IrNode *n, const IrValue *x, const IrValue *w,
                      const IrValue *y) {
  IrConvWindow win;
  IR_ASSERT(ir_conv_window(n, &win) == 0);
  num(c, dims(L, x, 0, 2)), num(c, x->shape[2]), num(c, x->shape[3]);
  num(c, w->shape[2]), num(c, w->shape[3]), num(c, y->shape[2]), num(c, y->shape[3]);
  numk(L, c, win.stride[0]), numk(L, c, win.stride[1]);
  numk(L, c, win.pad_begin[0]), numk(L, c, win.pad_begin[1]);
  numk(L, c, win.dilation[0]), numk(L, c, win.dilation[1]);
}

// One operand of a convolution's GEMM: v, `off` elements in.
typedef struct ConvOperand {
  const IrValue *v;
  const Sym *off;
} ConvOperand;

// rt_matmul over the N images of a convolution: out_i = op(a_i) @ op(b_i), m x nn
// by k, strides sa sb sc (0: the operand is shared, or the products summed).
static void conv_gemm(Lower *L, ConvOperand out, ConvOperand a, ConvOperand b, const Sym *batch,
                      const Sym *const mnk[3], int ta, int tb, const Sym *const strides[3]) {
  CgCall *c = call(L, CG_K_matmul);
  const ConvOperand ops[3] = {out, a, b};
  for (int i = 0; i < 3; i++) {
    buf(c, ops[i].v);
    int64_t off;
    if (!sym_is_const(ops[i].off, &off) || off)
      c->args[c->nargs - 1].elem_off = ops[i].off;
  }
  num(c, batch), num(c, mnk[0]), num(c, mnk[1]), num(c, mnk[2]);
  numk(L, c, ta), numk(L, c, tb);
  num(c, strides[0]), num(c, strides[1]), num(c, strides[2]);
}

// A convolution's GEMMs, one per group g of G (each over the N images): the
// g-th blocks of OCG = OC/G rows of w and of each image's output, and of
// CKKG = C*KH*KW/G rows of its patches. `role` says which operand is which:
// forward y = w @ col, backward data dcol = w^T @ dy, backward filter
// dw = sum_i dy_i @ col_i^T.
typedef enum { CONV_FWD, CONV_DATA, CONV_FILTER } ConvRole;
static void conv_gemms(Lower *L, const IrNode *n, ConvRole role, const IrValue *w,
                       const IrValue *y, const IrValue *col, const Sym *images) {
  IrArena *ar = &L->g->arena;
  int64_t G = ir_attr_i(n, "group");
  const Sym *ckk = col->shape[1], *p = col->shape[2], *oc = w->shape[0];
  const Sym *ocg = sym_scale(ar, oc, 1, G), *ckkg = sym_scale(ar, ckk, 1, G);
  const Sym *zero = sym_const(ar, 0), *ys = sym_mul(ar, oc, p), *cs = sym_mul(ar, ckk, p);
  for (int64_t g = 0; g < G; g++) {
    ConvOperand wo = {w, sym_scale(ar, sym_mul(ar, ocg, ckkg), g, 1)};
    ConvOperand yo = {y, sym_scale(ar, sym_mul(ar, ocg, p), g, 1)};
    ConvOperand co = {col, sym_scale(ar, sym_mul(ar, ckkg, p), g, 1)};
    if (role == CONV_FWD) {
      const Sym *mnk[3] = {ocg, p, ckkg}, *st[3] = {zero, cs, ys};
      conv_gemm(L, yo, wo, co, images, mnk, 0, 0, st);
    } else if (role == CONV_DATA) {
      const Sym *mnk[3] = {ckkg, p, ocg}, *st[3] = {zero, ys, cs};
      conv_gemm(L, co, wo, yo, images, mnk, 1, 0, st);
    } else {
      const Sym *mnk[3] = {ocg, ckkg, p}, *st[3] = {ys, cs, zero};
      conv_gemm(L, wo, yo, co, images, mnk, 0, 1, st);
    }
  }
}

// y = conv2d(x, w): col = im2col(x) [N, CKK, P] (CKK = C*KH*KW, P = OH*OW),
// then y_i [OC, P] = w [OC, CKK] @ col_i (per group: conv_gemms).
static void lower_conv2d(Lower *L, const IrNode *n) {
  const IrValue *x = n->in[0], *w = n->in[1], *y = n->out[0], *col = n->out[1];
  CgCall *c = call(L, CG_K_im2col);
  buf(c, col), buf(c, x);
  conv_dims(L, c, n, x, w, y);
  conv_gemms(L, n, CONV_FWD, w, y, col, x->shape[0]);
}

// dx = conv2d_bwd_data(dy, w): dcol_i [CKK, P] = w^T @ dy_i [OC, P], then dx = col2im(dcol).
static void lower_conv2d_bwd_data(Lower *L, const IrNode *n) {
  const IrValue *dy = n->in[0], *w = n->in[1], *dx = n->out[0], *dcol = n->out[1];
  conv_gemms(L, n, CONV_DATA, w, dy, dcol, dx->shape[0]);
  CgCall *c = call(L, CG_K_col2im);
  buf(c, dx), buf(c, dcol);
  conv_dims(L, c, n, dx, w, dy);
}

// dw = conv2d_bwd_filter(dy, x): col = im2col(x), then dw [OC, CKK] = the sum
// over the images of dy_i [OC, P] @ col_i^T.
static void lower_conv2d_bwd_filter(Lower *L, const IrNode *n) {
  const IrValue *dy = n->in[0], *x = n->in[1], *dw = n->out[0], *col = n->out[1];
  CgCall *c = call(L, CG_K_im2col);
  buf(c, col), buf(c, x);
  conv_dims(L, c, n, x, dw, dy);
  conv_gemms(L, n, CONV_FILTER, dw, dy, col, x->shape[0]);
}

// rt_maxpool2d / rt_maxpool2d_bwd's arguments after the buffers: the planes of
// x [N,C,H,W], the kernel KH KW, the output's OH OW, then strides and pads.
static void pool_dims(Lower *L, CgCall *c, const IrNode *n, const IrValue *x, const IrValue *y) {
  IrConvWindow win;
  int64_t k[2];
  IR_ASSERT(ir_pool_window(n, &win, k) == 0);
  num(c, dims(L, x, 0, 2)), num(c, x->shape[2]), num(c, x->shape[3]);
  numk(L, c, k[0]), numk(L, c, k[1]), num(c, y->shape[2]), num(c, y->shape[3]);
  numk(L, c, win.stride[0]), numk(L, c, win.stride[1]);
  numk(L, c, win.pad_begin[0]), numk(L, c, win.pad_begin[1]);
}

static void lower_maxpool2d(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_maxpool2d);
  buf(c, n->out[0]), buf(c, n->in[0]);
  pool_dims(L, c, n, n->in[0], n->out[0]);
}

// dx = maxpool2d_bwd(dy, x)
static void lower_maxpool2d_bwd(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_maxpool2d_bwd);
  buf(c, n->out[0]), buf(c, n->in[0]), buf(c, n->in[1]);
  pool_dims(L, c, n, n->in[1], n->in[0]);
}

// (op, out, a, b, rank, shape, astride, bstride): rt_binary's and rt_compare's arguments;
// same-shape operands run as one flat loop.
static void broadcast_call(Lower *L, CgKernel k, const IrNode *n, const char *opname, int op) {
  const IrValue *a = n->in[0], *b = n->in[1], *o = n->out[0];
  CgCall *c = call(L, k);
  enm(L, c, opname, op);
  buf(c, o), buf(c, a), buf(c, b);
  if (ir_same_shape(a, o) && ir_same_shape(b, o)) {
    const Sym *one = sym_const(&L->g->arena, 1), *total = numel(L, o);
    numk(L, c, 1), ints(c, 1, &total), ints(c, 1, &one), ints(c, 1, &one);
    return;
  }
  const Sym *as[IR_MAXRANK], *bs[IR_MAXRANK];
  broadcast_strides(L, a, o, as);
  broadcast_strides(L, b, o, bs);
  numk(L, c, o->rank), ints(c, o->rank, o->shape), ints(c, o->rank, as), ints(c, o->rank, bs);
}
static void binary(Lower *L, const IrNode *n, const char *opname, int op) {
  broadcast_call(L, n->out[0]->dtype == DT_I32 ? CG_K_binary_i32 : CG_K_binary, n, opname, op);
}
static void lower_add(Lower *L, const IrNode *n) { binary(L, n, OP_CODE(RT_ADD)); }
static void lower_sub(Lower *L, const IrNode *n) { binary(L, n, OP_CODE(RT_SUB)); }
static void lower_mul(Lower *L, const IrNode *n) { binary(L, n, OP_CODE(RT_MUL)); }
static void lower_div(Lower *L, const IrNode *n) { binary(L, n, OP_CODE(RT_DIV)); }
static void lower_min(Lower *L, const IrNode *n) { binary(L, n, OP_CODE(RT_MIN)); }
static void lower_max(Lower *L, const IrNode *n) { binary(L, n, OP_CODE(RT_MAX)); }

// rt_scale(out, x, n, s, b); on integers rt_scale_i32, s and b ints
static void lower_scale(Lower *L, const IrNode *n) {
  bool ints_x = n->in[0]->dtype == DT_I32;
  CgCall *c = call(L, ints_x ? CG_K_scale_i32 : CG_K_scale);
  buf(c, n->out[0]), buf(c, n->in[0]), num(c, numel(L, n->in[0]));
  if (ints_x)
    numk(L, c, (int64_t)ir_attr_f(n, "s")), numk(L, c, (int64_t)ir_attr_f(n, "b"));
  else
    flt(c, ir_attr_f(n, "s")), flt(c, ir_attr_f(n, "b"));
}

// out, in..., numel
static void elementwise(Lower *L, const IrNode *n, CgKernel k) {
  CgCall *c = call(L, k);
  buf(c, n->out[0]);
  for (int i = 0; i < n->nin; i++)
    buf(c, n->in[i]);
  num(c, numel(L, n->out[0]));
}
static void lower_gelu(Lower *L, const IrNode *n) { elementwise(L, n, CG_K_gelu_fwd); }
static void lower_gelu_bwd(Lower *L, const IrNode *n) { elementwise(L, n, CG_K_gelu_bwd); }
static void lower_relu(Lower *L, const IrNode *n) { elementwise(L, n, CG_K_relu_fwd); }
static void lower_relu_bwd(Lower *L, const IrNode *n) { elementwise(L, n, CG_K_relu_bwd); }

// A norm's call: over a dim split along a mesh axis (the attribute
// split_axis), the _split kernel, which takes the axis first.
static CgCall *norm_call(Lower *L, const IrNode *n, CgKernel whole, CgKernel split) {
  int64_t a = ir_attr_i(n, "split_axis");
  if (!a)
    return call(L, whole);
  CgCall *c = call(L, split);
  enm(L, c, cg_rt_axis_name(ir_mesh_axis_of_rt(a)), a);
  return c;
}

static void lower_layernorm(Lower *L, const IrNode *n) {
  CgCall *c = norm_call(L, n, CG_K_layernorm_fwd, CG_K_layernorm_fwd_split);
  const IrValue *x = n->in[0];
  buf(c, n->out[0]), buf(c, x), buf(c, n->in[1]), buf(c, n->in[2]);
  num(c, rows(L, x)), num(c, last(x)), flt(c, ir_attr_f(n, "eps"));
}

// rt_add_layernorm: a residual's add and the layernorm after it (passes/epilogue.c)
static void lower_add_layernorm(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_add_layernorm);
  const IrValue *x = n->in[0];
  buf(c, n->out[0]), buf(c, n->out[1]);
  buf(c, x), buf(c, n->in[1]), buf(c, n->in[2]), buf(c, n->in[3]);
  num(c, rows(L, x)), num(c, last(x)), flt(c, ir_attr_f(n, "eps"));
}

static void lower_layernorm_bwd(Lower *L, const IrNode *n) {
  CgCall *c = norm_call(L, n, CG_K_layernorm_bwd, CG_K_layernorm_bwd_split);
  const IrValue *x = n->in[1];
  buf(c, n->out[0]), buf(c, n->out[1]), buf(c, n->out[2]);
  buf(c, n->in[0]), buf(c, x), buf(c, n->in[2]);
  num(c, rows(L, x)), num(c, last(x)), flt(c, ir_attr_f(n, "eps"));
}

static void lower_rmsnorm(Lower *L, const IrNode *n) {
  CgCall *c = norm_call(L, n, CG_K_rmsnorm_fwd, CG_K_rmsnorm_fwd_split);
  const IrValue *x = n->in[0];
  buf(c, n->out[0]), buf(c, x), buf(c, n->in[1]);
  num(c, rows(L, x)), num(c, last(x)), flt(c, ir_attr_f(n, "eps"));
}

static void lower_rmsnorm_bwd(Lower *L, const IrNode *n) {
  CgCall *c = norm_call(L, n, CG_K_rmsnorm_bwd, CG_K_rmsnorm_bwd_split);
  const IrValue *x = n->in[1];
  buf(c, n->out[0]), buf(c, n->out[1]);
  buf(c, n->in[0]), buf(c, x), buf(c, n->in[2]);
  num(c, rows(L, x)), num(c, last(x)), flt(c, ir_attr_f(n, "eps"));
}

// Row-wise ops over the last dim: k(out, in..., rows, last).
static CgCall *rowwise(Lower *L, const IrNode *n, CgKernel k) {
  CgCall *c = call(L, k);
  buf(c, n->out[0]);
  for (int i = 0; i < n->nin; i++)
    buf(c, n->in[i]);
  num(c, rows(L, n->in[0])), num(c, last(n->in[0]));
  return c;
}
static void lower_softmax(Lower *L, const IrNode *n) {
  numk(L, rowwise(L, n, CG_K_softmax_fwd), ir_attr_i(n, "causal"));
}
static void lower_softmax_bwd(Lower *L, const IrNode *n) { rowwise(L, n, CG_K_softmax_bwd); }

// q [..., T, HS], k and v [..., TK, HS]; the leading dims are batch x heads.
// The key-padding mask [P.., TK] has a row for the first dims of q, its heads
// the dims after them; the bias [1.., M.., 1.., T, TK] one for each of M..
// (q's dims from..to): head h's is h / bdiv (the dims after M..) % bmod (M..).
static void attention_args(Lower *L, CgCall *c, const IrNode *n, const IrValue *q,
                           const IrValue *k) {
  IrValue *keep, *bias;
  int from = 0, to = 0, lead = q->rank - 2;
  ir_attention_extras(n, &keep, &bias);
  bool fits = bias && ir_attention_bias_fits(bias, q, k->shape[lead], &from, &to);
  IR_ASSERT(!bias || fits);  // the shape rule checked it
  opt_buf(c, keep), opt_buf(c, bias);
  num(c, dims(L, q, 0, lead)), num(c, q->shape[lead]), num(c, k->shape[lead]), num(c, last(q));
  num(c, dims(L, q, keep ? keep->rank - 1 : 0, lead));
  num(c, dims(L, q, to, lead)), num(c, dims(L, q, from, to));
  numk(L, c, ir_attr_i(n, "causal"));
}

// rt_rope(out, x, rows, t, hs, theta, inverse)
static void lower_rope(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_rope);
  const IrValue *x = n->in[0];
  buf(c, n->out[0]), buf(c, x);
  num(c, dims(L, x, 0, x->rank - 2)), num(c, x->shape[x->rank - 2]), num(c, last(x));
  flt(c, ir_attr_f(n, "theta")), numk(L, c, ir_attr_i(n, "inverse"));
}

static void lower_attention(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_attention_fwd);
  buf(c, n->out[0]), buf(c, n->out[1]), buf(c, n->in[0]), buf(c, n->in[1]), buf(c, n->in[2]);
  attention_args(L, c, n, n->in[0], n->in[1]);
}

static void lower_attention_bwd(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_attention_bwd);
  for (int i = 0; i < 3; i++)
    buf(c, n->out[i]);
  opt_buf(c, n->nout > 3 ? n->out[3] : NULL);
  for (int i = 0; i < 6; i++)   // dout, q, k, v, out, lse
    buf(c, n->in[i]);
  attention_args(L, c, n, n->in[1], n->in[2]);
}

// The mesh axis (the node's "axis": the runtime's number) a kernel runs along.
static void axis(Lower *L, CgCall *c, const IrNode *n) {
  int64_t a = ir_attr_i(n, "axis");
  enm(L, c, cg_rt_axis_name(ir_mesh_axis_of_rt(a)), a);
}

// A table split over a mesh axis (shards > 1: its `axis`) holds this rank's rows only.
static void lower_embedding(Lower *L, const IrNode *n) {
  bool vp = ir_attr_i(n, "shards") > 1;
  CgCall *c = call(L, vp ? CG_K_embedding_vp_fwd : CG_K_embedding_fwd);
  if (vp)
    axis(L, c, n);
  buf(c, n->out[0]), buf(c, n->in[0]), buf(c, n->in[1]);
  num(c, numel(L, n->in[1])), num(c, n->in[0]->shape[1]);
  if (vp)
    num(c, n->in[0]->shape[0]);
}

// The gradient of a table split over a mesh axis (shards > 1): this rank's rows only.
static void lower_embedding_bwd(Lower *L, const IrNode *n) {
  bool vp = ir_attr_i(n, "shards") > 1;
  CgCall *c = call(L, vp ? CG_K_embedding_vp_bwd : CG_K_embedding_bwd);
  const IrValue *dw = n->out[0];
  if (vp)
    axis(L, c, n);
  buf(c, dw), buf(c, n->in[0]), buf(c, n->in[1]);
  num(c, numel(L, n->in[1])), num(c, dw->shape[0]), num(c, dw->shape[1]);
}

// The whole vocabulary: columns of the whole logits past it are padding.
static void vocab(Lower *L, CgCall *c, const IrNode *n, const IrValue *lg) {
  int64_t v = ir_attr_i(n, "vocab");
  num(c, v ? sym_const(&L->g->arena, v) : ir_whole_dim(lg, lg->rank - 1));
}

static void lower_cross_entropy(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_crossentropy_fwd);
  const IrValue *lg = n->in[0];
  buf(c, n->out[0]), buf(c, lg), buf(c, n->in[1]), num(c, rows(L, lg)), num(c, last(lg));
  vocab(L, c, n, lg), numk(L, c, ir_attr_i(n, "ignore_index"));
}

static void lower_cross_entropy_bwd(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_crossentropy_bwd);
  const IrValue *lg = n->in[1];
  buf(c, n->out[0]), buf(c, n->in[0]), buf(c, lg), buf(c, n->in[2]);
  num(c, rows(L, lg)), num(c, last(lg)), vocab(L, c, n, lg);
  numk(L, c, ir_attr_i(n, "ignore_index"));
}

// rt_crossentropy_fused: the loss, and the gradient (over the logits: passes/memplan.c) for the
// node's dloss.
static void lower_cross_entropy_fused(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_crossentropy_fused);
  const IrValue *lg = n->in[0];
  buf(c, n->out[0]), buf(c, n->out[1]), buf(c, lg), buf(c, n->in[1]);
  num(c, rows(L, lg)), num(c, last(lg)), vocab(L, c, n, lg);
  numk(L, c, ir_attr_i(n, "ignore_index")), flt(c, ir_attr_f(n, "dloss"));
}

// A reshape the memory plan made a view (output at its input's offset, see
// pass_view_of) moves nothing: no call. Otherwise a copy.
static void lower_reshape(Lower *L, const IrNode *n) {
  const MemPlan *m = L->mem;
  if (m && m->offset[n->out[0]->id] >= 0 && m->offset[n->out[0]->id] == m->offset[n->in[0]->id])
    return;
  CgCall *c = call(L, n->in[0]->dtype == DT_I32 ? CG_K_copy_i32 : CG_K_copy);
  buf(c, n->out[0]), buf(c, n->in[0]), num(c, numel(L, n->in[0]));
}

// out[i0..] = x[perm]: read x with its strides permuted.
static void lower_transpose(Lower *L, const IrNode *n) {
  const IrValue *x = n->in[0], *o = n->out[0];
  int np;
  const int64_t *perm = ir_attr_ints(n, "perm", &np);
  const Sym *xs[IR_MAXRANK], *st[IR_MAXRANK];
  const Sym *s = sym_const(&L->g->arena, 1);
  for (int i = x->rank - 1; i >= 0; i--) {
    xs[i] = s;
    s = sym_mul(&L->g->arena, s, x->shape[i]);
  }
  for (int i = 0; i < o->rank; i++)
    st[i] = xs[perm[i]];
  CgCall *c = call(L, CG_K_strided_copy);
  buf(c, o), buf(c, x), numk(L, c, o->rank), ints(c, o->rank, o->shape), ints(c, o->rank, st);
}

// split/concat: each part is a slice along `axis` of rows (outer) x inner.
static void parts(Lower *L, const IrNode *n, const IrValue *whole, IrValue *const *part, int np,
                  CgKernel k) {
  IrArena *ar = &L->g->arena;
  int64_t a = ir_attr_i(n, "axis");
  int axis = (int)(a < 0 ? a + whole->rank : a);
  const Sym *outer = dims(L, whole, 0, axis), *inner = dims(L, whole, axis + 1, whole->rank);
  const Sym *wide = sym_mul(ar, whole->shape[axis], inner), *off = sym_const(ar, 0);
  for (int i = 0; i < np; i++) {
    const Sym *len = sym_mul(ar, part[i]->shape[axis], inner);
    CgCall *c = call(L, k);
    if (k == CG_K_slice)
      buf(c, part[i]), buf(c, whole);
    else
      buf(c, whole), buf(c, part[i]);
    num(c, outer), num(c, wide), num(c, off), num(c, len);
    off = sym_add(ar, off, len);
  }
}
static void lower_split(Lower *L, const IrNode *n) {
  parts(L, n, n->in[0], n->out, n->nout, CG_K_slice);
}
static void lower_concat(Lower *L, const IrNode *n) {
  bool ints = n->out[0]->dtype == DT_I32;
  parts(L, n, n->out[0], n->in, n->nin, ints ? CG_K_unslice_i32 : CG_K_unslice);
}

static void lower_broadcast(Lower *L, const IrNode *n) {
  const IrValue *x = n->in[0], *o = n->out[0];
  const Sym *st[IR_MAXRANK];
  broadcast_strides(L, x, o, st);
  CgCall *c = call(L, o->dtype == DT_I32 ? CG_K_strided_copy_i32 : CG_K_strided_copy);
  buf(c, o), buf(c, x), numk(L, c, o->rank), ints(c, o->rank, o->shape), ints(c, o->rank, st);
}

// rt_reduce_sum(out, x, rank, xshape, ostride, onumel, scale): `small` is
// the output viewed with x's rank (reduced dims as 1).
static void reduce(Lower *L, const IrNode *n, const IrValue *small, double scale) {
  const IrValue *x = n->in[0];
  const Sym *st[IR_MAXRANK];
  broadcast_strides(L, small, x, st);
  CgCall *c = call(L, CG_K_reduce_sum);
  buf(c, n->out[0]), buf(c, x), numk(L, c, x->rank), ints(c, x->rank, x->shape),
      ints(c, x->rank, st), num(c, numel(L, n->out[0])), flt(c, scale);
}

static void lower_sum_to(Lower *L, const IrNode *n) { reduce(L, n, n->out[0], 1.0); }

static void sum_or_mean(Lower *L, const IrNode *n, bool mean) {
  IrArena *ar = &L->g->arena;
  const IrValue *x = n->in[0];
  int naxes;
  const int64_t *axes = ir_attr_ints(n, "axes", &naxes); // NULL: every dim
  IrValue small = {.rank = x->rank};
  const Sym *count = sym_const(ar, 1);
  for (int i = 0; i < x->rank; i++) {
    bool r = !axes;
    for (int k = 0; k < naxes; k++)
      r |= (axes[k] < 0 ? axes[k] + x->rank : axes[k]) == i;
    small.shape[i] = r ? sym_const(ar, 1) : x->shape[i];
    if (r) // a dim split over tp counts whole: the ranks' terms are summed later
      count = sym_mul(ar, count, ir_whole_dim(x, i));
  }
  reduce(L, n, &small, mean ? 1.0 / (double)ir_eval(L->g, count) : 1.0);
}
static void lower_sum(Lower *L, const IrNode *n) { sum_or_mean(L, n, false); }
static void lower_mean(Lower *L, const IrNode *n) { sum_or_mean(L, n, true); }

static void lower_fill(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_fill);
  buf(c, n->out[0]), num(c, numel(L, n->out[0])), flt(c, ir_attr_f(n, "value"));
}

// ---- lowering of the ops for ONNX models

// rt_unary(op, y, x, n, p): p is pow's exponent (1 for the other ops)
static void unary(Lower *L, const IrNode *n, const char *opname, int op, double p) {
  CgCall *c = call(L, CG_K_unary);
  enm(L, c, opname, op);
  buf(c, n->out[0]), buf(c, n->in[0]), num(c, numel(L, n->in[0]));
  flt(c, p);
}
static void lower_exp(Lower *L, const IrNode *n) { unary(L, n, OP_CODE(RT_EXP), 1.0); }
static void lower_log(Lower *L, const IrNode *n) { unary(L, n, OP_CODE(RT_LOG), 1.0); }
static void lower_sqrt(Lower *L, const IrNode *n) { unary(L, n, OP_CODE(RT_SQRT), 1.0); }
static void lower_tanh(Lower *L, const IrNode *n) { unary(L, n, OP_CODE(RT_TANH), 1.0); }
static void lower_erf(Lower *L, const IrNode *n) { unary(L, n, OP_CODE(RT_ERF), 1.0); }
static void lower_pow(Lower *L, const IrNode *n) { unary(L, n, OP_CODE(RT_POW), ir_attr_f(n, "p")); }
static void lower_sin(Lower *L, const IrNode *n) { unary(L, n, OP_CODE(RT_SIN), 1.0); }
static void lower_cos(Lower *L, const IrNode *n) { unary(L, n, OP_CODE(RT_COS), 1.0); }
static void lower_abs(Lower *L, const IrNode *n) { unary(L, n, OP_CODE(RT_ABS), 1.0); }
static void lower_sign(Lower *L, const IrNode *n) { unary(L, n, OP_CODE(RT_SIGN), 1.0); }
static void lower_sigmoid(Lower *L, const IrNode *n) { unary(L, n, OP_CODE(RT_SIGMOID), 1.0); }
// an integer mask to float (rt_cast_i32_f32), or one float type to another (rt_cast)
static void lower_cast(Lower *L, const IrNode *n) {
  CgCall *c = call(L, n->in[0]->dtype == DT_I32 ? CG_K_cast_i32_f32
                      : n->in[0]->host           ? CG_K_cast_host
                                                 : CG_K_cast);
  buf(c, n->out[0]), buf(c, n->in[0]), num(c, numel(L, n->in[0]));
}

static void lower_gelu_erf(Lower *L, const IrNode *n) { elementwise(L, n, CG_K_gelu_erf_fwd); }
static void lower_gelu_erf_bwd(Lower *L, const IrNode *n) {
  elementwise(L, n, CG_K_gelu_erf_bwd);
}
static void lower_silu(Lower *L, const IrNode *n) { elementwise(L, n, CG_K_silu_fwd); }
static void lower_silu_bwd(Lower *L, const IrNode *n) { elementwise(L, n, CG_K_silu_bwd); }

// rt_masked_fill(out, x, mask, rank, shape, mstride, value); on integers
// rt_masked_fill_i32, the value an int
static void lower_masked_fill(Lower *L, const IrNode *n) {
  const IrValue *o = n->out[0];
  const Sym *ms[IR_MAXRANK];
  bool ints_x = o->dtype == DT_I32;
  broadcast_strides(L, n->in[1], o, ms);
  CgCall *c = call(L, ints_x ? CG_K_masked_fill_i32 : CG_K_masked_fill);
  buf(c, o), buf(c, n->in[0]), buf(c, n->in[1]);
  numk(L, c, o->rank), ints(c, o->rank, o->shape), ints(c, o->rank, ms);
  if (ints_x)
    numk(L, c, (int64_t)ir_attr_f(n, "value"));
  else
    flt(c, ir_attr_f(n, "value"));
}

// rt_equal_i32(out, x, n, value), or rt_equal_f32 for a float x
static void lower_equal(Lower *L, const IrNode *n) {
  bool f = ir_is_float(n->in[0]->dtype);
  CgCall *c = call(L, f ? CG_K_equal_f32 : CG_K_equal_i32);
  buf(c, n->out[0]), buf(c, n->in[0]), num(c, numel(L, n->in[0]));
  if (f)
    flt(c, (double)ir_attr_i(n, "value"));
  else
    numk(L, c, ir_attr_i(n, "value"));
}

// rt_compare(op, out, a, b, rank, shape, astride, bstride), or rt_compare_i32
static void lower_compare(Lower *L, const IrNode *n) {
  static const char *const names[] = {
#define X(name) "RT_" #name,
      RT_COMPARE_OPS(X)
#undef X
  };
  int64_t cmp = ir_attr_i(n, "cmp");
  broadcast_call(L, n->in[0]->dtype == DT_I32 ? CG_K_compare_i32 : CG_K_compare, n, names[cmp],
                 RT_EQ + (int)cmp);
}

// rt_cumsum(out, x, outer, len, inner, exclusive, reverse) along the axis; rt_cumsum_i32
static void lower_cumsum(Lower *L, const IrNode *n) {
  const IrValue *x = n->in[0];
  int64_t a = ir_attr_i(n, "axis");
  int axis = (int)(a < 0 ? a + x->rank : a);
  CgCall *c = call(L, x->dtype == DT_I32 ? CG_K_cumsum_i32 : CG_K_cumsum);
  buf(c, n->out[0]), buf(c, x);
  num(c, dims(L, x, 0, axis)), num(c, x->shape[axis]), num(c, dims(L, x, axis + 1, x->rank));
  numk(L, c, ir_attr_i(n, "exclusive")), numk(L, c, ir_attr_i(n, "reverse"));
}

// rt_dropout(out, x, step, n, ratio, seed, key, chunk, batched, axis, batch_axis): the
// mask one rank would draw, at each element's place in the whole tensor: x split over an axis
// (tp; a grid's columns; a block's sub ranks) is [outer][chunk] of [outer][parts][chunk] (its
// split dim's pieces each a part of the outer), and its batch (dim 0) is the running
// micro-batch's rows of the step's global batch (rt_dist.row), cut again where its block
// splits it over subdp, or over the rows of a grid beside tp (and the grids, subrow; a grid
// program's rows cut the slices themselves).
static void lower_dropout(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_dropout);
  const IrValue *x = n->in[0];
  buf(c, n->out[0]), buf(c, n->in[0]), buf(c, n->in[1]), num(c, numel(L, x));
  flt(c, ir_attr_f(n, "ratio"));
  numk(L, c, ir_attr_i(n, "seed")), numk(L, c, ir_attr_i(n, "key"));
  // (a grid beside tp: the lowering bound tp's degree, IR_TP_DIM, a grid program leaves it)
  int tp_var = symtab_find(&L->g->syms, IR_TP_DIM);
  bool grid_in_tp = tp_var >= 0 && L->g->syms.bound[tp_var] && L->g->syms.value[tp_var] > 1;
  IrMeshAxis batch = IR_MESH_NONE, axis = IR_MESH_TP;
  if (x->rank > 0 && (x->layout[0].axis == IR_MESH_SUBDP || x->layout[0].axis == IR_MESH_SUBROW ||
                      (grid_in_tp && x->layout[0].axis == IR_MESH_ROW)))
    batch = x->layout[0].axis;
  int d = -1;
  static const IrMeshAxis split[] = {IR_MESH_TP, IR_MESH_COL, IR_MESH_SUB};
  for (int k = 0; k < 3 && d < 0; k++)
    if ((d = ir_split_dim(x, split[k])) >= 0)
      axis = split[k];
  if (d >= 0)
    num(c, sym_scale(&L->g->arena, dims(L, x, d, x->rank), 1,
                     ir_mesh_pieces(axis) ? x->pieces : 1));
  else
    numk(L, c, 0);
  numk(L, c, ir_batch_rows(L->g, x));  // (its batch may be split over tp too: batch_tp)
  numk(L, c, ir_rt_axis(axis));
  numk(L, c, batch == IR_MESH_NONE ? -1 : ir_rt_axis(batch));
}

static void lower_tick(Lower *L, const IrNode *n) { buf(call(L, CG_K_tick), n->in[0]); }

static void lower_log_softmax(Lower *L, const IrNode *n) { rowwise(L, n, CG_K_log_softmax_fwd); }
static void lower_log_softmax_bwd(Lower *L, const IrNode *n) {
  rowwise(L, n, CG_K_log_softmax_bwd);
}

// ... rows, classes, sum, ignore_index
static void nll_args(Lower *L, CgCall *c, const IrNode *n, const IrValue *logp) {
  num(c, rows(L, logp)), num(c, last(logp));
  numk(L, c, ir_attr_i(n, "sum")), numk(L, c, ir_attr_i(n, "ignore_index"));
}

static void lower_nll_loss(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_nll_loss_fwd);
  buf(c, n->out[0]), buf(c, n->in[0]), buf(c, n->in[1]);
  nll_args(L, c, n, n->in[0]);
}

static void lower_nll_loss_bwd(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_nll_loss_bwd);
  buf(c, n->out[0]), buf(c, n->in[0]), buf(c, n->in[2]);
  nll_args(L, c, n, n->in[1]);
}

// rt_slice_axis(out, x, outer, xdim, inner, start, step, len): `big` is the
// tensor sliced, `small` the slice.
static void slice_axis(Lower *L, const IrNode *n, CgKernel k, const IrValue *big,
                       const IrValue *small) {
  int64_t a = ir_attr_i(n, "axis");
  int axis = (int)(a < 0 ? a + big->rank : a);
  CgCall *c = call(L, k);
  buf(c, n->out[0]), buf(c, n->in[0]);
  num(c, dims(L, big, 0, axis)), num(c, big->shape[axis]), num(c, dims(L, big, axis + 1, big->rank));
  numk(L, c, ir_attr_i(n, "start")), numk(L, c, ir_attr_i(n, "step"));
  num(c, small->shape[axis]);
}
static void lower_slice(Lower *L, const IrNode *n) {
  CgKernel k = n->in[0]->dtype == DT_I32 ? CG_K_slice_axis_i32 : CG_K_slice_axis;
  slice_axis(L, n, k, n->in[0], n->out[0]);
}
static void lower_slice_bwd(Lower *L, const IrNode *n) {
  slice_axis(L, n, CG_K_slice_axis_bwd, n->out[0], n->in[0]);
}

// Optimizer hyper-parameters are read at run time (the node's attributes are
// the compiled-in defaults, see cg_default_hparams).
static void hparam(CgCall *c, const char *name) { arg(c, CG_HPARAM)->name = name; }

// This rank's part of a whole bucket of `whole` elements that node n shards (ir_part_ratio).
static const Sym *part_of_whole(Lower *L, const IrNode *n, const Sym *whole) {
  int64_t num, den;
  ir_part_ratio(n, &num, &den);
  return sym_scale(&L->g->arena, whole, num, den);
}

// The last argument is this rank's part of a bucket of `stride`-element parts: the part at
// this rank's place along the axis node n shards its bucket over (its shard_axis). Over uneven
// parts (passes/lower.c's sharded), the program's replicas' parts are `stride` elements each
// from parts_first on, the first of them after parts_before units of stride / parts_mine.
static void rank_part(Lower *L, CgCall *c, const IrNode *n, const Sym *stride) {
  CgArg *a = &c->args[c->nargs - 1];
  a->rank_stride = stride;
  a->rank_axis = (int)ir_attr_i(n, "shard_axis");
  int64_t mine = ir_attr_i(n, "parts_mine");
  if (mine) {
    a->rank_first = (int)ir_attr_i(n, "parts_first");
    a->rank_base = sym_scale(&L->g->arena, stride, ir_attr_i(n, "parts_before"), mine);
  }
}

// v, or this rank's part of it when v holds a whole bucket of `part`-sized
// parts (sharded updates and accumulation under ZeRO). A v smaller than a
// part is this rank's (bf16 offload: the device's range of its masters).
static void part_buf(Lower *L, CgCall *c, const IrNode *n, const IrValue *v, const Sym *part) {
  buf(c, v);
  if (ir_eval(L->g, numel(L, v)) > ir_eval(L->g, part))
    rank_part(L, c, n, part);
}

// bf16 mixed precision writes a parameter bucket's working copies right after its update
// (passes/lower.c: assign(copies, p)). When the assign is the update's next node and reads
// the elements the update writes (its moments' count, SGD's gradient's), the update writes the
// copies in its own pass over p (rt_adamw_copy, rt_sgd_copy) and the assign calls nothing.
// Returns that assign, or NULL.
static const IrNode *fused_copy(IrGraph *g, const IrNode *u) {
  if ((u->op != OP_ADAMW && u->op != OP_SGD) || u->in[0]->host || u->id + 1 >= g->nnodes)
    return NULL;
  const IrNode *a = g->nodes[u->id + 1];
  if (a->op != OP_ASSIGN || a->in[1] != u->in[0] || a->in[0]->dtype != DT_BF16 ||
      a->in[0]->host || a->phase != u->phase)
    return NULL;
  const IrValue *count = u->op == OP_ADAMW ? u->in[2] : u->in[1];
  return sym_eq(ir_numel(g, count), ir_numel(g, a->in[1])) ? a : NULL;
}

// The assign's destination as an argument: a whole bucket of `shards` parts, of which this
// rank's is written (ZeRO 1-2), from its start (bf16 offload writes the device's range).
static void assign_dst(Lower *L, CgCall *c, const IrNode *a) {
  part_buf(L, c, a, a->in[0], part_of_whole(L, a, numel(L, a->in[0])));
}

// dst <- src in dst's type: a parameter's working copy (rt_cast; in host memory, parameter
// offload's, rt_cast_host), unless its update wrote it
static void lower_assign(Lower *L, const IrNode *n) {
  if (!L->alone && n->id > 0 && fused_copy(L->g, L->g->nodes[n->id - 1]) == n)
    return;
  CgCall *c = call(L, n->in[0]->host ? CG_K_cast_host : CG_K_cast);
  assign_dst(L, c, n);
  buf(c, n->in[1]), num(c, numel(L, n->in[1]));
}

// The elements of this rank's part of p and g an adamw node has: its `part`
// attribute (offload: the moments cover only the first ones), else the
// moments' size.
static const Sym *adamw_part(Lower *L, const IrNode *n) {
  int64_t part = ir_attr_i(n, "part");
  return part ? sym_const(&L->g->arena, part) : numel(L, n->in[2]);
}

// The elements of an update's range that weight decay reaches (decay_n of
// adamw and sgd): all of its `count` without a decay_end, else decay_end less
// this rank's start (decay_stride elements per data-parallel rank).
static void decay_arg(Lower *L, CgCall *c, const IrNode *n, const Sym *count) {
  int64_t end = ir_attr_i(n, "decay_end"), stride = ir_attr_i(n, "decay_stride");
  if (end < 0) {
    num(c, count);
    return;
  }
  numk(L, c, end);
  if (stride)
    rank_part(L, c, n, sym_const(&L->g->arena, stride));
}

// (p, g, m, v); sharded: the moments are this rank's part (offload: its first
// elements), p and g may be whole buckets. On the host (offload) the host's
// AdamW, on its default threads.
static void lower_adamw(Lower *L, const IrNode *n) {
  bool host = n->in[0]->host;
  const IrNode *copy = fused_copy(L->g, n);
  CgCall *c = call(L, host ? CG_K_adamw_host : copy ? CG_K_adamw_copy : CG_K_adamw);
  const Sym *part = adamw_part(L, n);
  part_buf(L, c, n, n->in[0], part), part_buf(L, c, n, n->in[1], part);
  buf(c, n->in[2]), buf(c, n->in[3]);
  num(c, numel(L, n->in[2]));
  hparam(c, "lr"), hparam(c, "beta1"), hparam(c, "beta2"), hparam(c, "eps");
  hparam(c, "weight_decay"), hparam(c, "step"), hparam(c, "grad_scale");
  decay_arg(L, c, n, numel(L, n->in[2]));
  if (host)
    numk(L, c, 0);
  if (copy)
    assign_dst(L, c, copy);
}

// (p, g) over `count` elements of this rank's part of `part` elements; p and
// g may be whole buckets of such parts. n: the update node (its decay).
// With the assign of the bucket's working copies fused (fused_copy), the copy-writing SGD.
static void sgd_call(Lower *L, const IrNode *n, const Sym *part, const Sym *count) {
  const IrNode *copy = fused_copy(L->g, n);
  CgCall *c = call(L, n->in[0]->host ? CG_K_sgd_host : copy ? CG_K_sgd_copy : CG_K_sgd);
  part_buf(L, c, n, n->in[0], part), part_buf(L, c, n, n->in[1], part), num(c, count);
  hparam(c, "lr"), hparam(c, "weight_decay"), hparam(c, "grad_scale");
  decay_arg(L, c, n, count);
  if (copy)
    assign_dst(L, c, copy);
}

static void lower_sgd(Lower *L, const IrNode *n) {
  sgd_call(L, n, numel(L, n->in[1]), numel(L, n->in[1]));
}

void cg_lower_adamw_as_sgd(IrGraph *g, const IrNode *adamw, CgCall *out) {
  Lower L = {.g = g, .calls = out, .max = 1};
  sgd_call(&L, adamw, adamw_part(&L, adamw), numel(&L, adamw->in[2]));
  IrDiag d = {0};
  IR_ASSERT(check_call(out, adamw, &d) == 0);
}

// ---- distribution ----

static void lower_all_reduce(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_comm_all_reduce);
  axis(L, c, n), buf(c, n->in[0]), num(c, numel(L, n->in[0]));
  numk(L, c, ir_attr_i(n, "avg")), numk(L, c, ir_attr_i(n, "slot"));
  numk(L, c, ir_attr_i(n, "last_micro"));
}

static void lower_reduce_scatter(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_comm_reduce_scatter);
  axis(L, c, n), buf(c, n->in[0]), num(c, numel(L, n->in[0]));
  numk(L, c, ir_attr_i(n, "avg")), numk(L, c, ir_attr_i(n, "slot"));
  numk(L, c, ir_attr_i(n, "last_micro"));
}

static void lower_all_gather(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_comm_all_gather);
  axis(L, c, n), buf(c, n->in[0]), num(c, numel(L, n->in[0]));
  numk(L, c, ir_attr_i(n, "slot"));
}

static void lower_comm_wait(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_comm_wait);
  numk(L, c, ir_attr_i(n, "slot")), numk(L, c, ir_attr_i(n, "last_micro"));
}

// this rank's shard into its place in the whole bucket (an all-gather fills the rest); from
// host memory (parameter offload), a copy to the device; a shard in two ranges (part of it
// offloaded), a copy of each
static void lower_unshard(Lower *L, const IrNode *n) {
  const Sym *part = numel(L, n->in[0]), *at = NULL;
  if (n->nin == 2)
    part = sym_add(&L->g->arena, part, numel(L, n->in[1]));
  for (int i = 0; i < n->nin; i++) {
    const IrValue *x = n->in[i];
    CgCall *c = call(L, x->host ? CG_K_to_device : CG_K_copy);
    buf(c, n->out[0]);
    rank_part(L, c, n, part);
    c->args[c->nargs - 1].elem_off = at;
    buf(c, x), num(c, numel(L, x));
    if (x->host)
      numk(L, c, -1);   // done on return: the all-gather after it reads it
    at = numel(L, x);   // the tail starts where the first range ends
  }
}

// tp_gather / tp_slice: the tensor as [outer][pieces][chunk] on this rank,
// [outer][pieces][shards][chunk] whole.
static void tp_geometry(Lower *L, CgCall *c, const IrNode *n, const IrValue *part) {
  int dim = (int)ir_attr_i(n, "dim");
  int64_t pieces = ir_attr_i(n, "pieces");
  const Sym *inner = dims(L, part, dim + 1, part->rank);
  num(c, dims(L, part, 0, dim)), numk(L, c, pieces);
  num(c, sym_scale(&L->g->arena, sym_mul(&L->g->arena, part->shape[dim], inner), 1, pieces));
}

static void lower_tp_gather(Lower *L, const IrNode *n) {
  CgCall *c = call(L, n->in[0]->dtype == DT_I32 ? CG_K_tp_gather_i32 : CG_K_tp_gather);
  axis(L, c, n), buf(c, n->out[0]), buf(c, n->out[1]), buf(c, n->in[0]);
  tp_geometry(L, c, n, n->in[0]);
}

static void lower_tp_reduce_scatter(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_tp_reduce_scatter);
  axis(L, c, n), buf(c, n->out[0]), buf(c, n->out[1]), buf(c, n->in[0]);
  tp_geometry(L, c, n, n->out[0]);
}

static void lower_tp_slice(Lower *L, const IrNode *n) {
  CgCall *c = call(L, n->in[0]->dtype == DT_I32 ? CG_K_tp_slice_i32 : CG_K_tp_slice);
  axis(L, c, n), buf(c, n->out[0]), buf(c, n->in[0]);
  tp_geometry(L, c, n, n->out[0]);
}

// SUMMA: the three buffers, the two inputs, then m n k of the rank's GEMMs (the panel's k)
static void summa_call(Lower *L, const IrNode *n, CgKernel k, const Sym *m, const Sym *nn,
                       const Sym *kk) {
  CgCall *c = call(L, k);
  buf(c, n->out[0]), buf(c, n->out[1]), buf(c, n->out[2]), buf(c, n->in[0]), buf(c, n->in[1]);
  num(c, m), num(c, nn), num(c, kk);
}
static void lower_summa(Lower *L, const IrNode *n) {
  summa_call(L, n, CG_K_summa, rows(L, n->in[0]), last(n->in[1]), n->in[1]->shape[0]);
}
static void lower_summa_nt(Lower *L, const IrNode *n) {   // (dy, w)
  summa_call(L, n, CG_K_summa_nt, rows(L, n->in[0]), last(n->in[0]), n->in[1]->shape[0]);
}
static void lower_summa_tn(Lower *L, const IrNode *n) {   // (x, dy)
  summa_call(L, n, CG_K_summa_tn, rows(L, n->in[0]), last(n->in[1]), last(n->in[0]));
}

static void lower_vp_cross_entropy(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_vp_crossentropy_fwd);
  const IrValue *lg = n->in[0];
  axis(L, c, n), buf(c, n->out[0]), buf(c, n->out[1]), buf(c, lg), buf(c, n->in[1]);
  num(c, rows(L, lg)), num(c, last(lg)), vocab(L, c, n, lg);
  numk(L, c, ir_attr_i(n, "ignore_index"));
}

static void lower_vp_cross_entropy_bwd(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_vp_crossentropy_bwd);
  const IrValue *lg = n->in[1];
  axis(L, c, n), buf(c, n->out[0]), buf(c, n->in[0]), buf(c, lg), buf(c, n->in[2]), buf(c, n->in[3]);
  num(c, rows(L, lg)), num(c, last(lg)), vocab(L, c, n, lg);
  numk(L, c, ir_attr_i(n, "ignore_index"));
}

static void lower_accumulate(Lower *L, const IrNode *n) {
  CgCall *c = call(L, n->in[0]->host ? CG_K_accumulate_host : CG_K_accumulate);
  const Sym *part = numel(L, n->in[0]);
  buf(c, n->in[0]), part_buf(L, c, n, n->in[1], part), num(c, part);
  flt(c, ir_attr_f(n, "scale"));
}

// ---- offload ----

// x's elements offset .. offset+n of this rank's part (x holds `shards` parts).
static void range_buf(Lower *L, CgCall *c, const IrNode *n, const IrValue *x) {
  IrArena *ar = &L->g->arena;
  int64_t shards = ir_attr_i(n, "shards"), offset = ir_attr_i(n, "offset");
  buf(c, x);
  if (shards > 1)
    rank_part(L, c, n, part_of_whole(L, n, numel(L, x)));
  if (offset)
    c->args[c->nargs - 1].elem_off = sym_const(ar, offset);
}

static void lower_to_host(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_to_host);
  const Sym *count = numel(L, n->out[0]);
  buf(c, n->out[0]), range_buf(L, c, n, n->in[0]), num(c, count);
  numk(L, c, ir_attr_i(n, "slot"));
}

static void lower_to_device(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_to_device);
  const Sym *count = numel(L, n->in[1]);
  range_buf(L, c, n, n->in[0]), buf(c, n->in[1]), num(c, count);
  numk(L, c, ir_attr_i(n, "slot"));
}

static void lower_from_host(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_to_device);
  buf(c, n->out[0]), buf(c, n->in[0]), num(c, numel(L, n->in[0]));
  numk(L, c, ir_attr_i(n, "slot"));
}

static void lower_copy_wait(Lower *L, const IrNode *n) {
  CgCall *c = call(L, CG_K_copy_wait);
  numk(L, c, ir_attr_i(n, "slot")), numk(L, c, ir_attr_i(n, "host"));
}

// A hyper-parameter of the update node `opt` (NULL: none), or AdamW's
// default (ir/attrs.def) where it has none (SGD has no betas or eps).
static float hparam_value(const IrNode *opt, const char *name) {
  if (opt && ir_op_attr(opt->op, name))
    return (float)ir_attr_f(opt, name);
  return (float)ir_op_attr(OP_ADAMW, name)->dflt;
}

rt_hparams cg_default_hparams(const IrGraph *g) {
  const IrNode *opt = NULL;
  for (int i = 0; i < g->nnodes && !opt; i++)
    if (g->nodes[i]->op == OP_ADAMW || g->nodes[i]->op == OP_SGD)
      opt = g->nodes[i];
  return (rt_hparams){.optimizer = opt && opt->op == OP_SGD ? RT_OPT_SGD : RT_OPT_ADAMW,
                      .lr = hparam_value(opt, "lr"),
                      .beta1 = hparam_value(opt, "beta1"),
                      .beta2 = hparam_value(opt, "beta2"),
                      .eps = hparam_value(opt, "eps"),
                      .weight_decay = hparam_value(opt, "weight_decay"),
                      .step = 1,
                      .grad_scale = 1};
}

static LowerFn *const lower_fns[] = {
#define OP(E, name, nin, nout, kind) lower_##name,
#include "ops.def"
};

static int lower(IrGraph *g, const MemPlan *m, const IrNode *n, CgCall *calls, int max,
                 bool alone, IrDiag *d) {
  int need = n->nin > n->nout ? n->nin : n->nout;
  if (need > max)
    return ir_error(d, n->loc, "%s has too many parts (%d) to lower", ir_op_name(n->op), need);
  Lower L = {.g = g, .mem = m, .calls = calls, .max = max, .alone = alone};
  lower_fns[n->op](&L, n);
  for (int i = 0; i < L.ncalls; i++)
    if (check_call(&calls[i], n, d))
      return -1;
  return L.ncalls;
}

int cg_lower(IrGraph *g, const MemPlan *m, const IrNode *n, CgCall *calls, int max, IrDiag *d) {
  return lower(g, m, n, calls, max, false, d);
}

int cg_lower_alone(IrGraph *g, const MemPlan *m, const IrNode *n, CgCall *calls, int max,
                   IrDiag *d) {
  return lower(g, m, n, calls, max, true, d);
}
