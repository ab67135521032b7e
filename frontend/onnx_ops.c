// ONNX ops as IR ops: fe_conv_<Op>(cx) reads the current node's inputs
// (fe_value: run-time values; fe_known: compile-time ones) and defines its
// outputs. Semantics follow the ONNX operator docs at opsets 13..17; each
// function's comment says which cases mtc takes and how they map.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

// ---- builders ------------------------------------------------------------------------------

// Shape inference with the ONNX op named in the message.
static int infer(FeOnnx *cx, IrNode *n) {
  if (!ir_infer(cx->g, n, cx->d)) {
    for (int i = 0; i < n->nout; i++)
      if (fe_check_size(cx, n->out[i]->rank, n->out[i]->shape))
        return -1;
    return 0;
  }
  cx->failed = true;
  if (cx->d && cx->node) {
    char msg[sizeof cx->d->msg];
    snprintf(msg, sizeof msg, "%.100s: %.1900s", cx->node->op_type, cx->d->msg);
    memcpy(cx->d->msg, msg, sizeof msg);
  }
  return -1;
}

static IrNode *node(FeOnnx *cx, IrOp op, IrValue *const *in, int nin, int nout) {
  return ir_node_new(cx->g, op, in, nin, nout);
}

IrValue *fe_op(FeOnnx *cx, IrOp op, IrValue *a, IrValue *b) {
  IrValue *in[2] = {a, b};
  if (!a || (ir_op_nin(op) == 2 && !b))
    return NULL;
  IrNode *n = node(cx, op, in, b ? 2 : 1, 1);
  return infer(cx, n) ? NULL : n->out[0];
}

// A node whose output shape is given (reshape, broadcast, slice).
static IrValue *shaped(FeOnnx *cx, IrOp op, IrValue *x, int rank, const Sym *const *shape) {
  if (!x)
    return NULL;
  IrNode *n = node(cx, op, &x, 1, 1);
  ir_value_set_shape(n->out[0], rank, shape);
  n->out[0]->dtype = x->dtype;
  return infer(cx, n) ? NULL : n->out[0];
}

static bool same_shape(int rank, const Sym *const *shape, const IrValue *x) {
  if (x->rank != rank)
    return false;
  for (int i = 0; i < rank; i++)
    if (!sym_eq(x->shape[i], shape[i]))
      return false;
  return true;
}

static IrValue *reshape(FeOnnx *cx, IrValue *x, int rank, const Sym *const *shape) {
  if (!x || same_shape(rank, shape, x))
    return x;
  return shaped(cx, OP_RESHAPE, x, rank, shape);
}

static IrValue *broadcast(FeOnnx *cx, IrValue *x, int rank, const Sym *const *shape) {
  if (!x || same_shape(rank, shape, x))
    return x;
  return shaped(cx, OP_BROADCAST, x, rank, shape);
}

// s * x + b (nothing when it is x)
static IrValue *scale(FeOnnx *cx, IrValue *x, double s, double b) {
  if (!x || (s == 1.0 && b == 0.0))
    return x;
  IrNode *n = node(cx, OP_SCALE, &x, 1, 1);
  ir_set_float(cx->g, n, "s", s);
  if (b != 0.0)
    ir_set_float(cx->g, n, "b", b);
  return infer(cx, n) ? NULL : n->out[0];
}

static IrValue *power(FeOnnx *cx, IrValue *x, double p) {
  if (!x || p == 1.0)
    return x;
  IrNode *n = node(cx, OP_POW, &x, 1, 1);
  ir_set_float(cx->g, n, "p", p);
  return infer(cx, n) ? NULL : n->out[0];
}

IrValue *fe_transpose(FeOnnx *cx, IrValue *x, const int64_t *perm) {
  bool id = true;
  for (int i = 0; x && i < x->rank; i++)
    id &= perm[i] == i;
  if (!x || id)
    return x;
  IrNode *n = node(cx, OP_TRANSPOSE, &x, 1, 1);
  ir_set_ints(cx->g, n, "perm", perm, x->rank);
  return infer(cx, n) ? NULL : n->out[0];
}

// Move `axis` to the end (perm) or back (inverse).
static IrValue *axis_last(FeOnnx *cx, IrValue *x, int axis, bool back) {
  int64_t perm[IR_MAXRANK];
  for (int i = 0, j = 0; i < x->rank; i++)
    if (i != axis)
      perm[j++] = i;
  perm[x->rank - 1] = axis;
  if (back) {
    int64_t inv[IR_MAXRANK];
    for (int i = 0; i < x->rank; i++)
      inv[perm[i]] = i;
    return fe_transpose(cx, x, inv);
  }
  return fe_transpose(cx, x, perm);
}

// ---- inputs ------------------------------------------------------------------------------------

// The run-time value of input i (required).
static IrValue *arg(FeOnnx *cx, int i) {
  FeTensor *t = fe_in(cx, i);
  if (!t)
    return fe_err(cx, "input %d is missing", i), NULL;
  return fe_value(cx, t);
}

static IrValue *farg(FeOnnx *cx, int i) {
  IrValue *v = arg(cx, i);
  if (v && v->dtype != DT_F32)
    return fe_err(cx, "input %d '%s' must be float, not integer", i, v->name), NULL;
  return v;
}

// A compile-time input (a shape, axes, a ratio); NULL with an error when it
// is missing or only known at run time.
static FeConst *known_arg(FeOnnx *cx, int i, const char *what) {
  FeTensor *t = fe_in(cx, i);
  if (!t)
    return fe_err(cx, "%s (input %d) is missing", what, i), NULL;
  FeConst *k = fe_known(cx, t);
  if (!k && !cx->failed)
    fe_err(cx, "%s ('%s') must be known at compile time; it depends on run-time values", what,
           t->name);
  return k;
}

// A number known at compile time that is not a parameter (a Constant).
static bool scalar_const(FeOnnx *cx, FeTensor *t, double *c) {
  if (!t || t->tainted || (t->v && !t->k))
    return false;
  FeConst *k = fe_known(cx, t);
  if (!k || k->n != 1)
    return false;
  *c = fe_const_num(k, 0);
  return true;
}

static int set(FeOnnx *cx, IrValue *v) { return fe_set_value(cx, 0, v); }

// ---- elementwise --------------------------------------------------------------------------------

typedef enum Bin { B_ADD, B_SUB, B_MUL, B_DIV } Bin;

// x op c for a constant number c, as a scale (or nothing).
static IrValue *with_number(FeOnnx *cx, Bin op, IrValue *x, double c, bool c_first) {
  switch (op) {
  case B_ADD: return scale(cx, x, 1.0, c);
  case B_SUB: return c_first ? scale(cx, x, -1.0, c) : scale(cx, x, 1.0, -c);
  case B_MUL: return scale(cx, x, c, 0.0);
  default: return c_first ? scale(cx, power(cx, x, -1.0), c, 0.0) : scale(cx, x, 1.0 / c, 0.0);
  }
}

// Input i of an arithmetic op: float, or integers (i32) where the op computes
// on them at run time (Add, Sub, Mul: positions from a padding mask).
static IrValue *num_arg(FeOnnx *cx, int i, bool ints_ok) {
  IrValue *v = arg(cx, i);
  if (v && v->dtype == DT_I32 && !ints_ok)
    return fe_err(cx, "input %d '%s' is an integer tensor; mtc computes %s on integers at run "
                      "time only as Add, Sub and Mul", i, v->name, cx->node->op_type), NULL;
  return v;
}

// Add/Sub/Mul/Div: numpy broadcasting; a constant number operand becomes a
// scale op (x * 0.5, x / 8, 1 + t; on integers an integer number).
static int binary(FeOnnx *cx, Bin op) {
  static const IrOp ops[] = {OP_ADD, OP_SUB, OP_MUL, OP_DIV};
  bool ints_ok = op != B_DIV;
  double c;
  for (int k = 1; k >= 0; k--) {
    if (!scalar_const(cx, fe_in(cx, k), &c))
      continue;
    IrValue *x = num_arg(cx, 1 - k, ints_ok);
    if (x && x->dtype == DT_I32 && (!ir_is_i32(c) || (op == B_SUB && k == 1 && c == INT32_MIN)))
      return fe_err(cx, "computes the integer tensor '%s' with %g, which is not an i32", x->name,
                    c);
    return set(cx, with_number(cx, op, x, c, k == 0));
  }
  IrValue *a = num_arg(cx, 0, ints_ok), *b = a ? num_arg(cx, 1, ints_ok) : NULL;
  if (b && (a->dtype == DT_I32) != (b->dtype == DT_I32))
    return fe_err(cx, "one input is an integer tensor and the other a float one ('%s' %s, '%s' "
                      "%s): cast one of them", a->name, ir_dtype_name(a->dtype), b->name,
                      ir_dtype_name(b->dtype));
  return set(cx, b ? fe_op(cx, ops[op], a, b) : NULL);
}
int fe_conv_Add(FeOnnx *cx) { return binary(cx, B_ADD); }
int fe_conv_Sub(FeOnnx *cx) { return binary(cx, B_SUB); }
int fe_conv_Mul(FeOnnx *cx) { return binary(cx, B_MUL); }
int fe_conv_Div(FeOnnx *cx) { return binary(cx, B_DIV); }

// Min and Max over any number of inputs (broadcasting), left to right.
static int minmax(FeOnnx *cx, IrOp op) {
  IrValue *acc = farg(cx, 0);
  for (int i = 1; acc && i < fe_nin(cx); i++)
    acc = fe_op(cx, op, acc, farg(cx, i));
  return set(cx, acc);
}
int fe_conv_Min(FeOnnx *cx) { return minmax(cx, OP_MIN); }
int fe_conv_Max(FeOnnx *cx) { return minmax(cx, OP_MAX); }

// Pow(x, p) for a constant p.
int fe_conv_Pow(FeOnnx *cx) {
  double p;
  if (!scalar_const(cx, fe_in(cx, 1), &p))
    return fe_err(cx, "the exponent must be a constant number");
  return set(cx, power(cx, farg(cx, 0), p));
}

static int unary(FeOnnx *cx, IrOp op) { return set(cx, fe_op(cx, op, farg(cx, 0), NULL)); }
int fe_conv_Sqrt(FeOnnx *cx) { return unary(cx, OP_SQRT); }
int fe_conv_Exp(FeOnnx *cx) { return unary(cx, OP_EXP); }
int fe_conv_Log(FeOnnx *cx) { return unary(cx, OP_LOG); }
int fe_conv_Tanh(FeOnnx *cx) { return unary(cx, OP_TANH); }
int fe_conv_Erf(FeOnnx *cx) { return unary(cx, OP_ERF); }
int fe_conv_Relu(FeOnnx *cx) { return unary(cx, OP_RELU); }
int fe_conv_Neg(FeOnnx *cx) { return set(cx, scale(cx, farg(cx, 0), -1.0, 0.0)); }
int fe_conv_Reciprocal(FeOnnx *cx) { return set(cx, power(cx, farg(cx, 0), -1.0)); }

int fe_conv_Sigmoid(FeOnnx *cx) { return unary(cx, OP_SIGMOID); }
int fe_conv_Sin(FeOnnx *cx) { return unary(cx, OP_SIN); }
int fe_conv_Cos(FeOnnx *cx) { return unary(cx, OP_COS); }
int fe_conv_Abs(FeOnnx *cx) { return unary(cx, OP_ABS); }
int fe_conv_Sign(FeOnnx *cx) { return unary(cx, OP_SIGN); }

// ---- constants and shapes -------------------------------------------------------------------------

// Constant: value (a tensor), value_float(s), value_int(s).
int fe_conv_Constant(FeOnnx *cx) {
  const Onnx__TensorProto *t = fe_attr_tensor(cx, "value");
  const Onnx__AttributeProto *a;
  if (t)
    return fe_set_const(cx, 0, fe_tensor_proto(cx, t, "value"));
  if ((a = fe_attr(cx, "value_float"))) {
    FeConst *k = fe_const_new(cx, FE_FLOAT, 0, NULL);
    if (k)
      k->f[0] = a->f;
    return fe_set_const(cx, 0, k);
  }
  if ((a = fe_attr(cx, "value_int")))
    return fe_set_const(cx, 0, fe_const_scalar_int(cx, FE_INT64, sym_const(&cx->g->arena, a->i)));
  if ((a = fe_attr(cx, "value_ints")) && a->n_ints <= 64) {
    const Sym *s[64];
    for (size_t i = 0; i < a->n_ints; i++)
      s[i] = sym_const(&cx->g->arena, a->ints[i]);
    return fe_set_const(cx, 0, fe_const_ints(cx, (int)a->n_ints, s));
  }
  if ((a = fe_attr(cx, "value_floats")) && a->n_floats <= FE_SYM_MAX * 1024) {
    const Sym *len = sym_const(&cx->g->arena, (int64_t)a->n_floats);
    FeConst *k = fe_const_new(cx, FE_FLOAT, 1, &len);
    for (size_t i = 0; k && i < a->n_floats; i++)
      k->f[i] = a->floats[i];
    return fe_set_const(cx, 0, k);
  }
  return fe_err(cx, "needs a value, value_float(s) or value_int(s) attribute (at most 64 ints)");
}

// Shape(x) start end: the dims as formulas.
int fe_conv_Shape(FeOnnx *cx) {
  int rank;
  const Sym *shape[IR_MAXRANK];
  int64_t start, end;
  FeTensor *t = fe_in(cx, 0);
  if (!t)
    return fe_err(cx, "input 0 is missing");
  if (fe_shape(cx, t, &rank, shape) || fe_attr_int(cx, "start", 0, &start) ||
      fe_attr_int(cx, "end", rank, &end))
    return -1;
  start = start < 0 ? start + rank : start;
  end = end < 0 ? end + rank : end;
  start = start < 0 ? 0 : start > rank ? rank : start;
  end = end < start ? start : end > rank ? rank : end;
  return fe_set_const(cx, 0, fe_const_ints(cx, (int)(end - start), shape + start));
}

int fe_conv_Size(FeOnnx *cx) {
  int rank;
  const Sym *shape[IR_MAXRANK];
  FeTensor *t = fe_in(cx, 0);
  if (!t || fe_shape(cx, t, &rank, shape))
    return t ? -1 : fe_err(cx, "input 0 is missing");
  const Sym *n = sym_const(&cx->g->arena, 1);
  for (int i = 0; i < rank; i++)
    n = sym_mul(&cx->g->arena, n, shape[i]);
  return fe_set_const(cx, 0, fe_const_scalar_int(cx, FE_INT64, n));
}

// Identity of a run-time value: the same value.
int fe_conv_Identity(FeOnnx *cx) { return set(cx, arg(cx, 0)); }

// A run-time i32 tensor that holds only 0 and 1: a comparison's mask, or a
// view or broadcast of one (DistilBERT's (mask == 0).view(...).expand(...)).
static bool is_mask(IrValue *v) {
  v = ir_view_root(v);
  IrOp op = v->dtype == DT_I32 && v->producer ? v->producer->op : OP_FILL;
  return op == OP_EQUAL || op == OP_COMPARE ||
         ((op == OP_MUL || op == OP_MAX) && is_mask(v->producer->in[0]) &&
          is_mask(v->producer->in[1]));
}

// x == value as an i32 mask.
static IrValue *equal_to(FeOnnx *cx, IrValue *x, int64_t value) {
  IrNode *n = node(cx, OP_EQUAL, &x, 1, 1);
  ir_set_int(cx->g, n, "value", value);
  return infer(cx, n) ? NULL : n->out[0];
}

// Cast at run time: float stays float, integers stay integers (i32), a mask is
// its own bool, an integer tensor becomes float (a 0/1 attention mask: an
// integer input cast so is fed as a padding mask), and any other tensor cast
// to bool becomes the mask x != 0, (x == 0) == 0 (Hugging Face's padding-mask
// builder: masked_fill(inverted.to(bool), finfo.min)).
int fe_conv_Cast(FeOnnx *cx) {
  int64_t to;
  IrValue *x = arg(cx, 0);
  if (!x || fe_attr_int(cx, "to", 0, &to))
    return -1;
  if ((x->dtype == DT_F32 && fe_is_float_type((int)to)) ||
      (x->dtype == DT_I32 && fe_is_int_type((int)to) && (to != FE_BOOL || is_mask(x))))
    return set(cx, x);
  if (to == FE_BOOL) {  // a float, or integers that are not a mask already
    IrValue *zero = equal_to(cx, x, 0);
    return set(cx, zero ? equal_to(cx, zero, 0) : NULL);
  }
  if (x->dtype == DT_I32 && fe_is_float_type((int)to)) {
    fe_note_use(x, FE_USE_MASK, sym_const(&cx->g->arena, 2));
    return set(cx, fe_op(cx, OP_CAST, x, NULL));
  }
  return fe_err(cx, "cannot cast the run-time %s tensor '%s' to %s", ir_dtype_name(x->dtype),
                x->name, fe_type_name((int)to));
}

int fe_conv_Reshape(FeOnnx *cx) {
  IrValue *x = arg(cx, 0);
  FeConst *target = x ? known_arg(cx, 1, "the target shape") : NULL;
  int64_t allowzero;
  int rank;
  const Sym *shape[IR_MAXRANK];
  if (!target || fe_attr_int(cx, "allowzero", 0, &allowzero) ||
      fe_reshape_target(cx, x->rank, x->shape, target, allowzero, &rank, shape))
    return -1;
  return set(cx, reshape(cx, x, rank, shape));
}

int fe_conv_Flatten(FeOnnx *cx) {
  IrValue *x = arg(cx, 0);
  int64_t axis;
  int a;
  if (!x || fe_attr_int(cx, "axis", 1, &axis) || fe_axis(cx, axis, x->rank + 1, &a))
    return -1;
  const Sym *shape[2] = {sym_const(&cx->g->arena, 1), sym_const(&cx->g->arena, 1)};
  for (int i = 0; i < x->rank; i++)
    shape[i >= a] = sym_mul(&cx->g->arena, shape[i >= a], x->shape[i]);
  return set(cx, reshape(cx, x, 2, shape));
}

// Axes of (Un)Squeeze: the second input (opset 13+); n = -1 when absent.
static int axes_input(FeOnnx *cx, int64_t *axes, int *n) {
  *n = -1;
  if (!fe_in(cx, 1))
    return 0;
  FeConst *k = known_arg(cx, 1, "axes");
  return k ? fe_const_int_list(cx, k, "axes", axes, n, IR_MAXRANK) : -1;
}

int fe_conv_Unsqueeze(FeOnnx *cx) {
  IrValue *x = arg(cx, 0);
  int64_t axes[IR_MAXRANK];
  int n, rank;
  const Sym *shape[IR_MAXRANK];
  if (!x || axes_input(cx, axes, &n))
    return -1;
  if (n < 0)
    return fe_err(cx, "needs axes");
  if (fe_unsqueeze_shape(cx, x->rank, x->shape, axes, n, &rank, shape))
    return -1;
  return set(cx, reshape(cx, x, rank, shape));
}

int fe_conv_Squeeze(FeOnnx *cx) {
  IrValue *x = arg(cx, 0);
  int64_t axes[IR_MAXRANK];
  int n, rank;
  const Sym *shape[IR_MAXRANK];
  if (!x || axes_input(cx, axes, &n) || fe_squeeze_shape(cx, x->rank, x->shape, axes, n, &rank, shape))
    return -1;
  return set(cx, reshape(cx, x, rank, shape));
}

int fe_conv_Transpose(FeOnnx *cx) {
  IrValue *x = arg(cx, 0);
  const int64_t *p;
  int n;
  if (!x || fe_attr_ints(cx, "perm", &p, &n))
    return -1;
  int64_t perm[IR_MAXRANK];
  if (n >= 0 && n != x->rank)
    return fe_err(cx, "perm has %d entries for a rank-%d input", n, x->rank);
  for (int i = 0; i < x->rank; i++)
    perm[i] = n < 0 ? x->rank - 1 - i : p[i];
  return set(cx, fe_transpose(cx, x, perm));
}

// Expand(x, shape): numpy broadcast against the shape.
int fe_conv_Expand(FeOnnx *cx) {
  IrValue *x = arg(cx, 0);
  FeConst *k = x ? known_arg(cx, 1, "the shape") : NULL;
  int64_t v[IR_MAXRANK];
  int n, r;
  const Sym *want[IR_MAXRANK], *shape[IR_MAXRANK];
  if (!k || fe_const_int_list(cx, k, "shape", v, &n, IR_MAXRANK))
    return -1;
  for (int i = 0; i < n; i++)
    want[i] = fe_const_sym(cx, k, i);
  if (fe_broadcast(cx, x->rank, x->shape, n, want, &r, shape))
    return -1;
  return set(cx, broadcast(cx, x, r, shape));
}

int fe_conv_Concat(FeOnnx *cx) {
  int64_t axis;
  int n = fe_nin(cx), a;
  if (n < 1 || n > 256)
    return fe_err(cx, "needs 1 to 256 inputs");
  IrValue **in = calloc((size_t)n, sizeof *in);
  IR_ASSERT(in);
  int rc = 0;
  for (int i = 0; i < n && !rc; i++)
    rc = (in[i] = arg(cx, i)) ? 0 : -1;
  if (!rc)
    rc = fe_attr_int(cx, "axis", 0, &axis) || fe_axis(cx, axis, in[0]->rank, &a);
  IrValue *out = NULL;
  if (!rc && n == 1) {
    out = in[0];
  } else if (!rc) {
    IrNode *c = node(cx, OP_CONCAT, in, n, 1);
    ir_set_int(cx->g, c, "axis", a);
    out = infer(cx, c) ? NULL : c->out[0];
  }
  free(in);
  return rc ? -1 : set(cx, out);
}

// Split(x, split) axis: the sizes from `split`, or equal parts.
int fe_conv_Split(FeOnnx *cx) {
  IrValue *x = arg(cx, 0);
  int64_t axis, sizes[64];
  int a, n = fe_nout(cx);
  if (!x || fe_attr_int(cx, "axis", 0, &axis) || fe_axis(cx, axis, x->rank, &a))
    return -1;
  const Sym *parts[64];
  FeConst *k = fe_in(cx, 1) ? known_arg(cx, 1, "split") : NULL;
  if ((fe_in(cx, 1) && !k) || fe_split_sizes(cx, k, x->shape[a], a, n, parts, sizes))
    return -1;
  IrNode *s = node(cx, OP_SPLIT, &x, 1, n);
  ir_set_int(cx->g, s, "axis", a);
  ir_set_syms(cx->g, s, "sizes", parts, n);
  if (infer(cx, s))
    return -1;
  for (int i = 0; i < n; i++)
    if (fe_set_value(cx, i, s->out[i]))
      return -1;
  return 0;
}

// x[start : start + len*step : step] along one axis.
static IrValue *slice(FeOnnx *cx, IrValue *x, int axis, int64_t start, int64_t step, const Sym *len) {
  const Sym *shape[IR_MAXRANK];
  memcpy(shape, x->shape, sizeof shape);
  shape[axis] = len;
  IrNode *n = node(cx, OP_SLICE, &x, 1, 1);
  ir_value_set_shape(n->out[0], x->rank, shape);
  ir_set_int(cx->g, n, "axis", axis);
  ir_set_int(cx->g, n, "start", start);
  if (step != 1)
    ir_set_int(cx->g, n, "step", step);
  return infer(cx, n) ? NULL : n->out[0];
}

// Pad's arguments for x of rank r: the mode (constant only), each padded
// axis's pads at its start and end (negative: cut), and the value. pads, the
// value and axes are inputs from opset 11 on, attributes before.
static int pad_args(FeOnnx *cx, int r, int64_t *axes, int64_t *begin, int64_t *end, int *na,
                    double *value) {
  const char *mode;
  if (fe_attr_str(cx, "mode", "constant", &mode))
    return -1;
  if (strcmp(mode, "constant"))
    return fe_err(cx, "mode '%s': mtc pads with a constant only (mode 'constant')", mode);
  int64_t pads[2 * IR_MAXRANK];
  int np;
  *value = 0.0;
  if (fe_in(cx, 1)) {
    FeConst *k = known_arg(cx, 1, "pads");
    if (!k || fe_const_int_list(cx, k, "pads", pads, &np, 2 * IR_MAXRANK))
      return -1;
    FeConst *v = fe_in(cx, 2) ? known_arg(cx, 2, "the constant value") : NULL;
    if (fe_in(cx, 2) && !v)
      return -1;
    if (v && v->n != 1)
      return fe_err(cx, "the constant value has %lld elements, not 1", (long long)v->n);
    *value = v ? fe_const_num(v, 0) : 0.0;
  } else {
    const int64_t *a;
    if (fe_attr_ints(cx, "pads", &a, &np) || fe_attr_float(cx, "value", 0.0, value))
      return -1;
    if (np < 0)
      return fe_err(cx, "needs pads");
    if (np > 2 * IR_MAXRANK)
      return fe_err(cx, "%d pads for at most %d dims", np, IR_MAXRANK);
    memcpy(pads, a, (size_t)np * sizeof *pads);
  }
  int nax = r;
  if (fe_in(cx, 3)) {
    FeConst *k = known_arg(cx, 3, "axes");
    if (!k || fe_const_int_list(cx, k, "axes", axes, &nax, IR_MAXRANK))
      return -1;
  } else {
    for (int i = 0; i < r; i++)
      axes[i] = i;
  }
  if (np != 2 * nax)
    return fe_err(cx, "%d pads for %d axes (2 an axis: all starts, then all ends)", np, nax);
  for (int i = 0; i < nax; i++) {
    int a;
    if (fe_axis(cx, axes[i], r, &a))
      return -1;
    axes[i] = a, begin[i] = pads[i], end[i] = pads[nax + i];
  }
  *na = nax;
  return 0;
}

// A tensor like x with axis a of size len, every element value (made at run time).
static IrValue *filled(FeOnnx *cx, const IrValue *x, int a, int64_t len, double value) {
  const Sym *shape[IR_MAXRANK];
  memcpy(shape, x->shape, sizeof shape);
  shape[a] = sym_const(&cx->g->arena, len);
  IrNode *n = node(cx, OP_FILL, NULL, 0, 1);
  ir_value_set_shape(n->out[0], x->rank, shape);
  n->out[0]->dtype = x->dtype;
  ir_set_float(cx->g, n, "value", value);
  return infer(cx, n) ? NULL : n->out[0];
}

static IrValue *slice(FeOnnx *cx, IrValue *x, int axis, int64_t start, int64_t step, const Sym *len);

// Pad(x, pads, constant_value, axes), mode constant, pads known: per axis, a
// slice where a pad is negative, then a concat with blocks of the value where
// one is positive (Swin pads its windows so; their gradients are the slice's
// and the concat's).
int fe_conv_Pad(FeOnnx *cx) {
  IrValue *x = arg(cx, 0);
  int64_t axes[IR_MAXRANK], begin[IR_MAXRANK], end[IR_MAXRANK];
  int na = 0;
  double value;
  if (!x || pad_args(cx, x->rank, axes, begin, end, &na, &value))
    return -1;
  for (int i = 0; i < na && x; i++) {
    int a = (int)axes[i];
    int64_t dim;
    if (fe_eval(cx, x->shape[a], &dim))
      return -1;
    // (compared before a negative pad is negated: the file may hold INT64_MIN)
    if (begin[i] <= -dim || end[i] <= -dim ||
        dim + (begin[i] < 0 ? begin[i] : 0) + (end[i] < 0 ? end[i] : 0) < 1)
      return fe_err(cx, "pads %lld and %lld leave nothing of axis %d (%lld)",
                    (long long)begin[i], (long long)end[i], a, (long long)dim);
    int64_t cut0 = begin[i] < 0 ? -begin[i] : 0, cut1 = end[i] < 0 ? -end[i] : 0;
    if (cut0 || cut1)
      x = slice(cx, x, a, cut0, 1, sym_const(&cx->g->arena, dim - cut0 - cut1));
    if (x && (begin[i] > 0 || end[i] > 0)) {
      IrValue *parts[3];
      int n = 0;
      if (begin[i] > 0)
        parts[n++] = filled(cx, x, a, begin[i], value);
      parts[n++] = x;
      if (end[i] > 0)
        parts[n++] = filled(cx, x, a, end[i], value);
      for (int k = 0; k < n; k++)
        if (!parts[k])
          return -1;
      IrNode *c = node(cx, OP_CONCAT, parts, n, 1);
      ir_set_int(cx->g, c, "axis", a);
      x = infer(cx, c) ? NULL : c->out[0];
    }
  }
  return set(cx, x);
}

// Slice(x, starts, ends, axes, steps): one slice op per axis that changes.
int fe_conv_Slice(FeOnnx *cx) {
  IrValue *x = arg(cx, 0);
  FeConst *k[4] = {0};
  for (int i = 1; x && i < 5; i++)
    if (fe_in(cx, i) && !(k[i - 1] = known_arg(cx, i, "a slice bound")))
      return -1;
  FeSliceAxis ax[IR_MAXRANK];
  int n;
  if (!x || !k[0] || !k[1] || fe_slice_axes(cx, x->rank, x->shape, k, ax, &n))
    return x && (!k[0] || !k[1]) ? fe_err(cx, "needs starts and ends") : -1;
  for (int i = 0; i < n && x; i++) {
    int64_t len, dim;
    if (fe_eval(cx, ax[i].len, &len) || fe_eval(cx, x->shape[ax[i].axis], &dim))
      return -1;
    if (ax[i].start == 0 && ax[i].step == 1 && len == dim)
      continue;
    if (ax[i].step < 1)
      return fe_err(cx, "reversed slices (step %lld) are not supported", (long long)ax[i].step);
    if (len == 0)
      return fe_err(cx, "the slice along axis %d is empty", ax[i].axis);
    x = slice(cx, x, ax[i].axis, ax[i].start, ax[i].step, ax[i].len);
  }
  return set(cx, x);
}

// Does map (ScatterND's, over data of dims xd) write the slab [s, s + m) of axis a, updates in
// its order (viewed as data's dims with dim a = m), and nothing else?
static bool scatter_slab(const int64_t *map, int64_t n, int rank, const int64_t *xd, int a,
                         int64_t *s, int64_t *m) {
  int64_t inner = 1, lo = -1, hi = -1;
  for (int i = a + 1; i < rank; i++)
    inner *= xd[i];
  for (int64_t i = 0; i < n; i++)
    if (map[i] >= 0) {
      int64_t c = i / inner % xd[a];
      lo = lo < 0 || c < lo ? c : lo;
      hi = c + 1 > hi ? c + 1 : hi;
    }
  if (lo < 0)
    return false;
  *s = lo, *m = hi - lo;
  for (int64_t i = 0; i < n; i++) {
    int64_t c = i / inner % xd[a], outer = i / inner / xd[a], e = i % inner;
    bool in = c >= lo && c < hi;
    if (in ? map[i] != (outer * *m + c - lo) * inner + e : map[i] != -1)
      return false;
  }
  return true;
}

// ScatterND(data, indices, updates) at run time with known indices, as
// torch.onnx writes x[..., s:s+m] = y: a concat along that axis of data's
// head, updates and data's tail (T5's decoder inputs: the start token, then
// labels[:, :-1]). Other patterns of indices are refused.
int fe_conv_ScatterND(FeOnnx *cx) {
  IrValue *x = arg(cx, 0);
  FeConst *idx = x ? known_arg(cx, 1, "the indices") : NULL;
  IrValue *u = idx ? arg(cx, 2) : NULL;
  int64_t *map, n, xd[IR_MAXRANK], s = 0, m = 0;
  if (!u || fe_scatter_map(cx, x->rank, x->shape, idx, u->rank, u->shape, &map, &n))
    return -1;
  if (x->dtype != u->dtype)
    return fe_err(cx, "data '%s' is %s but updates '%s' are %s", x->name, ir_dtype_name(x->dtype),
                  u->name, ir_dtype_name(u->dtype));
  for (int i = 0; i < x->rank; i++)
    if (fe_eval(cx, x->shape[i], &xd[i]))
      return -1;
  int a = 0;
  while (a < x->rank && !scatter_slab(map, n, x->rank, xd, a, &s, &m))
    a++;
  bool none = true;
  for (int64_t i = 0; i < n; i++)
    none &= map[i] < 0;
  if (none)
    return set(cx, x);
  if (a == x->rank)
    return fe_err(cx, "mtc runs ScatterND when it writes one contiguous range of one axis "
                      "(x[..., a:b] = y); these indices write another pattern (build the tensor "
                      "with torch.cat instead)");
  IrArena *ar = &cx->g->arena;
  const Sym *dim = x->shape[a], *shape[IR_MAXRANK];
  bool tail = s + m < xd[a];
  memcpy(shape, x->shape, sizeof shape);
  shape[a] = tail ? sym_const(ar, m) : sym_sub(ar, dim, sym_const(ar, s));
  IrValue *in[3];
  int k = 0;
  if (s > 0)
    in[k++] = slice(cx, x, a, 0, 1, sym_const(ar, s));
  in[k++] = reshape(cx, u, x->rank, shape);
  if (tail)
    in[k++] = slice(cx, x, a, s + m, 1, sym_sub(ar, dim, sym_const(ar, s + m)));
  for (int i = 0; i < k; i++)
    if (!in[i])
      return -1;
  if (k == 1)
    return set(cx, in[0]);
  IrNode *c = node(cx, OP_CONCAT, in, k, 1);
  ir_set_int(cx->g, c, "axis", a);
  return set(cx, infer(cx, c) ? NULL : c->out[0]);
}

// Known indices that step evenly (start, start+step, ...), or false.
static bool progression(const FeConst *k, int64_t dim, int64_t *start, int64_t *step) {
  if (!k->i || k->n < 1)
    return false;
  int64_t a = k->i[0] < 0 ? k->i[0] + dim : k->i[0];
  int64_t b = k->n > 1 ? (k->i[1] < 0 ? k->i[1] + dim : k->i[1]) : a + 1;
  *start = a;
  *step = b - a;
  if (a < 0 || *step < 1)
    return false;
  for (int64_t i = 0; i < k->n; i++) {
    int64_t v = k->i[i] < 0 ? k->i[i] + dim : k->i[i];
    if (v != a + i * *step || v >= dim)
      return false;
  }
  return true;
}

// Gather(data, indices) axis: an embedding lookup (run-time indices into a
// [V, C] table), or a slice when the indices are known and evenly spaced
// (wpe[arange(T)] is the first T rows; x[:, -1] one row; token ids too).
int fe_conv_Gather(FeOnnx *cx) {
  int64_t axis;
  int a;
  IrValue *x = arg(cx, 0);
  FeTensor *ti = fe_in(cx, 1);
  if (!x || !ti || fe_attr_int(cx, "axis", 0, &axis) || fe_axis(cx, axis, x->rank, &a))
    return x && !ti ? fe_err(cx, "needs indices") : -1;
  FeConst *k = ti->k || ti->lazy ? fe_known(cx, ti) : NULL;
  int64_t dim, start, step;
  if (fe_eval(cx, x->shape[a], &dim))
    return -1;
  if (k && progression(k, dim, &start, &step)) {
    const Sym *len = sym_const(&cx->g->arena, 1), *shape[IR_MAXRANK];
    for (int i = 0; i < k->rank; i++)
      len = sym_mul(&cx->g->arena, len, k->shape[i]);
    int r;
    IrValue *s = slice(cx, x, a, start, step, len);
    if (!s || fe_gather_shape(cx, x->rank, x->shape, a, k->rank, k->shape, &r, shape))
      return -1;
    return set(cx, reshape(cx, s, r, shape));
  }
  IrValue *idx = fe_value(cx, ti);
  if (!idx)
    return -1;
  if (a != 0 || x->rank != 2 || idx->dtype != DT_I32 || x->dtype != DT_F32)
    return fe_err(cx, "mtc reads Gather as an embedding lookup (integer indices into a [V, C] "
                      "table along axis 0) or as evenly spaced known indices");
  fe_note_use(idx, FE_USE_INDICES, x->shape[0]);
  return set(cx, fe_op(cx, OP_EMBEDDING, x, idx));
}

// mask ? value : x
static IrValue *masked(FeOnnx *cx, IrValue *x, IrValue *mask, double value) {
  if (!x || !mask)
    return NULL;
  IrValue *in[2] = {x, mask};
  IrNode *n = node(cx, OP_MASKED_FILL, in, 2, 1);
  ir_set_float(cx->g, n, "value", value);
  return infer(cx, n) ? NULL : n->out[0];
}

// The negation of a known condition, as an i32 constant.
static IrValue *negated(FeOnnx *cx, FeTensor *tc, const FeConst *c) {
  FeConst *nc = fe_const_new(cx, FE_BOOL, c->rank, c->shape);
  if (!nc)
    return NULL;
  for (int64_t i = 0; i < c->n; i++)
    nc->i[i] = !c->i[i];
  char name[300];
  snprintf(name, sizeof name, "%.280s.not", tc->name);
  return fe_const_value(cx, nc, name);
}

// Equal(x, c) at run time: x integers (token ids), c a known number: an i32
// mask (x == c), for a Where to read (T5 replaces the ignored labels -100 of
// its decoder inputs by the pad id).
// Equal, Less, LessOrEqual, Greater, GreaterOrEqual at run time: a compare into an i32 mask,
// numpy broadcasting, of two floats or two integers (either may be known: a constant).
static int compare(FeOnnx *cx, int cmp) {
  IrValue *a = arg(cx, 0), *b = a ? arg(cx, 1) : NULL;
  if (!b)
    return -1;
  if (ir_is_float(a->dtype) != ir_is_float(b->dtype))
    return fe_err(cx, "compares '%s' (%s) with '%s' (%s); mtc compares two floats or two "
                      "integers", a->name, ir_dtype_name(a->dtype), b->name,
                  ir_dtype_name(b->dtype));
  IrValue *in[2] = {a, b};
  IrNode *n = node(cx, OP_COMPARE, in, 2, 1);
  ir_set_int(cx->g, n, "cmp", cmp);
  return set(cx, infer(cx, n) ? NULL : n->out[0]);
}

// Equal with a known integer (token ids against -100, a mask against 0) is an equal op, which
// the fusions read as a mask; any other a compare.
int fe_conv_Equal(FeOnnx *cx) {
  FeTensor *ta = fe_in(cx, 0), *tb = fe_in(cx, 1);
  double c;
  bool kb = scalar_const(cx, tb, &c), ka = !kb && scalar_const(cx, ta, &c);
  if ((ka || kb) && ir_is_i32(c)) {
    IrValue *x = arg(cx, ka ? 1 : 0);
    return set(cx, x ? equal_to(cx, x, (int64_t)c) : NULL);
  }
  return compare(cx, 0);
}
int fe_conv_Less(FeOnnx *cx) { return compare(cx, 1); }
int fe_conv_LessOrEqual(FeOnnx *cx) { return compare(cx, 2); }
int fe_conv_Greater(FeOnnx *cx) { return compare(cx, 3); }
int fe_conv_GreaterOrEqual(FeOnnx *cx) { return compare(cx, 4); }

// Not, And, Or of run-time masks (0/1 i32): 1 - x as x == 0, a * b, max(a, b). Each result
// is a mask again (RoBERTa's positions keep input_ids != pad, as Not(Equal)).
static IrValue *mask_arg(FeOnnx *cx, int i) {
  IrValue *v = arg(cx, i);
  if (v && !is_mask(v))
    return fe_err(cx, "input %d '%s' must be a run-time mask (from Equal, Not, And or Or)", i,
                  v->name), NULL;
  return v;
}
int fe_conv_Not(FeOnnx *cx) {
  IrValue *x = mask_arg(cx, 0);
  return set(cx, x ? equal_to(cx, x, 0) : NULL);
}
static int mask_binary(FeOnnx *cx, IrOp op) {
  IrValue *a = mask_arg(cx, 0), *b = a ? mask_arg(cx, 1) : NULL;
  return set(cx, b ? fe_op(cx, op, a, b) : NULL);
}
int fe_conv_And(FeOnnx *cx) { return mask_binary(cx, OP_MUL); }
int fe_conv_Or(FeOnnx *cx) { return mask_binary(cx, OP_MAX); }

// CumSum(x, axis) exclusive reverse at run time, on floats or integers (OPT's and RoBERTa's
// positions: the running count of the tokens that are not padding).
int fe_conv_CumSum(FeOnnx *cx) {
  IrValue *x = arg(cx, 0);
  FeConst *k = x ? known_arg(cx, 1, "the axis") : NULL;
  int64_t exclusive, reverse;
  int a;
  if (!k || fe_attr_int(cx, "exclusive", 0, &exclusive) ||
      fe_attr_int(cx, "reverse", 0, &reverse))
    return -1;
  if (k->n != 1)
    return fe_err(cx, "the axis must be one number");
  if (x->rank == 0)
    return fe_err(cx, "input '%s' is a scalar; CumSum runs along an axis", x->name);
  if (fe_axis(cx, fe_const_int(k, 0), x->rank, &a))
    return -1;
  IrNode *n = node(cx, OP_CUMSUM, &x, 1, 1);
  ir_set_int(cx->g, n, "axis", a);
  ir_set_int(cx->g, n, "exclusive", exclusive != 0);
  ir_set_int(cx->g, n, "reverse", reverse != 0);
  return set(cx, infer(cx, n) ? NULL : n->out[0]);
}

// A reduction's keepdims, noop_with_empty_axes and axes (from input 1, or the attribute
// below opset 18's ReduceSum); *n = -1: none given.
static int reduce_args(FeOnnx *cx, bool axes_from_input, int64_t *keep, int64_t *noop,
                       int64_t *axes, int *n) {
  *n = -1;
  if (fe_attr_int(cx, "keepdims", 1, keep) || fe_attr_int(cx, "noop_with_empty_axes", 0, noop))
    return -1;
  if (axes_from_input && fe_in(cx, 1)) {
    FeConst *k = known_arg(cx, 1, "axes");
    return !k || fe_const_int_list(cx, k, "axes", axes, n, IR_MAXRANK) ? -1 : 0;
  }
  return axes_from_input ? 0 : fe_attr_axes(cx, axes, n);
}

// ---- selections by a run-time mask: x[mask] ----------------------------------------------
//
// torch exports x[mask] as GatherND(x, Transpose(NonZero(mask))): K elements, K known at run
// time only. mtc keeps x whole and the mask beside it (FeSel), runs elementwise ops on the
// whole tensors, and reads the selection's mean or sum as that of the kept elements (the
// others filled with 0 first, so that they reach neither the result nor, where their
// derivatives are finite, the gradient): ELECTRA's loss over the positions its
// attention_mask keeps, BCE(logits[m], labels[m]).

static void set_selection(FeOnnx *cx, FeSel sel, IrValue *mask, IrValue *v) {
  if (!fe_out_wanted(cx, 0))
    return;
  if (v)
    fe_set_value(cx, 0, v);
  FeTensor *t = fe_out(cx, 0);
  t->sel = sel;
  t->sel_mask = mask;
}

// NonZero(mask), a mask known at run time: its indices, for a GatherND.
int fe_conv_NonZero(FeOnnx *cx) {
  IrValue *m = arg(cx, 0);
  if (m && !is_mask(m))
    return fe_err(cx, "mtc runs NonZero of a run-time mask (from Equal, Not, And or Or) whose "
                      "indices select elements (x[mask]); '%s' is not one", m->name);
  if (m)
    set_selection(cx, FE_SEL_INDICES, m, NULL);
  return m ? 0 : -1;
}

// GatherND with indices other than a mask's (the case mtc runs goes through
// fe_convert_selected).
int fe_conv_GatherND(FeOnnx *cx) {
  return fe_err(cx, "mtc runs GatherND only to select elements by a run-time mask, as x[mask] "
                    "exports: with the indices Transpose(NonZero(mask)) of a mask shaped as x");
}

static bool elementwise_op(const char *op) {
  static const char *const ops[] = {"Abs", "Add", "Cast", "Cos", "Div", "Erf", "Exp", "Identity",
                                    "Log", "Max", "Min", "Mul", "Neg", "Pow", "Reciprocal",
                                    "Relu", "Sigmoid", "Sign", "Sin", "Sqrt", "Sub", "Tanh", NULL};
  for (int i = 0; ops[i]; i++)
    if (!strcmp(op, ops[i]))
      return true;
  return false;
}

// The indices of NonZero(mask) transposed ([K, rank]) and GatherND of a tensor of the mask's
// shape by them: the selection of its elements.
static int select_by_indices(FeOnnx *cx, const char *op, FeTensor *idx) {
  IrValue *m = idx->sel_mask;
  if (!strcmp(op, "Transpose") && idx->sel == FE_SEL_INDICES) {
    const int64_t *perm;
    int n;
    if (fe_attr_ints(cx, "perm", &perm, &n))
      return -1;
    if (n == -1 || (n == 2 && perm[0] == 1 && perm[1] == 0))
      return set_selection(cx, FE_SEL_INDICES_T, m, NULL), 0;
  }
  int64_t bd;
  FeTensor *td = fe_in(cx, 0);
  if (!strcmp(op, "GatherND") && idx->sel == FE_SEL_INDICES_T && fe_in(cx, 1) == idx && td &&
      !td->sel && !fe_attr_int(cx, "batch_dims", 0, &bd) && bd == 0) {
    IrValue *x = fe_value(cx, td);
    if (!x)
      return -1;
    if (!ir_same_shape(x, m))
      return fe_err(cx, "selects elements of '%s' %s by the mask '%s' %s: mtc selects by a "
                        "mask of the tensor's own shape", x->name, ir_shape_str(cx->g, x),
                    m->name, ir_shape_str(cx->g, m));
    set_selection(cx, FE_SEL_ELEMENTS, m, x);
    return 0;
  }
  return fe_err(cx, "reads the indices of NonZero of the run-time mask '%s'; mtc reads them "
                    "only transposed ([K, rank]) into a GatherND that selects elements (x[mask])",
                m->name);
}

// ReduceMean or ReduceSum of every selected element: the sum of the kept elements (the others
// filled with 0), over the count of them for a mean.
static int reduce_selected(FeOnnx *cx, const char *op, FeTensor *t) {
  int64_t keep, noop, axes[IR_MAXRANK];
  int n;
  if (reduce_args(cx, !strcmp(op, "ReduceSum"), &keep, &noop, axes, &n))
    return -1;
  if ((n <= 0 && noop) || n > 1 || (n == 1 && axes[0] != 0 && axes[0] != -1))
    return fe_err(cx, "reduces the selection '%s' (x[mask]) in part; mtc reduces it whole",
                  t->name);
  IrValue *x = t->v, *m = t->sel_mask;
  IrValue *kept = fe_op(cx, OP_SUM, masked(cx, x, equal_to(cx, m, 0), 0.0), NULL);
  if (kept && !strcmp(op, "ReduceMean")) {
    IrValue *count = fe_op(cx, OP_SUM, fe_op(cx, OP_CAST, m, NULL), NULL);
    kept = count ? fe_op(cx, OP_DIV, kept, count) : NULL;
  }
  const Sym *one = sym_const(&cx->g->arena, 1);
  return set(cx, keep ? reshape(cx, kept, 1, &one) : kept);
}

int fe_convert_selected(FeOnnx *cx, const char *op, int (*conv)(FeOnnx *cx)) {
  FeTensor *sel = NULL;
  for (int i = 0; i < fe_nin(cx); i++) {
    FeTensor *t = fe_in(cx, i);
    if (!t || !t->sel)
      continue;
    if (sel && (t->sel != sel->sel || t->sel_mask != sel->sel_mask))
      return fe_err(cx, "reads '%s' and '%s', selections by two masks or of two kinds; mtc "
                        "computes with elements selected by one mask", sel->name, t->name);
    sel = sel ? sel : t;
  }
  if (sel->sel != FE_SEL_ELEMENTS)
    return select_by_indices(cx, op, sel);
  if (!strcmp(op, "ReduceMean") || !strcmp(op, "ReduceSum"))
    return reduce_selected(cx, op, sel);
  double c;
  bool ok = elementwise_op(op) && conv && fe_nout(cx) == 1;
  for (int i = 0; ok && i < fe_nin(cx); i++) {
    FeTensor *t = fe_in(cx, i);
    ok = !t || t->sel || scalar_const(cx, t, &c);
  }
  if (!ok)
    return fe_err(cx, "reads '%s', the elements the run-time mask '%s' selects (x[mask], from "
                      "NonZero and GatherND); mtc computes with them only elementwise (with "
                      "numbers) into a ReduceMean or ReduceSum of all of them", sel->name,
                  sel->sel_mask->name);
  if (conv(cx))
    return -1;
  set_selection(cx, FE_SEL_ELEMENTS, sel->sel_mask, NULL);
  return 0;
}

// Where(cond, c, y) with cond a run-time mask (Equal) and c a known number:
// masked_fill(y, cond) value=c, on floats or integers.
static int where_at_run_time(FeOnnx *cx, FeTensor *tc, FeTensor *tx) {
  IrValue *cond = fe_value(cx, tc);
  double vx;
  if (!cond)
    return -1;
  if (!scalar_const(cx, tx, &vx))
    return fe_err(cx, "the condition '%s' is only known at run time; mtc then takes x as a known "
                      "number (Where(mask, c, y)), which '%s' is not", tc->name, tx->name);
  IrValue *y = arg(cx, 2);
  if (!y)
    return -1;
  if (!is_mask(cond))
    return fe_err(cx, "the run-time condition '%s' must come from Equal", tc->name);
  if (y->dtype == DT_F32)  // filling scores: an integer input compared is a padding mask
    fe_note_use(ir_view_root(cond)->producer->in[0], FE_USE_MASK, sym_const(&cx->g->arena, 2));
  if (y->dtype == DT_I32 && !ir_is_i32(vx))
    return fe_err(cx, "fills the integer tensor '%s' with %g, which is not an i32", y->name, vx);
  const Sym *shape[IR_MAXRANK];
  int r;
  if (fe_broadcast(cx, cond->rank, cond->shape, y->rank, y->shape, &r, shape))
    return -1;
  return set(cx, masked(cx, broadcast(cx, y, r, shape), cond, vx));
}

// Where(cond, x, y) with cond known at compile time (a mask): masked_fill
// of the run-time side, cond ? c : y = masked_fill(y, cond) value=c; with
// both sides at run time, masked_fill(x, !cond, 0) + masked_fill(y, cond, 0).
// A condition known only at run time: where_at_run_time.
int fe_conv_Where(FeOnnx *cx) {
  FeTensor *tc = fe_in(cx, 0), *tx = fe_in(cx, 1), *ty = fe_in(cx, 2);
  if (!tc || !tx || !ty)
    return fe_err(cx, "needs 3 inputs");
  FeConst *c = tc->k || tc->lazy ? fe_known(cx, tc) : NULL;
  if (!c && cx->failed)
    return -1;
  if (!c)
    return where_at_run_time(cx, tc, tx);
  if (!c->i)
    return fe_err(cx, "the condition must be bool");
  int rx, ry, r1, r;
  const Sym *sx[IR_MAXRANK], *sy[IR_MAXRANK], *s1[IR_MAXRANK], *shape[IR_MAXRANK];
  if (fe_shape(cx, tx, &rx, sx) || fe_shape(cx, ty, &ry, sy) ||
      fe_broadcast(cx, c->rank, c->shape, rx, sx, &r1, s1) ||
      fe_broadcast(cx, r1, s1, ry, sy, &r, shape))
    return -1;
  double vx, vy;
  bool kx = scalar_const(cx, tx, &vx), ky = scalar_const(cx, ty, &vy);
  if (kx && ky)
    return fe_err(cx, "x and y are both constants: nothing to compute at run time");
  if (kx)
    return set(cx, masked(cx, broadcast(cx, farg(cx, 2), r, shape), fe_value(cx, tc), vx));
  if (ky)
    return set(cx, masked(cx, broadcast(cx, farg(cx, 1), r, shape), negated(cx, tc, c), vy));
  IrValue *x = masked(cx, broadcast(cx, farg(cx, 1), r, shape), negated(cx, tc, c), 0.0);
  IrValue *y = x ? masked(cx, broadcast(cx, farg(cx, 2), r, shape), fe_value(cx, tc), 0.0) : NULL;
  return set(cx, fe_op(cx, OP_ADD, x, y));
}

// Trilu(x, k) upper at run time: zero the other triangle with a known mask.
int fe_conv_Trilu(FeOnnx *cx) {
  IrValue *x = farg(cx, 0);
  int64_t upper, k = 0, rows, cols;
  double kk;
  if (!x || fe_attr_int(cx, "upper", 1, &upper))
    return -1;
  if (fe_in(cx, 1)) {
    FeConst *kc = known_arg(cx, 1, "k");
    if (!kc || fe_const_scalar(cx, kc, "k", &kk))
      return -1;
    k = fe_const_int(kc, 0);
  }
  if (x->rank < 2 || fe_eval(cx, x->shape[x->rank - 2], &rows) ||
      fe_eval(cx, x->shape[x->rank - 1], &cols))
    return x->rank < 2 ? fe_err(cx, "needs at least 2 dims") : -1;
  FeConst *m = fe_const_new(cx, FE_BOOL, 2, x->shape + x->rank - 2);
  if (!m)
    return -1;
  for (int64_t i = 0; i < m->n; i++)
    m->i[i] = !fe_trilu_keep(i / cols, i % cols, k, upper);
  return set(cx, masked(cx, x, fe_const_value(cx, m, "trilu.mask"), 0.0));
}

// ---- linear algebra ------------------------------------------------------------------------------

// Bring the batch dims of a [.., M, K] and b [.., K, N] to the same shape
// (numpy broadcasting).
static int match_batch(FeOnnx *cx, IrValue **a, IrValue **b) {
  int r;
  const Sym *batch[IR_MAXRANK], *shape[IR_MAXRANK];
  if (fe_broadcast(cx, (*a)->rank - 2, (*a)->shape, (*b)->rank - 2, (*b)->shape, &r, batch))
    return -1;
  IrValue **ops[2] = {a, b};
  for (int i = 0; i < 2; i++) {
    IrValue *x = *ops[i];
    memcpy(shape, batch, (size_t)r * sizeof *shape);
    shape[r] = x->shape[x->rank - 2];
    shape[r + 1] = x->shape[x->rank - 1];
    if (!(*ops[i] = broadcast(cx, x, r + 2, shape)))
      return -1;
  }
  return 0;
}

// MatMul(a, b), numpy semantics: a vector operand gets a unit dim (removed
// after); batch dims broadcast; a [.., M, K] @ [K, N] stays one GEMM.
int fe_conv_MatMul(FeOnnx *cx) {
  IrValue *a = farg(cx, 0), *b = a ? farg(cx, 1) : NULL;
  if (!b)
    return -1;
  if (a->rank < 1 || b->rank < 1)
    return fe_err(cx, "operands must have at least 1 dim");
  const Sym *one = sym_const(&cx->g->arena, 1), *shape[IR_MAXRANK];
  bool va = a->rank == 1, vb = b->rank == 1;
  if (va)
    a = reshape(cx, a, 2, (const Sym *[]){one, a->shape[0]});
  if (vb)
    b = reshape(cx, b, 2, (const Sym *[]){b->shape[0], one});
  if (a && b && a->rank > 2 && b->rank > 2 && match_batch(cx, &a, &b))
    return -1;
  IrValue *y = a && b ? fe_op(cx, OP_MATMUL, a, b) : NULL;
  if (y && (va || vb)) {
    int r = 0;
    for (int i = 0; i < y->rank; i++)
      if (!((va && i == y->rank - 2) || (vb && i == y->rank - 1)))
        shape[r++] = y->shape[i];
    y = reshape(cx, y, r, shape);
  }
  return set(cx, y);
}

// Gemm(A, B, C) = alpha * op(A) @ op(B) + beta * C
int fe_conv_Gemm(FeOnnx *cx) {
  int64_t ta, tb;
  double alpha, beta, c;
  IrValue *a = farg(cx, 0), *b = a ? farg(cx, 1) : NULL;
  if (!b || fe_attr_int(cx, "transA", 0, &ta) || fe_attr_int(cx, "transB", 0, &tb) ||
      fe_attr_float(cx, "alpha", 1.0, &alpha) || fe_attr_float(cx, "beta", 1.0, &beta))
    return -1;
  if (a->rank != 2 || b->rank != 2)
    return fe_err(cx, "A and B must be matrices");
  IrValue *in[2] = {a, b};
  IrNode *n = node(cx, OP_MATMUL, in, 2, 1);
  if (ta)
    ir_set_int(cx->g, n, "ta", 1);
  if (tb)
    ir_set_int(cx->g, n, "tb", 1);
  IrValue *y = infer(cx, n) ? NULL : scale(cx, n->out[0], alpha, 0.0);
  if (!y || !fe_in(cx, 2) || beta == 0.0)
    return set(cx, y);
  if (scalar_const(cx, fe_in(cx, 2), &c))
    return set(cx, scale(cx, y, 1.0, beta * c));
  return set(cx, fe_op(cx, OP_ADD, y, scale(cx, farg(cx, 2), beta, 0.0)));
}

// ---- convolution ----------------------------------------------------------------------------------

// One of Conv's window attributes: absent (n = 0), or `want` integers each
// within [lo, INT32_MAX].
static int conv_attr(FeOnnx *cx, const char *name, int want, int dims, int64_t lo, int64_t *v,
                     int *n) {
  const int64_t *a;
  int na;
  if (fe_attr_ints(cx, name, &a, &na))
    return -1;
  *n = na < 0 ? 0 : na;
  if (na < 0)
    return 0;
  if (na != want)
    return fe_err(cx, "attribute '%s' has %d values; a %d-D convolution takes %d", name, na, dims,
                  want);
  for (int i = 0; i < na; i++) {
    if (a[i] < lo || a[i] > INT32_MAX)
      return fe_err(cx, "attribute '%s' value %lld is out of range (%lld to %d)", name,
                    (long long)a[i], (long long)lo, INT32_MAX);
    v[i] = a[i];
  }
  return 0;
}

// Conv(X [N,C,H,W], W [M,C/group,KH,KW], B [M]) kernel_shape strides pads
// dilations group auto_pad: a 2-D convolution with explicit pads (auto_pad
// NOTSET, or VALID: none), grouped or depthwise too (ConvNeXt's) -> conv2d;
// the bias is an add over [M,1,1]. A 1-D
// convolution (X [N,C,L], W [M,C,K]: Whisper's front end) is the 2-D one over
// images of height 1: X, W and the output reshaped around it.
int fe_conv_Conv(FeOnnx *cx) {
  IrValue *x = farg(cx, 0), *w = x ? farg(cx, 1) : NULL;
  int64_t group, ks[2], st[2], pads[4], dil[2];
  int nks, nst, npads, ndil;
  const char *auto_pad;
  int dims = x ? x->rank - 2 : 2;
  if (w && (dims < 1 || dims > 2 || w->rank != x->rank))
    return fe_err(cx, "mtc convolves 1-D and 2-D inputs: X must be [N,C,L] or [N,C,H,W] and W "
                  "[M,C,K] or [M,C,KH,KW], not X %s and W %s", ir_shape_str(cx->g, x),
                  ir_shape_str(cx->g, w));
  if (!w || fe_attr_int(cx, "group", 1, &group) ||
      fe_attr_str(cx, "auto_pad", "NOTSET", &auto_pad) ||
      conv_attr(cx, "kernel_shape", dims, dims, 1, ks, &nks) ||
      conv_attr(cx, "strides", dims, dims, 1, st, &nst) ||
      conv_attr(cx, "pads", 2 * dims, dims, 0, pads, &npads) ||
      conv_attr(cx, "dilations", dims, dims, 1, dil, &ndil))
    return -1;
  int64_t c, m;
  if (group < 1 || group > INT32_MAX)
    return fe_err(cx, "group=%lld: a convolution has 1 or more groups", (long long)group);
  if (group > 1 && (fe_eval(cx, x->shape[1], &c) || fe_eval(cx, w->shape[0], &m)))
    return -1;
  if (group > 1 && (c % group || m % group))
    return fe_err(cx, "group=%lld does not divide X's %lld channels and W's %lld filters: each "
                  "group takes C/group channels to M/group outputs", (long long)group,
                  (long long)c, (long long)m);
  bool valid = !strcmp(auto_pad, "VALID");
  if (!valid && strcmp(auto_pad, "NOTSET"))
    return fe_err(cx, "auto_pad=%s: mtc takes explicit pads (auto_pad NOTSET or VALID); export "
                  "the model with the padding written out", auto_pad);
  for (int i = 0; i < nks; i++) {
    int64_t k;
    if (!sym_is_const(w->shape[2 + i], &k) || k != ks[i])
      return fe_err(cx, "kernel_shape [%lld%s%lld] differs from W's %s", (long long)ks[0],
                    dims == 2 ? "," : "", dims == 2 ? (long long)ks[1] : 0LL,
                    ir_shape_str(cx->g, w));
  }
  IrArena *ar = &cx->g->arena;
  const Sym *one = sym_const(ar, 1);
  if (dims == 1) {  // height 1: the attributes of the width, the height's the identity's
    const Sym *xs[4] = {x->shape[0], x->shape[1], one, x->shape[2]};
    const Sym *ws[4] = {w->shape[0], w->shape[1], one, w->shape[2]};
    x = reshape(cx, x, 4, xs), w = reshape(cx, w, 4, ws);
    if (!x || !w)
      return -1;
    st[1] = st[0], st[0] = 1, dil[1] = dil[0], dil[0] = 1;
    pads[3] = pads[1], pads[1] = pads[0], pads[0] = pads[2] = 0;
    npads *= 2;
  }
  IrValue *in[2] = {x, w};
  IrNode *n = node(cx, OP_CONV2D, in, 2, 2);
  if (group > 1)
    ir_set_int(cx->g, n, "group", group);
  if (nst)
    ir_set_ints(cx->g, n, "strides", st, 2);
  if (npads && !valid)
    ir_set_ints(cx->g, n, "pads", pads, 4);
  if (ndil)
    ir_set_ints(cx->g, n, "dilations", dil, 2);
  IrValue *y = infer(cx, n) ? NULL : n->out[0];
  if (y && fe_nout(cx) > 0) { // the patches, named after the output: "<Y>.col"
    char name[512];
    snprintf(name, sizeof name, "%.500s.col", cx->node->output[0]);
    ir_value_rename(cx->g, n->out[1], name);
  }
  if (y && fe_in(cx, 2)) {
    const Sym *bshape[3] = {w->shape[0], one, one};
    y = fe_op(cx, OP_ADD, y, reshape(cx, farg(cx, 2), 3, bshape));
  }
  if (y && dims == 1) {
    const Sym *ys[3] = {y->shape[0], y->shape[1], y->shape[3]};
    y = reshape(cx, y, 3, ys);
  }
  return set(cx, y);
}

// A pooling node's window: kernel_shape strides pads dilations ceil_mode
// auto_pad, as `what` ("max-pools", "average-pools") runs it: 2-D windows of
// X [N,C,H,W], explicit pads (auto_pad NOTSET, or VALID: none; *npads 0),
// dilation 1, the output's size rounded down (ceil_mode 0, PyTorch's default).
static int pool_attrs(FeOnnx *cx, const IrValue *x, const char *what, int64_t ks[2],
                      int64_t st[2], int64_t pads[4], int *nst, int *npads) {
  const int64_t *k, *s, *p, *dil;
  int nk, nd;
  int64_t ceil_mode;
  const char *auto_pad;
  if (fe_attr_ints(cx, "kernel_shape", &k, &nk) || fe_attr_ints(cx, "strides", &s, nst) ||
      fe_attr_ints(cx, "pads", &p, npads) || fe_attr_ints(cx, "dilations", &dil, &nd) ||
      fe_attr_int(cx, "ceil_mode", 0, &ceil_mode) ||
      fe_attr_str(cx, "auto_pad", "NOTSET", &auto_pad))
    return -1;
  if (x->rank != 4 || nk != 2)
    return fe_err(cx, "mtc %s 2-D images: X [N,C,H,W] and a kernel_shape of 2 values, not X %s "
                  "and %d values", what, ir_shape_str(cx->g, x), nk);
  if ((*nst >= 0 && *nst != 2) || (*npads >= 0 && *npads != 4) || (nd >= 0 && nd != 2))
    return fe_err(cx, "strides and dilations take 2 values and pads 4 for a 2-D window");
  for (int i = 0; nd > 0 && i < 2; i++)
    if (dil[i] != 1)
      return fe_err(cx, "dilations [%lld, %lld]: mtc %s without dilation", (long long)dil[0],
                    (long long)dil[1], what);
  if (ceil_mode)
    return fe_err(cx, "ceil_mode=1: mtc rounds the pooled size down (ceil_mode 0, PyTorch's "
                  "default); export with ceil_mode=False");
  bool valid = !strcmp(auto_pad, "VALID");
  if (!valid && strcmp(auto_pad, "NOTSET"))
    return fe_err(cx, "auto_pad=%s: mtc takes explicit pads (auto_pad NOTSET or VALID); export "
                  "the model with the padding written out", auto_pad);
  for (int i = 0; i < 2; i++) {
    ks[i] = k[i], st[i] = *nst > 0 ? s[i] : 1;
    if (ks[i] < 1 || ks[i] > INT32_MAX || st[i] < 1 || st[i] > INT32_MAX)
      return fe_err(cx, "kernel_shape and strides must be from 1 to %d", INT32_MAX);
  }
  if (valid || *npads < 0)
    *npads = 0;
  for (int i = 0; i < 4; i++) {
    pads[i] = *npads ? p[i] : 0;
    if (pads[i] < 0 || pads[i] > INT32_MAX)
      return fe_err(cx, "pads must be from 0 to %d", INT32_MAX);
  }
  return 0;
}

// MaxPool(X) -> maxpool2d, as ResNet's stem exports it (pool_attrs). The
// Indices output is not computed.
int fe_conv_MaxPool(FeOnnx *cx) {
  IrValue *x = farg(cx, 0);
  int64_t ks[2], st[2], pads[4];
  int nst, npads;
  if (!x || pool_attrs(cx, x, "max-pools", ks, st, pads, &nst, &npads))
    return -1;
  IrNode *n = node(cx, OP_MAXPOOL2D, &x, 1, 1);
  ir_set_ints(cx->g, n, "kernel", ks, 2);
  if (nst > 0)
    ir_set_ints(cx->g, n, "strides", st, 2);
  if (npads > 0)
    ir_set_ints(cx->g, n, "pads", pads, 4);
  fe_set_unsupported(cx, 1, "the Indices output of MaxPool");
  return set(cx, infer(cx, n) ? NULL : n->out[0]);
}

// AveragePool(X) count_include_pad (pool_attrs): a depthwise conv2d by a
// constant filter of 1/(kh*kw) per channel. Where the padding does not count
// (count_include_pad 0, ONNX's default; PyTorch's AvgPool2d exports 1 unless
// told otherwise), each output is instead the sum over its window divided by
// the window's pixels inside the image (a constant [OH, OW] of reciprocals).
int fe_conv_AveragePool(FeOnnx *cx) {
  IrValue *x = farg(cx, 0);
  int64_t ks[2], st[2], pads[4], include, c, hw[2];
  int nst, npads;
  if (!x || pool_attrs(cx, x, "average-pools", ks, st, pads, &nst, &npads) ||
      fe_attr_int(cx, "count_include_pad", 0, &include) || fe_eval(cx, x->shape[1], &c))
    return -1;
  bool divide = !include && (pads[0] || pads[1] || pads[2] || pads[3]);
  if (divide && (fe_eval(cx, x->shape[2], &hw[0]) || fe_eval(cx, x->shape[3], &hw[1])))
    return -1;
  IrArena *ar = &cx->g->arena;
  const Sym *fs[4] = {x->shape[1], sym_const(ar, 1), sym_const(ar, ks[0]), sym_const(ar, ks[1])};
  FeConst *f = fe_const_new(cx, FE_FLOAT, 4, fs);
  if (!f)
    return -1;
  for (int64_t i = 0; i < f->n; i++)
    f->f[i] = divide ? 1.0f : (float)(1.0 / (double)(ks[0] * ks[1]));
  IrValue *in[2] = {x, fe_const_value(cx, f, "avgpool.filter")};
  if (!in[1])
    return -1;
  IrNode *n = node(cx, OP_CONV2D, in, 2, 2);
  ir_set_int(cx->g, n, "group", c);
  if (nst > 0)
    ir_set_ints(cx->g, n, "strides", st, 2);
  if (npads > 0)
    ir_set_ints(cx->g, n, "pads", pads, 4);
  IrValue *y = infer(cx, n) ? NULL : n->out[0];
  if (y) {  // the patches, named after the output: "<Y>.col"
    char name[512];
    snprintf(name, sizeof name, "%.500s.col", cx->node->output[0]);
    ir_value_rename(cx->g, n->out[1], name);
  }
  if (!y || !divide)
    return set(cx, y);
  int64_t oh, ow;
  if (fe_eval(cx, y->shape[2], &oh) || fe_eval(cx, y->shape[3], &ow))
    return -1;
  FeConst *r = fe_const_new(cx, FE_FLOAT, 2, &y->shape[2]);
  if (!r)
    return -1;
  for (int64_t oy = 0; oy < oh; oy++)
    for (int64_t ox = 0; ox < ow; ox++) {
      int64_t y0 = oy * st[0] - pads[0], x0 = ox * st[1] - pads[1];
      int64_t rows = (y0 + ks[0] < hw[0] ? y0 + ks[0] : hw[0]) - (y0 > 0 ? y0 : 0);
      int64_t cols = (x0 + ks[1] < hw[1] ? x0 + ks[1] : hw[1]) - (x0 > 0 ? x0 : 0);
      if (rows < 1 || cols < 1)
        return fe_err(cx, "pads [%lld, %lld, %lld, %lld] leave a window of padding alone, "
                      "which has no pixels to average", (long long)pads[0], (long long)pads[1],
                      (long long)pads[2], (long long)pads[3]);
      r->f[oy * ow + ox] = (float)(1.0 / (double)(rows * cols));
    }
  return set(cx, fe_op(cx, OP_MUL, y, fe_const_value(cx, r, "avgpool.inside")));
}

// ---- normalization, softmax, reductions ----------------------------------------------------------

// A BatchNorm's running statistic s (an initializer: a constant of the model,
// not trained, saved with the weights) updated in place each forward as
// PyTorch updates it: s = momentum * s + (1 - momentum) * stat * k (ONNX's
// momentum is 1 - PyTorch's).
// With n > 0 the statistic is a biased variance of n values, kept unbiased:
// n / (n - 1) of it (the scale says n, which data parallelism multiplies).
static int running_stat(FeOnnx *cx, IrValue *s, IrValue *stat, double momentum, int64_t n) {
  if (s->role != ROLE_PARAM || s->producer)
    return fe_err(cx, "the running statistic '%s' must be an initializer", s->name);
  s->role = ROLE_CONST, s->frozen = true;
  stat = reshape(cx, stat, s->rank, s->shape);
  double k = n > 0 ? (double)n / (double)(n - 1) : 1.0;
  IrValue *part = scale(cx, stat, (1.0 - momentum) * k, 0.0);
  if (part && part != stat && n > 0)
    ir_set_int(cx->g, part->producer, "bessel_n", n);
  IrValue *in[2] = {s, fe_op(cx, OP_ADD, scale(cx, s, momentum, 0.0), part)};
  if (!in[1])
    return -1;
  return infer(cx, node(cx, OP_ASSIGN, in, 2, 0));
}

// Training mode's running mean and variance (inputs 3 and 4), from the batch's
// mean and biased variance over n values per channel: the variance kept
// unbiased, n / (n - 1) of it, as PyTorch keeps it.
static int running_update(FeOnnx *cx, IrValue *mean, IrValue *var, const IrValue *x) {
  double momentum;
  int64_t n = 1, d;
  for (int i = 0; i < x->rank; i++)
    if (i != 1) {
      if (fe_eval(cx, x->shape[i], &d))
        return -1;
      n *= d;
    }
  if (n < 2)
    return fe_err(cx, "%lld value%s per channel: a BatchNorm in training mode needs more than "
                  "one (PyTorch refuses it too)", (long long)n, n == 1 ? "" : "s");
  IrValue *rm = farg(cx, 3), *rv = rm ? farg(cx, 4) : NULL;
  if (!rv || fe_attr_float(cx, "momentum", 0.9, &momentum))
    return -1;
  return running_stat(cx, rm, mean, momentum, 0) || running_stat(cx, rv, var, momentum, n);
}

// BatchNormalization(X [N,C,...], scale, B, input_mean, input_var [C]) epsilon
// momentum training_mode: per channel c, y = (x - m) / sqrt(v + epsilon) *
// scale + B. Training mode (PyTorch's train(), exported with
// TrainingMode.TRAINING) takes m and v from the batch (the mean and biased
// variance over N and the spatial dims), built from means and elementwise ops
// whose gradients autodiff knows, and updates the running statistics in place
// (running_update); otherwise (eval) m and v are the running statistics. Either
// way those are constants of the model, loaded and saved with the weights,
// untrained. Training mode's outputs of the new running statistics are not
// computed (the inputs are updated instead).
int fe_conv_BatchNormalization(FeOnnx *cx) {
  IrValue *x = farg(cx, 0), *scale_w = x ? farg(cx, 1) : NULL, *bias = scale_w ? farg(cx, 2) : NULL;
  int64_t training;
  double eps;
  if (!bias || fe_attr_int(cx, "training_mode", 0, &training) ||
      fe_attr_float(cx, "epsilon", 1e-5, &eps))
    return -1;
  if (x->rank < 2)
    return fe_err(cx, "input '%s' has rank %d; it takes [N, C, spatial dims...]", x->name,
                  x->rank);
  // [C] as [C, 1, ...]: broadcast over the spatial dims
  IrArena *ar = &cx->g->arena;
  const Sym *cs[IR_MAXRANK];
  cs[0] = x->shape[1];
  for (int d = 1; d < x->rank - 1; d++)
    cs[d] = sym_const(ar, 1);
  int r = x->rank - 1;
  IrValue *w = reshape(cx, scale_w, r, cs), *b = reshape(cx, bias, r, cs), *mean, *var;
  if (training) {
    int64_t axes[IR_MAXRANK];
    int na = 0;
    for (int d = 0; d < x->rank; d++)
      if (d != 1)
        axes[na++] = d;
    IrNode *m = node(cx, OP_MEAN, &x, 1, 1);
    ir_set_ints(cx->g, m, "axes", axes, na);
    ir_set_int(cx->g, m, "keepdims", 1);
    mean = infer(cx, m) ? NULL : m->out[0];
    IrValue *xc = fe_op(cx, OP_SUB, x, mean), *sq = fe_op(cx, OP_MUL, xc, xc);
    if (!sq)
      return -1;
    IrNode *v = node(cx, OP_MEAN, &sq, 1, 1);
    ir_set_ints(cx->g, v, "axes", axes, na);
    ir_set_int(cx->g, v, "keepdims", 1);
    var = infer(cx, v) ? NULL : v->out[0];
    IrValue *y = fe_op(cx, OP_MUL, xc, power(cx, scale(cx, var, 1.0, eps), -0.5));
    fe_set_unsupported(cx, 1, "the running mean output of BatchNormalization in training mode");
    fe_set_unsupported(cx, 2, "the running variance output of BatchNormalization in training "
                       "mode");
    if (!y || running_update(cx, mean, var, x))
      return -1;
    return set(cx, fe_op(cx, OP_ADD, fe_op(cx, OP_MUL, y, w), b));
  }
  mean = farg(cx, 3), var = mean ? farg(cx, 4) : NULL;
  if (!var)
    return -1;
  for (int i = 0; i < 2; i++) {   // the running statistics: constants, not trained
    IrValue *s = i ? var : mean;
    if (s->role == ROLE_PARAM && !s->producer)
      s->role = ROLE_CONST, s->frozen = true;
  }
  mean = reshape(cx, mean, r, cs), var = reshape(cx, var, r, cs);
  IrValue *y = fe_op(cx, OP_MUL, fe_op(cx, OP_SUB, x, mean),
                     power(cx, scale(cx, var, 1.0, eps), -0.5));
  return set(cx, fe_op(cx, OP_ADD, fe_op(cx, OP_MUL, y, w), b));
}

// Softmax / LogSoftmax over `axis` (default -1): transposed to the last dim
// and back when it is another one.
static int softmax(FeOnnx *cx, IrOp op) {
  IrValue *x = farg(cx, 0);
  int64_t axis;
  int a;
  if (!x || fe_attr_int(cx, "axis", -1, &axis) || fe_axis(cx, axis, x->rank, &a))
    return -1;
  if (x->rank == 0)
    return fe_err(cx, "needs at least one dim");
  if (a == x->rank - 1)
    return set(cx, fe_op(cx, op, x, NULL));
  IrValue *y = fe_op(cx, op, axis_last(cx, x, a, false), NULL);
  return set(cx, y ? axis_last(cx, y, a, true) : NULL);
}
int fe_conv_Softmax(FeOnnx *cx) { return softmax(cx, OP_SOFTMAX); }
int fe_conv_LogSoftmax(FeOnnx *cx) { return softmax(cx, OP_LOG_SOFTMAX); }

// ReduceMean (axes attribute) / ReduceSum (axes input) keepdims
// noop_with_empty_axes: sum or mean ops.
static int reduce(FeOnnx *cx, IrOp op, bool axes_from_input) {
  IrValue *x = farg(cx, 0);
  int64_t keep, noop, axes[IR_MAXRANK];
  int n;
  if (!x || reduce_args(cx, axes_from_input, &keep, &noop, axes, &n))
    return -1;
  if (n <= 0 && noop)
    return set(cx, x);
  IrNode *r = node(cx, op, &x, 1, 1);
  if (n > 0) {
    for (int i = 0; i < n; i++) {
      int ax;
      if (fe_axis(cx, axes[i], x->rank, &ax))
        return -1;
      axes[i] = ax;
    }
    ir_set_ints(cx->g, r, "axes", axes, n);
  }
  if (keep)
    ir_set_int(cx->g, r, "keepdims", 1);
  return set(cx, infer(cx, r) ? NULL : r->out[0]);
}
int fe_conv_ReduceMean(FeOnnx *cx) { return reduce(cx, OP_MEAN, false); }

// GlobalAveragePool(x [N, C, spatial...]): the mean over the spatial dims,
// kept as 1s (ResNet's and Swin's pooled heads).
int fe_conv_GlobalAveragePool(FeOnnx *cx) {
  IrValue *x = farg(cx, 0);
  if (!x)
    return -1;
  if (x->rank < 3)
    return fe_err(cx, "input '%s' has rank %d; it takes [N, C, spatial dims...]", x->name,
                  x->rank);
  int64_t axes[IR_MAXRANK];
  int n = 0;
  for (int d = 2; d < x->rank; d++)
    axes[n++] = d;
  IrNode *r = node(cx, OP_MEAN, &x, 1, 1);
  ir_set_ints(cx->g, r, "axes", axes, n);
  ir_set_int(cx->g, r, "keepdims", 1);
  return set(cx, infer(cx, r) ? NULL : r->out[0]);
}
int fe_conv_ReduceSum(FeOnnx *cx) { return reduce(cx, OP_SUM, true); }

// LayerNormalization(x, scale, bias) over the last dim (axis -1); a missing
// bias is a zero constant. The Mean and InvStdDev outputs are not computed.
int fe_conv_LayerNormalization(FeOnnx *cx) {
  IrValue *x = farg(cx, 0), *w = x ? farg(cx, 1) : NULL;
  int64_t axis;
  int a;
  double eps;
  if (!w || fe_attr_int(cx, "axis", -1, &axis) || fe_attr_float(cx, "epsilon", 1e-5, &eps) ||
      fe_axis(cx, axis, x->rank, &a))
    return -1;
  if (a != x->rank - 1)
    return fe_err(cx, "mtc normalizes over the last dim only (axis -1), not axis %lld",
                  (long long)axis);
  const Sym *c = x->shape[x->rank - 1];
  w = reshape(cx, w, 1, &c);
  IrValue *b = fe_in(cx, 2) ? farg(cx, 2) : NULL;
  if (fe_in(cx, 2) && !b)
    return -1;
  if (!b) {
    FeConst *z = fe_const_new(cx, FE_FLOAT, 1, &c);
    b = z ? fe_const_value(cx, z, "layernorm.zeros") : NULL;
  }
  b = reshape(cx, b, 1, &c);
  if (!w || !b)
    return -1;
  IrValue *in[3] = {x, w, b};
  IrNode *n = node(cx, OP_LAYERNORM, in, 3, 1);
  ir_set_float(cx->g, n, "eps", eps);
  fe_set_unsupported(cx, 1, "the Mean output of LayerNormalization");
  fe_set_unsupported(cx, 2, "the InvStdDev output of LayerNormalization");
  return set(cx, infer(cx, n) ? NULL : n->out[0]);
}

// Dropout(x, ratio, training_mode): the identity unless training_mode is
// true and ratio > 0; then seeded dropout (the mask output is not computed).
int fe_conv_Dropout(FeOnnx *cx) {
  IrValue *x = farg(cx, 0);
  double ratio = 0.5, training = 0;
  FeConst *k;
  if (!x)
    return -1;
  if (fe_in(cx, 2) && (!(k = known_arg(cx, 2, "training_mode")) ||
                       fe_const_scalar(cx, k, "training_mode", &training)))
    return -1;
  if (fe_in(cx, 1) && (!(k = known_arg(cx, 1, "ratio")) || fe_const_scalar(cx, k, "ratio", &ratio)))
    return -1;
  fe_set_unsupported(cx, 1, "the mask output of Dropout");
  if (!training || ratio == 0.0)
    return set(cx, x);
  if (!(ratio > 0 && ratio < 1))
    return fe_err(cx, "ratio %g must be in [0, 1)", ratio);
  IrValue *step = ir_dropout_step(cx->g, cx->d);
  IrValue *in[2] = {x, step};
  if (!step)
    return -1;
  IrNode *n = node(cx, OP_DROPOUT, in, 2, 1);
  ir_set_dropout(cx->g, n, ratio, cx->opt->seed, cx->node_index);
  return set(cx, infer(cx, n) ? NULL : n->out[0]);
}

// ---- losses -----------------------------------------------------------------------------------------

// The (N, C, d1, ...) scores of an ONNX loss as (N, d1, ..., C) for mtc's
// last-dim ops; labels (N, d1, ...) are i32 class indices in [0, C).
static int loss_operands(FeOnnx *cx, IrValue **scores, IrValue **labels) {
  IrValue *x = farg(cx, 0), *t = x ? arg(cx, 1) : NULL;
  if (!t)
    return -1;
  if (x->rank < 2)
    return fe_err(cx, "scores must be (N, C) or (N, C, d1, ...)");
  if (t->dtype != DT_I32)
    return fe_err(cx, "labels must be integers");
  if (fe_in(cx, 2))
    return fe_err(cx, "class weights are not supported");
  *scores = x->rank > 2 ? axis_last(cx, x, 1, false) : x;
  *labels = t;
  fe_note_use(t, FE_USE_LABELS, x->shape[1]);
  return *scores ? 0 : -1;
}

// reduction mean|sum (none is not a training loss) and ignore_index
static IrValue *nll(FeOnnx *cx, IrValue *logp, IrValue *labels) {
  const char *red;
  int64_t ignore;
  if (fe_attr_str(cx, "reduction", "mean", &red) || fe_attr_int(cx, "ignore_index", -1, &ignore))
    return NULL;
  if (strcmp(red, "mean") && strcmp(red, "sum"))
    return fe_err(cx, "reduction '%s' is not supported (mean, sum)", red), NULL;
  IrValue *in[2] = {logp, labels};
  IrNode *n = node(cx, OP_NLL_LOSS, in, 2, 1);
  if (!strcmp(red, "sum"))
    ir_set_int(cx->g, n, "sum", 1);
  ir_set_int(cx->g, n, "ignore_index", ignore);
  return infer(cx, n) ? NULL : n->out[0];
}

// SoftmaxCrossEntropyLoss = NLL of log_softmax (fused back into
// cross_entropy by the fusion pass). Output 1, when read, is the log_softmax.
int fe_conv_SoftmaxCrossEntropyLoss(FeOnnx *cx) {
  IrValue *x, *t;
  if (loss_operands(cx, &x, &t))
    return -1;
  IrValue *lp = fe_op(cx, OP_LOG_SOFTMAX, x, NULL);
  if (!lp || set(cx, nll(cx, lp, t)))
    return -1;
  if (!fe_out_wanted(cx, 1))
    return 0;
  return fe_set_value(cx, 1, lp->rank > 2 ? axis_last(cx, lp, 1, true) : lp);
}

int fe_conv_NegativeLogLikelihoodLoss(FeOnnx *cx) {
  IrValue *x, *t;
  return loss_operands(cx, &x, &t) ? -1 : set(cx, nll(cx, x, t));
}
