// The distributed state of a training program: its mesh of ranks and the
// kernels that lowered code calls for collectives, over comm.h.
//
// The mesh is dp x tp ranks, tensor-parallel ranks adjacent: world rank
// r = d * tp + t. Collectives name a mesh axis (RT_AXIS_DP, RT_AXIS_TP) and a
// request slot: a collective starts in one place of the step and its
// comm_wait finishes it in another (gradients reduced while backward goes on).
//
// Micro-batches: train.c runs forward and backward micro_total times per step
// (rt_dist.micro = 0, 1, ...). Accumulation restarts at micro-batch 0, and
// collectives marked last_micro run only after the last micro-batch.
#ifndef MTC_RT_DIST_H
#define MTC_RT_DIST_H

#include "comm.h"

enum { RT_AXIS_DP, RT_AXIS_TP };

typedef struct rt_dist_state {
  int dp, tp;                 // the mesh
  int dp_rank, tp_rank;       // this rank's place in it
  rt_group *group[2];         // [RT_AXIS_DP]: ranks holding the same model part; [RT_AXIS_TP]
  int micro, micro_total;     // the micro-batch running, and how many a step has
  int nslots;
  rt_request *req;            // one per slot
} rt_dist_state;

// One rank, one micro-batch until rt_dist_init says otherwise (the
// interpreter and one-rank programs never call it).
extern rt_dist_state rt_dist;

// After rt_comm_init: the mesh's groups and nslots request slots.
void rt_dist_init(int dp, int tp, int micro_total, int nslots);

// Collectives on a flat buffer x of n floats over a mesh axis (comm.h has the
// meaning of each). avg: mean instead of sum. last_micro: only after the
// last micro-batch of the step.
void rt_comm_all_reduce(int axis, float *x, long n, int avg, int slot, int last_micro);
void rt_comm_reduce_scatter(int axis, float *x, long n, int avg, int slot, int last_micro);
void rt_comm_all_gather(int axis, float *x, long n, int slot);
void rt_comm_wait(int slot, int last_micro);
// Every slot's collective, finished (before gradients are read: --dump-grads).
void rt_comm_wait_all(void);

// out[dp_rank * k + i] = x[i]: this rank's shard into its place in a whole
// bucket (the rest is filled by an all-gather).
void rt_unshard(float *out, const float *x, long k);
// acc = scale * x at micro-batch 0, then acc += scale * x.
void rt_accumulate(float *acc, const float *x, long n, float scale);

// ---- tensor parallelism --------------------------------------------------------------
//
// A tensor split over the tp ranks along one dim holds, in each of the dim's
// `pieces` equal parts, this rank's contiguous 1/tp (Megatron's fused QKV
// weight: this rank's q, k and v columns side by side). Viewed around that dim
// it is [outer][pieces][chunk] on each rank and [outer][pieces][tp][chunk]
// whole.

// part = rank's part of whole; whole's place for rank's part = part.
void rt_tp_take(float *part, const float *whole, long outer, long pieces, long chunk, int rank,
                int tp);
void rt_tp_place(float *whole, const float *part, long outer, long pieces, long chunk, int rank,
                 int tp);
// out = every tp rank's part of x, placed (scratch: tp x numel(x) floats).
void rt_tp_gather(float *out, float *scratch, const float *x, long outer, long pieces, long chunk);
// out = this tp rank's part of x.
void rt_tp_slice(float *out, const float *x, long outer, long pieces, long chunk);
// Embedding over a table split on its rows (vocabulary-parallel): this rank
// holds rows [tp_rank * v, (tp_rank + 1) * v); other rows look up zeros, so
// out is this rank's term of a sum over tp.
void rt_embedding_vp_fwd(float *out, const float *w, const int *idx, long n, long c, long v);
// Cross-entropy over logits split on the vocabulary (v columns per rank):
// each row's max and sum of exponentials are all-reduced over tp; stats[i]
// keeps the row's logsumexp for backward (stats[n + i] is scratch); loss is
// this rank's term of the mean (the rows whose target it holds). Columns at
// or past `vocab` of the whole are padding (a vocabulary padded to a multiple
// of tp): they take no part.
void rt_vp_crossentropy_fwd(float *loss, float *stats, const float *logits, const int *targets,
                            long n, long v, long vocab);
// dlogits = (softmax - onehot(target)) * dloss / n on this rank's columns,
// zero on the padding.
void rt_vp_crossentropy_bwd(float *dlogits, const float *dloss, const float *logits,
                            const int *targets, const float *stats, long n, long v, long vocab);

#endif
