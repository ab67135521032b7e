// Optimizer updates as ops: one adamw (or sgd) node per parameter, in the
// update phase, reading the parameter's gradient. AdamW's moments are
// optimizer-state values initialized to zero. The learning rate and step
// number are not attributes: the training program passes them at run time.
//
// Weight decay by role: a parameter of rank 2 or more (matrices, embeddings,
// convolution kernels) is decayed, one of rank 0 or 1 (norms, biases) is not,
// as nanoGPT and llm.c group them; --no-decay REGEX replaces the rule: the
// parameters whose names it matches are not decayed, all others are. An
// undecayed parameter's update has decay_end 0 (ir/attrs.def).
#include "passes.h"

#include <regex.h>
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

// Whether p's update applies weight decay (no_decay: --no-decay's pattern, or NULL).
static bool decays(const IrValue *p, const regex_t *no_decay) {
  return no_decay ? regexec(no_decay, p->name, 0, NULL, 0) != 0 : p->rank >= 2;
}

static int add_updates(IrGraph *g, PassCtx *ctx, const regex_t *no_decay, bool *changed) {
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
    ir_set_block(g, p->grad->producer);
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
    if (!decays(p, no_decay))
      ir_set_int(g, n, "decay_end", 0);
    if (ir_infer(g, n, ctx->diag))
      return -1;
    *changed = true;
  }
  g->cur_phase = PHASE_FORWARD;
  ir_set_block(g, NULL);
  g->cur_loc = (IrLoc){0};
  return 0;
}

int pass_regex(regex_t *re, const char *flag, const char *pattern, IrDiag *d) {
  int rc = regcomp(re, pattern, REG_EXTENDED | REG_NOSUB);
  if (rc) {
    char why[256];
    regerror(rc, re, why, sizeof why);
    return ir_error(d, (IrLoc){0}, "%s '%s' is not a regular expression: %s", flag, pattern, why);
  }
  return 0;
}

int pass_optimizer(IrGraph *g, PassCtx *ctx, bool *changed) {
  const char *pattern = ctx->opt.no_decay;
  regex_t no_decay;
  if (pattern && pass_regex(&no_decay, "--no-decay", pattern, ctx->diag))
    return -1;
  int rc = add_updates(g, ctx, pattern ? &no_decay : NULL, changed);
  if (pattern)
    regfree(&no_decay);
  return rc;
}

int pass_count_decayed(const IrGraph *g, const PassOptions *o, int *nparams, int *ndecayed,
                       IrDiag *d) {
  regex_t no_decay;
  if (o->no_decay && pass_regex(&no_decay, "--no-decay", o->no_decay, d))
    return -1;
  *nparams = *ndecayed = 0;
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *p = g->values[i];
    if (p->role != ROLE_PARAM)
      continue;
    ++*nparams;
    *ndecayed += decays(p, o->no_decay ? &no_decay : NULL);
  }
  if (o->no_decay)
    regfree(&no_decay);
  return 0;
}
