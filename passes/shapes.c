// Symbolic shape inference: run every node's shape rule in schedule order.
// Unknown output shapes are filled in; known ones are checked, and a mismatch
// names both shapes and the node's source location.
#include "passes.h"

int pass_shapes(IrGraph *g, PassCtx *ctx, bool *changed) {
  for (int i = 0; i < g->nnodes; i++) {
    IrNode *n = g->nodes[i];
    bool unknown = false;
    for (int k = 0; k < n->nout; k++)
      unknown |= n->out[k]->rank < 0;
    if (ir_infer(g, n, ctx->diag))
      return -1;
    *changed |= unknown;
  }
  if (g->loss && (g->loss->rank != 0 || g->loss->dtype != DT_F32))
    return ir_error(ctx->diag, g->loss->loc, "the loss '%s' must be a scalar f32, not %s%s",
                    g->loss->name, ir_dtype_name(g->loss->dtype), ir_shape_str(g, g->loss));
  return 0;
}
