// The precision pass: bf16 mixed precision (--precision bf16), as PyTorch's
// autocast and Megatron's --bf16 train a model. Under fp32 it does nothing.
//
//   - Parameters stay float32: the master weights, which the optimizer
//     updates with float32 gradients and float32 moments. Each has a working
//     copy in bf16 (role copy, "<name>.bf16") that forward and backward read,
//     written from the parameter by an assign node after its update (the
//     program also writes it once after loading the weights).
//   - Float inputs and constants are cast to bf16 where they are first read.
//   - Every float value forward and backward make is bf16 (the kernels compute
//     in float32 and round their results once), but for the loss and the
//     other scalars and the vocabulary-parallel loss's row statistics, which
//     stay float32.
//   - A parameter's gradient is float32 where it is made: the ops that sum
//     into a weight's gradient (a matmul's dW, a bias's sum, an embedding's
//     scatter-add, a norm's dw and db) read bf16 operands and write their
//     float32 sums (the kernels' U type, runtime/kernels.def), so nothing is
//     rounded to bf16 on the way to the optimizer and the data-parallel
//     reduction. A gradient made by any other op, the sum of the partial
//     gradients of a parameter used twice (a tied embedding) among them, is
//     made in bf16 and cast to float32, as PyTorch's is for the bf16 copy
//     autocast makes (partial sums in float32 would hold two float32 copies
//     of the gradient at once, where this holds bf16 ones).
//   - With grads_bf16 (--grad-precision bf16) every gradient stays bf16 as
//     made (a matmul's dW its float32 sum rounded once), and so do the
//     buckets that accumulate and reduce them (passes/lower.c); the optimizer
//     widens it as it reads it: ZeRO's and llm.c's 16 bytes a parameter.
// Casts are nodes, so the memory plan counts every copy.
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>

// A new value of v's shape and role (ROLE_COPY, ...) in dtype dt, named v.<suffix>.
static IrValue *like(IrGraph *g, const IrValue *v, IrDType dt, IrRole role, const char *suffix) {
  char name[600];
  snprintf(name, sizeof name, "%s.%s", v->name, suffix);
  IrValue *c = ir_value_new(g, name, dt, role);
  ir_value_set_shape(c, v->rank, v->shape);
  c->loc = v->loc;
  return c;
}

// A cast node of x to dt, made at the insertion point in the phase and block of node at.
static IrValue *cast(IrGraph *g, IrValue *x, IrDType dt, const IrNode *at, const char *suffix,
                     IrDiag *d) {
  IrPhase phase = at->phase;
  g->cur_phase = phase;
  ir_set_block(g, at);
  g->cur_loc = x->loc;
  IrNode *n = ir_node_new(g, OP_CAST, &x, 1, 1);
  ir_set_str(g, n, "to", ir_dtype_name(dt));
  IrValue *out = like(g, x, dt, phase == PHASE_FORWARD ? ROLE_ACT : ROLE_GRAD, suffix);
  ir_node_set_output(n, 0, out);
  return ir_infer(g, n, d) ? NULL : out;
}

// Float values forward and backward make that stay float32: scalars (the
// loss, its gradient), the vocabulary-parallel loss's row statistics and
// attention's log-sum-exp.
static bool stays_f32(const IrNode *n, int k) {
  return n->out[k]->rank == 0 || (n->op == OP_VP_CROSS_ENTROPY && k == 1) ||
         (n->op == OP_ATTENTION && k == 1);
}

// Can output k of n be written in float32 from bf16 operands (a K_OUTU
// argument of the kernel the op lowers to, codegen/kcall.c)?
static bool sums_in_f32(const IrNode *n, int k) {
  switch (n->op) {
  case OP_MATMUL:
  case OP_SUM_TO:
  case OP_SUM:
  case OP_EMBEDDING_BWD: return k == 0;
  case OP_LAYERNORM_BWD:
  case OP_RMSNORM_BWD: return k >= 1;
  default: return false;
  }
}

// Float32 inputs whatever the compute type: a loss's gradient and the row
// statistics of the vocabulary-parallel loss and of attention (the kernels'
// K_INF arguments).
static bool takes_f32(const IrNode *n, int k) {
  switch (n->op) {
  case OP_CROSS_ENTROPY_BWD:
  case OP_NLL_LOSS_BWD: return k == 0;
  case OP_VP_CROSS_ENTROPY_BWD: return k == 0 || k == 3;
  case OP_ATTENTION_BWD: return k == 5;
  default: return false;
  }
}

int pass_precision(IrGraph *g, PassCtx *ctx, bool *changed) {
  if (ctx->opt.precision != PASS_PRECISION_BF16)
    return 0;
  IrDiag *d = ctx->diag;
  int nv = g->nvalues, nn = g->nnodes;
  // The first node of forward or backward that reads each value, and each
  // parameter's update node.
  IrNode **first = calloc((size_t)nv + 1, sizeof *first), **update = calloc((size_t)nv + 1, sizeof *update);
  IrValue **from = calloc((size_t)nv + 1, sizeof *from), **to = calloc((size_t)nv + 1, sizeof *to);
  bool *grad32 = NULL;  // by value id: gradients made in float32 (step 2)
  IR_ASSERT(first && update && from && to);
  for (int i = 0; i < nn; i++) {
    IrNode *n = g->nodes[i];
    for (int k = 0; k < n->nin; k++) {
      IrValue *v = n->in[k];
      if (n->phase == PHASE_UPDATE && (n->op == OP_ADAMW || n->op == OP_SGD) && k == 0)
        update[v->id] = n;
      else if (n->phase != PHASE_UPDATE && !first[v->id])
        first[v->id] = n;
    }
  }
  int rc = 0, nrep = 0, ncasts = 0;
  IrNode **casts = calloc((size_t)nv + 1, sizeof *casts);  // of inputs and constants
  IR_ASSERT(casts);
  ir_batch_begin(g);
  // 1. bf16 copies of the float leaves: parameters' working copies, casts of inputs and constants
  for (int i = 0; i < nv && !rc; i++) {
    IrValue *v = g->values[i];
    if (v->producer || !ir_is_float(v->dtype) || !first[i])
      continue;
    IrValue *c = NULL;
    if (v->role == ROLE_PARAM) {
      c = like(g, v, DT_BF16, ROLE_COPY, "bf16");
      if (update[i]) {  // written after the parameter's update
        ir_insert_before(g, update[i]->id + 1);
        g->cur_phase = PHASE_UPDATE;
        ir_set_block(g, update[i]);
        g->cur_loc = v->loc;
        IrValue *in[2] = {c, v};
        rc = ir_infer(g, ir_node_new(g, OP_ASSIGN, in, 2, 0), d);
      }
    } else if (v->role == ROLE_INPUT || v->role == ROLE_CONST) {
      ir_insert_before(g, first[i]->id);
      c = cast(g, v, DT_BF16, first[i], "bf16", d);
      rc = !c;
      if (c)
        casts[ncasts++] = c->producer;
    }
    if (c)
      from[nrep] = v, to[nrep++] = c;
  }
  ir_insert_before(g, -1);
  ir_batch_end(g);
  if (!rc) {
    ir_replace_uses_in_phase(g, from, to, nrep, PHASE_FORWARD);
    ir_replace_uses_in_phase(g, from, to, nrep, PHASE_BACKWARD);
    for (int i = 0; i < ncasts; i++)  // the casts themselves read the leaves
      for (int k = 0; k < nrep; k++)
        if (casts[i]->in[0] == to[k])
          casts[i]->in[0] = from[k];
  }
  // 2. what forward and backward make, in bf16, but the parameters' gradients
  // where they are sums in float32 (over the values step 1 made too)
  grad32 = calloc((size_t)g->nvalues + 1, sizeof *grad32);
  IR_ASSERT(grad32);
  for (int i = 0; i < nv; i++) {
    IrValue *p = g->values[i];
    if (p->role == ROLE_PARAM && p->grad && p->grad->producer &&
        p->grad->producer->phase == PHASE_BACKWARD)
      grad32[p->grad->id] = !ctx->opt.grads_bf16;
  }
  for (int i = 0; i < g->nnodes && !rc; i++) {
    IrNode *n = g->nodes[i];
    if (n->phase == PHASE_UPDATE)
      continue;
    for (int k = 0; k < n->nout; k++)
      if (ir_is_float(n->out[k]->dtype) && !stays_f32(n, k) &&
          !(grad32[n->out[k]->id] && sums_in_f32(n, k)))
        n->out[k]->dtype = DT_BF16;
    if (n->op == OP_CAST && n->in[0]->dtype == DT_I32 && n->out[0]->dtype == DT_BF16)
      ir_set_str(g, n, "to", "bf16");  // an integer mask in bf16 arithmetic
  }
  // 2b. a float input of another type than the node computes in (a float32
  // scalar broadcast into bf16, the gradient of a mean) is cast to it, but
  // the float32 inputs kernels take as such (a loss's gradient, the row
  // statistics). A float32 sum into a gradient computes in bf16.
  int made = g->nnodes;
  ir_batch_begin(g);
  for (int i = 0; i < made && !rc; i++) {
    IrNode *n = g->nodes[i];
    if (n->phase == PHASE_UPDATE || n->op == OP_CAST)   // a cast reads another type as such
      continue;
    IrDType t = DT_COUNT;
    bool sums = false;
    for (int k = 0; k < n->nout && t == DT_COUNT; k++) {
      bool u = grad32[n->out[k]->id] && sums_in_f32(n, k);
      sums |= u;
      if (ir_is_float(n->out[k]->dtype) && !stays_f32(n, k) && !u)
        t = n->out[k]->dtype;
    }
    if (t == DT_COUNT && sums)
      t = DT_BF16;
    for (int k = 0; k < n->nin && t != DT_COUNT && !rc; k++) {
      IrValue *x = n->in[k];
      if (!ir_is_float(x->dtype) || x->dtype == t || takes_f32(n, k))
        continue;
      ir_insert_before(g, n->id);
      IrValue *c = cast(g, x, t, n, "bf16", d);
      if (!(rc = !c))
        n->in[k] = c;
    }
  }
  ir_insert_before(g, -1);
  ir_batch_end(g);
  // 3. each parameter's gradient: its bf16 value cast to float32 where it is made
  ir_batch_begin(g);
  for (int i = 0; i < nv && !rc; i++) {
    IrValue *p = g->values[i];
    if (p->role != ROLE_PARAM || !p->grad || !p->grad->producer || p->grad->dtype != DT_BF16 ||
        ctx->opt.grads_bf16)
      continue;
    IrNode *made = p->grad->producer;
    ir_insert_before(g, made->id + 1);
    IrValue *g32 = cast(g, p->grad, DT_F32, made, "f32", d);
    if (!(rc = !g32)) {
      if (update[i])
        for (int k = 1; k < update[i]->nin; k++)
          if (update[i]->in[k] == p->grad)
            update[i]->in[k] = g32;
      p->grad = g32;
    }
  }
  ir_insert_before(g, -1);
  ir_batch_end(g);
  // 4. the shape rules agree with the types (and the casts' with theirs)
  for (int i = 0; i < g->nnodes && !rc; i++)
    rc = ir_infer(g, g->nodes[i], d);
  free(first), free(update), free(from), free(to), free(casts), free(grad32);
  g->cur_phase = PHASE_FORWARD;
  ir_set_block(g, NULL);
  g->cur_loc = (IrLoc){0};
  *changed = true;
  return rc;
}
