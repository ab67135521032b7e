// Lowering tensor parallelism (Megatron's 1D, or Optimus's 2D grid): every
// rank of a replica runs the same graph on its part of each split tensor.
//
// ir_shard propagates the plan's degree through the training graph and says,
// for every value, the layout it is produced in, and for every read the layout
// the reader needs. This pass makes the graph do exactly that:
//
//   - shapes become per-rank: a dim split over tp is that dim / tp (over a
//     2D grid's rows or columns, / q), and the
//     value remembers the whole size (its layout: the dim's axis and whole
//     size) and the equal pieces the dim is made of (pieces: a fused QKV
//     output holds this rank's q, k
//     and v parts side by side);
//   - where a reader needs another layout than the value has, a conversion is
//     inserted: a partial sum is all-reduced (in place right after the
//     producer when every reader needs it reduced, else on a copy before the
//     reader) or, where the reader needs it split (sequence parallelism),
//     reduce-scattered (tp_reduce_scatter), a split dim is gathered
//     (tp_gather), a whole dim sliced (tp_slice, free: each rank keeps its
//     part); under sequence parallelism a conversion serves the readers of
//     one phase (backward gathers again what forward gathered);
//   - ops whose arithmetic depends on the global index learn their part: an
//     embedding over a vocabulary-split table (shards), the cross-entropy
//     over vocabulary-split logits (vp_cross_entropy, whose row statistics
//     are all-reduced inside and kept for backward), sum and mean over a split
//     dim (the codegen divides by the whole count).
//
// A weight whose dims the degree does not divide (a 3-class head under tp 2)
// stays whole on every rank of the group, as the propagation left it; the
// lowering lists it (PassLowered.replicated) for the plan to say so. A
// vocabulary is padded instead (below).
//
// The loss may be left a partial sum over tp or the grid's rows (the step's
// log adds it up). On a 2D grid the batch splits over the rows, and a loss
// that is a mean over its rows (cross-entropy) is scaled by 1/q, forward and
// backward, so that the sum over the rows is the mean over the batch.
//
// A block the plan makes data parallel over the tp ranks (PlanBlock.batch_tp)
// is laid out by the same propagation: its batch split over tp, its weights
// whole; the conversions above cut activations into it (tp_slice, of token
// ids too) and gather them out of it.
//
// Data parallelism and ZeRO are lowered after this, on the per-rank shapes.
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TP IR_MESH_TP
#define ROW IR_MESH_ROW
#define COL IR_MESH_COL
#define SUB IR_MESH_SUB
#define SUBDP IR_MESH_SUBDP
#define SUBROW IR_MESH_SUBROW
#define BIT(axis) (1u << (axis))
#define NCONV 8   // conversions of one value remembered

// The axes this pass lowers, in the order a conversion takes them.
static const int model_axes[] = {TP, ROW, COL, SUB, SUBDP, SUBROW};
#define NMODEL ((int)(sizeof model_axes / sizeof *model_axes))

typedef struct Conv {
  ShardLayout want;
  IrPhase phase;          // of the reader it was made for
  IrValue *v;
} Conv;

typedef struct Tp {
  IrGraph *g;
  int tp;                 // the mesh's tp (1D) ...
  int q;                  // ... or the side of its 2D grid (1: none)
  char mesh[64];          // "tp 2", "2D 2x2": for messages
  bool seq_parallel;      // Megatron's sequence parallelism (ir/shard.c)
  int size[IR_MESH_NAXES];        // each axis's degree (1: not split over)
  const Sym *deg[IR_MESH_NAXES];  // ... as a formula: the dim TP or Q
  PassLowered *out;
  IrDiag *d;
  ShardResult r;
  int nv, nn;             // values and nodes before lowering
  IrNode **node;          // the nodes before lowering, in schedule order
  int *use_at;            // [i]: index into r.use of node[i]'s first input
  ShardLayout *cur;       // [value id] what readers get (after a conversion right after it)
  int *pieces;            // [value id]
  int *pad_dim;           // [value id] the dim a padded vocabulary pads (-1: none)
  Conv *conv;             // [value id * NCONV]
  int *nconv;
} Tp;

// The dim l splits over axis (-1: none).
static int split_dim(const ShardLayout *l, int axis) {
  for (int i = 0; i < l->rank; i++)
    if (l->split[i] == axis)
      return i;
  return -1;
}

// The dim a value's pieces are in (ir_mesh_pieces), -1: none.
static int pieces_dim(const ShardLayout *l) {
  for (int i = 0; i < l->rank; i++)
    if (ir_mesh_pieces((IrMeshAxis)l->split[i]))
      return i;
  return -1;
}

// The pieces of a dim split over axis, of a value made of `pieces`.
static int pieces_on(int pieces, int axis) {
  return ir_mesh_pieces((IrMeshAxis)axis) ? pieces : 1;
}

// Do a and b agree on every axis this pass lowers?
static bool same_layout(const ShardLayout *a, const ShardLayout *b) {
  for (int k = 0; k < NMODEL; k++) {
    int x = model_axes[k];
    if (split_dim(a, x) != split_dim(b, x) || (a->partial & BIT(x)) != (b->partial & BIT(x)))
      return false;
  }
  return true;
}

static const ShardLayout *use_of(const Tp *t, int i, int k) { return &t->r.use[t->use_at[i] + k]; }

// v's dim d, of size `whole` in the whole tensor, split over axis (in pieces
// when it is the pieces' dim).
static void split_as(Tp *t, IrValue *v, int d, int axis, const Sym *whole, int pieces) {
  v->layout[d] = (IrDimLayout){(IrMeshAxis)axis, whole, NULL};
  v->shape[d] = sym_div(&t->g->arena, whole, t->deg[axis]);
  if (ir_mesh_pieces((IrMeshAxis)axis))
    v->pieces = pieces;
}

// v's per-rank shape and placement for layout l.
static void place(Tp *t, IrValue *v, const ShardLayout *l, const Sym *const *whole, int pieces) {
  for (int i = 0; i < v->rank; i++) {
    v->shape[i] = whole[i];
    v->layout[i] = (IrDimLayout){IR_MESH_NONE, NULL, NULL};
  }
  v->pieces = pieces;
  for (int k = 0; k < NMODEL; k++) {
    int d = split_dim(l, model_axes[k]);
    if (d >= 0)
      split_as(t, v, d, model_axes[k], whole[d], pieces);
  }
}

// ---- pieces ---------------------------------------------------------------------------------
//
// A split dim is made of equal pieces, each split over tp: split and concat
// along it add their parts' pieces up; every other op's split operands are one
// layout, so they share a count.

static int norm_axis(const IrNode *n, int rank) {
  int64_t a = ir_attr_i(n, "axis");
  return (int)(a < 0 ? a + rank : a);
}

static bool raise(int *p, int v) {
  if (v <= *p)
    return false;
  *p = v;
  return true;
}

static int count_pieces(Tp *t) {
  for (int i = 0; i < t->nv; i++)
    t->pieces[i] = 1;
  for (int round = 0; round < 32; round++) {
    bool changed = false;
    for (int i = 0; i < t->nn; i++) {
      const IrNode *n = t->node[i];
      if (n->op == OP_SPLIT || n->op == OP_CONCAT) {
        bool split = n->op == OP_SPLIT;
        const IrValue *whole = split ? n->in[0] : n->out[0];
        IrValue *const *parts = split ? n->out : n->in;
        int np = split ? n->nout : n->nin;
        const ShardLayout *wl = split ? use_of(t, i, 0) : &t->r.layout[whole->id];
        int along = wl->split[norm_axis(n, whole->rank)];
        if (!ir_mesh_pieces((IrMeshAxis)along))
          continue;
        int sum = 0, most = 1;
        for (int k = 0; k < np; k++) {
          sum += t->pieces[parts[k]->id];
          most = t->pieces[parts[k]->id] > most ? t->pieces[parts[k]->id] : most;
          if (!sym_eq(parts[k]->shape[norm_axis(n, whole->rank)],
                      parts[0]->shape[norm_axis(n, whole->rank)]))
            return ir_error(t->d, n->loc, "lower: %s: %s '%s' has parts of different sizes "
                            "along its split dim; only equal parts are lowered", t->mesh,
                            ir_op_name(n->op), whole->name);
        }
        changed |= raise(&t->pieces[whole->id], sum > most * np ? sum : most * np);
        for (int k = 0; k < np; k++)
          changed |= raise(&t->pieces[parts[k]->id], t->pieces[whole->id] / np);
        continue;
      }
      if (n->op == OP_SLICE || n->op == OP_SLICE_BWD) {   // one of np equal pieces
        bool fwd = n->op == OP_SLICE;
        const IrValue *whole = fwd ? n->in[0] : n->out[0], *part = fwd ? n->out[0] : n->in[0];
        int ax = norm_axis(n, whole->rank), along = use_of(t, i, 0)->split[ax];
        int64_t w, p;
        if (ir_mesh_pieces((IrMeshAxis)along) && !sym_eval(whole->shape[ax], &t->g->syms, &w) &&
            !sym_eval(part->shape[ax], &t->g->syms, &p) && p > 0 && w % p == 0) {
          int np = (int)(w / p);
          changed |= raise(&t->pieces[whole->id], np * t->pieces[part->id]);
          changed |= raise(&t->pieces[part->id], t->pieces[whole->id] / np);
          continue;
        }
      }
      int most = 1;
      for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < n->nin; k++)
          if (pieces_dim(use_of(t, i, k)) >= 0) {
            if (pass)
              changed |= raise(&t->pieces[n->in[k]->id], most);
            else
              most = t->pieces[n->in[k]->id] > most ? t->pieces[n->in[k]->id] : most;
          }
        for (int k = 0; k < n->nout; k++)
          if (pieces_dim(&t->r.layout[n->out[k]->id]) >= 0) {
            if (pass)
              changed |= raise(&t->pieces[n->out[k]->id], most);
            else
              most = t->pieces[n->out[k]->id] > most ? t->pieces[n->out[k]->id] : most;
          }
      }
    }
    if (!changed)
      return 0;
  }
  return ir_error(t->d, (IrLoc){0}, "lower: %s: the pieces of the split dims do not settle",
                  t->mesh);
}

// ---- conversions ----------------------------------------------------------------------------

static IrValue *named(Tp *t, IrNode *n, const IrValue *from, const char *suffix) {
  char name[512];
  snprintf(name, sizeof name, "%s.%s", from->name, suffix);
  ir_value_rename(t->g, n->out[0], name);
  return n->out[0];
}

static int infer(Tp *t, IrNode *n) { return ir_infer(t->g, n, t->d); }

// all_reduce over axis of x in place, and its wait.
static void reduce_in_place(Tp *t, IrValue *x, int axis) {
  IrNode *n = ir_node_new(t->g, OP_ALL_REDUCE, &x, 1, 0);
  int slot = t->out->nslots++;
  ir_set_int(t->g, n, "axis", ir_rt_axis((IrMeshAxis)axis));
  ir_set_int(t->g, n, "slot", slot);
  IrNode *w = ir_node_new(t->g, OP_COMM_WAIT, &x, 1, 0);
  ir_set_int(t->g, w, "slot", slot);
  IR_ASSERT(infer(t, n) == 0 && infer(t, w) == 0);
}

static IrNode *tp_move(Tp *t, IrOp op, IrValue *x, int dim, int axis, int nout) {
  IrNode *n = ir_node_new(t->g, op, &x, 1, nout);
  ir_set_int(t->g, n, "dim", dim);
  ir_set_int(t->g, n, "pieces", pieces_on(x->pieces, axis));
  ir_set_int(t->g, n, "shards", t->size[axis]);
  if (axis != TP)
    ir_set_int(t->g, n, "axis", ir_rt_axis((IrMeshAxis)axis));
  return n;
}

// This rank's part of x along dim w over axis, by op (tp_slice: of x;
// tp_reduce_scatter: of the sum of x over the axis), named x.part. NULL with
// t->d on error.
static IrValue *part_of(Tp *t, IrOp op, IrValue *x, int w, int axis) {
  IrNode *c = tp_move(t, op, x, w, axis, op == OP_TP_SLICE ? 1 : 2);
  if (infer(t, c))
    return NULL;
  IrValue *y = named(t, c, x, "part");
  memcpy(y->layout, x->layout, sizeof y->layout);
  y->pieces = x->pieces;
  split_as(t, y, w, axis, x->shape[w], (int)ir_attr_i(c, "pieces"));
  return y;
}

// Can a value in layout from become one in layout to by local slices alone (every axis
// this pass lowers: split on the same dim or not at all, partial alike)?
static bool slices_to(const ShardLayout *from, const ShardLayout *to) {
  for (int k = 0; k < NMODEL; k++) {
    int x = model_axes[k], d = split_dim(from, x);
    if ((d >= 0 && d != split_dim(to, x)) || (from->partial & BIT(x)) != (to->partial & BIT(x)))
      return false;
  }
  return true;
}

// x (in layout have) in layout want, built at the graph's insertion point:
// partial sums reduced (reduce-scattered where want splits a dim have has
// whole), then dims gathered, then dims sliced, axis by axis. *collected (when
// not NULL) is the value before the slices, in layout *at.
static IrValue *convert(Tp *t, IrValue *x, ShardLayout have, const ShardLayout *want,
                        const IrNode *reader, IrValue **collected, ShardLayout *at) {
  IrGraph *g = t->g;
  for (int k = 0; k < NMODEL; k++) {
    int a = model_axes[k], w = split_dim(want, a);
    if (!(have.partial & BIT(a)) || (want->partial & BIT(a)))
      continue;
    if (w >= 0 && split_dim(&have, a) < 0 && have.split[w] == IR_MESH_NONE) {
      // each rank gets its part of the sum (sequence parallelism; a 2D weight's gradient)
      if (!(x = part_of(t, OP_TP_REDUCE_SCATTER, x, w, a)))
        return NULL;
      have.partial &= (unsigned char)~BIT(a);
      have.split[w] = (unsigned char)a;
      continue;
    }
    // else reduced whole (want splits dim w over a, where have's own split of w, over
    // another axis, is gathered below): an all-reduce, as ir/shard.c prices it
    IrNode *c = ir_node_new(g, OP_SCALE, &x, 1, 1);  // a copy: other readers keep the partial sum
    IR_ASSERT(infer(t, c) == 0);
    IrValue *y = named(t, c, x, "sum");
    memcpy(y->layout, x->layout, sizeof y->layout);
    y->pieces = x->pieces;
    reduce_in_place(t, y, a);
    x = y;
    have.partial &= (unsigned char)~BIT(a);
  }
  for (int k = 0; k < NMODEL; k++) {
    int a = model_axes[k], d = split_dim(&have, a);
    if (d < 0 || want->split[d] == a)
      continue;
    IrNode *c = tp_move(t, OP_TP_GATHER, x, d, a, 2);
    if (infer(t, c))
      return NULL;
    IrValue *y = named(t, c, x, "whole");
    memcpy(y->layout, x->layout, sizeof y->layout);
    y->layout[d] = (IrDimLayout){IR_MESH_NONE, NULL, NULL};
    y->pieces = x->pieces;
    x = y;
    have.split[d] = IR_MESH_NONE;
  }
  if (collected)
    *collected = x, *at = have;
  for (int k = 0; k < NMODEL; k++) {
    int a = model_axes[k], w = split_dim(want, a);
    if (w < 0 || have.split[w] == a)
      continue;
    if (have.split[w] != IR_MESH_NONE)
      break;   // reported below
    if (!(x = part_of(t, OP_TP_SLICE, x, w, a)))
      return NULL;
    have.split[w] = (unsigned char)a;
  }
  if (!same_layout(&have, want))
    return ir_error(t->d, reader->loc, "lower: %s: %s reads '%s' in a layout no conversion "
                    "gives", t->mesh, ir_op_name(reader->op), x->name), NULL;
  return x;
}

// Does a conversion serve only the readers of its phase (ir/shard.c: sequence
// parallelism and the 2D grid gather again in backward what forward gathered)?
static bool phased(const Tp *t) { return t->seq_parallel || t->q > 1; }

// The value node[i] reads as its input k, converted when it needs another layout.
static int convert_input(Tp *t, int i, int k) {
  IrGraph *g = t->g;
  IrNode *n = t->node[i];
  IrValue *v = n->in[k];
  const ShardLayout *want = use_of(t, i, k);
  if (same_layout(&t->cur[v->id], want))
    return 0;
  // A gradient the update needs in another layout is converted in backward,
  // right after it is made (and after its own reduction, if any): the update
  // then reads (and the lowering buckets) the converted value.
  bool grad = n->phase == PHASE_UPDATE && v->producer && v->producer->phase == PHASE_BACKWARD;
  // An earlier conversion (under sequence parallelism: of this phase) that gives the layout,
  // or whose collectives did and slices are all it lacks, as ir/shard.c counts them.
  Conv *c = &t->conv[v->id * NCONV];
  IrValue *from = v;
  ShardLayout have = t->cur[v->id];
  for (int j = 0; j < t->nconv[v->id]; j++) {
    if (phased(t) && c[j].phase != n->phase)
      continue;
    if (same_layout(&c[j].want, want)) {
      n->in[k] = c[j].v;
      return 0;
    }
    if (from == v && !grad && slices_to(&c[j].want, want))
      from = c[j].v, have = c[j].want;
  }
  IrNode *at = grad ? v->producer : n;
  int pos = grad ? pass_reduced_at(g, at->id, v) + 1 : at->id;
  g->cur_phase = at->phase;
  ir_set_block(g, at);
  ir_insert_before(g, pos);
  IrValue *collected = NULL;
  ShardLayout held;
  IrValue *y = convert(t, from, have, want, n, &collected, &held);
  ir_insert_before(g, -1);
  if (!y)
    return -1;
  if (grad && n->in[0]->grad == v)
    n->in[0]->grad = y;
  n->in[k] = y;
  if (t->nconv[v->id] < NCONV)
    c[t->nconv[v->id]++] = (Conv){*want, n->phase, y};
  if (collected != from && collected != y && t->nconv[v->id] < NCONV)
    c[t->nconv[v->id]++] = (Conv){held, n->phase, collected};
  return 0;
}

// Output k of node[i] converted right after it, for every reader.
static int convert_output(Tp *t, int i, int k) {
  IrGraph *g = t->g;
  IrNode *n = t->node[i];
  IrValue *v = n->out[k];
  const ShardLayout *made = &t->r.layout[v->id], *want = &t->cur[v->id];
  if (same_layout(made, want))
    return 0;
  g->cur_phase = n->phase;
  ir_set_block(g, n);
  ir_insert_before(g, n->id + 1);
  int rc = 0;
  bool splits_alike = true;
  for (int a = 0; a < NMODEL; a++)
    splits_alike &= split_dim(made, model_axes[a]) == split_dim(want, model_axes[a]);
  if (splits_alike) {   // a partial sum, reduced for every reader
    for (int a = 0; a < NMODEL; a++)
      if ((made->partial & ~want->partial) & BIT(model_axes[a]))
        reduce_in_place(t, v, model_axes[a]);
  } else {
    // the producer writes its part to a new value; the gather writes v
    IrValue *raw = ir_value_new(g, NULL, v->dtype, v->role);
    char name[512];
    snprintf(name, sizeof name, "%s.part", v->name);
    ir_value_rename(g, raw, name);
    raw->rank = v->rank;
    const Sym *whole[IR_MAXRANK];
    for (int j = 0; j < v->rank; j++)
      whole[j] = ir_whole_dim(v, j);
    place(t, raw, made, whole, t->pieces[v->id]);
    ir_node_set_output(n, k, raw);   // v has no producer until the conversion makes it
    IrValue *y = convert(t, raw, *made, want, n, NULL, NULL);
    if (!y) {
      rc = -1;
    } else {   // the conversion's output is v
      IrNode *p = y->producer;
      for (int j = 0; j < p->nout; j++)
        if (p->out[j] == y)
          ir_node_set_output(p, j, v);
    }
  }
  ir_insert_before(g, -1);
  return rc;
}

// ---- ops that learn their part ----------------------------------------------------------------

// cross_entropy over logits split on the vocabulary over `over` (tp, or a 2D
// grid's columns) -> vp_cross_entropy, whose row statistics its backward reads: stats_of
// holds them by the logits as the graph had them before lowering (`logits_was`, of an id
// below t->nv that the node's input converts, the same for the forward and its backward).
static int vocab_parallel_loss(Tp *t, IrNode *n, int over, const IrValue *logits_was,
                               IrValue **stats_of) {
  IrGraph *g = t->g;
  const IrValue *logits = n->in[n->op == OP_CROSS_ENTROPY ? 0 : 1];
  const Sym *valid = logits->layout[logits->rank - 1].valid;
  int64_t vocab = valid ? ir_eval(g, valid) : ir_attr_i(n, "vocab");
  if (n->op == OP_CROSS_ENTROPY) {
    ir_node_set_op(g, n, OP_VP_CROSS_ENTROPY, n->in, n->nin);
    ir_set_int(g, n, "vocab", vocab);
    ir_set_int(g, n, "axis", ir_rt_axis((IrMeshAxis)over));
    char name[512];
    snprintf(name, sizeof name, "%s.stats", n->out[0]->name);
    ir_value_rename(g, n->out[1], name);
    stats_of[logits_was->id] = n->out[1];
    return 0;
  }
  IrValue *s = stats_of[logits_was->id];
  if (!s)
    return ir_error(t->d, n->loc, "lower: %s: the backward of the vocabulary-parallel "
                    "cross-entropy reads logits '%s' its forward did not", t->mesh,
                    n->in[1]->name);
  IrValue *in[4] = {n->in[0], n->in[1], n->in[2], s};
  ir_node_set_op(g, n, OP_VP_CROSS_ENTROPY_BWD, in, 4);
  ir_set_int(g, n, "vocab", vocab);
  ir_set_int(g, n, "axis", ir_rt_axis((IrMeshAxis)over));
  return 0;
}

static int learn_part(Tp *t, int i, const IrValue *logits_was, IrValue **stats_of) {
  IrNode *n = t->node[i];
  switch (n->op) {
  case OP_EMBEDDING:       // split on the rows: this rank's; on the columns: nothing to learn
  case OP_EMBEDDING_BWD: { // the gradient of a table split on its rows: this rank's rows
    int over = n->op == OP_EMBEDDING ? use_of(t, i, 0)->split[0] : n->out[0]->layout[0].axis;
    if (over != IR_MESH_NONE) {
      ir_set_int(t->g, n, "shards", t->size[over]);
      ir_set_int(t->g, n, "axis", ir_rt_axis((IrMeshAxis)over));
    }
    return 0;
  }
  case OP_CROSS_ENTROPY:
  case OP_CROSS_ENTROPY_BWD: {  // over a vocabulary split over tp or the grid's columns
    int lg = n->op == OP_CROSS_ENTROPY ? 0 : 1;
    int over = use_of(t, i, lg)->split[n->in[lg]->rank - 1];
    return over != IR_MESH_NONE ? vocab_parallel_loss(t, n, over, logits_was, stats_of) : 0;
  }
  case OP_LAYERNORM:       // over a dim split along the 2D grid's rows (ir/shard.c's
  case OP_RMSNORM:         // norm_on_grid): the row statistics are all-reduced inside
  case OP_LAYERNORM_BWD:
  case OP_RMSNORM_BWD: {
    int x = n->op == OP_LAYERNORM || n->op == OP_RMSNORM ? 0 : 1;
    int over = use_of(t, i, x)->split[n->in[x]->rank - 1];
    if (over != IR_MESH_NONE)
      ir_set_int(t->g, n, "split_axis", ir_rt_axis((IrMeshAxis)over));
    return 0;
  }
  case OP_SPLIT: {
    int axis = norm_axis(n, n->in[0]->rank), ns;
    int over = use_of(t, i, 0)->split[axis];
    if (over == IR_MESH_NONE)
      return 0;
    const Sym *const *sizes = ir_attr_syms(n, "sizes", &ns);
    const Sym **local = ir_alloc(&t->g->arena, (size_t)(ns + 1) * sizeof *local);
    for (int k = 0; k < ns; k++)
      local[k] = sym_div(&t->g->arena, sizes[k], t->deg[over]);
    ir_set_syms(t->g, n, "sizes", local, ns);
    return 0;
  }
  case OP_SLICE:      // along a whole dim, a slice of each rank's part (another dim split:
  case OP_SLICE_BWD: {  // sequence parallelism); along a split dim, one of its equal pieces
    int over = use_of(t, i, 0)->split[norm_axis(n, n->in[0]->rank)];
    if (over == IR_MESH_NONE)
      return 0;
    if (over == ROW)
      break;
    ir_set_int(t->g, n, "start", ir_attr_i(n, "start") / t->size[over]);
    return 0;
  }
  default:   // dropout draws each element's mask bit at its place in the whole tensor, in
             // the layouts its sharding rule allows (codegen/kcall.c); masked_fill's mask is
             // laid out as x (sliced or broadcast)
    return 0;
  }
  return ir_error(t->d, n->loc, "lower: %s: %s over a split dim is not lowered yet; use a "
                  "smaller --tp or none", t->mesh, ir_op_name(n->op));
}

// A loss that is the mean over its rows, with the rows (the batch) split
// over the 2D grid's rows (or over tp, in a block data parallel over it):
// each rank's mean is over its 1/q of them, so the loss and the gradient
// flowing into the loss's backward are scaled by 1/q (the loss is then a
// partial sum over that axis, as the propagation says). The axis, or -1.
static int mean_over_row_split(const Tp *t, int i) {
  const IrNode *n = t->node[i];
  int tg;   // the targets' input
  switch (n->op) {
  case OP_CROSS_ENTROPY:
  case OP_VP_CROSS_ENTROPY: tg = 1; break;   // (a 2D grid's: over its columns)
  case OP_CROSS_ENTROPY_BWD:
  case OP_VP_CROSS_ENTROPY_BWD: tg = 2; break;
  case OP_NLL_LOSS: tg = ir_attr_i(n, "sum") ? -1 : 1; break;
  case OP_NLL_LOSS_BWD: tg = ir_attr_i(n, "sum") ? -1 : 2; break;
  default: tg = -1; break;
  }
  int over = tg >= 0 && n->in[tg]->rank > 0 ? use_of(t, i, tg)->split[0] : IR_MESH_NONE;
  return over == ROW || over == TP || over == SUBDP || over == SUBROW ? over : -1;
}

static void scale_rows(Tp *t, int i, int axis) {
  IrGraph *g = t->g;
  IrNode *n = t->node[i];
  g->cur_phase = n->phase;
  ir_set_block(g, n);
  bool fwd = n->op == OP_CROSS_ENTROPY || n->op == OP_VP_CROSS_ENTROPY || n->op == OP_NLL_LOSS;
  ir_insert_before(g, fwd ? n->id + 1 : n->id);
  IrValue *x = fwd ? ir_value_new(g, NULL, n->out[0]->dtype, n->out[0]->role) : n->in[0];
  if (fwd) {   // the op writes its mean to x, the scale writes the loss
    char name[512];
    snprintf(name, sizeof name, "%s.rows", n->out[0]->name);
    ir_value_rename(g, x, name);
    x->rank = 0;
  }
  IrNode *c = ir_node_new(g, OP_SCALE, &x, 1, 1);
  ir_set_float(g, c, "s", 1.0 / t->size[axis]);
  IR_ASSERT(infer(t, c) == 0);
  if (fwd) {
    IrValue *loss = n->out[0];
    ir_node_set_output(n, 0, x);
    ir_node_set_output(c, 0, loss);
  } else {
    n->in[0] = named(t, c, n->in[0], "rows");
  }
  ir_insert_before(g, -1);
}

// ---- a padded vocabulary ----------------------------------------------------------------------
//
// A vocabulary the degree does not divide (GPT-2's 50257 under tp 2) is padded
// to the next multiple of it, as Megatron does: each value the propagation
// splits on a dim of that size (the table, the logits, their gradients, the
// optimizer state) is that much larger there, the padding zero. It stays zero:
// the table's extra rows load as zeros and no token looks them up; the
// vocabulary-parallel cross-entropy leaves the extra logits out of its
// softmax and gives them zero gradient (its `vocab` attribute), so the rows'
// gradients, moments and updates are zero too. Only ops that keep zeros zero
// may read or write a padded value.

// Does n keep a padded operand's padding zero (and not read it as data)?
static bool keeps_padding(const int *pad_dim, const IrNode *n) {
  switch (n->op) {
  case OP_ADD:
  case OP_SUB:   // zero + zero: every operand padded
    for (int k = 0; k < n->nin; k++)
      if (pad_dim[n->in[k]->id] < 0)
        return false;
    return true;
  case OP_SCALE: return ir_attr_f(n, "b") == 0;
  case OP_FILL: return ir_attr_f(n, "value") == 0;
  case OP_MATMUL:
  case OP_MUL:
  case OP_TRANSPOSE:
  case OP_SUM:
  case OP_SUM_TO:
  case OP_EMBEDDING:
  case OP_EMBEDDING_BWD:
  case OP_CROSS_ENTROPY:
  case OP_CROSS_ENTROPY_BWD:
  case OP_ADAMW:
  case OP_SGD:
  case OP_CAST:     // bf16: a gradient cast to float32, a master rounded to its working copy
  case OP_ASSIGN:
  case OP_ACCUMULATE: return true;
  default: return false;
  }
}

// 1 when a padded value has a reader that would not keep its padding zero.
static int check_padding(const Tp *t) {
  for (int i = 0; i < t->nn; i++) {
    const IrNode *n = t->node[i];
    for (int k = 0; k < n->nin + n->nout; k++) {
      const IrValue *v = k < n->nin ? n->in[k] : n->out[k - n->nin];
      if (t->pad_dim[v->id] >= 0 && !keeps_padding(t->pad_dim, n))
        return 1;
    }
  }
  return 0;
}

// ---- the pass -------------------------------------------------------------------------------

// v split on dim over axis: the dim divides by the degree (in its pieces), or
// is a vocabulary to pad (pad_dim).
static int check_split(Tp *t, const IrValue *v, int dim, int axis) {
  IrGraph *g = t->g;
  int pieces = pieces_on(t->pieces[v->id], axis);
  int64_t size, k = (int64_t)t->size[axis] * pieces;
  if (dim < 0)
    return 0;
  if (sym_eval(v->shape[dim], &g->syms, &size))
    return ir_error(t->d, v->loc, "lower: the size of '%s' is not known: bind every dim "
                    "(-D NAME=VALUE)", v->name);
  if (size % k == 0)
    return 0;
  if (ir_mesh_vocab((IrMeshAxis)axis) && pieces == 1 && ir_shard_pads(&t->r, v->shape[dim]) &&
      (t->pad_dim[v->id] < 0 || t->pad_dim[v->id] == dim)) {
    t->pad_dim[v->id] = dim;
    return 0;
  }
  const char *what = axis == ROW || axis == COL ? "q" : "tp";
  return ir_error(t->d, v->loc, "lower: %s %d does not divide '%s' %s in block %d: its dim %d "
                  "(%lld%s) must be a multiple of %lld; choose a %s that divides it", what,
                  t->size[axis], v->name, ir_shape_str(g, v),
                  v->producer ? v->producer->block : 0, dim, (long long)size,
                  pieces > 1 ? ", in equal pieces" : "", (long long)k, what);
}

// Every split of l divides.
static int check_splits(Tp *t, const IrValue *v, const ShardLayout *l) {
  for (int k = 0; k < NMODEL; k++)
    if (check_split(t, v, split_dim(l, model_axes[k]), model_axes[k]))
      return -1;
  return 0;
}

// Every value as produced, as readers get it, and as each reader needs it.
static int check_divides(Tp *t) {
  for (int i = 0; i < t->nv; i++) {
    const IrValue *v = t->g->values[i];
    if (check_splits(t, v, &t->cur[i]) || check_splits(t, v, &t->r.layout[i]))
      return -1;
  }
  for (int i = 0; i < t->nn; i++)
    for (int k = 0; k < t->node[i]->nin; k++)
      if (check_splits(t, t->node[i]->in[k], use_of(t, i, k)))
        return -1;
  return 0;
}

// The dim `name` (TP or Q), bound to the degree: per-rank shapes are C/TP.
static const Sym *degree_dim(IrGraph *g, const char *name, int degree, IrDiag *d) {
  int var = symtab_find(&g->syms, name);
  if (var >= 0 && !(g->syms.bound[var] && g->syms.value[var] == degree)) {
    ir_error(d, (IrLoc){0}, "lower: the model has a dim named %s, the name tensor parallelism "
             "gives its degree: rename the model's dim", name);
    return NULL;
  }
  if (var < 0 && (var = symtab_add(&g->syms, name)) < 0) {
    ir_error(d, (IrLoc){0}, "lower: the model has too many dims to name the tp degree");
    return NULL;
  }
  symtab_bind(&g->syms, var, degree);
  return sym_var(&g->arena, var);
}

// Ops whose own collectives (ShardColl at SHARD_WITHIN) the runtime's kernels
// run: the vocabulary-parallel cross-entropy's, and the norms' over a split dim.
static bool within_lowered(IrOp op) {
  return op == OP_CROSS_ENTROPY || op == OP_LAYERNORM || op == OP_RMSNORM ||
         op == OP_LAYERNORM_BWD || op == OP_RMSNORM_BWD;
}

// A padded vocabulary's size: the next multiple of the degree.
static int64_t padded_to(int64_t size, int64_t deg) { return size + (deg - size % deg) % deg; }

// The degree a vocabulary is padded to a multiple of: tp, or the grid's side (a grid inside
// tp: q divides tp).
static int pad_degree(const Tp *t) { return t->size[TP] > 1 ? t->size[TP] : t->size[ROW]; }

// How much larger a collective's buffer is than ir_shard counts it: by a
// vocabulary the lowering pads (pad_dim: to a multiple of tp, or of the grid's side, as
// pass_lower_tp pads it; a 2D table's gathers, its gradient's reduce-scatter, split on that
// dim or not), the padded size over the model's (1: none; and for a collective within an op,
// whose buffer is not the value: the vocabulary-parallel loss's row statistics).
static double padded_share(const Tp *t, const ShardColl *c) {
  const IrValue *v = c->value;
  int d = t->pad_dim[v->id];
  int64_t size;
  if (c->at == SHARD_WITHIN || d < 0 || sym_eval(v->shape[d], &t->g->syms, &size))
    return 1;
  return (double)padded_to(size, pad_degree(t)) / (double)size;
}

// The layouts ir_shard gives (padding a vocabulary the degree does not
// divide when pad is true), the conversions right after producers, pieces and
// padded dims. 1 (no error) when a padded value has a reader that would not
// keep the padding zero: then the vocabulary stays replicated.
static int layouts(Tp *t, const int *degree, const bool *batch_tp, int nb, bool pad) {
  ShardSpec spec = {.dp = 1, .nblocks = nb, .tp = degree, .batch_tp = batch_tp, .pad_vocab = pad,
                    .seq_parallel = t->seq_parallel, .q = t->q, .mesh_tp = t->tp};
  ir_shard_free(&t->r);
  if (ir_shard(t->g, &spec, &t->r, t->d))
    return -1;
  for (int i = 0; i < t->nn; i++)
    t->use_at[i] = t->r.use_at[i];
  for (int i = 0; i < t->nv; i++)
    t->pad_dim[i] = -1;
  // what readers get: the produced layout, or its conversion right after the producer
  memcpy(t->cur, t->r.layout, (size_t)t->nv * sizeof *t->cur);
  for (int i = 0; i < t->r.ncolls; i++) {
    const ShardColl *c = &t->r.coll[i];
    if (!(IR_MESH_MODEL_AXES & BIT(c->axis)))
      continue;
    if (c->at == SHARD_WITHIN && !within_lowered(c->node->op))
      return ir_error(t->d, c->node->loc, "lower: %s: %s with a collective inside is not "
                      "lowered yet", t->mesh, ir_op_name(c->node->op));
    if (c->at != SHARD_AFTER)
      continue;
    ShardLayout *l = &t->cur[c->value->id];
    int d = split_dim(l, c->axis);
    if (c->kind == SHARD_ALL_REDUCE)
      l->partial &= (unsigned char)~BIT(c->axis);
    else if (c->kind == SHARD_ALL_GATHER && d >= 0)
      l->split[d] = IR_MESH_NONE;
    else if (c->kind == SHARD_REDUCE_SCATTER && c->dim >= 0 && d < 0)
      l->partial &= (unsigned char)~BIT(c->axis), l->split[c->dim] = (unsigned char)c->axis;
    else
      return ir_error(t->d, c->node->loc, "lower: %s: a %s after %s is not lowered yet",
                      t->mesh, ir_shard_kind_name(c->kind), ir_op_name(c->node->op));
  }
  if (count_pieces(t) || check_divides(t))
    return -1;
  double *bytes = t->out->tp_comm_bytes;   // once the padded values are known
  memset(t->out->tp_comm_bytes, 0, sizeof t->out->tp_comm_bytes);
  for (int i = 0; i < t->r.ncolls; i++) {
    const ShardColl *c = &t->r.coll[i];
    if (IR_MESH_MODEL_AXES & BIT(c->axis))
      bytes[c->axis] +=
          sym_evalf(ir_shard_allreduce_bytes(t->g, c), &t->g->syms) * padded_share(t, c);
  }
  return check_padding(t);
}

// ---- SUMMA ----------------------------------------------------------------------------------
//
// On a grid, Optimus multiplies panels as they arrive instead of gathering operands whole:
//   - forward, a matmul of an activation gathered along the grid row (its k split over the
//     columns) by a weight gathered along the grid column (its k over the rows) becomes one
//     summa: panel t of each broadcast from its owner, multiplied, summed;
//   - backward, dx = dy @ w^T reduce-scattered along the grid row, w gathered along the column,
//     becomes summa_nt: panel t of w broadcast, dy @ w_t^T reduced to the grid column t; and
//     dw = x^T @ dy reduce-scattered along the grid column, x gathered along the row, becomes
//     summa_tn: panel t of x broadcast, x_t^T @ dy reduced to the grid row t.
// A panel is 1/q of an operand and the rank's own is read in place, so each gathered operand's
// 2 x (its whole) of temporaries, and each product's, become min(q - 1, 2) panels. A rank sends
// what the gathers and reduce-scatters did (runtime/comm.h counts a broadcast and a reduce as
// a pipelined ring sends them). Kept as they were: an operand read again (the grid's tied
// table), and products whose operands differ in dtype.

typedef struct SummaMatch {
  IrOp op;           // OP_SUMMA, OP_SUMMA_NT or OP_SUMMA_TN
  IrNode *at;        // the node that becomes it: its first output is the product
  IrValue *in[2];
  IrNode *gone[2];   // the gather and, backward, the matmul
} SummaMatch;

// The tp_gather that makes v along `axis` on its dim `dim` for v's one reader, or NULL.
static IrNode *gathered_once(const int *reads, const IrValue *v, int axis, int dim) {
  IrNode *p = v->producer;
  if (!p || p->op != OP_TP_GATHER || p->out[0] != v || reads[v->id] != 1 ||
      ir_attr_i(p, "axis") != ir_rt_axis((IrMeshAxis)axis) || ir_attr_i(p, "dim") != dim ||
      ir_attr_i(p, "pieces") != 1)
    return NULL;
  return p;
}

static bool flags(const IrNode *m, int ta, int tb) {
  return ir_attr_i(m, "ta") == ta && ir_attr_i(m, "tb") == tb;
}

static bool match_summa(const int *reads, IrNode *n, SummaMatch *s) {
  if (n->op == OP_MATMUL && flags(n, 0, 0) && !ir_attr_i(n, "sum_batch") &&
      n->in[1]->rank == 2) {   // forward: a's k over the columns, b's over the rows
    IrNode *ga = gathered_once(reads, n->in[0], COL, n->in[0]->rank - 1);
    IrNode *gb = gathered_once(reads, n->in[1], ROW, 0);
    *s = (SummaMatch){OP_SUMMA, n, {ga ? ga->in[0] : NULL, gb ? gb->in[0] : NULL}, {ga, gb}};
    return ga && gb;
  }
  if (n->op != OP_TP_REDUCE_SCATTER || ir_attr_i(n, "pieces") != 1)
    return false;
  IrValue *p = n->in[0];
  IrNode *m = p->producer;
  if (!m || m->op != OP_MATMUL || m->out[0] != p || reads[p->id] != 1)
    return false;
  IrMeshAxis axis = ir_mesh_axis_of_rt(ir_attr_i(n, "axis"));
  int64_t dim = ir_attr_i(n, "dim");
  if (axis == COL && dim == p->rank - 1 && flags(m, 0, 1) && !ir_attr_i(m, "sum_batch") &&
      m->in[1]->rank == 2) {   // dx = dy @ w^T: w's k over the rows
    IrNode *gw = gathered_once(reads, m->in[1], ROW, 0);
    *s = (SummaMatch){OP_SUMMA_NT, n, {m->in[0], gw ? gw->in[0] : NULL}, {gw, m}};
    return gw != NULL;
  }
  IrValue *x = m->in[0];
  if (axis == ROW && dim == 0 && p->rank == 2 && flags(m, 1, 0) && x->rank == m->in[1]->rank &&
      (x->rank == 2 || ir_attr_i(m, "sum_batch"))) {   // dw = x^T @ dy: x's k over the columns
    IrNode *gx = gathered_once(reads, x, COL, x->rank - 1);
    *s = (SummaMatch){OP_SUMMA_TN, n, {gx ? gx->in[0] : NULL, m->in[1]}, {gx, m}};
    return gx != NULL;
  }
  return false;
}

static int stream_summa(Tp *t) {
  IrGraph *g = t->g;
  int *reads = calloc((size_t)g->nvalues + 1, sizeof *reads);
  IR_ASSERT(reads);
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i]->nin; k++)
      reads[g->nodes[i]->in[k]->id]++;
  int rc = 0;
  ir_batch_begin(g);
  for (int i = 0; i < g->nnodes && !rc; i++) {
    SummaMatch s;
    IrNode *n = g->nodes[i];
    if (!match_summa(reads, n, &s) || s.in[0]->dtype != n->out[0]->dtype ||
        s.in[1]->dtype != n->out[0]->dtype)
      continue;
    int had = n->nout;
    ir_node_set_op(g, n, s.op, s.in, 2);
    for (int k = 1; k < had; k++)   // a reduce-scatter's scratch: the op's buffers are new
      ir_node_set_output(n, k, ir_value_new(g, NULL, DT_F32, n->out[0]->role));
    n->nattr = 0;
    ir_set_int(g, n, "shards", t->q);
    for (int k = 0; k < 2; k++) {   // the gather and the matmul go, and with them their outputs
      ir_node_remove(g, s.gone[k]);
      for (int o = 0; o < s.gone[k]->nout; o++)
        s.gone[k]->out[o]->producer = NULL;
    }
    if (ir_infer(g, n, t->d))
      rc = ir_error(t->d, n->loc, "lower: %s: internal error: %s does not fit the per-rank "
                    "shapes (above)", t->mesh, ir_op_name(n->op));
  }
  ir_batch_end(g);
  free(reads);
  return rc;
}

int pass_lower_tp(IrGraph *g, const Plan *P, PassLowered *out, IrDiag *d) {
  int tp = P->mesh.size[TP], q = P->mesh.size[ROW], sub = P->mesh.size[SUB];
  Tp t = {.g = g, .tp = tp, .q = q, .seq_parallel = P->seq_parallel, .out = out, .d = d,
          .nv = g->nvalues, .nn = g->nnodes};
  for (int a = 0; a < IR_MESH_NAXES; a++)
    t.size[a] = 1;
  t.size[TP] = tp;
  t.size[ROW] = t.size[COL] = q;
  t.size[SUB] = sub;
  t.size[SUBDP] = tp / sub;
  t.size[SUBROW] = P->mesh.size[SUBROW];   // (q with one grid: the grid's rows)
  if (q > 1 && tp > q * q)
    snprintf(t.mesh, sizeof t.mesh, "tp %d (and %d x 2D %dx%d)", tp, tp / (q * q), q, q);
  else if (q > 1 && tp > 1)
    snprintf(t.mesh, sizeof t.mesh, "tp %d (and 2D %dx%d)", tp, q, q);
  else if (q > 1)
    snprintf(t.mesh, sizeof t.mesh, "2D %dx%d", q, q);
  else if (sub > 1)
    snprintf(t.mesh, sizeof t.mesh, "tp %d (and %d)", tp, sub);
  else
    snprintf(t.mesh, sizeof t.mesh, "tp %d", tp);
  if ((tp > 1 && !(t.deg[TP] = degree_dim(g, IR_TP_DIM, tp, d))) ||
      (q > 1 && !(t.deg[ROW] = t.deg[COL] = degree_dim(g, IR_Q_DIM, q, d))))
    return -1;
  if (sub > 1) {   // a block below the mesh's tp: its ops over sub ranks, its batch over tp / sub
    t.deg[SUB] = sym_const(&g->arena, sub);
    t.deg[SUBDP] = sym_const(&g->arena, tp / sub);
  }
  if (q > 1)   // a grid block's batch beside tp blocks: over its rows, and the grids
    t.deg[SUBROW] = t.size[SUBROW] == q ? t.deg[ROW] : sym_const(&g->arena, t.size[SUBROW]);
  int nb = ir_nblocks(g);
  int *degree = malloc((size_t)nb * sizeof *degree);
  bool *batch_tp = malloc((size_t)nb * sizeof *batch_tp);
  t.node = malloc((size_t)t.nn * sizeof *t.node);
  t.use_at = malloc((size_t)t.nn * sizeof *t.use_at);
  t.cur = malloc((size_t)t.nv * sizeof *t.cur);
  t.pieces = malloc((size_t)t.nv * sizeof *t.pieces);
  t.pad_dim = malloc((size_t)t.nv * sizeof *t.pad_dim);
  t.conv = malloc((size_t)t.nv * NCONV * sizeof *t.conv);
  t.nconv = calloc((size_t)t.nv, sizeof *t.nconv);
  IrValue **stats_of = calloc((size_t)t.nv, sizeof *stats_of);
  IR_ASSERT(degree && batch_tp && t.node && t.use_at && t.cur && t.pieces && t.pad_dim &&
            t.conv && t.nconv && stats_of);
  int rc = 0;
  int64_t rows = g->batch_sym >= 0 && g->syms.bound[g->batch_sym] ? g->syms.value[g->batch_sym]
                                                                   : 0;
  for (int b = 0; b < nb && !rc; b++) {   // (a 2D block beside tp blocks: tp 1, on the grid)
    const PlanBlock *pb = plan_block(P, b);
    degree[b] = pb->sub ? sub : pb->grid ? 1 : tp;
    batch_tp[b] = pb->batch_tp;
    // a block data parallel over tp ranks (or over the tp / sub groups of a sub block) splits
    // its micro-batch among them: only where they divide it (ir/shard.c keeps it whole else)
    int parts = pb->batch_tp ? tp : pb->sub && !pb->grid ? tp / sub : 1;
    if (parts > 1 && rows > 0 && rows % parts)
      rc = ir_error(d, (IrLoc){0}, "lower: block %d splits its micro-batch of %lld sequences "
                    "over %d parts of the tp ranks, which do not divide it: give a micro-batch "
                    "that %d divides (--micro-batch, or the model's batch dim)", b,
                    (long long)rows, parts, parts);
  }
  for (int i = 0; i < t.nn; i++)
    t.node[i] = g->nodes[i];
  if (!rc)
    rc = layouts(&t, degree, batch_tp, nb, true);
  if (rc == 1)
    rc = layouts(&t, degree, batch_tp, nb, false);
  free(degree), free(batch_tp);
  // a weight whose dims the degree does not divide stays whole on every rank (the plan says so)
  out->nreplicated = rc ? 0 : t.r.nnotes;
  out->replicated = ir_alloc(&g->arena, (size_t)out->nreplicated * sizeof *out->replicated + 1);
  for (int i = 0; i < out->nreplicated; i++) {
    const char *why = t.r.note[i].text;
    out->replicated[i] = ir_strdup(&g->arena, strncmp(why, "replicated: ", 12) ? why : why + 12);
  }
  // per-rank shapes: each value as its readers get it
  for (int i = 0; i < t.nv && !rc; i++) {
    IrValue *v = g->values[i];
    const Sym *whole[IR_MAXRANK];
    memcpy(whole, v->shape, sizeof whole);
    // a vocabulary padded before (pass_pad_vocab) keeps the model's size as valid
    int pre = -1;
    for (int k = 0; k < v->rank && pre < 0; k++)
      if (v->layout[k].valid)
        pre = k;
    const Sym *pre_valid = pre >= 0 ? v->layout[pre].valid : NULL;
    int pd = t.pad_dim[i];
    const Sym *valid = pd >= 0 ? whole[pd] : NULL;
    if (pd >= 0) {   // padded to a multiple of tp, or of the grid's side
      int64_t size = ir_eval(g, valid);
      int64_t pad = padded_to(size, pad_degree(&t)) - size;
      whole[pd] = sym_add(&g->arena, valid, sym_const(&g->arena, pad));
      if (pre == pd)
        valid = pre_valid;
    }
    place(&t, v, &t.cur[i], whole, t.pieces[i]);
    if (pd >= 0 && v->layout[pd].axis != IR_MESH_NONE)
      v->layout[pd].valid = valid;
    if (pre >= 0 && pre != pd)
      v->layout[pre] = v->layout[pre].axis == IR_MESH_NONE
                           ? (IrDimLayout){IR_MESH_NONE, whole[pre], pre_valid}
                           : (IrDimLayout){v->layout[pre].axis, v->layout[pre].whole, pre_valid};
  }
  for (int i = 0; i < t.nn && !rc; i++) {
    IrNode *n = t.node[i];
    const IrValue *logits_was = n->op == OP_CROSS_ENTROPY       ? n->in[0]
                                : n->op == OP_CROSS_ENTROPY_BWD ? n->in[1]
                                                                : NULL;
    for (int k = 0; k < n->nin && !rc; k++)
      rc = convert_input(&t, i, k);
    if (!rc)
      rc = learn_part(&t, i, logits_was, stats_of);
    for (int k = 0; k < n->nout && !rc && n->op != OP_VP_CROSS_ENTROPY; k++)
      rc = convert_output(&t, i, k);
    // a gradient the update reads as a partial sum over its block's batch parts (tp, or a sub
    // block's subdp): its bucket's reduction finishes it
    unsigned over = n->op == OP_ADAMW || n->op == OP_SGD ? use_of(&t, i, 1)->partial : 0;
    if (over & (BIT(TP) | BIT(SUBDP)))
      n->in[1]->partial_batch = over & BIT(TP) ? IR_MESH_TP : IR_MESH_SUBDP;
  }
  for (int i = 0, axis; i < t.nn && !rc; i++)
    if ((axis = mean_over_row_split(&t, i)) >= 0)
      scale_rows(&t, i, axis);
  // every node checked against the per-rank shapes (rules infer their outputs again)
  for (int i = 0; i < g->nnodes && !rc; i++)
    if (ir_infer(g, g->nodes[i], d))
      rc = ir_error(d, g->nodes[i]->loc, "lower: %s: internal error: %s does not fit the "
                    "per-rank shapes (above)", t.mesh, ir_op_name(g->nodes[i]->op));
  if (!rc && g->loss)
    out->loss_partial = t.cur[g->loss->id].partial & IR_MESH_MODEL_AXES;
  if (!rc && q > 1)
    rc = stream_summa(&t);
  ir_remove_unused(g, ROLE_ACT);   // what a conversion's output was before it became the value
  ir_remove_unused(g, ROLE_GRAD);
  free(t.node), free(t.use_at), free(t.cur), free(t.pieces), free(t.pad_dim), free(t.conv);
  free(t.nconv);
  free(stats_of);
  ir_shard_free(&t.r);
  g->cur_phase = PHASE_FORWARD;
  ir_set_block(g, NULL);
  return rc;
}

// ---- a vocabulary padded on one rank ----------------------------------------------------------
//
// The vocab pass (bf16 programs, before the plan) pads the loss's vocabulary
// to a multiple of `align` (128, as llm.c and Megatron pad): 50257 logits a
// row put every row but the first off the 16-byte alignment the tensor
// cores' GEMMs need, so the LM head's three GEMMs ran on a fallback kernel
// (19 of 96 ms of a GPT-2 124M step on an H100). tp then splits the padded
// size (pass_lower_tp keeps `valid`). The padding is the one above: the
// values a vocabulary dim reaches from the loss's logits (the head's weight
// or the tied table, their gradients, working copies and optimizer state)
// grow by zeros that stay zero, the cross-entropy learns where its scores
// end (its `vocab`: the padding is left out of the softmax and gets zero
// gradient, so the result is the unpadded one), and the params table names
// the pad (RT_AXIS_NONE), so that loading and saving see the model's shape.
// When an op that would not keep the padding zero reads one of those values
// (a reshape of the logits, say), nothing is padded.

// Add to the padded set every value a node touching it reaches with a dim of
// size vocab; 0 when nothing was added, -1 when a value has two such dims.
static int reach(IrGraph *g, const Sym *vocab, int *pad_dim) {
  int added = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    bool touches = false;
    for (int k = 0; k < n->nin + n->nout && !touches; k++)
      touches = pad_dim[(k < n->nin ? n->in[k] : n->out[k - n->nin])->id] >= 0;
    for (int k = 0; touches && k < n->nin + n->nout; k++) {
      const IrValue *v = k < n->nin ? n->in[k] : n->out[k - n->nin];
      int dim = -1, count = 0;
      for (int j = 0; j < v->rank; j++)
        if (sym_eq(v->shape[j], vocab))
          dim = j, count++;
      if (count > 1)
        return -1;
      if (dim >= 0 && pad_dim[v->id] < 0)
        pad_dim[v->id] = dim, added = 1;
    }
  }
  return added;
}

// The values padded with the logits of cross-entropy node ce (pad_dim), or
// false when padding them could change the result.
static bool pad_set(IrGraph *g, const IrNode *ce, int *pad_dim) {
  const IrValue *logits = ce->in[0];
  const Sym *vocab = logits->shape[logits->rank - 1];
  for (int i = 0; i < g->nvalues; i++)
    pad_dim[i] = -1;
  pad_dim[logits->id] = logits->rank - 1;
  int rc;
  while ((rc = reach(g, vocab, pad_dim)) > 0) {
  }
  if (rc < 0)
    return false;
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    for (int k = 0; k < n->nin + n->nout; k++) {
      const IrValue *v = k < n->nin ? n->in[k] : n->out[k - n->nin];
      if (pad_dim[v->id] >= 0 && !keeps_padding(pad_dim, n))
        return false;
    }
  }
  return true;
}

int pass_pad_vocab(IrGraph *g, int align, IrDiag *d) {
  const IrNode *ce = NULL;
  for (int i = 0; i < g->nnodes && !ce; i++)
    if (g->nodes[i]->op == OP_CROSS_ENTROPY && g->nodes[i]->phase == PHASE_FORWARD)
      ce = g->nodes[i];
  int64_t size;
  if (align <= 1 || !ce ||
      sym_eval(ce->in[0]->shape[ce->in[0]->rank - 1], &g->syms, &size) || size % align == 0)
    return 0;
  int nv = g->nvalues, rc = 0;
  int *pad_dim = malloc((size_t)nv * sizeof *pad_dim);
  IR_ASSERT(pad_dim);
  if (pad_set(g, ce, pad_dim)) {
    const Sym *valid = ce->in[0]->shape[ce->in[0]->rank - 1];
    const Sym *whole = sym_add(&g->arena, valid, sym_const(&g->arena, align - size % align));
    for (int i = 0; i < nv; i++) {
      int dim = pad_dim[i];
      if (dim < 0)
        continue;
      g->values[i]->shape[dim] = whole;
      g->values[i]->layout[dim] = (IrDimLayout){IR_MESH_NONE, whole, valid};
    }
    for (int i = 0; i < g->nnodes; i++) {
      IrNode *n = g->nodes[i];
      if ((n->op == OP_CROSS_ENTROPY && pad_dim[n->in[0]->id] >= 0) ||
          (n->op == OP_CROSS_ENTROPY_BWD && pad_dim[n->in[1]->id] >= 0))
        ir_set_int(g, n, "vocab", size);
    }
    for (int i = 0; i < g->nnodes && !rc; i++)
      if (ir_infer(g, g->nodes[i], d))
        rc = ir_error(d, g->nodes[i]->loc, "vocab: internal error: %s does not fit the padded "
                      "vocabulary (above)", ir_op_name(g->nodes[i]->op));
  }
  free(pad_dim);
  return rc;
}

int pass_vocab(IrGraph *g, PassCtx *ctx, bool *changed) {
  (void)changed;
  return ctx->opt.precision == PASS_PRECISION_BF16 ? pass_pad_vocab(g, PASS_VOCAB_ALIGN, ctx->diag)
                                                   : 0;
}
