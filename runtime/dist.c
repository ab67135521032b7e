// The distributed state and the collectives lowered code calls (see dist.h).
#include "dist.h"
#include "kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rt_dist_state rt_dist = {.dp = 1, .tp = 1, .q = 1, .sub = 1, .micro_total = 1, .rows = 1};
int rt_eval_mode;

void rt_dist_init(int dp, int tp, int q, int sub, int micro_total, int nslots) {
  int rank = rt_comm_rank(), n = tp > 1 ? tp : q * q;   // a replica's ranks
  rt_dist.dp = dp;
  rt_dist.tp = tp;
  rt_dist.q = q;
  rt_dist.sub = sub > 1 ? sub : 1;
  rt_dist.rank = rank;
  rt_dist.dp_rank = rank / n;
  rt_dist.tp_rank = rank % n;
  // ranks with the same tp_rank hold the same part of the model: a dp group;
  // ranks with the same dp_rank split one replica: a tp group (the grid)
  rt_dist.group[RT_AXIS_DP] = rt_group_split(rt_group_world(), rt_dist.tp_rank, rt_dist.dp_rank);
  rt_dist.group[RT_AXIS_TP] = rt_group_split(rt_group_world(), rt_dist.dp_rank, rt_dist.tp_rank);
  rt_dist.group[RT_AXIS_ROW] = rt_dist.group[RT_AXIS_COL] = NULL;
  rt_dist.group[RT_AXIS_SUB] = rt_dist.group[RT_AXIS_SUBDP] = NULL;
  rt_dist.group[RT_AXIS_SUBREP] = NULL;
  rt_dist.group[RT_AXIS_ALL] = rt_group_world();
  if (rt_dist.sub > 1) {   // a sub group: tp_rank / sub alike; subdp: tp_rank % sub alike
    int s = rt_dist.sub, i = rt_dist.tp_rank / s, j = rt_dist.tp_rank % s;
    rt_dist.group[RT_AXIS_SUB] =
        rt_group_split(rt_group_world(), rt_dist.dp_rank * (tp / s) + i, j);
    rt_dist.group[RT_AXIS_SUBDP] = rt_group_split(rt_group_world(), rt_dist.dp_rank * s + j, i);
    rt_dist.group[RT_AXIS_SUBREP] = rt_group_split(rt_group_world(), j,
                                                   rt_axis_rank(RT_AXIS_SUBREP));
  }
  rt_dist.group[RT_AXIS_SUBROW] = NULL;
  if (q > 1) {   // a grid column's ranks (same j), ordered by row; a grid row's, by column (each
                 // grid's own: a replica of tp > q x q holds tp / (q x q) grids side by side)
    int i = rt_axis_rank(RT_AXIS_ROW), j = rt_axis_rank(RT_AXIS_COL);
    int grid = rt_dist.dp_rank * rt_grids() + rt_dist.tp_rank / (q * q);
    rt_dist.group[RT_AXIS_ROW] = rt_group_split(rt_group_world(), grid * q + j, i);
    rt_dist.group[RT_AXIS_COL] = rt_group_split(rt_group_world(), grid * q + i, j);
    rt_dist.group[RT_AXIS_SUBROW] =   // the grids' rows: one grid's are ROW's
        rt_grids() == 1 ? rt_dist.group[RT_AXIS_ROW]
                        : rt_group_split(rt_group_world(), rt_dist.dp_rank * q + j,
                                         rt_axis_rank(RT_AXIS_SUBROW));
  }
  rt_dist.micro = 0;
  rt_dist.micro_total = micro_total;
  rt_dist.nslots = nslots;
  free(rt_dist.req);  // a second init (tests) replaces the first's slots
  rt_dist.req = calloc((size_t)(nslots > 0 ? nslots : 1), sizeof *rt_dist.req);
  if (!rt_dist.req) {
    fputs("train: error: out of memory\n", stderr);
    exit(1);
  }
}

static rt_request *slot_req(int slot) {
  if (slot < 0 || slot >= rt_dist.nslots) {
    fprintf(stderr, "train: error: collective slot %d of %d (model and runtime disagree)\n",
            slot, rt_dist.nslots);
    exit(1);
  }
  return &rt_dist.req[slot];
}

static int skip(int last_micro) {
  return last_micro && rt_dist.micro != rt_dist.micro_total - 1;
}

// A reduction's average: the mean over the mesh's replicas. Over the dp axis that is the
// group's mean; over all ranks (the bucket of a block data parallel over tp, each rank's
// gradients a partial sum over tp of its replica's) or a sub block's replicas (partial sums
// over subdp) the sum divided by dp.
static int reduce_op(int axis, int avg) {
  return !avg ? RT_REDUCE_SUM
         : axis == RT_AXIS_ALL || axis == RT_AXIS_SUBREP ? rt_reduce_mean(rt_dist.dp)
                                                         : RT_REDUCE_AVG;
}

// The collectives of lowered code, one per element type of RT_T_VARIANTS
// (rt_comm_all_reduce, rt_comm_all_reduce_bf16, ...).
#define COMM_KERNELS(suffix, T, ...)                                                          \
  void rt_comm_all_reduce##suffix(int axis, RT_CTYPE_##T *x, long n, int avg, int slot,       \
                                  int last_micro) {                                           \
    if (skip(last_micro))                                                                     \
      return;                                                                                 \
    rt_allreduce_typed(rt_dist.group[axis], x, n, RT_##T, reduce_op(axis, avg),              \
                       slot_req(slot));                                                       \
  }                                                                                           \
  void rt_comm_reduce_scatter##suffix(int axis, RT_CTYPE_##T *x, long n, int avg, int slot,   \
                                      int last_micro) {                                       \
    if (skip(last_micro))                                                                     \
      return;                                                                                 \
    rt_reduce_scatter_typed(rt_dist.group[axis], x, n, RT_##T, reduce_op(axis, avg),          \
                            slot_req(slot));                                                  \
  }                                                                                           \
  void rt_comm_all_gather##suffix(int axis, RT_CTYPE_##T *x, long n, int slot) {              \
    rt_allgather_typed(rt_dist.group[axis], x, n, RT_##T, slot_req(slot));                    \
  }
RT_T_VARIANTS(COMM_KERNELS, _)
#undef COMM_KERNELS

void rt_comm_wait(int slot, int last_micro) {
  if (skip(last_micro))
    return;
  rt_wait(slot_req(slot));
}

void rt_comm_wait_all(void) {
  for (int i = 0; i < rt_dist.nslots; i++)
    rt_wait(&rt_dist.req[i]);
}

// ---- tensor parallelism ----

// The buffer that the panel (or product) t of other ranks takes, seen from place `me`: those
// panels, counted in order, take turns in min(q - 1, 2) buffers.
static int summa_slot(int t, int me, int q) { return (t < me ? t : t - 1) % (q - 1 < 2 ? q - 1 : 2); }

const void *rt_summa_start(rt_summa_panels *o, int t) {
  int me = rt_axis_rank(o->axis);
  void *at = t == me ? (void *)o->own
                     : o->buf + (long)summa_slot(t, me, rt_axis_size(o->axis)) * o->bytes;
  rt_broadcast(rt_dist.group[o->axis], at, o->bytes, t, &o->req[t % 2]);
  return at;
}

void rt_summa_wait(rt_summa_panels *o, int t) { rt_wait(&o->req[t % 2]); }

void rt_summa_pairs(rt_summa_panels *a, rt_summa_panels *b, rt_summa_step *step, void *ctx) {
  const void *at[2] = {rt_summa_start(a, 0), rt_summa_start(b, 0)};
  for (int t = 0; t < rt_dist.q; t++) {
    const void *next[2] = {NULL, NULL};
    if (t + 1 < rt_dist.q)
      next[0] = rt_summa_start(a, t + 1), next[1] = rt_summa_start(b, t + 1);
    rt_summa_wait(a, t), rt_summa_wait(b, t);
    step(ctx, t, at[0], at[1]);
    at[0] = next[0], at[1] = next[1];
  }
}

void rt_summa_reduced(rt_summa_panels *in, int reduce_axis, void *out, void *prod, long count,
                      int dtype, rt_summa_product *product, void *ctx) {
  int q = rt_dist.q, me = rt_axis_rank(reduce_axis);
  size_t bytes = (size_t)count * (size_t)rt_dtype_size(dtype);
  rt_request mine = {0}, theirs[2] = {{0}, {0}};
  const void *at = rt_summa_start(in, 0);
  for (int t = 0; t < q; t++) {
    const void *next = t + 1 < q ? rt_summa_start(in, t + 1) : NULL;
    int slot = t == me ? 0 : summa_slot(t, me, q);
    rt_request *req = t == me ? &mine : &theirs[slot];
    void *dst = t == me ? out : (char *)prod + (size_t)slot * bytes;
    rt_wait(req);          // the buffer's last reduction has read it
    rt_summa_wait(in, t);
    product(ctx, dst, at);
    rt_reduce_typed(rt_dist.group[reduce_axis], dst, count, dtype, RT_REDUCE_SUM, t, req);
    at = next;
  }
  rt_wait(&mine);
  rt_wait(&theirs[0]);
  rt_wait(&theirs[1]);
}

long rt_vocab_columns(int axis, long v, long vocab) {
  long have = vocab - (long)rt_axis_rank(axis) * v;
  return have < 0 ? 0 : have < v ? have : v;
}

void rt_tp_take_bytes(void *part, const void *whole, long outer, long pieces, long chunk, int rank,
                      int tp, size_t size) {
  size_t row = (size_t)chunk * size;
  for (long o = 0; o < outer * pieces; o++)
    memcpy((char *)part + (size_t)o * row, (const char *)whole + (size_t)(o * tp + rank) * row,
           row);
}

void rt_tp_place_bytes(void *whole, const void *part, long outer, long pieces, long chunk,
                       int rank, int tp, size_t size) {
  size_t row = (size_t)chunk * size;
  for (long o = 0; o < outer * pieces; o++)
    memcpy((char *)whole + (size_t)(o * tp + rank) * row, (const char *)part + (size_t)o * row,
           row);
}
