// The pass pipeline.
#include "passes.h"

#include <float.h>
#include <math.h>
#include <string.h>

const Pass pass_pipeline[] = {
    {"shapes", pass_shapes},       // symbolic shape inference and checks
    {"fusion", pass_fusion},       // layernorm, GELU, attention, cross-entropy from their parts
    {"freeze", pass_freeze},       // --freeze: the parameters it names become constants
    {"autodiff", pass_autodiff},   // reverse-mode gradients of the loss
    {"optimizer", pass_optimizer}, // parameter updates
    {"precision", pass_precision}, // bf16 mixed precision: master weights, working copies, casts
    {"vocab", pass_vocab},         // bf16: the vocabulary padded to a multiple of 128
    {"recompute", pass_recompute}, // checkpointed layers recomputed in backward (none unless asked)
    {"lower", pass_lower},         // a parallel plan: buckets, collectives (none without one)
    {"epilogue", pass_epilogue},   // biases and GELUs in their GEMMs' epilogues
    {"swap", pass_swap},           // swapped layers' activations to host memory and back
    {"copies", pass_copies},       // copies and ZeRO-3 gathers beside the compute: slots, waits
    {"memplan", pass_memplan},     // liveness and the static memory plan
    {NULL, NULL},
};

PassOptions pass_default_options(void) {
  return (PassOptions){.optimizer = OPTIM_ADAMW, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                       .weight_decay = 0.0};
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

bool pass_exists(const char *name) { return pass_index(name) >= 0; }

// The optimizer settings are compiled into the program as float literals: each must lie in its
// attribute's range (ir/attrs.def) as the float it becomes (0.99999999999 is 1.0f, 1e39 is inf,
// 1e-50 is 0).
static int check_options(const PassOptions *o, IrDiag *d) {
  const struct {
    const char *flag, *attr;
    double value;
  } s[] = {
      {"--lr", "lr", o->lr},          {"--beta1", "beta1", o->beta1},
      {"--beta2", "beta2", o->beta2}, {"--eps", "eps", o->eps},
      {"--weight-decay", "weight_decay", o->weight_decay},
  };
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
    const IrAttrDecl *a = ir_op_attr(OP_ADAMW, s[i].attr); // SGD's lr and decay: the same
    double x = s[i].value;
    float f = fabs(x) <= FLT_MAX || isnan(x) ? (float)x : (float)copysign(INFINITY, x);
    if (!(f >= a->lo && f <= a->hi))
      return ir_error(d, (IrLoc){0}, "%s %.12g is %.9g as a float, where the program holds it; it "
                      "must be a number in [%.9g, %.9g]", s[i].flag, x, (double)f, a->lo, a->hi);
  }
  return 0;
}

// Checks that g (perhaps IR text read back after some pass) can go on to pass
// `stop` (-1: any), and dumps it as read when --dump-after names the pass it
// is after. *done: the last pass that has run on it (-1: none).
static int begin(IrGraph *g, PassCtx *ctx, int stop, int *done) {
  g->no_epilogue = ctx->opt.no_epilogue;
  if (check_options(&ctx->opt, ctx->diag) || ir_verify(g, "input", ctx->diag))
    return -1;
  *done = pass_index(g->after);
  if (*done == -2)
    return ir_error(ctx->diag, (IrLoc){0}, "the IR says it is after pass '%s', which mtc does not have",
                    g->after);
  if (stop >= 0 && *done > stop)
    return ir_error(ctx->diag, (IrLoc){0},
                    "the IR is after pass '%s', but this command needs it from no later than pass "
                    "'%s': print it with `mtc inspect MODEL --dump-after %s`",
                    g->after, pass_pipeline[stop].name, pass_pipeline[stop].name);
  bool one = ctx->opt.dump_after && strcmp(ctx->opt.dump_after, "all");
  int want = one ? pass_index(ctx->opt.dump_after) : -1;
  if (want >= 0 && want < *done)
    return ir_error(ctx->diag, (IrLoc){0}, "--dump-after %s: the IR is already after pass '%s'",
                    ctx->opt.dump_after, g->after);
  if (want >= 0 && want == *done)
    dump(g, ctx, g->after); // the graph as read is the graph after that pass
  return 0;
}

// Passes first .. last (-1: to the end), each verified after it changes the graph.
static int run(IrGraph *g, PassCtx *ctx, int first, int last) {
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
    if (i == last)
      break;
  }
  return 0;
}

int pass_run_all(IrGraph *g, PassCtx *ctx) {
  int done, stop = pass_index(ctx->opt.stop_after);
  if (begin(g, ctx, stop, &done))
    return -1;
  return run(g, ctx, done + 1, stop);
}

int pass_build_training(IrGraph *g, PassCtx *ctx) {
  int done, last = pass_index(PASS_TRAINING_LAST), stop = pass_index(ctx->opt.stop_after);
  if (begin(g, ctx, stop, &done))
    return -1;
  return done >= last ? 0 : run(g, ctx, done + 1, stop >= 0 && stop < last ? stop : last);
}

int pass_lower_plan(IrGraph *g, PassCtx *ctx) {
  // the graph is as pass_build_training left it: the passes it is after have run
  int done = pass_index(g->after), last = pass_index(PASS_TRAINING_LAST),
      stop = pass_index(ctx->opt.stop_after);
  if (stop >= 0 && stop <= last)
    return 0;
  return run(g, ctx, (done > last ? done : last) + 1, stop);
}
