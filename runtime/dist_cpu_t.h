// The typed kernels of runtime/dist_cpu.c, written once over the element type
// RT_T (runtime/cpu_variants.h includes this file once per variant; see
// runtime/kernels_cpu_t.h for the names it defines). No include guard.
#if RT_KT

void RT_NAME(accumulate)(RT_T *acc, const RT_T *x, long n, float scale) {
  int first = rt_dist.micro == 0;
#pragma omp parallel for if (n >= 65536)
  for (long i = 0; i < n; i++) acc[i] = TO_T((first ? 0.0f : LD(acc[i])) + scale * LD(x[i]));
}

// ---- tensor parallelism ----

void RT_NAME(tp_gather)(int axis, RT_T *out, RT_T *scratch, const RT_T *x, long outer,
                        long pieces, long chunk) {
  long n = outer * pieces * chunk;
  int size = rt_axis_size(axis);
  memcpy(scratch + (long)rt_axis_rank(axis) * n, x, (size_t)n * sizeof *x);
  rt_allgather_typed(rt_dist.group[axis], scratch, n * size, RT_DTYPE, NULL);
  for (int r = 0; r < size; r++)
    rt_tp_place_bytes(out, scratch + r * n, outer, pieces, chunk, r, size, sizeof *x);
}

void RT_NAME(tp_slice)(int axis, RT_T *out, const RT_T *x, long outer, long pieces, long chunk) {
  rt_tp_take_bytes(out, x, outer, pieces, chunk, rt_axis_rank(axis), rt_axis_size(axis),
                   sizeof *x);
}

void RT_NAME(tp_reduce_scatter)(int axis, RT_T *out, RT_T *scratch, const RT_T *x, long outer,
                                long pieces, long chunk) {
  long n = outer * pieces * chunk;
  int size = rt_axis_size(axis);
  for (int r = 0; r < size; r++)   // rank r's part first, then the next rank's: the shards in order
    rt_tp_take_bytes(scratch + r * n, x, outer, pieces, chunk, r, size, sizeof *x);
  rt_reduce_scatter_typed(rt_dist.group[axis], scratch, n * size, RT_DTYPE, RT_REDUCE_SUM, NULL);
  memcpy(out, scratch + (long)rt_axis_rank(axis) * n, (size_t)n * sizeof *x);
}

// SUMMA's forward (runtime/dist.h's rt_summa_pairs): each pair of panels' product in float32,
// added to the sum (c itself in float32), which a bf16 c gets rounded once.
typedef struct RT_LOCAL(summa_fwd) {
  float *acc, *part;
  long m, n, k;
} RT_LOCAL(summa_fwd);

static void RT_LOCAL(summa_step)(void *ctx, int t, const void *a, const void *b) {
  const RT_LOCAL(summa_fwd) *s = ctx;
  long mn = s->m * s->n;
  RT_NAME_TF(matmul)(t ? s->part : s->acc, a, b, 1, s->m, s->n, s->k, 0, 0, 0, 0, 0);
  if (t) {
#pragma omp parallel for if (mn >= 65536)
    for (long i = 0; i < mn; i++) s->acc[i] += s->part[i];
  }
}

void RT_NAME(summa)(RT_T *c, RT_T *apanel, RT_T *bpanel, const RT_T *a, const RT_T *b, long m,
                    long n, long k) {
  rt_summa_panels pa = {RT_AXIS_COL, a, (char *)apanel, m * k * (long)sizeof *a, {{0}}};
  rt_summa_panels pb = {RT_AXIS_ROW, b, (char *)bpanel, k * n * (long)sizeof *b, {{0}}};
  float *part = rt_cpu_alloc(m * n);
  RT_LOCAL(summa_fwd) s = {RT_T_F32 ? (float *)c : rt_cpu_alloc(m * n), part, m, n, k};
  rt_summa_pairs(&pa, &pb, RT_LOCAL(summa_step), &s);
  if (!RT_T_F32) {
    for (long i = 0; i < m * n; i++) c[i] = TO_T(s.acc[i]);
    rt_cpu_free(s.acc);
  }
  rt_cpu_free(part);
}

// The products of SUMMA's backward (runtime/dist.h's rt_summa_reduced): dy [m, n], panels of
// w [k, n] or of x [m, k].
typedef struct RT_LOCAL(summa_bwd) {
  const RT_T *dy;
  long m, n, k;
} RT_LOCAL(summa_bwd);

static void RT_LOCAL(summa_dx)(void *ctx, void *out, const void *w) {
  const RT_LOCAL(summa_bwd) *s = ctx;
  RT_NAME(matmul)(out, s->dy, w, 1, s->m, s->k, s->n, 0, 1, 0, 0, 0);
}

static void RT_LOCAL(summa_dw)(void *ctx, void *out, const void *x) {
  const RT_LOCAL(summa_bwd) *s = ctx;
  RT_NAME(matmul)(out, x, s->dy, 1, s->k, s->n, s->m, 1, 0, 0, 0, 0);
}

void RT_NAME(summa_nt)(RT_T *dx, RT_T *wpanel, RT_T *prod, const RT_T *dy, const RT_T *w, long m,
                       long n, long k) {
  rt_summa_panels pw = {RT_AXIS_ROW, w, (char *)wpanel, k * n * (long)sizeof *w, {{0}}};
  RT_LOCAL(summa_bwd) s = {dy, m, n, k};
  rt_summa_reduced(&pw, RT_AXIS_COL, dx, prod, m * k, RT_DTYPE, RT_LOCAL(summa_dx), &s);
}

void RT_NAME(summa_tn)(RT_T *dw, RT_T *xpanel, RT_T *prod, const RT_T *x, const RT_T *dy, long m,
                       long n, long k) {
  rt_summa_panels px = {RT_AXIS_COL, x, (char *)xpanel, m * k * (long)sizeof *x, {{0}}};
  RT_LOCAL(summa_bwd) s = {dy, m, n, k};
  rt_summa_reduced(&px, RT_AXIS_ROW, dw, prod, k * n, RT_DTYPE, RT_LOCAL(summa_dw), &s);
}

void RT_NAME(embedding_vp_fwd)(int axis, RT_T *out, const RT_T *w, const int *idx, long n, long c,
                               long v) {
  long lo = (long)rt_axis_rank(axis) * v;
#pragma omp parallel for if (n * c >= 65536)
  for (long i = 0; i < n; i++) {
    long row = idx[i] - lo;
    if (row >= 0 && row < v)
      memcpy(out + i * c, w + row * c, (size_t)c * sizeof *out);
    else
      memset(out + i * c, 0, (size_t)c * sizeof *out);  // +0 in float32 and in bf16
  }
}

void RT_NAME(vp_crossentropy_fwd)(int axis, float *loss, float *stats, const RT_T *logits,
                                  const int *targets, long n, long v, long vocab, long ignore) {
  float *mx = stats, *sum = stats + n;
  long lo = (long)rt_axis_rank(axis) * v, cols = rt_vocab_columns(axis, v, vocab);
#pragma omp parallel for if (n * v >= 65536)
  for (long i = 0; i < n; i++) {
    const RT_T *row = logits + i * v;
    float m = -INFINITY;
    for (long j = 0; j < cols; j++)
      m = LD(row[j]) > m ? LD(row[j]) : m;
    mx[i] = m;
  }
  rt_allreduce(rt_dist.group[axis], mx, n, RT_REDUCE_MAX, NULL);
#pragma omp parallel for if (n * v >= 65536)
  for (long i = 0; i < n; i++) {
    const RT_T *row = logits + i * v;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (long j = 0; j < cols; j++)
      s += exp_fast(LD(row[j]) - mx[i]);
    sum[i] = (float)s;
  }
  rt_allreduce(rt_dist.group[axis], sum, n, RT_REDUCE_SUM, NULL);
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

void RT_NAME(vp_crossentropy_bwd)(int axis, RT_T *dlogits, const float *dloss, const RT_T *logits,
                                  const int *targets, const float *stats, long n, long v,
                                  long vocab, long ignore) {
  long count = rt_counted_rows(targets, n, ignore);
  float g = count ? dloss[0] / (float)count : 0.0f;
  long lo = (long)rt_axis_rank(axis) * v, cols = rt_vocab_columns(axis, v, vocab);
#pragma omp parallel for if (n * v >= 65536)
  for (long i = 0; i < n; i++) {
    const RT_T *row = logits + i * v;
    RT_T *drow = dlogits + i * v;
    double lse = stats[i];
    if (targets[i] == ignore) {
      memset(drow, 0, (size_t)v * sizeof *drow);
      continue;
    }
    float at = (float)lse;
#pragma omp simd
    for (long j = 0; j < cols; j++)
      drow[j] = TO_T(g * exp_fast(LD(row[j]) - at));
    for (long j = cols; j < v; j++)
      drow[j] = TO_T(0.0f);
    long t = targets[i] - lo;
    if (t >= 0 && t < v)
      drow[t] = TO_T(LD(drow[t]) - g);
  }
}

#endif  // RT_KT

// ---- norms over a dim split along a mesh axis (Optimus 2D) ----
//
// Each rank holds c columns of every row, the whole row c x (the axis's
// ranks); the rows' statistics are all-reduced along the axis. Two passes, as
// the one-rank kernels: the mean, then the variance about it (RMSNorm: the
// mean square alone). Rows (and dw's columns) are split over OpenMP's
// threads, each summed in its own order, so every thread count gives the
// same bits.

// v (n floats) summed over the axis's ranks.
static void RT_LOCAL(rows_allreduce)(int axis, float *v, long n) {
  if (rt_axis_size(axis) > 1) rt_allreduce(rt_dist.group[axis], v, n, RT_REDUCE_SUM, NULL);
}

// Each row's mean (0 when not centered) and 1 / sqrt(variance + eps) over the whole row.
static void RT_LOCAL(split_stats)(int axis, float *mean, float *rstd, const RT_T *x, long n,
                                  long c, float eps, bool centered) {
  float whole = (float)(c * rt_axis_size(axis));
#pragma omp parallel for if (n * c >= 65536)
  for (long i = 0; i < n; i++) {
    float s = 0.0f;
    for (long j = 0; centered && j < c; j++) s += LD(x[i * c + j]);
    mean[i] = s;
  }
  if (centered) RT_LOCAL(rows_allreduce)(axis, mean, n);
#pragma omp parallel for if (n * c >= 65536)
  for (long i = 0; i < n; i++) {
    float m = mean[i] / whole, q = 0.0f;
    for (long j = 0; j < c; j++) {
      float d = LD(x[i * c + j]) - m;
      q += d * d;
    }
    mean[i] = m;
    rstd[i] = q;
  }
  RT_LOCAL(rows_allreduce)(axis, rstd, n);
  for (long i = 0; i < n; i++) rstd[i] = 1.0f / sqrtf(rstd[i] / whole + eps);
}

static float *RT_LOCAL(stats_buffer)(long n, int k) {
  float *s = malloc((size_t)(n > 0 ? n : 1) * (size_t)k * sizeof *s);
  if (!s) {
    fputs("train: error: out of memory for a norm's row statistics\n", stderr);
    exit(1);
  }
  return s;
}

// dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy*w,
// the means over the whole row; dw = sum_rows dy * norm, db = sum_rows dy
// over this rank's rows (a partial sum over the axes the rows are split on).
static void RT_LOCAL(norm_bwd_split)(int axis, RT_T *dx, RT_U *dw, RT_U *db, const RT_T *dy,
                                     const RT_T *x, const RT_T *w, long n, long c, float eps,
                                     bool centered) {
  float *mean = RT_LOCAL(stats_buffer)(n, 4), *rstd = mean + n, *sums = mean + 2 * n;
  float whole = (float)(c * rt_axis_size(axis));
  RT_LOCAL(split_stats)(axis, mean, rstd, x, n, c, eps, centered);
#pragma omp parallel for if (n * c >= 65536)
  for (long i = 0; i < n; i++) {
    float a1 = 0.0f, a2 = 0.0f;   // sums of dnorm, dnorm * norm
    for (long j = 0; j < c; j++) {
      float dn = LD(dy[i * c + j]) * LD(w[j]);
      a1 += dn;
      a2 += dn * ((LD(x[i * c + j]) - mean[i]) * rstd[i]);
    }
    sums[2 * i] = a1;
    sums[2 * i + 1] = a2;
  }
  RT_LOCAL(rows_allreduce)(axis, sums, 2 * n);
#pragma omp parallel for if (n * c >= 65536)
  for (long j = 0; j < c; j++) {
    float aw = 0.0f, ab = 0.0f;
    for (long i = 0; i < n; i++) {
      float d = LD(dy[i * c + j]);
      aw += d * ((LD(x[i * c + j]) - mean[i]) * rstd[i]);
      ab += d;
    }
    dw[j] = TO_U(aw);
    if (db) db[j] = TO_U(ab);
  }
#pragma omp parallel for if (n * c >= 65536)
  for (long i = 0; i < n; i++) {
    float dm = centered ? sums[2 * i] / whole : 0.0f, dnm = sums[2 * i + 1] / whole;
    for (long j = 0; j < c; j++) {
      float norm = (LD(x[i * c + j]) - mean[i]) * rstd[i];
      dx[i * c + j] = TO_T((LD(dy[i * c + j]) * LD(w[j]) - dm - norm * dnm) * rstd[i]);
    }
  }
  free(mean);
}

void RT_NAME(layernorm_bwd_split)(int axis, RT_T *dx, RT_U *dw, RT_U *db, const RT_T *dy,
                                  const RT_T *x, const RT_T *w, long n, long c, float eps) {
  RT_LOCAL(norm_bwd_split)(axis, dx, dw, db, dy, x, w, n, c, eps, true);
}

void RT_NAME(rmsnorm_bwd_split)(int axis, RT_T *dx, RT_U *dw, const RT_T *dy, const RT_T *x,
                                const RT_T *w, long n, long c, float eps) {
  RT_LOCAL(norm_bwd_split)(axis, dx, dw, NULL, dy, x, w, n, c, eps, false);
}

#if RT_KT
static void RT_LOCAL(norm_fwd_split)(int axis, RT_T *y, const RT_T *x, const RT_T *w,
                                     const RT_T *b, long n, long c, float eps, bool centered) {
  float *mean = RT_LOCAL(stats_buffer)(n, 2), *rstd = mean + n;
  RT_LOCAL(split_stats)(axis, mean, rstd, x, n, c, eps, centered);
#pragma omp parallel for if (n * c >= 65536)
  for (long i = 0; i < n; i++)
    for (long j = 0; j < c; j++) {
      float v = (LD(x[i * c + j]) - mean[i]) * rstd[i] * LD(w[j]);
      y[i * c + j] = TO_T(b ? v + LD(b[j]) : v);
    }
  free(mean);
}

void RT_NAME(layernorm_fwd_split)(int axis, RT_T *y, const RT_T *x, const RT_T *w, const RT_T *b,
                                  long n, long c, float eps) {
  RT_LOCAL(norm_fwd_split)(axis, y, x, w, b, n, c, eps, true);
}

void RT_NAME(rmsnorm_fwd_split)(int axis, RT_T *y, const RT_T *x, const RT_T *w, long n, long c,
                                float eps) {
  RT_LOCAL(norm_fwd_split)(axis, y, x, w, NULL, n, c, eps, false);
}
#endif
