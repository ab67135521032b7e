// Activation checkpointing: a checkpointed block keeps only its inputs from
// forward, and its backward recomputes what it reads.
//
// The blocks are the IR's block ids: 1..L are the repeated layers (the DSL's
// `repeat`, ONNX names like "/h.3/..."), block 0 is everything outside them.
// the plan's checkpoint picks the first K layers (Megatron's --recompute-num-layers)
// or all of them; when the plan swaps the first S layers' activations
// (passes/swap.c), the K layers after those. For each checkpointed block b:
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

int pass_count_layers(const IrGraph *g) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->phase == PHASE_FORWARD && g->nodes[i]->block > n)
      n = g->nodes[i]->block;
  return n;
}

// The pass's state. It edits the graph in one batch (ir_batch_begin), so the
// positions of the graph as it came hold throughout, and the work for a block
// is that of its own nodes.
typedef struct Recompute {
  IrGraph *g;
  IrNode **by_block;   // the nodes in schedule order, grouped by block (a counting sort)
  int *start;          // block b's nodes are by_block[start[b] .. start[b + 1])
  char *needed;        // by value id (the graph's values before the pass): a clone is needed
  IrValue **map;       // by value id: its clone (while a block is done; NULL otherwise)
  int nv;              // the values before the pass
} Recompute;

// v is an output of a forward node of block b.
static bool mine(const IrValue *v, int b) {
  return v->producer && v->producer->phase == PHASE_FORWARD && v->producer->block == b;
}

// Recompute block b's activations in its backward. Returns the number of
// nodes cloned (0: b's backward reads none of them), -1 with d on error.
static int recompute_block(Recompute *R, int b, IrDiag *d) {
  IrGraph *g = R->g;
  IrNode **node = R->by_block + R->start[b];
  int count = R->start[b + 1] - R->start[b], first_bwd = -1;
  for (int i = 0; i < count; i++) {
    const IrNode *n = node[i];
    if (n->phase != PHASE_BACKWARD)
      continue;
    if (first_bwd < 0)
      first_bwd = n->id;
    for (int k = 0; k < n->nin; k++)
      R->needed[n->in[k]->id] |= mine(n->in[k], b);
  }
  // b's forward nodes that the needed values depend on (walking back from
  // b's backward), then in schedule order into list.
  IrNode **list = malloc(((size_t)count + 1) * sizeof *list);
  char *take = calloc((size_t)count + 1, 1);
  IR_ASSERT(list && take);
  for (int i = count - 1; i >= 0; i--) {
    IrNode *f = node[i];
    if (f->phase != PHASE_FORWARD || f->id >= first_bwd)
      continue;
    for (int k = 0; k < f->nout; k++)
      take[i] |= R->needed[f->out[k]->id];
    for (int k = 0; take[i] && k < f->nin; k++)
      R->needed[f->in[k]->id] |= mine(f->in[k], b);
  }
  int n = 0;
  for (int i = 0; i < count; i++)
    if (take[i])
      list[n++] = node[i];
  int rc = n;
  if (n > 0) {
    g->cur_phase = PHASE_BACKWARD;
    g->cur_block = b, g->cur_use = 0;  // each clone keeps its original's use
    ir_insert_before(g, first_bwd);
    if (!ir_clone_nodes(g, list, n, R->map, "rc", d))
      rc = -1;
    ir_insert_before(g, -1);
  }
  // the marks go for the next block (before the reads below change)
  for (int i = 0; i < count; i++)
    for (int k = 0; k < node[i]->nin; k++)
      R->needed[node[i]->in[k]->id] = 0;
  // b's backward reads the clones (theirs are already mapped)
  for (int i = 0; i < count && rc > 0; i++) {
    IrNode *u = node[i];
    for (int k = 0; u->phase == PHASE_BACKWARD && k < u->nin; k++)
      if (u->in[k]->id < R->nv && R->map[u->in[k]->id])
        u->in[k] = R->map[u->in[k]->id];
  }
  for (int i = 0; i < n; i++)
    for (int k = 0; k < list[i]->nout; k++)
      R->map[list[i]->out[k]->id] = NULL;
  free(list), free(take);
  return rc;
}

int pass_recompute(IrGraph *g, PassCtx *ctx, bool *changed) {
  int want = ctx->plan ? ctx->plan->checkpoint : 0;
  ctx->nlayers = pass_count_layers(g);
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
  // the layers after the swapped ones (passes/swap.c)
  int swapped = ctx->plan->swap == PLAN_CHECKPOINT_ALL ? ctx->nlayers : ctx->plan->swap;
  if (want != PLAN_CHECKPOINT_ALL && swapped + want > ctx->nlayers)
    return ir_error(ctx->diag, (IrLoc){0}, "recompute: --checkpoint %d after %d swapped layer%s, "
                    "but the model has %d repeated layers", want, swapped,
                    swapped == 1 ? "" : "s", ctx->nlayers);
  int last = want == PLAN_CHECKPOINT_ALL ? ctx->nlayers : swapped + want, nb = ir_nblocks(g),
      rc = 0;
  Recompute R = {.g = g, .nv = g->nvalues};
  R.by_block = malloc(((size_t)g->nnodes + 1) * sizeof *R.by_block);
  R.start = calloc((size_t)nb + 2, sizeof *R.start);
  R.needed = calloc((size_t)R.nv + 1, 1);
  R.map = calloc((size_t)R.nv + 1, sizeof *R.map);
  IR_ASSERT(R.by_block && R.start && R.needed && R.map);
  for (int i = 0; i < g->nnodes; i++)
    R.start[g->nodes[i]->block + 2]++;
  for (int b = 0; b < nb; b++)
    R.start[b + 2] += R.start[b + 1];
  for (int i = 0; i < g->nnodes; i++)   // start[b + 1] ends as the end of b's nodes
    R.by_block[R.start[g->nodes[i]->block + 1]++] = g->nodes[i];
  ir_batch_begin(g);
  for (int b = swapped + 1; b <= last && rc >= 0; b++) {
    rc = recompute_block(&R, b, ctx->diag);
    ctx->ncheckpointed += rc > 0;
    *changed |= rc > 0;
  }
  ir_batch_end(g);
  free(R.by_block), free(R.start), free(R.needed), free(R.map);
  if (rc < 0)
    return -1;
  g->cur_phase = PHASE_FORWARD;
  ir_set_block(g, NULL);
  return 0;
}
