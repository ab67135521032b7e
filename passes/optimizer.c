// Optimizer updates as ops: one adamw (or sgd) node per parameter, in the
// update phase, reading the parameter's gradient. AdamW's moments are
// optimizer-state values initialized to zero. The learning rate and step
// number are not attributes: the training program passes them at run time.
#include "passes.h"

#include <stdio.h>

static IrValue *state_like(IrGraph *g, const IrValue *p, const char *what) {
  char name[512];
  snprintf(name, sizeof name, "adamw.%s.%s", what, p->name);
  IrValue *s = ir_value_new(g, name, DT_F32, ROLE_STATE);
  ir_value_set_shape(s, p->rank, p->shape);
  s->init.kind = INIT_ZEROS;
  s->loc = p->loc;
  return s;
}

int pass_optimizer(IrGraph *g, PassCtx *ctx, bool *changed) {
  const PassOptions *o = &ctx->opt;
  int nvalues = g->nvalues;
  g->cur_phase = PHASE_UPDATE;
  for (int i = 0; i < nvalues; i++) {
    IrValue *p = g->values[i];
    if (p->role != ROLE_PARAM)
      continue;
    if (!p->grad)
      return ir_error(ctx->diag, p->loc, "optimizer: parameter '%s' has no gradient (run autodiff first)",
                      p->name);
    g->cur_block = p->grad->producer ? p->grad->producer->block : 0;
    g->cur_loc = p->loc;
    IrNode *n;
    if (o->optimizer == OPTIM_ADAMW) {
      IrValue *in[4] = {p, p->grad, state_like(g, p, "m"), state_like(g, p, "v")};
      n = ir_node_new(g, OP_ADAMW, in, 4, 0);
      ir_set_float(g, n, "beta1", o->beta1);
      ir_set_float(g, n, "beta2", o->beta2);
      ir_set_float(g, n, "eps", o->eps);
    } else {
      IrValue *in[2] = {p, p->grad};
      n = ir_node_new(g, OP_SGD, in, 2, 0);
    }
    ir_set_float(g, n, "lr", o->lr);
    ir_set_float(g, n, "weight_decay", o->weight_decay);
    if (ir_infer(g, n, ctx->diag))
      return -1;
    *changed = true;
  }
  g->cur_phase = PHASE_FORWARD;
  g->cur_block = 0;
  g->cur_loc = (IrLoc){0};
  return 0;
}
