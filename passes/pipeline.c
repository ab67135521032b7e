// The pass pipeline.
#include "passes.h"

#include <string.h>

const Pass pass_pipeline[] = {
    {"shapes", pass_shapes},       // symbolic shape inference and checks
    {"fusion", pass_fusion},       // layernorm, GELU, attention, cross-entropy from their parts
    {"autodiff", pass_autodiff},   // reverse-mode gradients of the loss
    {"optimizer", pass_optimizer}, // parameter updates
    {"recompute", pass_recompute}, // checkpointed layers recomputed in backward (none unless asked)
    {"lower", pass_lower},         // a parallel plan: buckets, collectives (none without one)
    {"memplan", pass_memplan},     // liveness and the static memory plan
    {NULL, NULL},
};

PassOptions pass_default_options(void) {
  return (PassOptions){.optimizer = OPTIM_ADAMW, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                       .weight_decay = 0.0};
}

bool pass_exists(const char *name) {
  for (const Pass *p = pass_pipeline; p->name; p++)
    if (!strcmp(p->name, name))
      return true;
  return false;
}

static void dump(IrGraph *g, PassCtx *ctx, const char *pass) {
  const char *want = ctx->opt.dump_after;
  if (!want || (strcmp(want, "all") && strcmp(want, pass)))
    return;
  FILE *f = ctx->opt.dump ? ctx->opt.dump : stdout;
  if (ctx->opt.dot)
    ir_print_dot(f, g);
  else {
    fprintf(f, "# after %s\n", pass);
    ir_print(f, g);
  }
}

int pass_run_all(IrGraph *g, PassCtx *ctx) {
  if (ir_verify(g, "input", ctx->diag))
    return -1;
  bool started = !ctx->opt.start_after;
  for (const Pass *p = pass_pipeline; p->name; p++) {
    if (!started) {
      started = !strcmp(p->name, ctx->opt.start_after);
      continue;
    }
    bool changed = false;
    if (p->run(g, ctx, &changed))
      return -1;
    if (changed && ir_verify(g, p->name, ctx->diag))
      return -1;
    dump(g, ctx, p->name);
    if (ctx->opt.stop_after && !strcmp(ctx->opt.stop_after, p->name))
      break;
  }
  return 0;
}
