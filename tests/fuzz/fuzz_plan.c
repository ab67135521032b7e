// Plan files (compile --plan FILE.json) against examples/gpt2.mtc's training graph.
#include "frontend.h"
#include "fuzz.h"
#include "passes.h"
#include "solver.h"

static IrGraph *model(void) {
  static IrGraph *g;
  if (g)
    return g;
  IrDiag d = {0};
  FeDefine defs[] = {{"L", 2}, {"C", 64}, {"NH", 2}, {"T", 16}, {"V", 256}, {"B", 2}};
  g = fe_dsl_load(MTC_SOURCE_DIR "/examples/gpt2.mtc", defs, 6, 0, &d);
  PassCtx ctx = {.opt = pass_default_options(), .diag = &d};
  ctx.opt.stop_after = "optimizer";
  if (!g || pass_run_all(g, &ctx)) {
    fprintf(stderr, "fuzz_plan: %s\n", d.msg);
    abort();
  }
  return g;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text)
    return 0;
  Plan ap = plan_single();
  IrDiag d = {0};
  if (sv_apply_read(model(), "fuzz.json", text, &ap, &d) && !d.msg[0])
    __builtin_trap(); // every failure says why
  plan_free(&ap);
  free(text);
  return 0;
}
