// The distributed state and the collective kernels (see dist.h).
#include "dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rt_dist_state rt_dist = {.dp = 1, .tp = 1, .micro_total = 1};

void rt_dist_init(int dp, int tp, int micro_total, int nslots) {
  int rank = rt_comm_rank();
  rt_dist.dp = dp;
  rt_dist.tp = tp;
  rt_dist.dp_rank = rank / tp;
  rt_dist.tp_rank = rank % tp;
  // ranks with the same tp_rank hold the same part of the model: a dp group;
  // ranks with the same dp_rank split one replica: a tp group
  rt_dist.group[RT_AXIS_DP] = rt_group_split(rt_group_world(), rt_dist.tp_rank, rt_dist.dp_rank);
  rt_dist.group[RT_AXIS_TP] = rt_group_split(rt_group_world(), rt_dist.dp_rank, rt_dist.tp_rank);
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

void rt_comm_all_reduce(int axis, float *x, long n, int avg, int slot, int last_micro) {
  if (skip(last_micro))
    return;
  rt_allreduce(rt_dist.group[axis], x, n, avg ? RT_REDUCE_AVG : RT_REDUCE_SUM, slot_req(slot));
}

void rt_comm_reduce_scatter(int axis, float *x, long n, int avg, int slot, int last_micro) {
  if (skip(last_micro))
    return;
  rt_reduce_scatter(rt_dist.group[axis], x, n, avg ? RT_REDUCE_AVG : RT_REDUCE_SUM,
                    slot_req(slot));
}

void rt_comm_all_gather(int axis, float *x, long n, int slot) {
  rt_allgather(rt_dist.group[axis], x, n, slot_req(slot));
}

void rt_comm_wait(int slot, int last_micro) {
  if (skip(last_micro))
    return;
  rt_wait(slot_req(slot));
}

void rt_comm_wait_all(void) {
  for (int i = 0; i < rt_dist.nslots; i++)
    rt_wait(&rt_dist.req[i]);
}

void rt_unshard(float *out, const float *x, long k) {
  memcpy(out + (long)rt_dist.dp_rank * k, x, (size_t)k * sizeof *x);
}

void rt_accumulate(float *acc, const float *x, long n, float scale) {
  int first = rt_dist.micro == 0;
#pragma omp parallel for if (n >= 65536)
  for (long i = 0; i < n; i++)
    acc[i] = (first ? 0.0f : acc[i]) + scale * x[i];
}

// ---- tensor parallelism ----

void rt_tp_take(float *part, const float *whole, long outer, long pieces, long chunk, int rank,
                int tp) {
  for (long o = 0; o < outer * pieces; o++)
    memcpy(part + o * chunk, whole + (o * tp + rank) * chunk, (size_t)chunk * sizeof *part);
}

void rt_tp_place(float *whole, const float *part, long outer, long pieces, long chunk, int rank,
                 int tp) {
  for (long o = 0; o < outer * pieces; o++)
    memcpy(whole + (o * tp + rank) * chunk, part + o * chunk, (size_t)chunk * sizeof *part);
}

void rt_tp_gather(float *out, float *scratch, const float *x, long outer, long pieces,
                  long chunk) {
  long n = outer * pieces * chunk;
  int tp = rt_dist.tp;
  memcpy(scratch + (long)rt_dist.tp_rank * n, x, (size_t)n * sizeof *x);
  rt_allgather(rt_dist.group[RT_AXIS_TP], scratch, n * tp, NULL);
  for (int r = 0; r < tp; r++)
    rt_tp_place(out, scratch + r * n, outer, pieces, chunk, r, tp);
}

void rt_tp_slice(float *out, const float *x, long outer, long pieces, long chunk) {
  rt_tp_take(out, x, outer, pieces, chunk, rt_dist.tp_rank, rt_dist.tp);
}

void rt_embedding_vp_fwd(float *out, const float *w, const int *idx, long n, long c, long v) {
  long lo = (long)rt_dist.tp_rank * v;
#pragma omp parallel for if (n * c >= 65536)
  for (long i = 0; i < n; i++) {
    long row = idx[i] - lo;
    if (row >= 0 && row < v)
      memcpy(out + i * c, w + row * c, (size_t)c * sizeof *out);
    else
      memset(out + i * c, 0, (size_t)c * sizeof *out);
  }
}

// Columns of this rank's v that are not padding.
static long vocab_columns(long v, long vocab) {
  long have = vocab - (long)rt_dist.tp_rank * v;
  return have < 0 ? 0 : have < v ? have : v;
}

void rt_vp_crossentropy_fwd(float *loss, float *stats, const float *logits, const int *targets,
                            long n, long v, long vocab) {
  float *mx = stats, *sum = stats + n;
  long lo = (long)rt_dist.tp_rank * v, cols = vocab_columns(v, vocab);
#pragma omp parallel for if (n * v >= 65536)
  for (long i = 0; i < n; i++) {
    const float *row = logits + i * v;
    float m = -INFINITY;
    for (long j = 0; j < cols; j++)
      m = row[j] > m ? row[j] : m;
    mx[i] = m;
  }
  rt_allreduce(rt_dist.group[RT_AXIS_TP], mx, n, RT_REDUCE_MAX, NULL);
#pragma omp parallel for if (n * v >= 65536)
  for (long i = 0; i < n; i++) {
    const float *row = logits + i * v;
    double s = 0.0;
    for (long j = 0; j < cols; j++)
      s += exp((double)row[j] - (double)mx[i]);
    sum[i] = (float)s;
  }
  rt_allreduce(rt_dist.group[RT_AXIS_TP], sum, n, RT_REDUCE_SUM, NULL);
  double part = 0.0;
  for (long i = 0; i < n; i++) {
    double lse = (double)mx[i] + log((double)sum[i]);
    stats[i] = (float)lse;
    long t = targets[i] - lo;
    if (t >= 0 && t < v)
      part += lse - (double)logits[i * v + t];
  }
  loss[0] = n > 0 ? (float)(part / (double)n) : 0.0f;
}

void rt_vp_crossentropy_bwd(float *dlogits, const float *dloss, const float *logits,
                            const int *targets, const float *stats, long n, long v, long vocab) {
  if (n <= 0)
    return;
  float g = dloss[0] / (float)n;
  long lo = (long)rt_dist.tp_rank * v, cols = vocab_columns(v, vocab);
#pragma omp parallel for if (n * v >= 65536)
  for (long i = 0; i < n; i++) {
    const float *row = logits + i * v;
    float *drow = dlogits + i * v;
    double lse = stats[i];
    for (long j = 0; j < cols; j++)
      drow[j] = g * (float)exp((double)row[j] - lse);
    for (long j = cols; j < v; j++)
      drow[j] = 0.0f;
    long t = targets[i] - lo;
    if (t >= 0 && t < v)
      drow[t] -= g;
  }
}
