// The DSL through the memory plan.
#include "frontend.h"
#include "fuzz_graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text)
    return 0;
  IrDiag d = {0};
  IrGraph *g = fe_dsl_parse(text, "fuzz.mtc", NULL, 0, 0, &d);
  free(text);
  if (fuzz_loaded(g, &d))
    fuzz_passes(g);
  return 0;
}
