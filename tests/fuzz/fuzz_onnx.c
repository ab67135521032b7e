// The ONNX loader through the memory plan. The fixtures' dims are bound to
// small values (B, T, N); a model without one of them is loaded again without.
#include "frontend.h"
#include "fuzz_graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_file(data, size, ".onnx");
  if (!path)
    return 0;
  FeDefine all[] = {{"B", 2}, {"T", 8}, {"N", 4}}, defs[3];
  int n = 3;
  memcpy(defs, all, sizeof all);
  IrDiag d = {0};
  IrGraph *g = NULL;
  for (int tries = 0; !g && tries <= 3; tries++) {
    FeOnnxOptions o = {.defines = defs, .ndefines = n};
    d.msg[0] = '\0';
    g = fe_onnx_load(path, &o, &d);
    if (g)
      break;
    // "-D X: the model has no dim X": drop X and try again
    int k = 0;
    for (int i = 0; i < n; i++) {
      char unknown[32];
      snprintf(unknown, sizeof unknown, "-D %s:", defs[i].name);
      if (!strstr(d.msg, unknown))
        defs[k++] = defs[i];
    }
    if (k == n)
      break;
    n = k;
  }
  if (fuzz_loaded(g, &d))
    fuzz_passes(g);
  return 0;
}
