// dist.h's kernels: micro-batches, tensor, vocabulary and 2D parallelism. The CUDA build's kernels,
// each family's launchers after its kernels; included by kernels_cuda.cu after the helpers every
// family shares (ld, to, Pack, the block sums; grid_for, scratch, dev, RT_CUDA_KT).

// ---- dist.h's kernels: micro-batches, tensor and vocabulary parallelism

template <typename T>
__global__ void accumulate_kernel(T *acc, const T *x, long n, float scale, int first) {
  GRID_LOOP(i, n) acc[i] = to<T>((first ? 0.0f : ld(acc[i])) + scale * ld(x[i]));
}

// rows of this rank's part of the table [lo, lo + v), zero for other tokens
template <typename T>
__global__ void embedding_vp_fwd_kernel(T *out, const T *w, const int *idx, long n, long c,
                                        long v, long lo) {
  GRID_LOOP(e, n * c) {
    long i = e / c, row = idx[i] - lo;
    out[e] = row >= 0 && row < v ? w[row * c + e % c] : to<T>(0.0f);
  }
}

// mx[i] = the max of the row's first cols logits, one block per row
template <typename T>
__global__ void vp_max_kernel(float *mx, const T *logits, long n, long v, long cols) {
  for (long row = blockIdx.x; row < n; row += gridDim.x) {
    const T *xr = logits + row * v;
    float m = -INFINITY;
    for (long j = threadIdx.x; j < cols; j += blockDim.x) m = ld(xr[j]) > m ? ld(xr[j]) : m;
    m = block_max(m);
    if (threadIdx.x == 0) mx[row] = m;
  }
}

// sum[i] = sum of exp(logit - mx[i]) over the row's first cols logits
template <typename T>
__global__ void vp_sum_kernel(float *sum, const float *mx, const T *logits, long n, long v,
                              long cols) {
  for (long row = blockIdx.x; row < n; row += gridDim.x) {
    const T *xr = logits + row * v;
    double s = 0.0;
    for (long j = threadIdx.x; j < cols; j += blockDim.x)
      s += exp((double)ld(xr[j]) - (double)mx[row]);
    s = block_sum(s);
    if (threadIdx.x == 0) sum[row] = (float)s;
  }
}

// stats[i] = lse of row i (over the group); loss[0] = this rank's part of the
// mean of lse - logit[target] (one block)
template <typename T>
__global__ void vp_loss_kernel(float *loss, float *stats, const T *logits, const int *targets,
                               long n, long v, long lo, long ignore) {
  double part = 0.0;
  long count = 0;
  for (long i = threadIdx.x; i < n; i += blockDim.x) {
    double lse = (double)stats[i] + log((double)stats[n + i]);
    stats[i] = (float)lse;
    long t = targets[i] - lo;
    count += targets[i] != ignore;
    if (targets[i] != ignore && t >= 0 && t < v) part += lse - (double)ld(logits[i * v + t]);
  }
  part = block_sum(part);
  count = block_sum(count);
  if (threadIdx.x == 0) loss[0] = count ? (float)(part / (double)count) : 0.0f;
}

// The target's column is written, read back and written again, as on the
// CPU (whose bf16 variant rounds it twice too).
template <typename T>
__global__ void vp_crossentropy_bwd_kernel(T *dlogits, const float *dloss, const T *logits,
                                           const int *targets, const float *stats, long n, long v,
                                           long cols, long lo, const long *count, long ignore) {
  float g = *count ? dloss[0] / (float)*count : 0.0f;
  for (long row = blockIdx.x; row < n; row += gridDim.x) {
    const T *xr = logits + row * v;
    T *dr = dlogits + row * v;
    double lse = stats[row];
    if (targets[row] == ignore) {
      for (long j = threadIdx.x; j < v; j += blockDim.x) dr[j] = to<T>(0.0f);
      continue;
    }
    for (long j = threadIdx.x; j < v; j += blockDim.x)
      dr[j] = to<T>(j < cols ? g * (float)exp((double)ld(xr[j]) - lse) : 0.0f);
    __syncthreads();
    long t = targets[row] - lo;
    if (threadIdx.x == 0 && t >= 0 && t < v) dr[t] = to<T>(ld(dr[t]) - g);
  }
}

// ---- dist.h's kernels (the collectives they call run over comm.h): launchers

// model_api.h's name of an element type (the collectives' dtype)
static int dtype_of(const float *) { return RT_F32; }
static int dtype_of(const __nv_bfloat16 *) { return RT_BF16; }

template <typename T>
static void accumulate(T *acc, const T *x, long n, float scale) {
  if (n <= 0) return;
  RT_LAUNCH(accumulate_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, acc, x, n, scale,
            rt_dist.micro == 0);
  LAUNCHED();
}
RT_CUDA_KT(accumulate, (T *acc, const T *x, long n, float scale), (dev(acc), dev(x), n, scale))

// part [outer * pieces][chunk] <-> whole [outer * pieces][tp][chunk], rank's column
template <typename T>
static void tp_copy(T *dst, const T *src, long outer, long pieces, long chunk, int rank, int tp,
                    bool place) {
  if (outer * pieces <= 0 || chunk <= 0) return;
  size_t w = (size_t)chunk * sizeof(T), wide = w * (size_t)tp;
  if (place)
    cudaCheck(cudaMemcpy2DAsync(dst + rank * chunk, wide, src, w, w, (size_t)(outer * pieces),
                                cudaMemcpyDeviceToDevice, rt_cuda_stream));
  else
    cudaCheck(cudaMemcpy2DAsync(dst, w, src + rank * chunk, wide, w, (size_t)(outer * pieces),
                                cudaMemcpyDeviceToDevice, rt_cuda_stream));
}

template <typename T>
static void tp_gather(int axis, T *out, T *scratch, const T *x, long outer, long pieces,
                      long chunk) {
  long n = outer * pieces * chunk;
  int size = rt_axis_size(axis);
  if (n > 0)
    cudaCheck(cudaMemcpyAsync(scratch + (long)rt_axis_rank(axis) * n, x, (size_t)n * sizeof(T),
                              cudaMemcpyDeviceToDevice, rt_cuda_stream));
  rt_allgather_typed(rt_dist.group[axis], scratch, n * size, dtype_of(x), NULL);
  for (int r = 0; r < size; r++) tp_copy(out, scratch + r * n, outer, pieces, chunk, r, size, true);
}
RT_CUDA_KT(tp_gather, (int axis, T *out, T *scratch, const T *x, long outer, long pieces,
                       long chunk),
           (axis, dev(out), dev(scratch), dev(x), outer, pieces, chunk))

template <typename T>
static void tp_slice(int axis, T *out, const T *x, long outer, long pieces, long chunk) {
  tp_copy(out, x, outer, pieces, chunk, rt_axis_rank(axis), rt_axis_size(axis), false);
}
RT_CUDA_KT(tp_slice, (int axis, T *out, const T *x, long outer, long pieces, long chunk),
           (axis, dev(out), dev(x), outer, pieces, chunk))
void rt_tp_slice_i32(int axis, int *out, const int *x, long outer, long pieces, long chunk) {
  tp_slice(axis, out, x, outer, pieces, chunk);
}
void rt_tp_gather_i32(int axis, int *out, int *scratch, const int *x, long outer, long pieces,
                      long chunk) {
  static_assert(sizeof(int) == sizeof(float), "an int travels as a float32's bytes");
  rt_tp_gather(axis, (float *)out, (float *)scratch, (const float *)x, outer, pieces, chunk);
}

template <typename T>
static void tp_reduce_scatter(int axis, T *out, T *scratch, const T *x, long outer, long pieces,
                              long chunk) {
  long n = outer * pieces * chunk;
  int size = rt_axis_size(axis);
  for (int r = 0; r < size; r++) tp_copy(scratch + r * n, x, outer, pieces, chunk, r, size, false);
  rt_reduce_scatter_typed(rt_dist.group[axis], scratch, n * size, dtype_of(x), RT_REDUCE_SUM,
                          NULL);
  if (n > 0)
    cudaCheck(cudaMemcpyAsync(out, scratch + (long)rt_axis_rank(axis) * n, (size_t)n * sizeof(T),
                              cudaMemcpyDeviceToDevice, rt_cuda_stream));
}
RT_CUDA_KT(tp_reduce_scatter, (int axis, T *out, T *scratch, const T *x, long outer, long pieces,
                               long chunk),
           (axis, dev(out), dev(scratch), dev(x), outer, pieces, chunk))

// SUMMA (runtime/dist.h's panels): the broadcasts run on the communication stream, each
// GEMM waits for its panels (rt_summa_wait) and accumulates in float32 (beta 1 after the
// first), rounded once into c.
template <typename T>
struct SummaFwd {
  float *acc;
  int m, n, k;
  static void step(void *ctx, int t, const void *a, const void *b) {
    const SummaFwd *s = (const SummaFwd *)ctx;
    const float one = 1.0f, zero = 0.0f;
    gemm(cublas_handle(), CUBLAS_OP_N, CUBLAS_OP_N, s->n, s->m, s->k, (const T *)b, s->n,
         (const T *)a, s->k, t ? &one : &zero, s->acc);
    LAUNCHED();
  }
};

template <typename T>
static void summa(T *c, T *apanel, T *bpanel, const T *a, const T *b, long m, long n, long k) {
  if (m <= 0 || n <= 0) return;
  rt_summa_panels pa = {RT_AXIS_COL, a, (char *)apanel, m * k * (long)sizeof(T), {}};
  rt_summa_panels pb = {RT_AXIS_ROW, b, (char *)bpanel, k * n * (long)sizeof(T), {}};
  float *acc = std::is_same<T, float>::value ? (float *)c : temp_f32(m * n, "summa");
  SummaFwd<T> s = {acc, as_int(m, "m"), as_int(n, "n"), as_int(k, "k")};
  rt_summa_pairs(&pa, &pb, SummaFwd<T>::step, &s);
  if (!std::is_same<T, float>::value) cast(c, acc, m * n);
}
RT_CUDA_KT(summa, (T *c, T *apanel, T *bpanel, const T *a, const T *b, long m, long n, long k),
           (dev(c), dev(apanel), dev(bpanel), dev(a), dev(b), m, n, k))

// SUMMA's backward (runtime/dist.h's rt_summa_reduced): the products as rt_matmul's GEMMs
template <typename T>
struct SummaBwd {
  const T *dy;
  long m, n, k;
  static void dx(void *ctx, void *out, const void *w) {
    const SummaBwd *s = (const SummaBwd *)ctx;
    matmul((T *)out, s->dy, (const T *)w, 1L, s->m, s->k, s->n, 0, 1, 0L, 0L, 0L);
  }
  static void dw(void *ctx, void *out, const void *x) {
    const SummaBwd *s = (const SummaBwd *)ctx;
    matmul((T *)out, (const T *)x, s->dy, 1L, s->k, s->n, s->m, 1, 0, 0L, 0L, 0L);
  }
};

template <typename T>
static void summa_nt(T *dx, T *wpanel, T *prod, const T *dy, const T *w, long m, long n, long k) {
  rt_summa_panels pw = {RT_AXIS_ROW, w, (char *)wpanel, k * n * (long)sizeof(T), {}};
  SummaBwd<T> s = {dy, m, n, k};
  rt_summa_reduced(&pw, RT_AXIS_COL, dx, prod, m * k, dtype_of(dx), SummaBwd<T>::dx, &s);
}
RT_CUDA_KT(summa_nt, (T *dx, T *wpanel, T *prod, const T *dy, const T *w, long m, long n, long k),
           (dev(dx), dev(wpanel), dev(prod), dev(dy), dev(w), m, n, k))

template <typename T>
static void summa_tn(T *dw, T *xpanel, T *prod, const T *x, const T *dy, long m, long n, long k) {
  rt_summa_panels px = {RT_AXIS_COL, x, (char *)xpanel, m * k * (long)sizeof(T), {}};
  SummaBwd<T> s = {dy, m, n, k};
  rt_summa_reduced(&px, RT_AXIS_ROW, dw, prod, k * n, dtype_of(dw), SummaBwd<T>::dw, &s);
}
RT_CUDA_KT(summa_tn, (T *dw, T *xpanel, T *prod, const T *x, const T *dy, long m, long n, long k),
           (dev(dw), dev(xpanel), dev(prod), dev(x), dev(dy), m, n, k))

template <typename T>
static void embedding_vp_fwd(int axis, T *out, const T *w, const int *idx, long n, long c,
                             long v) {
  if (n <= 0 || c <= 0) return;
  RT_LAUNCH(embedding_vp_fwd_kernel, grid_for(n * c, NT), NT, 0, rt_cuda_stream, out, w, idx, n, c,
            v, (long)rt_axis_rank(axis) * v);
  LAUNCHED();
}
RT_CUDA_KT(embedding_vp_fwd, (int axis, T *out, const T *w, const int *idx, long n, long c, long v),
           (axis, dev(out), dev(w), idx, n, c, v))

// this rank's rows of the table's gradient: [r * v, (r + 1) * v), r its place along the axis
template <typename U, typename T>
static void embedding_vp_bwd(int axis, U *dw, const T *dout, const int *idx, long n, long v,
                             long c) {
  embedding_rows_bwd(dw, dout, idx, n, (long)rt_axis_rank(axis) * v, v, c);
}
RT_CUDA_KTU(embedding_vp_bwd, (int axis, U *dw, const T *dout, const int *idx, long n, long v,
                               long c),
            (axis, dev(dw), dev(dout), idx, n, v, c))

template <typename T>
static void vp_crossentropy_fwd(int axis, float *loss, float *stats, const T *logits,
                                const int *targets, long n, long v, long vocab, long ignore) {
  if (n <= 0) {
    cudaCheck(cudaMemsetAsync(loss, 0, sizeof(float), rt_cuda_stream));
    return;
  }
  long cols = rt_vocab_columns(axis, v, vocab), lo = (long)rt_axis_rank(axis) * v;
  rt_group *tp = rt_dist.group[axis];
  RT_LAUNCH(vp_max_kernel, grid_rows(n), row_threads(cols), 0, rt_cuda_stream, stats, logits, n, v,
            cols);
  LAUNCHED();
  rt_allreduce(tp, stats, n, RT_REDUCE_MAX, NULL);
  RT_LAUNCH(vp_sum_kernel, grid_rows(n), row_threads(cols), 0, rt_cuda_stream, stats + n, stats,
            logits, n, v, cols);
  LAUNCHED();
  rt_allreduce(tp, stats + n, n, RT_REDUCE_SUM, NULL);
  RT_LAUNCH(vp_loss_kernel, 1, 1024, 0, rt_cuda_stream, loss, stats, logits, targets, n, v, lo,
            ignore);
  LAUNCHED();
}
RT_CUDA_KT(vp_crossentropy_fwd,
           (int axis, float *loss, float *stats, const T *logits, const int *targets, long n,
            long v, long vocab, long ignore),
           (axis, loss, stats, dev(logits), targets, n, v, vocab, ignore))

template <typename T>
static void vp_crossentropy_bwd(int axis, T *dlogits, const float *dloss, const T *logits,
                                const int *targets, const float *stats, long n, long v,
                                long vocab, long ignore) {
  if (n <= 0 || v <= 0) return;
  long *count = count_rows(targets, n, ignore, "vp_crossentropy_bwd");
  RT_LAUNCH(vp_crossentropy_bwd_kernel, grid_rows(n), row_threads(v), 0, rt_cuda_stream, dlogits,
            dloss, logits, targets, stats, n, v, rt_vocab_columns(axis, v, vocab),
            (long)rt_axis_rank(axis) * v, count, ignore);
  LAUNCHED();
}
RT_CUDA_KT(vp_crossentropy_bwd,
           (int axis, T *dlogits, const float *dloss, const T *logits, const int *targets,
            const float *stats, long n, long v, long vocab, long ignore),
           (axis, dev(dlogits), dloss, dev(logits), targets, stats, n, v, vocab, ignore))

// ---- norms over a dim split along a mesh axis (Optimus 2D; dist_cpu_t.h has the math) ----

// Each row's part of a split norm's statistics (one block per row): the sum
// of x, or (squares) of (x - mean)^2 with mean = sums[row] / whole (0 when
// sums is NULL: RMSNorm's mean square).
template <typename T>
__global__ void split_rowsum_kernel(float *out, const T *x, const float *sums, long n, long c,
                                    float whole, int squares) {
  for (long row = blockIdx.x; row < n; row += gridDim.x) {
    const T *xr = x + row * c;
    float m = squares && sums ? sums[row] / whole : 0.0f, s = 0.0f;
    for (long j = threadIdx.x; j < c; j += blockDim.x) {
      float v = ld(xr[j]);
      float d = v - m;
      s += squares ? d * d : v;
    }
    s = block_sum(s);
    if (threadIdx.x == 0) out[row] = s;
  }
}

// stats[2i], stats[2i + 1]: row i's mean and 1 / sqrt(variance + eps).
__global__ void split_stats_kernel(float *stats, const float *sums, const float *sq, long n,
                                   float whole, float eps) {
  GRID_LOOP(i, n) {
    stats[2 * i] = sums ? sums[i] / whole : 0.0f;
    stats[2 * i + 1] = 1.0f / sqrtf(sq[i] / whole + eps);
  }
}

template <typename T>
__global__ void split_norm_apply_kernel(T *y, const T *x, const T *w, const T *b,
                                        const float *stats, long n, long c) {
  GRID_LOOP(e, n * c) {
    long i = e / c, j = e - i * c;
    float v = (ld(x[e]) - stats[2 * i]) * stats[2 * i + 1] * ld(w[j]);
    y[e] = to<T>(b ? v + ld(b[j]) : v);
  }
}

// sums[2 row], sums[2 row + 1]: this rank's part of the row's sums of dnorm
// and dnorm * norm (one block per row).
template <typename T>
__global__ void split_bwd_sums_kernel(float *sums, const T *dy, const T *x, const T *w,
                                      const float *stats, long n, long c) {
  for (long row = blockIdx.x; row < n; row += gridDim.x) {
    float mu = stats[2 * row], rs = stats[2 * row + 1], a1 = 0.0f, a2 = 0.0f;
    for (long j = threadIdx.x; j < c; j += blockDim.x) {
      float dn = ld(dy[row * c + j]) * ld(w[j]);
      a1 += dn;
      a2 += dn * ((ld(x[row * c + j]) - mu) * rs);
    }
    a1 = block_sum(a1);
    a2 = block_sum(a2);
    if (threadIdx.x == 0) {
      sums[2 * row] = a1;
      sums[2 * row + 1] = a2;
    }
  }
}

template <typename T>
__global__ void split_bwd_dx_kernel(T *dx, const T *dy, const T *x, const T *w,
                                    const float *stats, const float *sums, long n, long c,
                                    float whole, int centered) {
  GRID_LOOP(e, n * c) {
    long i = e / c, j = e - i * c;
    float mu = stats[2 * i], rs = stats[2 * i + 1];
    float dm = centered ? sums[2 * i] / whole : 0.0f, dnm = sums[2 * i + 1] / whole;
    float norm = (ld(x[e]) - mu) * rs;
    dx[e] = to<T>((ld(dy[e]) * ld(w[j]) - dm - norm * dnm) * rs);
  }
}

// v (n floats on the device) summed over the axis's ranks.
static void rows_allreduce(int axis, float *v, long n) {
  if (rt_axis_size(axis) > 1) rt_allreduce(rt_dist.group[axis], v, n, RT_REDUCE_SUM, NULL);
}

// stats (2n floats): each row's mean and rstd over the whole row, two
// passes each all-reduced along the axis (tmp: 2n floats).
template <typename T>
static void split_stats(int axis, float *stats, float *tmp, const T *x, long n, long c,
                        float eps, bool centered) {
  float whole = (float)(c * rt_axis_size(axis));
  float *sums = centered ? tmp : NULL, *sq = tmp + n;
  if (centered) {
    RT_LAUNCH(split_rowsum_kernel, grid_rows(n), row_threads(c), 0, rt_cuda_stream, sums, x,
              (const float *)NULL, n, c, whole, 0);
    LAUNCHED();
    rows_allreduce(axis, sums, n);
  }
  RT_LAUNCH(split_rowsum_kernel, grid_rows(n), row_threads(c), 0, rt_cuda_stream, sq, x,
            (const float *)sums, n, c, whole, 1);
  LAUNCHED();
  rows_allreduce(axis, sq, n);
  RT_LAUNCH(split_stats_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, stats,
            (const float *)sums, (const float *)sq, n, whole, eps);
  LAUNCHED();
}

template <typename T>
static void norm_fwd_split(int axis, T *y, const T *x, const T *w, const T *b, long n, long c,
                           float eps, bool centered) {
  if (n <= 0 || c <= 0) return;
  float *stats = (float *)scratch((size_t)n * 4 * sizeof(float),
                                  centered ? "layernorm_fwd_split" : "rmsnorm_fwd_split");
  split_stats(axis, stats, stats + 2 * n, x, n, c, eps, centered);
  RT_LAUNCH(split_norm_apply_kernel, grid_for(n * c, NT), NT, 0, rt_cuda_stream, y, x, w, b,
            (const float *)stats, n, c);
  LAUNCHED();
}

template <typename T>
static void layernorm_fwd_split(int axis, T *y, const T *x, const T *w, const T *b, long n, long c,
                                float eps) {
  norm_fwd_split(axis, y, x, w, b, n, c, eps, true);
}
RT_CUDA_KT(layernorm_fwd_split,
           (int axis, T *y, const T *x, const T *w, const T *b, long n, long c, float eps),
           (axis, dev(y), dev(x), dev(w), dev(b), n, c, eps))

template <typename T>
static void rmsnorm_fwd_split(int axis, T *y, const T *x, const T *w, long n, long c, float eps) {
  norm_fwd_split(axis, y, x, w, (const T *)NULL, n, c, eps, false);
}
RT_CUDA_KT(rmsnorm_fwd_split, (int axis, T *y, const T *x, const T *w, long n, long c, float eps),
           (axis, dev(y), dev(x), dev(w), n, c, eps))

template <typename T, typename U>
static void norm_bwd_split(int axis, T *dx, U *dw, U *db, const T *dy, const T *x, const T *w,
                           long n, long c, float eps, bool centered) {
  if (c <= 0) return;
  long rows = n > 0 ? n : 1;
  float *stats = (float *)scratch((size_t)rows * 6 * sizeof(float),
                                  centered ? "layernorm_bwd_split" : "rmsnorm_bwd_split");
  float *sums = stats + 4 * rows;
  if (n > 0) {
    split_stats(axis, stats, stats + 2 * rows, x, n, c, eps, centered);
    RT_LAUNCH(split_bwd_sums_kernel, grid_rows(n), row_threads(c), 0, rt_cuda_stream, sums, dy,
              x, w, (const float *)stats, n, c);
    LAUNCHED();
    rows_allreduce(axis, sums, 2 * n);
    RT_LAUNCH(split_bwd_dx_kernel, grid_for(n * c, NT), NT, 0, rt_cuda_stream, dx, dy, x, w,
              (const float *)stats, (const float *)sums, n, c,
              (float)(c * rt_axis_size(axis)), centered ? 1 : 0);
    LAUNCHED();
  }
  norm_dwdb(dw, db, (const float *)stats, dy, x, n > 0 ? n : 0, c);
}

template <typename T, typename U>
static void layernorm_bwd_split(int axis, T *dx, U *dw, U *db, const T *dy, const T *x,
                                const T *w, long n, long c, float eps) {
  norm_bwd_split(axis, dx, dw, db, dy, x, w, n, c, eps, true);
}
RT_CUDA_KTU(layernorm_bwd_split,
            (int axis, T *dx, U *dw, U *db, const T *dy, const T *x, const T *w, long n, long c,
             float eps),
            (axis, dev(dx), dev(dw), dev(db), dev(dy), dev(x), dev(w), n, c, eps))

template <typename T, typename U>
static void rmsnorm_bwd_split(int axis, T *dx, U *dw, const T *dy, const T *x, const T *w, long n,
                              long c, float eps) {
  norm_bwd_split(axis, dx, dw, (U *)NULL, dy, x, w, n, c, eps, false);
}
RT_CUDA_KTU(rmsnorm_bwd_split,
            (int axis, T *dx, U *dw, const T *dy, const T *x, const T *w, long n, long c,
             float eps),
            (axis, dev(dx), dev(dw), dev(dy), dev(x), dev(w), n, c, eps))
