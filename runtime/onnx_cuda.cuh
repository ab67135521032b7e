// The kernels of ONNX's ops that the other families do not have. The CUDA build's kernels, each
// family's launchers after its kernels; included by kernels_cuda.cu after the helpers every family
// shares (ld, to, Pack, the block sums; grid_for, scratch, dev, RT_CUDA_KT).

// ---- kernels for ONNX ops

// out = mask[offset through d.s0] ? value : x
template <typename T>
__global__ void masked_fill_kernel(T *out, const T *x, const int *mask, long n, Dims d, T value) {
  GRID_LOOP(i, n) {
    long mo, unused;
    dims_offsets(d, i, &mo, &unused);
    out[i] = mask[mo] ? value : x[i];
  }
}

__global__ void equal_i32_kernel(int *out, const int *x, long n, int value) {
  GRID_LOOP(i, n) out[i] = x[i] == value;
}

// int32 arithmetic that wraps around (in unsigned, where overflow is defined), for op RT_ADD ..
// RT_MAX but RT_DIV (binary_i32() launches no other)
__device__ inline int i32_op(int op, int a, int b) {
  unsigned ua = (unsigned)a, ub = (unsigned)b;
  switch (op) {
    case RT_ADD: return (int)(ua + ub);
    case RT_SUB: return (int)(ua - ub);
    case RT_MUL: return (int)(ua * ub);
    case RT_MIN: return a < b ? a : b;
    default: return a > b ? a : b;  // RT_MAX
  }
}

// a op b as 1 or 0 (rt_compare's ops): floats compare as float32, integers as int32
template <typename A>
__device__ inline int compare_one(int op, A a, A b) {
  switch (op) {
    case RT_EQ: return a == b;
    case RT_LT: return a < b;
    case RT_LE: return a <= b;
    case RT_GT: return a > b;
    default: return a >= b;  // RT_GE
  }
}

// out[i] = a[.] op b[.], a through d.s0, b through d.s1; T int: as integers
template <typename T>
__global__ void compare_kernel(int op, int *out, const T *a, const T *b, long n, Dims d) {
  GRID_LOOP(i, n) {
    long ao, bo;
    dims_offsets(d, i, &ao, &bo);
    out[i] = compare_one(op, ld(a[ao]), ld(b[bo]));
  }
}

__global__ void binary_i32_kernel(int op, int *out, const int *a, const int *b, long n, Dims d) {
  GRID_LOOP(i, n) {
    long ao, bo;
    dims_offsets(d, i, &ao, &bo);
    out[i] = i32_op(op, a[ao], b[bo]);
  }
}

__global__ void scale_i32_kernel(int *out, const int *x, long n, int s, int b) {
  GRID_LOOP(i, n) out[i] = i32_op(RT_ADD, i32_op(RT_MUL, s, x[i]), b);
}

// Running sums: a thread per column (o, j) of [outer, len, inner], in order along len, as the
// CPU sums (the scans mtc runs are short: positions along a sequence)
template <typename T>
__global__ void cumsum_kernel(T *out, const T *x, long outer, long len, long inner,
                              int exclusive, int reverse) {
  GRID_LOOP(c, outer * inner) {
    long o = c / inner, j = c - o * inner;
    float acc = 0.0f;
    for (long k = 0; k < len; k++) {
      long at = (o * len + (reverse ? len - 1 - k : k)) * inner + j;
      float v = ld(x[at]);
      if (!exclusive) acc += v;
      out[at] = to<T>(acc);
      if (exclusive) acc += v;
    }
  }
}

__global__ void cumsum_i32_kernel(int *out, const int *x, long outer, long len, long inner,
                                  int exclusive, int reverse) {
  GRID_LOOP(c, outer * inner) {
    long o = c / inner, j = c - o * inner;
    int acc = 0;
    for (long k = 0; k < len; k++) {
      long at = (o * len + (reverse ? len - 1 - k : k)) * inner + j;
      int v = x[at];
      if (!exclusive) acc = i32_op(RT_ADD, acc, v);
      out[at] = acc;
      if (exclusive) acc = i32_op(RT_ADD, acc, v);
    }
  }
}

template <typename T>
__global__ void equal_f32_kernel(int *out, const T *x, long n, float value) {
  GRID_LOOP(i, n) out[i] = ld(x[i]) == value;
}

// splitmix64's finalizer
__device__ inline unsigned long long mix64(unsigned long long z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// the CPU's generator: keep element i when its 24 random bits >= threshold
template <typename T>
__global__ void dropout_kernel(T *out, const T *x, const int *step, long n, float keep_scale,
                               unsigned threshold, unsigned long long seed,
                               unsigned long long key, long chunk, long tp, long rank,
                               unsigned long long first) {
  unsigned long long base =
      mix64(seed * 0x9E3779B97F4A7C15ull ^
            mix64(key + 0xD1B54A32D192ED03ull * (unsigned long long)step[0]));
  GRID_LOOP(i, n) {
    unsigned long long g = first + (unsigned long long)((i / chunk * tp + rank) * chunk + i % chunk);
    unsigned bits = (unsigned)(mix64(base + 0x9E3779B97F4A7C15ull * g) >> 40);
    out[i] = to<T>(bits >= threshold ? ld(x[i]) * keep_scale : 0.0f);
  }
}

__global__ void tick_kernel(int *step) { step[0] += 1; }

// one block per row: y = x - logsumexp(x), the sum of exponentials in double
template <typename T>
__global__ void log_softmax_fwd_kernel(T *y, const T *x, long n, long c) {
  for (long row = blockIdx.x; row < n; row += gridDim.x) {
    const T *xr = x + row * c;
    T *yr = y + row * c;
    float m = -INFINITY;
    for (long j = threadIdx.x; j < c; j += blockDim.x) m = ld(xr[j]) > m ? ld(xr[j]) : m;
    m = block_max(m);
    double s = 0.0;
    for (long j = threadIdx.x; j < c; j += blockDim.x) s += expf(ld(xr[j]) - m);
    s = block_sum(s);
    float lse = m + (float)log(s);
    for (long j = threadIdx.x; j < c; j += blockDim.x) yr[j] = to<T>(ld(xr[j]) - lse);
  }
}

// dx = dy - exp(y) * sum(dy), the sum in double
template <typename T>
__global__ void log_softmax_bwd_kernel(T *dx, const T *dy, const T *y, long n, long c) {
  for (long row = blockIdx.x; row < n; row += gridDim.x) {
    const T *dyr = dy + row * c, *yr = y + row * c;
    double s = 0.0;
    for (long j = threadIdx.x; j < c; j += blockDim.x) s += ld(dyr[j]);
    float sum = (float)block_sum(s);
    for (long j = threadIdx.x; j < c; j += blockDim.x)
      dx[row * c + j] = to<T>(ld(dyr[j]) - expf(ld(yr[j])) * sum);
  }
}

// rows that count: a target in [0, c) that is not `ignore`
__device__ inline bool nll_counts(int t, long c, long ignore) {
  return t != ignore && t >= 0 && t < c;
}

// one block
template <typename T>
__global__ void nll_loss_fwd_kernel(float *loss, const T *logp, const int *targets, long n, long c,
                                    int sum, long ignore) {
  double s = 0.0;
  long count = 0;
  for (long i = threadIdx.x; i < n; i += blockDim.x) {
    int t = targets[i];
    if (nll_counts(t, c, ignore)) {
      s -= ld(logp[i * c + t]);
      count++;
    }
  }
  s = block_sum(s);
  count = block_sum(count);
  if (threadIdx.x == 0)
    loss[0] = sum ? (float)s : count ? (float)(s / (double)count) : 0.0f;
}

// one block; dlogp zeroed by the launcher
template <typename T>
__global__ void nll_loss_bwd_kernel(T *dlogp, const float *dloss, const int *targets, long n,
                                    long c, int sum, long ignore) {
  long count = 0;
  for (long i = threadIdx.x; i < n; i += blockDim.x) count += nll_counts(targets[i], c, ignore);
  count = block_sum(count);
  float g = sum ? -dloss[0] : count ? -dloss[0] / (float)count : 0.0f;
  for (long i = threadIdx.x; i < n; i += blockDim.x) {
    int t = targets[i];
    if (nll_counts(t, c, ignore)) dlogp[i * c + t] = to<T>(g);
  }
}

// out (outer, len, inner) = x (outer, xdim, inner) at rows start + i*step;
// bwd: the reverse (dx zeroed by the launcher)
template <typename T>
__global__ void slice_axis_kernel(T *out, const T *x, long outer, long xdim, long inner,
                                  long start, long step, long len, int bwd) {
  GRID_LOOP(e, outer * len * inner) {
    long o = e / (len * inner), rem = e - o * (len * inner);
    long i = rem / inner, kk = rem - i * inner;
    long xe = (o * xdim + start + i * step) * inner + kk;
    if (bwd)
      out[xe] = x[e];
    else
      out[e] = x[xe];
  }
}

// ---- kernels for ONNX ops: launchers

void rt_copy_i32(int *out, const int *x, long n) {
  if (n <= 0) return;
  cudaCheck(cudaMemcpyAsync(out, x, (size_t)n * sizeof(int), cudaMemcpyDeviceToDevice,
                            rt_cuda_stream));
}

template <typename T>
static void cast_i32_f32(T *out, const int *x, long n) {
  if (n <= 0) return;
  RT_LAUNCH(cast_i32_f32_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, out, x, n);
  LAUNCHED();
}
RT_CUDA_KT(cast_i32_f32, (T *out, const int *x, long n), (dev(out), x, n))

template <typename T>
static void unary(int op, T *y, const T *x, long n, float p) {
  map(y, n, Unary{op, p}, x);
}
RT_CUDA_KT(unary, (int op, T *y, const T *x, long n, float p), (op, dev(y), dev(x), n, p))

template <typename T>
static void gelu_erf_fwd(T *y, const T *x, long n) {
  map(y, n, GeluErfFwd(), x);
}
RT_CUDA_KT(gelu_erf_fwd, (T *y, const T *x, long n), (dev(y), dev(x), n))

template <typename T>
static void gelu_erf_bwd(T *dx, const T *dy, const T *x, long n) {
  map(dx, n, GeluErfBwd(), dy, x);
}
RT_CUDA_KT(gelu_erf_bwd, (T *dx, const T *dy, const T *x, long n),
           (dev(dx), dev(dy), dev(x), n))

template <typename T>
static void rope(T *out, const T *x, long rows, long t, long hs, float theta, int inverse) {
  long n = rows * t * (hs / 2);
  if (n <= 0) return;
  RT_LAUNCH(rope_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, out, x, rows, t, hs, theta,
            inverse);
  LAUNCHED();
}
RT_CUDA_KT(rope, (T *out, const T *x, long rows, long t, long hs, float theta, int inverse),
           (dev(out), dev(x), rows, t, hs, theta, inverse))

template <typename T>
static void silu_fwd(T *y, const T *x, long n) {
  map(y, n, SiluFwd(), x);
}
RT_CUDA_KT(silu_fwd, (T *y, const T *x, long n), (dev(y), dev(x), n))

template <typename T>
static void silu_bwd(T *dx, const T *dy, const T *x, long n) {
  map(dx, n, SiluBwd(), dy, x);
}
RT_CUDA_KT(silu_bwd, (T *dx, const T *dy, const T *x, long n), (dev(dx), dev(dy), dev(x), n))

template <typename T>
static void masked_fill_launch(T *out, const T *x, const int *mask, int rank, const long *shape,
                               const long *mstride, T value, const char *who) {
  check_rank(rank, who);
  long n = numel_of(rank, shape);  // 1 at rank 0
  if (n <= 0) return;
  Dims d = {};
  d.rank = rank;
  for (int k = 0; k < rank; k++) {
    d.shape[k] = shape[k];
    d.s0[k] = mstride[k];
  }
  RT_LAUNCH(masked_fill_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, out, x, mask, n, d, value);
  LAUNCHED();
}

template <typename T>
static void masked_fill(T *out, const T *x, const int *mask, int rank, const long *shape,
                        const long *mstride, float value) {
  masked_fill_launch(out, x, mask, rank, shape, mstride, to<T>(value), "rt_masked_fill");
}
RT_CUDA_KT(masked_fill,
           (T *out, const T *x, const int *mask, int rank, const long *shape, const long *mstride,
            float value),
           (dev(out), dev(x), mask, rank, shape, mstride, value))

void rt_masked_fill_i32(int *out, const int *x, const int *mask, int rank, const long *shape,
                        const long *mstride, int value) {
  masked_fill_launch(out, x, mask, rank, shape, mstride, value, "rt_masked_fill_i32");
}

void rt_equal_i32(int *out, const int *x, long n, int value) {
  if (n <= 0) return;
  RT_LAUNCH(equal_i32_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, out, x, n, value);
  LAUNCHED();
}

void rt_binary_i32(int op, int *out, const int *a, const int *b, int rank, const long *shape,
                   const long *astride, const long *bstride) {
  check_rank(rank, "rt_binary_i32");
  long n = numel_of(rank, shape);
  if (n <= 0 || op < RT_ADD || op > RT_MAX || op == RT_DIV) return;  // the CPU leaves out alone
  Dims d = make_dims(rank, shape, astride, bstride);
  RT_LAUNCH(binary_i32_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, op, out, a, b, n, d);
  LAUNCHED();
}

template <typename T>
static void compare(int op, int *out, const T *a, const T *b, int rank, const long *shape,
                    const long *astride, const long *bstride) {
  check_rank(rank, "rt_compare");
  long n = numel_of(rank, shape);
  if (n <= 0 || op < RT_EQ || op > RT_GE) return;  // the CPU leaves out alone
  Dims d = make_dims(rank, shape, astride, bstride);
  RT_LAUNCH(compare_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, op, out, a, b, n, d);
  LAUNCHED();
}
RT_CUDA_KT(compare,
           (int op, int *out, const T *a, const T *b, int rank, const long *shape,
            const long *astride, const long *bstride),
           (op, out, dev(a), dev(b), rank, shape, astride, bstride))

void rt_compare_i32(int op, int *out, const int *a, const int *b, int rank, const long *shape,
                    const long *astride, const long *bstride) {
  compare(op, out, a, b, rank, shape, astride, bstride);
}

void rt_scale_i32(int *out, const int *x, long n, int s, int b) {
  if (n <= 0) return;
  RT_LAUNCH(scale_i32_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, out, x, n, s, b);
  LAUNCHED();
}

template <typename T>
static void cumsum(T *out, const T *x, long outer, long len, long inner, int exclusive,
                   int reverse) {
  long cols = outer * inner;
  if (cols <= 0 || len <= 0) return;
  RT_LAUNCH(cumsum_kernel, grid_for(cols, NT), NT, 0, rt_cuda_stream, out, x, outer, len, inner,
            exclusive, reverse);
  LAUNCHED();
}
RT_CUDA_KT(cumsum, (T *out, const T *x, long outer, long len, long inner, int exclusive,
                    int reverse), (dev(out), dev(x), outer, len, inner, exclusive, reverse))

void rt_cumsum_i32(int *out, const int *x, long outer, long len, long inner, int exclusive,
                   int reverse) {
  long cols = outer * inner;
  if (cols <= 0 || len <= 0) return;
  RT_LAUNCH(cumsum_i32_kernel, grid_for(cols, NT), NT, 0, rt_cuda_stream, out, x, outer, len,
            inner, exclusive, reverse);
  LAUNCHED();
}

template <typename T>
static void equal_f32(int *out, const T *x, long n, float value) {
  if (n <= 0) return;
  RT_LAUNCH(equal_f32_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, out, x, n, value);
  LAUNCHED();
}
RT_CUDA_KT(equal_f32, (int *out, const T *x, long n, float value), (out, dev(x), n, value))

template <typename T>
static void dropout(T *out, const T *x, const int *step, long n, float ratio, long seed,
                    long key, long chunk, int batched, int axis, int batch_axis) {
  if (n <= 0) return;
  if (rt_eval_mode) ratio = 0.0f;  // every element kept, times 1: x itself
  float keep_scale = 1.0f / (1.0f - ratio);
  unsigned threshold = (unsigned)(ratio * 16777216.0f);
  long tp = chunk > 0 ? rt_axis_size(axis) : 1, rank = chunk > 0 ? rt_axis_rank(axis) : 0;
  unsigned long long first = rt_dropout_first(n * tp, batched, batch_axis);
  RT_LAUNCH(dropout_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, out, x, step, n, keep_scale,
            threshold, (unsigned long long)seed, (unsigned long long)key, chunk > 0 ? chunk : n,
            tp, rank, first);
  LAUNCHED();
}
RT_CUDA_KT(dropout, (T *out, const T *x, const int *step, long n, float ratio, long seed, long key,
                     long chunk, int batched, int axis, int batch_axis),
           (dev(out), dev(x), step, n, ratio, seed, key, chunk, batched, axis, batch_axis))

void rt_tick(int *step) {
  // a validation or sampling forward leaves the masks as they were; a step's micro-batches
  // share its count (rt_dist.row tells them apart)
  if (rt_eval_mode || rt_dist.micro) return;
  RT_LAUNCH(tick_kernel, 1, 1, 0, rt_cuda_stream, step);
  LAUNCHED();
}

template <typename T>
static void log_softmax_fwd(T *y, const T *x, long n, long c) {
  if (n <= 0 || c <= 0) return;
  RT_LAUNCH(log_softmax_fwd_kernel, grid_rows(n), row_threads(c), 0, rt_cuda_stream, y, x, n, c);
  LAUNCHED();
}
RT_CUDA_KT(log_softmax_fwd, (T *y, const T *x, long n, long c), (dev(y), dev(x), n, c))

template <typename T>
static void log_softmax_bwd(T *dx, const T *dy, const T *y, long n, long c) {
  if (n <= 0 || c <= 0) return;
  RT_LAUNCH(log_softmax_bwd_kernel, grid_rows(n), row_threads(c), 0, rt_cuda_stream, dx, dy, y, n,
            c);
  LAUNCHED();
}
RT_CUDA_KT(log_softmax_bwd, (T *dx, const T *dy, const T *y, long n, long c),
           (dev(dx), dev(dy), dev(y), n, c))

template <typename T>
static void nll_loss_fwd(float *loss, const T *logp, const int *targets, long n, long c, int sum,
                         long ignore) {
  RT_LAUNCH(nll_loss_fwd_kernel, 1, 1024, 0, rt_cuda_stream, loss, logp, targets, n, c, sum,
            ignore);
  LAUNCHED();
}
RT_CUDA_KT(nll_loss_fwd,
           (float *loss, const T *logp, const int *targets, long n, long c, int sum, long ignore),
           (loss, dev(logp), targets, n, c, sum, ignore))

template <typename T>
static void nll_loss_bwd(T *dlogp, const float *dloss, const int *targets, long n, long c, int sum,
                         long ignore) {
  if (n * c > 0)
    cudaCheck(cudaMemsetAsync(dlogp, 0, (size_t)(n * c) * sizeof(T), rt_cuda_stream));
  if (n <= 0) return;
  RT_LAUNCH(nll_loss_bwd_kernel, 1, 1024, 0, rt_cuda_stream, dlogp, dloss, targets, n, c, sum,
            ignore);
  LAUNCHED();
}
RT_CUDA_KT(nll_loss_bwd,
           (T *dlogp, const float *dloss, const int *targets, long n, long c, int sum,
            long ignore),
           (dev(dlogp), dloss, targets, n, c, sum, ignore))

template <typename T>
static void slice_axis(T *out, const T *x, long outer, long xdim, long inner, long start,
                       long step, long len) {
  long n = outer * len * inner;
  if (outer <= 0 || len <= 0 || inner <= 0) return;
  RT_LAUNCH(slice_axis_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, out, x, outer, xdim, inner,
            start, step, len, 0);
  LAUNCHED();
}
RT_CUDA_KT(slice_axis,
           (T *out, const T *x, long outer, long xdim, long inner, long start, long step,
            long len),
           (dev(out), dev(x), outer, xdim, inner, start, step, len))

void rt_slice_axis_i32(int *out, const int *x, long outer, long xdim, long inner, long start,
                       long step, long len) {
  slice_axis(out, x, outer, xdim, inner, start, step, len);
}

template <typename T>
static void slice_axis_bwd(T *dx, const T *dy, long outer, long xdim, long inner, long start,
                           long step, long len) {
  long nx = outer * xdim * inner;
  if (nx > 0) cudaCheck(cudaMemsetAsync(dx, 0, (size_t)nx * sizeof(T), rt_cuda_stream));
  if (outer <= 0 || len <= 0 || inner <= 0) return;
  RT_LAUNCH(slice_axis_kernel, grid_for(outer * len * inner, NT), NT, 0, rt_cuda_stream, dx, dy,
            outer, xdim, inner, start, step, len, 1);
  LAUNCHED();
}
RT_CUDA_KT(slice_axis_bwd,
           (T *dx, const T *dy, long outer, long xdim, long inner, long start, long step,
            long len),
           (dev(dx), dev(dy), outer, xdim, inner, start, step, len))
