// Activation checkpointing: a checkpointed block keeps only its inputs from
// forward, and its backward recomputes what it reads.
//
// The blocks are the IR's block ids: 1..L are the repeated layers (the DSL's
// `repeat`, ONNX names like "/h.3/..."), block 0 is everything outside them.
// opt.checkpoint picks the first K layers (Megatron's --recompute-num-layers)
// or all of them. For each checkpointed block b:
//
//   - its activations are the outputs of b's forward nodes;
//   - b's backward nodes read some of them; the forward nodes of b that those
//     need (walking b's forward backwards from them) are cloned, in order,
//     right before b's first backward node, in phase backward and block b,
//     their outputs named NAME.rc;
//   - b's backward nodes read the clones instead.
//
// The originals then die at their last forward read, and the clones live
// only while b's backward runs, so the liveness-based memory plan
// (passes/memplan.c) no longer holds every layer's activations at the end of
// forward. What stays is b's input (another block's output, read again by
// the clones) and whatever other blocks' backward read of b's values (the
// next block's backward reads b's output: it is that block's input).
//
// Parameters are read as they are; the lowering, which runs after this pass,
// redirects every backward read of a ZeRO-3 parameter (the clones' reads
// included) to a gathered copy, gathered before the first of them, i.e.
// before the recompute.
//
// Randomness recomputes identically: dropout's mask is a function of (seed,
// key, step counter, element position), and the counter is ticked once per
// forward, before the first dropout, never in backward. Nodes without outputs
// (that tick) are never cloned: no activation depends on them.
#include "passes.h"

#include <stdlib.h>

// The highest block id of a forward node: the number of repeated layers.
static int count_layers(const IrGraph *g) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->phase == PHASE_FORWARD && g->nodes[i]->block > n)
      n = g->nodes[i]->block;
  return n;
}

// Recompute block b's activations in its backward. Returns the number of
// nodes cloned (0: b's backward reads none of them), -1 with d on error.
static int recompute_block(IrGraph *g, int b, IrDiag *d) {
  int nv = g->nvalues, first_bwd = -1;
  char *mine = calloc((size_t)nv + 1, 1), *needed = calloc((size_t)nv + 1, 1);
  char *take = calloc((size_t)g->nnodes + 1, 1);
  IrNode **list = malloc(((size_t)g->nnodes + 1) * sizeof *list);
  IrValue **map = calloc((size_t)nv + 1, sizeof *map);
  IR_ASSERT(mine && needed && take && list && map);
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    if (n->block != b)
      continue;
    if (n->phase == PHASE_FORWARD)
      for (int k = 0; k < n->nout; k++)
        mine[n->out[k]->id] = 1;
    if (n->phase != PHASE_BACKWARD)
      continue;
    if (first_bwd < 0)
      first_bwd = i;
    for (int k = 0; k < n->nin; k++)
      needed[n->in[k]->id] |= mine[n->in[k]->id];
  }
  // b's forward nodes that the needed values depend on (walking back from
  // b's backward), then in schedule order into list.
  for (int i = first_bwd - 1; i >= 0; i--) {
    IrNode *f = g->nodes[i];
    bool need = false;
    for (int k = 0; f->phase == PHASE_FORWARD && f->block == b && k < f->nout; k++)
      need |= needed[f->out[k]->id];
    take[i] = need;
    for (int k = 0; need && k < f->nin; k++)
      needed[f->in[k]->id] |= mine[f->in[k]->id];
  }
  int n = 0;
  for (int i = 0; i < first_bwd; i++)
    if (take[i])
      list[n++] = g->nodes[i];
  int rc = n;
  if (n > 0) {
    g->cur_phase = PHASE_BACKWARD;
    g->cur_block = b;
    ir_insert_before(g, first_bwd);
    if (!ir_clone_nodes(g, list, n, map, "rc", d))
      rc = -1;
    ir_insert_before(g, -1);
  }
  // b's backward reads the clones (theirs are already mapped).
  for (int i = first_bwd + n; rc > 0 && i < g->nnodes; i++) {
    IrNode *u = g->nodes[i];
    for (int k = 0; u->phase == PHASE_BACKWARD && u->block == b && k < u->nin; k++)
      if (u->in[k]->id < nv && map[u->in[k]->id])
        u->in[k] = map[u->in[k]->id];
  }
  free(mine), free(needed), free(take), free(list), free(map);
  return rc;
}

int pass_recompute(IrGraph *g, PassCtx *ctx, bool *changed) {
  int want = ctx->opt.checkpoint;
  ctx->nlayers = count_layers(g);
  ctx->ncheckpointed = 0;
  if (want == 0)
    return 0;
  if (want > ctx->nlayers && ctx->nlayers == 0)
    return ir_error(ctx->diag, (IrLoc){0}, "recompute: --checkpoint %d, but the model has no "
                    "repeated layers (use none or all)", want);
  if (want > ctx->nlayers)
    return ir_error(ctx->diag, (IrLoc){0}, "recompute: --checkpoint %d, but the model has %d "
                    "repeated layer%s (use 1 to %d, all or none)", want, ctx->nlayers,
                    ctx->nlayers == 1 ? "" : "s", ctx->nlayers);
  int last = want == PASS_CHECKPOINT_ALL ? ctx->nlayers : want;
  for (int b = 1; b <= last; b++) {
    int rc = recompute_block(g, b, ctx->diag);
    if (rc < 0)
      return -1;
    ctx->ncheckpointed += rc > 0;
    *changed |= rc > 0;
  }
  g->cur_phase = PHASE_FORWARD;
  g->cur_block = 0;
  return 0;
}
