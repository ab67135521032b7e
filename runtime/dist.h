// The distributed state of a training program: its mesh of ranks and the
// kernels that lowered code calls for collectives, over comm.h.
//
// The mesh is dp replicas of the model, each on tp ranks (Megatron 1D) or on
// a q x q grid (Optimus 2D), one replica's ranks adjacent: world rank
// r = d * n + t with n = tp * q * q, and on the grid t = i * q + j (grid row
// i, column j). Collectives name a mesh axis (RT_AXIS_*, the order of mtc's
// IrMeshAxis) and a request slot: a collective starts in one place of the
// step and its comm_wait finishes it in another (gradients reduced while
// backward goes on).
//
// Micro-batches: train.c runs forward and backward micro_total times per step
// (rt_dist.micro = 0, 1, ...). Accumulation restarts at micro-batch 0, and
// collectives marked last_micro run only after the last micro-batch.
#ifndef MTC_RT_DIST_H
#define MTC_RT_DIST_H

#include <stddef.h>

#include "comm.h"

// RT_AXIS_ROW: a dim cut by the grid row (the collective runs among the q
// ranks of a grid column); RT_AXIS_COL: cut by the grid column.
// RT_AXIS_SUB, RT_AXIS_SUBDP: a block tensor parallel over sub of the replica's tp ranks
// (TP2 beside TP4) splits its ops over the sub adjacent ranks with the same tp_rank / sub, and
// its batch over the tp / sub ranks with the same tp_rank % sub.
// RT_AXIS_SUBROW: a grid on the sub ranks (q x q = sub < tp) splits its batch over its rows
// and the tp / sub grids, the ranks of a replica with the same tp_rank % q, ordered by tp_rank
// (its grid rows are tp_rank % sub / q); without sub grids it is RT_AXIS_ROW.
// RT_AXIS_NONE: over no axis (a parameter's padded dim that is whole on every rank, rt_split).
// RT_AXIS_ALL: every rank of the mesh, in world order; no tensor is split over it (the RT_NAXES
// axes are those of a tensor's layout), the buckets of a block data parallel over tp are.
// RT_AXIS_SUBREP: the replicas of a block over sub ranks (dp x subdp: the ranks with the same
// tp_rank % sub); its buckets are reduced and sharded over them.
enum { RT_AXIS_NONE = -1, RT_AXIS_DP, RT_AXIS_TP, RT_AXIS_ROW, RT_AXIS_COL, RT_AXIS_SUB,
       RT_AXIS_SUBDP, RT_AXIS_SUBROW, RT_NAXES, RT_AXIS_ALL = RT_NAXES, RT_AXIS_SUBREP,
       RT_NGROUPS };

typedef struct rt_dist_state {
  int dp, tp, q;              // the mesh (q: the side of the 2D grid, 1: none; with tp > 1, the
                              // grid of its 2D blocks inside the tp ranks, q x q = tp, or
                              // inside each group of sub of them, q x q = sub)
  int sub;                    // the degree of blocks below tp (1: none)
  int rank, dp_rank, tp_rank; // this rank's place in it: in the world (dp_rank x the replica's
                              // ranks + tp_rank), its replica, its rank in the replica
  rt_group *group[RT_NGROUPS];  // [RT_AXIS_DP]: ranks holding the same model part;
                              // [RT_AXIS_TP]: one replica's ranks; [RT_AXIS_ROW],
                              // [RT_AXIS_COL]: a grid column's, a grid row's (q > 1);
                              // [RT_AXIS_SUB], [RT_AXIS_SUBDP], [RT_AXIS_SUBREP] (sub > 1);
                              // [RT_AXIS_SUBROW] (q > 1: the grids' rows, ROW's with one grid);
                              // [RT_AXIS_ALL]: the world
  int micro, micro_total;     // the micro-batch running, and how many this rank's replica runs
                              // a step (replicas may run unequal shares of the batch)
  long row, rows;             // the first row (sequence) of the step's global batch this rank's
                              // inputs of the running micro-batch hold, and how many
                              // (train.c's take_slice): dropout draws each element's mask bit
                              // at its place in the whole batch of the step
  int nslots;
  rt_request *req;            // one per slot
} rt_dist_state;

// One rank, one micro-batch until rt_dist_init says otherwise (the
// interpreter and one-rank programs never call it).
extern rt_dist_state rt_dist;

// After rt_comm_init: the mesh's groups and nslots request slots (sub: the degree of blocks
// below tp, 1: none).
void rt_dist_init(int dp, int tp, int q, int sub, int micro_total, int nslots);

// The ranks of one replica: tp, or a q x q grid (tp 1), or tp with a grid inside it.
static inline int rt_replica_ranks(void) {
  return rt_dist.tp > 1 ? rt_dist.tp : rt_dist.q * rt_dist.q;
}

// The ranks along a mesh axis, and this rank's place among them.
static inline int rt_grids(void) { return rt_replica_ranks() / (rt_dist.q * rt_dist.q); }
static inline int rt_axis_size(int axis) {
  return axis == RT_AXIS_NONE ? 1
         : axis == RT_AXIS_SUBROW ? rt_grids() * rt_dist.q
         : axis == RT_AXIS_DP ? rt_dist.dp
         : axis == RT_AXIS_TP ? rt_dist.tp
         : axis == RT_AXIS_SUB ? rt_dist.sub
         : axis == RT_AXIS_SUBDP ? rt_dist.tp / rt_dist.sub
         : axis == RT_AXIS_SUBREP ? rt_dist.dp * (rt_dist.tp / rt_dist.sub)
         : axis == RT_AXIS_ALL ? rt_dist.dp * rt_replica_ranks()
                              : rt_dist.q;
}
// The place along a replica's axis (tp, row, col, sub, subdp, subrow) of the replica's rank t.
static inline int rt_axis_place(int axis, int t) {
  return axis == RT_AXIS_NONE ? 0
         : axis == RT_AXIS_TP ? t
         : axis == RT_AXIS_SUB ? t % rt_dist.sub
         : axis == RT_AXIS_SUBDP ? t / rt_dist.sub
         : axis == RT_AXIS_ROW ? t % (rt_dist.q * rt_dist.q) / rt_dist.q
         : axis == RT_AXIS_SUBROW
             ? t / (rt_dist.q * rt_dist.q) * rt_dist.q + t % (rt_dist.q * rt_dist.q) / rt_dist.q
             : t % rt_dist.q;
}
static inline int rt_axis_rank(int axis) {
  return axis == RT_AXIS_DP    ? rt_dist.dp_rank
         : axis == RT_AXIS_ALL ? rt_dist.rank
         : axis == RT_AXIS_SUBREP
             ? rt_dist.dp_rank * (rt_dist.tp / rt_dist.sub) + rt_dist.tp_rank / rt_dist.sub
             : rt_axis_place(axis, rt_dist.tp_rank);
}

// A dropout mask's first element in the step's whole batch (rt_dropout): a rank's tensor of
// `whole` elements once its feature split is undone holds the rows of its inputs (batched 1),
// or its part along batch_axis of them (a block that splits its batch over sub groups, or a
// grid's rows beside tp; RT_AXIS_NONE: none), whole x parts / rows elements a row; or
// (batched 2) every grid row's rows, the replica's micro-batch (gathered on a 2D grid).
static inline unsigned long long rt_dropout_first(long whole, int batched, int batch_axis) {
  if (!batched) return 0;
  if (batched == 2) {
    unsigned long long q = (unsigned long long)rt_axis_size(RT_AXIS_ROW);
    unsigned long long rows = (unsigned long long)rt_dist.rows * q;
    unsigned long long row =
        (unsigned long long)(rt_dist.row - rt_axis_rank(RT_AXIS_ROW) * rt_dist.rows);
    return row * ((unsigned long long)whole / rows);
  }
  unsigned long long parts = (unsigned long long)rt_axis_size(batch_axis);
  unsigned long long per_row = (unsigned long long)whole * parts / (unsigned long long)rt_dist.rows;
  return (unsigned long long)rt_dist.row * per_row +
         (unsigned long long)(batch_axis >= 0 ? rt_axis_rank(batch_axis) : 0) *
             (unsigned long long)whole;
}

// The kernels lowered code calls for collectives, shards of buckets, tensor
// parallelism and the vocabulary-parallel embedding and loss are in
// kernels.def (runtime/dist_cpu.c defines them for the CPU build, kernels_cuda.cu for the GPU).

// Every slot's collective, finished (before gradients are read: --dump-grads).
void rt_comm_wait_all(void);

// ---- tensor parallelism --------------------------------------------------------------
//
// A tensor split over the ranks of an axis (tp, or a grid's rows or columns)
// along one dim holds, in each of the dim's `pieces` equal parts, this rank's
// contiguous 1/n (Megatron's fused QKV weight: this rank's q, k and v columns
// side by side). Viewed around that dim it is [outer][pieces][chunk] on each
// rank and [outer][pieces][n][chunk] whole.

// part = rank's part of whole; whole's place for rank's part = part. Elements
// of `size` bytes (rt_tp_take and rt_tp_place: float32).
void rt_tp_take_bytes(void *part, const void *whole, long outer, long pieces, long chunk, int rank,
                      int tp, size_t size);
void rt_tp_place_bytes(void *whole, const void *part, long outer, long pieces, long chunk,
                       int rank, int tp, size_t size);
static inline void rt_tp_take(float *part, const float *whole, long outer, long pieces,
                              long chunk, int rank, int tp) {
  rt_tp_take_bytes(part, whole, outer, pieces, chunk, rank, tp, sizeof *part);
}
static inline void rt_tp_place(float *whole, const float *part, long outer, long pieces,
                               long chunk, int rank, int tp) {
  rt_tp_place_bytes(whole, part, outer, pieces, chunk, rank, tp, sizeof *part);
}

// ---- SUMMA's panels (kernels.def's summa) ----
//
// Panel t of an operand whose k is split over a grid axis is the part held by the rank at
// place t along it. Every rank of the axis's group starts the panels' broadcasts in order
// t = 0, 1, ..; a panel is this rank's own (read in place) or lands in one of the
// min(q-1, 2) buffers the foreign panels take turns in. At most panels t and t + 1 are in
// flight: start t + 1 only after the last reader of panel t - 1 has run (or been queued, on a
// GPU's one stream).
typedef struct rt_summa_panels {
  int axis;               // RT_AXIS_COL (a's k) or RT_AXIS_ROW (b's k)
  const void *own;        // this rank's panel
  char *buf;              // the buffers, `bytes` each
  long bytes;
  rt_request req[2];      // panel t's broadcast: req[t % 2]
} rt_summa_panels;
// Starts panel t's broadcast; returns where the panel is once rt_summa_wait(o, t) returns.
const void *rt_summa_start(rt_summa_panels *o, int t);
void rt_summa_wait(rt_summa_panels *o, int t);

// SUMMA's forward (kernels.def's summa): for t = 0 .. q-1, `step` gets panel t of a and of b
// (the callers' GEMMs, CPU or CUDA, accumulate their product: the first, t = 0, overwrites).
typedef void rt_summa_step(void *ctx, int t, const void *a, const void *b);
void rt_summa_pairs(rt_summa_panels *a, rt_summa_panels *b, rt_summa_step *step, void *ctx);

// SUMMA's backward (kernels.def's summa_nt, summa_tn): q products, product t of the broadcast
// panel t of `in` (and what the caller holds), each a partial sum reduced to the rank at place
// t along `reduce_axis`. This rank's own product is made in `out` and reduced in place; the
// others in min(q-1, 2) buffers of `count` elements at `prod` that take turns. `product`
// writes the product of a panel (the callers' GEMMs: CPU or CUDA) into its first argument.
typedef void rt_summa_product(void *ctx, void *out, const void *panel);
void rt_summa_reduced(rt_summa_panels *in, int reduce_axis, void *out, void *prod, long count,
                      int dtype, rt_summa_product *product, void *ctx);

// Of this rank's v columns of a table or logits vocabulary-parallel over a mesh
// axis, those that are not padding: the vocabulary has `vocab` entries, rank r
// along the axis holds [r*v, (r+1)*v) of it.
long rt_vocab_columns(int axis, long v, long vocab);

#endif
