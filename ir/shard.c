// Sharding: each op's rule (shard_<op>, expanded from ops.def, so a missing
// rule is a compile error) and the pass that propagates a plan's layouts
// through the training graph.
//
// A layout says, per dim of a value, whether it is replicated or split over a
// mesh axis (dp: the batch; tp: Megatron's 1D tensor parallelism; row and col:
// Optimus's 2D grid), and over which axes the value is a partial sum still to
// be reduced (ir/shard.h).
// Under sequence parallelism tp also splits the sequence between the
// tensor-parallel regions (seq_dim, below).
//
// The pass walks the nodes in schedule order (forward, backward, update). For
// each node it hands the rule its inputs' layouts; the rule rewrites them into
// the layouts the op needs and sets its outputs' layouts. The pass then
// inserts what each difference implies (replicated -> split: a free local
// slice; split -> replicated: all_gather; partial -> whole: all_reduce;
// partial -> split: reduce_scatter). A conversion is placed right after the
// value's producer when no reader has seen the value yet (every later reader
// then sees the converted value), else just before the reader that needs it;
// a value converted once is not converted again. A partial sum with several
// readers is reduced before the first, so that no linear reader (a bias
// gradient's sum) carries it on to be reduced a second time.
//
// Seeding: parameters (bf16: their working copies, which forward reads; the
// float32 master then takes its copy's layout) and optimizer state have no
// layout until a node of a block with tp > 1 first reads them; that node's
// rule chooses one, so propagation decides:
//   - matmul: a weight whose activation is split on the contracted dim is
//     split on its input dim (row-parallel: the output is a partial sum,
//     Megatron's g reduces it); one whose activation is whole there is split
//     on its output dim (column-parallel: the output is split; in backward the
//     activation's gradient is a partial sum, Megatron's f). When the output
//     dim does not divide by tp the weight stays replicated (a note says so).
//   - embedding: the table is split on the vocabulary (each rank looks up its
//     rows; the output is a partial sum); on a 2D grid, on the vocabulary over
//     the columns and on the features over the rows. A vocabulary the degree
//     does not divide stays replicated (a note says so), unless the spec lets
//     the lowering pad it (pad_vocab, as Megatron does): then every dim of its
//     size splits as if it divided (ShardResult.vocab).
//   - everything else follows what it meets: a bias takes its matmul's split,
//     LayerNorm's weights the (whole) last dim of its input, optimizer state
//     its parameter's layout.
// In a block with tp = 1 parameters are replicated.
//
// A block the spec makes data parallel over its tp ranks (batch_tp: the
// planner's pure data-parallel block in a tensor-parallel program) keeps its
// parameters whole too, and splits its batch over tp instead: each activation
// it reads has its batch dim split (block_key, split_batch), its weights'
// gradients come out partial sums over tp and stay so to the update (its
// bucket's reduction finishes them, passes/lower.c). What crosses to a tensor-parallel block is read there whole on
// the batch (an all-gather), as between blocks of different degrees.
//
// A block whose degree s is below the program's tp (ShardSpec.mesh_tp: TP2
// beside TP4) is laid out as a tensor-parallel block over the axis SUB (s
// adjacent ranks) and as a block data parallel over SUBDP (the tp / s groups
// of them): its activations have their batch split over SUBDP as well, its
// weights' gradients are partial sums over SUBDP, left so for the update. A
// value crossing between it and a block of another kind is read without the
// other's splits over tp, sub and subdp (a gather of the batch's parts, and
// of split features).
//
// The batch: every input whose first dim is the first input's first dim is
// split over dp on it (when dp > 1). Rules carry that split through without
// collectives; what it leaves pending (parameter gradients are partial sums
// over dp) is the data-parallel reduction, which the lowering inserts per its
// ZeRO stage, so it is not listed here. The loss is left as it comes (partial
// over dp, and over tp under a vocabulary-parallel cross-entropy): only the
// step's log reads it, and the lowering reduces it there.
//
// Conventions the lowering must keep: a split dim holds each rank's
// contiguous 1/n, except that split, concat and slice along a split dim act
// piece by piece (the fused QKV weight holds each rank's q, k and v columns
// side by side, as Megatron lays it out); elementwise ops with index-dependent
// results (dropout's mask) index by global position; sum and mean over a
// split dim divide by the global count.
#include "shard.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define NONE IR_MESH_NONE
#define DP IR_MESH_DP
#define TP IR_MESH_TP
#define ROW IR_MESH_ROW
#define COL IR_MESH_COL
#define SUB IR_MESH_SUB
#define SUBDP IR_MESH_SUBDP
#define SUBROW IR_MESH_SUBROW
#define BIT(axis) (1u << (axis))
// The axes whose meaning depends on the block's kind (block_key): a value laid out under
// another kind is read without its splits and partial sums over them.
#define KEYED (BIT(TP) | BIT(SUB) | BIT(SUBDP) | BIT(ROW) | BIT(COL) | BIT(SUBROW))
#define HAVE 4   // conversions of one value remembered

typedef struct Shard {
  IrGraph *g;
  const ShardSpec *spec;
  IrDiag *diag;
  ShardResult *r;
  bool *laid;          // [value id] has a layout
  ShardLayout *cur;    // [value id] what the next reader gets (its layout, or a conversion placed
                       // right after its producer)
  int *deg;            // [value id] the block kind its layout was made under (block_key)
  bool *read;          // [value id] a reader has read cur
  int *readers;        // [value id] inputs of nodes that read it
  ShardLayout *have;   // [value id * HAVE] conversions placed before a reader
  unsigned char *have_phase;  // ... the phase of the reader (under seq_parallel a conversion
                              // serves the readers of its phase only)
  unsigned char *nhave;
  int capc, capn, capo, capp;
  int *need_last;      // [block] its last entry in r->need (-1: none) ...
  int *need_prev;      // [need] ... and the one before it of the same block
  const IrValue *batch;  // the first input (its first dim is the batch)
  int sub;               // the degree of the blocks below the program's tp (1: none)
  const Sym *seq;        // the model's sequence dim (NULL: none), split under seq_parallel
  const IrValue **copy;  // [value id] a parameter's bf16 working copy (NULL: none)
  const IrValue **grad_of;  // [value id] the parameter whose gradient it is, or a term of
                            // (2D: a weight gradient's matmul keeps the weight's splits)
  int *fwd_at, *fwd_node;   // forward's readers of value v: nodes fwd_node[fwd_at[v] ..
                            // fwd_at[v + 1]) (one entry per input read)
} Shard;

// One node's rule at work: the inputs' layouts, to be rewritten into the
// layouts the op needs; the outputs' layouts, to be set.
typedef struct ShardOp {
  Shard *s;
  IrGraph *g;
  const IrNode *n;
  int tp;              // the node's block's tp degree: 1, >= 2 or SHARD_TP_ANY
  bool batch;          // ... over which its batch splits, its weights whole (ShardSpec.batch_tp)
  int tpa;             // the axis its tensor-parallel splits use: TP, or SUB in a block below
                       // the mesh's tp (ShardSpec.mesh_tp)
  int ba;              // the axis its batch splits over besides dp: TP (batch), SUBDP (a block
                       // below the mesh's tp), ROW or SUBROW (a grid block beside tp blocks)
                       // or NONE
  int q;               // the side of the block's 2D grid (1: none)
  ShardLayout *in;
  bool *seed;          // in[k] is a parameter or state without a layout yet: what the rule
                       // leaves in in[k] is its seed ...
  int seed_k;          // ... unless k is seed_k (-1: none): then seed_as, which the pass
  ShardLayout seed_as; // converts to in[k] for this node (a 2D weight, gathered to be read)
  ShardLayout *out;
} ShardOp;

// ---- layouts ----------------------------------------------------------------------------

static ShardLayout whole(int rank) {
  ShardLayout l;
  memset(&l, 0, sizeof l);
  l.rank = rank < 0 ? 0 : rank;
  return l;
}

// The axes a split over `axis` uses: itself, and for subrow (a sub grid's batch) the grid's
// rows and subdp that it is made of.
static unsigned axis_bits(int axis) {
  return axis == SUBROW ? BIT(SUBROW) | BIT(ROW) | BIT(SUBDP) : BIT(axis);
}

// The partial sums that summing a dim split over the axes `used` (axis_bits) leaves: one per
// axis, a sum over subrow being one over the rows and one over subdp (partial sums are never
// over subrow).
static unsigned sums(unsigned used) { return used & ~BIT(SUBROW); }

// The partial sums that summing away a dim split over `axis` leaves (NONE: none).
static unsigned summed(int axis) { return axis == NONE ? 0 : sums(axis_bits(axis)); }

// Axes the split dims use (axis_bits per dim), leaving out dim `skip` (-1: none).
static unsigned split_axes(const ShardLayout *l, int skip) {
  unsigned m = 0;
  for (int i = 0; i < l->rank; i++)
    if (i != skip && l->split[i] != NONE)
      m |= axis_bits(l->split[i]);
  return m;
}

static unsigned axes_used(const ShardLayout *l) { return split_axes(l, -1) | l->partial; }

// Can each rank cut `to` out of what it holds under `from`, with no
// communication (only replicated dims become split)?
static bool slices_to(const ShardLayout *from, const ShardLayout *to) {
  if (from->rank != to->rank || from->partial != to->partial)
    return false;
  for (int i = 0; i < from->rank; i++)
    if (from->split[i] != NONE && from->split[i] != to->split[i])
      return false;
  return true;
}

// Equal as formulas, or under the bindings.
static bool same_size(const IrGraph *g, const Sym *a, const Sym *b) {
  int64_t x, y;
  if (sym_eq(a, b))
    return true;
  return sym_eval(a, &g->syms, &x) == 0 && sym_eval(b, &g->syms, &y) == 0 && x == y;
}

int ir_shard_layout_str(char *buf, size_t n, const IrGraph *g, const IrValue *v,
                        const ShardLayout *l) {
  size_t len = 0;
  char none[1];   // where a count without a buffer writes nothing (size 0)
#define PUT(...)                                                                        \
  do {                                                                                  \
    size_t at_ = len < n ? len : n;                                                     \
    int k_ = snprintf(buf ? buf + at_ : none, buf ? n - at_ : 0, __VA_ARGS__);          \
    len += k_ > 0 ? (size_t)k_ : 0;                                                     \
  } while (0)
  PUT("[");
  for (int i = 0; i < l->rank && i < v->rank; i++) {
    char dim[256];
    sym_print(dim, sizeof dim, v->shape[i], &g->syms);
    bool compound = strchr(dim, ' ') != NULL;
    if (l->split[i] == NONE)
      PUT("%s%s", i ? ", " : "", dim);
    else
      PUT("%s%s%s%s/%s", i ? ", " : "", compound ? "(" : "", dim, compound ? ")" : "",
          ir_mesh_axis_name((IrMeshAxis)l->split[i]));
  }
  PUT("]");
  for (int a = 1; a < IR_MESH_NAXES; a++)
    if (l->partial & BIT(a))
      PUT(" partial(%s)", ir_mesh_axis_name((IrMeshAxis)a));
#undef PUT
  return (int)len;
}

const char *ir_shard_kind_name(ShardKind k) {
  return k == SHARD_ALL_REDUCE ? "all_reduce" : k == SHARD_REDUCE_SCATTER ? "reduce_scatter"
                                                                          : "all_gather";
}

const Sym *ir_shard_allreduce_elems(IrGraph *g, const ShardColl *c) {
  return c->kind == SHARD_ALL_REDUCE ? c->count : sym_scale(&g->arena, c->count, 1, 2);
}

const Sym *ir_shard_allreduce_bytes(IrGraph *g, const ShardColl *c) {
  IrDType t = c->at == SHARD_WITHIN ? DT_F32 : c->value->dtype;  // row statistics: float32
  return sym_scale(&g->arena, ir_shard_allreduce_elems(g, c), (int64_t)ir_dtype_size(t), 1);
}

// ---- the result's lists -----------------------------------------------------------------

static void *grow(void *p, int n, int *cap, size_t size) {
  if (n < *cap)
    return p;
  *cap = *cap ? 2 * *cap : 16;
  p = realloc(p, (size_t)*cap * size);
  IR_ASSERT(p);
  return p;
}

// count: elements per rank of the buffer laid out as `l`, which it is split
// over (ShardColl.over).
static ShardColl *add_coll(Shard *s, const IrNode *n, ShardAt at, int operand, const IrValue *v,
                           ShardKind kind, IrMeshAxis axis, const Sym *count,
                           const ShardLayout *l) {
  ShardResult *r = s->r;
  r->coll = grow(r->coll, r->ncolls, &s->capc, sizeof *r->coll);
  ShardColl *c = &r->coll[r->ncolls++];
  *c = (ShardColl){.node = n, .at = at, .operand = operand, .value = v, .kind = kind,
                   .axis = axis, .dim = -1, .count = count, .phase = n->phase,
                   .block = n->block, .over = (unsigned char)split_axes(l, -1)};
  return c;
}

static void need(Shard *s, const IrNode *n, const Sym *dim, IrMeshAxis axis) {
  ShardResult *r = s->r;
  for (int i = s->need_last[n->block]; i >= 0; i = s->need_prev[i])
    if (r->need[i].axis == axis && sym_eq(r->need[i].dim, dim))
      return;
  r->need = grow(r->need, r->nneeds, &s->capn, sizeof *r->need);
  s->need_prev = grow(s->need_prev, r->nneeds, &s->capp, sizeof *s->need_prev);
  s->need_prev[r->nneeds] = s->need_last[n->block];
  s->need_last[n->block] = r->nneeds;
  r->need[r->nneeds++] = (ShardNeed){n, dim, axis, n->block};
}

static void note(ShardOp *op, const IrValue *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note(ShardOp *op, const IrValue *param, const char *fmt, ...) {
  ShardResult *r = op->s->r;
  for (int i = 0; i < r->nnotes; i++)
    if (r->note[i].param == param)
      return;
  r->note = grow(r->note, r->nnotes, &op->s->capo, sizeof *r->note);
  ShardNote *nt = &r->note[r->nnotes++];
  nt->param = param;
  nt->node = op->n;
  int k = snprintf(nt->text, sizeof nt->text, "replicated: %s: ", param->name);
  va_list ap;
  va_start(ap, fmt);
  if (k > 0 && (size_t)k < sizeof nt->text)
    vsnprintf(nt->text + k, sizeof nt->text - (size_t)k, fmt, ap);
  va_end(ap);
}

// ---- degrees and divisibility ---------------------------------------------------------------

// The side of the 2D grid: 1 (none), >= 2, or SHARD_TP_ANY (the cost model's
// propagation, every split assumed to divide).
static int grid(const Shard *s) {
  return s->spec->q > 1 || s->spec->q == SHARD_TP_ANY ? s->spec->q : 1;
}

// The 2D grids of a program of tp with grids inside (ShardSpec.q, mesh_tp): tp / (q x q), each
// on its sub ranks (1: one, or none).
static int grids(const Shard *s) {
  int q = grid(s);
  return q > 1 && s->spec->mesh_tp > q * q ? s->spec->mesh_tp / (q * q) : 1;
}

// The degree of an axis, for a node of tensor-parallel degree tp. With the program's tp
// known (ShardSpec.mesh_tp) an axis has one degree wherever a value split over it is read.
static int degree(const Shard *s, int tp, int axis) {
  switch (axis) {
  case DP: return s->spec->dp;
  case TP: return s->spec->mesh_tp > 0 ? s->spec->mesh_tp : tp;
  case SUB: return s->sub;
  case SUBDP: return s->spec->mesh_tp / s->sub;
  case ROW: case COL: return grid(s);
  case SUBROW: return grid(s) * grids(s);
  default: return 1;
  }
}

// The axes over which a gradient of the node's block is a partial sum that its bucket's
// reduction finishes: dp, and the parts of its batch over tp (a block data parallel over it)
// or subdp (a block over part of tp). (A grid block's batch splits over its rows: Optimus
// reduce-scatters its weights' gradients along them; a grid on sub ranks leaves them partial
// over subdp.)
static unsigned bucket_partial(const ShardOp *op) {
  return BIT(DP) | (op->ba == TP || op->ba == SUBDP ? BIT(op->ba) : 0) |
         (op->ba == SUBROW ? BIT(SUBDP) : 0);
}

// Does the node's block split its ops over ranks (tensor parallel or a 2D grid)?
static bool model_parallel(const ShardOp *op) {
  return !op->batch && (op->tp != 1 || op->q != 1);
}

// Can `dim` split over axis? Bound dims are checked; unbound ones, and every
// dim when the degree is SHARD_TP_ANY, are assumed to divide (the pass records
// the splits it assumed, once the rule has chosen).
// The dim is a vocabulary the lowering pads to split it over tp: its formula
// is the table's (4*C of the same value is not).
bool ir_shard_pads(const ShardResult *r, const Sym *dim) {
  for (int k = 0; k < r->nvocab; k++)
    if (sym_eq(r->vocab[k], dim))
      return true;
  return false;
}

static bool padded(const Shard *s, int axis, const Sym *dim) {
  return ir_mesh_vocab((IrMeshAxis)axis) && ir_shard_pads(s->r, dim);
}

static bool divides(ShardOp *op, const Sym *dim, int axis) {
  int deg = degree(op->s, op->tp, axis);
  if (deg == 1)
    return false;   // nothing to split over
  int64_t v;
  if (sym_eval(dim, &op->g->syms, &v) != 0)
    return true;
  if (deg == SHARD_TP_ANY)
    return v >= 2 || axis == DP;   // an open dp splits a batch that is one rank's already
  return (v % deg == 0 && v >= deg) || padded(op->s, axis, dim);
}

static int block_tp(const Shard *s, const IrNode *n) {
  if (n->block < 0 || n->block >= s->spec->nblocks)
    return 1;
  return s->spec->tp[n->block];
}

static bool block_batch(const Shard *s, const IrNode *n) {
  return s->spec->batch_tp && n->block >= 0 && n->block < s->spec->nblocks &&
         s->spec->batch_tp[n->block] && s->spec->tp[n->block] != 1;
}

// Is the node's block on a 2D grid: every block of a grid program, or one of tp 1 in a
// program of tp with a grid inside it (ShardSpec.q, mesh_tp)?
static bool block_grid(const Shard *s, const IrNode *n) {
  if (grid(s) == 1)
    return false;
  return s->spec->mesh_tp <= 1 || (block_tp(s, n) == 1 && !block_batch(s, n));
}

// Is the node's block tensor parallel over part of the mesh's tp (ShardSpec.mesh_tp)?
static bool block_sub(const Shard *s, const IrNode *n) {
  int tp = block_tp(s, n);
  return !block_batch(s, n) && tp > 1 && s->spec->mesh_tp > tp;
}

// With spec->pad_vocab: the embedding tables' vocabularies their blocks'
// degrees (tp, or a 2D grid's side, over whose columns the vocabulary splits)
// do not divide (a block data parallel over tp splits none).
static void find_vocab(Shard *s) {
  ShardResult *r = s->r;
  for (int i = 0; s->spec->pad_vocab && i < s->g->nnodes; i++) {
    const IrNode *n = s->g->nodes[i];
    int deg = block_batch(s, n) ? 1 : block_grid(s, n) ? grid(s) : block_tp(s, n);
    int64_t v;
    const Sym *dim = n->op == OP_EMBEDDING ? n->in[0]->shape[0] : NULL;
    if (!dim || deg < 2 || sym_eval(dim, &s->g->syms, &v) || v % deg == 0 || padded(s, TP, dim) ||
        r->nvocab == (int)(sizeof r->vocab / sizeof *r->vocab))
      continue;
    r->vocab[r->nvocab++] = dim;
  }
}

// Elements per rank of v laid out as l (degrees not known are not divided by).
static const Sym *local_numel(Shard *s, int tp, const IrValue *v, const ShardLayout *l) {
  const Sym *c = ir_numel(s->g, v);
  for (int i = 0; i < l->rank; i++) {
    int deg = degree(s, tp, l->split[i]);
    if (l->split[i] != NONE && deg > 1)
      c = sym_scale(&s->g->arena, c, 1, deg);
  }
  return c;
}

// ---- helpers for the rules ----------------------------------------------------------------

// Split dim `dim` of input k over axis (NONE: replicate it). False when the
// input already uses the axis elsewhere or the dim does not divide.
static bool try_split(ShardOp *op, int k, int dim, int axis) {
  ShardLayout *l = &op->in[k];
  if (l->split[dim] == axis)
    return true;
  if (axis != NONE) {
    if ((split_axes(l, dim) | l->partial) & axis_bits(axis))
      return false;
    if (!divides(op, op->n->in[k]->shape[dim], axis))
      return false;
  }
  l->split[dim] = (unsigned char)axis;
  return true;
}

// Give the dims (ks[i], dims[i]) one layout: the axis of the first that is
// split, when all the others can take it (a replicated dim is sliced for
// free), else replicated (the split ones are gathered). Returns the axis.
static int unify(ShardOp *op, int n, const int *ks, const int *dims) {
  int axis = NONE;
  for (int i = 0; i < n && axis == NONE; i++)
    axis = op->in[ks[i]].split[dims[i]];
  for (int i = 0; i < n && axis != NONE; i++)
    if (!try_split(op, ks[i], dims[i], axis))
      axis = NONE;
  if (axis == NONE)
    for (int i = 0; i < n; i++)
      op->in[ks[i]].split[dims[i]] = NONE;
  return axis;
}

static int unify2(ShardOp *op, int k0, int d0, int k1, int d1) {
  int ks[2] = {k0, k1}, dims[2] = {d0, d1};
  return unify(op, 2, ks, dims);
}

// The first `lead` dims of inputs ks, matched dim by dim.
static void unify_leading(ShardOp *op, int n, const int *ks, int lead) {
  int dims[8];
  IR_ASSERT(n <= 8);
  for (int d = 0; d < lead; d++) {
    for (int i = 0; i < n; i++)
      dims[i] = d;
    unify(op, n, ks, dims);
  }
}

static void need_whole_dim(ShardOp *op, int k, int dim) { op->in[k].split[dim] = NONE; }
static void need_complete(ShardOp *op, int k) { op->in[k].partial = 0; }

// ---- sequence parallelism (Megatron) ----
//
// Under spec->seq_parallel, a tensor-parallel block's partial sums over tp
// that a norm, a residual add or any op not linear in them must have complete
// are reduce-scattered onto the sequence dim instead of all-reduced (Megatron's
// g becomes a reduce-scatter): the ops between the tensor-parallel regions
// then run on 1/tp of the tokens, the residual stream and the norms'
// activations held split. A matmul reads its operands with the sequence whole
// (the all-gather before a column-parallel linear, and in backward before a
// row-parallel one's), so its own layout is Megatron's 1D.

// Is the node in a block where the sequence splits over its tensor-parallel axis (tp, or a
// block below tp's sub ranks; a grid block keeps Optimus's layout)?
static bool seq_parallel(const ShardOp *op) {
  return op->s->spec->seq_parallel && op->tp != 1 && !op->batch &&
         (op->tpa == TP || op->tpa == SUB) && op->s->seq;
}

// The dim of input k that is the sequence and could split over tp: not the
// last (a row's features), whole, the input using tp nowhere, dividing. -1: none.
static int seq_dim(ShardOp *op, int k) {
  const IrValue *v = op->n->in[k];
  const ShardLayout *l = &op->in[k];
  if (!seq_parallel(op) || (split_axes(l, -1) & BIT(op->tpa)))
    return -1;
  for (int d = 0; d < v->rank - 1; d++)
    if (sym_eq(v->shape[d], op->s->seq))
      return l->split[d] == NONE && divides(op, v->shape[d], op->tpa) ? d : -1;
  return -1;
}

// Input k, which was partial over tp (before) and is to be complete now:
// under sequence parallelism, reduce-scattered onto its sequence dim.
static void scatter_seq(ShardOp *op, int k, unsigned before) {
  if (!(before & BIT(op->tpa)) || (op->in[k].partial & BIT(op->tpa)))
    return;
  int d = seq_dim(op, k);
  if (d >= 0)
    op->in[k].split[d] = (unsigned char)op->tpa;
}

// Ops Megatron runs on the sequence's parts between the tensor-parallel
// regions: norms, residual and bias adds, dropout, scaling.
static bool between_regions(const IrNode *n) {
  switch (n->op) {
  case OP_ADD: case OP_SUB: case OP_MUL: case OP_SCALE: case OP_DROPOUT:
  case OP_LAYERNORM: case OP_RMSNORM: case OP_LAYERNORM_BWD: case OP_RMSNORM_BWD:
    return true;
  default:
    return false;
  }
}

// Input k complete (need_complete), a partial sum over tp reduce-scattered
// onto the sequence under sequence parallelism.
static void complete(ShardOp *op, int k) {
  unsigned before = op->in[k].partial;
  op->in[k].partial = 0;
  scatter_seq(op, k, before);
}

// Under sequence parallelism: input k's sequence dim whole (all-gathered).
static void gather_seq(ShardOp *op, int k) {
  const IrValue *v = op->n->in[k];
  for (int d = 0; seq_parallel(op) && d < v->rank; d++)
    if (op->in[k].split[d] == op->tpa && sym_eq(v->shape[d], op->s->seq))
      need_whole_dim(op, k, d);
}

// Inputs that can carry partial sums through the op, by how the op is linear.
typedef enum Linear {
  LIN_NONE,   // not linear: every input must be complete
  LIN_SUM,    // a + b: linear when every input is partial over the same axes
  LIN_FIRST,  // linear in the first input only (dy of a backward op, a of a / b)
  LIN_ONE,    // a * b: linear in each, so one input per axis may be partial
} Linear;

static unsigned linear_partials(ShardOp *op, int nin, Linear lin) {
  unsigned p = 0;
  switch (lin) {
  case LIN_NONE:
    for (int k = 0; k < nin; k++)
      op->in[k].partial = 0;
    return 0;
  case LIN_SUM:
    p = op->in[0].partial;
    for (int k = 1; k < nin; k++)
      p &= op->in[k].partial;
    for (int k = 0; k < nin; k++)
      op->in[k].partial = (unsigned char)p;
    return p;
  case LIN_FIRST:
    for (int k = 1; k < nin; k++)
      op->in[k].partial = 0;
    return op->in[0].partial;
  case LIN_ONE:
    for (int k = 0; k < nin; k++) {
      op->in[k].partial &= (unsigned char)~p;
      p |= op->in[k].partial;
    }
    return p;
  }
  return 0;
}

// An output split over an axis it is also partial over cannot be: reduce the
// inputs' partial sums over those axes.
static void settle_partials(ShardOp *op, ShardLayout *out, int nin) {
  unsigned clash = split_axes(out, -1) & out->partial;
  if (!clash)
    return;
  for (int k = 0; k < nin; k++)
    op->in[k].partial &= (unsigned char)~clash;
  out->partial &= (unsigned char)~clash;
}

// On a 2D grid, an input that is a partial sum over a grid axis another
// input is split over (on the same dim of the output) is reduce-scattered onto
// that dim rather than carried, so that the split one is not gathered (the
// gradient of an activation a row-split matmul returns, meeting the activation
// in the activation function's backward).
static void scatter_partials_2d(ShardOp *op, int nin) {
  const IrNode *n = op->n;
  const IrValue *o = n->out[0];
  for (int k = 0; op->q != 1 && k < nin; k++)
    for (int j = 0; j < nin && op->in[k].partial; j++)
      for (int d = 0; d < o->rank; d++) {
        int kd = d - (o->rank - n->in[k]->rank), jd = d - (o->rank - n->in[j]->rank);
        if (j == k || kd < 0 || jd < 0)
          continue;
        int a = op->in[j].split[jd];
        if ((a == ROW || a == COL) && (op->in[k].partial & BIT(a)) &&
            op->in[k].split[kd] == NONE && same_size(op->g, n->in[k]->shape[kd],
                                                     n->in[j]->shape[jd])) {
          op->in[k].partial &= (unsigned char)~BIT(a);
          try_split(op, k, kd, a);   // (when the dim does not divide: reduced whole)
        }
      }
  // A partial sum over the columns that meets only parameters not laid out yet
  // (the 2D embedding's lookup beside its position table) is reduce-scattered
  // onto its features, which Optimus keeps over the columns; the parameters
  // then follow it.
  for (int k = 0; op->q != 1 && k < nin; k++) {
    int last = n->in[k]->rank - 1;
    bool alone = last >= 0 && (op->in[k].partial & BIT(COL)) && op->in[k].split[last] == NONE &&
                 !(split_axes(&op->in[k], -1) & BIT(COL));
    for (int j = 0; j < nin && alone; j++)
      alone = j == k || op->seed[j];
    if (!alone)
      continue;
    op->in[k].partial &= (unsigned char)~BIT(COL);
    if (!try_split(op, k, last, COL))
      op->in[k].partial |= (unsigned char)BIT(COL);   // not divided: reduced whole
  }
}

// Elementwise over numpy-broadcast inputs 0 .. nin-1 into output 0.
static int elementwise(ShardOp *op, int nin, Linear lin) {
  const IrNode *n = op->n;
  const IrValue *o = n->out[0];
  scatter_partials_2d(op, nin);
  unsigned before[8] = {0};
  for (int k = 0; k < nin && k < 8; k++)
    before[k] = op->in[k].partial;
  unsigned p = linear_partials(op, nin, lin);
  for (int k = 0; k < nin && k < 8; k++)
    scatter_seq(op, k, before[k]);
  ShardLayout *out = &op->out[0];
  *out = whole(o->rank);
  for (int d = 0; d < o->rank; d++) {
    int ks[8], dims[8], m = 0;
    for (int k = 0; k < nin && m < 8; k++) {
      const IrValue *x = n->in[k];
      int xd = d - (o->rank - x->rank);
      if (xd < 0)
        continue;
      if (sym_is_one(x->shape[xd]) && !sym_is_one(o->shape[d])) {
        op->in[k].split[xd] = NONE;   // broadcast: a size-1 dim is whole
        continue;
      }
      ks[m] = k, dims[m++] = xd;
    }
    out->split[d] = (unsigned char)(m ? unify(op, m, ks, dims) : NONE);
  }
  out->partial = (unsigned char)p;
  settle_partials(op, out, nin);
  return 0;
}

// One input, one output of the same shape.
static int unary(ShardOp *op, Linear lin) {
  if (lin == LIN_NONE)
    complete(op, 0);
  op->out[0] = op->in[0];
  return 0;
}

// ---- sharding rules -------------------------------------------------------------------------
// shard_<op>(op): rewrite op->in[] into the layouts the op needs, set op->out[].

// Where forward's readers of value v lead, each path followed until it meets a matmul or a
// norm (which reads its features whole): *matmul when one meets a matmul, *norm when one
// meets a norm.
static void readers_meet(const Shard *s, const IrValue *v, bool *seen, bool *matmul,
                         bool *norm) {
  if (seen[v->id])
    return;
  seen[v->id] = true;
  for (int j = s->fwd_at[v->id]; j < s->fwd_at[v->id + 1]; j++) {
    const IrNode *r = s->g->nodes[s->fwd_node[j]];
    if (r->op == OP_LAYERNORM || r->op == OP_RMSNORM)
      *norm = true;
    else if (r->op == OP_MATMUL)
      *matmul = true;
    else
      for (int k = 0; k < r->nout; k++)
        readers_meet(s, r->out[k], seen, matmul, norm);
  }
}

// Should the weight of matmul node n stay whole rather than go column-parallel? A
// column-parallel output, split on its features, feeds the next matmul of Megatron's pair
// (row-parallel, through attention or an activation function), or a norm after a gather. One
// that does both, a projection into a residual stream that the next layer's matmuls read (an
// embedding's projection to the hidden size: ALBERT's mapping, a model's input layer), would
// make those matmuls row-parallel, their outputs partial sums, and their attention whole:
// Megatron keeps such a projection whole, and so does this.
static bool feeds_residual(const Shard *s, const IrNode *n) {
  bool *seen = calloc((size_t)s->g->nvalues + 1, sizeof *seen), matmul = false, norm = false;
  IR_ASSERT(seen);
  readers_meet(s, n->out[0], seen, &matmul, &norm);
  free(seen);
  return matmul && norm;
}

// Megatron's seeding of a matmul weight (see the top of the file): input w is
// the weight, the other input x its activation; wn is the weight's
// non-contracted dim, xk the activation's contracted dim.
static void seed_weight(ShardOp *op, int w, int wn, int xk) {
  const IrValue *wv = op->n->in[w];
  const ShardLayout *x = &op->in[1 - w];
  if (x->split[xk] != NONE)
    return;                         // row-parallel: unify slices the weight like x
  if (axes_used(x) & BIT(op->tpa))
    return;                         // x is already split over tp elsewhere (heads)
  if (feeds_residual(op->s, op->n))
    return;                         // whole: a projection into a residual stream
  if (divides(op, wv->shape[wn], op->tpa)) {
    op->in[w].split[wn] = (unsigned char)op->tpa;   // column-parallel
    return;
  }
  note(op, wv, "its output dim %s = %lld does not divide by tp = %d",
       sym_str(&op->g->arena, wv->shape[wn], &op->g->syms),
       (long long)ir_eval(op->g, wv->shape[wn]), op->tp);
}

// Optimus's seeding of a matmul weight in a 2D block: [k/q, n/q], its input
// dim over the grid's rows and its output dim over its columns (each when it
// divides; a note says when neither does). The matmul then gathers its
// activation's features along the grid row and the weight's input dim along
// the grid column (SUMMA's broadcasts, as one all-gather each).
static void seed_weight_2d(ShardOp *op, int w, int wk, int wn) {
  const IrValue *wv = op->n->in[w];
  if (divides(op, wv->shape[wk], ROW))
    op->in[w].split[wk] = ROW;
  if (divides(op, wv->shape[wn], COL))
    op->in[w].split[wn] = COL;
  else if (op->in[w].split[wk] == NONE)
    note(op, wv, "neither dim %s nor %s divides by q = %d",
         sym_str(&op->g->arena, wv->shape[wk], &op->g->syms),
         sym_str(&op->g->arena, wv->shape[wn], &op->g->syms), op->q);
  op->seed_k = w;
  op->seed_as = op->in[w];
}

// The layout a node should give its output dim `d`: that of the parameter whose gradient the
// output is (a term of), so that a reduce-scatter (a 2D block's matmul) or nothing (a
// vocabulary-parallel table's embedding_bwd), not a gather or a slice, makes it the
// parameter's. NONE: none.
static int wanted_split(const ShardOp *op, int d) {
  const IrValue *p = op->s->grad_of[op->n->out[0]->id];
  if (!p)
    return NONE;
  const IrValue *c = op->s->copy[p->id];
  const IrValue *at = op->s->laid[p->id] ? p : c && op->s->laid[c->id] ? c : NULL;
  return at && d < op->s->cur[at->id].rank ? op->s->cur[at->id].split[d] : NONE;
}

// A 2D block's matmul that makes a weight's gradient (X^T dY) gives it the
// weight's column split where it can (dY's columns, sliced if whole) and
// leaves its rows whole (X's features gathered): the rows' partial sum over
// the batch is then reduce-scattered onto the weight's [k/q, n/q].
static void weight_grad_2d(ShardOp *op, int am, int bn) {
  if (op->q == 1 || !op->s->grad_of[op->n->out[0]->id])
    return;
  int rout = op->n->out[0]->rank, want_m = wanted_split(op, rout - 2);
  int want_n = wanted_split(op, rout - 1);
  if (op->in[0].split[am] != want_m)
    op->in[0].split[am] = NONE;
  if (op->in[1].split[bn] != want_n) {
    op->in[1].split[bn] = NONE;
    if (want_n != NONE)
      try_split(op, 1, bn, want_n);
  }
}

// matmul(a, b) ta tb sum_batch: op(a) [..., M, K] @ op(b) [..., K, N].
static int shard_matmul(ShardOp *op) {
  const IrNode *n = op->n;
  int ra = n->in[0]->rank, rb = n->in[1]->rank;
  bool ta = ir_attr_i(n, "ta"), tb = ir_attr_i(n, "tb");
  bool sum = ir_attr_i(n, "sum_batch");
  int am = ra - (ta ? 1 : 2), ak = ra - (ta ? 2 : 1);
  int bk = rb - (tb ? 1 : 2), bn = rb - (tb ? 2 : 1);
  ShardLayout *a = &op->in[0], *b = &op->in[1];
  // Bilinear, so one operand could carry a partial sum through; but the
  // output is often larger than the operand (scores [T, T] from [T, HS]), so
  // partial sums are reduced first, where they are smallest.
  need_complete(op, 0);
  need_complete(op, 1);
  gather_seq(op, 0);
  gather_seq(op, 1);
  if (op->q != 1 && op->seed[0] != op->seed[1]) {
    if (op->seed[1])
      seed_weight_2d(op, 1, bk, bn);
    else
      seed_weight_2d(op, 0, ak, am);
  } else if (op->tp != 1 && op->seed[0] != op->seed[1]) {
    if (op->seed[1])
      seed_weight(op, 1, bn, ak);
    else
      seed_weight(op, 0, am, bk);
  }
  if (ra > 2 && rb > 2)
    for (int i = 0; i < ra - 2; i++)
      unify2(op, 0, i, 1, i);
  weight_grad_2d(op, am, bn);
  int kaxis = unify2(op, 0, ak, 1, bk);
  // b's dims may not reuse an axis a's side of the output already uses.
  unsigned a_out = axis_bits(a->split[am]) | axis_bits(kaxis);
  for (int i = 0; ra > 2 && i < ra - 2; i++)
    a_out |= axis_bits(a->split[i]);
  a_out &= ~BIT(NONE);
  if (a_out & axis_bits(b->split[bn]) & ~BIT(NONE))
    b->split[bn] = NONE;
  if (ra == 2)
    for (int i = 0; i < rb - 2; i++)
      if ((a_out | axis_bits(a->split[ak])) & axis_bits(b->split[i]) & ~BIT(NONE))
        b->split[i] = NONE;
  // The output: batch dims (unless summed), M from a, N from b.
  const ShardLayout *batch = ra > 2 ? a : b;
  int nbatch = (ra > 2 ? ra : rb) - 2;
  ShardLayout *out = &op->out[0];
  *out = whole(n->out[0]->rank);
  unsigned p = summed(kaxis);
  int r = 0;
  for (int i = 0; i < nbatch; i++) {
    if (!sum)
      out->split[r++] = batch->split[i];
    else
      p |= summed(batch->split[i]);   // summed over a split batch: each rank holds a partial sum
  }
  out->split[r++] = a->split[am];
  out->split[r++] = b->split[bn];
  out->partial = (unsigned char)p;
  settle_partials(op, out, 2);
  return 0;
}

// Convolutions: only the batch (dim 0 of the image, its gradient and the
// patches) splits, each rank convolving its own images; channels, the image's
// height and width and the filter stay whole (a split there is gathered), and
// partial sums are reduced first. conv2d(x, w) -> y, col.
static void conv_images(ShardOp *op, int k) {
  need_complete(op, k);
  for (int d = 1; d < 4; d++)
    need_whole_dim(op, k, d);
}

// (images, filter) -> images, patches: both outputs split as the input's batch.
static int conv_batch(ShardOp *op) {
  conv_images(op, 0);
  op->in[1] = whole(4);
  op->out[0] = whole(4);
  op->out[1] = whole(3);
  op->out[0].split[0] = op->out[1].split[0] = op->in[0].split[0];
  return 0;
}
static int shard_conv2d(ShardOp *op) { return conv_batch(op); }
// (dy, w) -> dx, dcol
static int shard_conv2d_bwd_data(ShardOp *op) { return conv_batch(op); }

// (dy, x) -> dw, col: dy and x split alike on the batch; dw sums over it, so
// a split batch leaves each rank a partial sum (the data-parallel reduction).
static int shard_conv2d_bwd_filter(ShardOp *op) {
  conv_images(op, 0);
  conv_images(op, 1);
  int axis = unify2(op, 0, 0, 1, 0);
  op->out[0] = whole(4);
  op->out[0].partial = (unsigned char)summed(axis);
  op->out[1] = whole(3);
  op->out[1].split[0] = (unsigned char)axis;
  return 0;
}

// Max pooling: as a convolution's images, the batch alone splits. (x) -> y;
// (dy, x) -> dx, dy and x split alike.
static int shard_maxpool2d(ShardOp *op) {
  conv_images(op, 0);
  op->out[0] = whole(4);
  op->out[0].split[0] = op->in[0].split[0];
  return 0;
}
static int shard_maxpool2d_bwd(ShardOp *op) {
  conv_images(op, 0);
  conv_images(op, 1);
  int axis = unify2(op, 0, 0, 1, 0);
  op->out[0] = whole(4);
  op->out[0].split[0] = (unsigned char)axis;
  return 0;
}

static int shard_add(ShardOp *op) { return elementwise(op, 2, LIN_SUM); }
static int shard_sub(ShardOp *op) { return elementwise(op, 2, LIN_SUM); }
static int shard_mul(ShardOp *op) { return elementwise(op, 2, LIN_ONE); }
static int shard_div(ShardOp *op) { return elementwise(op, 2, LIN_FIRST); }
static int shard_min(ShardOp *op) { return elementwise(op, 2, LIN_NONE); }
static int shard_max(ShardOp *op) { return elementwise(op, 2, LIN_NONE); }

// s * x + b is linear when b = 0.
static int shard_scale(ShardOp *op) {
  return unary(op, ir_attr_f(op->n, "b") == 0.0 ? LIN_FIRST : LIN_NONE);
}
static int shard_gelu(ShardOp *op) { return unary(op, LIN_NONE); }
static int shard_relu(ShardOp *op) { return unary(op, LIN_NONE); }
// (dy, x) -> dx = dy * f'(x): linear in dy.
static int shard_gelu_bwd(ShardOp *op) { return elementwise(op, 2, LIN_FIRST); }
static int shard_relu_bwd(ShardOp *op) { return elementwise(op, 2, LIN_FIRST); }

// Optimus on a 2D grid: a norm over a last dim split over the grid's columns
// stays split, each rank normalizing its part of every row with the rows'
// statistics all-reduced along the grid row (`stats` all-reduces of one float
// per row, listed as the op's own collectives); the weights are split alike.
// Returns whether it does: in a 2D block, input x's last dim split over COL.
static bool norm_on_grid(ShardOp *op, int x, int nweights, int stats) {
  const IrValue *v = op->n->in[x];
  int last = v->rank - 1;
  if (op->q == 1 || op->in[x].split[last] != COL)
    return false;
  ShardLayout w = whole(1);
  w.split[0] = COL;
  for (int k = 0; k < nweights; k++)
    op->in[op->n->nin - nweights + k] = w;
  ShardLayout rows = op->in[x];
  rows.split[last] = NONE;
  rows.partial = 0;
  const Sym *count = sym_div(&op->g->arena, local_numel(op->s, op->tp, v, &rows), v->shape[last]);
  for (int k = 0; k < stats; k++) {
    ShardColl *c = add_coll(op->s, op->n, SHARD_WITHIN, -1, v, SHARD_ALL_REDUCE, IR_MESH_COL,
                            count, &rows);
    snprintf(c->what, sizeof c->what, "row statistics of the norm over the grid's columns");
  }
  return true;
}

// Normalizing over the last dim needs it whole and the input complete; the
// weights follow that (whole) dim. On a 2D grid, see norm_on_grid: the mean
// and the variance (two passes).
static int shard_layernorm(ShardOp *op) {
  int last = op->n->in[0]->rank - 1;
  complete(op, 0);
  if (!norm_on_grid(op, 0, 2, 2)) {
    need_whole_dim(op, 0, last);
    op->in[1] = whole(1);
    op->in[2] = whole(1);
  }
  op->out[0] = op->in[0];
  return 0;
}

// add_layernorm (made after the parallel lowering, over whole rows): the sum laid out as a and b,
// the norm as layernorm's of it.
static int shard_add_layernorm(ShardOp *op) {
  int last = op->n->in[0]->rank - 1;
  complete(op, 0);
  complete(op, 1);
  need_whole_dim(op, 0, last);
  need_whole_dim(op, 1, last);
  int ks[2] = {0, 1};
  unify_leading(op, 2, ks, last);
  op->in[2] = whole(1);
  op->in[3] = whole(1);
  op->out[0] = op->out[1] = op->in[0];
  return 0;
}

// (dy, x, w) -> dx, dw, db. dy must be complete here, so a partial gradient is
// all-reduced before the norm's backward (Megatron's f) rather than after it
// (which would also leave dw and db to reduce). dw and db sum over the
// leading dims: partial over the axes those are split over.
// (dy, x) of a backward over the last dim: both complete, the last dim
// whole, the leading dims split alike. Returns the last dim.
static int rowwise_bwd(ShardOp *op) {
  int last = op->n->in[1]->rank - 1;
  complete(op, 0);
  need_complete(op, 1);
  need_whole_dim(op, 0, last);
  need_whole_dim(op, 1, last);
  int ks[2] = {0, 1};
  unify_leading(op, 2, ks, last);
  return last;
}

// On a 2D grid the norms' backward keeps dy and x split as forward did: the
// statistics again, then each row's sums of dnorm and dnorm * norm (one
// all-reduce of two floats a row: `stats` counts it twice).
static bool norm_bwd_on_grid(ShardOp *op, int stats) {
  int last = op->n->in[1]->rank - 1;
  complete(op, 0);
  need_complete(op, 1);
  if (!(op->q != 1 && op->in[1].split[last] == COL &&
        (op->in[0].split[last] == COL || op->in[0].split[last] == NONE)))
    return false;
  op->in[0].split[last] = COL;   // dy as x (sliced, when whole)
  int ks[2] = {0, 1};
  unify_leading(op, 2, ks, last);
  if (op->in[1].split[last] != COL)
    return false;
  norm_on_grid(op, 1, 1, stats);
  return true;
}

static int shard_layernorm_bwd(ShardOp *op) {
  if (!norm_bwd_on_grid(op, 4))
    rowwise_bwd(op);
  int last = op->n->in[1]->rank - 1;
  op->in[2] = op->in[1].split[last] == COL ? op->in[2] : whole(1);
  op->out[0] = op->in[1];
  for (int k = 1; k < 3; k++) {   // summed over the rows: partial over the axes they split over
    op->out[k] = op->in[2];
    op->out[k].partial = (unsigned char)sums(split_axes(&op->in[1], last));
  }
  return 0;
}

// RMSNorm: as layernorm, without the bias (on a 2D grid: the mean square, one pass).
static int shard_rmsnorm(ShardOp *op) {
  int last = op->n->in[0]->rank - 1;
  complete(op, 0);
  if (!norm_on_grid(op, 0, 1, 1)) {
    need_whole_dim(op, 0, last);
    op->in[1] = whole(1);
  }
  op->out[0] = op->in[0];
  return 0;
}

// (dy, x, w) -> dx, dw: as layernorm_bwd, without db.
static int shard_rmsnorm_bwd(ShardOp *op) {
  if (!norm_bwd_on_grid(op, 3))   // the mean square, then both row sums (as layernorm's)
    rowwise_bwd(op);
  int last = op->n->in[1]->rank - 1;
  op->in[2] = op->in[1].split[last] == COL ? op->in[2] : whole(1);
  op->out[0] = op->in[1];
  op->out[1] = op->in[2];
  op->out[1].partial = (unsigned char)sums(split_axes(&op->in[1], last));
  return 0;
}

// Over the last dim, whole; a causal softmax reads a row's place in its matrix [.., T, T], so its
// rows' dim whole too.
static int shard_softmax(ShardOp *op) {
  int last = op->n->in[0]->rank - 1;
  need_complete(op, 0);
  need_whole_dim(op, 0, last);
  if (op->n->op == OP_SOFTMAX && ir_attr_i(op->n, "causal"))
    need_whole_dim(op, 0, last - 1);
  op->out[0] = op->in[0];
  return 0;
}

// (dy, y) -> dx over the last dim, which must be whole.
static int softmax_bwd(ShardOp *op) {
  rowwise_bwd(op);
  op->out[0] = op->in[1];
  return 0;
}
static int shard_softmax_bwd(ShardOp *op) { return softmax_bwd(op); }

// Attention over [..., T, HS]: the leading dims (batch, heads) split freely;
// T and HS must be whole. Heads split over tp are Megatron's attention; in a
// block with tp >= 2 heads that do not divide by it are an error (the block
// would run its attention whole on every rank, its projections around it
// whole too). Inputs [0, nin) are [..., T, HS] (q, k, v; in the backward dout
// before them and out after; rope's x); the backward's log-sum-exp [..., T], a
// key-padding mask [P.., T] and a bias [1.., H.., T, T] may follow, their dims
// that are q's split as q's, T whole. Outputs are laid out as inputs first..
// first+nqkv; the forward's log-sum-exp as q without its last dim; the
// backward's gradient of the scores, as q.
static int attention(ShardOp *op, int first, int nqkv, int nin) {
  int ks[5], r = op->n->in[first]->rank;
  const Sym *heads = r >= 4 ? op->n->in[first]->shape[r - 3] : NULL;
  int64_t h;
  int deg = op->q != 1 ? op->q : op->batch ? 1 : op->tp;
  const char *what = op->q != 1 ? "q" : "tp";
  if (heads && deg >= 2 && !sym_eval(heads, &op->g->syms, &h) && h % deg)
    return ir_error(op->s->diag, op->n->loc, "%s in block %d: its %s = %lld heads do not divide "
                    "by %s = %d (attention heads must divide by the block's %s; give the block "
                    "a %s that divides %lld)", ir_op_name(op->n->op), op->n->block,
                    sym_str(&op->g->arena, heads, &op->g->syms), (long long)h, what, deg,
                    op->q != 1 ? "2D grid's side" : "tensor-parallel degree", what, (long long)h);
  for (int i = 0; i < nin; i++) {
    need_complete(op, i);
    need_whole_dim(op, i, r - 1);
    need_whole_dim(op, i, r - 2);
    ks[i] = (first + i) % nin;   // the backward: q, k, v and out first, then dout
  }
  // The backward reads dout in the forward's layout where q has a dim split, else as it
  // comes: q, k, v, out and the log-sum-exp are the forward's, held as it made them, where
  // dout comes in as the projection's backward made it (on a 2D grid, maybe the heads over
  // the rows, where the forward has them over the columns).
  unsigned fwd = axes_used(&op->in[first]);
  for (int i = 0; i < first; i++)
    for (int d = 0; d < r - 2; d++)
      if (op->in[first].split[d] != NONE ||
          (op->in[i].split[d] != NONE && (axis_bits(op->in[i].split[d]) & fwd)))
        op->in[i].split[d] = op->in[first].split[d];
  unify_leading(op, nin, ks, r - 2);
  // a mask or a bias (the backward's log-sum-exp too): its dim d is q's dim d, split as q's
  // when every one of them can take q's split, else whole in all of them and in q, k and v
  bool own[8][IR_MAXRANK];
  IR_ASSERT(op->n->nin <= 8);
  for (int k = nin; k < op->n->nin; k++) {
    const IrValue *x = op->n->in[k];
    need_complete(op, k);
    for (int d = 0; d < x->rank; d++) {
      own[k][d] = d < r - 2 && !(x->dtype == DT_I32 && d == x->rank - 1) &&
                  sym_eq(x->shape[d], op->n->in[first]->shape[d]);
      if (!own[k][d])
        need_whole_dim(op, k, d);
    }
  }
  for (int d = 0; d < r - 2; d++) {
    bool all = true;
    for (int k = nin; k < op->n->nin && all; k++)
      all = d >= op->n->in[k]->rank || !own[k][d] || try_split(op, k, d, op->in[first].split[d]);
    for (int k = 0; k < op->n->nin && !all; k++)
      if (k < nin || (d < op->n->in[k]->rank && own[k][d]))
        op->in[k].split[d] = NONE;
  }
  for (int i = 0; i < nqkv; i++)
    op->out[i] = op->in[first + i];
  if (op->n->nout > nqkv) { // the forward's lse [.., T]; the backward's dscores [.., T, TK]
    op->out[nqkv] = op->in[first];
    op->out[nqkv].split[r - 1] = NONE;
    if (op->n->op == OP_ATTENTION)
      op->out[nqkv].rank = r - 1;
  }
  return 0;
}
static int shard_attention(ShardOp *op) { return attention(op, 0, 1, 3); }
// Rotary embedding over [..., T, HS]: as attention, one operand (positions
// are T's indices, and the pairs are HS's halves, so both stay whole).
static int shard_rope(ShardOp *op) { return attention(op, 0, 1, 1); }
static int shard_attention_bwd(ShardOp *op) { return attention(op, 1, 3, 5); }

// embedding(w [V, C], idx [...]) -> [..., C]. Seeded vocabulary-parallel: each
// rank looks up the rows it holds and writes zeros for the others, so the
// output is a partial sum over tp.
// On a 2D grid the table is seeded as Optimus holds it, [V/q, C/q]: its
// vocabulary over the grid's columns and its features over its rows, the
// layout a tied LM head's weight wants (its logits [b/q, s, V/q], whose
// cross-entropy is vocabulary-parallel over the columns). The lookup reads it
// gathered along the grid column (the tokens' rows are the grid row's own) and
// gives a partial sum over the columns, reduce-scattered onto the features.
// A vocabulary q does not divide keeps the table as [V, C/q].
static int shard_embedding(ShardOp *op) {
  const IrNode *n = op->n;
  ShardLayout *w = &op->in[0], *idx = &op->in[1];
  need_complete(op, 1);
  if (op->q != 1 && op->seed[0] && divides(op, n->in[0]->shape[0], COL) &&
      divides(op, n->in[0]->shape[1], ROW)) {
    w->split[0] = COL;
    w->split[1] = ROW;
    op->seed_k = 0;
    op->seed_as = *w;
  } else if (op->q != 1 && op->seed[0] && divides(op, n->in[0]->shape[1], COL))
    w->split[1] = COL;   // 2D: the features over the grid's columns, every row's whole vocabulary
  else if (op->tp != 1 && op->seed[0] && !(axes_used(idx) & BIT(op->tpa))) {
    if (divides(op, n->in[0]->shape[0], op->tpa))
      w->split[0] = (unsigned char)op->tpa;
    else
      note(op, n->in[0], "its vocabulary dim %s = %lld does not divide by tp = %d",
           sym_str(&op->g->arena, n->in[0]->shape[0], &op->g->syms),
           (long long)ir_eval(op->g, n->in[0]->shape[0]), op->tp);
  }
  unsigned used = axes_used(idx) | w->partial;
  for (int d = 0; d < 2; d++)
    if (used & BIT(w->split[d]) & ~BIT(NONE))
      w->split[d] = NONE;
  if (w->split[0] != NONE && w->split[0] == w->split[1])
    w->split[1] = NONE;
  ShardLayout *out = &op->out[0];
  *out = whole(n->out[0]->rank);
  for (int i = 0; i < idx->rank; i++)
    out->split[i] = idx->split[i];
  out->split[idx->rank] = w->split[1];
  out->partial = (unsigned char)(w->partial | summed(w->split[0]));
  return 0;
}

// embedding_bwd(dout [..., C], idx [...]) -> dw [V, C]: scattered over the
// rows of the whole table; C keeps dout's split; the leading dims are summed
// (partial over their axes). The gradient of a table split on V over an axis
// (vocabulary-parallel under tp) is made split so: each rank scatters only the
// tokens of its own rows (embedding_vp_bwd), where it made the whole table's
// gradient and sliced it.
static int shard_embedding_bwd(ShardOp *op) {
  const IrNode *n = op->n;
  int lead = n->in[1]->rank;
  need_complete(op, 1);
  gather_seq(op, 0);   // an all-gather of the tokens' gradients, not a reduction of the table's
  for (int d = 0; d < lead; d++)
    unify2(op, 0, d, 1, d);
  // 2D: a table held as [V/q, C/q] (shard_embedding) has its features over the
  // grid's rows, not dout's columns: dout's features are gathered, and the
  // table's partial sum over the rows is then reduce-scattered onto them
  if (op->q != 1 && op->in[0].split[lead] != NONE && wanted_split(op, 1) != op->in[0].split[lead])
    need_whole_dim(op, 0, lead);
  ShardLayout *out = &op->out[0];
  *out = whole(2);
  out->split[1] = op->in[0].split[lead];
  out->partial = (unsigned char)(op->in[0].partial | sums(split_axes(&op->in[0], lead)));
  int vocab = op->q == 1 ? wanted_split(op, 0) : NONE;
  if (vocab != NONE && vocab != out->split[1] && !(out->partial & BIT(vocab)) &&
      divides(op, n->out[0]->shape[0], vocab))
    out->split[0] = (unsigned char)vocab;
  settle_partials(op, out, 1);
  return 0;
}

// A loss's logits (input lg) and targets (input tg) whole sums, their leading
// dims (the rows) laid out alike.
static void loss_rows(ShardOp *op, int lg, int tg) {
  need_complete(op, lg);
  need_complete(op, tg);
  for (int d = 0; d < op->n->in[tg]->rank; d++)
    unify2(op, lg, d, tg, d);
}

// Logits [..., V] and targets [...]: leading dims matched. Over logits split
// on V (vocabulary-parallel, Megatron): each rank takes its part of every
// row's max and sum of exponentials, all-reduced within the op (2 x rows
// elements); the target's logit lives on one rank, so the loss is a partial
// sum over that axis too.
static int shard_cross_entropy(ShardOp *op) {
  const IrNode *n = op->n;
  int lead = n->in[1]->rank;
  loss_rows(op, 0, 1);
  if (!ir_mesh_vocab((IrMeshAxis)op->in[0].split[lead]))   // over another axis: gathered
    need_whole_dim(op, 0, lead);
  int v = op->in[0].split[lead];
  op->out[0] = whole(0);
  op->out[0].partial = (unsigned char)sums(split_axes(&op->in[1], -1));
  if (v != NONE) {
    const Sym *rows = local_numel(op->s, op->tp, n->in[1], &op->in[1]);
    ShardColl *c = add_coll(op->s, n, SHARD_WITHIN, -1, n->in[0], SHARD_ALL_REDUCE,
                            (IrMeshAxis)v, rows, &op->in[1]);
    snprintf(c->what, sizeof c->what, "row max of the vocabulary-parallel cross-entropy");
    c = add_coll(op->s, n, SHARD_WITHIN, -1, n->in[0], SHARD_ALL_REDUCE, (IrMeshAxis)v, rows,
                 &op->in[1]);
    snprintf(c->what, sizeof c->what, "row sum of exp of the vocabulary-parallel cross-entropy");
    op->out[0].partial |= (unsigned char)BIT(v);
  }
  return 0;
}

// (dloss, logits, targets) -> dlogits, laid out like the logits. Over a split
// V the gradient (softmax - onehot) reuses the forward's row max and sum,
// which the lowering keeps (2 x rows floats): no collective.
static int loss_bwd(ShardOp *op) {
  need_complete(op, 0);
  loss_rows(op, 1, 2);
  int last = op->n->in[1]->rank - 1;
  if (!ir_mesh_vocab((IrMeshAxis)op->in[1].split[last]))
    need_whole_dim(op, 1, last);
  op->out[0] = op->in[1];
  return 0;
}
static int shard_cross_entropy_bwd(ShardOp *op) { return loss_bwd(op); }
// The loss as cross_entropy's, the gradient laid out like the logits (made after the parallel
// lowering, over logits whose vocabulary is whole: passes/epilogue.c).
static int shard_cross_entropy_fused(ShardOp *op) {
  if (shard_cross_entropy(op))
    return -1;
  op->out[1] = op->in[0];
  return 0;
}

// The output has the declared shape: dims are matched in groups whose sizes
// multiply to the same (B, T, C <-> B, T, NH, HS). A split carries from a
// group's leading dim to the other side's leading dim: merging [NH/tp, HS]
// gives C/tp, splitting C/tp gives [NH/tp, HS], which needs NH to divide by
// tp. Any other split in a group is gathered. Linear: partial sums pass.
static int shard_reshape(ShardOp *op) {
  IrGraph *g = op->g;
  const IrNode *n = op->n;
  const IrValue *x = n->in[0], *o = n->out[0];
  ShardLayout *in = &op->in[0], *out = &op->out[0];
  *out = whole(o->rank);
  out->partial = in->partial;
  const Sym *px[IR_MAXRANK + 1], *po[IR_MAXRANK + 1];
  px[0] = po[0] = sym_const(&g->arena, 1);
  for (int i = 0; i < x->rank; i++)
    px[i + 1] = sym_mul(&g->arena, px[i], x->shape[i]);
  for (int j = 0; j < o->rank; j++)
    po[j + 1] = sym_mul(&g->arena, po[j], o->shape[j]);
  int i = 0, j = 0;
  while (i < x->rank) {
    int i2 = -1, j2 = -1;   // the next group: x dims [i, i2) <-> o dims [j, j2)
    for (int a = i + 1; a <= x->rank && i2 < 0; a++)
      for (int b = j + 1; b <= o->rank; b++)
        if (same_size(g, px[a], po[b])) {
          i2 = a, j2 = b;
          break;
        }
    if (i2 < 0)
      break;
    int xm = -1, om = -1;   // each side's leading dim that is not 1
    for (int a = i; a < i2 && xm < 0; a++)
      if (!sym_is_one(x->shape[a]))
        xm = a;
    for (int b = j; b < j2 && om < 0; b++)
      if (!sym_is_one(o->shape[b]))
        om = b;
    for (int a = i; a < i2; a++) {
      int axis = in->split[a];
      if (axis == NONE)
        continue;
      if (a != xm || om < 0) {
        in->split[a] = NONE;
        continue;
      }
      bool one_to_one = true;   // the group has one dim (besides 1s) on each side
      for (int b = om + 1; b < j2; b++)
        one_to_one &= sym_is_one(o->shape[b]);
      for (int c = xm + 1; c < i2; c++)
        one_to_one &= sym_is_one(x->shape[c]);
      if (one_to_one || divides(op, o->shape[om], axis)) {
        out->split[om] = (unsigned char)axis;
        continue;
      }
      if (axis == TP || axis == SUB || axis == COL) {
        const char *what = axis == COL ? "q" : "tp";
        return ir_error(op->s->diag, n->loc,
                        "reshape to '%s' %s in block %d: its dim %s = %lld does not divide by "
                        "%s = %d, so the split of '%s' %s cannot carry over (attention heads "
                        "must divide by the block's %s; give the block a %s that divides %s)",
                        o->name, ir_shape_str(g, o), n->block,
                        sym_str(&g->arena, o->shape[om], &g->syms),
                        (long long)ir_eval(g, o->shape[om]), what, degree(op->s, op->tp, axis),
                        x->name, ir_shape_str(g, x),
                        axis == COL ? "2D grid's side" : "tensor-parallel degree", what,
                        sym_str(&g->arena, o->shape[om], &g->syms));
      }
      in->split[a] = NONE;
    }
    i = i2, j = j2;
  }
  for (; i < x->rank; i++)
    in->split[i] = NONE;    // no matching group: gathered
  return 0;
}

static int shard_transpose(ShardOp *op) {
  int np = 0;
  const int64_t *perm = ir_attr_ints(op->n, "perm", &np);
  op->out[0] = op->in[0];
  for (int i = 0; perm && i < np && i < op->in[0].rank; i++)
    op->out[0].split[i] = op->in[0].split[perm[i]];
  return 0;
}

static int norm_axis(const IrNode *n, int rank) {
  int64_t a = ir_attr_i(n, "axis");
  return (int)(a < 0 ? a + rank : a);
}

// Along a split axis each piece is split the same way (every rank keeps its
// part of every piece), when every piece divides; else the axis is gathered.
static int shard_split(ShardOp *op) {
  const IrNode *n = op->n;
  int ax = norm_axis(n, n->in[0]->rank);
  int axis = op->in[0].split[ax];
  for (int i = 0; i < n->nout && axis != NONE; i++)
    if (!divides(op, n->out[i]->shape[ax], axis))
      axis = op->in[0].split[ax] = NONE;
  for (int i = 0; i < n->nout; i++)
    op->out[i] = op->in[0];
  return 0;
}

// Every dim matched across the inputs; along the concat axis piece by piece,
// as split. Linear: partial sums over the same axes pass.
static int shard_concat(ShardOp *op) {
  const IrNode *n = op->n;
  int r = n->out[0]->rank;
  int *ks = malloc((size_t)n->nin * sizeof *ks), *dims = malloc((size_t)n->nin * sizeof *dims);
  IR_ASSERT(ks && dims);
  unsigned p = linear_partials(op, n->nin, LIN_SUM);
  for (int d = 0; d < r; d++) {
    for (int k = 0; k < n->nin; k++)
      ks[k] = k, dims[k] = d;
    unify(op, n->nin, ks, dims);
  }
  free(ks), free(dims);
  op->out[0] = op->in[0];
  op->out[0].partial = (unsigned char)p;
  settle_partials(op, &op->out[0], n->nin);
  return 0;
}

// x numpy-broadcast to the declared shape: x's dims keep their splits; new
// dims are whole. Linear, but a partial sum is reduced first when it grows.
static int shard_broadcast(ShardOp *op) {
  const IrValue *x = op->n->in[0], *o = op->n->out[0];
  ShardLayout *out = &op->out[0];
  *out = whole(o->rank);
  bool grows = o->rank > x->rank;
  for (int d = 0; d < x->rank; d++) {
    int od = d + o->rank - x->rank;
    if (same_size(op->g, x->shape[d], o->shape[od]))
      out->split[od] = op->in[0].split[d];
    else
      op->in[0].split[d] = NONE, grows = true;
  }
  if (grows)
    need_complete(op, 0);   // a partial sum is reduced before it grows, where it is smallest
  out->partial = op->in[0].partial;
  return 0;
}

// x summed down to the declared shape: kept dims keep their splits; a split
// dim summed away leaves a partial sum over its axis.
static int shard_sum_to(ShardOp *op) {
  const IrValue *x = op->n->in[0], *o = op->n->out[0];
  ShardLayout *out = &op->out[0];
  *out = whole(o->rank);
  unsigned p = op->in[0].partial;
  for (int d = 0; d < x->rank; d++) {
    int od = d - (x->rank - o->rank);
    if (od >= 0 && same_size(op->g, x->shape[d], o->shape[od]))
      out->split[od] = op->in[0].split[d];
    else
      p |= summed(op->in[0].split[d]);
  }
  out->partial = (unsigned char)p;
  return 0;
}

// sum / mean over axes: like sum_to (mean divides by the global count).
static int reduce(ShardOp *op) {
  const IrNode *n = op->n;
  const IrValue *x = n->in[0];
  int naxes = 0;
  const int64_t *axes = ir_attr_ints(n, "axes", &naxes); // NULL: every dim
  bool gone[IR_MAXRANK] = {0}, keep = ir_attr_i(n, "keepdims");
  for (int i = 0; i < x->rank; i++)
    gone[i] = !axes;
  for (int i = 0; axes && i < naxes; i++) {
    int64_t a = axes[i] < 0 ? axes[i] + x->rank : axes[i];
    if (a >= 0 && a < x->rank)
      gone[a] = true;
  }
  ShardLayout *out = &op->out[0];
  *out = whole(n->out[0]->rank);
  unsigned p = op->in[0].partial;
  int r = 0;
  for (int i = 0; i < x->rank; i++) {
    if (!gone[i])
      out->split[r++] = op->in[0].split[i];
    else {
      p |= summed(op->in[0].split[i]);
      if (keep)
        r++;
    }
  }
  out->partial = (unsigned char)p;
  return 0;
}
static int shard_sum(ShardOp *op) { return reduce(op); }
static int shard_mean(ShardOp *op) { return reduce(op); }

static int shard_fill(ShardOp *op) {
  op->out[0] = whole(op->n->out[0]->rank);
  return 0;
}

// ---- sharding rules of the ops for ONNX models

static int shard_exp(ShardOp *op) { return unary(op, LIN_NONE); }
static int shard_log(ShardOp *op) { return unary(op, LIN_NONE); }
static int shard_sqrt(ShardOp *op) { return unary(op, LIN_NONE); }
static int shard_tanh(ShardOp *op) { return unary(op, LIN_NONE); }
static int shard_erf(ShardOp *op) { return unary(op, LIN_NONE); }
static int shard_pow(ShardOp *op) {
  return unary(op, ir_attr_f(op->n, "p") == 1.0 ? LIN_FIRST : LIN_NONE);
}
static int shard_sin(ShardOp *op) { return unary(op, LIN_NONE); }
static int shard_cos(ShardOp *op) { return unary(op, LIN_NONE); }
static int shard_abs(ShardOp *op) { return unary(op, LIN_NONE); }
static int shard_sign(ShardOp *op) { return unary(op, LIN_NONE); }
// A cast carries a partial sum over the batch's parts (a block data parallel over tp, or dp: a
// bf16 gradient cast to its float32 master stays the buckets'); one over tp is reduced first.
static int shard_cast(ShardOp *op) {
  bool batch = op->batch || !(op->in[0].partial & ~bucket_partial(op));
  return unary(op, batch ? LIN_ONE : LIN_NONE);
}
static int shard_sigmoid(ShardOp *op) { return unary(op, LIN_NONE); }
static int shard_gelu_erf(ShardOp *op) { return unary(op, LIN_NONE); }
static int shard_gelu_erf_bwd(ShardOp *op) { return elementwise(op, 2, LIN_FIRST); }
static int shard_silu(ShardOp *op) { return unary(op, LIN_NONE); }
static int shard_silu_bwd(ShardOp *op) { return elementwise(op, 2, LIN_FIRST); }

// masked_fill(x, mask): linear in x when the fill value is 0.
static int shard_masked_fill(ShardOp *op) {
  return elementwise(op, 2, ir_attr_f(op->n, "value") == 0.0 ? LIN_FIRST : LIN_NONE);
}

// x == value: elementwise, on integers.
static int shard_equal(ShardOp *op) { return unary(op, LIN_NONE); }

// a cmp b: elementwise, into an i32 mask.
static int shard_compare(ShardOp *op) { return elementwise(op, 2, LIN_NONE); }

// Running sums: linear; the summed axis whole, the other dims pass.
static int shard_cumsum(ShardOp *op) {
  need_whole_dim(op, 0, norm_axis(op->n, op->n->in[0]->rank));
  op->out[0] = op->in[0];
  return 0;
}

// x * keep / (1 - ratio): linear; the step counter is replicated. Each element's mask is drawn
// at its place in the whole tensor for the layouts the kernel knows (codegen/kcall.c): the rows
// split on dim 0 and one dim split over tp, the grid's columns or sub; a dim split otherwise
// (a sequence-first tensor's batch over the grid's rows) is read whole.
static int shard_dropout(ShardOp *op) {
  ShardLayout *x = &op->in[0];
  bool pieces = false;
  for (int k = 0; k < x->rank; k++) {
    IrMeshAxis a = (IrMeshAxis)x->split[k];
    if (a == NONE || (k == 0 && !ir_mesh_pieces(a)))
      continue;
    if (ir_mesh_pieces(a) && !pieces)
      pieces = true;
    else
      need_whole_dim(op, 0, k);
  }
  op->in[1] = whole(0);
  op->out[0] = op->in[0];
  return 0;
}

static int shard_tick(ShardOp *op) {
  op->in[0] = whole(0);
  return 0;
}

static int shard_log_softmax(ShardOp *op) { return shard_softmax(op); }
static int shard_log_softmax_bwd(ShardOp *op) { return softmax_bwd(op); }

// Picks logp[target] per row: over a split class dim the rank holding the
// target contributes it and the others 0, so the loss is a partial sum with
// no collective.
static int shard_nll_loss(ShardOp *op) {
  loss_rows(op, 0, 1);
  op->out[0] = whole(0);
  op->out[0].partial = (unsigned char)sums(split_axes(&op->in[0], -1));
  return 0;
}
static int shard_nll_loss_bwd(ShardOp *op) { return loss_bwd(op); }

// A unit-step slice of a split axis is a piece, as split takes pieces (the
// fused QKV projection of an ONNX attention is sliced into q, k and v): each
// rank keeps its part of it, when the piece and its start divide. Otherwise
// the axis is gathered, and so is a dim split over a 2D grid's rows (the lowering takes pieces
// of tp and of the grid's columns, passes/tp.c). The other dims pass. Linear. (slice_bwd puts
// the piece back: the same with input and output swapped.)
static int slice(ShardOp *op, const IrValue *piece) {
  const IrNode *n = op->n;
  int ax = norm_axis(n, n->in[0]->rank), axis = op->in[0].split[ax];
  int64_t start = ir_attr_i(n, "start"), deg = degree(op->s, op->tp, axis);
  // the sequence split under sequence parallelism is not made of pieces (a
  // position table sliced to T rows): gathered
  bool seq = seq_parallel(op) && axis == op->tpa && sym_eq(n->in[0]->shape[ax], op->s->seq);
  int64_t whole_len, len;
  const IrValue *whole = piece == n->in[0] ? n->out[0] : n->in[0];
  bool piece_of = sym_eval(whole->shape[ax], &op->g->syms, &whole_len) ||
                  sym_eval(piece->shape[ax], &op->g->syms, &len) ||
                  (len > 0 && whole_len % len == 0 && start % len == 0);
  if (axis != NONE &&
      (seq || axis == ROW || ir_attr_i(n, "step") != 1 || (deg > 1 && start % deg) || !piece_of ||
       !divides(op, piece->shape[ax], axis)))
    need_whole_dim(op, 0, ax);
  op->out[0] = op->in[0];
  return 0;
}
static int shard_slice(ShardOp *op) { return slice(op, op->n->out[0]); }
static int shard_slice_bwd(ShardOp *op) { return slice(op, op->n->in[0]); }

// (p, g, state...): the gradient and the state take the parameter's layout
// (the state is seeded with it). A gradient that is a partial sum over tp is
// reduced here; one over dp is left to the data-parallel reduction, and so is
// one over tp in a block data parallel over tp (passes/lower.c reduces its
// bucket over tp, then over dp).
static int optimizer(ShardOp *op) {
  // a parameter no earlier op laid out (a bf16 master whose working copy no
  // op reads) takes its gradient's layout
  ShardLayout p = op->seed[0] ? op->in[1] : op->in[0];
  p.partial = 0;
  op->in[0] = p;
  unsigned dp = op->in[1].partial & bucket_partial(op);
  op->in[1] = p;
  op->in[1].partial = (unsigned char)dp;
  for (int k = 2; k < op->n->nin; k++)
    op->in[k] = p;
  return 0;
}
static int shard_adamw(ShardOp *op) { return optimizer(op); }
static int shard_sgd(ShardOp *op) { return optimizer(op); }

// A parameter's working copy and the parameter have one layout: the copy's,
// which forward's reads seeded (the parameter took it through its gradient).
static int shard_assign(ShardOp *op) {
  op->in[0].partial = 0;
  op->in[1] = op->in[0];
  return 0;
}

// The distribution ops come after this pass (passes/lower.c inserts them) and
// work on flat buckets that every rank holds whole.
static int whole_buckets(ShardOp *op) {
  for (int i = 0; i < op->n->nin; i++)
    op->in[i] = whole(op->n->in[i]->rank);
  for (int i = 0; i < op->n->nout; i++)
    op->out[i] = whole(op->n->out[i]->rank);
  return 0;
}
static int shard_all_reduce(ShardOp *op) { return whole_buckets(op); }
static int shard_reduce_scatter(ShardOp *op) { return whole_buckets(op); }
static int shard_all_gather(ShardOp *op) { return whole_buckets(op); }
static int shard_comm_wait(ShardOp *op) { return whole_buckets(op); }
static int shard_unshard(ShardOp *op) { return whole_buckets(op); }
static int shard_accumulate(ShardOp *op) { return whole_buckets(op); }
static int shard_to_host(ShardOp *op) { return whole_buckets(op); }
static int shard_to_device(ShardOp *op) { return whole_buckets(op); }
static int shard_from_host(ShardOp *op) { return whole_buckets(op); }
static int shard_copy_wait(ShardOp *op) { return whole_buckets(op); }

// The tensor-parallel ops come after this pass too (passes/tp.c inserts them
// where a layout changes); their rules state what they do.
static int tp_move(ShardOp *op, bool gather, bool sum) {
  int dim = (int)ir_attr_i(op->n, "dim");
  int axis = ir_mesh_axis_of_rt(ir_attr_i(op->n, "axis"));
  ShardLayout l = whole(op->n->in[0]->rank);
  l.split[dim] = (unsigned char)axis;
  op->in[0] = gather ? l : whole(l.rank);
  op->in[0].partial = (unsigned char)(sum ? BIT(axis) : 0);
  op->out[0] = gather ? whole(l.rank) : l;
  if (op->n->nout > 1)
    op->out[1] = whole(1);
  return 0;
}
static int shard_tp_gather(ShardOp *op) { return tp_move(op, true, false); }
static int shard_tp_slice(ShardOp *op) { return tp_move(op, false, false); }
static int shard_tp_reduce_scatter(ShardOp *op) { return tp_move(op, false, true); }
// SUMMA: forward, a's k over the grid's columns and b's over its rows (the matmul of their
// gathers); backward, w's k over the rows and the product dx's over the columns, or x's k over
// the columns and the product dw's over the rows.
static int summa_layout(ShardOp *op, int a_dim, int a_axis, int b_dim, int b_axis, int out_dim,
                        int out_axis) {
  op->in[0] = whole(op->n->in[0]->rank);
  op->in[1] = whole(op->n->in[1]->rank);
  op->out[0] = whole(op->n->out[0]->rank);
  op->out[1] = op->out[2] = whole(1);
  if (a_dim >= 0)
    op->in[0].split[a_dim] = (unsigned char)a_axis;
  if (b_dim >= 0)
    op->in[1].split[b_dim] = (unsigned char)b_axis;
  if (out_dim >= 0)
    op->out[0].split[out_dim] = (unsigned char)out_axis;
  return 0;
}
static int shard_summa(ShardOp *op) {
  return summa_layout(op, op->n->in[0]->rank - 1, COL, 0, ROW, -1, 0);
}
static int shard_summa_nt(ShardOp *op) {
  return summa_layout(op, -1, 0, 0, ROW, op->n->out[0]->rank - 1, COL);
}
static int shard_summa_tn(ShardOp *op) {
  return summa_layout(op, op->n->in[0]->rank - 1, COL, -1, 0, 0, ROW);
}
// matmul_bias: matmul's layouts, but never a partial product (its bias is added once): the
// contracted dim is read whole; the bias split as the output's last dim. (The epilogue pass
// makes it after the layouts are laid, where a row-parallel product is reduced before its bias
// is added and so never fuses; the planner prices such a graph too.)
static int shard_matmul_bias(ShardOp *op) {
  if (shard_matmul(op))
    return -1;
  const IrNode *n = op->n;
  ShardLayout *y = &op->out[0];
  if (y->partial) {
    bool ta = ir_attr_i(n, "ta"), tb = ir_attr_i(n, "tb");
    op->in[0].split[n->in[0]->rank - (ta ? 2 : 1)] = NONE;
    op->in[1].split[n->in[1]->rank - (tb ? 1 : 2)] = NONE;
    y->partial = 0;
  }
  op->in[2] = whole(1);
  op->in[2].split[0] = y->split[y->rank - 1];
  if (n->nout > 1)
    op->out[1] = *y;
  return 0;
}
// matmul_bgrad: matmul's layouts; db split as its operand's last dim, a partial sum wherever
// the product is (over the contracted dims it sums too).
static int shard_matmul_bgrad(ShardOp *op) {
  if (shard_matmul(op))
    return -1;
  const ShardLayout *x = &op->in[ir_attr_i(op->n, "of")];
  op->out[1] = whole(1);
  op->out[1].split[0] = x->split[x->rank - 1];
  op->out[1].partial = op->out[0].partial;
  return 0;
}
// Vocabulary-parallel cross-entropy: logits split on V, the loss a partial sum
// over tp; its row statistics are whole (all-reduced inside).
static int shard_vp_cross_entropy(ShardOp *op) {
  int v = op->n->in[0]->rank - 1;
  op->in[0] = whole(v + 1);
  op->in[0].split[v] = (unsigned char)op->tpa;
  op->in[1] = whole(op->n->in[1]->rank);
  op->out[0] = whole(0);
  op->out[0].partial = (unsigned char)BIT(op->tpa);
  op->out[1] = whole(1);
  return 0;
}
static int shard_vp_cross_entropy_bwd(ShardOp *op) {
  int v = op->n->in[1]->rank - 1;
  for (int k = 0; k < 4; k++)
    op->in[k] = whole(op->n->in[k]->rank);
  op->in[1].split[v] = (unsigned char)op->tpa;
  op->out[0] = op->in[1];
  return 0;
}

typedef int ShardFn(ShardOp *op);
static ShardFn *const shard_fns[] = {
#define OP(E, name, nin, nout, kind) shard_##name,
#include "ops.def"
};

// ---- the pass -------------------------------------------------------------------------------

// What a layout was made under: the block's tp degree, apart for a block
// that splits its batch over tp (a value crossing between the two kinds is
// read without the other's tp splits, as between degrees).
#define BATCH_KEY (1 << 20)
static int block_key(const Shard *s, const IrNode *n) {
  return block_tp(s, n) + (block_batch(s, n) ? BATCH_KEY : 0);
}

// In a block whose batch splits over tp, input k (an activation, an input or
// their gradient) has its batch dim (the first of the model's batch size)
// split over tp, when it uses tp nowhere else and the dim divides: a free
// slice of a whole value, a reduce-scatter of a partial sum, a gather first
// of a value split otherwise (ir_shard's convert).
static void split_batch(ShardOp *op, int k) {
  const IrValue *v = op->n->in[k], *b = op->s->batch;
  ShardLayout *l = &op->in[k];
  if (!b || b->rank < 1 || ((split_axes(l, -1) | l->partial) & axis_bits(op->ba)))
    return;
  for (int d = 0; d < v->rank; d++)
    if (sym_eq(v->shape[d], b->shape[0])) {
      if (l->split[d] == NONE && divides(op, v->shape[d], op->ba))
        l->split[d] = (unsigned char)op->ba;
      return;
    }
}

// Input k of a grid block, an activation with its batch split over the grid's rows (subrow: and
// over its replicas, a grid on sub ranks): its last
// dim (features) over the columns too, when whole, the input uses them nowhere and it divides.
static void split_features(ShardOp *op, int k) {
  const IrValue *v = op->n->in[k];
  ShardLayout *l = &op->in[k];
  int last = v->rank - 1;
  if (last < 1 || l->split[0] != op->ba || l->split[last] != NONE ||
      ((split_axes(l, -1) | l->partial) & BIT(COL)) || !divides(op, v->shape[last], COL))
    return;
  l->split[last] = COL;
}

// A layout a rule gave: the value's rank, no axis used twice, and (when
// known) every split dividing, or a vocabulary the lowering pads.
static int check_layout(Shard *s, const IrNode *n, int tp, const IrValue *v, const ShardLayout *l,
                        const char *what) {
  bool ok = l->rank == (v->rank < 0 ? 0 : v->rank);
  unsigned seen = l->partial;
  for (int i = 0; ok && i < l->rank; i++) {
    int a = l->split[i];
    if (a == NONE)
      continue;
    ok = a < IR_MESH_NAXES && !(seen & BIT(a));
    seen |= BIT(a);
    int deg = degree(s, tp, a);
    int64_t size;
    if (ok && deg != SHARD_TP_ANY && sym_eval(v->shape[i], &s->g->syms, &size) == 0)
      ok = deg > 1 && (size % deg == 0 || padded(s, a, v->shape[i]));
  }
  if (ok)
    return 0;
  char buf[512];
  ir_shard_layout_str(buf, sizeof buf, s->g, v, l);
  return ir_error(s->diag, n->loc,
                  "shard: %s's rule gives %s '%s' %s the layout %s, which it cannot have",
                  ir_op_name(n->op), what, v->name, ir_shape_str(s->g, v), buf);
}

// Records the splits of l that were assumed to divide.
static void assumed(Shard *s, const IrNode *n, int tp, const IrValue *v, const ShardLayout *l) {
  int64_t size;
  for (int i = 0; i < l->rank; i++)
    if (l->split[i] != NONE && (degree(s, tp, l->split[i]) == SHARD_TP_ANY ||
                                sym_eval(v->shape[i], &s->g->syms, &size) != 0))
      need(s, n, v->shape[i], (IrMeshAxis)l->split[i]);
}

// Takes v (read by node n as input k) from what it holds to `to`: the
// collectives, placed after v's producer when no one has read v yet (in the
// same phase), else before n. Slices are free and listed nowhere.
static void convert(Shard *s, const IrNode *n, int k, int tp, const IrValue *v,
                    const ShardLayout *to) {
  ShardLayout m = s->cur[v->id];
  if (slices_to(&m, to))
    return;
  // Under sequence parallelism a gathered value is not kept from forward for
  // backward (Megatron gathers the norms' outputs again in backward: 1/tp of
  // them is held instead of all), so conversions serve one phase's readers.
  bool phased = s->spec->seq_parallel || grid(s) != 1;   // 2D: Optimus broadcasts again too
  for (int h = 0; h < s->nhave[v->id]; h++)
    if (slices_to(&s->have[v->id * HAVE + h], to) &&
        (!phased || s->have_phase[v->id * HAVE + h] == n->phase))
      return;
  bool gathers = false;   // a dim m splits that `to` does not
  for (int i = 0; i < m.rank; i++)
    gathers |= m.split[i] != NONE && m.split[i] != to->split[i];
  const IrNode *at = n;
  ShardAt where = SHARD_BEFORE;
  int operand = k;
  if (v->producer && !s->read[v->id] && v->producer->phase == n->phase &&
      !(phased && gathers)) {
    at = v->producer;
    where = SHARD_AFTER;
    for (int i = 0; i < at->nout; i++)
      if (at->out[i] == v)
        operand = i;
  }
  int ncoll = 0;
  for (int a = 1; a < IR_MESH_NAXES; a++) {
    if (!(m.partial & BIT(a)) || (to->partial & BIT(a)))
      continue;
    int d = -1;   // a dim `to` splits over a that m has whole: reduce-scatter onto it
    for (int i = 0; i < m.rank && d < 0; i++)
      if (to->split[i] == a && m.split[i] == NONE)
        d = i;
    ShardKind kind = d >= 0 ? SHARD_REDUCE_SCATTER : SHARD_ALL_REDUCE;
    ShardColl *c = add_coll(s, at, where, operand, v, kind, (IrMeshAxis)a,
                            local_numel(s, tp, v, &m), &m);
    c->dim = d;
    snprintf(c->what, sizeof c->what, "partial sum of %s, for %s",
             v->producer ? ir_op_name(v->producer->op) : v->name, ir_op_name(n->op));
    m.partial &= (unsigned char)~BIT(a);
    if (d >= 0)
      m.split[d] = (unsigned char)a;
    ncoll++;
  }
  for (int i = 0; i < m.rank; i++) {
    int a = m.split[i];
    if (a == NONE || a == to->split[i])
      continue;
    m.split[i] = NONE;
    ShardColl *c = add_coll(s, at, where, operand, v, SHARD_ALL_GATHER, (IrMeshAxis)a,
                            local_numel(s, tp, v, &m), &m);
    c->dim = i;
    snprintf(c->what, sizeof c->what, "dim %d whole, for %s", i, ir_op_name(n->op));
    ncoll++;
  }
  if (!ncoll)
    return;   // only local slices
  if (where == SHARD_AFTER)
    s->cur[v->id] = m;
  else if (s->nhave[v->id] < HAVE) {
    s->have_phase[v->id * HAVE + s->nhave[v->id]] = (unsigned char)n->phase;
    s->have[v->id * HAVE + s->nhave[v->id]++] = m;
  }
}

// The layout node n sees input k in before its rule runs: the value's, or,
// when the value was laid out under another block kind (block_key), that without tp.
static ShardLayout input_layout(Shard *s, const IrValue *v, int key) {
  ShardLayout l = s->cur[v->id];
  if (s->deg[v->id] != key && (axes_used(&l) & KEYED)) {
    for (int i = 0; i < l.rank; i++)
      if (BIT(l.split[i]) & KEYED)
        l.split[i] = NONE;
    l.partial &= (unsigned char)~KEYED;
  }
  return l;
}

static int run_node(Shard *s, const IrNode *n, ShardLayout *in, bool *seed, ShardLayout *out,
                    int use_at) {
  int tp = block_tp(s, n), key = block_key(s, n);
  bool batch = block_batch(s, n), sub = block_sub(s, n), on_grid = block_grid(s, n);
  // a grid block beside tp blocks splits its batch over the grid's rows itself (in a grid
  // program the inputs are split so: lay_inputs), and over the grids when there are several
  bool grid_batch = on_grid && s->spec->mesh_tp > 1;
  int grid_ba = grids(s) > 1 ? SUBROW : ROW;
  ShardOp op = {.s = s, .g = s->g, .n = n, .tp = tp, .batch = batch, .q = on_grid ? grid(s) : 1,
                .tpa = sub ? SUB : TP,
                .ba = batch ? TP : sub ? SUBDP : grid_batch ? grid_ba : NONE,
                .in = in, .seed = seed, .seed_k = -1, .out = out};
  for (int k = 0; k < n->nin; k++) {
    const IrValue *v = n->in[k];
    seed[k] = false;
    const IrValue *c = s->copy[v->id];
    if (!s->laid[v->id] && c && s->laid[c->id]) {  // a bf16 master: its copy's layout
      s->laid[v->id] = true;
      s->cur[v->id] = s->r->layout[v->id] = s->r->layout[c->id];
      s->cur[v->id].partial = s->r->layout[v->id].partial = 0;
      s->deg[v->id] = s->deg[c->id];
    }
    if (!s->laid[v->id]) {
      in[k] = whole(v->rank);
      if ((v->role == ROLE_PARAM || v->role == ROLE_COPY || v->role == ROLE_STATE) &&
          model_parallel(&op)) {
        seed[k] = true;
        continue;
      }
      s->laid[v->id] = true;
      s->cur[v->id] = s->r->layout[v->id] = in[k];
      s->deg[v->id] = key;
      continue;
    }
    in[k] = input_layout(s, v, key);
    // A partial sum with several readers is reduced at once, before a
    // linear reader carries it on and another reduces it again (under
    // sequence parallelism, reduce-scattered onto the sequence when the
    // first reader is one of the ops between tensor-parallel regions).
    if (s->readers[v->id] > 1) {
      unsigned before = in[k].partial;
      in[k].partial = 0;
      if (between_regions(n))
        scatter_seq(&op, k, before);
    }
    bool weight = v->role == ROLE_PARAM || v->role == ROLE_COPY || v->role == ROLE_STATE;
    if (op.ba != NONE && !weight)
      split_batch(&op, k);
    // a float activation entering a grid block from a tp block: as Optimus holds them,
    // [b/q, ..., h/q] (its features cut over the grid's columns too, a free slice)
    if (grid_batch && !weight && s->deg[v->id] != key && ir_is_float(v->dtype))
      split_features(&op, k);
  }
  for (int k = 0; k < n->nout; k++)
    out[k] = whole(n->out[k]->rank);
  if (shard_fns[n->op](&op))
    return -1;
  for (int k = 0; k < n->nin; k++) {
    const IrValue *v = n->in[k];
    if (check_layout(s, n, tp, v, &in[k], "input"))
      return -1;
    assumed(s, n, tp, v, &in[k]);
    if (seed[k] && !s->laid[v->id]) {
      const ShardLayout *l = k == op.seed_k ? &op.seed_as : &in[k];
      if (check_layout(s, n, tp, v, l, "parameter"))
        return -1;
      s->laid[v->id] = true;
      s->cur[v->id] = s->r->layout[v->id] = *l;
      s->deg[v->id] = key;
    }
    convert(s, n, k, tp, v, &in[k]);
    s->read[v->id] = true;
    s->r->use[use_at + k] = in[k];
  }
  for (int k = 0; k < n->nout; k++) {
    const IrValue *o = n->out[k];
    if (check_layout(s, n, tp, o, &out[k], "output"))
      return -1;
    assumed(s, n, tp, o, &out[k]);
    s->laid[o->id] = true;
    s->cur[o->id] = s->r->layout[o->id] = out[k];
    s->deg[o->id] = key;
  }
  return 0;
}

// Inputs: the batch (the first input's first dim) split over dp, or over the
// rows of a 2D grid.
static int lay_inputs(Shard *s) {
  IrGraph *g = s->g;
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *v = g->values[i];
    if (v->role != ROLE_INPUT && v->role != ROLE_CONST)
      continue;
    ShardLayout l = whole(v->rank);
    if (v->role == ROLE_INPUT && !s->batch)
      s->batch = v;
    int axis = s->spec->dp != 1 ? DP : grid(s) != 1 && s->spec->mesh_tp <= 1 ? ROW : NONE;
    int deg = degree(s, 1, axis);
    if (v->role == ROLE_INPUT && axis != NONE && v->rank >= 1 && s->batch->rank >= 1 &&
        sym_eq(v->shape[0], s->batch->shape[0])) {
      int64_t b;
      if (deg != SHARD_TP_ANY && sym_eval(v->shape[0], &g->syms, &b) == 0 &&
          (b % deg || b < deg))
        return ir_error(s->diag, v->loc,
                        "the batch dim %s = %lld of '%s' does not divide by %s = %d",
                        sym_str(&g->arena, v->shape[0], &g->syms), (long long)b, v->name,
                        axis == DP ? "dp" : "q", deg);
      l.split[0] = (unsigned char)axis;
    }
    s->laid[i] = true;
    s->cur[i] = s->r->layout[i] = l;
    s->deg[i] = 1;
  }
  return 0;
}

// The dim sequence parallelism splits: the model's sequence (its token
// inputs' second dim), or for a model fed activations [B, T, ...] (no
// tokens) their second dim, when it is a symbol of its own. NULL: none.
static const Sym *sequence(IrGraph *g) {
  if (g->seq_sym >= 0)
    return sym_var(&g->arena, g->seq_sym);
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if (v->role != ROLE_INPUT)
      continue;
    if (v->rank < 3)
      return NULL;
    return ir_lone_symbol(v->shape[1]) >= 0 ? v->shape[1] : NULL;
  }
  return NULL;
}

int ir_shard(IrGraph *g, const ShardSpec *spec, ShardResult *out, IrDiag *d) {
  memset(out, 0, sizeof *out);
  if (spec->dp < 1 && spec->dp != SHARD_TP_ANY)
    return ir_error(d, (IrLoc){0}, "shard: dp = %d must be at least 1", spec->dp);
  for (int b = 0; b < spec->nblocks; b++)
    if (spec->tp[b] < 1 && spec->tp[b] != SHARD_TP_ANY)
      return ir_error(d, (IrLoc){0}, "shard: block %d has tp = %d", b, spec->tp[b]);
  // (a grid inside tp: its blocks tp 1, the others the program's tp, or of q x q ranks when
  // each group of q x q of its ranks holds a grid)
  int qq = spec->q * spec->q;
  bool grid_in_tp = spec->q > 1 && spec->mesh_tp > 1 && spec->mesh_tp % qq == 0;
  for (int b = 0; (spec->q > 1 || spec->q == SHARD_TP_ANY) && b < spec->nblocks; b++)
    if ((spec->tp[b] != 1 && !(grid_in_tp && (spec->tp[b] == spec->mesh_tp ||
                                              spec->tp[b] == qq))) || spec->dp != 1)
      return ir_error(d, (IrLoc){0}, "shard: a 2D grid (q = %d) with tp = %d and dp = %d in "
                      "block %d: the grid is one replica's only split", spec->q, spec->tp[b],
                      spec->dp, b);
  int nv = g->nvalues, nn = g->nnodes, nuse = 0, maxin = 1, maxout = 1, nblocks = ir_nblocks(g);
  for (int i = 0; i < nn; i++) {
    IR_ASSERT(g->nodes[i]->id == i && g->nodes[i]->block >= 0);
    nuse += g->nodes[i]->nin;
    if (g->nodes[i]->nin > maxin)
      maxin = g->nodes[i]->nin;
    if (g->nodes[i]->nout > maxout)
      maxout = g->nodes[i]->nout;
  }
  out->nvalues = nv;
  out->nnodes = nn;
  out->layout = calloc((size_t)nv + 1, sizeof *out->layout);
  out->use_at = calloc((size_t)nn + 1, sizeof *out->use_at);
  out->use = calloc((size_t)nuse + 1, sizeof *out->use);
  Shard s = {.g = g, .spec = spec, .diag = d, .r = out, .seq = sequence(g),
             .sub = grid_in_tp && qq < spec->mesh_tp ? qq : 1};   // (grids on sub ranks)
  for (int b = 0; b < spec->nblocks; b++) {
    bool batch = spec->batch_tp && spec->batch_tp[b];
    if (spec->mesh_tp > 0 && spec->tp[b] > 1 && spec->tp[b] < spec->mesh_tp && !batch) {
      if ((s.sub > 1 && s.sub != spec->tp[b]) || spec->mesh_tp % spec->tp[b])
        return ir_error(d, (IrLoc){0}, "shard: block %d has tp = %d in a program of tp %d "
                        "whose blocks below it have tp %d: one degree, dividing tp", b,
                        spec->tp[b], spec->mesh_tp, s.sub);
      s.sub = spec->tp[b];
    }
  }
  s.laid = calloc((size_t)nv + 1, sizeof *s.laid);
  s.read = calloc((size_t)nv + 1, sizeof *s.read);
  s.cur = calloc((size_t)nv + 1, sizeof *s.cur);
  s.deg = calloc((size_t)nv + 1, sizeof *s.deg);
  s.have = calloc((size_t)nv * HAVE + 1, sizeof *s.have);
  s.nhave = calloc((size_t)nv + 1, 1);
  s.have_phase = calloc((size_t)nv * HAVE + 1, 1);
  s.readers = calloc((size_t)nv + 1, sizeof *s.readers);
  s.copy = calloc((size_t)nv + 1, sizeof *s.copy);
  s.grad_of = calloc((size_t)nv + 1, sizeof *s.grad_of);
  s.need_last = malloc((size_t)nblocks * sizeof *s.need_last);
  for (int b = 0; s.need_last && b < nblocks; b++)
    s.need_last[b] = -1;
  ShardLayout *in = calloc((size_t)maxin, sizeof *in), *outs = calloc((size_t)maxout, sizeof *outs);
  bool *seed = calloc((size_t)maxin, sizeof *seed);
  IR_ASSERT(out->layout && out->use_at && out->use && s.laid && s.read && s.cur && s.deg &&
            s.have && s.have_phase && s.nhave && s.readers && s.copy && s.grad_of && s.need_last && in && outs && seed);
  for (int i = 0; i < nv; i++)
    IR_ASSERT(g->values[i]->id == i);
  for (int i = 0; i < nn; i++) {
    const IrNode *n = g->nodes[i];
    for (int k = 0; k < n->nin; k++)
      s.readers[n->in[k]->id]++;
    if (n->op == OP_ASSIGN)
      s.copy[n->in[1]->id] = n->in[0];
  }
  // forward's readers of each value, grouped by value
  s.fwd_at = calloc((size_t)nv + 2, sizeof *s.fwd_at);
  IR_ASSERT(s.fwd_at);
  for (int i = 0; i < nn; i++)
    for (int k = 0; g->nodes[i]->phase == PHASE_FORWARD && k < g->nodes[i]->nin; k++)
      s.fwd_at[g->nodes[i]->in[k]->id + 1]++;
  for (int i = 0; i < nv; i++)
    s.fwd_at[i + 1] += s.fwd_at[i];
  s.fwd_node = malloc((size_t)s.fwd_at[nv] * sizeof *s.fwd_node + 1);
  int *fill = calloc((size_t)nv + 1, sizeof *fill);
  IR_ASSERT(s.fwd_node && fill);
  for (int i = 0; i < nn; i++)
    for (int k = 0; g->nodes[i]->phase == PHASE_FORWARD && k < g->nodes[i]->nin; k++) {
      int v = g->nodes[i]->in[k]->id;
      s.fwd_node[s.fwd_at[v] + fill[v]++] = i;
    }
  free(fill);
  for (int i = 0; i < nv; i++)
    if (g->values[i]->role == ROLE_PARAM && g->values[i]->grad)
      s.grad_of[g->values[i]->grad->id] = g->values[i];
  for (int i = nn - 1; i >= 0; i--) {   // the terms a gradient is the sum of (bf16: cast to it)
    const IrNode *n = g->nodes[i];
    if ((n->op == OP_ADD || n->op == OP_CAST) && n->nout == 1 && s.grad_of[n->out[0]->id])
      for (int k = 0; k < n->nin; k++)
        if (!s.grad_of[n->in[k]->id])
          s.grad_of[n->in[k]->id] = s.grad_of[n->out[0]->id];
  }
  find_vocab(&s);
  int rc = lay_inputs(&s);
  int64_t rows, parts = grid(&s) * grids(&s);
  if (!rc && grids(&s) > 1 && s.batch && s.batch->rank >= 1 &&
      sym_eval(s.batch->shape[0], &g->syms, &rows) == 0 && (rows % parts || rows < parts))
    rc = ir_error(d, s.batch->loc, "shard: the 2D blocks on the %d grids of %d x %d of the tp "
                  "ranks split each micro-batch over the grids' %lld rows, and its %lld "
                  "sequences do not divide by %lld: choose a micro-batch that does",
                  grids(&s), grid(&s), grid(&s), (long long)parts, (long long)rows,
                  (long long)parts);
  for (int i = 0, at = 0; !rc && i < nn; i++) {
    out->use_at[i] = at;
    rc = run_node(&s, g->nodes[i], in, seed, outs, at);
    at += g->nodes[i]->nin;
  }
  // Parameters and state no node reads: replicated.
  for (int i = 0; !rc && i < nv; i++)
    if (!s.laid[i])
      out->layout[i] = whole(g->values[i]->rank);
  free(s.laid), free(s.read), free(s.cur), free(s.deg), free(s.have), free(s.have_phase),
      free(s.nhave);
  free(s.readers), free(s.copy), free(s.grad_of), free(s.need_last), free(s.need_prev);
  free(s.fwd_at), free(s.fwd_node);
  free(in), free(outs), free(seed);
  if (rc)
    ir_shard_free(out);
  return rc;
}

void ir_shard_free(ShardResult *r) {
  free(r->layout), free(r->use_at), free(r->use), free(r->coll), free(r->need), free(r->note);
  memset(r, 0, sizeof *r);
}

const ShardLayout *ir_shard_use(const ShardResult *r, const IrNode *n, int k) {
  IR_ASSERT(n->id >= 0 && n->id < r->nnodes && k >= 0 && k < n->nin);
  return &r->use[r->use_at[n->id] + k];
}

// ---- printing ---------------------------------------------------------------------------------

static void print_coll(FILE *f, IrGraph *g, const ShardColl *c) {
  static const char *at[] = {"before", "after", "within"};
  fprintf(f, "    %s(%s) %s %%%s: %s elements (%s)\n", ir_shard_kind_name(c->kind),
          ir_mesh_axis_name(c->axis), at[c->at], c->value ? c->value->name : "?",
          sym_str(&g->arena, c->count, &g->syms), c->what);
}

void ir_shard_print(FILE *f, IrGraph *g, const ShardResult *r) {
  static const char *phase[] = {"forward", "backward", "update"};
  char buf[512];
  int last_phase = -1;
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    if ((int)n->phase != last_phase)
      fprintf(f, "%s\n", phase[n->phase]), last_phase = (int)n->phase;
    fprintf(f, "  ");
    for (int k = 0; k < n->nout; k++) {
      ir_shard_layout_str(buf, sizeof buf, g, n->out[k], &r->layout[n->out[k]->id]);
      fprintf(f, "%s%%%s %s", k ? ", " : "", n->out[k]->name, buf);
    }
    fprintf(f, "%s%s(", n->nout ? " = " : "", ir_op_name(n->op));
    for (int k = 0; k < n->nin; k++) {
      ir_shard_layout_str(buf, sizeof buf, g, n->in[k], ir_shard_use(r, n, k));
      fprintf(f, "%s%%%s %s", k ? ", " : "", n->in[k]->name, buf);
    }
    if (n->block)
      fprintf(f, ") #%d\n", n->block);
    else
      fprintf(f, ")\n");
    for (int c = 0; c < r->ncolls; c++)
      if (r->coll[c].node == n)
        print_coll(f, g, &r->coll[c]);
  }
  for (int i = 0; i < r->nnotes; i++)
    fprintf(f, "%s\n", r->note[i].text);
  for (int i = 0; i < r->nneeds; i++)
    fprintf(f, "needs: %s divisible by %s (block %d)\n",
            sym_str(&g->arena, r->need[i].dim, &g->syms), ir_mesh_axis_name(r->need[i].axis),
            r->need[i].block);
}
