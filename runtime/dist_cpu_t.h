// The typed kernels of runtime/dist_cpu.c, written once over the element type
// RT_T (runtime/cpu_variants.h includes this file once per variant; see
// runtime/kernels_cpu_t.h for the names it defines). No include guard.
#if RT_KT

void RT_NAME(unshard)(RT_T *out, const RT_T *x, long k) {
  memcpy(out + (long)rt_dist.dp_rank * k, x, (size_t)k * sizeof *x);
}

void RT_NAME(accumulate)(RT_T *acc, const RT_T *x, long n, float scale) {
  int first = rt_dist.micro == 0;
#pragma omp parallel for if (n >= 65536)
  for (long i = 0; i < n; i++) acc[i] = TO_T((first ? 0.0f : LD(acc[i])) + scale * LD(x[i]));
}

// ---- tensor parallelism ----

void RT_NAME(tp_gather)(RT_T *out, RT_T *scratch, const RT_T *x, long outer, long pieces,
                        long chunk) {
  long n = outer * pieces * chunk;
  int tp = rt_dist.tp;
  memcpy(scratch + (long)rt_dist.tp_rank * n, x, (size_t)n * sizeof *x);
  rt_allgather_typed(rt_dist.group[RT_AXIS_TP], scratch, n * tp, RT_DTYPE, NULL);
  for (int r = 0; r < tp; r++)
    rt_tp_place_bytes(out, scratch + r * n, outer, pieces, chunk, r, tp, sizeof *x);
}

void RT_NAME(tp_slice)(RT_T *out, const RT_T *x, long outer, long pieces, long chunk) {
  rt_tp_take_bytes(out, x, outer, pieces, chunk, rt_dist.tp_rank, rt_dist.tp, sizeof *x);
}

void RT_NAME(tp_reduce_scatter)(RT_T *out, RT_T *scratch, const RT_T *x, long outer, long pieces,
                                long chunk) {
  long n = outer * pieces * chunk;
  int tp = rt_dist.tp;
  for (int r = 0; r < tp; r++)   // rank r's part first, then the next rank's: the shards in order
    rt_tp_take_bytes(scratch + r * n, x, outer, pieces, chunk, r, tp, sizeof *x);
  rt_reduce_scatter_typed(rt_dist.group[RT_AXIS_TP], scratch, n * tp, RT_DTYPE, RT_REDUCE_SUM,
                          NULL);
  memcpy(out, scratch + (long)rt_dist.tp_rank * n, (size_t)n * sizeof *x);
}

void RT_NAME(embedding_vp_fwd)(RT_T *out, const RT_T *w, const int *idx, long n, long c, long v) {
  long lo = (long)rt_dist.tp_rank * v;
#pragma omp parallel for if (n * c >= 65536)
  for (long i = 0; i < n; i++) {
    long row = idx[i] - lo;
    if (row >= 0 && row < v)
      memcpy(out + i * c, w + row * c, (size_t)c * sizeof *out);
    else
      memset(out + i * c, 0, (size_t)c * sizeof *out);  // +0 in float32 and in bf16
  }
}

void RT_NAME(vp_crossentropy_fwd)(float *loss, float *stats, const RT_T *logits,
                                  const int *targets, long n, long v, long vocab, long ignore) {
  float *mx = stats, *sum = stats + n;
  long lo = (long)rt_dist.tp_rank * v, cols = rt_vocab_columns(v, vocab);
#pragma omp parallel for if (n * v >= 65536)
  for (long i = 0; i < n; i++) {
    const RT_T *row = logits + i * v;
    float m = -INFINITY;
    for (long j = 0; j < cols; j++)
      m = LD(row[j]) > m ? LD(row[j]) : m;
    mx[i] = m;
  }
  rt_allreduce(rt_dist.group[RT_AXIS_TP], mx, n, RT_REDUCE_MAX, NULL);
#pragma omp parallel for if (n * v >= 65536)
  for (long i = 0; i < n; i++) {
    const RT_T *row = logits + i * v;
    double s = 0.0;
    for (long j = 0; j < cols; j++)
      s += exp((double)LD(row[j]) - (double)mx[i]);
    sum[i] = (float)s;
  }
  rt_allreduce(rt_dist.group[RT_AXIS_TP], sum, n, RT_REDUCE_SUM, NULL);
  double part = 0.0;
  for (long i = 0; i < n; i++) {
    double lse = (double)mx[i] + log((double)sum[i]);
    stats[i] = (float)lse;
    long t = targets[i] - lo;
    if (targets[i] != ignore && t >= 0 && t < v)
      part += lse - (double)LD(logits[i * v + t]);
  }
  long count = rt_counted_rows(targets, n, ignore);
  loss[0] = count > 0 ? (float)(part / (double)count) : 0.0f;
}

void RT_NAME(vp_crossentropy_bwd)(RT_T *dlogits, const float *dloss, const RT_T *logits,
                                  const int *targets, const float *stats, long n, long v,
                                  long vocab, long ignore) {
  long count = rt_counted_rows(targets, n, ignore);
  float g = count ? dloss[0] / (float)count : 0.0f;
  long lo = (long)rt_dist.tp_rank * v, cols = rt_vocab_columns(v, vocab);
#pragma omp parallel for if (n * v >= 65536)
  for (long i = 0; i < n; i++) {
    const RT_T *row = logits + i * v;
    RT_T *drow = dlogits + i * v;
    double lse = stats[i];
    if (targets[i] == ignore) {
      memset(drow, 0, (size_t)v * sizeof *drow);
      continue;
    }
    for (long j = 0; j < cols; j++)
      drow[j] = TO_T(g * (float)exp((double)LD(row[j]) - lse));
    for (long j = cols; j < v; j++)
      drow[j] = TO_T(0.0f);
    long t = targets[i] - lo;
    if (t >= 0 && t < v)
      drow[t] = TO_T(LD(drow[t]) - g);
  }
}

#endif  // RT_KT
