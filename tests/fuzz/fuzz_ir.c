// IR text: what parses prints as text that parses to the same text again
// (print -> parse -> print), and the passes after the one it records run.
#include "fuzz_graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text)
    return 0;
  IrDiag d = {0};
  IrGraph *g = ir_parse(text, "fuzz.ir", &d);
  free(text);
  if (!fuzz_loaded(g, &d))
    return 0;
  char *a = ir_print_str(g);
  IrGraph *h = ir_parse(a, "printed.ir", &d);
  char *b = h ? ir_print_str(h) : NULL;
  if (!b || strcmp(a, b))
    __builtin_trap(); // the round trip must hold
  free(a), free(b);
  ir_graph_free(h);
  fuzz_passes(g);
  return 0;
}
