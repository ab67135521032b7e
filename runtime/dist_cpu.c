// The CPU build's kernels of dist.h's part of kernels.def: shards of buckets,
// gradient accumulation over micro-batches, tensor parallelism and the
// vocabulary-parallel embedding and loss. They run on host memory and call
// the collectives of comm.h; kernels_cuda.cu has their device twins.
#include <math.h>
#include <string.h>

#include "dist.h"
#include "kernels.h"

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

void rt_vp_crossentropy_fwd(float *loss, float *stats, const float *logits, const int *targets,
                            long n, long v, long vocab, long ignore) {
  float *mx = stats, *sum = stats + n;
  long lo = (long)rt_dist.tp_rank * v, cols = rt_vocab_columns(v, vocab);
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
    if (targets[i] != ignore && t >= 0 && t < v)
      part += lse - (double)logits[i * v + t];
  }
  long count = rt_counted_rows(targets, n, ignore);
  loss[0] = count > 0 ? (float)(part / (double)count) : 0.0f;
}

void rt_vp_crossentropy_bwd(float *dlogits, const float *dloss, const float *logits,
                            const int *targets, const float *stats, long n, long v, long vocab,
                            long ignore) {
  long count = rt_counted_rows(targets, n, ignore);
  float g = count ? dloss[0] / (float)count : 0.0f;
  long lo = (long)rt_dist.tp_rank * v, cols = rt_vocab_columns(v, vocab);
#pragma omp parallel for if (n * v >= 65536)
  for (long i = 0; i < n; i++) {
    const float *row = logits + i * v;
    float *drow = dlogits + i * v;
    double lse = stats[i];
    if (targets[i] == ignore) {
      memset(drow, 0, (size_t)v * sizeof *drow);
      continue;
    }
    for (long j = 0; j < cols; j++)
      drow[j] = g * (float)exp((double)row[j] - lse);
    for (long j = cols; j < v; j++)
      drow[j] = 0.0f;
    long t = targets[i] - lo;
    if (t >= 0 && t < v)
      drow[t] -= g;
  }
}
