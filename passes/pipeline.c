// The pass pipeline.
#include "passes.h"

#include <float.h>
#include <math.h>
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

// Position of the pass called name in the pipeline; -1 for NULL, -2 when no pass has that name.
static int pass_index(const char *name) {
  if (!name)
    return -1;
  for (int i = 0; pass_pipeline[i].name; i++)
    if (!strcmp(pass_pipeline[i].name, name))
      return i;
  return -2;
}

// The optimizer settings are compiled into the program as float literals: each must be a float
// in its range after that conversion (0.99999999999 is 1.0f, 1e39 is inf, 1e-50 is 0).
static int check_options(const PassOptions *o, IrDiag *d) {
  const struct {
    const char *flag, *range;
    double value;
    bool above_zero, below_one;
  } s[] = {
      {"--lr", "at least 0", o->lr, false, false},
      {"--beta1", "in [0, 1)", o->beta1, false, true},
      {"--beta2", "in [0, 1)", o->beta2, false, true},
      {"--eps", "above 0", o->eps, true, false},
      {"--weight-decay", "at least 0", o->weight_decay, false, false},
  };
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
    double x = s[i].value;
    float f = fabs(x) <= FLT_MAX || isnan(x) ? (float)x : (float)copysign(INFINITY, x);
    if (!isfinite(f) || f < 0 || (s[i].above_zero && f == 0) || (s[i].below_one && f >= 1))
      return ir_error(d, (IrLoc){0}, "%s %.12g is %.9g as a float, where the program holds it; it "
                      "must be a finite number %s", s[i].flag, x, (double)f, s[i].range);
  }
  return 0;
}

int pass_run_all(IrGraph *g, PassCtx *ctx) {
  if (check_options(&ctx->opt, ctx->diag) || ir_verify(g, "input", ctx->diag))
    return -1;
  // Resume after the later of the caller's start and the last pass that changed the graph (IR
  // text read back records it): the passes before it have run.
  int done = pass_index(g->after), start = pass_index(ctx->opt.start_after),
      stop = pass_index(ctx->opt.stop_after);
  if (done == -2)
    return ir_error(ctx->diag, (IrLoc){0}, "the IR says it is after pass '%s', which mtc does not have",
                    g->after);
  if (stop >= 0 && done > stop)
    return ir_error(ctx->diag, (IrLoc){0},
                    "the IR is after pass '%s', but this command needs it from no later than pass "
                    "'%s': print it with `mtc inspect MODEL --dump-after %s`",
                    g->after, ctx->opt.stop_after, ctx->opt.stop_after);
  int want = ctx->opt.dump_after && strcmp(ctx->opt.dump_after, "all") ? pass_index(ctx->opt.dump_after) : -1;
  if (want >= 0 && want < done)
    return ir_error(ctx->diag, (IrLoc){0}, "--dump-after %s: the IR is already after pass '%s'",
                    ctx->opt.dump_after, g->after);
  if (want >= 0 && want == done)
    dump(g, ctx, g->after); // the graph as read is the graph after that pass
  int first = (done > start ? done : start) + 1;
  for (int i = first; pass_pipeline[i].name; i++) {
    const Pass *p = &pass_pipeline[i];
    bool changed = false;
    if (p->run(g, ctx, &changed))
      return -1;
    if (changed) {
      g->after = p->name;
      if (ir_verify(g, p->name, ctx->diag))
        return -1;
    }
    dump(g, ctx, p->name);
    if (i == stop)
      break;
  }
  return 0;
}
