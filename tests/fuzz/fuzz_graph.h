// Shared by the fuzz targets that load a graph (ONNX, DSL, IR text).
#ifndef MTC_FUZZ_GRAPH_H
#define MTC_FUZZ_GRAPH_H

#include "fuzz.h"
#include "passes.h"

// A loader's result: a graph, or NULL with a message (a failure without one is a finding).
static inline bool fuzz_loaded(const IrGraph *g, const IrDiag *d) {
  if (!g && !d->msg[0])
    __builtin_trap();
  return g != NULL;
}

// Every pass the graph has not had, through the memory plan; a failure must say why. Frees g.
static inline void fuzz_passes(IrGraph *g) {
  IrDiag d = {0};
  PassCtx ctx = {.opt = pass_default_options(), .diag = &d};
  if (pass_run_all(g, &ctx) && !d.msg[0])
    __builtin_trap();
  pass_memplan_free(ctx.mem);
  ir_graph_free(g);
}

#endif
