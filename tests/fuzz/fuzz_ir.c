// IR text: what parses prints as text that parses to the same text again
// (print -> parse -> print), and the passes after the one it records run.
#include "fuzz.h"
#include "ir.h"
#include "passes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text)
    return 0;
  IrDiag d = {0};
  IrGraph *g = ir_parse(text, "fuzz.ir", &d);
  free(text);
  if (!g) {
    if (!d.msg[0])
      __builtin_trap(); // every failure says why
    return 0;
  }
  char *a = ir_print_str(g);
  IrGraph *h = ir_parse(a, "printed.ir", &d);
  char *b = h ? ir_print_str(h) : NULL;
  if (!b || strcmp(a, b))
    __builtin_trap(); // the round trip must hold
  free(a), free(b);
  ir_graph_free(h);
  PassCtx ctx = {.opt = pass_default_options(), .diag = &d};
  d.msg[0] = '\0';
  if (pass_run_all(g, &ctx) && !d.msg[0])
    __builtin_trap();
  pass_memplan_free(ctx.mem);
  ir_graph_free(g);
  return 0;
}
