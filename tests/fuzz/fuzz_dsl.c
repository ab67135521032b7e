// The DSL through the memory plan.
#include "frontend.h"
#include "fuzz.h"
#include "passes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text)
    return 0;
  IrDiag d = {0};
  IrGraph *g = fe_dsl_parse(text, "fuzz.mtc", NULL, 0, &d);
  free(text);
  if (!g) {
    if (!d.msg[0])
      __builtin_trap(); // every failure says why
    return 0;
  }
  PassCtx ctx = {.opt = pass_default_options(), .diag = &d};
  if (pass_run_all(g, &ctx) && !d.msg[0])
    __builtin_trap();
  pass_memplan_free(ctx.mem);
  ir_graph_free(g);
  return 0;
}
