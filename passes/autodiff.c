// Reverse-mode automatic differentiation at graph level.
//
// Walk the forward nodes in reverse schedule order. When a node is reached,
// every consumer of its outputs has already been visited, so the gradients of
// its outputs are complete; the op's gradient rule (grad_<op>, expanded from
// ops.def) emits backward nodes that give each input's gradient
// contribution. Contributions to one value are summed with `add` (fan-out).
// The backward starts from dloss = 1.
#include "passes.h"

#include <stdlib.h>
#include <string.h>

typedef struct AD {
  IrGraph *g;
  IrDiag *diag;
  IrValue **grad;      // grad[v->id]: accumulated gradient of v, or NULL
  bool *needs;         // needs[v->id]: v depends on a parameter
  const IrNode *fwd;   // the forward node being differentiated
  int err;
} AD;

// ---- builders: backward nodes carry the block and location of their forward node

static IrNode *emit(AD *ad, IrOp op, IrValue *const *in, int nin, int nout) {
  IrGraph *g = ad->g;
  g->cur_phase = PHASE_BACKWARD;
  ir_set_block(g, ad->fwd);
  g->cur_loc = ad->fwd ? ad->fwd->loc : (IrLoc){0};
  return ir_node_new(g, op, in, nin, nout);
}

static IrNode *finish(AD *ad, IrNode *n) {
  if (!ad->err && ir_infer(ad->g, n, ad->diag))
    ad->err = -1;
  return n;
}

static IrValue *op2(AD *ad, IrOp op, IrValue *a, IrValue *b) {
  IrValue *in[2] = {a, b};
  return finish(ad, emit(ad, op, in, 2, 1))->out[0];
}

// A node whose output shape is that of `like`.
static IrNode *shaped(AD *ad, IrOp op, IrValue *const *in, int nin, const IrValue *like) {
  IrNode *n = emit(ad, op, in, nin, 1);
  ir_value_set_shape(n->out[0], like->rank, like->shape);
  n->out[0]->dtype = like->dtype;
  return n;
}

static IrValue *scale(AD *ad, IrValue *x, double s) {
  IrNode *n = emit(ad, OP_SCALE, &x, 1, 1);
  ir_set_float(ad->g, n, "s", s);
  return finish(ad, n)->out[0];
}

// Sum x down to the shape of `like` (the gradient of a broadcast).
static IrValue *sum_to(AD *ad, IrValue *x, const IrValue *like) {
  if (ir_same_shape(x, like))
    return x;
  return finish(ad, shaped(ad, OP_SUM_TO, &x, 1, like))->out[0];
}

static IrValue *reshape_to(AD *ad, IrValue *x, const IrValue *like) {
  if (ir_same_shape(x, like))
    return x;
  return finish(ad, shaped(ad, OP_RESHAPE, &x, 1, like))->out[0];
}

static IrValue *matmul(AD *ad, IrValue *a, IrValue *b, int ta, int tb, const IrValue *like) {
  IrValue *in[2] = {a, b};
  IrNode *n = emit(ad, OP_MATMUL, in, 2, 1);
  if (ta)
    ir_set_int(ad->g, n, "ta", 1);
  if (tb)
    ir_set_int(ad->g, n, "tb", 1);
  if (like->rank == 2 && (a->rank > 2 || b->rank > 2))
    ir_set_int(ad->g, n, "sum_batch", 1); // the operand was broadcast over the batch
  return finish(ad, n)->out[0];
}

// ---- gradient rules ---------------------------------------------------------------
// grad_<op>(ad, n, dy, dx): dy[i] is the gradient of output i (NULL if none);
// set dx[i] to the gradient contribution of input i (leave NULL if none).

typedef void GradFn(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx);

static void no_grad(AD *ad, const IrNode *n) {
  if (!ad->err)
    ad->err = ir_error(ad->diag, n->loc, "autodiff: %s has no gradient rule",
                       ir_op_name(n->op));
}

// C = op(A) @ op(B); see the table in the comments of each case.
static void grad_matmul(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  IrValue *a = n->in[0], *b = n->in[1], *dc = dy[0];
  int ta = (int)ir_attr_i(n, "ta"), tb = (int)ir_attr_i(n, "tb");
  if (!ta && !tb) { // dA = dC B^T, dB = A^T dC
    dx[0] = matmul(ad, dc, b, 0, 1, a);
    dx[1] = matmul(ad, a, dc, 1, 0, b);
  } else if (!ta && tb) { // C = A B^T: dA = dC B, dB = dC^T A
    dx[0] = matmul(ad, dc, b, 0, 0, a);
    dx[1] = matmul(ad, dc, a, 1, 0, b);
  } else if (ta && !tb) { // C = A^T B: dA = B dC^T, dB = A dC
    dx[0] = matmul(ad, b, dc, 0, 1, a);
    dx[1] = matmul(ad, a, dc, 0, 0, b);
  } else { // C = A^T B^T: dA = B^T dC^T, dB = dC^T A^T
    dx[0] = matmul(ad, b, dc, 1, 1, a);
    dx[1] = matmul(ad, dc, a, 1, 1, b);
  }
}

static void grad_add(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = sum_to(ad, dy[0], n->in[0]);
  dx[1] = sum_to(ad, dy[0], n->in[1]);
}

static void grad_sub(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = sum_to(ad, dy[0], n->in[0]);
  dx[1] = sum_to(ad, scale(ad, dy[0], -1.0), n->in[1]);
}

static void grad_mul(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = sum_to(ad, op2(ad, OP_MUL, dy[0], n->in[1]), n->in[0]);
  dx[1] = sum_to(ad, op2(ad, OP_MUL, dy[0], n->in[0]), n->in[1]);
}

// C = A / B: dA = dC / B; dB = -dC A / B^2 = -(dC / B) * C
static void grad_div(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  IrValue *t = op2(ad, OP_DIV, dy[0], n->in[1]);
  dx[0] = sum_to(ad, t, n->in[0]);
  dx[1] = sum_to(ad, scale(ad, op2(ad, OP_MUL, t, n->out[0]), -1.0), n->in[1]);
}

static void grad_scale(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = scale(ad, dy[0], ir_attr_f(n, "s"));
}

static void grad_gelu(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = op2(ad, OP_GELU_BWD, dy[0], n->in[0]);
}

static void grad_relu(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = op2(ad, OP_RELU_BWD, dy[0], n->in[0]);
}

static void grad_softmax(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = op2(ad, OP_SOFTMAX_BWD, dy[0], n->out[0]);
}

static void grad_layernorm(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  IrValue *in[3] = {dy[0], n->in[0], n->in[1]};
  IrNode *b = emit(ad, OP_LAYERNORM_BWD, in, 3, 3);
  ir_set_float(ad->g, b, "eps", ir_attr_f(n, "eps"));
  finish(ad, b);
  for (int i = 0; i < 3; i++)
    dx[i] = b->out[i];
}

static void grad_rmsnorm(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  IrValue *in[3] = {dy[0], n->in[0], n->in[1]};
  IrNode *b = emit(ad, OP_RMSNORM_BWD, in, 3, 2);
  ir_set_float(ad->g, b, "eps", ir_attr_f(n, "eps"));
  finish(ad, b);
  dx[0] = b->out[0];
  dx[1] = b->out[1];
}

// A rotation: its gradient is the rotation back.
static void grad_rope(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  IrNode *b = emit(ad, OP_ROPE, dy, 1, 1);
  ir_set_float(ad->g, b, "theta", ir_attr_f(n, "theta"));
  ir_set_int(ad->g, b, "inverse", !ir_attr_i(n, "inverse"));
  dx[0] = finish(ad, b)->out[0];
}

// The backward reads the forward's output and each query's log-sum-exp
// rather than run the forward again. The key-padding mask (an integer input)
// has no gradient; the bias's, when it depends on a parameter (T5's, not a
// mask's), is the scores' (attention_bwd's fourth output) summed over the
// dims it broadcasts over.
static void grad_attention(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  if (!dy[0])
    return;   // only the log-sum-exp is read, by no op that takes a gradient
  IrValue *in[8] = {dy[0], n->in[0], n->in[1], n->in[2], n->out[0], n->out[1]}, *keep, *bias;
  for (int i = 3; i < n->nin; i++)
    in[i + 3] = n->in[i];
  ir_attention_extras(n, &keep, &bias);
  bool dbias = bias && ad->needs[bias->id];
  IrNode *b = emit(ad, OP_ATTENTION_BWD, in, n->nin + 3, dbias ? 4 : 3);
  ir_set_int(ad->g, b, "causal", ir_attr_i(n, "causal"));
  finish(ad, b);
  for (int i = 0; i < 3; i++)
    dx[i] = b->out[i];
  if (dbias)
    dx[n->nin - 1] = sum_to(ad, b->out[3], bias);
}

// With padding_idx P, the lookups of row P pass no gradient (PyTorch's padding_idx):
// dy is zeroed where idx == P before it is scattered into the table.
static void grad_embedding(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  IrValue *in[2] = {dy[0], n->in[1]};
  int64_t pad = ir_attr_i(n, "padding_idx");
  if (pad >= 0) {
    IrNode *eq = emit(ad, OP_EQUAL, &n->in[1], 1, 1);
    ir_set_int(ad->g, eq, "value", pad);
    IrValue *mask = finish(ad, eq)->out[0];
    const Sym *shape[IR_MAXRANK];   // [..., 1]: broadcast over the rows' C
    memcpy(shape, mask->shape, (size_t)mask->rank * sizeof *shape);
    shape[mask->rank] = sym_const(&ad->g->arena, 1);
    IrNode *r = emit(ad, OP_RESHAPE, &mask, 1, 1);
    ir_value_set_shape(r->out[0], mask->rank + 1, shape);
    r->out[0]->dtype = mask->dtype;
    IrValue *fill[2] = {dy[0], finish(ad, r)->out[0]};
    in[0] = finish(ad, emit(ad, OP_MASKED_FILL, fill, 2, 1))->out[0];
  }
  dx[0] = finish(ad, shaped(ad, OP_EMBEDDING_BWD, in, 2, n->in[0]))->out[0];
}

// Copy every attribute of `from` onto `to` (a backward node of the same kind).
static void copy_attrs(AD *ad, IrNode *to, const IrNode *from) {
  for (int i = 0; i < from->nattr; i++) {
    const IrAttr *a = &from->attr[i];
    switch (a->kind) {
    case ATTR_INT: ir_set_int(ad->g, to, a->name, a->i); break;
    case ATTR_FLOAT: ir_set_float(ad->g, to, a->name, a->f); break;
    case ATTR_INTS: ir_set_ints(ad->g, to, a->name, a->ints, a->n); break;
    case ATTR_SYMS: ir_set_syms(ad->g, to, a->name, a->syms, a->n); break;
    case ATTR_STR: ir_set_str(ad->g, to, a->name, a->s); break;
    }
  }
}

// One backward op per wanted gradient, with conv2d's window; output 0 is
// shaped like `like`, output 1 is its scratch (patches).
static IrValue *conv_grad(AD *ad, const IrNode *n, IrOp op, IrValue *dy, IrValue *other,
                          const IrValue *like) {
  IrValue *in[2] = {dy, other};
  IrNode *b = emit(ad, op, in, 2, 2);
  ir_value_set_shape(b->out[0], like->rank, like->shape);
  b->out[0]->dtype = like->dtype;
  copy_attrs(ad, b, n);
  // Output 1 is the patches again (filter) or their gradient (data).
  char name[512];
  snprintf(name, sizeof name, "%s%.500s", op == OP_CONV2D_BWD_DATA ? "d." : "", n->out[1]->name);
  ir_value_rename(ad->g, b->out[1], name);
  return finish(ad, b)->out[0];
}

// y = conv2d(x, w): dx = conv2d_bwd_data(dy, w) (the transposed convolution),
// dw = conv2d_bwd_filter(dy, x); an image that needs no gradient (the model's
// input) gets none. The patches (output 1) have no gradient.
static void grad_conv2d(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  if (!dy[0])
    return;
  if (ad->needs[n->in[0]->id])
    dx[0] = conv_grad(ad, n, OP_CONV2D_BWD_DATA, dy[0], n->in[1], n->in[0]);
  if (ad->needs[n->in[1]->id])
    dx[1] = conv_grad(ad, n, OP_CONV2D_BWD_FILTER, dy[0], n->in[0], n->in[1]);
}

// y = maxpool2d(x): dx = maxpool2d_bwd(dy, x), each window's gradient to its max.
static void grad_maxpool2d(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  IrValue *in[2] = {dy[0], n->in[0]};
  IrNode *b = emit(ad, OP_MAXPOOL2D_BWD, in, 2, 1);
  copy_attrs(ad, b, n);
  dx[0] = finish(ad, b)->out[0];
}

static void grad_cross_entropy(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  IrValue *in[3] = {dy[0], n->in[0], n->in[1]};
  IrNode *b = emit(ad, OP_CROSS_ENTROPY_BWD, in, 3, 1);
  copy_attrs(ad, b, n);
  dx[0] = finish(ad, b)->out[0];
}

static void grad_reshape(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = reshape_to(ad, dy[0], n->in[0]);
}

static void grad_transpose(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  int np;
  const int64_t *perm = ir_attr_ints(n, "perm", &np);
  int64_t inv[IR_MAXRANK];
  for (int i = 0; i < np; i++)
    inv[perm[i]] = i;
  IrNode *t = emit(ad, OP_TRANSPOSE, &dy[0], 1, 1);
  ir_set_ints(ad->g, t, "perm", inv, np);
  dx[0] = finish(ad, t)->out[0];
}

static int norm_axis(const IrNode *n, int rank) {
  int64_t a = ir_attr_i(n, "axis");
  return (int)(a < 0 ? a + rank : a);
}

// The gradient of split is the concat of the outputs' gradients (zeros for
// outputs that were not used).
static void grad_split(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  IrValue **parts = calloc((size_t)n->nout, sizeof *parts);
  IR_ASSERT(parts);
  for (int i = 0; i < n->nout; i++) {
    parts[i] = dy[i];
    if (!parts[i]) {
      IrNode *z = shaped(ad, OP_FILL, NULL, 0, n->out[i]);
      ir_set_float(ad->g, z, "value", 0.0);
      parts[i] = finish(ad, z)->out[0];
    }
  }
  IrNode *c = emit(ad, OP_CONCAT, parts, n->nout, 1);
  ir_set_int(ad->g, c, "axis", norm_axis(n, n->in[0]->rank));
  dx[0] = finish(ad, c)->out[0];
  free(parts);
}

static void grad_concat(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  int axis = norm_axis(n, n->out[0]->rank);
  IrNode *s = emit(ad, OP_SPLIT, &dy[0], 1, n->nin);
  const Sym **sizes = calloc((size_t)n->nin, sizeof *sizes);
  IR_ASSERT(sizes);
  for (int i = 0; i < n->nin; i++)
    sizes[i] = n->in[i]->shape[axis];
  ir_set_int(ad->g, s, "axis", axis);
  ir_set_syms(ad->g, s, "sizes", sizes, n->nin);
  free(sizes);
  finish(ad, s);
  for (int i = 0; i < n->nin; i++)
    dx[i] = s->out[i];
}

static void grad_broadcast(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = sum_to(ad, dy[0], n->in[0]);
}

static void grad_sum_to(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = finish(ad, shaped(ad, OP_BROADCAST, &dy[0], 1, n->in[0]))->out[0];
}

// sum/mean: put the reduced dims back as 1s, broadcast, and for mean divide
// by the number of elements reduced.
static void reduce_grad(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx, bool mean) {
  IrGraph *g = ad->g;
  const IrValue *x = n->in[0];
  int naxes;
  const int64_t *axes = ir_attr_ints(n, "axes", &naxes); // NULL: every dim
  bool reduce[IR_MAXRANK] = {0};
  for (int i = 0; i < x->rank; i++)
    reduce[i] = !axes;
  for (int i = 0; i < naxes; i++)
    reduce[axes[i] < 0 ? axes[i] + x->rank : axes[i]] = true;
  const Sym *kept[IR_MAXRANK];
  const Sym *count = sym_const(&g->arena, 1);
  for (int i = 0; i < x->rank; i++) {
    kept[i] = reduce[i] ? sym_const(&g->arena, 1) : x->shape[i];
    if (reduce[i])
      count = sym_mul(&g->arena, count, x->shape[i]);
  }
  IrValue *d = dy[0];
  if (d->rank != x->rank) {
    IrNode *r = emit(ad, OP_RESHAPE, &d, 1, 1);
    ir_value_set_shape(r->out[0], x->rank, kept);
    d = finish(ad, r)->out[0];
  }
  d = finish(ad, shaped(ad, OP_BROADCAST, &d, 1, x))->out[0];
  dx[0] = mean ? scale(ad, d, 1.0 / (double)ir_eval(g, count)) : d;
}

static void grad_sum(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  reduce_grad(ad, n, dy, dx, false);
}
static void grad_mean(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  reduce_grad(ad, n, dy, dx, true);
}

static void grad_fill(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  (void)ad, (void)n, (void)dy, (void)dx; // constant: no inputs
}

// ---- gradient rules of the ops for ONNX models

static IrValue *op1(AD *ad, IrOp op, IrValue *x) { return finish(ad, emit(ad, op, &x, 1, 1))->out[0]; }

// s * x + b
static IrValue *affine(AD *ad, IrValue *x, double s, double b) {
  IrNode *n = emit(ad, OP_SCALE, &x, 1, 1);
  ir_set_float(ad->g, n, "s", s);
  ir_set_float(ad->g, n, "b", b);
  return finish(ad, n)->out[0];
}

// y = e^x: dx = dy * y
static void grad_exp(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = op2(ad, OP_MUL, dy[0], n->out[0]);
}

// y = log x: dx = dy / x
static void grad_log(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = op2(ad, OP_DIV, dy[0], n->in[0]);
}

// y = sqrt x: dx = dy / (2 y)
static void grad_sqrt(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = scale(ad, op2(ad, OP_DIV, dy[0], n->out[0]), 0.5);
}

// y = tanh x: dx = dy * (1 - y^2)
static void grad_tanh(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  IrValue *y = n->out[0];
  dx[0] = op2(ad, OP_MUL, dy[0], affine(ad, op2(ad, OP_MUL, y, y), -1.0, 1.0));
}

// y = erf x: dx = dy * 2/sqrt(pi) * exp(-x^2)
static void grad_erf(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  IrValue *x = n->in[0];
  IrValue *e = op1(ad, OP_EXP, scale(ad, op2(ad, OP_MUL, x, x), -1.0));
  dx[0] = scale(ad, op2(ad, OP_MUL, dy[0], e), 1.1283791670955126);
}

// y = max(a, b) (sel = 1) or min(a, b) (sel = -1): the gradient goes to the operand taken, half
// to each at a tie (as PyTorch): dA = dy * (1 + sel * sign(a - b)) / 2, dB = dy - dA's share.
static void grad_select(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx, double sel) {
  IrValue *s = op1(ad, OP_SIGN, op2(ad, OP_SUB, n->in[0], n->in[1]));
  dx[0] = sum_to(ad, op2(ad, OP_MUL, dy[0], affine(ad, s, 0.5 * sel, 0.5)), n->in[0]);
  dx[1] = sum_to(ad, op2(ad, OP_MUL, dy[0], affine(ad, s, -0.5 * sel, 0.5)), n->in[1]);
}
static void grad_max(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  grad_select(ad, n, dy, dx, 1.0);
}
static void grad_min(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  grad_select(ad, n, dy, dx, -1.0);
}

// y = sin x: dx = dy * cos x
static void grad_sin(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = op2(ad, OP_MUL, dy[0], op1(ad, OP_COS, n->in[0]));
}

// y = cos x: dx = -dy * sin x
static void grad_cos(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = scale(ad, op2(ad, OP_MUL, dy[0], op1(ad, OP_SIN, n->in[0])), -1.0);
}

// y = |x|: dx = dy * sign x (0 at 0, as PyTorch)
static void grad_abs(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = op2(ad, OP_MUL, dy[0], op1(ad, OP_SIGN, n->in[0]));
}

// Running sums: each dy_i reaches every x_k it summed, so dx is dy summed the other way.
static void grad_cumsum(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  IrNode *b = emit(ad, OP_CUMSUM, dy, 1, 1);
  copy_attrs(ad, b, n);
  ir_set_int(ad->g, b, "reverse", !ir_attr_i(n, "reverse"));
  dx[0] = finish(ad, b)->out[0];
}

// Ops no gradient flows through: flat in their inputs, or of integers.
#define FLAT(name)                                                                      \
  static void grad_##name(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {        \
    (void)ad, (void)n, (void)dy, (void)dx;                                              \
  }
FLAT(sign)   // y = sign x: flat
FLAT(cast)   // y = float(x) of an integer x
FLAT(equal)  // an i32 mask of integers
FLAT(compare)  // an i32 mask

// y = sigmoid x: dx = dy * y * (1 - y)
static void grad_sigmoid(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  IrValue *y = n->out[0];
  dx[0] = op2(ad, OP_MUL, op2(ad, OP_MUL, dy[0], y), affine(ad, y, -1.0, 1.0));
}

// y = x^p: dx = dy * p * x^(p-1)
static void grad_pow(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  double p = ir_attr_f(n, "p");
  IrValue *x = n->in[0];
  if (p == 0.0)
    return;
  if (p == 1.0) {
    dx[0] = dy[0];
    return;
  }
  IrValue *xp = x;
  if (p != 2.0) {
    IrNode *pw = emit(ad, OP_POW, &x, 1, 1);
    ir_set_float(ad->g, pw, "p", p - 1.0);
    xp = finish(ad, pw)->out[0];
  }
  dx[0] = scale(ad, op2(ad, OP_MUL, dy[0], xp), p);
}

static void grad_gelu_erf(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = op2(ad, OP_GELU_ERF_BWD, dy[0], n->in[0]);
}

static void grad_silu(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = op2(ad, OP_SILU_BWD, dy[0], n->in[0]);
}

// Filled elements do not depend on x: dx = masked_fill(dy, mask) value=0.
static void grad_masked_fill(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  IrValue *in[2] = {dy[0], n->in[1]};
  IrNode *m = emit(ad, OP_MASKED_FILL, in, 2, 1);
  ir_set_float(ad->g, m, "value", 0.0);
  dx[0] = finish(ad, m)->out[0];
}

// Dropout is linear in x: its gradient is the same dropout (same key, same
// step, so the same mask) applied to dy.
static void grad_dropout(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  IrValue *in[2] = {dy[0], n->in[1]};
  IrNode *m = emit(ad, OP_DROPOUT, in, 2, 1);
  copy_attrs(ad, m, n);
  dx[0] = finish(ad, m)->out[0];
}

static void grad_tick(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  (void)ad, (void)n, (void)dy, (void)dx; // no outputs: never reached
}

static void grad_assign(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  (void)ad, (void)n, (void)dy, (void)dx; // no outputs (the update's): never reached
}

static void grad_log_softmax(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  dx[0] = op2(ad, OP_LOG_SOFTMAX_BWD, dy[0], n->out[0]);
}

static void grad_nll_loss(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  IrValue *in[3] = {dy[0], n->in[0], n->in[1]};
  IrNode *b = emit(ad, OP_NLL_LOSS_BWD, in, 3, 1);
  copy_attrs(ad, b, n);
  dx[0] = finish(ad, b)->out[0];
}

static void grad_slice(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {
  IrNode *b = shaped(ad, OP_SLICE_BWD, &dy[0], 1, n->in[0]);
  copy_attrs(ad, b, n);
  dx[0] = finish(ad, b)->out[0];
}

// Backward and optimizer ops are never differentiated (no second order).
#define NO_GRAD(name)                                                                   \
  static void grad_##name(AD *ad, const IrNode *n, IrValue **dy, IrValue **dx) {        \
    (void)dy, (void)dx;                                                                 \
    no_grad(ad, n);                                                                     \
  }
NO_GRAD(conv2d_bwd_data)
NO_GRAD(conv2d_bwd_filter)
NO_GRAD(maxpool2d_bwd)
NO_GRAD(gelu_bwd)
NO_GRAD(relu_bwd)
NO_GRAD(softmax_bwd)
NO_GRAD(layernorm_bwd)
NO_GRAD(rmsnorm_bwd)
NO_GRAD(attention_bwd)
NO_GRAD(embedding_bwd)
NO_GRAD(cross_entropy_bwd)
NO_GRAD(cross_entropy_fused)
NO_GRAD(add_layernorm)
NO_GRAD(gelu_erf_bwd)
NO_GRAD(silu_bwd)
NO_GRAD(log_softmax_bwd)
NO_GRAD(nll_loss_bwd)
NO_GRAD(slice_bwd)
NO_GRAD(adamw)
NO_GRAD(sgd)
NO_GRAD(all_reduce)
NO_GRAD(reduce_scatter)
NO_GRAD(all_gather)
NO_GRAD(comm_wait)
NO_GRAD(unshard)
NO_GRAD(accumulate)
NO_GRAD(tp_gather)
NO_GRAD(tp_slice)
NO_GRAD(tp_reduce_scatter)
NO_GRAD(matmul_bias)
NO_GRAD(matmul_bgrad)
NO_GRAD(summa)
NO_GRAD(summa_nt)
NO_GRAD(summa_tn)
NO_GRAD(vp_cross_entropy)
NO_GRAD(vp_cross_entropy_bwd)
NO_GRAD(to_host)
NO_GRAD(to_device)
NO_GRAD(from_host)
NO_GRAD(copy_wait)

static GradFn *const grad_fns[] = {
#define OP(E, name, nin, nout, kind) grad_##name,
#include "ops.def"
};

// ---- the driver ---------------------------------------------------------------------

// Add a contribution to v's gradient (fan-out accumulates with `add`).
static void accumulate(AD *ad, IrValue *v, IrValue *contrib) {
  if (!contrib || !ad->needs[v->id] || ad->err)
    return;
  IrValue *have = ad->grad[v->id];
  ad->grad[v->id] = have ? op2(ad, OP_ADD, have, contrib) : contrib;
}

// Backward nodes whose outputs nothing reads: the gradient rules give every
// float operand its gradient (a matmul's data operand x too), and accumulate
// keeps only those of values that take one. Taken out last to first, so that a
// chain of them goes, with their values.
static void remove_unread(IrGraph *g) {
  int *reads = calloc((size_t)g->nvalues + 1, sizeof *reads);
  IR_ASSERT(reads);
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i]->nin; k++)
      reads[g->nodes[i]->in[k]->id]++;
  for (int i = 0; i < g->nvalues; i++)
    if (g->values[i]->grad)
      reads[g->values[i]->grad->id]++;
  ir_batch_begin(g);
  for (int i = g->nnodes - 1; i >= 0; i--) {
    IrNode *n = g->nodes[i];
    bool live = n->phase != PHASE_BACKWARD || n->nout == 0;
    for (int k = 0; k < n->nout; k++)
      live |= reads[n->out[k]->id] > 0;
    if (live)
      continue;
    for (int k = 0; k < n->nin; k++)
      reads[n->in[k]->id]--;
    for (int k = 0; k < n->nout; k++)
      n->out[k]->producer = NULL;
    ir_node_remove(g, n);
  }
  ir_batch_end(g);
  ir_remove_unused(g, ROLE_GRAD);
  free(reads);
}

static IrValue **grow(IrValue **p, int n) {
  IrValue **q = realloc(p, (size_t)n * sizeof *q);
  IR_ASSERT(q);
  return q;
}

int pass_autodiff(IrGraph *g, PassCtx *ctx, bool *changed) {
  if (!g->loss)
    return ir_error(ctx->diag, (IrLoc){0},
                    "the model has no loss: add `loss EXPR;` (DSL) or use --loss");
  int nfwd = g->nnodes, cap = g->nvalues * 8 + 64;
  AD ad = {.g = g, .diag = ctx->diag};
  ad.grad = calloc((size_t)cap, sizeof *ad.grad);
  ad.needs = calloc((size_t)cap, sizeof *ad.needs);
  IR_ASSERT(ad.grad && ad.needs);
  // needs[v]: v is a parameter or computed from one.
  for (int i = 0; i < g->nvalues; i++)
    ad.needs[i] = g->values[i]->role == ROLE_PARAM;
  for (int i = 0; i < nfwd; i++) {
    IrNode *n = g->nodes[i];
    bool any = false;
    for (int k = 0; k < n->nin; k++)
      any |= ad.needs[n->in[k]->id];
    for (int k = 0; k < n->nout; k++)
      ad.needs[n->out[k]->id] = any && n->out[k]->dtype == DT_F32;
  }
  if (!ad.needs[g->loss->id]) {
    free(ad.grad), free(ad.needs);
    return ir_error(ctx->diag, g->loss->loc, "the loss does not depend on any parameter");
  }
  // dloss = 1
  IrNode *seed = shaped(&ad, OP_FILL, NULL, 0, g->loss);
  ir_set_float(g, seed, "value", 1.0);
  finish(&ad, seed);
  ad.grad[g->loss->id] = seed->out[0];
  ir_value_rename(g, seed->out[0], "d.loss");
  ir_set_int(g, seed, "loss_seed", 1);   // (passes/lower.c may weigh it)

  IrValue **dy = NULL, **dx = NULL;
  for (int i = nfwd - 1; i >= 0 && !ad.err; i--) {
    IrNode *n = g->nodes[i];
    bool any = false;
    dy = grow(dy, n->nout + 1);
    for (int k = 0; k < n->nout; k++) {
      dy[k] = ad.grad[n->out[k]->id];
      any |= dy[k] != NULL;
      // Name a gradient after the first value it is the gradient of; one
      // passed through unchanged (by add, say) keeps its first name.
      if (dy[k] && dy[k]->producer && dy[k]->producer->phase == PHASE_BACKWARD &&
          dy[k] != ad.grad[g->loss->id] && strncmp(dy[k]->name, "d.", 2) != 0) {
        char name[512];
        snprintf(name, sizeof name, "d.%s", n->out[k]->name);
        ir_value_rename(g, dy[k], name);
      }
    }
    bool wanted = false;
    for (int k = 0; k < n->nin; k++)
      wanted |= ad.needs[n->in[k]->id];
    if (!any || !wanted)
      continue;
    dx = grow(dx, n->nin + 1);
    memset(dx, 0, (size_t)(n->nin + 1) * sizeof *dx);
    ad.fwd = n;
    grad_fns[n->op](&ad, n, dy, dx);
    // The ids of new values exceed cap only for enormous expansions; grow then.
    if (g->nvalues >= cap) {
      int ncap = g->nvalues * 2;
      ad.grad = (IrValue **)grow(ad.grad, ncap);
      ad.needs = realloc(ad.needs, (size_t)ncap);
      IR_ASSERT(ad.needs);
      memset(ad.grad + cap, 0, (size_t)(ncap - cap) * sizeof *ad.grad);
      memset(ad.needs + cap, 0, (size_t)(ncap - cap));
      cap = ncap;
    }
    for (int k = 0; k < n->nin; k++)
      accumulate(&ad, n->in[k], dx[k]);
  }
  for (int i = 0; i < g->nvalues && !ad.err; i++) {
    IrValue *v = g->values[i];
    if (v->role != ROLE_PARAM)
      continue;
    v->grad = ad.grad[v->id];
    if (!v->grad) { // unused parameter: its gradient is zero
      ad.fwd = NULL;
      IrNode *z = shaped(&ad, OP_FILL, NULL, 0, v);
      ir_set_float(g, z, "value", 0.0);
      v->grad = finish(&ad, z)->out[0];
    }
    char name[512];
    snprintf(name, sizeof name, "grad.%s", v->name);
    ir_value_rename(g, v->grad, name);
  }
  free(dy), free(dx), free(ad.grad), free(ad.needs);
  if (!ad.err)
    remove_unread(g);
  g->cur_phase = PHASE_FORWARD;
  ir_set_block(g, NULL);
  g->cur_loc = (IrLoc){0};
  *changed = true;
  return ad.err;
}
