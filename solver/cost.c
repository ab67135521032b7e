// The cost model.
//
// Part 1 reads the training graph (after autodiff, the optimizer and the
// precision pass) and writes, per block, formulas in the model's symbols:
// parameters and the bytes of their model state, FLOPs, the activations
// backward reads, what a checkpointed block keeps, backward temporaries, and
// the traffic of tensor parallelism (the collectives that ir/shard.c's
// propagation of Megatron's layout implies, so that the plan prices what the
// lowering will insert). Every size is bytes of the element type the IR gives
// the value (ir_nbytes): the planner has no table of its own. Nothing is run;
// the formulas are evaluated under bindings.
//
// Part 2 prices one joint choice (layout, checkpointing, ZeRO stage, offload
// share) of one block on one device: seconds per micro-batch and per step,
// bytes held all step and at the block's peak. Compute is a roofline per op;
// collectives are alpha-beta ring costs; communication that can run beside
// compute (data-parallel reductions, ZeRO gathers, offload copies) is
// exposed only where it exceeds the compute it hides behind.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "passes.h"


// ---- formulas from the graph --------------------------------------------------------------------

static const Sym *s_add(IrGraph *g, const Sym *a, const Sym *b) { return sym_add(&g->arena, a, b); }
static const Sym *s_scale(IrGraph *g, const Sym *a, int64_t k) {
  return sym_scale(&g->arena, a, k, 1);
}

// Values that forward makes (or the data loader feeds) and backward may read.
static bool from_forward(const IrValue *v) {
  if (v->role == ROLE_INPUT)
    return true;
  return v->role == ROLE_ACT && v->producer && v->producer->phase == PHASE_FORWARD;
}

// A block's name: the longest dotted prefix its parameters share ("h.0"
// for h.0.ln1_w, h.0.attn.0.qkv_w, ...); "rest" for what is outside blocks.
static const char *block_name(IrGraph *g, int id, const char *prefix) {
  if (id == 0)
    return "rest";
  if (!prefix) {
    char buf[32];
    snprintf(buf, sizeof buf, "block %d", id);
    return ir_strdup(&g->arena, buf);
  }
  return prefix;
}

// The longest run of whole dotted parts that `prefix` and `name` without its
// last part share (prefix NULL: all of that); NULL when nothing is shared.
static const char *common_prefix(IrGraph *g, const char *prefix, const char *name) {
  const char *dot = strrchr(name, '.');
  size_t n = dot ? (size_t)(dot - name) : 0;
  if (prefix) {
    size_t k = 0, cut = 0;
    for (; k < n && prefix[k] && prefix[k] == name[k]; k++)
      if (name[k] == '.')
        cut = k;
    if ((k == n || name[k] == '.') && (!prefix[k] || prefix[k] == '.'))
      cut = k;   // both end a part here
    n = cut;
  }
  return n ? ir_strndup(&g->arena, name, n) : NULL;
}

// How many of the 2D grid's axes (0 to 2) the axes `over` (1 << axis) include.
static int grid_axes(unsigned over) {
  return ((over >> IR_MESH_ROW) & 1) + ((over >> IR_MESH_COL) & 1);
}

// What a value is held as once forward made it: as produced, after any
// conversion right after its producer (ir/shard.c). Under sequence
// parallelism and on a 2D grid, backward gathers again what it reads whole,
// so this is what a kept activation costs.
static ShardLayout *held_layouts(const ShardResult *r, int nv) {
  ShardLayout *held = malloc(((size_t)nv + 1) * sizeof *held);
  IR_ASSERT(held);
  memcpy(held, r->layout, (size_t)nv * sizeof *held);
  for (int i = 0; i < r->ncolls; i++) {
    const ShardColl *c = &r->coll[i];
    ShardLayout *l = &held[c->value->id];
    if (c->at != SHARD_AFTER)
      continue;
    l->partial &= (unsigned char)~(1u << c->axis);
    if (c->dim >= 0)
      l->split[c->dim] = (unsigned char)(c->kind == SHARD_ALL_GATHER ? IR_MESH_NONE : c->axis);
  }
  return held;
}

// ir/shard.c's propagation of tp (or a q x q grid) on every block, one replica.
// batch: every block data parallel over its tp ranks instead (ShardSpec.batch_tp).
static int propagate(IrGraph *g, const SvModel *m, int tp, int q, bool seq_parallel, bool batch,
                     ShardResult *r, IrDiag *d) {
  int *deg = malloc((size_t)m->nblocks * sizeof *deg + 1);
  bool *bt = malloc((size_t)m->nblocks * sizeof *bt + 1);
  IR_ASSERT(deg && bt);
  for (int b = 0; b < m->nblocks; b++)
    deg[b] = tp, bt[b] = batch;
  ShardSpec spec = {.dp = 1, .nblocks = m->nblocks, .tp = deg, .batch_tp = bt,
                    .seq_parallel = seq_parallel, .q = q};
  int rc = ir_shard(g, &spec, r, d);
  free(deg), free(bt);
  return rc;
}

// r's collectives over tp, by block, into its forward and backward volumes
// (tp_fwd, tp_bwd; with batch, those of a block data parallel over tp).
static void sum_tp_colls(IrGraph *g, SvModel *m, const ShardResult *r, bool batch) {
  for (int i = 0; i < r->ncolls; i++) {
    const ShardColl *c = &r->coll[i];
    if (c->axis != IR_MESH_TP)
      continue;
    SvBlock *b = &m->block[c->block];
    bool fwd = c->phase == PHASE_FORWARD;
    const Sym **sum = batch ? (fwd ? &b->bt_fwd : &b->bt_bwd) : (fwd ? &b->tp_fwd : &b->tp_bwd);
    const Sym **sq = batch ? (fwd ? &b->bt_fwd_sq : &b->bt_bwd_sq)
                           : (fwd ? &b->tp_fwd_sq : &b->tp_bwd_sq);
    const Sym *e = ir_shard_allreduce_bytes(g, c);
    *sum = s_add(g, *sum, e);
    *sq = s_add(g, *sq, sym_mul(&g->arena, e, e));
    const Sym **sync = fwd ? &b->sync_fwd : &b->sync_bwd;
    if (batch && c->kind == SHARD_ALL_REDUCE)
      *sync = s_add(g, *sync, e);
  }
}

// Megatron's 1D tensor parallelism as ir/shard.c lays it out with every
// block tensor-parallel (its degree left open, so every split is assumed to
// divide): the collectives over tp per block, forward (Megatron's g, the
// embedding's reduction, the vocabulary-parallel loss's row statistics) and
// backward (f; update-phase reductions, none for Megatron's layout, are
// counted there too). tp_fwd and tp_bwd are all-reduce volumes in bytes: an
// all-gather or reduce-scatter moves half an all-reduce of the same buffer, so
// it counts half. The shard result stays with the caller (act_rep reads its
// layouts).
static int tensor_parallel(IrGraph *g, SvModel *m, bool seq_parallel, ShardResult *r,
                           IrDiag *d) {
  if (propagate(g, m, SHARD_TP_ANY, 1, seq_parallel, false, r, d))
    return -1;
  sum_tp_colls(g, m, r, false);
  return 0;
}

// Is dim one of a parameter's dims?
static bool param_dim(const IrGraph *g, const Sym *dim) {
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    for (int k = 0; v->role == ROLE_PARAM && k < v->rank; k++)
      if (sym_eq(v->shape[k], dim))
        return true;
  }
  return false;
}

// The dims r's propagation (degree left open) split and assumed to divide, which are no
// parameter's: each block's must_tp (or, on a grid, must_grid).
static void must_divide(const IrGraph *g, SvModel *m, const ShardResult *r, bool grid) {
  for (int i = 0; i < r->nneeds; i++) {
    const ShardNeed *nd = &r->need[i];
    bool axis = grid ? nd->axis == IR_MESH_ROW || nd->axis == IR_MESH_COL
                     : nd->axis == IR_MESH_TP;
    if (!axis || nd->block < 0 || nd->block >= m->nblocks || param_dim(g, nd->dim))
      continue;
    SvBlock *b = &m->block[nd->block];
    const Sym **must = grid ? b->must_grid : b->must_tp;
    int *n = grid ? &b->nmust_grid : &b->nmust_tp, k = 0;
    while (k < *n && !sym_eq(must[k], nd->dim))
      k++;
    if (k == *n && *n < SV_MAXMUST)
      must[(*n)++] = nd->dim;
  }
}

int sv_layout_split(SvLayout l) { return l.batch || l.q > 1 ? 1 : l.sub > 1 ? l.sub : l.tp; }
int sv_layout_parts(SvLayout l) { return l.batch ? l.tp : l.sub > 1 ? l.tp / l.sub : 1; }
int sv_layout_ranks(SvLayout l) { return l.q > 1 && l.tp > 1 ? l.tp : l.tp * l.q * l.q; }

bool sv_layout_divides(const SvNum *n, SvLayout l, char *why, size_t size) {
  int tp = sv_layout_split(l);
  for (int k = 0; tp > 1 && k < n->nmust_tp; k++)
    if (fmod(n->must_tp[k], tp) != 0) {
      if (why)
        snprintf(why, size, "%s = %.0f does not divide by tp = %d", n->must_tp_name[k],
                 n->must_tp[k], tp);
      return false;
    }
  for (int k = 0; l.q > 1 && k < n->nmust_grid; k++)
    if (fmod(n->must_grid[k], l.q) != 0) {
      if (why)
        snprintf(why, size, "%s = %.0f does not divide by q = %d", n->must_grid_name[k],
                 n->must_grid[k], l.q);
      return false;
    }
  return true;
}

// Optimus 2D as ir/shard.c lays it out on every block's grid (its side left
// open): the collectives along the grid's rows and columns per block, as bytes
// all-reduced, by how many grid axes the buffer is split over (grid_fwd[k]
// and grid_bwd[k] are divided by q^k). The shard result stays with the caller.
static int grid_parallel(IrGraph *g, SvModel *m, ShardResult *r, IrDiag *d) {
  if (propagate(g, m, 1, SHARD_TP_ANY, false, false, r, d))
    return -1;
  bool *grad = calloc((size_t)g->nvalues + 1, sizeof *grad);   // [value id] a weight's gradient
  IR_ASSERT(grad);
  for (int i = 0; i < g->nvalues; i++)
    if (g->values[i]->role == ROLE_PARAM && g->values[i]->grad)
      grad[g->values[i]->grad->id] = true;
  for (int i = 0; i < r->ncolls; i++) {
    const ShardColl *c = &r->coll[i];
    if (c->axis != IR_MESH_ROW && c->axis != IR_MESH_COL)
      continue;
    SvBlock *b = &m->block[c->block];
    int k = grid_axes(c->over);
    const Sym *e = ir_shard_allreduce_bytes(g, c);
    IrRole role = c->value->role;
    bool weight = role == ROLE_PARAM || role == ROLE_COPY || role == ROLE_STATE ||
                  grad[c->value->id];
    const Sym **sq = c->phase == PHASE_FORWARD ? &b->grid_fwd_sq[k] : &b->grid_bwd_sq[k];
    *sq = s_add(g, *sq, sym_mul(&g->arena, e, e));
    if (c->phase == PHASE_FORWARD) {
      b->grid_fwd[k] = s_add(g, b->grid_fwd[k], e);
      if (weight)
        b->grid_wfwd[k] = s_add(g, b->grid_wfwd[k], e);
    } else {
      b->grid_bwd[k] = s_add(g, b->grid_bwd[k], e);
      if (weight)
        b->grid_wbwd[k] = s_add(g, b->grid_wbwd[k], e);
    }
  }
  free(grad);
  return 0;
}

// Every block data parallel over its tp ranks (the degree left open): the
// collectives over tp per block (the weights' gradients, partial sums over the
// batch's parts, reduced in backward), as bytes all-reduced.
static int batch_parallel(IrGraph *g, SvModel *m, IrDiag *d) {
  ShardResult r;
  if (propagate(g, m, SHARD_TP_ANY, 1, false, true, &r, d))
    return -1;
  sum_tp_colls(g, m, &r, true);
  ir_shard_free(&r);
  return 0;
}

// The dim layout l splits over tp (-1: none).
static int tp_dim(const ShardLayout *l) {
  for (int i = 0; i < l->rank; i++)
    if (l->split[i] == IR_MESH_TP)
      return i;
  return -1;
}

// Does layout l split any dim over tp?
static bool tp_split(const ShardLayout *l) { return tp_dim(l) >= 0; }

// Is dim an embedding table's vocabulary (its rows), which the lowering pads to a multiple of
// the degree that splits it (passes/tp.c)?
static bool is_vocab(const IrGraph *g, const Sym *dim) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_EMBEDDING && sym_eq(g->nodes[i]->in[0]->shape[0], dim))
      return true;
  return false;
}

// ---- backward temporaries ----------------------------------------------------------------------
//
// A block's backward work: the bytes of the live backward temporaries
// (activation gradients; parameter gradients count as model state) at the
// moment of the block's backward where they peak under the current bindings,
// as a formula.
// A temporary is live from its producer to its last reader. One sweep over
// the schedule keeps the set live at each position, so that every block is
// done in time linear in the schedule and the live sets of its backward.

typedef struct Live {
  int *id, n;         // the temporaries live now (value ids), in no order
  int *at;            // per value id: its index in id[]
  int *sorted;        // scratch: id[] in id order
} Live;

static int by_id(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

// v is a backward temporary: an activation gradient that some node reads. One the memory
// plan writes over an input that dies where it is made
// (pass_in_place: the logits' gradient over the logits) takes that input's bytes, which the
// block holds as an activation until its backward ends: none of its own.
static bool temporary(const IrValue *v, const bool *pgrad, const int *last) {
  if (v->role != ROLE_GRAD || !v->producer || pgrad[v->id] || v->producer->id > last[v->id])
    return false;
  const IrNode *n = v->producer;
  int out, k = pass_in_place(n, &out);
  if (k < 0 || n->out[out] != v)
    return true;
  const IrValue *x = n->in[k];
  return last[x->id] != n->id || pass_is_persistent(x) || x->dtype != v->dtype ||
         !ir_same_shape(x, v);
}

// The live set in value order (sums add in the order a scan of the values would).
static const int *live_sorted(Live *l) {
  memcpy(l->sorted, l->id, (size_t)l->n * sizeof *l->id);
  qsort(l->sorted, (size_t)l->n, sizeof *l->sorted, by_id);
  return l->sorted;
}

static void backward_work(IrGraph *g, SvModel *m, const int *last, const bool *pgrad,
                          const double *bytes) {
  int nv = g->nvalues, nn = g->nnodes;
  // born[t] and dies[t]: the temporaries made and last read at t, lists into
  // birth[] and death[] (CSR: value ids from born[t] to born[t + 1]).
  int *born = calloc((size_t)nn + 2, sizeof *born), *dies = calloc((size_t)nn + 2, sizeof *dies);
  int *birth = malloc(((size_t)nv + 1) * sizeof *birth);
  int *death = malloc(((size_t)nv + 1) * sizeof *death);
  double *live_at = malloc(((size_t)nn + 1) * sizeof *live_at);
  int *best_at = malloc(((size_t)m->nblocks + 1) * sizeof *best_at);
  Live l = {.id = malloc(((size_t)nv + 1) * sizeof(int)),
            .at = malloc(((size_t)nv + 1) * sizeof(int)),
            .sorted = malloc(((size_t)nv + 1) * sizeof(int))};
  IR_ASSERT(born && dies && birth && death && live_at && best_at && l.id && l.at && l.sorted);
  for (int i = 0; i < nv; i++) {
    const IrValue *v = g->values[i];
    l.at[i] = -1;
    if (temporary(v, pgrad, last))
      born[v->producer->id + 1]++, dies[last[i] + 1]++;
  }
  for (int t = 0; t < nn; t++)
    born[t + 1] += born[t], dies[t + 1] += dies[t];
  for (int i = 0; i < nv; i++) {
    const IrValue *v = g->values[i];
    if (temporary(v, pgrad, last))
      birth[born[v->producer->id]++] = i, death[dies[last[i]]++] = i;
  }
  for (int t = nn; t > 0; t--) // back to the starts
    born[t] = born[t - 1], dies[t] = dies[t - 1];
  born[0] = dies[0] = 0;
  for (int b = 0; b < m->nblocks; b++)
    best_at[b] = -1;
  // Two sweeps: the bytes live at each backward position, then the formula of
  // those at each block's peak.
  for (int pass = 0; pass < 2; pass++) {
    l.n = 0;
    for (int t = 0; t < nn; t++) {
      for (int k = born[t]; k < born[t + 1]; k++)
        l.at[birth[k]] = l.n, l.id[l.n++] = birth[k];
      const IrNode *n = g->nodes[t];
      if (pass == 0 && n->phase == PHASE_BACKWARD) {
        const int *id = live_sorted(&l);
        double live = 0;
        for (int k = 0; k < l.n; k++)
          live += bytes[id[k]];
        live_at[t] = live;
      } else if (pass == 1 && best_at[n->block] == t) {
        const int *id = live_sorted(&l);
        const Sym *f = sym_const(&g->arena, 0);
        for (int k = 0; k < l.n; k++)
          f = s_add(g, f, ir_nbytes(g, g->values[id[k]]));
        m->block[n->block].work = f;
      }
      for (int k = dies[t]; k < dies[t + 1]; k++) { // out of the set: the last one moves in
        int v = death[k], at = l.at[v];
        l.id[at] = l.id[--l.n];
        l.at[l.id[at]] = at;
      }
    }
    for (int b = 0; pass == 0 && b < m->nblocks; b++) {
      double best = -1;
      for (int k = 0; k < m->block[b].nbwd; k++) {
        int t = m->block[b].bwd[k]->id;
        if (live_at[t] > best)
          best = live_at[t], best_at[b] = t;
      }
    }
  }
  free(born), free(dies), free(birth), free(death), free(live_at), free(best_at);
  free(l.id), free(l.at), free(l.sorted);
}

static bool same_shapes(IrNode *const *x, IrNode *const *y, int n) {
  for (int i = 0; i < n; i++) {
    if (x[i]->op != y[i]->op || x[i]->nout != y[i]->nout || x[i]->nin != y[i]->nin)
      return false;
    for (int k = 0; k < x[i]->nout; k++)
      if (!ir_same_shape(x[i]->out[k], y[i]->out[k]))
        return false;
    for (int k = 0; k < x[i]->nin; k++)
      if (!ir_same_shape(x[i]->in[k], y[i]->in[k]) || x[i]->in[k]->role != y[i]->in[k]->role)
        return false;
  }
  return true;
}

// Blocks whose forward and backward are the same ops on the same shapes
// cost the same under every choice, so they can share variables.
static bool same_kind(const SvBlock *a, const SvBlock *b) {
  return a->nfwd == b->nfwd && a->nbwd == b->nbwd &&
         sym_eq(a->params, b->params) && sym_eq(a->param_bytes, b->param_bytes) &&
         sym_eq(a->grad_bytes, b->grad_bytes) && sym_eq(a->master_bytes, b->master_bytes) &&
         sym_eq(a->state_bytes, b->state_bytes) && sym_eq(a->act, b->act) &&
         sym_eq(a->ckpt, b->ckpt) && sym_eq(a->work, b->work) && a->bwd_params == b->bwd_params &&
         same_shapes(a->fwd, b->fwd, a->nfwd) && same_shapes(a->bwd, b->bwd, a->nbwd);
}

static void add_flow(SvModel *m, int from, int to, const Sym *bytes, IrGraph *g) {
  for (int i = 0; i < m->nflows; i++)
    if (m->flow[i].from == from && m->flow[i].to == to) {
      m->flow[i].bytes = s_add(g, m->flow[i].bytes, bytes);
      return;
    }
  m->flow = realloc(m->flow, (size_t)(m->nflows + 1) * sizeof *m->flow);
  IR_ASSERT(m->flow);
  m->flow[m->nflows++] = (SvFlow){from, to, bytes};
}

SvModel *sv_model_build(IrGraph *g, bool share_blocks, bool seq_parallel, IrDiag *d) {
  int nb = ir_nblocks(g);
  bool has_update = false;
  for (int i = 0; i < g->nnodes; i++) {
    IR_ASSERT(g->nodes[i]->id == i);
    has_update |= g->nodes[i]->phase == PHASE_UPDATE;
  }
  if (!has_update) {
    ir_error(d, (IrLoc){0}, "plan: the graph has no optimizer update (run the passes through "
                            "'optimizer' first)");
    return NULL;
  }
  SvModel *m = calloc(1, sizeof *m);
  IR_ASSERT(m);
  m->g = g;
  m->nblocks = nb;
  m->block = calloc((size_t)nb, sizeof *m->block);
  int nv = g->nvalues;
  int *stamp = malloc((size_t)nv * sizeof *stamp), *last = malloc((size_t)nv * sizeof *last);
  int *owner = malloc((size_t)nv * sizeof *owner);
  bool *whole = calloc((size_t)nv, 1), *pgrad = calloc((size_t)nv, 1);
  double *bytes = malloc((size_t)nv * sizeof *bytes);
  const char **prefix = calloc((size_t)nb, sizeof *prefix);
  // bf16: a parameter's working copy (what forward and backward read), and back
  const IrValue **copy = calloc((size_t)nv, sizeof *copy), **master = calloc((size_t)nv, sizeof *master);
  IR_ASSERT(m->block && stamp && last && owner && whole && pgrad && bytes && prefix && copy &&
            master);
  for (int i = 0; i < nv; i++) {
    stamp[i] = last[i] = owner[i] = -1;
    IrValue *v = g->values[i];
    IR_ASSERT(v->id == i);
    bytes[i] = v->rank >= 0 ? sym_evalf(ir_nbytes(g, v), &g->syms) : 0;
    if (v->role == ROLE_PARAM && v->grad)
      pgrad[v->grad->id] = true;
  }
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_ASSIGN) {
      copy[g->nodes[i]->in[1]->id] = g->nodes[i]->in[0];
      master[g->nodes[i]->in[0]->id] = g->nodes[i]->in[1];
    }

  // Node lists per block and phase.
  for (int b = 0; b < nb; b++) {
    SvBlock *blk = &m->block[b];
    blk->id = b;
    blk->unit = -1;
    const Sym *z = sym_const(&g->arena, 0);
    blk->params = blk->param_bytes = blk->grad_bytes = blk->master_bytes = blk->state_bytes = z;
    blk->act = blk->act_int = blk->act_rep = z;
    blk->ckpt = blk->ckpt_int = blk->work = blk->flops_fwd = blk->flops_bwd = z;
    blk->tp_fwd = blk->tp_bwd = blk->bt_fwd = blk->bt_bwd = blk->sync_fwd = blk->sync_bwd = z;
    blk->tp_fwd_sq = blk->tp_bwd_sq = blk->bt_fwd_sq = blk->bt_bwd_sq = z;
    for (int k = 0; k < 3; k++)
      blk->grid_fwd[k] = blk->grid_bwd[k] = blk->grid_act[k] = blk->grid_wfwd[k] =
          blk->grid_wbwd[k] = blk->grid_fwd_sq[k] = blk->grid_bwd_sq[k] = z;
  }
  for (int i = 0; i < g->nnodes; i++) {
    IrNode *n = g->nodes[i];
    SvBlock *b = &m->block[n->block];
    for (int k = 0; k < n->nin; k++)
      last[n->in[k]->id] = i;
    if (n->phase == PHASE_FORWARD)
      b->nfwd++;
    else if (n->phase == PHASE_BACKWARD)
      b->nbwd++;
  }
  PassEpilogue *into = pass_epilogues(g);
  m->epilogue = calloc((size_t)g->nnodes + 1, sizeof *m->epilogue);
  IR_ASSERT(m->epilogue);
  for (int i = 0; i < g->nnodes; i++)
    m->epilogue[i] = into[i].into;
  free(into);
  for (int b = 0; b < nb; b++) {
    m->block[b].fwd = calloc((size_t)m->block[b].nfwd + 1, sizeof(IrNode *));
    m->block[b].bwd = calloc((size_t)m->block[b].nbwd + 1, sizeof(IrNode *));
    IR_ASSERT(m->block[b].fwd && m->block[b].bwd);
    m->block[b].nfwd = m->block[b].nbwd = 0;
  }
  for (int i = 0; i < g->nnodes; i++) {
    IrNode *n = g->nodes[i];
    SvBlock *b = &m->block[n->block];
    const Sym *fl = n->phase == PHASE_UPDATE ? NULL : ir_flops(g, n);
    if (n->phase == PHASE_FORWARD) {
      b->fwd[b->nfwd++] = n;
      b->flops_fwd = s_add(g, b->flops_fwd, fl);
      for (int k = 0; k < n->nin; k++) {
        IrValue *v = n->in[k];
        if (v->role == ROLE_COPY && master[v->id])
          v = (IrValue *)master[v->id];
        if (v->role == ROLE_PARAM && owner[v->id] < 0) {
          owner[v->id] = n->block;
          prefix[n->block] = common_prefix(g, prefix[n->block], v->name);
        }
      }
    } else if (n->phase == PHASE_BACKWARD) {
      b->bwd[b->nbwd++] = n;
      b->flops_bwd = s_add(g, b->flops_bwd, fl);
    }
  }

  // Parameters belong to the block that first reads them (bf16: their working
  // copies); so do their gradients and optimizer state. The weights forward
  // reads are the copies where there are any, and the parameters then only the
  // optimizer's float32 masters.
  for (int i = 0; i < nv; i++) {
    IrValue *v = g->values[i];
    if (v->role != ROLE_PARAM)
      continue;
    SvBlock *b = &m->block[owner[i] < 0 ? 0 : owner[i]];
    const IrValue *c = copy[i];
    b->params = s_add(g, b->params, ir_numel(g, v));
    b->param_bytes = s_add(g, b->param_bytes, c ? ir_nbytes(g, c) : ir_nbytes(g, v));
    if (c)
      b->master_bytes = s_add(g, b->master_bytes, ir_nbytes(g, v));
    if (v->grad)
      b->grad_bytes = s_add(g, b->grad_bytes, ir_nbytes(g, v->grad));
  }
  for (int b = 0; b < m->nblocks; b++) {
    SvBlock *blk = &m->block[b];
    for (int i = 0; i < blk->nbwd; i++)
      for (int k = 0; k < blk->bwd[i]->nin; k++) {
        const IrValue *v = blk->bwd[i]->in[k];
        if (v->role == ROLE_COPY && master[v->id])
          v = master[v->id];
        blk->bwd_params |= v->role == ROLE_PARAM && owner[v->id] == b;
      }
  }
  for (int i = 0; i < g->nnodes; i++) {
    IrNode *n = g->nodes[i];
    if (n->phase != PHASE_UPDATE || n->nin < 1 || n->op == OP_ASSIGN)
      continue;
    int o = owner[n->in[0]->id];
    SvBlock *b = &m->block[o < 0 ? 0 : o];
    for (int k = 1; k < n->nin; k++)
      if (n->in[k]->role == ROLE_STATE)
        b->state_bytes = s_add(g, b->state_bytes, ir_nbytes(g, n->in[k]));
  }

  ShardResult shard, grid;
  if (tensor_parallel(g, m, seq_parallel, &shard, d)) {
    free(stamp), free(last), free(owner), free(whole), free(pgrad), free(bytes), free(prefix);
    free(copy), free(master);
    sv_model_free(m);
    return NULL;
  }
  // A kept activation is held whole under tp when backward reads it unsplit
  // (a partial sum is whole-sized too). Under sequence parallelism backward
  // gathers again what it reads whole, so what is kept is the value as held
  // in forward: as produced, after any conversion right after its producer.
  // On a 2D grid: the grid's collectives, and how many grid axes split each value as held
  // (kept activations) and as laid out (parameters: bf16's working copies). A model the
  // propagation cannot lay out on a grid gets no 2D layouts (SvModel.grid_ok).
  IrDiag quiet = {0};
  unsigned char *gsplit = calloc((size_t)nv + 1, 1);
  signed char(*gdim)[2] = malloc(((size_t)nv + 1) * sizeof *gdim);   // a param's grid-split dims
  IR_ASSERT(gsplit && gdim);
  memset(gdim, -1, ((size_t)nv + 1) * sizeof *gdim);
  must_divide(g, m, &shard, false);
  m->grid_ok = grid_parallel(g, m, &grid, &quiet) == 0;
  if (m->grid_ok)
    must_divide(g, m, &grid, true);
  m->batch_ok = batch_parallel(g, m, &quiet) == 0;
  if (m->grid_ok) {
    ShardLayout *gheld = held_layouts(&grid, nv);
    for (int i = 0; i < nv; i++) {
      const ShardLayout *l = g->values[i]->role == ROLE_PARAM ? &grid.layout[i] : &gheld[i];
      unsigned over = 0;
      for (int k = 0; k < l->rank; k++) {
        over |= 1u << l->split[k];
        if (l->split[k] == IR_MESH_ROW || l->split[k] == IR_MESH_COL)
          gdim[i][l->split[k] == IR_MESH_COL] = (signed char)k;
      }
      gsplit[i] = (unsigned char)grid_axes(over);
    }
    free(gheld);
    ir_shard_free(&grid);
  }
  ShardLayout *held = seq_parallel ? held_layouts(&shard, nv) : NULL;
  for (int bi = 0; bi < nb; bi++)
    for (int k = 0; k < m->block[bi].nbwd; k++) {
      const IrNode *n = m->block[bi].bwd[k];
      for (int j = 0; j < n->nin; j++) {
        const IrValue *v = n->in[j];
        if (!tp_split(held ? &held[v->id] : ir_shard_use(&shard, n, j)))
          whole[v->id] = true;
      }
    }
  free(held);
  // Each block's parameters as its bucket holds them: split over tp or whole
  // (bf16: as the working copy is laid out, which the master follows).
  for (int i = 0; i < nv; i++) {
    IrValue *v = g->values[i];
    if (v->role != ROLE_PARAM)
      continue;
    SvBlock *b = &m->block[owner[i] < 0 ? 0 : owner[i]];
    const IrValue *c = copy[i] ? copy[i] : v;
    size_t n = (size_t)b->nmembers + 1;
    b->member = realloc(b->member, n * sizeof *b->member);
    b->member_dim = realloc(b->member_dim, n * sizeof *b->member_dim);
    b->member_vocab = realloc(b->member_vocab, n * sizeof *b->member_vocab);
    b->member_grid = realloc(b->member_grid, n * sizeof *b->member_grid);
    b->member_gdim = realloc(b->member_gdim, n * sizeof *b->member_gdim);
    b->member_gvocab = realloc(b->member_gvocab, n * sizeof *b->member_gvocab);
    IR_ASSERT(b->member && b->member_dim && b->member_vocab && b->member_grid && b->member_gdim &&
              b->member_gvocab);
    int d = tp_dim(&shard.layout[c->id]);
    b->member_grid[b->nmembers] = gsplit[c->id];
    b->member_gvocab[b->nmembers] = 0;
    for (int a = 0; a < 2; a++) {
      const Sym *gd = gdim[c->id][a] >= 0 ? v->shape[gdim[c->id][a]] : NULL;
      b->member_gdim[b->nmembers][a] = gd;
      if (gd && is_vocab(g, gd))
        b->member_gvocab[b->nmembers] |= (unsigned char)(1u << a);
    }
    b->member[b->nmembers] = ir_numel(g, v);
    b->member_dim[b->nmembers] = d >= 0 ? v->shape[d] : NULL;
    b->member_vocab[b->nmembers++] = d >= 0 && is_vocab(g, v->shape[d]);
  }
  ir_shard_free(&shard);

  for (int bi = 0; bi < nb; bi++) {
    SvBlock *b = &m->block[bi];
    // What backward reads from forward: kept unless the block is checkpointed.
    for (int k = 0; k < b->nbwd; k++)
      for (int j = 0; j < b->bwd[k]->nin; j++) {
        IrValue *v = b->bwd[k]->in[j];
        if (!from_forward(v) || stamp[v->id] == 2 * bi)
          continue;
        stamp[v->id] = 2 * bi;
        b->grid_act[gsplit[v->id]] = s_add(g, b->grid_act[gsplit[v->id]], ir_nbytes(g, v));
        if (v->dtype == DT_I32) {
          b->act_int = s_add(g, b->act_int, ir_nbytes(g, v));
        } else {
          b->act = s_add(g, b->act, ir_nbytes(g, v));
          b->nact++;
          if (whole[v->id])
            b->act_rep = s_add(g, b->act_rep, ir_nbytes(g, v));
        }
      }
    // What forward reads from outside the block: all a checkpointed block keeps.
    for (int k = 0; k < b->nfwd; k++)
      for (int j = 0; j < b->fwd[k]->nin; j++) {
        IrValue *v = b->fwd[k]->in[j];
        if (!from_forward(v) || (v->producer && v->producer->block == bi) ||
            stamp[v->id] == 2 * bi + 1)
          continue;
        stamp[v->id] = 2 * bi + 1;
        if (v->dtype == DT_I32)
          b->ckpt_int = s_add(g, b->ckpt_int, ir_nbytes(g, v));
        else
          b->ckpt = s_add(g, b->ckpt, ir_nbytes(g, v));
        if (v->producer)
          add_flow(m, v->producer->block, bi, ir_nbytes(g, v), g);
      }
    b->name = block_name(g, bi, prefix[bi]);
  }
  backward_work(g, m, last, pgrad, bytes);

  // Units: every block with nodes gets one, or shares one with an identical block.
  for (int bi = 0; bi < nb; bi++) {
    SvBlock *b = &m->block[bi];
    if (b->nfwd + b->nbwd == 0)
      continue;
    for (int bj = 1; share_blocks && bi > 0 && bj < bi && b->unit < 0; bj++)
      if (m->block[bj].unit >= 0 && same_kind(&m->block[bj], b))
        b->unit = m->block[bj].unit;
    if (b->unit < 0)
      b->unit = m->nunits++;
  }

  for (int i = 0; i < nv; i++)
    m->bf16 |= g->values[i]->role == ROLE_COPY;
  m->grads_bf16 = ir_grad_dtype(g) == DT_BF16;
  m->batch_sym = g->batch_sym;  // marked by the frontend
  m->seq_sym = g->seq_sym;
  free(stamp), free(last), free(owner), free(whole), free(pgrad), free(bytes);
  free(prefix), free(copy), free(master), free(gsplit), free(gdim);
  return m;
}

void sv_model_free(SvModel *m) {
  if (!m)
    return;
  for (int b = 0; b < m->nblocks; b++) {
    free(m->block[b].fwd), free(m->block[b].bwd);
    free(m->block[b].member), free(m->block[b].member_dim), free(m->block[b].member_vocab);
    free(m->block[b].member_grid), free(m->block[b].member_gdim), free(m->block[b].member_gvocab);
  }
  free(m->epilogue);
  free(m->block);
  free(m->flow);
  free(m);
}

int sv_bind_dims(IrGraph *g, const SvConfig *cfg, IrDiag *d) {
  struct { int64_t value; int var; const char *flag, *what; } want[2] = {
      {cfg->micro_batch, g->batch_sym, "--micro-batch", "batch"},
      {cfg->seq, g->seq_sym, "--seq", "sequence"}};
  for (int w = 0; w < 2; w++) {
    if (!want[w].value)
      continue;
    if (want[w].var < 0) {
      const IrValue *in = NULL;
      for (int i = 0; i < g->nvalues && !in; i++)
        if (g->values[i]->role == ROLE_INPUT)
          in = g->values[i];
      return ir_error(d, (IrLoc){0}, "%s: the model has no %s dim (its first input is '%s' %s)",
                      want[w].flag, want[w].what, in ? in->name : "(none)",
                      in ? ir_shape_str(g, in) : "");
    }
    symtab_bind(&g->syms, want[w].var, want[w].value);
  }
  return 0;
}

// ---- printing the formulas ----------------------------------------------------------------------

static void print_formula(FILE *f, IrGraph *g, const char *what, const Sym *s, const char *unit) {
  double v = sym_evalf(s, &g->syms);
  fprintf(f, "  %-26s %s", what, sym_str(&g->arena, s, &g->syms));
  if (!isnan(v))
    fprintf(f, "   (= %.4g%s)", v, unit);
  fputc('\n', f);
}

void sv_print_formulas(FILE *f, const SvModel *m) {
  IrGraph *g = m->g;
  fprintf(f, "# per-block formulas of %s (one micro-batch; sizes in bytes of the IR's element "
             "types)\n# bindings:", g->name ? g->name : "model");
  for (int i = 0; i < g->syms.n; i++)
    if (g->syms.bound[i])
      fprintf(f, " %s=%lld", g->syms.name[i], (long long)g->syms.value[i]);
  fputc('\n', f);
  const Sym *tot_p = sym_const(&g->arena, 0), *tot_f = tot_p, *tot_a = tot_p, *tot_s = tot_p;
  for (int u = 0; u < m->nunits; u++) {
    const SvBlock *b = NULL;
    int count = 0;
    const char *last = NULL;
    for (int i = 0; i < m->nblocks; i++)
      if (m->block[i].unit == u) {
        if (!b)
          b = &m->block[i];
        last = m->block[i].name;
        count++;
      }
    if (count == 1)
      fprintf(f, "\nblock %s\n", b->name);
    else
      fprintf(f, "\nblocks %s .. %s (%d identical blocks; each)\n", b->name, last, count);
    const Sym *states = s_add(g, s_add(g, b->param_bytes, b->grad_bytes),
                              s_add(g, b->master_bytes, b->state_bytes));
    const Sym *fl = s_add(g, b->flops_fwd, b->flops_bwd);
    const Sym *act = s_add(g, b->act, b->act_int);
    print_formula(f, g, "parameters", b->params, "");
    print_formula(f, g, "weight bytes (fwd, bwd)", b->param_bytes, " B");
    print_formula(f, g, "gradient bytes", b->grad_bytes, " B");
    print_formula(f, g, "master weight bytes", b->master_bytes, " B");
    print_formula(f, g, "optimizer state bytes", b->state_bytes, " B");
    print_formula(f, g, "model-state bytes", states, " B");
    print_formula(f, g, "activation bytes kept", act, " B");
    print_formula(f, g, "  of which TP replicates", b->act_rep, " B");
    print_formula(f, g, "checkpointed, keeps", s_add(g, b->ckpt, b->ckpt_int), " B");
    print_formula(f, g, "backward temporaries", b->work, " B");
    print_formula(f, g, "FLOPs forward", b->flops_fwd, "");
    print_formula(f, g, "FLOPs backward", b->flops_bwd, "");
    print_formula(f, g, "TP all-reduce fwd", b->tp_fwd, " B");
    print_formula(f, g, "TP all-reduce bwd", b->tp_bwd, " B");
    // on a q x q grid, by how many of its axes split them: a line "x q" is q times the bytes
    // each rank holds or moves
    static const char *const grid_what[3][3] = {
        {"2D kept, whole", "2D kept x q", "2D kept x q^2"},
        {"2D all-reduce fwd", "2D all-reduce fwd x q", "2D all-reduce fwd x q^2"},
        {"2D all-reduce bwd", "2D all-reduce bwd x q", "2D all-reduce bwd x q^2"}};
    for (int k = 0; k < 3; k++) {
      const Sym *by[3] = {b->grid_act[k], b->grid_fwd[k], b->grid_bwd[k]};
      for (int w = 0; w < 3; w++)
        if (!sym_is_zero(by[w]))
          print_formula(f, g, grid_what[w][k], by[w], " B");
    }
    tot_p = s_add(g, tot_p, s_scale(g, b->params, count));
    tot_s = s_add(g, tot_s, s_scale(g, states, count));
    tot_f = s_add(g, tot_f, s_scale(g, fl, count));
    tot_a = s_add(g, tot_a, s_scale(g, act, count));
  }
  fprintf(f, "\nwhole model\n");
  print_formula(f, g, "parameters", tot_p, "");
  print_formula(f, g, "model-state bytes", tot_s, " B");
  print_formula(f, g, "FLOPs per micro-batch", tot_f, "");
  print_formula(f, g, "activation bytes kept", tot_a, " B");
}

// ---- evaluating a block -------------------------------------------------------------------------

static double value_bytes(IrGraph *g, const IrValue *v) {
  return v->rank < 0 ? 0 : sym_evalf(ir_nbytes(g, v), &g->syms);
}

// A reshape is a view of its input (the memory plan gives it its input's
// bytes, passes/memplan.c, all but a persistent or host-memory output's): no
// kernel runs, nothing moves.
static bool is_view(const IrNode *n) { return n->op == OP_RESHAPE; }

// The elements an optimizer node updates: AdamW's moments' (the rank's part of a bucket), SGD's
// parameters'.
static double updated_elems(IrGraph *g, const IrNode *n) {
  const IrValue *own = n->op == OP_ADAMW ? n->in[2] : n->in[0];
  return sym_evalf(ir_numel(g, own), &g->syms);
}

// An optimizer node's time as the planner prices the update (sv_cost): the state it reads and
// writes (the parameters and the moments it updates; the gradient, read) over the device's
// update bandwidth.
static double update_time(IrGraph *g, const IrNode *n, const SvDevice *dev) {
  double numel = updated_elems(g, n), bytes = 0;
  for (int k = 0; k < n->nin; k++)
    bytes += (k == 1 ? 1 : 2) * ir_dtype_size(n->in[k]->dtype);
  return numel * bytes / (dev->hbm_bw * dev->eff.update);
}

// The scans the program runs every step over the parameters a rank updates (runtime/train.c):
// their gradients read for the global norm, their float32 weights for the finite check.
static double scan_time(double elems, double grad_bytes, const SvDevice *dev) {
  return elems * (grad_bytes + 4) / (dev->hbm_bw * dev->eff.mem);
}

// A profile's measured attention rate at the node's shape (the tokens: the geometric mean of
// the queries' and the keys'); -1 without one.
static double attention_rate(IrGraph *g, const IrNode *n, const SvDevice *dev, bool bf16) {
  int at = n->op == OP_ATTENTION ? 0 : 1;   // (backward's inputs start with dout)
  const IrValue *q = n->in[at], *k = n->in[at + 1];
  const SymTab *t = &g->syms;
  double tq = sym_evalf(q->shape[q->rank - 2], t), tk = sym_evalf(k->shape[k->rank - 2], t);
  return sv_attn_rate(dev, sqrt(tq * tk), sym_evalf(q->shape[q->rank - 1], t),
                      n->op == OP_ATTENTION_BWD, bf16);
}

// The time of op `op` over numel elements of type dt on dev as an epilogue of a CPU GEMM (the
// CPU's twin of rt_matmul_bias and rt_matmul_bgrad runs it on each block the GEMM finishes, or
// after it): as measured on its own, or its bytes at the device's bandwidth (nin read, one
// written).
static double cpu_epilogue_op(const SvDevice *dev, IrOp op, double numel, IrDType dt, int nin) {
  double measured = dev->nops > 0 ? sv_op_seconds(dev, op, numel, dt == DT_BF16) : -1;
  if (measured >= 0)
    return measured;
  return (nin + 1) * numel * ir_dtype_size(dt) / (dev->hbm_bw * dev->eff.mem);
}

// The share of a layernorm's own time it takes in a residual's add_layernorm on dev: half on a
// GPU (it writes its rows, and reads the sum from the registers that made it), all on a CPU
// (whose twin runs the add and the norm in turn).
static double fused_norm_share(const SvDevice *dev) { return dev->cores > 0 ? 1 : 0.5; }

// The time a GEMM's epilogue adds on dev: none on a GPU (cuBLASLt applies it to the product in
// registers); on a CPU the add of the bias, the GELU and the bias gradient's sums, each as its
// own node would take (the CPU's GEMM saves their passes' bytes, not their arithmetic).
static double epilogue_time(IrGraph *g, const IrNode *n, const SvDevice *dev) {
  if (dev->cores <= 0)
    return 0;
  if (n->op == OP_MATMUL_BGRAD) {
    const IrValue *v = n->in[ir_attr_i(n, "of")];
    return cpu_epilogue_op(dev, OP_SUM_TO, sym_evalf(ir_numel(g, v), &g->syms), v->dtype, 1);
  }
  double numel = sym_evalf(ir_numel(g, n->out[0]), &g->syms);
  IrDType dt = n->out[0]->dtype;
  return cpu_epilogue_op(dev, OP_ADD, numel, dt, 2) +
         (ir_attr_i(n, "act") ? cpu_epilogue_op(dev, OP_GELU, numel, dt, 1) : 0);
}

// Roofline: the slower of the arithmetic and the memory traffic. Matmuls and
// attention run at the tensor cores' rate for their operands' type; a
// profile's measured GEMMs give matmuls the rate of their shape, and its
// measured kernels their ops' times by their elements.
static double node_time(IrGraph *g, const IrNode *n, const SvDevice *dev) {
  if (is_view(n))
    return 0;
  // a causal softmax reads and exponentiates half of its scores (the rest it writes 0): its
  // input's bytes and, measured, its elements count half (attention's are measured causal)
  double part = n->op == OP_SOFTMAX ? 1.0 / ir_causal_divisor(n) : 1;
  double bytes = 0, numel = 0;
  for (int k = 0; k < n->nin + n->nout; k++) {
    const IrValue *v = ir_node_value(n, k);
    if (v->rank < 0)
      continue;
    bytes += (k < n->nin ? part : 1) * value_bytes(g, v);
    if (dev->nops > 0)
      numel = fmax(numel, sym_evalf(ir_numel(g, v), &g->syms));
  }
  bool bf16 = n->nin && n->in[0]->dtype == DT_BF16;
  // the fused classifier runs the gradient's kernel, its loss from the sums that kernel makes
  IrOp as = n->op == OP_CROSS_ENTROPY_FUSED ? OP_CROSS_ENTROPY_BWD : n->op;
  double measured = dev->nops > 0 ? sv_op_seconds(dev, as, part * numel, bf16) : -1;
  if (n->op == OP_ADD_LAYERNORM && dev->nops > 0) {   // the add's and the norm's (priced_time)
    double add = sv_op_seconds(dev, OP_ADD, numel, bf16);
    double norm = sv_op_seconds(dev, OP_LAYERNORM, numel, bf16);
    if (add >= 0 && norm >= 0)
      measured = add + fused_norm_share(dev) * norm;
  }
  if (measured >= 0)
    return measured;
  if (ir_op_kind(n->op) == KIND_OPT)
    return update_time(g, n, dev);
  double flops = sym_evalf(ir_flops(g, n), &g->syms);
  double peak = bf16 ? dev->flops_bf16 : dev->flops_fp32;
  double rate = dev->flops_fp32 * dev->eff.simt;
  bool gemm = n->op == OP_MATMUL || n->op == OP_MATMUL_BIAS || n->op == OP_MATMUL_BGRAD;
  double epilogue = gemm && n->op != OP_MATMUL ? epilogue_time(g, n, dev) : 0;
  if (gemm && (dev->ngemm > 0 || dev->sms > 0)) {
    IrGemm m = ir_matmul_gemm(g, n);
    const SymTab *t = &g->syms;
    rate = sv_gemm_rate(dev, sym_evalf(m.batch, t), sym_evalf(m.m, t), sym_evalf(m.n, t),
                        sym_evalf(m.k, t), bf16);
  } else if (gemm) {   // a flat rate: no GEMM's formulas built in the graph's arena
    rate = peak * dev->eff.gemm;
  } else if (n->op == OP_ATTENTION || n->op == OP_ATTENTION_BWD) {
    rate = attention_rate(g, n, dev, bf16);
    if (rate < 0)
      rate = peak * dev->eff.attn;
  }
  return fmax(flops / rate, bytes / (dev->hbm_bw * dev->eff.mem)) + epilogue;
}

// The time node n of a graph before the epilogue pass takes on dev, where it joins node
// `into` (pass_epilogues; NULL: none): a loss that joins its gradient (the fused classifier)
// none; on a CPU, whose twins of the other fused kernels run the same passes, its own; on a
// GPU a GEMM's epilogue none, a layernorm of a residual's sum half its own (it writes its
// rows, and reads the sum from the registers that made it).
static double priced_time(IrGraph *g, const IrNode *n, const IrNode *into, const SvDevice *dev) {
  if (!into)
    return node_time(g, n, dev);
  if (into->op == OP_CROSS_ENTROPY_BWD)
    return 0;
  if (into->op == OP_ADD)
    return fused_norm_share(dev) * node_time(g, n, dev);
  return dev->cores > 0 ? node_time(g, n, dev) : 0;
}

void sv_price_nodes(IrGraph *g, const SvConfig *cfg, double *micro_s, double *step_s,
                    double *outside_s) {
  const SvGroup *gr = &cfg->cluster.group[0];
  double load = sv_group_load(gr);
  *outside_s = 0;
  for (int op = 0; op < OP_COUNT; op++) {
    IrOpKind k = ir_op_kind((IrOp)op);
    micro_s[op] = step_s[op] = k == KIND_COMM || k == KIND_HOST ? -1 : 0;
  }
  PassEpilogue *epilogue = pass_epilogues(g);   // (a graph before the epilogue pass: as priced)
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    double *by = n->phase == PHASE_UPDATE ? step_s : micro_s;
    const IrNode *into = epilogue[i].into;                    // (as the planner adds to its
    bool launch = n->phase != PHASE_UPDATE && !is_view(n) && !into;   // blocks' rooflines)
    if (by[n->op] >= 0)
      by[n->op] += load * (priced_time(g, n, into, &gr->dev) +
                           (launch ? gr->dev.eff.launch : 0));
    if (ir_op_kind(n->op) == KIND_OPT)
      *outside_s += load * scan_time(updated_elems(g, n), ir_dtype_size(n->in[1]->dtype),
                                     &gr->dev);
  }
  free(epilogue);
}

void sv_num_eval(const SvModel *m, const SvConfig *cfg, int block, SvNum *o) {
  IrGraph *g = m->g;
  const SvBlock *b = &m->block[block];
  const SymTab *t = &g->syms;
  memset(o, 0, sizeof *o);
  o->params = sym_evalf(b->params, t);
  o->bwd_params = b->bwd_params;
  o->nmust_tp = b->nmust_tp;
  o->nmust_grid = b->nmust_grid;
  for (int k = 0; k < b->nmust_tp; k++) {
    o->must_tp[k] = sym_evalf(b->must_tp[k], t);
    o->must_tp_name[k] = sym_str(&g->arena, b->must_tp[k], t);
  }
  for (int k = 0; k < b->nmust_grid; k++) {
    o->must_grid[k] = sym_evalf(b->must_grid[k], t);
    o->must_grid_name[k] = sym_str(&g->arena, b->must_grid[k], t);
  }
  if (o->params > 0)  // per parameter
    o->per = (SvStateBytes){sym_evalf(b->param_bytes, t) / o->params,
                            sym_evalf(b->grad_bytes, t) / o->params,
                            sym_evalf(b->master_bytes, t) / o->params,
                            sym_evalf(b->state_bytes, t) / o->params};
  for (int k = 0; k < b->nmembers; k++) {
    double e = sym_evalf(b->member[k], t);
    double dim = b->member_dim[k] ? sym_evalf(b->member_dim[k], t) : 0;
    for (int tp = 1; tp <= SV_MAXTP; tp++) {
      // this rank's rows of the split dim: a vocabulary padded to a multiple of tp, another
      // dim tp does not divide left whole
      double rows = dim <= 0 ? 0 : fmod(dim, tp) == 0 || b->member_vocab[k] ? ceil(dim / tp) : dim;
      double local = dim > 0 ? e / dim * rows : e;
      o->bucket[tp] += ceil(local / PASS_ALIGN_ELEMS) * PASS_ALIGN_ELEMS;
    }
    int split = b->member_grid[k];
    o->grid_members[split] += e;
    for (int q = 2; q <= SV_MAXQ; q++) {
      double local = e;   // each grid-split dim as the lowering cuts it
      for (int a = 0; a < 2; a++) {
        double gd = b->member_gdim[k][a] ? sym_evalf(b->member_gdim[k][a], t) : 0;
        if (gd > 0)
          local = local / gd *
                  (fmod(gd, q) == 0 || (b->member_gvocab[k] >> a & 1) ? ceil(gd / q) : gd);
      }
      o->bucket_grid[q] += ceil(local / PASS_ALIGN_ELEMS) * PASS_ALIGN_ELEMS;
    }
  }
  for (int k = 0; k < 3; k++) {
    o->grid_fwd[k] = sym_evalf(b->grid_fwd[k], t);
    o->grid_bwd[k] = sym_evalf(b->grid_bwd[k], t);
    o->grid_act[k] = sym_evalf(b->grid_act[k], t);
    o->grid_wfwd[k] = sym_evalf(b->grid_wfwd[k], t);
    o->grid_wbwd[k] = sym_evalf(b->grid_wbwd[k], t);
    o->grid_fwd_sq[k] = sym_evalf(b->grid_fwd_sq[k], t);
    o->grid_bwd_sq[k] = sym_evalf(b->grid_bwd_sq[k], t);
  }
  o->act = sym_evalf(b->act, t);
  o->act_int = sym_evalf(b->act_int, t);
  o->nact = b->nact;
  o->act_rep = sym_evalf(b->act_rep, t);
  o->ckpt = sym_evalf(b->ckpt, t);
  o->ckpt_int = sym_evalf(b->ckpt_int, t);
  o->work = sym_evalf(b->work, t);
  o->tp_fwd = sym_evalf(b->tp_fwd, t);
  o->tp_bwd = sym_evalf(b->tp_bwd, t);
  o->bt_fwd = sym_evalf(b->bt_fwd, t);
  o->bt_bwd = sym_evalf(b->bt_bwd, t);
  o->sync_fwd = sym_evalf(b->sync_fwd, t);
  o->sync_bwd = sym_evalf(b->sync_bwd, t);
  o->tp_fwd_sq = sym_evalf(b->tp_fwd_sq, t);
  o->tp_bwd_sq = sym_evalf(b->tp_bwd_sq, t);
  o->bt_fwd_sq = sym_evalf(b->bt_fwd_sq, t);
  o->bt_bwd_sq = sym_evalf(b->bt_bwd_sq, t);
  o->flops_fwd = sym_evalf(b->flops_fwd, t);
  o->flops_bwd = sym_evalf(b->flops_bwd, t);
  // kernels launched (an epilogue is its GEMM's), and their times (priced_time)
  for (int k = 0; k < b->nfwd; k++)
    o->nfwd += !is_view(b->fwd[k]) && !m->epilogue[b->fwd[k]->id];
  for (int k = 0; k < b->nbwd; k++)
    o->nbwd += !is_view(b->bwd[k]) && !m->epilogue[b->bwd[k]->id];
  for (int gi = 0; gi < cfg->cluster.ngroups; gi++) {
    const SvGroup *gr = &cfg->cluster.group[gi];
    double load = sv_group_load(gr);
    for (int k = 0; k < b->nfwd; k++)
      o->roof_fwd[gi] += load * priced_time(g, b->fwd[k], m->epilogue[b->fwd[k]->id], &gr->dev);
    for (int k = 0; k < b->nbwd; k++)
      o->roof_bwd[gi] += load * priced_time(g, b->bwd[k], m->epilogue[b->bwd[k]->id], &gr->dev);
  }
}

// ---- formulas of REFERENCES.md ------------------------------------------------------------------

double sv_zero_state_bytes(double psi, double own, int stage, SvStateBytes b) {
  return psi * (b.param * (stage >= 3 ? own : 1) + b.grad * (stage >= 2 ? own : 1) +
                (b.master + b.state) * (stage >= 1 ? own : 1));
}

// The host updates a float32 master: the device's weights in fp32, or its master.
static double host_master(SvStateBytes b) { return b.master > 0 ? b.master : b.param; }

// The host holds the offloaded share's float32 master, its gradient and its
// state; with a separate master (bf16), also the working copies it rounds
// and sends back.
double sv_offload_host_bytes(double psi_host, SvStateBytes b, bool staged) {
  return psi_host * (host_master(b) + b.grad * (staged ? 2 : 1) + b.state +
                     (b.master > 0 ? b.param : 0));
}

// The device no longer holds the offloaded share's state, nor its separate
// master (bf16: the host has it); its weights stay, unless they are offloaded
// too (params: ZeRO-3's shard, in host memory only).
double sv_offload_device_bytes(double psi_host, SvStateBytes b, bool params) {
  return psi_host * (b.state + b.master + (params ? b.param : 0));
}

double sv_dp_comm_bytes(double psi, int n, double own, int stage, int micro, bool every_micro,
                        SvStateBytes b) {
  if (n <= 1)
    return 0;
  double ring = 1 - own, g = psi * b.grad, p = psi * b.param;
  int reduce = every_micro ? micro : 1;
  switch (stage) {
  case 0: return reduce * 2.0 * (n - 1) / n * g;  // all-reduce once (or every micro-batch)
  case 1: return reduce * ring * g + ring * p;      // reduce-scatter once, all-gather the update
  case 2: return micro * ring * g + ring * p;       // reduce-scatter every micro-batch
  default: return micro * (2 * ring * p + ring * g); // gathers in forward and backward
  }
}

double sv_allreduce_sent(double allreduce_bytes, int n, int micro) {
  return n <= 1 ? 0 : micro * 2.0 * (n - 1) / n * allreduce_bytes;
}

double sv_allreduce_time(double bytes, int n, double bw, double alpha) {
  return n <= 1 ? 0 : alpha + 2.0 * (n - 1) / n * bytes / bw;
}

double sv_allgather_time(double bytes, int n, double bw, double alpha) {
  return n <= 1 ? 0 : alpha + (double)(n - 1) / n * bytes / bw;
}

// ---- the cost of one choice ---------------------------------------------------------------------

// A link for a collective among `span` consecutive ranks of group g (or,
// with all_groups, among ranks of every group).
typedef struct Link {
  double bw, alpha;
  double overlap;   // the share of the compute beside it that hides it
  double gather;    // all-gathers' bandwidth, of all-reduces'
  double scatter;   // reduce-scatters'
  bool pairs;       // all-reduce volumes moved as pairs of a reduce-scatter and an all-gather
  const SvDevice *measured;   // inside a node of a profile that measured collectives by size
  double hop_intra, hop_inter;   // seconds per step of a ring, inside a node and between
  int nodes;                     // the nodes the span covers
} Link;

static Link link_for(const SvCluster *c, int g, int span, bool all_groups) {
  const SvGroup *gr = &c->group[g];
  const SvEff *e = &gr->dev.eff;
  bool in = span <= gr->per_node;
  double bw = in ? gr->dev.intra_bw : gr->dev.inter_bw;
  const SvDevice *measured = in ? &gr->dev : NULL;
  if (all_groups && c->ngroups > 1) {   // across the groups: cross_bw, or the slowest group's
    in = c->one_node;                   // link between nodes (within one where they share it)
    bw = c->cross_bw;
    measured = NULL;
    if (in || bw <= 0) {
      bw = INFINITY;
      for (int i = 0; i < c->ngroups; i++)
        bw = fmin(bw, in ? c->group[i].dev.intra_bw : c->group[i].dev.inter_bw);
    }
  }
  return (Link){.bw = bw * e->link, .alpha = in ? e->alpha_intra : e->alpha_inter,
                .overlap = e->overlap, .gather = e->gather, .scatter = e->scatter,
                .measured = measured, .hop_intra = e->hop_intra, .hop_inter = e->hop_inter,
                .nodes = in ? 1 : (span + gr->per_node - 1) / gr->per_node};
}

// The latency of a collective of `kind` over n ranks of link l: the link's, and a step of its
// ring each n - 1 (an all-reduce's, or a pair's, twice that), the steps between nodes as many
// as the nodes it covers less one (each rank's group spread evenly over the span's nodes).
static double latency(Link l, int n, SvColl kind) {
  if (n <= 1)
    return 0;
  int nodes = l.nodes < n ? l.nodes : n, rounds = kind == SV_ALL_REDUCE ? 2 : 1;
  return l.alpha + rounds * ((n - nodes) * l.hop_intra + (nodes - 1) * l.hop_inter);
}

// Link l's bus bandwidth for a collective of `kind` on a buffer of `bytes`: as measured at that
// size where the profile has it, else the link's (an all-gather's and a reduce-scatter's their
// share of it). Pairs of a reduce-scatter and an all-gather (sequence parallelism's, a 2D
// grid's), priced by an all-reduce's volume, move each half at its own rate.
static double bus_bw(Link l, SvColl kind, double bytes) {
  if (kind == SV_ALL_REDUCE && l.pairs)
    return 2 / (1 / bus_bw(l, SV_ALL_GATHER, bytes) + 1 / bus_bw(l, SV_REDUCE_SCATTER, bytes));
  double bw = l.measured ? sv_coll_bw(l.measured, kind, bytes) : -1;
  if (bw > 0)
    return bw;
  return l.bw * (kind == SV_ALL_GATHER ? l.gather : kind == SV_REDUCE_SCATTER ? l.scatter : 1);
}

static double ar(double bytes, int n, Link l) {
  return sv_allreduce_time(bytes, n, bus_bw(l, SV_ALL_REDUCE, bytes),
                           latency(l, n, SV_ALL_REDUCE));
}
static double ag(double bytes, int n, Link l) {
  return sv_allgather_time(bytes, n, bus_bw(l, SV_ALL_GATHER, bytes),
                           latency(l, n, SV_ALL_GATHER));
}
static double rs(double bytes, int n, Link l) {   // (an all-gather's volume)
  return sv_allgather_time(bytes, n, bus_bw(l, SV_REDUCE_SCATTER, bytes),
                           latency(l, n, SV_REDUCE_SCATTER));
}
// Collectives over n ranks that together all-reduce `bytes` (an all-gather or reduce-scatter
// counting half its buffer; l.pairs: all of them in pairs), `sq` the sum of the squares of
// their bytes: at the bandwidth of the size the mean byte moves in. One latency for them all,
// as the planner has always priced a block's phase (a latency each would make a small model's
// 2D grids, dozens of collectives a block, cost more).
static double colls(double bytes, double sq, int n, Link l) {
  double size = bytes > 0 ? sq / bytes : 0;
  return sv_allreduce_time(bytes, n, bus_bw(l, SV_ALL_REDUCE, size * (l.pairs ? 2 : 1)),
                           latency(l, n, SV_ALL_REDUCE));
}
static Link pairs(Link l) {
  l.pairs = true;
  return l;
}
// A collective beside compute: its bandwidth part hides behind the compute,
// its start-up latency (every rank waits for the slowest) does not.
static double exposed(double comm, double compute, Link l, double latency) {
  return fmax(latency, comm - l.overlap * compute);
}

// The data-parallel collectives of one micro-step beside forward's tf and backward's tb
// seconds of compute, and (*step) those once per step: all-reduce (ZeRO 0) or reduce-scatter
// (1) once, or every micro-step with gradient offload; reduce-scatter every micro-step (2);
// all-gather in forward, all-gather again in backward where backward reads the parameters
// (again) and reduce-scatter (3). After an update ZeRO 1 and 2 all-gather the parameters.
static double dp_micro(int zero, bool grads, bool again, double gr_b, double pr_b, int shards,
                       Link dp, double tf, double tb, double *step) {
  double micro = 0, lat_ar = latency(dp, shards, SV_ALL_REDUCE);
  double lat_ag = latency(dp, shards, SV_ALL_GATHER), lat_rs = latency(dp, shards,
                                                                        SV_REDUCE_SCATTER);
  *step = 0;
  switch (zero) {
  case 0:
    *(grads ? &micro : step) = exposed(ar(gr_b, shards, dp), tb, dp, lat_ar);
    break;
  case 1:
    *(grads ? &micro : step) = exposed(rs(gr_b, shards, dp), tb, dp, lat_rs);
    *step += ag(pr_b, shards, dp);
    break;
  case 2:
    micro = exposed(rs(gr_b, shards, dp), tb, dp, lat_rs);
    *step = ag(pr_b, shards, dp);
    break;
  default:
    micro = exposed(ag(pr_b, shards, dp), tf, dp, lat_ag);
    if (again)
      micro += exposed(ag(pr_b, shards, dp) + rs(gr_b, shards, dp), tb, dp, lat_ag + lat_rs);
    else
      micro += exposed(rs(gr_b, shards, dp), tb, dp, lat_rs);
    break;
  }
  return micro;
}

// Activation bytes a device holds for a block under layout l: 1D TP
// replicates part of them (less with sequence parallelism, as the model was
// built: what ir/shard.c leaves whole); Optimus 2D splits batch and hidden:
// 1/q^2 (a checkpointed block's inputs, the residual stream).
// Data parallel over tp ranks: each holds its part of the batch, 1/tp of all. Tensor
// parallel over sub of them: sub's share of 1D's on sub / tp of the batch.
static double held(double floats, double rep, double ints, SvLayout l) {
  int s = l.tp * l.q * l.q;
  if (l.q > 1 && l.sub > 1)   // grids on part of tp: a grid's, on its part of the batch
    return (floats / l.sub + ints) * l.sub / l.tp;
  if (l.batch)
    return (floats + ints) / l.tp;
  if (l.sub > 1)
    return (rep + (floats - rep) / l.sub + ints) * l.sub / l.tp;
  double f = l.tp > 1 ? rep + (floats - rep) / l.tp : floats / s;
  return f + ints;
}

// The share of a replica's micro-batch each of a block's parts takes (sv_layout_parts): 1, or
// for a block over part of tp (its sub ranks, or their grids) sub / tp.
static double batch_share(SvLayout l) { return 1.0 / sv_layout_parts(l); }

// Bytes by the number k of grid axes that split them ([k] is divided by q^k).
static double on_grid(const double *by_split, double q) {
  return by_split[0] + by_split[1] / q + by_split[2] / (q * q);
}

void sv_cost(const SvCtx *x, const SvNum *n, SvLayout l, bool ckpt, bool swap, int zero,
             int offload, bool grads, bool params, int g, SvCost *o) {
  const SvConfig *cfg = x->cfg;
  const SvCluster *cl = &cfg->cluster;
  const SvGroup *gr = &cl->group[g];
  const SvDevice *dev = &gr->dev;
  memset(o, 0, sizeof *o);
  const SvStateBytes *b = &n->per;   // per parameter
  int s = sv_layout_ranks(l), d = l.dp;
  bool sp = cfg->seq_parallel;

  // Micro-steps this device runs per micro-batch its group runs: each of the
  // group's count/s replicas takes its share; one group rounds up.
  double per = cl->ngroups == 1 ? ceil((double)x->micro_total / d) / (double)x->micro_total
                                : (double)s / gr->count;

  // Compute for one micro-step of one replica, on one device.
  double load = sv_group_load(gr);   // a CPU's ranks sharing its cores
  double tf = n->roof_fwd[g] / s + n->nfwd * dev->eff.launch * load;
  double tb = n->roof_bwd[g] / s + n->nbwd * dev->eff.launch * load;
  o->t_micro[SV_T_COMPUTE] = per * (tf + tb);
  o->t_micro[SV_T_RECOMPUTE] = ckpt ? per * tf : 0;

  // Tensor parallelism: on the critical path. Megatron's f and g are
  // all-reduces (with SP: reduce-scatters and all-gathers, as ir/shard.c
  // lists them; the volumes count all-reduces); recomputing the forward
  // repeats g.
  // With SP and on a 2D grid the traffic is reduce-scatters and all-gathers
  // (an all-reduce's volume each pair): at their bandwidth.
  Link in = link_for(cl, g, s, false), rsag = pairs(in);
  double tp = 0;
  if (l.q > 1) {  // gathers and reductions along the grid's rows and columns (q ranks); grids on
                  // part of tp each on sub / tp of the replica's batch (the weights' traffic
                  // whole)
    double part = batch_share(l);
    double wf = on_grid(n->grid_wfwd, l.q), wb = on_grid(n->grid_wbwd, l.q);
    double q2 = (double)l.q * l.q;   // the squares shrink by q^2 an axis (the batch share left out)
    double f = colls(wf + (on_grid(n->grid_fwd, l.q) - wf) * part,
                     on_grid(n->grid_fwd_sq, q2), l.q, rsag);
    double bw = colls(wb + (on_grid(n->grid_bwd, l.q) - wb) * part,
                      on_grid(n->grid_bwd_sq, q2), l.q, rsag);
    tp = f + bw + (ckpt ? f : 0);
  } else if (l.batch) {   // the weights' gradients reduced over the tp ranks
    double f = colls(n->bt_fwd, n->bt_fwd_sq, l.tp, in);
    double bw = colls(n->bt_bwd, n->bt_bwd_sq, l.tp, in);
    tp = f + bw + (ckpt ? f : 0);
  } else if (l.sub > 1) {   // Megatron's over sub ranks, on sub / tp of the replica's batch
    Link t = link_for(cl, g, l.sub, false);
    if (sp)
      t = pairs(t);
    double part = batch_share(l);
    double f = colls(n->tp_fwd * part, n->tp_fwd_sq * part * part, l.sub, t);
    double bw = colls(n->tp_bwd * part, n->tp_bwd_sq * part * part, l.sub, t);
    tp = f + bw + (ckpt ? f : 0);
  } else if (l.tp > 1) {
    Link t = sp ? rsag : in;
    double f = colls(n->tp_fwd, n->tp_fwd_sq, l.tp, t);
    double bw = colls(n->tp_bwd, n->tp_bwd_sq, l.tp, t);
    tp = f + bw + (ckpt ? f : 0);
  }
  o->t_micro[SV_T_TP] = per * tp;

  // The batch's statistics (SyncBatchNorm), partial sums over the replicas' rows, are
  // all-reduced over the d replicas on the critical path: the all-reduces the batch's
  // propagation lists (sync_fwd, sync_bwd), forward (again when recomputed) and backward.
  if (d > 1 && n->sync_fwd + n->sync_bwd > 0) {
    Link dp = link_for(cl, g, s * d, true);
    double f = n->sync_fwd > 0 ? ar(n->sync_fwd, d, dp) : 0;
    o->t_micro[SV_T_DP] = per * (f + (n->sync_bwd > 0 ? ar(n->sync_bwd, d, dp) : 0) +
                                 (ckpt ? f : 0));
  }

  // Data parallelism over d replicas: gradients of this device's parameter
  // slice are reduced, hidden behind backward where possible. Under 1D TP the
  // slice is the program's bucket: split parameters 1/tp, the others whole,
  // each padded, the bucket padded to divide among the d replicas (on a 2D
  // grid: each 1/q^2, 1/q or whole, as the grid splits it).
  // Data parallel over the tp ranks too: the bucket is whole, one rank's, and it is reduced and
  // ZeRO-sharded over all d x tp ranks (its gradients partial sums over the batch's parts;
  // passes/lower.c), padded to divide among them.
  // Tensor parallel over sub of them: the bucket is 1/sub, reduced and sharded over the
  // d x tp / sub replicas.
  int split = sv_layout_split(l), shards = d * sv_layout_parts(l);
  double slice = l.q > 1 ? on_grid(n->grid_members, l.q) : n->params / split;
  if (n->params > 0 && ((l.q == 1 && split <= SV_MAXTP) || (l.q > 1 && l.q <= SV_MAXQ))) {
    double align = (double)PASS_ALIGN_ELEMS * shards;
    // a unit's blocks on average, each padded
    double first = l.q > 1 ? n->bucket_grid[l.q] : n->bucket[split];
    double rest = l.q > 1 ? n->bucket_grid_rest[l.q] : n->bucket_rest[split];
    int blocks = n->blocks > 1 ? n->blocks : 1;
    slice = (ceil(first / align) * align + (blocks - 1) * ceil(rest / align) * align) / blocks;
  }
  if (shards > 1 && slice > 0) {
    Link dp = link_for(cl, g, s * d, true);
    double gr_b = slice * b->grad, pr_b = slice * b->param;   // bf16: the copies gathered
    bool again = n->bwd_params || ckpt;   // ZeRO-3 gathers in backward too
    double step = 0;
    o->t_micro[SV_T_DP] += per * dp_micro(zero, grads, again, gr_b, pr_b, shards, dp, tf, tb,
                                          &step);
    o->t_step[SV_T_DP] = step;
    // a ghost micro-batch runs the same collectives with no compute to hide them
    o->t_ghost[SV_T_DP] = dp_micro(zero, grads, again, gr_b, pr_b, shards, dp, 0, 0, &step);
  }

  // The optimizer step for the parameters this device owns (with ZeRO-1+:
  // 1/d of its slice): the float32 weights (or masters) and the state read and
  // written, the gradient read, a bf16 working copy written; and the step's scans of
  // them (scan_time: the gradients' norm, the weights' finite check). The offloaded
  // share runs on the CPU: gradients down during backward, the CPU's AdamW,
  // the weights forward reads (float32, or the bf16 copies) up during the
  // next forward. With gradient offload the gradients go down every
  // micro-step and the host sums them (priced at AdamW's rate per byte: 12
  // bytes an element moved against AdamW's 28). With parameter offload the
  // weights go up every micro-step instead, before each gather.
  // The offloaded share is whole runs of PASS_ALIGN_ELEMS of the elements this
  // device updates, as the program cuts it.
  double own = slice / (zero >= 1 ? shards : 1);
  double fo = own > 0 ? (double)pass_offload_elems((int64_t)own, offload / 100.0) / own : 0;
  double master = b->master > 0 ? b->master : b->param;
  double upd = 2 * (master + b->state) + b->grad + (b->master > 0 ? b->param : 0);
  o->t_step[SV_T_UPDATE] = (1 - fo) * own * upd * load / (dev->hbm_bw * dev->eff.update) +
                           load * scan_time(own, b->grad, dev);
  double replica_micro = ceil((double)x->micro_total / d);  // micro-steps a replica runs
  if (fo > 0) {
    double moved = fo * own, pcie = dev->host_bw * dev->eff.host;
    Link host = {.bw = pcie, .overlap = dev->eff.overlap, .gather = 1, .scatter = 1, .nodes = 1};
    double down = exposed(moved * b->grad / pcie, tb, host, 0);
    double sum = replica_micro > 1 ? moved * 12 / 28 / dev->cpu_adam : 0;  // the host's sum
    double up = exposed(moved * b->param / pcie, tf, host, 0);
    if (grads) {   // (a ghost micro-batch copies and adds what the others' give its part)
      o->t_micro[SV_T_OFFLOAD] = per * (down + sum);
      o->t_ghost[SV_T_OFFLOAD] = moved * b->grad / pcie + sum;
    }
    if (params) {   // the shard up before forward's gather, and backward's (as ZeRO-3 gathers)
      bool twice = n->bwd_params || ckpt;
      double again = twice ? exposed(moved * b->param / pcie, tb, host, 0) : 0;
      // part of it offloaded: the device's range copied beside it into the gathered bucket
      // (read and written on the device, in the compute's stream)
      double local = 2 * (own - moved) * b->param * load / (dev->hbm_bw * dev->eff.mem);
      o->t_micro[SV_T_OFFLOAD] += per * (up + again + (twice ? 2 : 1) * local);
      o->t_ghost[SV_T_OFFLOAD] += (twice ? 2 : 1) * (moved * b->param / pcie + local);
    }
    o->t_step[SV_T_OFFLOAD] = (grads ? 0 : down) + moved / dev->cpu_adam + (params ? 0 : up);
  }

  // Memory. Sharded state is held at share 1 here: the group's devices hold
  // share * slice / (count / s) each, which is slice / d on one group (slice / (d x tp) for a
  // block data parallel over tp: one group).
  double sh = shards > 1 ? (double)s / gr->count / sv_layout_parts(l) : 1;
  // (parameter offload: the offloaded share's weights are in host memory only)
  double cat[SV_NM] = {(params ? 1 - fo : 1) * slice * b->param, grads ? 0 : slice * b->grad,
                       slice * (b->master + b->state) -
                           sv_offload_device_bytes(fo * slice, *b, false), 0};
  int from[SV_NM] = {3, 2, 1, 9};   // the ZeRO stage that shards each category
  for (int k = 0; k < SV_M_ACT; k++) {
    if (zero >= from[k])
      o->mem_shard[k] = cat[k] * sh;
    else
      o->mem[k] = cat[k];
  }
  double host = sv_offload_host_bytes(fo * slice, *b, grads && replica_micro > 1);
  if (zero >= 1)
    o->host_shard = host * sh;
  else
    o->host = host;
  double act = l.q > 1 ? on_grid(n->grid_act, l.q) * batch_share(l)
                        : held(n->act, n->act_rep, n->act_int, l);
  // a checkpointed block keeps its inputs: replicated, or with sequence parallelism split; a
  // swapped one its integer activations (passes/swap.c moves floats), the floats in host
  // memory, copied down as forward finishes with them and up as backward needs them
  double keep = ckpt ? held(n->ckpt, sp ? 0 : n->ckpt, n->ckpt_int, l) : act;
  if (swap) {   // a copy per value each way, each at least a launch
    keep = fmin(n->act_int / sv_layout_parts(l), act);
    double moved = act - keep, pcie = dev->host_bw * dev->eff.host;
    Link host = {.bw = pcie, .alpha = dev->eff.launch * load, .overlap = dev->eff.overlap,
                 .gather = 1, .scatter = 1, .nodes = 1};
    o->host += moved;
    o->t_micro[SV_T_OFFLOAD] += per * (exposed(moved / pcie, tf, host, n->nact * host.alpha) +
                                       exposed(moved / pcie, tb, host, n->nact * host.alpha));
  }
  o->mem[SV_M_ACT] = keep;
  // While the block runs backward: its recomputed (or swapped-in) activations, its
  // temporaries, under ZeRO-3 its gathered parameters (double-buffered), and
  // with gradient offload its gradients and the block's before it, which leave while this
  // one's backward runs (passes/copies.c; as double-buffered).
  o->peak = (ckpt || swap ? act : 0) + n->work / s + (zero == 3 ? 2 * slice * b->param : 0) +
            (grads ? 2 * slice * b->grad : 0);
}

double sv_reshard_time(const SvCtx *x, double bytes, SvLayout a, SvLayout b, int g) {
  bool mesh = a.dp == b.dp && a.tp == b.tp && a.q == b.q;
  if (mesh && a.batch == b.batch && a.sub == b.sub)
    return 0;
  if (mesh) {   // one mesh, a block data parallel over its tp ranks (or over groups of sub of
                // them): per micro-step, an all-gather of the batch's parts each way (forward
                // into the block that splits it less, backward out of it); the other way each
                // rank keeps its part. Under sequence parallelism a block's value is split over
                // all tp ranks either way (its batch, or its sequence): gathered whole each way.
    int pa = sv_layout_parts(a), pb = sv_layout_parts(b), k = pa > pb ? pa : pb;
    if (x->cfg->seq_parallel)
      k = a.tp;
    Link l = link_for(&x->cfg->cluster, g, a.tp, false);
    return ceil((double)x->micro_total / a.dp) * 2 * ag(bytes, k, l);
  }
  // Every device sends its share of the boundary tensor (forward) and of its
  // gradient (backward) to where the other layout wants it: an all-to-all.
  const SvCluster *cl = &x->cfg->cluster;
  int n = x->gpus;
  Link l = link_for(cl, g, n, true);
  double steps = ceil((double)x->micro_total / (a.dp < b.dp ? a.dp : b.dp));
  return 2 * bytes * (double)x->micro_total / n / l.bw + 2 * steps * l.alpha;
}
