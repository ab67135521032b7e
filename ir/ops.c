// Op semantics: shape rules (shape_<op>) and FLOP rules (flops_<op>), both
// over symbolic dims. Tables expand from ops.def.
#include "ir.h"

#include <string.h>

// ---- sizes ---------------------------------------------------------------------

static const struct {
  const char *text, *ctype;
  int bytes;
} dtypes[] = {
#define DT(name, text, bytes, ctype) {text, #ctype, bytes},
#include "dtypes.def"
};

int ir_dtype_size(IrDType dt) { return dt < DT_COUNT ? dtypes[dt].bytes : 0; }
const char *ir_dtype_name(IrDType dt) { return dt < DT_COUNT ? dtypes[dt].text : "?"; }
const char *ir_dtype_ctype(IrDType dt) { return dt < DT_COUNT ? dtypes[dt].ctype : "?"; }

IrDType ir_dtype_lookup(const char *name) {
  for (int i = 0; i < DT_COUNT; i++)
    if (!strcmp(name, dtypes[i].text))
      return (IrDType)i;
  return DT_COUNT;
}

// The product of rank dims
static const Sym *shape_numel(IrGraph *g, int rank, const Sym *const *shape) {
  const Sym *n = sym_const(&g->arena, 1);
  for (int i = 0; i < rank; i++)
    n = sym_mul(&g->arena, n, shape[i]);
  return n;
}

const Sym *ir_numel(IrGraph *g, const IrValue *v) { return shape_numel(g, v->rank, v->shape); }

IrValue ir_whole(const IrValue *v) {
  IrValue w = *v;
  for (int d = 0; d < v->rank; d++) {
    const IrDimLayout *l = &v->layout[d];
    if (l->axis != IR_MESH_NONE || l->valid)
      w.shape[d] = l->valid ? l->valid : l->whole;
    w.layout[d] = (IrDimLayout){IR_MESH_NONE, NULL, NULL};
  }
  return w;
}

int ir_split_dim(const IrValue *v, IrMeshAxis a) {
  for (int d = 0; d < v->rank; d++)
    if (v->layout[d].axis == a)
      return d;
  return -1;
}

const Sym *ir_whole_dim(const IrValue *v, int d) {
  return v->layout[d].axis != IR_MESH_NONE ? v->layout[d].whole : v->shape[d];
}

const Sym *ir_nbytes(IrGraph *g, const IrValue *v) {
  return sym_scale(&g->arena, ir_numel(g, v), ir_dtype_size(v->dtype), 1);
}

bool ir_same_shape(const IrValue *a, const IrValue *b) {
  return a->rank == b->rank && sym_list_eq(a->shape, b->shape, a->rank);
}

static const char *shape_text(IrGraph *g, int rank, const Sym *const *shape) {
  char buf[1024];
  size_t len = 0;
  buf[len++] = '[';
  for (int i = 0; i < rank && len < sizeof buf - 2; i++) {
    if (i)
      buf[len++] = ',';
    len += (size_t)sym_print(buf + len, sizeof buf - len, shape[i], &g->syms);
    if (len >= sizeof buf - 2)
      len = sizeof buf - 2;
  }
  buf[len++] = ']';
  buf[len] = '\0';
  return ir_strdup(&g->arena, buf);
}

const char *ir_shape_str(IrGraph *g, const IrValue *v) {
  if (v->rank < 0)
    return "[?]";
  return shape_text(g, v->rank, v->shape);
}

int64_t ir_eval(const IrGraph *g, const Sym *s) {
  int64_t x = 0;
  IR_ASSERT(sym_eval(s, &g->syms, &x) == 0);
  return x;
}

// ---- shape rule helpers -------------------------------------------------------------

// Equal as formulas, or (when the formulas differ, e.g. [A,C] vs [3,4]) equal
// under the bindings.
static bool same_size(const IrGraph *g, const Sym *a, const Sym *b) {
  int64_t x, y;
  if (sym_eq(a, b))
    return true;
  return sym_eval(a, &g->syms, &x) == 0 && sym_eval(b, &g->syms, &y) == 0 && x == y;
}

// Set output i of n to (dt, rank, shape), or check it against what is there.
bool ir_is_float(IrDType dt) { return dt == DT_F32 || dt == DT_BF16; }

IrDType ir_grad_dtype(const IrGraph *g) {
  for (int i = 0; i < g->nvalues; i++)
    if (g->values[i]->role == ROLE_PARAM && g->values[i]->grad)
      return g->values[i]->grad->dtype;
  return DT_F32;
}
// (tested in range before the cast, which is undefined outside it)
bool ir_is_i32(double v) { return v >= INT32_MIN && v <= INT32_MAX && v == (double)(int32_t)v; }

// Output i is (dt, rank, shape), or is checked against it. A float output
// that already has a float type keeps it: the shape rules are the same in
// every float type, and the precision pass (passes/precision.c) picks each
// value's (the kernels check that a variant exists for the mix).
static int set_out(IrGraph *g, IrNode *n, int i, IrDType dt, int rank, const Sym *const *shape,
                   IrDiag *d) {
  IrValue *o = n->out[i];
  if (o->rank < 0) {
    ir_value_set_shape(o, rank, shape);
    o->dtype = dt;
    return 0;
  }
  bool ok = o->rank == rank && (o->dtype == dt || (ir_is_float(o->dtype) && ir_is_float(dt)));
  for (int k = 0; ok && k < rank; k++)
    ok = sym_eq(o->shape[k], shape[k]);
  if (ok)
    return 0;
  return ir_error(d, n->loc, "%s: output '%s' is declared %s%s but the op gives %s%s",
                  ir_op_name(n->op), o->name, ir_dtype_name(o->dtype), ir_shape_str(g, o),
                  ir_dtype_name(dt), shape_text(g, rank, shape));
}

static int same_as(IrGraph *g, IrNode *n, int i, const IrValue *like, IrDiag *d) {
  return set_out(g, n, i, like->dtype, like->rank, like->shape, d);
}

static int need_rank(IrGraph *g, IrNode *n, int i, int min_rank, IrDiag *d) {
  if (n->in[i]->rank >= min_rank)
    return 0;
  return ir_error(d, n->loc, "%s: input %d '%s' has shape %s; it needs at least %d dims",
                  ir_op_name(n->op), i + 1, n->in[i]->name, ir_shape_str(g, n->in[i]), min_rank);
}

// Input i is of type dt (DT_F32: any float type, see set_out).
static int need_dtype(IrNode *n, int i, IrDType dt, IrDiag *d) {
  if (n->in[i]->dtype == dt || (dt == DT_F32 && ir_is_float(n->in[i]->dtype)))
    return 0;
  return ir_error(d, n->loc, "%s: input %d '%s' is %s; it must be %s", ir_op_name(n->op), i + 1,
                  n->in[i]->name, ir_dtype_name(n->in[i]->dtype), ir_dtype_name(dt));
}

static int need_same(IrGraph *g, IrNode *n, int i, int j, IrDiag *d) {
  if (ir_same_shape(n->in[i], n->in[j]))
    return 0;
  return ir_error(d, n->loc, "%s: inputs '%s' %s and '%s' %s must have the same shape",
                  ir_op_name(n->op), n->in[i]->name, ir_shape_str(g, n->in[i]), n->in[j]->name,
                  ir_shape_str(g, n->in[j]));
}

// The output must already be declared (ops whose shape is not a function of
// the inputs).
static int need_declared(IrNode *n, IrDiag *d) {
  if (n->out[0]->rank >= 0)
    return 0;
  return ir_error(d, n->loc, "%s: the output shape must be given", ir_op_name(n->op));
}

// numpy broadcasting of a and b into out; false when incompatible.
static bool broadcast_shape(const IrValue *a, const IrValue *b, int *rank, const Sym **out) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  for (int i = 0; i < r; i++) {
    int ia = i - (r - a->rank), ib = i - (r - b->rank);
    const Sym *da = ia >= 0 ? a->shape[ia] : NULL, *db = ib >= 0 ? b->shape[ib] : NULL;
    if (!da)
      out[i] = db;
    else if (!db || sym_eq(da, db) || sym_is_one(db))
      out[i] = da;
    else if (sym_is_one(da))
      out[i] = db;
    else
      return false;
  }
  *rank = r;
  return true;
}

// Can x be numpy-broadcast to `to`?
static bool broadcasts_to(const IrValue *x, const IrValue *to) {
  if (x->rank > to->rank)
    return false;
  for (int i = 0; i < x->rank; i++) {
    const Sym *dx = x->shape[i], *dt = to->shape[i + to->rank - x->rank];
    if (!sym_eq(dx, dt) && !sym_is_one(dx))
      return false;
  }
  return true;
}

static int axis_attr(IrNode *n, const char *name, int rank, int *axis, IrDiag *d) {
  int64_t a = ir_attr_i(n, name);
  if (a < 0)
    a += rank;
  if (a < 0 || a >= rank)
    return ir_error(d, n->loc, "%s: %s=%lld is out of range for rank %d", ir_op_name(n->op), name,
                    (long long)ir_attr_i(n, name), rank);
  *axis = (int)a;
  return 0;
}

// ---- shape rules ---------------------------------------------------------------

// matmul(a, b) ta tb sum_batch: op(a) [..., M, K] @ op(b) [..., K, N]. Batch
// dims come from whichever operand has them (equal when both do);
// sum_batch=1 sums over the batch into [M, N].
static int shape_matmul(IrGraph *g, IrNode *n, IrDiag *d) {
  IrValue *a = n->in[0], *b = n->in[1];
  if (need_rank(g, n, 0, 2, d) || need_rank(g, n, 1, 2, d) || need_dtype(n, 0, DT_F32, d) ||
      need_dtype(n, 1, DT_F32, d))
    return -1;
  bool ta = ir_attr_i(n, "ta"), tb = ir_attr_i(n, "tb");
  const Sym *m = a->shape[a->rank - (ta ? 1 : 2)], *ka = a->shape[a->rank - (ta ? 2 : 1)];
  const Sym *kb = b->shape[b->rank - (tb ? 1 : 2)], *nn = b->shape[b->rank - (tb ? 2 : 1)];
  if (!sym_eq(ka, kb))
    return ir_error(d, n->loc,
                    "matmul: inner dims differ: '%s' %s%s and '%s' %s%s (%s vs %s)", a->name,
                    ir_shape_str(g, a), ta ? " (transposed)" : "", b->name, ir_shape_str(g, b),
                    tb ? " (transposed)" : "", sym_str(&g->arena, ka, &g->syms),
                    sym_str(&g->arena, kb, &g->syms));
  const IrValue *batch = a->rank > 2 ? a : b;
  if (a->rank > 2 && b->rank > 2) {
    bool ok = a->rank == b->rank;
    for (int i = 0; ok && i < a->rank - 2; i++)
      ok = sym_eq(a->shape[i], b->shape[i]);
    if (!ok)
      return ir_error(d, n->loc, "matmul: batch dims differ: '%s' %s and '%s' %s", a->name,
                      ir_shape_str(g, a), b->name, ir_shape_str(g, b));
  }
  const Sym *shape[IR_MAXRANK];
  int r = 0;
  if (!ir_attr_i(n, "sum_batch"))
    for (; r < batch->rank - 2; r++)
      shape[r] = batch->shape[r];
  shape[r++] = m;
  shape[r++] = nn;
  return set_out(g, n, 0, DT_F32, r, shape, d);
}

// matmul_bias(a, b, bias) ta tb act: matmul's product (no sum_batch) plus bias [N] on every
// row, then act; with act, output 2 (pre) holds the sum act read.
static int shape_matmul_bias(IrGraph *g, IrNode *n, IrDiag *d) {
  int nout = ir_attr_i(n, "act") ? 2 : 1;
  if (n->nout != nout)
    return ir_error(d, n->loc, "matmul_bias: act=%d gives %d output%s, not %d",
                    (int)ir_attr_i(n, "act"), nout, nout > 1 ? "s" : "", n->nout);
  if (shape_matmul(g, n, d) || need_dtype(n, 2, DT_F32, d))
    return -1;
  const IrValue *y = n->out[0], *bias = n->in[2];
  if (bias->rank != 1 || !sym_eq(bias->shape[0], y->shape[y->rank - 1]))
    return ir_error(d, n->loc, "matmul_bias: bias '%s' %s must be [N], the product's last dim %s",
                    bias->name, ir_shape_str(g, bias), ir_shape_str(g, y));
  return nout == 2 ? same_as(g, n, 1, y, d) : 0;
}

// matmul_bgrad(a, b) ta tb sum_batch of: matmul's product, and db [N] the sums of operand `of`
// over every dim but its last, which is not contracted (of 1: b, not transposed; of 0: a,
// transposed): [N] is b's columns or a's.
static int shape_matmul_bgrad(IrGraph *g, IrNode *n, IrDiag *d) {
  if (shape_matmul(g, n, d))
    return -1;
  int of = (int)ir_attr_i(n, "of");
  const IrValue *x = n->in[of];
  if (ir_attr_i(n, of ? "tb" : "ta") != !of)
    return ir_error(d, n->loc, "matmul_bgrad: of=%d sums %s, whose last dim must not be the "
                    "contracted one (%s=%d)", of, of ? "b" : "a", of ? "tb" : "ta", !of);
  return set_out(g, n, 1, n->out[0]->dtype, 1, &x->shape[x->rank - 1], d);
}

// ---- conv2d: x [N,C,H,W], w [OC,C/G,KH,KW] -> y [N,OC,OH,OW], col [N,C*KH*KW,OH*OW]
//
// With group G (ONNX's and PyTorch's), output channels [g*OC/G, (g+1)*OC/G) see only
// input channels [g*C/G, (g+1)*C/G): in col, whose rows are (c, kh, kw), that is the
// g-th of G equal blocks of rows, and in w the g-th block of OC/G rows.

int ir_conv_window(const IrNode *n, IrConvWindow *w) {
  int ns, np, nd;
  const int64_t *st = ir_attr_ints(n, "strides", &ns), *pa = ir_attr_ints(n, "pads", &np);
  const int64_t *di = ir_attr_ints(n, "dilations", &nd);
  if ((st && ns != 2) || (pa && np != 4) || (di && nd != 2))
    return -1;
  for (int i = 0; i < 2; i++) {
    w->stride[i] = st ? st[i] : 1;
    w->dilation[i] = di ? di[i] : 1;
    w->pad_begin[i] = pa ? pa[i] : 0;
    w->pad_end[i] = pa ? pa[2 + i] : 0;
  }
  w->group = ir_attr_i(n, "group");
  return 0;
}

int ir_pool_window(const IrNode *n, IrConvWindow *w, int64_t kernel[2]) {
  int nk, ns, np;
  const int64_t *k = ir_attr_ints(n, "kernel", &nk), *st = ir_attr_ints(n, "strides", &ns);
  const int64_t *pa = ir_attr_ints(n, "pads", &np);
  if (!k || nk != 2 || (st && ns != 2) || (pa && np != 4))
    return -1;
  for (int i = 0; i < 2; i++) {
    kernel[i] = k[i];
    w->stride[i] = st ? st[i] : 1;
    w->dilation[i] = 1;
    w->pad_begin[i] = pa ? pa[i] : 0;
    w->pad_end[i] = pa ? pa[2 + i] : 0;
  }
  w->group = 1;
  return 0;
}

static int conv_window(IrNode *n, IrConvWindow *w, IrDiag *d) {
  if (ir_conv_window(n, w) == 0)
    return 0;
  return ir_error(d, n->loc, "%s: strides and dilations take 2 values (height, width) and pads 4 "
                  "(top, left, bottom, right)", ir_op_name(n->op));
}

// One spatial dim of the output: (size + pads - dilation*(k-1) - 1) / stride + 1.
// A number when size is one; a formula (size + constant) when the stride is 1.
static int conv_out_dim(IrGraph *g, IrNode *n, const IrConvWindow *w, int i, const Sym *size,
                        const Sym *k, const Sym **out, IrDiag *d) {
  const char *what = i ? "width" : "height";
  int64_t kk, sz;
  if (!sym_is_const(k, &kk))
    return ir_error(d, n->loc, "%s: the filter's %s %s must be a number", ir_op_name(n->op), what,
                    sym_str(&g->arena, k, &g->syms));
  int64_t span = w->dilation[i] * (kk - 1) + 1, pads = w->pad_begin[i] + w->pad_end[i];
  if (sym_is_const(size, &sz)) {
    if (sz + pads < span)
      return ir_error(d, n->loc, "%s: the image's %s %lld (padded: %lld) is less than the "
                      "filter's span %lld", ir_op_name(n->op), what, (long long)sz,
                      (long long)(sz + pads), (long long)span);
    *out = sym_const(&g->arena, (sz + pads - span) / w->stride[i] + 1);
    return 0;
  }
  if (w->stride[i] == 1) {
    *out = sym_add(&g->arena, size, sym_const(&g->arena, pads - span + 1));
    return 0;
  }
  return ir_error(d, n->loc, "%s: the image's %s %s must be a number when the stride is %lld",
                  ir_op_name(n->op), what, sym_str(&g->arena, size, &g->syms),
                  (long long)w->stride[i]);
}

// y: the shape of x [N,C,H,W] convolved with w [OC,C/G,KH,KW], [N,OC,OH,OW];
// col: that of x's patches, [N,C*KH*KW,OH*OW].
static int conv_shapes(IrGraph *g, IrNode *n, const IrValue *x, const IrValue *w,
                       const Sym **y, const Sym **col, IrDiag *d) {
  IrConvWindow win;
  if (conv_window(n, &win, d))
    return -1;
  if (x->rank != 4 || w->rank != 4 || !ir_is_float(x->dtype) || !ir_is_float(w->dtype))
    return ir_error(d, n->loc, "%s: the image '%s' %s%s and the filter '%s' %s%s must be f32 of "
                    "4 dims ([N,C,H,W] and [OC,C,KH,KW])", ir_op_name(n->op), x->name,
                    ir_dtype_name(x->dtype), ir_shape_str(g, x), w->name,
                    ir_dtype_name(w->dtype), ir_shape_str(g, w));
  IrArena *a = &g->arena;
  int64_t oc;
  if (!same_size(g, x->shape[1], sym_scale(a, w->shape[1], win.group, 1)))
    return ir_error(d, n->loc, "%s: the image '%s' %s has %s channels, the filter '%s' %s takes "
                    "%s per group, %lld group%s", ir_op_name(n->op), x->name, ir_shape_str(g, x),
                    sym_str(a, x->shape[1], &g->syms), w->name, ir_shape_str(g, w),
                    sym_str(a, w->shape[1], &g->syms), (long long)win.group,
                    win.group > 1 ? "s" : "");
  if (win.group > 1 && (!sym_is_const(w->shape[0], &oc) || oc % win.group))
    return ir_error(d, n->loc, "%s: the filter '%s' %s has %s output channels, which must be a "
                    "number that divides by its %lld groups", ir_op_name(n->op), w->name,
                    ir_shape_str(g, w), sym_str(a, w->shape[0], &g->syms), (long long)win.group);
  y[0] = x->shape[0], y[1] = w->shape[0];
  if (conv_out_dim(g, n, &win, 0, x->shape[2], w->shape[2], &y[2], d) ||
      conv_out_dim(g, n, &win, 1, x->shape[3], w->shape[3], &y[3], d))
    return -1;
  col[0] = x->shape[0];
  col[1] = sym_mul(a, x->shape[1], sym_mul(a, w->shape[2], w->shape[3]));
  col[2] = sym_mul(a, y[2], y[3]);
  return 0;
}

static int shape_conv2d(IrGraph *g, IrNode *n, IrDiag *d) {
  const Sym *y[4], *col[3];
  if (conv_shapes(g, n, n->in[0], n->in[1], y, col, d))
    return -1;
  return set_out(g, n, 0, DT_F32, 4, y, d) || set_out(g, n, 1, DT_F32, 3, col, d);
}

// dy must be what the given dx (or dw) and the other operand convolve to.
static int conv_bwd(IrGraph *g, IrNode *n, const IrValue *x, const IrValue *w, IrDiag *d) {
  const Sym *y[4], *col[3];
  const IrValue *dy = n->in[0];
  if (need_declared(n, d) || conv_shapes(g, n, x, w, y, col, d))
    return -1;
  bool ok = dy->rank == 4 && ir_is_float(dy->dtype);
  for (int i = 0; ok && i < 4; i++)
    ok = same_size(g, dy->shape[i], y[i]);
  if (!ok)
    return ir_error(d, n->loc, "%s: the output's gradient '%s' is %s%s, but '%s' %s and '%s' %s "
                    "convolve to %s", ir_op_name(n->op), dy->name, ir_dtype_name(dy->dtype),
                    ir_shape_str(g, dy), x->name, ir_shape_str(g, x), w->name, ir_shape_str(g, w),
                    shape_text(g, 4, y));
  return set_out(g, n, 1, DT_F32, 3, col, d);
}

static int shape_conv2d_bwd_data(IrGraph *g, IrNode *n, IrDiag *d) {
  return conv_bwd(g, n, n->out[0], n->in[1], d);
}

static int shape_conv2d_bwd_filter(IrGraph *g, IrNode *n, IrDiag *d) {
  return conv_bwd(g, n, n->in[1], n->out[0], d);
}

// ---- maxpool2d: x [N,C,H,W] -> y [N,C,OH,OW], each output its window's max

// The pooled shape of x: the window's dims as a convolution's. A window of
// padding only would have no max: each pad must be less than the kernel.
static int pool_shape(IrGraph *g, IrNode *n, const IrValue *x, const Sym **y, IrDiag *d) {
  IrConvWindow win;
  int64_t k[2];
  if (ir_pool_window(n, &win, k))
    return ir_error(d, n->loc, "%s: kernel and strides take 2 values (height, width) and pads 4 "
                    "(top, left, bottom, right)", ir_op_name(n->op));
  if (x->rank != 4 || !ir_is_float(x->dtype))
    return ir_error(d, n->loc, "%s: the image '%s' %s%s must be float of 4 dims [N,C,H,W]",
                    ir_op_name(n->op), x->name, ir_dtype_name(x->dtype), ir_shape_str(g, x));
  for (int i = 0; i < 2; i++)
    if (win.pad_begin[i] >= k[i] || win.pad_end[i] >= k[i])
      return ir_error(d, n->loc, "%s: pads [%lld, %lld, %lld, %lld] must each be less than the "
                      "kernel [%lld, %lld] (a window of padding alone has no max)",
                      ir_op_name(n->op), (long long)win.pad_begin[0], (long long)win.pad_begin[1],
                      (long long)win.pad_end[0], (long long)win.pad_end[1], (long long)k[0],
                      (long long)k[1]);
  y[0] = x->shape[0], y[1] = x->shape[1];
  for (int i = 0; i < 2; i++)
    if (conv_out_dim(g, n, &win, i, x->shape[2 + i], sym_const(&g->arena, k[i]), &y[2 + i], d))
      return -1;
  return 0;
}

static int shape_maxpool2d(IrGraph *g, IrNode *n, IrDiag *d) {
  const Sym *y[4];
  if (pool_shape(g, n, n->in[0], y, d))
    return -1;
  return set_out(g, n, 0, n->in[0]->dtype, 4, y, d);
}

// (dy, x) -> dx like x; dy must be x pooled.
static int shape_maxpool2d_bwd(IrGraph *g, IrNode *n, IrDiag *d) {
  const Sym *y[4];
  const IrValue *dy = n->in[0], *x = n->in[1];
  if (pool_shape(g, n, x, y, d))
    return -1;
  bool ok = dy->rank == 4 && ir_is_float(dy->dtype);
  for (int i = 0; ok && i < 4; i++)
    ok = same_size(g, dy->shape[i], y[i]);
  if (!ok)
    return ir_error(d, n->loc, "%s: the output's gradient '%s' is %s%s, but '%s' %s pools to %s",
                    ir_op_name(n->op), dy->name, ir_dtype_name(dy->dtype), ir_shape_str(g, dy),
                    x->name, ir_shape_str(g, x), shape_text(g, 4, y));
  return same_as(g, n, 0, x, d);
}

// Binary elementwise ops: numpy broadcasting, on floats or, but for div, on two i32 operands
// (integers computed at run time: positions from a padding mask).
static int shape_binary(IrGraph *g, IrNode *n, IrDiag *d) {
  IrValue *a = n->in[0], *b = n->in[1];
  IrDType dt = a->dtype == DT_I32 && n->op != OP_DIV ? DT_I32 : DT_F32;
  if (need_dtype(n, 0, dt, d) || need_dtype(n, 1, dt, d))
    return -1;
  const Sym *shape[IR_MAXRANK];
  int r;
  if (!broadcast_shape(a, b, &r, shape))
    return ir_error(d, n->loc, "%s: shapes %s of '%s' and %s of '%s' do not broadcast",
                    ir_op_name(n->op), ir_shape_str(g, a), a->name, ir_shape_str(g, b), b->name);
  return set_out(g, n, 0, dt, r, shape, d);
}
static int shape_add(IrGraph *g, IrNode *n, IrDiag *d) { return shape_binary(g, n, d); }
static int shape_sub(IrGraph *g, IrNode *n, IrDiag *d) { return shape_binary(g, n, d); }
static int shape_mul(IrGraph *g, IrNode *n, IrDiag *d) { return shape_binary(g, n, d); }
static int shape_div(IrGraph *g, IrNode *n, IrDiag *d) { return shape_binary(g, n, d); }
static int shape_min(IrGraph *g, IrNode *n, IrDiag *d) { return shape_binary(g, n, d); }
static int shape_max(IrGraph *g, IrNode *n, IrDiag *d) { return shape_binary(g, n, d); }

// Unary elementwise ops: the output is like the input.
static int shape_unary(IrGraph *g, IrNode *n, IrDiag *d) {
  if (need_dtype(n, 0, DT_F32, d))
    return -1;
  return same_as(g, n, 0, n->in[0], d);
}
// s * x + b: on an i32 x, s and b are i32 too.
static int shape_scale(IrGraph *g, IrNode *n, IrDiag *d) {
  double s = ir_attr_f(n, "s"), b = ir_attr_f(n, "b");
  if (n->in[0]->dtype != DT_I32)
    return shape_unary(g, n, d);
  if (!ir_is_i32(s) || !ir_is_i32(b))
    return ir_error(d, n->loc, "scale: s=%g and b=%g for the i32 tensor '%s' must be i32", s, b,
                    n->in[0]->name);
  return same_as(g, n, 0, n->in[0], d);
}
static int shape_gelu(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary(g, n, d); }
static int shape_relu(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary(g, n, d); }
// softmax over the last dim; causal: over square matrices [.., T, T]
static int shape_softmax(IrGraph *g, IrNode *n, IrDiag *d) {
  const IrValue *x = n->in[0];
  if (need_rank(g, n, 0, 1, d))
    return -1;
  if (n->op == OP_SOFTMAX && ir_attr_i(n, "causal") &&
      (x->rank < 2 || !sym_eq(x->shape[x->rank - 2], x->shape[x->rank - 1])))
    return ir_error(d, n->loc, "a causal softmax needs scores [.., T, T] (as many rows as "
                    "columns), not %s", ir_shape_str(g, x));
  return shape_unary(g, n, d);
}

// (dy, x) -> dx, all the same shape.
static int shape_unary_bwd(IrGraph *g, IrNode *n, IrDiag *d) {
  if (need_same(g, n, 0, 1, d))
    return -1;
  return same_as(g, n, 0, n->in[0], d);
}
static int shape_gelu_bwd(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary_bwd(g, n, d); }
static int shape_relu_bwd(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary_bwd(g, n, d); }
static int shape_softmax_bwd(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary_bwd(g, n, d); }

// The vector w must be [C] where C is the last dim of x.
static int need_last_dim_vector(IrGraph *g, IrNode *n, int x, int w, IrDiag *d) {
  const IrValue *xv = n->in[x], *wv = n->in[w];
  if (wv->rank == 1 && sym_eq(wv->shape[0], xv->shape[xv->rank - 1]))
    return 0;
  return ir_error(d, n->loc, "%s: '%s' has shape %s; it must be [%s], the last dim of '%s' %s",
                  ir_op_name(n->op), wv->name, ir_shape_str(g, wv),
                  sym_str(&g->arena, xv->shape[xv->rank - 1], &g->syms), xv->name,
                  ir_shape_str(g, xv));
}

static int shape_layernorm(IrGraph *g, IrNode *n, IrDiag *d) {
  if (need_rank(g, n, 0, 1, d) || need_last_dim_vector(g, n, 0, 1, d) ||
      need_last_dim_vector(g, n, 0, 2, d))
    return -1;
  return same_as(g, n, 0, n->in[0], d);
}

// (a, b, w, bias) -> r, y: a and b of one shape, r as they are, y = layernorm(r, w, bias)
static int shape_add_layernorm(IrGraph *g, IrNode *n, IrDiag *d) {
  if (need_rank(g, n, 0, 1, d) || need_same(g, n, 0, 1, d) || need_last_dim_vector(g, n, 0, 2, d) ||
      need_last_dim_vector(g, n, 0, 3, d))
    return -1;
  if (same_as(g, n, 0, n->in[0], d))
    return -1;
  return same_as(g, n, 1, n->in[0], d);
}

static int shape_layernorm_bwd(IrGraph *g, IrNode *n, IrDiag *d) {
  if (need_rank(g, n, 1, 1, d) || need_same(g, n, 0, 1, d) || need_last_dim_vector(g, n, 1, 2, d))
    return -1;
  if (same_as(g, n, 0, n->in[1], d) || same_as(g, n, 1, n->in[2], d) ||
      same_as(g, n, 2, n->in[2], d))
    return -1;
  return 0;
}

static int shape_rmsnorm(IrGraph *g, IrNode *n, IrDiag *d) {
  if (need_rank(g, n, 0, 1, d) || need_last_dim_vector(g, n, 0, 1, d))
    return -1;
  return same_as(g, n, 0, n->in[0], d);
}

static int shape_rmsnorm_bwd(IrGraph *g, IrNode *n, IrDiag *d) {
  if (need_rank(g, n, 1, 1, d) || need_same(g, n, 0, 1, d) || need_last_dim_vector(g, n, 1, 2, d))
    return -1;
  return same_as(g, n, 0, n->in[1], d) || same_as(g, n, 1, n->in[2], d) ? -1 : 0;
}

// x [..., T, HS], HS even: its halves are the rotated pairs.
static int shape_rope(IrGraph *g, IrNode *n, IrDiag *d) {
  const IrValue *x = n->in[0];
  int64_t hs;
  if (need_dtype(n, 0, DT_F32, d) || need_rank(g, n, 0, 2, d))
    return -1;
  if (!sym_eval(x->shape[x->rank - 1], &g->syms, &hs) && hs % 2)
    return ir_error(d, n->loc, "rope: '%s' has shape %s; its last dim (the head size) must be "
                    "even, its two halves rotated in pairs", x->name, ir_shape_str(g, x));
  return same_as(g, n, 0, x, d);
}

bool ir_attention_bias_fits(const IrValue *b, const IrValue *q, const Sym *tk, int *from,
                            int *to) {
  int r = q->rank, lead = r - 2;
  if (!ir_is_float(b->dtype) || b->rank != r || r < 2 || !sym_eq(b->shape[r - 1], tk) ||
      !sym_eq(b->shape[r - 2], q->shape[r - 2]))
    return false;
  for (*from = 0; *from < lead && sym_is_one(b->shape[*from]); ++*from) {
  }
  for (*to = *from; *to < lead && sym_eq(b->shape[*to], q->shape[*to]); ++*to) {
  }
  for (int i = *to; i < lead; i++)
    if (!sym_is_one(b->shape[i]))
      return false;
  return true;
}

void ir_attention_extras(const IrNode *n, IrValue **keep, IrValue **bias) {
  int first = n->op == OP_ATTENTION ? 3 : 6;
  *keep = *bias = NULL;
  for (int i = first; i < n->nin; i++) {
    if (n->in[i]->dtype == DT_I32 && !*keep && !*bias)
      *keep = n->in[i];
    else if (ir_is_float(n->in[i]->dtype) && !*bias)
      *bias = n->in[i];
  }
}

// Attention's inputs: nfixed, then the optional ones (ir_attention_extras); checked before
// the rule reads any of them.
static int need_inputs(IrNode *n, int nfixed, IrDiag *d) {
  IrValue *m, *b;
  ir_attention_extras(n, &m, &b);
  if (n->nin == nfixed + (m != NULL) + (b != NULL))
    return 0;
  return ir_error(d, n->loc, "%s takes %d inputs, then a key-padding mask (i32) and a bias "
                  "(f32) when there, in that order; it has %d", ir_op_name(n->op), nfixed,
                  n->nin);
}

// Attention's operands: q [..., T, HS] (input qi), k and v [..., TK, HS] (TK
// = T but in cross-attention; causal needs them equal) after it, and the
// optional inputs (ir_attention_extras): the key-padding mask i32 [P.., TK],
// P.. the first dims of q (the batch; the heads after them share a row of the
// mask), and the bias (ir_attention_bias_fits).
static int need_extras(IrGraph *g, IrNode *n, int qi, IrDiag *d) {
  IrValue *m, *b;
  ir_attention_extras(n, &m, &b);
  const IrValue *q = n->in[qi], *k = n->in[qi + 1];
  int r = q->rank;
  bool ok = k->rank == r && sym_eq(k->shape[r - 1], q->shape[r - 1]);
  for (int i = 0; ok && i < r - 2; i++)
    ok = sym_eq(k->shape[i], q->shape[i]);
  if (!ok || (ir_attr_i(n, "causal") && !sym_eq(k->shape[r - 2], q->shape[r - 2])))
    return ir_error(d, n->loc, "%s: q %s and k %s must share their leading dims and head size "
                    "(and their length when causal)", ir_op_name(n->op), ir_shape_str(g, q),
                    ir_shape_str(g, k));
  const Sym *tk = k->shape[r - 2];
  ok = !m || (m->rank >= 1 && m->rank <= r - 1 && sym_eq(m->shape[m->rank - 1], tk));
  for (int i = 0; m && ok && i < m->rank - 1; i++)
    ok = sym_eq(m->shape[i], q->shape[i]);
  if (!ok)
    return ir_error(d, n->loc, "%s: the key-padding mask '%s' %s must be [.., TK]: q's first "
                    "dims and its keys, for q %s", ir_op_name(n->op), m->name, ir_shape_str(g, m),
                    ir_shape_str(g, q));
  int from, to;
  if (b && !ir_attention_bias_fits(b, q, tk, &from, &to))
    return ir_error(d, n->loc, "%s: the bias '%s' %s must be f32 [.., T, TK], its leading dims "
                    "1 but for one run of q's own, for q %s and k %s", ir_op_name(n->op), b->name,
                    ir_shape_str(g, b), ir_shape_str(g, q), ir_shape_str(g, k));
  return 0;
}

// The log-sum-exp of each query's scores: f32 [..., T] for q [..., T, HS].
static int lse_shape(const IrValue *q, const Sym **shape) {
  memcpy(shape, q->shape, (size_t)(q->rank - 1) * sizeof *shape);
  return q->rank - 1;
}

static int shape_attention(IrGraph *g, IrNode *n, IrDiag *d) {
  if (need_inputs(n, 3, d) || need_rank(g, n, 0, 2, d) || need_extras(g, n, 0, d) ||
      need_same(g, n, 1, 2, d))
    return -1;
  const Sym *shape[IR_MAXRANK];
  int rank = lse_shape(n->in[0], shape);
  return same_as(g, n, 0, n->in[0], d) || set_out(g, n, 1, DT_F32, rank, shape, d) ? -1 : 0;
}

// With a bias that takes a gradient, a fourth output: the gradient of the
// scores, q's leading dims x [T, TK].
static int shape_attention_bwd(IrGraph *g, IrNode *n, IrDiag *d) {
  IrValue *keep, *bias;
  if (need_inputs(n, 6, d) || need_rank(g, n, 1, 2, d) || need_extras(g, n, 1, d) ||
      need_same(g, n, 0, 1, d) || need_same(g, n, 2, 3, d) || need_same(g, n, 4, 1, d))
    return -1;
  const Sym *shape[IR_MAXRANK];
  const IrValue *lse = n->in[5];
  int rank = lse_shape(n->in[1], shape);
  bool ok = lse->rank == rank && ir_is_float(lse->dtype);
  for (int i = 0; ok && i < rank; i++)
    ok = sym_eq(lse->shape[i], shape[i]);
  if (!ok)
    return ir_error(d, n->loc, "attention_bwd: the log-sum-exp '%s' %s must be f32 [..., T] "
                    "for q %s", lse->name, ir_shape_str(g, lse), ir_shape_str(g, n->in[1]));
  ir_attention_extras(n, &keep, &bias);
  if (n->nout != 3 && !(bias && n->nout == 4))
    return ir_error(d, n->loc, "attention_bwd: %d outputs; it gives dq, dk, dv%s", n->nout,
                    bias ? ", and the bias's gradient when it takes one" : "");
  for (int i = 0; i < 3; i++)
    if (same_as(g, n, i, n->in[i + 1], d))
      return -1;
  if (n->nout == 4) { // q's leading dims x [T, TK]
    const IrValue *q = n->in[1];
    const Sym *shape[IR_MAXRANK];
    memcpy(shape, q->shape, (size_t)q->rank * sizeof *shape);
    shape[q->rank - 1] = n->in[2]->shape[q->rank - 2];
    return set_out(g, n, 3, DT_F32, q->rank, shape, d);
  }
  return 0;
}

// embedding(w [V, C], idx i32 [...]) -> [..., C]
static int shape_embedding(IrGraph *g, IrNode *n, IrDiag *d) {
  IrValue *w = n->in[0], *idx = n->in[1];
  if (need_dtype(n, 1, DT_I32, d))
    return -1;
  if (w->rank != 2)
    return ir_error(d, n->loc, "embedding: the table '%s' has shape %s; it must be [V, C]",
                    w->name, ir_shape_str(g, w));
  if (idx->rank + 1 > IR_MAXRANK)
    return ir_error(d, n->loc, "embedding: indices have too many dims");
  const Sym *shape[IR_MAXRANK];
  for (int i = 0; i < idx->rank; i++)
    shape[i] = idx->shape[i];
  shape[idx->rank] = w->shape[1];
  return set_out(g, n, 0, DT_F32, idx->rank + 1, shape, d);
}

// embedding_bwd(dout [..., C], idx [...]) -> dw [V, C], declared.
static int shape_embedding_bwd(IrGraph *g, IrNode *n, IrDiag *d) {
  IrValue *dy = n->in[0], *idx = n->in[1], *o = n->out[0];
  if (need_dtype(n, 1, DT_I32, d) || need_declared(n, d))
    return -1;
  bool ok = dy->rank == idx->rank + 1 && o->rank == 2 && sym_eq(o->shape[1], dy->shape[dy->rank - 1]);
  for (int i = 0; ok && i < idx->rank; i++)
    ok = sym_eq(dy->shape[i], idx->shape[i]);
  if (!ok)
    return ir_error(d, n->loc, "embedding_bwd: gradient %s, indices %s and table %s disagree",
                    ir_shape_str(g, dy), ir_shape_str(g, idx), ir_shape_str(g, o));
  return 0;
}

// Logits [..., V] and integer targets [...] agree?
static int need_targets(IrGraph *g, IrNode *n, int lg, int tg, IrDiag *d) {
  IrValue *logits = n->in[lg], *t = n->in[tg];
  if (need_rank(g, n, lg, 1, d) || need_dtype(n, tg, DT_I32, d))
    return -1;
  bool ok = t->rank == logits->rank - 1;
  for (int i = 0; ok && i < t->rank; i++)
    ok = sym_eq(t->shape[i], logits->shape[i]);
  if (ok)
    return 0;
  return ir_error(d, n->loc,
                  "%s: targets '%s' %s must have the shape of logits '%s' %s without its last dim",
                  ir_op_name(n->op), t->name, ir_shape_str(g, t), logits->name,
                  ir_shape_str(g, logits));
}

static int shape_cross_entropy(IrGraph *g, IrNode *n, IrDiag *d) {
  if (need_targets(g, n, 0, 1, d))
    return -1;
  return set_out(g, n, 0, DT_F32, 0, NULL, d);
}

static int shape_cross_entropy_bwd(IrGraph *g, IrNode *n, IrDiag *d) {
  if (n->in[0]->rank != 0)
    return ir_error(d, n->loc, "cross_entropy_bwd: the loss gradient must be a scalar");
  if (need_targets(g, n, 1, 2, d))
    return -1;
  return same_as(g, n, 0, n->in[1], d);
}

// (logits, targets) -> loss, dlogits: cross_entropy's and cross_entropy_bwd's outputs
static int shape_cross_entropy_fused(IrGraph *g, IrNode *n, IrDiag *d) {
  if (shape_cross_entropy(g, n, d))
    return -1;
  return same_as(g, n, 1, n->in[0], d);
}

static int shape_reshape(IrGraph *g, IrNode *n, IrDiag *d) {
  if (need_declared(n, d))
    return -1;
  IrValue *x = n->in[0], *o = n->out[0];
  o->dtype = x->dtype;
  if (same_size(g, ir_numel(g, x), ir_numel(g, o)))
    return 0;
  return ir_error(d, n->loc, "reshape: %s (%s elements) cannot become %s (%s elements)",
                  ir_shape_str(g, x), sym_str(&g->arena, ir_numel(g, x), &g->syms),
                  ir_shape_str(g, o), sym_str(&g->arena, ir_numel(g, o), &g->syms));
}

static int shape_transpose(IrGraph *g, IrNode *n, IrDiag *d) {
  IrValue *x = n->in[0];
  int np;
  const int64_t *perm = ir_attr_ints(n, "perm", &np);
  if (np != x->rank)
    return ir_error(d, n->loc, "transpose: perm must list each of the %d dims of %s once",
                    x->rank, ir_shape_str(g, x));
  const Sym *shape[IR_MAXRANK];
  bool seen[IR_MAXRANK] = {0};
  for (int i = 0; i < x->rank; i++) {
    int64_t p = perm[i];
    if (p < 0 || p >= x->rank || seen[p])
      return ir_error(d, n->loc, "transpose: perm must list each of the %d dims of %s once",
                      x->rank, ir_shape_str(g, x));
    seen[p] = true;
    shape[i] = x->shape[p];
  }
  return set_out(g, n, 0, x->dtype, x->rank, shape, d);
}

static int shape_split(IrGraph *g, IrNode *n, IrDiag *d) {
  IrValue *x = n->in[0];
  int axis;
  if (need_rank(g, n, 0, 1, d) || axis_attr(n, "axis", x->rank, &axis, d))
    return -1;
  int nsizes;
  const Sym *const *sizes = ir_attr_syms(n, "sizes", &nsizes);
  if (nsizes != n->nout)
    return ir_error(d, n->loc, "split: sizes must list one size per output (%d)", n->nout);
  const Sym *total = sym_const(&g->arena, 0);
  for (int i = 0; i < n->nout; i++) {
    const Sym *shape[IR_MAXRANK];
    memcpy(shape, x->shape, sizeof shape);
    shape[axis] = sizes[i];
    total = sym_add(&g->arena, total, shape[axis]);
    if (set_out(g, n, i, x->dtype, x->rank, shape, d))
      return -1;
  }
  if (!same_size(g, total, x->shape[axis]))
    return ir_error(d, n->loc, "split: sizes add up to %s but dim %d of %s is %s",
                    sym_str(&g->arena, total, &g->syms), axis, ir_shape_str(g, x),
                    sym_str(&g->arena, x->shape[axis], &g->syms));
  return 0;
}

static int shape_concat(IrGraph *g, IrNode *n, IrDiag *d) {
  IrValue *x = n->in[0];
  int axis;
  if (n->nin < 1 || need_rank(g, n, 0, 1, d) || axis_attr(n, "axis", x->rank, &axis, d))
    return -1;
  const Sym *shape[IR_MAXRANK];
  memcpy(shape, x->shape, sizeof shape);
  for (int i = 1; i < n->nin; i++) {
    IrValue *y = n->in[i];
    bool ok = y->rank == x->rank && y->dtype == x->dtype;
    for (int k = 0; ok && k < x->rank; k++)
      ok = k == axis || sym_eq(x->shape[k], y->shape[k]);
    if (!ok)
      return ir_error(d, n->loc, "concat: '%s' %s and '%s' %s differ outside axis %d", x->name,
                      ir_shape_str(g, x), y->name, ir_shape_str(g, y), axis);
    shape[axis] = sym_add(&g->arena, shape[axis], y->shape[axis]);
  }
  return set_out(g, n, 0, x->dtype, x->rank, shape, d);
}

static int shape_broadcast(IrGraph *g, IrNode *n, IrDiag *d) {
  if (need_declared(n, d))
    return -1;
  if (broadcasts_to(n->in[0], n->out[0]))
    return 0;
  return ir_error(d, n->loc, "broadcast: %s does not broadcast to %s", ir_shape_str(g, n->in[0]),
                  ir_shape_str(g, n->out[0]));
}

static int shape_sum_to(IrGraph *g, IrNode *n, IrDiag *d) {
  if (need_declared(n, d))
    return -1;
  if (broadcasts_to(n->out[0], n->in[0]))
    return 0;
  return ir_error(d, n->loc, "sum_to: %s does not broadcast to %s", ir_shape_str(g, n->out[0]),
                  ir_shape_str(g, n->in[0]));
}

// sum / mean over `axes` (default: all); keepdims keeps them as 1.
static int shape_reduce(IrGraph *g, IrNode *n, IrDiag *d) {
  IrValue *x = n->in[0];
  if (need_dtype(n, 0, DT_F32, d))
    return -1;
  bool reduce[IR_MAXRANK] = {0};
  int naxes;
  const int64_t *axes = ir_attr_ints(n, "axes", &naxes); // NULL: every dim
  for (int i = 0; i < x->rank; i++)
    reduce[i] = !axes;
  for (int i = 0; i < naxes; i++) {
    int64_t a = axes[i] < 0 ? axes[i] + x->rank : axes[i];
    if (a < 0 || a >= x->rank)
      return ir_error(d, n->loc, "%s: axis %lld is out of range for %s", ir_op_name(n->op),
                      (long long)axes[i], ir_shape_str(g, x));
    reduce[a] = true;
  }
  bool keep = ir_attr_i(n, "keepdims");
  const Sym *shape[IR_MAXRANK];
  int r = 0;
  for (int i = 0; i < x->rank; i++)
    if (!reduce[i])
      shape[r++] = x->shape[i];
    else if (keep)
      shape[r++] = sym_const(&g->arena, 1);
  return set_out(g, n, 0, DT_F32, r, shape, d);
}
static int shape_sum(IrGraph *g, IrNode *n, IrDiag *d) { return shape_reduce(g, n, d); }
static int shape_mean(IrGraph *g, IrNode *n, IrDiag *d) { return shape_reduce(g, n, d); }

static int shape_fill(IrGraph *g, IrNode *n, IrDiag *d) {
  (void)g;
  return need_declared(n, d);
}

// ---- shape rules of the ops for ONNX models

static int shape_exp(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary(g, n, d); }
static int shape_log(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary(g, n, d); }
static int shape_sqrt(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary(g, n, d); }
static int shape_tanh(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary(g, n, d); }
static int shape_erf(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary(g, n, d); }
static int shape_pow(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary(g, n, d); }
static int shape_sin(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary(g, n, d); }
static int shape_cos(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary(g, n, d); }
static int shape_abs(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary(g, n, d); }
static int shape_sign(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary(g, n, d); }
static int shape_sigmoid(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary(g, n, d); }
// cast(x): an i32 tensor as f32, same shape.
static int shape_cast(IrGraph *g, IrNode *n, IrDiag *d) {
  const char *to = ir_attr_s(n, "to");
  IrDType dt = to ? ir_dtype_lookup(to) : DT_F32;
  if (!ir_is_float(dt))
    return ir_error(d, n->loc, "cast: to=\"%s\" is not a float type (f32, bf16)", to);
  IrValue *o = n->out[0];
  if (o->rank >= 0 && o->dtype != dt)  // the output's declared type is the cast's
    return ir_error(d, n->loc, "cast: output '%s' is declared %s, the cast is to %s", o->name,
                    ir_dtype_name(o->dtype), ir_dtype_name(dt));
  o->dtype = dt;
  return set_out(g, n, 0, dt, n->in[0]->rank, n->in[0]->shape, d);
}

static int shape_gelu_erf(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary(g, n, d); }
static int shape_gelu_erf_bwd(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary_bwd(g, n, d); }
static int shape_silu(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary(g, n, d); }
static int shape_silu_bwd(IrGraph *g, IrNode *n, IrDiag *d) { return shape_unary_bwd(g, n, d); }
static int shape_log_softmax(IrGraph *g, IrNode *n, IrDiag *d) { return shape_softmax(g, n, d); }
static int shape_log_softmax_bwd(IrGraph *g, IrNode *n, IrDiag *d) {
  return shape_unary_bwd(g, n, d);
}

// masked_fill(x, mask): the i32 mask broadcasts to x; the output is like x. An i32 x (token
// ids) takes an integer value.
static int shape_masked_fill(IrGraph *g, IrNode *n, IrDiag *d) {
  if (need_dtype(n, 1, DT_I32, d))
    return -1;
  double v = ir_attr_f(n, "value");
  if (n->in[0]->dtype == DT_I32 && !ir_is_i32(v))
    return ir_error(d, n->loc, "masked_fill: the value %g for the i32 tensor '%s' is not an i32",
                    v, n->in[0]->name);
  if (!broadcasts_to(n->in[1], n->in[0]))
    return ir_error(d, n->loc, "masked_fill: the mask %s does not broadcast to %s",
                    ir_shape_str(g, n->in[1]), ir_shape_str(g, n->in[0]));
  return same_as(g, n, 0, n->in[0], d);
}

// compare(a, b) cmp: both float or both i32, numpy broadcasting; an i32 mask.
static int shape_compare(IrGraph *g, IrNode *n, IrDiag *d) {
  IrValue *a = n->in[0], *b = n->in[1];
  bool fa = ir_is_float(a->dtype), fb = ir_is_float(b->dtype);
  if (fa != fb || (!fa && (a->dtype != DT_I32 || b->dtype != DT_I32)))
    return ir_error(d, n->loc, "compare: '%s' is %s and '%s' %s; both must be float or both i32",
                    a->name, ir_dtype_name(a->dtype), b->name, ir_dtype_name(b->dtype));
  const Sym *shape[IR_MAXRANK];
  int r;
  if (!broadcast_shape(a, b, &r, shape))
    return ir_error(d, n->loc, "compare: shapes %s of '%s' and %s of '%s' do not broadcast",
                    ir_shape_str(g, a), a->name, ir_shape_str(g, b), b->name);
  return set_out(g, n, 0, DT_I32, r, shape, d);
}

// cumsum(x f32 or i32) axis: like x.
static int shape_cumsum(IrGraph *g, IrNode *n, IrDiag *d) {
  int axis;
  if ((!ir_is_float(n->in[0]->dtype) && need_dtype(n, 0, DT_I32, d)) ||
      need_rank(g, n, 0, 1, d) || axis_attr(n, "axis", n->in[0]->rank, &axis, d))
    return -1;
  return same_as(g, n, 0, n->in[0], d);
}

// equal(x i32 or f32) value: an i32 mask of x's shape.
static int shape_equal(IrGraph *g, IrNode *n, IrDiag *d) {
  if (!ir_is_float(n->in[0]->dtype) && need_dtype(n, 0, DT_I32, d))
    return -1;
  return set_out(g, n, 0, DT_I32, n->in[0]->rank, n->in[0]->shape, d);
}

// The step counter of dropout and tick: an i32 scalar.
static int need_step(IrGraph *g, IrNode *n, int i, IrDiag *d) {
  if (n->in[i]->dtype == DT_I32 && n->in[i]->rank == 0)
    return 0;
  return ir_error(d, n->loc, "%s: the step counter '%s' must be i32[], not %s%s", ir_op_name(n->op),
                  n->in[i]->name, ir_dtype_name(n->in[i]->dtype), ir_shape_str(g, n->in[i]));
}

static int shape_dropout(IrGraph *g, IrNode *n, IrDiag *d) {
  if (need_dtype(n, 0, DT_F32, d) || need_step(g, n, 1, d))
    return -1;
  double r = ir_attr_f(n, "ratio");
  if (!(r >= 0 && r < 1))
    return ir_error(d, n->loc, "dropout: ratio %g must be in [0, 1)", r);
  return same_as(g, n, 0, n->in[0], d);
}

static int shape_tick(IrGraph *g, IrNode *n, IrDiag *d) { return need_step(g, n, 0, d); }

static int shape_nll_loss(IrGraph *g, IrNode *n, IrDiag *d) { return shape_cross_entropy(g, n, d); }
static int shape_nll_loss_bwd(IrGraph *g, IrNode *n, IrDiag *d) {
  return shape_cross_entropy_bwd(g, n, d);
}

// slice(x) axis start step: `small` is x sliced along axis to the declared
// length; `big` is x. start + (len-1)*step must lie in [0, dim) when known.
static int check_slice(IrGraph *g, IrNode *n, const IrValue *big, const IrValue *small,
                       IrDiag *d) {
  int axis;
  if (need_declared(n, d) || need_rank(g, n, 0, 1, d) ||
      axis_attr(n, "axis", big->rank, &axis, d))
    return -1;
  bool ok = small->rank == big->rank;
  for (int i = 0; ok && i < big->rank; i++)
    ok = i == axis || sym_eq(big->shape[i], small->shape[i]);
  if (!ok)
    return ir_error(d, n->loc, "%s: %s and %s may differ only along axis %d", ir_op_name(n->op),
                    ir_shape_str(g, big), ir_shape_str(g, small), axis);
  n->out[0]->dtype = n->in[0]->dtype;
  int64_t start = ir_attr_i(n, "start"), step = ir_attr_i(n, "step"), dim, len;
  if (step < 1 || start < 0)
    return ir_error(d, n->loc, "%s: start %lld and step %lld must be >= 0 and >= 1",
                    ir_op_name(n->op), (long long)start, (long long)step);
  if (sym_eval(big->shape[axis], &g->syms, &dim) == 0 &&
      sym_eval(small->shape[axis], &g->syms, &len) == 0 && len > 0 &&
      start + (len - 1) * step >= dim)
    return ir_error(d, n->loc, "%s: %lld elements from %lld by %lld overrun dim %d of %s",
                    ir_op_name(n->op), (long long)len, (long long)start, (long long)step, axis,
                    ir_shape_str(g, big));
  return 0;
}
static int shape_slice(IrGraph *g, IrNode *n, IrDiag *d) {
  return check_slice(g, n, n->in[0], n->out[0], d);
}
static int shape_slice_bwd(IrGraph *g, IrNode *n, IrDiag *d) {
  return check_slice(g, n, n->out[0], n->in[0], d);
}

void ir_part_ratio(const IrNode *n, int64_t *num, int64_t *den) {
  int64_t mine = ir_attr_i(n, "parts_mine");
  *num = mine ? mine : 1;
  *den = mine ? ir_attr_i(n, "parts_total") : ir_attr_i(n, "shards");
}

// The elements of a whole bucket of which this rank's part has `part` (ir_part_ratio).
static const Sym *whole_of_part(IrGraph *g, const IrNode *n, const Sym *part) {
  int64_t num, den;
  ir_part_ratio(n, &num, &den);
  return sym_scale(&g->arena, part, den, num);
}

// Input i of a sharded update or accumulation holds `part` elements, or a
// whole bucket of shards x part (this rank's part of it is used).
static int need_part(IrGraph *g, IrNode *n, int i, const Sym *part, IrDiag *d) {
  int64_t shards = ir_attr_i(n, "shards");
  const Sym *have = ir_numel(g, n->in[i]);
  if (ir_is_float(n->in[i]->dtype) &&
      (sym_eq(have, part) || sym_eq(have, whole_of_part(g, n, part))))
    return 0;
  return ir_error(d, n->loc, "%s: input %d '%s' %s must hold %s elements or %lld times that",
                  ir_op_name(n->op), i + 1, n->in[i]->name, ir_shape_str(g, n->in[i]),
                  sym_str(&g->arena, part, &g->syms), (long long)shards);
}

// An update runs where its operands are: all on the device, or all on the
// host (offload).
static int need_one_place(IrGraph *g, IrNode *n, IrDiag *d) {
  for (int i = 1; i < n->nin; i++)
    if (n->in[i]->host != n->in[0]->host)
      return ir_error(d, n->loc, "%s: '%s' is in %s memory but '%s' in %s memory",
                      ir_op_name(n->op), n->in[0]->name, n->in[0]->host ? "host" : "device",
                      n->in[i]->name, n->in[i]->host ? "host" : "device");
  (void)g;
  return 0;
}

// (p, g, m, v): one tensor each, or (shards > 1, ZeRO; part > 0, offload)
// flat buckets: m and v this rank's part (offload: its first elements), p
// and g that part or the whole bucket.
static int shape_adamw(IrGraph *g, IrNode *n, IrDiag *d) {
  if (need_one_place(g, n, d))
    return -1;
  int64_t whole = ir_attr_i(n, "part");
  if (ir_attr_i(n, "shards") == 1 && !whole) {
    for (int i = 1; i < 4; i++)
      if (need_same(g, n, 0, i, d))
        return -1;
    return 0;
  }
  const Sym *part = whole ? sym_const(&g->arena, whole) : ir_numel(g, n->in[2]);
  int64_t moments;
  if (whole && (sym_eval(ir_numel(g, n->in[2]), &g->syms, &moments) || moments > whole))
    return ir_error(d, n->loc, "adamw: the moments '%s' %s must hold at most part=%lld elements",
                    n->in[2]->name, ir_shape_str(g, n->in[2]), (long long)whole);
  // bf16 offload: p may hold only the moments' elements (the host has the rest of the masters)
  bool p_cut = whole && ir_is_float(n->in[0]->dtype) &&
               sym_eq(ir_numel(g, n->in[0]), ir_numel(g, n->in[2]));
  return need_same(g, n, 2, 3, d) || (!p_cut && need_part(g, n, 0, part, d)) ||
         need_part(g, n, 1, part, d);
}

static int shape_sgd(IrGraph *g, IrNode *n, IrDiag *d) {
  if (ir_attr_i(n, "shards") == 1)
    return need_same(g, n, 0, 1, d);
  // sharded (ZeRO 2, 3): g is this rank's part, p that part or the whole bucket
  return need_part(g, n, 0, ir_numel(g, n->in[1]), d);
}

// ---- distribution ----

static int need_flat(IrGraph *g, IrNode *n, int i, IrDiag *d) {
  if (ir_is_float(n->in[i]->dtype) && n->in[i]->rank == 1)
    return 0;
  return ir_error(d, n->loc, "%s: '%s' must be a flat float bucket, not %s%s", ir_op_name(n->op),
                  n->in[i]->name, ir_dtype_name(n->in[i]->dtype), ir_shape_str(g, n->in[i]));
}

// dst <- src. Flat buckets: dst holds `shards` parts and src is written at the
// start of this rank's part (all of it, or, bf16 offload, the device's range
// of it); else one shape.
static int shape_assign(IrGraph *g, IrNode *n, IrDiag *d) {
  int64_t shards = ir_attr_i(n, "shards"), dst, src;
  bool flat = n->in[0]->rank == 1 && n->in[1]->rank == 1;
  if (flat && (shards > 1 || !sym_eq(ir_numel(g, n->in[0]), ir_numel(g, n->in[1])))) {
    if (need_flat(g, n, 0, d) || need_flat(g, n, 1, d))
      return -1;
    int64_t num, den;
    ir_part_ratio(n, &num, &den);
    if (!sym_eval(ir_numel(g, n->in[0]), &g->syms, &dst) &&
        !sym_eval(ir_numel(g, n->in[1]), &g->syms, &src) && (dst % den || src > dst / den * num))
      return ir_error(d, n->loc, "assign: '%s' %s does not fit in one of the %lld parts of '%s' %s",
                      n->in[1]->name, ir_shape_str(g, n->in[1]), (long long)shards,
                      n->in[0]->name, ir_shape_str(g, n->in[0]));
    return 0;
  }
  if (!ir_is_float(n->in[0]->dtype) || !ir_is_float(n->in[1]->dtype) ||
      !ir_same_shape(n->in[0], n->in[1]))
    return ir_error(d, n->loc, "assign: '%s' %s%s and '%s' %s%s must be floats of one shape",
                    n->in[0]->name, ir_dtype_name(n->in[0]->dtype), ir_shape_str(g, n->in[0]),
                    n->in[1]->name, ir_dtype_name(n->in[1]->dtype), ir_shape_str(g, n->in[1]));
  return 0;
}

// all_reduce and comm_wait also take a tensor of any shape (tensor parallelism reduces
// activations in place).
static int shape_all_reduce(IrGraph *g, IrNode *n, IrDiag *d) {
  (void)g;
  return need_dtype(n, 0, DT_F32, d);
}
static int shape_reduce_scatter(IrGraph *g, IrNode *n, IrDiag *d) { return need_flat(g, n, 0, d); }
static int shape_all_gather(IrGraph *g, IrNode *n, IrDiag *d) { return need_flat(g, n, 0, d); }
static int shape_comm_wait(IrGraph *g, IrNode *n, IrDiag *d) { return shape_all_reduce(g, n, d); }

// This rank's part, a shard (x) or a shard cut in two (x on the device, tail on the host:
// parameter offload of part of it), into its place in the whole bucket.
static int shape_unshard(IrGraph *g, IrNode *n, IrDiag *d) {
  if (n->nin < 1 || n->nin > 2)
    return ir_error(d, n->loc, "unshard takes a shard, or its two ranges, not %d inputs", n->nin);
  if (need_flat(g, n, 0, d) || (n->nin == 2 && need_flat(g, n, 1, d)))
    return -1;
  const Sym *part = n->in[0]->shape[0];
  if (n->nin == 2) {
    if (n->in[1]->dtype != n->in[0]->dtype)
      return ir_error(d, n->loc, "unshard: '%s' and '%s' hold different types", n->in[0]->name,
                      n->in[1]->name);
    part = sym_add(&g->arena, part, n->in[1]->shape[0]);
  }
  const Sym *whole = whole_of_part(g, n, part);
  return set_out(g, n, 0, n->in[0]->dtype, 1, &whole, d);
}

static int shape_accumulate(IrGraph *g, IrNode *n, IrDiag *d) {
  return need_dtype(n, 0, DT_F32, d) || need_part(g, n, 1, ir_numel(g, n->in[0]), d);
}

// ---- tensor parallelism ----

const Sym *ir_tp_degree(IrGraph *g, int64_t shards) {
  static const char *const names[] = {IR_TP_DIM, IR_Q_DIM};
  for (int k = 0; k < 2; k++) {
    int var = symtab_find(&g->syms, names[k]);
    if (var >= 0 && g->syms.bound[var] && g->syms.value[var] == shards)
      return sym_var(&g->arena, var);
  }
  return sym_const(&g->arena, shards);
}

// x's shape with its tp-split dim times (gather) or over (slice) the degree;
// -1 with d when the attributes do not fit x.
static int tp_shape(IrGraph *g, IrNode *n, bool gather, const Sym **shape, IrDiag *d) {
  const IrValue *x = n->in[0];
  int64_t dim = ir_attr_i(n, "dim"), shards = ir_attr_i(n, "shards"), pieces = ir_attr_i(n, "pieces");
  if (dim < 0 || dim >= x->rank || shards < 1 || pieces < 1)
    return ir_error(d, n->loc, "%s: dim %lld of '%s' %s, %lld shards, %lld pieces",
                    ir_op_name(n->op), (long long)dim, x->name, ir_shape_str(g, x),
                    (long long)shards, (long long)pieces);
  for (int i = 0; i < x->rank; i++)
    shape[i] = x->shape[i];
  const Sym *deg = ir_tp_degree(g, shards);
  shape[dim] = gather ? sym_mul(&g->arena, x->shape[dim], deg)
                      : sym_div(&g->arena, x->shape[dim], deg);
  return 0;
}

static int shape_tp_gather(IrGraph *g, IrNode *n, IrDiag *d) {
  const Sym *shape[IR_MAXRANK];
  if ((n->in[0]->dtype != DT_I32 && need_dtype(n, 0, DT_F32, d)) ||
      tp_shape(g, n, true, shape, d))
    return -1;
  const Sym *scratch =
      sym_mul(&g->arena, ir_numel(g, n->in[0]), ir_tp_degree(g, ir_attr_i(n, "shards")));
  IrDType t = n->in[0]->dtype;
  return set_out(g, n, 0, t, n->in[0]->rank, shape, d) || set_out(g, n, 1, t, 1, &scratch, d);
}

static int shape_tp_slice(IrGraph *g, IrNode *n, IrDiag *d) {
  const Sym *shape[IR_MAXRANK];
  if (tp_shape(g, n, false, shape, d))
    return -1;
  return set_out(g, n, 0, n->in[0]->dtype, n->in[0]->rank, shape, d);
}

static int shape_tp_reduce_scatter(IrGraph *g, IrNode *n, IrDiag *d) {
  const Sym *shape[IR_MAXRANK];
  if (tp_shape(g, n, false, shape, d))
    return -1;
  const Sym *scratch = ir_numel(g, n->in[0]);
  IrDType t = n->in[0]->dtype;
  return set_out(g, n, 0, t, n->in[0]->rank, shape, d) || set_out(g, n, 1, t, 1, &scratch, d);
}

const Sym *ir_summa_panels(IrGraph *g, const Sym *numel, int64_t q) {
  return sym_scale(&g->arena, numel, q - 1 < 2 ? q - 1 : 2, 1);
}

// A SUMMA op's outputs: the product [rank, shape], the panels of its broadcast input, and
// those of `second` (the other operand forward, the product backward); -1 with d when the
// inputs are not one dtype or their dims do not meet (fits false).
static int summa_outs(IrGraph *g, IrNode *n, bool fits, const char *form, int rank,
                      const Sym *const *shape, const IrValue *bcast, const Sym *second,
                      IrDiag *d) {
  const IrValue *a = n->in[0], *b = n->in[1];
  if (!fits || a->dtype != b->dtype)
    return ir_error(d, n->loc, "%s: '%s' %s and '%s' %s are not this rank's parts of %s of one "
                    "dtype", ir_op_name(n->op), a->name, ir_shape_str(g, a), b->name,
                    ir_shape_str(g, b), form);
  int64_t q = ir_attr_i(n, "shards");
  const Sym *p1 = ir_summa_panels(g, ir_numel(g, bcast), q), *p2 = ir_summa_panels(g, second, q);
  return set_out(g, n, 0, a->dtype, rank, shape, d) || set_out(g, n, 1, a->dtype, 1, &p1, d) ||
         set_out(g, n, 2, a->dtype, 1, &p2, d);
}

// x [.., k] and y [.., m] (y of x's rank when same): the product's shape, x's leading dims
// then `inner`; whether they fit.
static bool summa_shape(const IrValue *x, const IrValue *y, bool same, const Sym *inner,
                        const Sym **shape) {
  if (x->rank < 2 || (same ? y->rank != x->rank : y->rank != 2))
    return false;
  for (int i = 0; i < x->rank - 1; i++)
    shape[i] = x->shape[i];
  shape[x->rank - 1] = inner;
  for (int i = 0; same && i < x->rank - 1; i++)
    if (!sym_eq(x->shape[i], y->shape[i]))
      return false;
  return true;
}

static int shape_summa(IrGraph *g, IrNode *n, IrDiag *d) {
  const IrValue *a = n->in[0], *b = n->in[1];
  const Sym *shape[IR_MAXRANK];
  bool fits = summa_shape(a, b, false, b->rank == 2 ? b->shape[1] : NULL, shape) &&
              sym_eq(a->shape[a->rank - 1], b->shape[0]);
  return summa_outs(g, n, fits, "a product [.., k] @ [k, n]", a->rank, shape, a, ir_numel(g, b),
                    d);
}

static int shape_summa_nt(IrGraph *g, IrNode *n, IrDiag *d) {
  const IrValue *dy = n->in[0], *w = n->in[1];
  const Sym *shape[IR_MAXRANK];
  bool fits = summa_shape(dy, w, false, w->rank == 2 ? w->shape[0] : NULL, shape) &&
              sym_eq(dy->shape[dy->rank - 1], w->shape[1]);
  return summa_outs(g, n, fits, "a product [.., n] @ [k, n]^T", dy->rank, shape, w,
                    fits ? shape_numel(g, dy->rank, shape) : NULL, d);
}

static int shape_summa_tn(IrGraph *g, IrNode *n, IrDiag *d) {
  const IrValue *x = n->in[0], *dy = n->in[1];
  const Sym *lead[IR_MAXRANK];
  bool fits = summa_shape(x, dy, true, NULL, lead);
  const Sym *shape[2] = {fits ? x->shape[x->rank - 1] : NULL, fits ? dy->shape[dy->rank - 1] : NULL};
  return summa_outs(g, n, fits, "a product [.., k]^T @ [.., n]", 2, shape, x,
                    fits ? shape_numel(g, 2, shape) : NULL, d);
}

static int shape_vp_cross_entropy(IrGraph *g, IrNode *n, IrDiag *d) {
  if (need_targets(g, n, 0, 1, d))
    return -1;
  const Sym *stats = sym_scale(&g->arena, ir_numel(g, n->in[1]), 2, 1);
  return set_out(g, n, 0, DT_F32, 0, NULL, d) || set_out(g, n, 1, DT_F32, 1, &stats, d);
}

static int shape_vp_cross_entropy_bwd(IrGraph *g, IrNode *n, IrDiag *d) {
  if (shape_cross_entropy_bwd(g, n, d))
    return -1;
  const IrValue *st = n->in[3];
  if (st->dtype == DT_F32 && sym_eq(ir_numel(g, st), sym_scale(&g->arena, ir_numel(g, n->in[2]), 2, 1)))
    return 0;
  return ir_error(d, n->loc, "vp_cross_entropy_bwd: stats '%s' %s must hold 2 floats per row",
                  st->name, ir_shape_str(g, st));
}

// ---- offload ----

// x is a flat device bucket and h (host) a flat range of this rank's part of
// it: offset + numel(h) <= numel(x) / shards, where the sizes are known.
static int need_host_range(IrGraph *g, IrNode *n, const IrValue *x, const IrValue *h,
                           IrDiag *d) {
  if (need_flat(g, n, 0, d))
    return -1;
  if (x->host || !h->host)
    return ir_error(d, n->loc, "%s: '%s' must be in device memory and '%s' in host memory",
                    ir_op_name(n->op), x->name, h->name);
  if (!ir_is_float(h->dtype) || h->rank != 1)
    return ir_error(d, n->loc, "%s: '%s' must be a flat float range, not %s%s", ir_op_name(n->op),
                    h->name, ir_dtype_name(h->dtype), ir_shape_str(g, h));
  int64_t offset = ir_attr_i(n, "offset"), shards = ir_attr_i(n, "shards"), nx, nh;
  if (sym_eval(x->shape[0], &g->syms, &nx) || sym_eval(h->shape[0], &g->syms, &nh))
    return 0;
  int64_t num, den;   // this rank's part of x
  ir_part_ratio(n, &num, &den);
  if (shards < 1 || nx % den || offset < 0 || offset + nh > nx / den * num)
    return ir_error(d, n->loc, "%s: elements %lld .. %lld of this rank's part of '%s' %s (%lld "
                    "parts) do not exist", ir_op_name(n->op), (long long)offset,
                    (long long)(offset + nh), x->name, ir_shape_str(g, x), (long long)shards);
  return 0;
}

// All of device value x (any shape) and host value h, its elements in a flat
// range: an activation swapped out and back (passes/swap.c).
static int need_whole_copy(IrGraph *g, IrNode *n, const IrValue *x, const IrValue *h,
                           IrDiag *d) {
  if (x->host || !h->host || !ir_is_float(x->dtype) || h->dtype != x->dtype || h->rank != 1 ||
      !sym_eq(ir_numel(g, x), h->shape[0]))
    return ir_error(d, n->loc, "%s: '%s' %s%s must be a device float value and '%s' %s%s its "
                    "elements in host memory", ir_op_name(n->op), x->name,
                    ir_dtype_name(x->dtype), ir_shape_str(g, x), h->name,
                    ir_dtype_name(h->dtype), ir_shape_str(g, h));
  return 0;
}

// The output's size is the caller's (set it before ir_infer).
static int shape_to_host(IrGraph *g, IrNode *n, IrDiag *d) {
  if (n->out[0]->rank < 0)
    return ir_error(d, n->loc, "to_host: the output '%s' needs its size", n->out[0]->name);
  if (n->in[0]->rank != 1 && ir_attr_i(n, "shards") == 1 && ir_attr_i(n, "offset") == 0)
    return need_whole_copy(g, n, n->in[0], n->out[0], d);
  return need_host_range(g, n, n->in[0], n->out[0], d);
}

// The output's shape is the caller's: the value that went to the host.
static int shape_from_host(IrGraph *g, IrNode *n, IrDiag *d) {
  if (n->out[0]->rank < 0)
    return ir_error(d, n->loc, "from_host: the output '%s' needs its shape", n->out[0]->name);
  return need_whole_copy(g, n, n->out[0], n->in[0], d);
}

static int shape_to_device(IrGraph *g, IrNode *n, IrDiag *d) {
  return need_host_range(g, n, n->in[0], n->in[1], d);
}

// The values of the copy it finishes, as they are: nothing to infer.
static int shape_copy_wait(IrGraph *g, IrNode *n, IrDiag *d) {
  (void)g, (void)n, (void)d;
  return 0;
}

typedef int ShapeFn(IrGraph *g, IrNode *n, IrDiag *d);
static ShapeFn *const shape_fns[] = {
#define OP(E, name, nin, nout, kind) shape_##name,
#include "ops.def"
};

int ir_infer(IrGraph *g, IrNode *n, IrDiag *d) {
  int nin = ir_op_nin(n->op), nout = ir_op_nout(n->op);
  if ((nin >= 0 && n->nin != nin) || (nout >= 0 && n->nout != nout))
    return ir_error(d, n->loc, "%s takes %d inputs and gives %d outputs, not %d and %d",
                    ir_op_name(n->op), nin, nout, n->nin, n->nout);
  if (ir_verify_attrs(n, d))
    return -1;
  for (int i = 0; i < n->nin; i++)
    if (n->in[i]->rank < 0)
      return ir_error(d, n->loc, "%s: input '%s' has no shape yet", ir_op_name(n->op),
                      n->in[i]->name);
  if (shape_fns[n->op](g, n, d))
    return -1;
  for (int i = 0; i < n->nout; i++)
    for (int k = 0; k < n->out[i]->rank; k++)
      if (sym_overflowed(n->out[i]->shape[k]))
        return ir_error(d, n->loc, "%s: dim %d of output '%s' overflows int64", ir_op_name(n->op),
                        k, n->out[i]->name);
  return 0;
}

const char *ir_bindings_text(IrGraph *g, const Sym *s) {
  char buf[512] = "";
  size_t len = 0;
  for (int v = 0; v < g->syms.n && s->n > 0; v++) {
    if (sym_uses(s, v) && len < sizeof buf)
      len += (size_t)snprintf(buf + len, sizeof buf - len, "%s %s = %lld", len ? "," : " with",
                              g->syms.name[v], (long long)g->syms.value[v]);
  }
  return ir_strndup(&g->arena, buf, strlen(buf));
}

int ir_check_sizes(IrGraph *g, IrDiag *d) {
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *v = g->values[i];
    IrLoc loc = !v->loc.file && v->producer ? v->producer->loc : v->loc;
    // the bytes as numbers (ir_nbytes would build a formula per value on every verify)
    int64_t bytes = ir_dtype_size(v->dtype);
    bool known = v->rank >= 0, big = false;
    for (int k = 0; k < v->rank; k++) {
      const Sym *s = v->shape[k];
      int64_t x = 0;
      int rc = sym_eval(s, &g->syms, &x);
      if (rc == -3)
        return ir_error(d, loc, "dim %d of '%s' (%s) overflows int64%s", k, v->name,
                        sym_str(&g->arena, s, &g->syms), ir_bindings_text(g, s));
      if (rc == -2)
        return ir_error(d, loc, "dim %d of '%s' (%s) is not an integer%s", k, v->name,
                        sym_str(&g->arena, s, &g->syms), ir_bindings_text(g, s));
      // (a flat bucket may be empty: the device's range of masters the host holds all of)
      if (rc == 0 && x < (v->role == ROLE_BUCKET && v->rank == 1 ? 0 : 1))
        return ir_error(d, loc, "dim %d of '%s' (%s) is %lld%s; every dim is at least 1", k,
                        v->name, sym_str(&g->arena, s, &g->syms), (long long)x,
                        ir_bindings_text(g, s));
      known &= rc == 0;
      big |= rc == 0 && (x > IR_BYTES_MAX || __builtin_mul_overflow(bytes, x, &bytes) ||
                         bytes > IR_BYTES_MAX);
    }
    if (known && big) {
      const Sym *nbytes = ir_nbytes(g, v);
      return ir_error(d, loc, "'%s' %s takes more than %lld TiB%s: mtc plans tensors up to that",
                      v->name, ir_shape_str(g, v), (long long)(IR_BYTES_MAX >> 40),
                      ir_bindings_text(g, nbytes));
    }
  }
  return 0;
}

IrGemm ir_matmul_gemm(IrGraph *g, const IrNode *n) {
  IrArena *ar = &g->arena;
  const IrValue *a = n->in[0], *b = n->in[1];
  bool ta = ir_attr_i(n, "ta"), tb = ir_attr_i(n, "tb"), sum = ir_attr_i(n, "sum_batch");
  IrGemm r = {.m = a->shape[a->rank - (ta ? 1 : 2)], .k = a->shape[a->rank - (ta ? 2 : 1)],
              .n = b->shape[b->rank - (tb ? 2 : 1)], .batch = sym_const(ar, 1)};
  const IrValue *big = a->rank > 2 ? a : b;
  for (int i = 0; i < big->rank - 2; i++)
    r.batch = sym_mul(ar, r.batch, big->shape[i]);
  r.sa = a->rank > 2 ? sym_mul(ar, a->shape[a->rank - 2], a->shape[a->rank - 1]) : sym_const(ar, 0);
  r.sb = b->rank > 2 ? sym_mul(ar, b->shape[b->rank - 2], b->shape[b->rank - 1]) : sym_const(ar, 0);
  r.sc = sum ? sym_const(ar, 0) : sym_mul(ar, r.m, r.n);
  if (a->rank > 2 && b->rank == 2 && !ta && !sum) { // rows of A all meet the same B
    r.m = sym_mul(ar, r.batch, r.m);
    r.batch = sym_const(ar, 1);
  } else if (sum && a->rank > 2 && b->rank > 2 && ta && !tb) { // A^T dC summed over the batch
    r.k = sym_mul(ar, r.batch, r.k);
    r.batch = sym_const(ar, 1);
  }
  return r;
}

// ---- FLOP rules -------------------------------------------------------------------
// FLOPs of one execution, as formulas. Elementwise ops count a few FLOPs per
// element (the cost model treats them as memory-bound anyway).

static const Sym *numel_times(IrGraph *g, const IrValue *v, int64_t k) {
  return sym_scale(&g->arena, ir_numel(g, v), k, 1);
}

static const Sym *flops_matmul(IrGraph *g, const IrNode *n) {
  const IrValue *a = n->in[0];
  bool ta = ir_attr_i(n, "ta");
  const Sym *k = a->shape[a->rank - (ta ? 2 : 1)];
  const Sym *batch_mn = ir_numel(g, n->out[0]);
  if (ir_attr_i(n, "sum_batch")) { // the batch is summed away: count it from the input
    const IrValue *big = a->rank > 2 ? a : n->in[1];
    for (int i = 0; i < big->rank - 2; i++)
      batch_mn = sym_mul(&g->arena, batch_mn, big->shape[i]);
  }
  return sym_scale(&g->arena, sym_mul(&g->arena, batch_mn, k), 2, 1);
}

// the product's, and the add's and GELU's it replaces (as flops_add and flops_gelu count them)
static const Sym *flops_matmul_bias(IrGraph *g, const IrNode *n) {
  return sym_add(&g->arena, flops_matmul(g, n),
                 numel_times(g, n->out[0], ir_attr_i(n, "act") ? 1 + 8 : 1));
}

// the product's, and the sum_to's it replaces (as flops_sum_to counts it)
static const Sym *flops_matmul_bgrad(IrGraph *g, const IrNode *n) {
  return sym_add(&g->arena, flops_matmul(g, n), ir_numel(g, n->in[ir_attr_i(n, "of")]));
}

// Each output element (or each of dy's, backward) is a dot product of C*KH*KW/G
// terms: its group's rows of col.
static const Sym *flops_conv(IrGraph *g, const IrNode *n, const IrValue *y, const IrValue *col) {
  return sym_scale(&g->arena, sym_mul(&g->arena, ir_numel(g, y), col->shape[1]), 2,
                   ir_attr_i(n, "group"));
}
static const Sym *flops_conv2d(IrGraph *g, const IrNode *n) {
  return flops_conv(g, n, n->out[0], n->out[1]);
}
static const Sym *flops_conv2d_bwd_data(IrGraph *g, const IrNode *n) {
  return flops_conv(g, n, n->in[0], n->out[1]);
}
static const Sym *flops_conv2d_bwd_filter(IrGraph *g, const IrNode *n) {
  return flops_conv(g, n, n->in[0], n->out[1]);
}

static const Sym *flops_out(IrGraph *g, const IrNode *n, int64_t k) {
  return numel_times(g, n->out[0], k);
}
static const Sym *flops_in(IrGraph *g, const IrNode *n, int64_t k) {
  return numel_times(g, n->in[0], k);
}
static const Sym *flops_add(IrGraph *g, const IrNode *n) { return flops_out(g, n, 1); }
// a comparison per window element; backward finds each window's max again for
// every input pixel the window covers (about kernel^2 / stride^2 windows each)
static int64_t pool_area(const IrNode *n) {
  IrConvWindow w;
  int64_t k[2];
  return ir_pool_window(n, &w, k) ? 1 : k[0] * k[1];
}
static const Sym *flops_maxpool2d(IrGraph *g, const IrNode *n) {
  return flops_out(g, n, pool_area(n));
}
static const Sym *flops_maxpool2d_bwd(IrGraph *g, const IrNode *n) {
  return numel_times(g, n->in[1], pool_area(n));
}
static const Sym *flops_min(IrGraph *g, const IrNode *n) { return flops_out(g, n, 1); }
static const Sym *flops_cumsum(IrGraph *g, const IrNode *n) { return flops_out(g, n, 1); }
static const Sym *flops_compare(IrGraph *g, const IrNode *n) { return flops_out(g, n, 1); }
static const Sym *flops_max(IrGraph *g, const IrNode *n) { return flops_out(g, n, 1); }
static const Sym *flops_sub(IrGraph *g, const IrNode *n) { return flops_out(g, n, 1); }
static const Sym *flops_mul(IrGraph *g, const IrNode *n) { return flops_out(g, n, 1); }
static const Sym *flops_div(IrGraph *g, const IrNode *n) { return flops_out(g, n, 1); }
static const Sym *flops_scale(IrGraph *g, const IrNode *n) { return flops_out(g, n, 2); }
static const Sym *flops_gelu(IrGraph *g, const IrNode *n) { return flops_out(g, n, 8); }
static const Sym *flops_gelu_bwd(IrGraph *g, const IrNode *n) { return flops_out(g, n, 12); }
static const Sym *flops_relu(IrGraph *g, const IrNode *n) { return flops_out(g, n, 1); }
static const Sym *flops_relu_bwd(IrGraph *g, const IrNode *n) { return flops_out(g, n, 1); }
static const Sym *flops_layernorm(IrGraph *g, const IrNode *n) { return flops_out(g, n, 8); }
// the add's and the norm's (as flops_add and flops_layernorm count them)
static const Sym *flops_add_layernorm(IrGraph *g, const IrNode *n) { return flops_out(g, n, 1 + 8); }
static const Sym *flops_layernorm_bwd(IrGraph *g, const IrNode *n) { return flops_out(g, n, 12); }
static const Sym *flops_rmsnorm(IrGraph *g, const IrNode *n) { return flops_out(g, n, 5); }
static const Sym *flops_rope(IrGraph *g, const IrNode *n) { return flops_out(g, n, 3); }
static const Sym *flops_rmsnorm_bwd(IrGraph *g, const IrNode *n) { return flops_out(g, n, 9); }
int ir_causal_divisor(const IrNode *n) {
  bool scores = n->op == OP_SOFTMAX || n->op == OP_ATTENTION || n->op == OP_ATTENTION_BWD;
  return scores && ir_attr_i(n, "causal") ? 2 : 1;
}

static const Sym *flops_softmax(IrGraph *g, const IrNode *n) {
  return sym_scale(&g->arena, ir_numel(g, n->out[0]), 5, ir_causal_divisor(n));
}
static const Sym *flops_softmax_bwd(IrGraph *g, const IrNode *n) { return flops_out(g, n, 4); }

// Attention on q [..., T, HS] and TK keys: QK^T and PV are 2*T*TK*HS each
// per head (half under the causal mask); the backward recomputes QK^T and
// does four more.
static const Sym *attention_flops(IrGraph *g, const IrNode *n, const IrValue *q,
                                  const IrValue *k, int64_t gemms) {
  const Sym *tk = k->shape[k->rank - 2];
  const Sym *f = sym_mul(&g->arena, ir_numel(g, q), tk);
  return sym_scale(&g->arena, f, 2 * gemms, ir_causal_divisor(n));
}
static const Sym *flops_attention(IrGraph *g, const IrNode *n) {
  return attention_flops(g, n, n->in[0], n->in[1], 2);
}
static const Sym *flops_attention_bwd(IrGraph *g, const IrNode *n) {
  return attention_flops(g, n, n->in[1], n->in[2], 5);
}
static const Sym *flops_embedding(IrGraph *g, const IrNode *n) { return flops_out(g, n, 0); }
static const Sym *flops_embedding_bwd(IrGraph *g, const IrNode *n) { return flops_in(g, n, 1); }
static const Sym *flops_cross_entropy(IrGraph *g, const IrNode *n) { return flops_in(g, n, 5); }
static const Sym *flops_cross_entropy_bwd(IrGraph *g, const IrNode *n) {
  return flops_out(g, n, 5);
}
// the gradient's (the loss's come with the row's sums it needs anyway)
static const Sym *flops_cross_entropy_fused(IrGraph *g, const IrNode *n) {
  return numel_times(g, n->out[1], 5);
}
static const Sym *flops_reshape(IrGraph *g, const IrNode *n) { return flops_out(g, n, 0); }
static const Sym *flops_transpose(IrGraph *g, const IrNode *n) { return flops_out(g, n, 0); }
static const Sym *flops_split(IrGraph *g, const IrNode *n) { return flops_in(g, n, 0); }
static const Sym *flops_concat(IrGraph *g, const IrNode *n) { return flops_out(g, n, 0); }
static const Sym *flops_broadcast(IrGraph *g, const IrNode *n) { return flops_out(g, n, 0); }
static const Sym *flops_sum(IrGraph *g, const IrNode *n) { return flops_in(g, n, 1); }
static const Sym *flops_mean(IrGraph *g, const IrNode *n) { return flops_in(g, n, 1); }
static const Sym *flops_sum_to(IrGraph *g, const IrNode *n) { return flops_in(g, n, 1); }
static const Sym *flops_fill(IrGraph *g, const IrNode *n) { return flops_out(g, n, 0); }
static const Sym *flops_exp(IrGraph *g, const IrNode *n) { return flops_out(g, n, 4); }
static const Sym *flops_log(IrGraph *g, const IrNode *n) { return flops_out(g, n, 4); }
static const Sym *flops_sqrt(IrGraph *g, const IrNode *n) { return flops_out(g, n, 2); }
static const Sym *flops_tanh(IrGraph *g, const IrNode *n) { return flops_out(g, n, 6); }
static const Sym *flops_erf(IrGraph *g, const IrNode *n) { return flops_out(g, n, 6); }
static const Sym *flops_pow(IrGraph *g, const IrNode *n) { return flops_out(g, n, 4); }
static const Sym *flops_sin(IrGraph *g, const IrNode *n) { return flops_out(g, n, 6); }
static const Sym *flops_cos(IrGraph *g, const IrNode *n) { return flops_out(g, n, 6); }
static const Sym *flops_abs(IrGraph *g, const IrNode *n) { return flops_out(g, n, 1); }
static const Sym *flops_sign(IrGraph *g, const IrNode *n) { return flops_out(g, n, 1); }
static const Sym *flops_cast(IrGraph *g, const IrNode *n) { return flops_out(g, n, 1); }
static const Sym *flops_assign(IrGraph *g, const IrNode *n) { return flops_in(g, n, 1); }
static const Sym *flops_sigmoid(IrGraph *g, const IrNode *n) { return flops_out(g, n, 6); }
static const Sym *flops_gelu_erf(IrGraph *g, const IrNode *n) { return flops_out(g, n, 8); }
static const Sym *flops_gelu_erf_bwd(IrGraph *g, const IrNode *n) { return flops_out(g, n, 14); }
static const Sym *flops_silu(IrGraph *g, const IrNode *n) { return flops_out(g, n, 7); }
static const Sym *flops_silu_bwd(IrGraph *g, const IrNode *n) { return flops_out(g, n, 10); }
static const Sym *flops_masked_fill(IrGraph *g, const IrNode *n) { return flops_out(g, n, 1); }
static const Sym *flops_equal(IrGraph *g, const IrNode *n) { return flops_out(g, n, 1); }
static const Sym *flops_dropout(IrGraph *g, const IrNode *n) { return flops_out(g, n, 4); }
static const Sym *flops_tick(IrGraph *g, const IrNode *n) { return flops_in(g, n, 1); }
static const Sym *flops_log_softmax(IrGraph *g, const IrNode *n) { return flops_out(g, n, 5); }
static const Sym *flops_log_softmax_bwd(IrGraph *g, const IrNode *n) { return flops_out(g, n, 4); }
static const Sym *flops_nll_loss(IrGraph *g, const IrNode *n) {
  return numel_times(g, n->in[1], 1);
}
static const Sym *flops_nll_loss_bwd(IrGraph *g, const IrNode *n) { return flops_out(g, n, 1); }
static const Sym *flops_slice(IrGraph *g, const IrNode *n) { return flops_out(g, n, 0); }
static const Sym *flops_slice_bwd(IrGraph *g, const IrNode *n) { return flops_out(g, n, 0); }
// The update covers the moments' elements (this rank's part when sharded).
static const Sym *flops_adamw(IrGraph *g, const IrNode *n) { return numel_times(g, n->in[2], 12); }
static const Sym *flops_sgd(IrGraph *g, const IrNode *n) { return numel_times(g, n->in[1], 3); }
static const Sym *flops_all_reduce(IrGraph *g, const IrNode *n) { return flops_in(g, n, 1); }
static const Sym *flops_reduce_scatter(IrGraph *g, const IrNode *n) { return flops_in(g, n, 1); }
static const Sym *flops_all_gather(IrGraph *g, const IrNode *n) { return flops_in(g, n, 0); }
static const Sym *flops_comm_wait(IrGraph *g, const IrNode *n) { return flops_in(g, n, 0); }
static const Sym *flops_unshard(IrGraph *g, const IrNode *n) { return flops_in(g, n, 0); }
static const Sym *flops_accumulate(IrGraph *g, const IrNode *n) { return flops_in(g, n, 1); }
static const Sym *flops_tp_gather(IrGraph *g, const IrNode *n) { return flops_in(g, n, 0); }
static const Sym *flops_tp_slice(IrGraph *g, const IrNode *n) { return flops_in(g, n, 0); }
static const Sym *flops_tp_reduce_scatter(IrGraph *g, const IrNode *n) { return flops_in(g, n, 0); }
// q GEMMs over the whole k: out [.., n] by k (forward), and backward dx [.., k] by n, dw [k, n]
// by the rows
static const Sym *summa_flops(IrGraph *g, const IrNode *n, const Sym *k) {
  return sym_scale(&g->arena, sym_mul(&g->arena, ir_numel(g, n->out[0]), k), 2, 1);
}
static const Sym *flops_summa(IrGraph *g, const IrNode *n) {
  const Sym *q = ir_tp_degree(g, ir_attr_i(n, "shards"));
  return summa_flops(g, n, sym_mul(&g->arena, n->in[1]->shape[0], q));
}
static const Sym *flops_summa_nt(IrGraph *g, const IrNode *n) {
  const Sym *q = ir_tp_degree(g, ir_attr_i(n, "shards"));
  return summa_flops(g, n, sym_mul(&g->arena, n->in[1]->shape[1], q));
}
static const Sym *flops_summa_tn(IrGraph *g, const IrNode *n) {
  const IrValue *x = n->in[0];
  const Sym *rows = sym_div(&g->arena, ir_numel(g, x), x->shape[x->rank - 1]);
  return summa_flops(g, n, sym_mul(&g->arena, rows, ir_tp_degree(g, ir_attr_i(n, "shards"))));
}
static const Sym *flops_vp_cross_entropy(IrGraph *g, const IrNode *n) { return flops_in(g, n, 5); }
static const Sym *flops_vp_cross_entropy_bwd(IrGraph *g, const IrNode *n) {
  return flops_out(g, n, 5);
}
static const Sym *flops_to_host(IrGraph *g, const IrNode *n) { return flops_in(g, n, 0); }
static const Sym *flops_to_device(IrGraph *g, const IrNode *n) { return flops_in(g, n, 0); }
static const Sym *flops_from_host(IrGraph *g, const IrNode *n) { return flops_in(g, n, 0); }
static const Sym *flops_copy_wait(IrGraph *g, const IrNode *n) { return flops_in(g, n, 0); }

typedef const Sym *FlopsFn(IrGraph *g, const IrNode *n);
static FlopsFn *const flops_fns[] = {
#define OP(E, name, nin, nout, kind) flops_##name,
#include "ops.def"
};

const Sym *ir_flops(IrGraph *g, const IrNode *n) { return flops_fns[n->op](g, n); }
