// Activation swap (ProTrain's third choice beside keeping and checkpointing a
// block's activations): a swapped layer's activations go to host memory as
// forward finishes with them and come back just before backward reads them.
//
// The plan's swap picks the first S repeated layers (IR blocks 1..S; the
// plan's checkpointing takes the K layers after them, passes/recompute.c),
// the ones whose activations backward needs last. A value is swapped when it
// is a float activation of forward (not a parameter, an input or in a
// bucket) and every backward node that reads it is in a swapped layer:
//
//   to_host(v) -> v.swap (host)    right after v's last forward read
//   from_host(v.swap) -> v.sw      right before v's first backward read, in
//                                  that reader's block; backward reads v.sw
//
// So v dies on the device at its last forward read and v.sw lives only from
// its first backward read to its last, as the liveness-based memory plan
// (passes/memplan.c) sees it; the host region holds every swapped value (one
// micro-batch's: the next overwrites them). Integer activations (indices)
// stay on the device, as the planner counts them.
//
// The pass runs after the lowering, on each rank's shapes, so tensor
// parallelism's collectives (which may rewrite a value in place in forward)
// come before the value's copy: the copy follows its last forward read.
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>

// Whether the graph's value v can go to host memory.
static bool swappable(const IrValue *v) {
  const IrNode *p = v->producer;
  return p && p->phase == PHASE_FORWARD && v->role == ROLE_ACT && !v->host && !v->bucket &&
         ir_is_float(v->dtype);
}

int pass_swap(IrGraph *g, PassCtx *ctx, bool *changed) {
  int want = ctx->plan ? ctx->plan->swap : 0;
  ctx->nswapped = 0;
  if (want == 0)
    return 0;
  int layers = pass_count_layers(g);
  int last = want == PLAN_CHECKPOINT_ALL ? layers : want;
  if (layers == 0)
    return ir_error(ctx->diag, (IrLoc){0}, "swap: the model has no repeated layers, whose "
                    "activations --swap moves to host memory (use none)");
  if (last > layers)
    return ir_error(ctx->diag, (IrLoc){0}, "swap: --swap %d, but the model has %d repeated "
                    "layer%s (use 1 to %d, all or none)", last, layers, layers == 1 ? "" : "s",
                    layers);
  // By value id: its last forward read, its first backward read (g->nnodes:
  // none), and whether a backward read is outside the swapped layers.
  int nv = g->nvalues;
  int *last_fwd = malloc(((size_t)nv + 1) * sizeof *last_fwd);
  int *first_bwd = malloc(((size_t)nv + 1) * sizeof *first_bwd);
  bool *kept = calloc((size_t)nv + 1, sizeof *kept);
  IrValue **from = malloc(((size_t)nv + 1) * sizeof *from);   // swapped, and brought back
  IrValue **to = malloc(((size_t)nv + 1) * sizeof *to);
  int n = 0;
  IR_ASSERT(last_fwd && first_bwd && kept && from && to);
  for (int i = 0; i < nv; i++)
    last_fwd[i] = -1, first_bwd[i] = g->nnodes;
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    for (int k = 0; k < n->nin; k++) {
      int v = n->in[k]->id;
      if (n->phase == PHASE_FORWARD)
        last_fwd[v] = i;
      else if (n->phase == PHASE_BACKWARD) {
        first_bwd[v] = i < first_bwd[v] ? i : first_bwd[v];
        kept[v] |= n->block < 1 || n->block > last;
      } else {
        kept[v] = true;   // the update reads it (not an activation)
      }
    }
  }
  ir_batch_begin(g);
  for (int i = 0; i < nv; i++) {
    IrValue *v = g->values[i];
    if (!swappable(v) || kept[i] || first_bwd[i] == g->nnodes)
      continue;
    int after = last_fwd[i] >= 0 ? last_fwd[i] : v->producer->id;
    g->cur_phase = PHASE_FORWARD;
    ir_set_block(g, g->nodes[after]);
    ir_insert_before(g, after + 1);
    IrNode *out = ir_node_new(g, OP_TO_HOST, &v, 1, 1);
    IrValue *h = out->out[0];
    char name[512];
    snprintf(name, sizeof name, "%s.swap", v->name);
    ir_value_rename(g, h, name);
    h->dtype = v->dtype;
    h->host = true;
    const Sym *numel = ir_numel(g, v);
    ir_value_set_shape(h, 1, &numel);
    IR_ASSERT(ir_infer(g, out, ctx->diag) == 0);
    const IrNode *reader = g->nodes[first_bwd[i]];
    g->cur_phase = PHASE_BACKWARD;
    ir_set_block(g, reader);
    ir_insert_before(g, first_bwd[i]);
    IrNode *back = ir_node_new(g, OP_FROM_HOST, &h, 1, 1);
    IrValue *sw = back->out[0];
    snprintf(name, sizeof name, "%s.sw", v->name);
    ir_value_rename(g, sw, name);
    sw->dtype = v->dtype;
    sw->role = ROLE_ACT;
    sw->loc = v->loc;
    ir_value_set_shape(sw, v->rank, v->shape);
    IR_ASSERT(ir_infer(g, back, ctx->diag) == 0);
    from[n] = v, to[n++] = sw;
  }
  ir_insert_before(g, -1);
  ir_batch_end(g);
  // backward reads the values brought back (from_host reads v.swap, not v)
  ir_replace_uses_in_phase(g, from, to, n, PHASE_BACKWARD);
  free(last_fwd), free(first_bwd), free(kept), free(from), free(to);
  ctx->nswapped = last;
  *changed = n > 0;
  g->cur_phase = PHASE_FORWARD;
  ir_set_block(g, NULL);
  return 0;
}
