// Fusion: known subgraphs become fused ops before autodiff, so the backward
// uses fused gradients (one layernorm_bwd instead of a dozen elementwise
// ones) and the emitted program calls one kernel per pattern. The patterns
// are what exporters (torch.onnx) write for the common layers:
//
//   layernorm      mean(x) -> sub -> pow 2 -> mean -> + eps -> sqrt -> div
//                  -> * w -> + b                         (LayerNorm below opset 17)
//   rmsnorm        x * rsqrt(mean(x^2) + eps) * w         (Llama, T5)
//   rope           x * cos + rotate_half(x) * sin, the tables constant (Llama)
//   gelu           x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
//   gelu_erf       x/2 * (1 + erf(x / sqrt(2)))
//   silu           x * sigmoid(x)
//   attention      softmax(mask(s * q @ k^T)) @ v, the mask causal or none: a
//                  fill or an addend of -inf or the lowest float, or all zeros;
//                  and a key-padding mask from an input, (1 - mask) * lowest;
//                  and an additive bias (T5's relative positions); the masked
//                  scores maybe clamped to the lowest float, and the masks
//                  applied per head and batch between bmm's merged dims (OPT); where
//                  q, k and v are views of [P.., T, HS] merged for bmm (OPT, BART),
//                  attention runs on [P.., T, HS], so the heads stay a dim of their own
//                  that tensor parallelism splits
//   cross_entropy  nll_loss(log_softmax(x), t) or nll_loss(log(softmax(x)), t)
//
// Three clean-ups come first, because the patterns rely on them: a scale of a
// scale is one scale, a reshape of a reshape one reshape, and a matmul reads a
// transposed operand directly (ta, tb) instead of through a transpose of its
// last two dims.
//
// A rewrite builds the fused node in the place of the pattern's last node,
// and the fused node takes over that node's output value, so every reader
// is unchanged. Nodes whose outputs nobody reads any more (the pattern's
// inner nodes, a mask constant) are removed at the end, and the ids are
// renumbered, so the graph stays valid for the verifier.
#include "passes.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

// ---- matching helpers -------------------------------------------------------------------------

// v's producer when it is op, else NULL.
static IrNode *made_by(const IrValue *v, IrOp op) {
  return v && v->producer && v->producer->op == op ? v->producer : NULL;
}

// Equal within float32 rounding (the exporters write constants as float32).
static bool near(double a, double b) { return fabs(a - b) <= 1e-6 * fmax(1.0, fabs(b)); }

// v = s * x + b for these s and b: x.
static IrValue *scale_of(const IrValue *v, double s, double b) {
  IrNode *n = made_by(v, OP_SCALE);
  if (!n || !near(ir_attr_f(n, "s"), s) || !near(ir_attr_f(n, "b"), b))
    return NULL;
  return n->in[0];
}

// v = a op b in either order with one side `side`: the other side.
static IrValue *other_side(const IrValue *v, IrOp op, const IrValue *side) {
  IrNode *n = made_by(v, op);
  if (!n)
    return NULL;
  return n->in[0] == side ? n->in[1] : n->in[1] == side ? n->in[0] : NULL;
}

static bool is_last_axis_mean(const IrNode *n, const IrValue *x) {
  if (!n || n->op != OP_MEAN || !ir_attr_i(n, "keepdims"))
    return false;
  int naxes;
  const int64_t *axes = ir_attr_ints(n, "axes", &naxes);
  return naxes == 1 && (axes[0] == x->rank - 1 || axes[0] == -1);
}

// A [C] vector where C is x's last dim.
static bool is_channel_vector(const IrValue *v, const IrValue *x) {
  return v->rank == 1 && v->dtype == DT_F32 && sym_eq(v->shape[0], x->shape[x->rank - 1]);
}

// ---- rewriting --------------------------------------------------------------------------------

typedef struct Fuser {
  IrGraph *g;
  IrDiag *d;
  int err;
  const float *rope_cos, *rope_sin;  // the rotary tables last checked (every layer reads them)
  double rope_theta;                 // ... and their theta (0: not rotary tables)
} Fuser;

// A node of op over `in` in the place of `old`, producing old's output, then
// nout - 1 fresh ones.
static IrNode *replace_outs(Fuser *F, IrNode *old, IrOp op, IrValue *const *in, int nin,
                           int nout) {
  IrGraph *g = F->g;
  g->cur_phase = old->phase;
  ir_set_block(g, old);
  g->cur_loc = old->loc;
  IrNode *n = ir_node_new(g, op, in, nin, 0);
  g->nnodes--; // it takes old's slot, not the end
  n->id = old->id;
  g->nodes[n->id] = n;
  n->out = ir_alloc(&g->arena, (size_t)(nout + 1) * sizeof *n->out);
  n->nout = nout;
  n->out[0] = old->out[0];
  for (int i = 1; i < nout; i++)
    n->out[i] = ir_value_new(g, NULL, DT_F32, old->out[0]->role);
  for (int i = 0; i < nout; i++)
    n->out[i]->producer = n;
  return n;
}

// Node `old` replaced by op on `in`, in its place and with its output.
static IrNode *replace(Fuser *F, IrNode *old, IrOp op, IrValue *const *in, int nin) {
  return replace_outs(F, old, op, in, nin, 1);
}

// A new node (one fresh output) inserted just before position `at`.
static IrNode *insert_outs(Fuser *F, int at, IrOp op, IrValue *const *in, int nin, int nout) {
  IrGraph *g = F->g;
  const IrNode *next = g->nodes[at];
  g->cur_phase = next->phase;
  ir_set_block(g, next);
  g->cur_loc = next->loc;
  IrNode *n = ir_node_new(g, op, in, nin, nout);
  memmove(&g->nodes[at + 1], &g->nodes[at], (size_t)(g->nnodes - 1 - at) * sizeof *g->nodes);
  g->nodes[at] = n;
  for (int i = at; i < g->nnodes; i++)
    g->nodes[i]->id = i;
  return n;
}
static IrNode *insert(Fuser *F, int at, IrOp op, IrValue *const *in, int nin) {
  return insert_outs(F, at, op, in, nin, 1);
}

static bool check(Fuser *F, IrNode *n) {
  if (!F->err && ir_infer(F->g, n, F->d))
    F->err = -1;
  return !F->err;
}

// ---- clean-ups ----------------------------------------------------------------------------------

// scale(scale(x, s1, b1), s2, b2) = scale(x, s1*s2, s2*b1 + b2)
static bool merge_scales(Fuser *F, IrNode *n) {
  IrNode *in = made_by(n->in[0], OP_SCALE);
  if (n->op != OP_SCALE || !in)
    return false;
  double s1 = ir_attr_f(in, "s"), b1 = ir_attr_f(in, "b");
  double s2 = ir_attr_f(n, "s"), b2 = ir_attr_f(n, "b");
  if (n->in[0]->dtype == DT_I32 && (!ir_is_i32(s1 * s2) || !ir_is_i32(s2 * b1 + b2)))
    return false;  // integers whose merged scale would leave int32 stay two scales
  IrNode *m = replace(F, n, OP_SCALE, &in->in[0], 1);
  ir_set_float(F->g, m, "s", s1 * s2);
  if (s2 * b1 + b2 != 0.0)
    ir_set_float(F->g, m, "b", s2 * b1 + b2);
  return check(F, m);
}

// reshape(reshape(x)) = reshape(x): attention in the heads' view (fuse_attention) reshapes its
// output to bmm's merged view, which the model reshapes back.
static bool merge_reshapes(Fuser *F, IrNode *n) {
  IrNode *in = made_by(n->in[0], OP_RESHAPE);
  if (n->op != OP_RESHAPE || !in)
    return false;
  return check(F, replace(F, n, OP_RESHAPE, &in->in[0], 1));
}

// transpose(reshape(y)) where y is attention's output in the heads' view [B, NH, T, HS] and the
// reshape merges its first two dims (bmm's [B*NH, T, HS], fuse_attention; or the product of the
// probabilities and v that heads_chain keeps in the heads' view): the transpose moves
// B and NH together, then the reshape merges them, so the heads stay a dim of their own up to
// the reshape that gives the model its [.., C] (torch's MultiheadAttention transposes its
// output sequence-first, [T, B*NH, HS], then views it as [T*B, C]).
static bool commute_heads(Fuser *F, IrNode *n) {
  IrNode *r = n->op == OP_TRANSPOSE ? made_by(n->in[0], OP_RESHAPE) : NULL;
  const IrValue *y = r ? r->in[0] : NULL, *m = r ? r->out[0] : NULL;
  if (!r || !(made_by(y, OP_ATTENTION) || made_by(y, OP_MATMUL)) || y->producer->out[0] != y ||
      y->rank != m->rank + 1 ||
      !sym_eq(sym_mul(&F->g->arena, y->shape[0], y->shape[1]), m->shape[0]))
    return false;
  for (int i = 1; i < m->rank; i++)
    if (!sym_eq(y->shape[i + 1], m->shape[i]))
      return false;
  int np;
  const int64_t *perm = ir_attr_ints(n, "perm", &np);
  int64_t wide[IR_MAXRANK];
  int k = 0;
  for (int i = 0; i < np; i++) {
    if (perm[i] == 0)
      wide[k++] = 0;
    wide[k++] = perm[i] + 1;
  }
  IrValue *in = r->in[0];
  IrNode *t = insert(F, n->id, OP_TRANSPOSE, &in, 1);
  ir_set_ints(F->g, t, "perm", wide, k);
  return check(F, t) && check(F, replace(F, n, OP_RESHAPE, &t->out[0], 1));
}

// If the transpose tr swaps the last two dims (whatever it does to the
// others), its permutation without that swap; false otherwise.
static bool swaps_last_two(const IrNode *tr, int64_t *rest, bool *identity) {
  int r;
  const int64_t *perm = ir_attr_ints(tr, "perm", &r);
  if (r < 2 || perm[r - 1] == r - 1 || perm[r - 2] == r - 2)
    return false;
  memcpy(rest, perm, (size_t)r * sizeof *rest);
  rest[r - 1] = perm[r - 2];
  rest[r - 2] = perm[r - 1];
  *identity = true;
  for (int i = 0; i < r; i++)
    *identity &= rest[i] == i;
  return true;
}

// matmul(transpose(a), transpose(b)) reads a and b transposed (ta, tb);
// other dims the transpose moved stay in a smaller transpose.
static bool absorb_transposes(Fuser *F, IrNode *n) {
  if (n->op != OP_MATMUL || ir_attr_i(n, "sum_batch"))
    return false;
  IrValue *in[2] = {n->in[0], n->in[1]};
  int64_t t[2] = {ir_attr_i(n, "ta"), ir_attr_i(n, "tb")};
  bool changed = false;
  for (int i = 0; i < 2; i++) {
    IrNode *tr = made_by(in[i], OP_TRANSPOSE);
    int64_t rest[IR_MAXRANK];
    bool identity;
    if (!tr || !swaps_last_two(tr, rest, &identity))
      continue;
    if (identity) {
      in[i] = tr->in[0];
    } else {
      IrNode *smaller = insert(F, n->id, OP_TRANSPOSE, &tr->in[0], 1);
      ir_set_ints(F->g, smaller, "perm", rest, tr->in[0]->rank);
      if (!check(F, smaller))
        return false;
      in[i] = smaller->out[0];
    }
    t[i] = !t[i];
    changed = true;
  }
  if (!changed)
    return false;
  IrNode *m = replace(F, n, OP_MATMUL, in, 2);
  if (t[0])
    ir_set_int(F->g, m, "ta", 1);
  if (t[1])
    ir_set_int(F->g, m, "tb", 1);
  return check(F, m);
}

// ---- layernorm ----------------------------------------------------------------------------------

// add(mul(div(x - mean(x), sqrt(mean((x - mean(x))^2) + eps)), w), b)
static bool fuse_layernorm(Fuser *F, IrNode *n) {
  if (n->op != OP_ADD)
    return false;
  for (int side = 0; side < 2; side++) {
    IrValue *b = n->in[1 - side];
    IrNode *mul = made_by(n->in[side], OP_MUL);
    for (int ws = 0; mul && ws < 2; ws++) {
      IrValue *w = mul->in[1 - ws];
      IrNode *div = made_by(mul->in[ws], OP_DIV);
      IrNode *sq = div ? made_by(div->in[1], OP_SQRT) : NULL;
      IrNode *eps = sq ? made_by(sq->in[0], OP_SCALE) : NULL;
      IrNode *var = eps && near(ir_attr_f(eps, "s"), 1.0) ? eps->in[0]->producer : NULL;
      IrNode *pw = var ? var->in[0]->producer : NULL;
      IrNode *sub = div ? made_by(div->in[0], OP_SUB) : NULL;
      if (!sub || !pw || !(pw->op == OP_POW ? near(ir_attr_f(pw, "p"), 2.0)
                                            : pw->op == OP_MUL && pw->in[0] == pw->in[1]))
        continue;
      IrValue *x = sub->in[0];
      IrNode *mean = sub->in[1]->producer;
      if (pw->in[0] != sub->out[0] || !is_last_axis_mean(var, x) || !is_last_axis_mean(mean, x) ||
          mean->in[0] != x || !is_channel_vector(w, x) || !is_channel_vector(b, x) ||
          !(ir_attr_f(eps, "b") > 0))
        continue;
      IrValue *in[3] = {x, w, b};
      IrNode *ln = replace(F, n, OP_LAYERNORM, in, 3);
      ir_set_float(F->g, ln, "eps", ir_attr_f(eps, "b"));
      return check(F, ln);
    }
  }
  return false;
}

// ---- RMSNorm ------------------------------------------------------------------------------------

// v = x^2 as pow(x, 2) or x * x: x.
static IrValue *square_of(const IrValue *v) {
  IrNode *p = v ? v->producer : NULL;
  if (p && p->op == OP_POW && near(ir_attr_f(p, "p"), 2.0))
    return p->in[0];
  return p && p->op == OP_MUL && p->in[0] == p->in[1] ? p->in[0] : NULL;
}

// y = x / sqrt(mean(x^2) + eps) over the last dim, written as x * pow(q, -1)
// (Reciprocal, rsqrt) in either order, or x / q, q = sqrt(mean(x^2) + eps):
// x, and eps through *eps. NULL when y is something else.
static IrValue *rms_normed(const IrValue *y, double *eps) {
  IrNode *n = y ? y->producer : NULL;
  for (int i = 0; n && i < 2; i++) {
    IrValue *x = n->in[i], *q = NULL;
    IrNode *rcp = made_by(n->in[1 - i], OP_POW);
    if (n->op == OP_MUL && rcp && near(ir_attr_f(rcp, "p"), -1.0))
      q = rcp->in[0];
    else if (n->op == OP_DIV && i == 0)
      q = n->in[1];
    IrNode *sq = made_by(q, OP_SQRT);
    IrNode *add = sq ? made_by(sq->in[0], OP_SCALE) : NULL;
    IrNode *mean = add && near(ir_attr_f(add, "s"), 1.0) ? add->in[0]->producer : NULL;
    if (mean && is_last_axis_mean(mean, x) && square_of(mean->in[0]) == x &&
        ir_attr_f(add, "b") > 0) {
      *eps = ir_attr_f(add, "b");
      return x;
    }
  }
  return NULL;
}

// x = a - mean(a) over the last dim: the inside of a layernorm.
static bool is_centered(const IrValue *x) {
  IrNode *sub = made_by(x, OP_SUB);
  IrNode *mean = sub ? sub->in[1]->producer : NULL;
  return mean && is_last_axis_mean(mean, sub->in[0]) && mean->in[0] == sub->in[0];
}

// mul(w, x / sqrt(mean(x^2) + eps)) (either order) -> rmsnorm(x, w): Llama's
// and T5's RMSNorm. Not when x is centered: that is a layernorm, which
// fuse_layernorm takes at its last node (the bias add).
static bool fuse_rmsnorm(Fuser *F, IrNode *n) {
  if (n->op != OP_MUL)
    return false;
  for (int ws = 0; ws < 2; ws++) {
    double eps;
    IrValue *w = n->in[ws], *x = rms_normed(n->in[1 - ws], &eps);
    if (!x || is_centered(x) || !is_channel_vector(w, x) || !ir_same_shape(x, n->out[0]))
      continue;
    IrValue *in[2] = {x, w};
    IrNode *rn = replace(F, n, OP_RMSNORM, in, 2);
    ir_set_float(F->g, rn, "eps", eps);
    return check(F, rn);
  }
  return false;
}

// ---- rotary embedding ---------------------------------------------------------------------------

// x[..., start : start + len] along the last dim, as a slice of step 1.
static bool is_last_slice(const IrValue *v, const IrValue *x, int64_t start, int64_t len,
                          const IrGraph *g) {
  IrNode *sl = made_by(v, OP_SLICE);
  int64_t axis = sl ? ir_attr_i(sl, "axis") : 0, got;
  return sl && sl->in[0] == x && (axis == x->rank - 1 || axis == -1) &&
         ir_attr_i(sl, "start") == start && ir_attr_i(sl, "step") == 1 &&
         !sym_eval(v->shape[v->rank - 1], &g->syms, &got) && got == len;
}

// rotate_half(x) = concat(-x[..., h:], x[..., :h]) along the last dim of HS = 2h.
static bool is_rotate_half(const IrValue *v, const IrValue *x, int64_t h, const IrGraph *g) {
  IrNode *cat = made_by(v, OP_CONCAT);
  int64_t axis = cat ? ir_attr_i(cat, "axis") : 0;
  return cat && cat->nin == 2 && (axis == x->rank - 1 || axis == -1) &&
         is_last_slice(scale_of(cat->in[0], -1.0, 0.0), x, h, h, g) &&
         is_last_slice(cat->in[1], x, 0, h, g);
}

// A constant table [1.., T, HS] (its data [T, HS]) for x [..., T, HS]: NULL otherwise.
static const float *rope_table(const IrValue *c, const IrValue *x) {
  int r = c->rank;
  if (c->role != ROLE_CONST || !c->data || c->dtype != DT_F32 || r < 2 || r > x->rank ||
      !sym_eq(c->shape[r - 1], x->shape[x->rank - 1]) ||
      !sym_eq(c->shape[r - 2], x->shape[x->rank - 2]))
    return NULL;
  for (int i = 0; i < r - 2; i++)
    if (!sym_is_one(c->shape[i]))
      return NULL;
  return c->data;
}

// The base theta of the rotary tables cos and sin [T, HS] when cos[p, i] =
// cos(p * theta^(-2 (i mod h) / HS)) and sin likewise, within float32's
// rounding of the angles (HS = 2h); 0 when they are not such tables. theta
// comes from the slowest frequency at p = 1 (the most digits), rounded to an
// integer when within 1e-5 of one, as configs give it.
static double rope_theta(const float *cs, const float *sn, int64_t t, int64_t hs) {
  int64_t h = hs / 2;
  double theta = 10000.0;  // any: with h = 1 the angle is p
  if (h > 1 && t > 1) {
    double slow = atan2(sn[hs + h - 1], cs[hs + h - 1]);  // theta^(-2 (h-1) / hs)
    if (!(slow > 0.0))
      return 0.0;
    theta = pow(slow, -(double)hs / (2.0 * (double)(h - 1)));
    if (fabs(theta - nearbyint(theta)) <= 1e-5 * theta)
      theta = nearbyint(theta);
  }
  double *freq = malloc((size_t)h * sizeof *freq);
  IR_ASSERT(freq);
  for (int64_t i = 0; i < h; i++)
    freq[i] = pow(theta, -2.0 * (double)i / (double)hs);
  bool ok = true;
  for (int64_t p = 0; ok && p < t; p++)
    for (int64_t i = 0; ok && i < hs; i++) {
      double a = (double)p * freq[i % h], tol = 1e-6 + 2e-7 * (double)p;
      ok = fabs(cs[p * hs + i] - cos(a)) <= tol && fabs(sn[p * hs + i] - sin(a)) <= tol;
    }
  free(freq);
  return ok ? theta : 0.0;
}

// rope_theta, once for the tables every layer reads.
static double rope_theta_of(Fuser *F, const float *cs, const float *sn, int64_t t, int64_t hs) {
  if (cs != F->rope_cos || sn != F->rope_sin) {
    F->rope_cos = cs, F->rope_sin = sn;
    F->rope_theta = rope_theta(cs, sn, t, hs);
  }
  return F->rope_theta;
}

// x * cos + rotate_half(x) * sin, with cos and sin the constant tables of
// positions 0..T-1 (Hugging Face's Llama, as exported) -> rope(x) theta.
static bool fuse_rope(Fuser *F, IrNode *n) {
  if (n->op != OP_ADD)
    return false;
  for (int o = 0; o < 4; o++) { // which add input is x * cos, and which mul input is x
    IrNode *mc = made_by(n->in[o & 1], OP_MUL), *ms = made_by(n->in[1 - (o & 1)], OP_MUL);
    if (!mc || !ms)
      continue;
    IrValue *x = mc->in[o >> 1];
    int64_t t, hs;
    if (x->rank < 2 || !ir_same_shape(x, n->out[0]) ||
        sym_eval(x->shape[x->rank - 2], &F->g->syms, &t) ||
        sym_eval(x->shape[x->rank - 1], &F->g->syms, &hs) || hs % 2)
      continue;
    const float *cs = rope_table(mc->in[1 - (o >> 1)], x);
    for (int k = 0; cs && k < 2; k++) {
      const float *sn = rope_table(ms->in[1 - k], x);
      double theta = sn && is_rotate_half(ms->in[k], x, hs / 2, F->g)
                         ? rope_theta_of(F, cs, sn, t, hs)
                         : 0.0;
      if (theta <= 0.0)
        continue;
      IrNode *r = replace(F, n, OP_ROPE, &x, 1);
      ir_set_float(F->g, r, "theta", theta);
      return check(F, r);
    }
  }
  return false;
}

// ---- GELU ---------------------------------------------------------------------------------------

// x^3 as pow(x, 3), x * (x * x) or (x * x) * x.
static bool is_cube_of(const IrValue *v, const IrValue *x) {
  IrNode *p = made_by(v, OP_POW);
  if (p)
    return p->in[0] == x && near(ir_attr_f(p, "p"), 3.0);
  IrNode *m = made_by(v, OP_MUL);
  if (!m)
    return false;
  for (int i = 0; i < 2; i++) {
    IrNode *sq = made_by(m->in[1 - i], OP_MUL);
    if (m->in[i] == x && sq && sq->in[0] == x && sq->in[1] == x)
      return true;
  }
  return false;
}

// The argument of GELU when t = 1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)), else NULL.
static IrValue *tanh_gelu_arg(const IrValue *t, const IrValue *x) {
  IrNode *th = made_by(scale_of(t, 1.0, 1.0), OP_TANH);
  IrValue *inner = th ? scale_of(th->in[0], 0.7978845608028654, 0.0) : NULL;
  IrValue *cube_term = inner ? other_side(inner, OP_ADD, x) : NULL;
  IrValue *cube = cube_term ? scale_of(cube_term, 0.044715, 0.0) : NULL;
  return cube && is_cube_of(cube, x) ? (IrValue *)x : NULL;
}

// The argument when t = 1 + erf(x / sqrt(2)), else NULL.
static IrValue *erf_gelu_arg(const IrValue *t, const IrValue *x) {
  IrNode *er = made_by(scale_of(t, 1.0, 1.0), OP_ERF);
  return er && scale_of(er->in[0], 0.7071067811865476, 0.0) == x ? (IrValue *)x : NULL;
}

// n = x/2 * t in one of the ways exporters write it: scale(x * t, 0.5),
// scale(x, 0.5) * t (either order). Calls try(t, x) for each reading.
static bool gelu_shape(Fuser *F, IrNode *n, IrOp fused, IrValue *(*arg)(const IrValue *, const IrValue *)) {
  IrNode *prod = n->op == OP_SCALE && near(ir_attr_f(n, "s"), 0.5) && ir_attr_f(n, "b") == 0.0
                     ? made_by(n->in[0], OP_MUL)
                     : NULL;
  for (int i = 0; i < 2; i++) {
    IrValue *x = NULL;
    if (prod) // scale(x * t, 0.5)
      x = arg(prod->in[1 - i], prod->in[i]);
    else if (n->op == OP_MUL && scale_of(n->in[i], 0.5, 0.0)) // scale(x, 0.5) * t
      x = arg(n->in[1 - i], scale_of(n->in[i], 0.5, 0.0));
    if (x)
      return check(F, replace(F, n, fused, &x, 1));
  }
  return false;
}

static bool fuse_gelu(Fuser *F, IrNode *n) {
  return gelu_shape(F, n, OP_GELU, tanh_gelu_arg) || gelu_shape(F, n, OP_GELU_ERF, erf_gelu_arg);
}

// x * sigmoid(x), either order -> silu(x) (torch.nn.SiLU as exported; the
// gate of Llama's SwiGLU MLP).
static bool fuse_silu(Fuser *F, IrNode *n) {
  for (int i = 0; n->op == OP_MUL && i < 2; i++) {
    IrNode *sg = made_by(n->in[1 - i], OP_SIGMOID);
    if (sg && sg->in[0] == n->in[i])
      return check(F, replace(F, n, OP_SILU, &n->in[i], 1));
  }
  return false;
}

// ---- attention ----------------------------------------------------------------------------------

// What a constant mask does to scores [.., T, T] (the exporters' ways of
// writing a causal mask, or none):
typedef enum { MASK_OTHER, MASK_NONE, MASK_CAUSAL } MaskKind;

// A fill or an addend that removes a score: -inf, or the lowest float
// (HF's torch.finfo(dtype).min). Both give exp() = 0 in the softmax, the same
// result as long as a row keeps one score, which a causal mask always does.
static bool removes(double v) { return v <= -FLT_MAX; }

// m, broadcast over the leading dims of [.., T, T], as a mask: i32 (nonzero
// = masked) or f32 additive (removes() = masked, +-0 = kept). All kept is
// MASK_NONE (m may then broadcast over any dims, BERT's [B, 1, 1, T] of
// zeros); set exactly where j > i is MASK_CAUSAL (m's last two dims T, T).
static MaskKind mask_kind(const IrGraph *g, const IrValue *m, int64_t t) {
  if (m->role != ROLE_CONST || !m->data || m->rank < 2)
    return MASK_OTHER;
  int64_t r, c, n = 1;
  for (int i = 0; i < m->rank; i++) {
    int64_t d;
    if (sym_eval(m->shape[i], &g->syms, &d))
      return MASK_OTHER;
    n *= d;
  }
  if (sym_eval(m->shape[m->rank - 2], &g->syms, &r) || sym_eval(m->shape[m->rank - 1], &g->syms, &c))
    return MASK_OTHER;
  bool none = true, causal = r == t && c == t;
  for (int64_t k = 0; k < n && (none || causal); k++) {
    bool masked, kept;
    if (m->dtype == DT_I32) {
      masked = ((const int32_t *)m->data)[k] != 0;
      kept = !masked;
    } else {
      float x = ((const float *)m->data)[k];
      masked = removes(x);
      kept = x == 0.0f;
    }
    if (!masked && !kept)
      return MASK_OTHER;
    none &= kept;
    causal = causal && masked == (k % t > (k / t) % t);
  }
  return none ? MASK_NONE : causal ? MASK_CAUSAL : MASK_OTHER;
}

// A key-padding mask added to the scores [P.., H.., T, T], as Hugging Face
// writes a tokenizer's attention_mask: (1 - float(m)) * lowest, i.e.
// scale(cast(m), s, b) with s + b = 0 (kept where m is 1) and b removing
// scores (dropped where m is 0), m a mask input (0 or 1: train checks it) of
// shape [P.., 1.., 1, T]. Returns m, and in *p the count of its dims P.. that
// are the scores' own; NULL when a is not such a mask.
static IrValue *padding_addend(const IrValue *a, const IrValue *scores, int *p) {
  IrNode *sc = made_by(a, OP_SCALE);
  IrNode *cast = sc ? made_by(sc->in[0], OP_CAST) : NULL;
  if (!cast)
    return NULL;
  double s = ir_attr_f(sc, "s"), b = ir_attr_f(sc, "b");
  IrValue *m = cast->in[0];
  const IrValue *root = ir_view_root(m);  // through the reshapes of Unsqueeze
  int r = scores->rank;
  if (!removes(b) || fabs(s + b) > 1e-6 * fabs(b) || root->role != ROLE_INPUT ||
      root->input_kind != INPUT_MASK || m->rank != r || r < 2 ||
      !sym_eq(m->shape[r - 1], scores->shape[r - 1]))
    return NULL;
  for (*p = 0; *p < r - 2 && sym_eq(m->shape[*p], scores->shape[*p]); ++*p) {
  }
  for (int i = *p; i < r - 1; i++)
    if (!sym_is_one(m->shape[i]))
      return NULL;
  return m;
}

// A bias added to the scores [.., T, T] as attention takes it (T5's position
// bias [1, H, T, T], Llama's causal and padding mask [B, 1, T, T]).
static bool is_bias(const IrValue *b, const IrValue *scores) {
  int from, to;
  return ir_attention_bias_fits(b, scores, scores->shape[scores->rank - 1], &from, &to);
}

// What a softmax's input adds to the scaled scores.
typedef struct Masks {
  int causal;      // a causal mask (constant)
  IrValue *keep;   // a key-padding mask from an input (padding_addend), or NULL
  int keep_dims;   // ... its dims that are the scores' own
  IrValue *bias;   // an additive bias (is_bias), or NULL
} Masks;

// The scores before the masks: s = masked_fill(x, m) with a value that
// removes scores, or x + m (m additive), or x itself, m a constant mask_kind()
// knows; or x + bias. A key-padding mask added on top (padding_addend) is
// peeled first. NULL when s is none of these.
static IrValue *unmask(const IrGraph *g, IrValue *s, int64_t t, Masks *m) {
  IrNode *pad = made_by(s, OP_ADD);
  memset(m, 0, sizeof *m);
  for (int i = 0; pad && i < 2 && !m->keep; i++) {
    m->keep = ir_same_shape(pad->in[i], s) ? padding_addend(pad->in[1 - i], s, &m->keep_dims) : NULL;
    if (m->keep)
      s = pad->in[i];
  }
  IrNode *mf = made_by(s, OP_MASKED_FILL);
  if (mf) {
    MaskKind k = removes(ir_attr_f(mf, "value")) ? mask_kind(g, mf->in[1], t) : MASK_OTHER;
    m->causal = k == MASK_CAUSAL;
    return k == MASK_OTHER ? NULL : mf->in[0];
  }
  IrNode *add = made_by(s, OP_ADD);
  for (int i = 0; add && i < 2; i++) {
    MaskKind k = ir_same_shape(add->in[i], s) ? mask_kind(g, add->in[1 - i], t) : MASK_OTHER;
    if (k != MASK_OTHER) {
      m->causal = k == MASK_CAUSAL;
      return add->in[i];
    }
  }
  for (int i = 0; add && i < 2; i++)
    if (ir_same_shape(add->in[i], s) && is_bias(add->in[1 - i], s)) {
      m->bias = add->in[1 - i];
      return add->in[i];
    }
  return add ? NULL : s;
}

// OPT clamps the masked scores from below, max(s, lowest): a constant that
// every element of is the lowest float. Without it the softmax sees the same
// scores, except -inf where a mask of -inf removed one; a row keeps a score
// under a causal mask, and the fused op gives a row that keeps none what the
// lowest float gives (att_keep), so the clamp changes nothing there.
static IrValue *unclamp(const IrGraph *g, IrValue *s) {
  IrNode *mx = made_by(s, OP_MAX);
  for (int i = 0; mx && i < 2; i++) {
    const IrValue *c = mx->in[1 - i];
    int64_t n = 1, d;
    bool lowest = c->role == ROLE_CONST && c->data && c->dtype == DT_F32 &&
                  ir_same_shape(mx->in[i], s);
    for (int k = 0; lowest && k < c->rank; k++) {
      lowest = !sym_eval(c->shape[k], &g->syms, &d);
      n *= d;
    }
    for (int64_t k = 0; lowest && k < n; k++)
      lowest = removes(((const float *)c->data)[k]);
    if (lowest)
      return mx->in[i];
  }
  return s;
}

// Scores [P.., T, TK] written as [B, H, T, TK] between bmm's [B*H, T, TK] (OPT,
// torch's MultiheadAttention): a reshape that keeps the last two dims. v
// itself when it is no such reshape.
static IrValue *through_heads(IrValue *v) {
  IrNode *r = made_by(v, OP_RESHAPE);
  const IrValue *x = r ? r->in[0] : NULL;
  if (!x || x->rank < 2 || v->rank < 2 || !sym_eq(x->shape[x->rank - 1], v->shape[v->rank - 1]) ||
      !sym_eq(x->shape[x->rank - 2], v->shape[v->rank - 2]))
    return v;
  return r->in[0];
}

// Do a and b have the same leading dims (all but the last two)?
static bool same_lead(const IrValue *a, const IrValue *b) {
  bool same = a->rank == b->rank;
  for (int i = 0; same && i < a->rank - 2; i++)
    same = sym_eq(a->shape[i], b->shape[i]);
  return same;
}

// q, k and v [M, T, HS] as bmm reads them, each a view of [P.., T, HS] with the same P.. (OPT,
// torch's MultiheadAttention: [B*H, T, HS] of [B, H, T, HS]): q's [P.., T, HS], else NULL.
// Attention in that view keeps the heads a dim of their own, which tensor parallelism splits.
static IrValue *merged_heads(IrValue *q, IrValue *k, IrValue *v) {
  IrValue *x[3] = {q, k, v}, *src[3];
  for (int i = 0; i < 3; i++) {
    src[i] = through_heads(x[i]);
    if (src[i] == x[i] || src[i]->rank <= x[i]->rank || !same_lead(src[i], src[0]))
      return NULL;
  }
  return src[0];
}

// torch's MultiheadAttention (nn.TransformerEncoderLayer) merges the batch with the heads
// sequence-first: x [T, B, C] viewed as [T, B*NH, HS], then transposed to bmm's [B*NH, T, HS].
// For such a q, k or v: the heads' view [B, NH, T, HS] of x, a reshape and a transpose
// inserted before node `at`, in which the heads are a dim of their own that tensor parallelism
// splits (in bmm's view they are merged with the batch, and a split of x's C could not carry
// over); NULL when q is no such view. With build false only the check: q itself or NULL, and
// lead[0..1] set to the view's B and NH.
static IrValue *split_heads(Fuser *F, int at, IrValue *q, bool build, const Sym **lead) {
  IrNode *tr = made_by(q, OP_TRANSPOSE);
  IrNode *r = tr ? made_by(tr->in[0], OP_RESHAPE) : NULL;
  int np = 0;
  const int64_t *perm = tr ? ir_attr_ints(tr, "perm", &np) : NULL;
  if (!r || np != 3 || perm[0] != 1 || perm[1] != 0 || perm[2] != 2)
    return NULL;
  IrValue *x = r->in[0];
  const IrValue *m = r->out[0];
  if (x->rank != 3 || m->rank != 3 || !sym_eq(x->shape[0], m->shape[0]))
    return NULL;
  IrArena *a = &F->g->arena;
  int64_t c, hs;
  if (sym_eval(x->shape[2], &F->g->syms, &c) || sym_eval(m->shape[2], &F->g->syms, &hs) ||
      hs <= 0 || c % hs)
    return NULL;
  const Sym *nh = sym_const(a, c / hs);
  if (!sym_eq(sym_mul(a, x->shape[1], nh), m->shape[1]))
    return NULL;
  lead[0] = x->shape[1], lead[1] = nh;
  if (!build)
    return q;
  const Sym *split[4] = {x->shape[0], x->shape[1], nh, m->shape[2]};
  IrNode *view = insert(F, at, OP_RESHAPE, &x, 1);
  ir_value_set_shape(view->out[0], 4, split);
  view->out[0]->dtype = x->dtype;
  if (!check(F, view))
    return NULL;
  IrNode *heads = insert(F, at + 1, OP_TRANSPOSE, &view->out[0], 1);
  ir_set_ints(F->g, heads, "perm", (const int64_t[]){1, 2, 0, 3}, 4);
  return check(F, heads) ? heads->out[0] : NULL;
}

// x [M.., L, HS], bmm's merged leading dims, viewed as [P.., L, HS], P.. the leading dims of
// the scores' view `heads` [P.., T, TK]: x's source where x is a view of it, else a reshape
// inserted before node `at`; NULL when M.. and P.. hold different counts.
static IrValue *per_head(Fuser *F, int at, IrValue *x, const IrValue *heads) {
  x = through_heads(x);   // a view of a view is a view of the source
  if (same_lead(x, heads))
    return x;
  int lead = heads->rank - 2;
  const Sym *shape[IR_MAXRANK], *count = sym_const(&F->g->arena, 1), *want = count;
  for (int i = 0; i < x->rank - 2; i++)
    count = sym_mul(&F->g->arena, count, x->shape[i]);
  for (int i = 0; i < lead; i++)
    want = sym_mul(&F->g->arena, want, heads->shape[i]);
  if (!sym_eq(count, want))
    return NULL;
  memcpy(shape, heads->shape, (size_t)lead * sizeof *shape);
  shape[lead] = x->shape[x->rank - 2];
  shape[lead + 1] = x->shape[x->rank - 1];
  IrNode *r = insert(F, at, OP_RESHAPE, &x, 1);
  ir_value_set_shape(r->out[0], lead + 2, shape);
  r->out[0]->dtype = x->dtype;
  return check(F, r) ? r->out[0] : NULL;
}

// Scores s [M, H.., T, TK] in bmm's merged view plus a bias b [1, H'.., T, TK], viewed as
// `heads` [P0, P1, H.., T, TK] (M = P0 x P1) where m->bias is added (Swin's shifted windows: its
// relative positions added in the merged view, its windows' mask in the heads' view): b viewed
// as [1, 1, H'.., T, TK] and m->bias add up to one bias in the heads' view, inserted before node
// `at`, and what b was added to is returned; s itself when it is no such sum.
static IrValue *merge_bias(Fuser *F, int at, IrValue *s, const IrValue *heads, Masks *m) {
  IrNode *add = made_by(s, OP_ADD);
  IrArena *ar = &F->g->arena;
  if (!add || s->rank + 1 != heads->rank ||
      !sym_eq(s->shape[0], sym_mul(ar, heads->shape[0], heads->shape[1])))
    return s;
  for (int d = 1; d < s->rank; d++)
    if (!sym_eq(s->shape[d], heads->shape[d + 1]))
      return s;
  for (int i = 0; i < 2; i++) {
    IrValue *x = add->in[i], *b = add->in[1 - i];
    if (!ir_same_shape(x, s) || b->rank != s->rank || !sym_is_one(b->shape[0]) || !is_bias(b, s))
      continue;
    const Sym *shape[IR_MAXRANK];
    shape[0] = shape[1] = sym_const(ar, 1);
    memcpy(shape + 2, b->shape + 1, (size_t)(b->rank - 1) * sizeof *shape);
    IrNode *r = insert(F, at, OP_RESHAPE, &b, 1);
    ir_value_set_shape(r->out[0], b->rank + 1, shape);
    r->out[0]->dtype = b->dtype;
    if (!check(F, r))
      return NULL;
    IrValue *in[2] = {r->out[0], m->bias};
    IrNode *sum = insert(F, at + 1, OP_ADD, in, 2);   // after the reshape
    if (!check(F, sum) || !is_bias(sum->out[0], heads))
      return NULL;   // what was inserted is left unread: remove_dead takes it out
    m->bias = sum->out[0];
    return x;
  }
  return s;
}

// matmul(softmax(mask(c * matmul(a * q, k, tb=1))), v) -> attention(q', k, v)
// where q' = q scaled so that the op's own 1/sqrt(HS) gives a*c.
static bool fuse_attention(Fuser *F, IrNode *n) {
  if (n->op != OP_MATMUL || ir_attr_i(n, "ta") || ir_attr_i(n, "tb") || ir_attr_i(n, "sum_batch"))
    return false;
  IrNode *sm = made_by(n->in[0], OP_SOFTMAX);
  IrValue *v = n->in[1];
  if (!sm || v->rank < 2)
    return false;
  int64_t t;
  if (sym_eval(v->shape[v->rank - 2], &F->g->syms, &t))
    return false;
  // the masks may apply to the scores viewed per head and batch [P.., T, TK] (OPT's): a
  // padding mask or a bias then needs that view of q, k and v (heads)
  IrValue *viewed = through_heads(sm->in[0]);
  Masks m;
  double c = 1.0;
  IrValue *s = unmask(F->g, unclamp(F->g, viewed), t, &m);
  IrNode *after = s == viewed ? made_by(viewed, OP_SCALE) : NULL;  // GPT-J scales after masking
  if (after && ir_attr_f(after, "b") == 0.0 && ir_attr_f(after, "s") > 0.0) {
    // a removed score scaled by s > 0 is still removed (exp gives 0; a row keeps a score)
    s = unmask(F->g, after->in[0], t, &m);
    if (m.bias)  // a bias scaled is not the bias: left unfused
      s = NULL;
    c = ir_attr_f(after, "s");
  }
  const IrValue *heads = NULL;
  if (s && viewed != sm->in[0]) {
    heads = m.keep || m.bias ? viewed : NULL;
    s = through_heads(s);
    if (heads && m.bias && !m.keep && s != viewed)
      s = merge_bias(F, n->id, s, heads, &m);
  }
  IrNode *sc = s ? made_by(s, OP_SCALE) : NULL;
  if (sc && ir_attr_f(sc, "b") == 0.0) {
    c *= ir_attr_f(sc, "s");
    s = sc->in[0];
  }
  IrNode *qk = s ? made_by(s, OP_MATMUL) : NULL;
  if (!qk || ir_attr_i(qk, "ta") || !ir_attr_i(qk, "tb") || ir_attr_i(qk, "sum_batch"))
    return false;
  IrValue *q = qk->in[0], *k = qk->in[1];
  IrNode *qs = made_by(q, OP_SCALE);
  if (qs && ir_attr_f(qs, "b") == 0.0) {
    c *= ir_attr_f(qs, "s");
    q = qs->in[0];
  }
  int r = q->rank;
  if (!ir_same_shape(k, v) || k->rank != r || !sym_eq(q->shape[r - 1], k->shape[r - 1]))
    return false;
  for (int i = 0; i < r - 2; i++)  // the same heads; T and TK may differ (cross-attention)
    if (!sym_eq(q->shape[i], k->shape[i]))
      return false;
  int64_t hs;
  if (sym_eval(q->shape[q->rank - 1], &F->g->syms, &hs) || hs <= 0)
    return false;
  if (!heads && !m.keep && !m.bias)
    heads = merged_heads(q, k, v);
  IrValue *in[5] = {q, k, v}, *keep = m.keep;
  int nin = 3;
  const Sym *lead[3][2];   // each one's B and NH: the same (a key dim of its own, kdim, is not)
  if (!heads && !m.keep && !m.bias && split_heads(F, 0, q, false, lead[0]) &&
      split_heads(F, 0, k, false, lead[1]) && split_heads(F, 0, v, false, lead[2]) &&
      sym_eq(lead[0][0], lead[1][0]) && sym_eq(lead[0][1], lead[1][1]) &&
      sym_eq(lead[0][0], lead[2][0]) && sym_eq(lead[0][1], lead[2][1])) {
    for (int i = 0; i < 3; i++)
      if (!(in[i] = split_heads(F, n->id, in[i], true, lead[i])))
        return false;
    heads = in[0];
  }
  for (int i = 0; heads && i < 3; i++)
    if (!(in[i] = per_head(F, n->id, in[i], heads)))
      return false;
  double want = 1.0 / sqrt((double)hs);
  if (!near(c, want)) { // the op scales by 1/sqrt(HS): pre-scale q by the rest
    IrNode *pre = insert(F, n->id, OP_SCALE, &in[0], 1);
    ir_set_float(F->g, pre, "s", c / want);
    if (!check(F, pre))
      return false;
    in[0] = pre->out[0];
  }
  if (keep) { // [P.., T], the mask's rows
    IrNode *r = insert(F, n->id, OP_RESHAPE, &keep, 1);
    const Sym *shape[IR_MAXRANK];
    memcpy(shape, keep->shape, (size_t)m.keep_dims * sizeof *shape);
    shape[m.keep_dims] = keep->shape[keep->rank - 1];
    ir_value_set_shape(r->out[0], m.keep_dims + 1, shape);
    if (!check(F, r))
      return false;
    in[nin++] = r->out[0];
  }
  if (m.bias)
    in[nin++] = m.bias;
  int causal = m.causal || ir_attr_i(sm, "causal");  // a causal mask, or the softmax's own
  if (heads) {  // attention in the heads' view, its output viewed back as n's
    IrNode *at = insert_outs(F, n->id, OP_ATTENTION, in, nin, 2);
    ir_set_int(F->g, at, "causal", causal);
    return check(F, at) && check(F, replace(F, n, OP_RESHAPE, &at->out[0], 1));
  }
  IrNode *at = replace_outs(F, n, OP_ATTENTION, in, nin, 2);  // and a fresh log-sum-exp
  ir_set_int(F->g, at, "causal", causal);
  return check(F, at);
}

// ---- cross-entropy --------------------------------------------------------------------------------

// nll_loss(log_softmax(x), t) or nll_loss(log(softmax(x)), t), mean over
// rows -> cross_entropy(x, t), with the same ignore_index.
static bool fuse_cross_entropy(Fuser *F, IrNode *n) {
  if (n->op != OP_NLL_LOSS || ir_attr_i(n, "sum"))
    return false;
  IrNode *ls = made_by(n->in[0], OP_LOG_SOFTMAX), *lg = made_by(n->in[0], OP_LOG);
  IrNode *sm = lg ? made_by(lg->in[0], OP_SOFTMAX) : NULL;
  if (sm && ir_attr_i(sm, "causal"))
    sm = NULL;
  IrValue *x = ls ? ls->in[0] : sm ? sm->in[0] : NULL;
  if (!x)
    return false;
  IrValue *in[2] = {x, n->in[1]};
  int64_t ignore = ir_attr_i(n, "ignore_index");
  IrNode *ce = replace(F, n, OP_CROSS_ENTROPY, in, 2);
  ir_set_int(F->g, ce, "ignore_index", ignore);
  return check(F, ce);
}

// ---- dead nodes -----------------------------------------------------------------------------------

// Remove nodes whose outputs nobody reads (nodes without outputs, such as
// the dropout tick, stay), then values no node makes or reads: the dead
// nodes' outputs, the replaced nodes' orphans, unused constants.
static void remove_dead(IrGraph *g) {
  int *reads = calloc((size_t)g->nvalues + 1, sizeof *reads);
  bool *made = calloc((size_t)g->nvalues + 1, sizeof *made);
  IR_ASSERT(reads && made);
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i]->nin; k++)
      reads[g->nodes[i]->in[k]->id]++;
  reads[g->loss->id]++;
  int kept = 0;
  for (int i = g->nnodes - 1; i >= 0; i--) {
    IrNode *n = g->nodes[i];
    bool live = n->nout == 0;
    for (int k = 0; k < n->nout; k++)
      live |= reads[n->out[k]->id] > 0;
    if (!live) {
      for (int k = 0; k < n->nin; k++)
        reads[n->in[k]->id]--;
      g->nodes[i] = NULL;
    }
  }
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]) {
      g->nodes[kept] = g->nodes[i];
      g->nodes[kept]->id = kept;
      for (int k = 0; k < g->nodes[kept]->nout; k++)
        made[g->nodes[kept]->out[k]->id] = true;
      kept++;
    }
  g->nnodes = kept;
  kept = 0;
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *v = g->values[i];
    bool keep = made[i] || (!v->producer && v->role != ROLE_ACT && v->role != ROLE_GRAD &&
                            (v->role != ROLE_CONST || reads[i] > 0));
    if (keep) {
      v->id = kept;
      g->values[kept++] = v;
    }
  }
  g->nvalues = kept;
  free(reads);
  free(made);
}

// The heads' view [B, NH, T, X] of q, bmm's merged [B*NH, T, X] of torch's MultiheadAttention
// (split_heads), or of a scale of such a view, inserted before node `at`; NULL when q is
// neither. With build false only the check (lead: the view's B and NH).
static IrValue *scaled_heads(Fuser *F, int at, IrValue *q, bool build, const Sym **lead) {
  IrNode *sc = made_by(q, OP_SCALE);
  if (!sc)
    return split_heads(F, at, q, build, lead);
  IrValue *h = split_heads(F, at, sc->in[0], build, lead);
  if (!h || !build)
    return h ? q : NULL;
  IrNode *c = insert(F, h->producer->id + 1, OP_SCALE, &h, 1);   // after the view
  ir_set_float(F->g, c, "s", ir_attr_f(sc, "s"));
  if (ir_attr_f(sc, "b") != 0.0)
    ir_set_float(F->g, c, "b", ir_attr_f(sc, "b"));
  return check(F, c) ? c->out[0] : NULL;
}

// A node of n's op and attributes on `in`, inserted before node `at`.
static IrNode *insert_like(Fuser *F, int at, const IrNode *n, IrValue *const *in) {
  IrNode *c = insert(F, at, n->op, in, n->nin);
  c->loc = n->loc;
  ir_copy_attrs(F->g, c, n);
  return check(F, c) ? c : NULL;
}

// torch's MultiheadAttention with ops between the probabilities and v that attention does not
// fuse (dropout, in training mode): matmul(P, v), P = dropout(softmax(q @ k^T)) (and scales),
// all in bmm's merged view [B*NH, T, ..] of a sequence-first [T, B, C] (split_heads). The
// chain runs in the heads' view [B, NH, T, ..] instead, the product reshaped to the merged view
// for its readers (commute_heads then keeps the heads a dim of their own up to the model's
// [T*B, C]), so tensor parallelism splits the heads rather than gathering q, k and v. Each op
// reads its elements in the same order, so dropout draws the same masks.
static bool heads_chain(Fuser *F, IrNode *n) {
  if (n->op != OP_MATMUL || ir_attr_i(n, "ta") || ir_attr_i(n, "tb") ||
      ir_attr_i(n, "sum_batch") || n->in[0]->rank != 3)
    return false;
  enum { MAXCHAIN = 8 };
  const IrNode *chain[MAXCHAIN];
  int nc = 0;
  bool softmax = false;
  const IrValue *s = n->in[0];
  while (!made_by(s, OP_MATMUL)) {
    const IrNode *c = s->producer;
    if (nc == MAXCHAIN || !c ||
        (c->op != OP_SOFTMAX && c->op != OP_DROPOUT && c->op != OP_SCALE))
      return false;
    softmax |= c->op == OP_SOFTMAX;
    chain[nc++] = c;
    s = c->in[0];
  }
  const IrNode *qk = s->producer;
  if (!softmax || ir_attr_i(qk, "ta") || !ir_attr_i(qk, "tb") || ir_attr_i(qk, "sum_batch"))
    return false;
  IrValue *x[3] = {qk->in[0], qk->in[1], n->in[1]};
  const Sym *lead[3][2];
  for (int i = 0; i < 3; i++)
    if (!scaled_heads(F, 0, x[i], false, lead[i]) || !sym_eq(lead[i][0], lead[0][0]) ||
        !sym_eq(lead[i][1], lead[0][1]))
      return false;
  for (int i = 0; i < 3; i++)
    if (!(x[i] = scaled_heads(F, n->id, x[i], true, lead[i])))
      return false;
  IrNode *y = insert_like(F, n->id, qk, x);
  for (int k = nc - 1; y && k >= 0; k--) {
    IrValue *in[2] = {y->out[0], chain[k]->nin > 1 ? chain[k]->in[1] : NULL};
    y = insert_like(F, n->id, chain[k], in);
  }
  IrValue *pv[2] = {y ? y->out[0] : NULL, x[2]};
  if (!y || !(y = insert_like(F, n->id, n, pv)))
    return false;
  return check(F, replace(F, n, OP_RESHAPE, &y->out[0], 1));
}

// ---- the pass -------------------------------------------------------------------------------------

typedef bool Rewrite(Fuser *F, IrNode *n);
static Rewrite *const rewrites[] = {merge_scales,   merge_reshapes, commute_heads,
                                    absorb_transposes, fuse_layernorm, fuse_rmsnorm,
                                    fuse_rope,      fuse_gelu,      fuse_silu,
                                    fuse_attention, heads_chain,    fuse_cross_entropy};

int pass_fusion(IrGraph *g, PassCtx *ctx, bool *changed) {
  if (ctx->opt.no_fusion || !g->loss)
    return 0;
  Fuser F = {.g = g, .d = ctx->diag};
  int rewritten = 0;
  for (int i = 0; i < g->nnodes && !F.err; i++) {
    if (g->nodes[i]->phase != PHASE_FORWARD)
      continue;
    for (size_t r = 0; r < sizeof rewrites / sizeof rewrites[0] && !F.err; r++)
      while (!F.err && rewrites[r](&F, g->nodes[i])) // the new node may match again
        rewritten++;
  }
  g->cur_phase = PHASE_FORWARD;
  ir_set_block(g, NULL);
  g->cur_loc = (IrLoc){0};
  if (F.err)
    return -1;
  int before = g->nnodes;
  remove_dead(g);
  *changed = rewritten > 0 || g->nnodes != before;
  return 0;
}
