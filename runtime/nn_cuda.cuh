// The neural-net ops: embeddings, norms, softmax and the losses (attention is in
// attention_cuda.cuh). The CUDA build's kernels, each family's launchers after its kernels;
// included by kernels_cuda.cu after the helpers every family shares (ld, to, Pack, the block sums;
// grid_for, scratch, dev, RT_CUDA_KT).

// ---- neural-net ops

// out[i, j] = w[idx[i], j]
template <typename T>
__global__ void embedding_fwd_kernel(T *out, const T *w, const int *idx, long n, long c) {
  GRID_LOOP(e, n * c) {
    long i = e / c, j = e - i * c;
    out[e] = w[(long)idx[i] * c + j];
  }
}

// dw[idx[i] - first, j] += dout[i, j] for the tokens of rows [first, first + v) of the table
// (dw float32, zeroed by the launcher). Thread (j, g) owns column j of the rows r of dw with
// r % EMB_GROUPS == g and adds the i in order: no atomics, and the CPU's order of additions
// (the same bits).
#define EMB_GROUPS 16
template <typename T>
__global__ void embedding_bwd_kernel(float *dw, const T *dout, const int *idx, long n, long c,
                                     long first, long v) {
  long j = (long)blockIdx.x * blockDim.x + threadIdx.x;
  long g = blockIdx.y;
  if (j >= c) return;
  for (long i = 0; i < n; i++) {
    long r = (long)idx[i] - first;
    if (r < 0 || r >= v || r % EMB_GROUPS != g) continue;
    dw[r * c + j] += ld(dout[i * c + j]);
  }
}

// mean and 1/sqrt(biased variance + eps) of a row of c, in float (two
// passes); uncentered (RMSNorm): mean 0, the variance is the mean square.
template <typename T>
__device__ void row_stats(const T *xr, long c, float eps, bool centered, float *mean,
                          float *rstd) {
  float m = 0.0f;
  if (centered) {
    float s = 0.0f;
    for (long j = threadIdx.x; j < c; j += blockDim.x) s += ld(xr[j]);
    m = block_sum(s) / (float)c;
  }
  float q = 0.0f;
  for (long j = threadIdx.x; j < c; j += blockDim.x) {
    float d = ld(xr[j]) - m;
    q += d * d;
  }
  float var = block_sum(q);
  *mean = m;
  *rstd = 1.0f / sqrtf(var / (float)c + eps);
}

// one block per row: layernorm, or RMSNorm when not centered (b NULL); with res, of the sum
// x + res, written to sum first (rounded to T, as binary's add rounds it)
template <typename T>
__global__ void norm_fwd_kernel(T *y, T *sum, const T *x, const T *res, const T *w, const T *b,
                                long n, long c, float eps, bool centered) {
  for (long row = blockIdx.x; row < n; row += gridDim.x) {
    const T *xr = x + row * c;
    T *yr = y + row * c;
    if (res) {
      T *sr = sum + row * c;
      for (long j = threadIdx.x; j < c; j += blockDim.x) sr[j] = to<T>(ld(xr[j]) + ld(res[row * c + j]));
      __syncthreads();  // (row_stats reads with the stride it was written with: kept apart)
      xr = sr;
    }
    float mean, rstd;
    row_stats(xr, c, eps, centered, &mean, &rstd);
    for (long j = threadIdx.x; j < c; j += blockDim.x)
      yr[j] = to<T>((ld(xr[j]) - mean) * rstd * ld(w[j]) + (b ? ld(b[j]) : 0.0f));
  }
}

// dx per row (one block per row); the row's mean and rstd to stats[2*row],
// stats[2*row + 1] for the dw/db kernel. Not centered (RMSNorm): the
// mean(dnorm) term drops.
template <typename T>
__global__ void norm_bwd_dx_kernel(T *dx, float *stats, const T *dy, const T *x, const T *w,
                                   long n, long c, float eps, bool centered) {
  for (long row = blockIdx.x; row < n; row += gridDim.x) {
    const T *xr = x + row * c, *dyr = dy + row * c;
    T *dxr = dx + row * c;
    float mu, rs;
    row_stats(xr, c, eps, centered, &mu, &rs);
    float a1 = 0.0f, a2 = 0.0f;  // sums of dnorm, dnorm * norm
    for (long j = threadIdx.x; j < c; j += blockDim.x) {
      float dn = ld(dyr[j]) * ld(w[j]);
      a1 += dn;
      a2 += dn * ((ld(xr[j]) - mu) * rs);
    }
    float dm = centered ? block_sum(a1) / (float)c : 0.0f;
    float dnm = block_sum(a2) / (float)c;
    for (long j = threadIdx.x; j < c; j += blockDim.x) {
      float norm = (ld(xr[j]) - mu) * rs;
      dxr[j] = to<T>((ld(dyr[j]) * ld(w[j]) - dm - norm * dnm) * rs);
    }
    if (threadIdx.x == 0) {
      stats[2 * row] = mu;
      stats[2 * row + 1] = rs;
    }
  }
}

// ---- norms a warp a row, for rows of at most NORM_WARP_MAX: the row read
// once into registers (E elements a lane) and summed over the warp's
// shuffles, no block barrier. A lane's element i is unit i / U (units k * 32 +
// lane), element i % U of it: U = 1, or a 16-byte pack (Pack<T>) where the
// rows are whole aligned packs (VEC).
#define NORM_WARP_MAX 1024
#define NORM_WARP_THREADS 128

template <typename T, int E, bool VEC>
struct WarpRow {
  static constexpr int U = VEC ? Pack<T>::N : 1, K = E / U;
  // the column of a lane's element i
  __device__ static long col(int i) { return ((long)(i / U) * 32 + threadIdx.x % 32) * U + i % U; }
  // v <- r[0 .. c), zeros past c
  __device__ static void load(float v[E], const T *r, long c) {
#pragma unroll
    for (int k = 0; k < K; k++) {
      long j = col(k * U);
      if (VEC) {
        Pack<T> p = {};
        if (j < c) p = *(const Pack<T> *)(r + j);
#pragma unroll
        for (int e = 0; e < U; e++) v[k * U + e] = ld(p.v[e]);
      } else {
        v[k] = j < c ? ld(r[j]) : 0.0f;
      }
    }
  }
  // r[0 .. c) <- v
  __device__ static void store(T *r, const float v[E], long c) {
#pragma unroll
    for (int k = 0; k < K; k++) {
      long j = col(k * U);
      if (j >= c) continue;
      if (VEC) {
        Pack<T> p;
#pragma unroll
        for (int e = 0; e < U; e++) p.v[e] = to<T>(v[k * U + e]);
        *(Pack<T> *)(r + j) = p;
      } else {
        r[j] = to<T>(v[k]);
      }
    }
  }
  // row_stats of the row in v (zeros past c)
  __device__ static void stats(const float v[E], long c, float eps, bool centered, float *mean,
                               float *rstd) {
    float m = 0.0f, q = 0.0f;
    if (centered) {
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < E; i++) s += v[i];
      m = warp_sum(s) / (float)c;
    }
#pragma unroll
    for (int i = 0; i < E; i++) {
      float d = col(i) < c ? v[i] - m : 0.0f;
      q += d * d;
    }
    *mean = m;
    *rstd = 1.0f / sqrtf(warp_sum(q) / (float)c + eps);
  }
};

// norm_fwd_kernel, a warp a row (the sum with res kept in registers, rounded to T)
template <typename T, int E, bool VEC>
__global__ void __launch_bounds__(NORM_WARP_THREADS)
    norm_fwd_warp_kernel(T *y, T *sum, const T *x, const T *res, const T *w, const T *b, long n,
                         long c, float eps, bool centered) {
  typedef WarpRow<T, E, VEC> R;
  float v[E], wv[E], bv[E];
  R::load(wv, w, c);
  if (b) R::load(bv, b, c);
  long warps = blockDim.x / 32;
  for (long row = blockIdx.x * warps + threadIdx.x / 32; row < n; row += gridDim.x * warps) {
    float mean, rstd;
    R::load(v, x + row * c, c);
    if (res) {
      float rv[E];
      R::load(rv, res + row * c, c);
#pragma unroll
      for (int i = 0; i < E; i++) v[i] = ld(to<T>(v[i] + rv[i]));
      R::store(sum + row * c, v, c);
    }
    R::stats(v, c, eps, centered, &mean, &rstd);
#pragma unroll
    for (int i = 0; i < E; i++) v[i] = (v[i] - mean) * rstd * wv[i] + (b ? bv[i] : 0.0f);
    R::store(y + row * c, v, c);
  }
}

// norm_bwd_dx_kernel, a warp a row
template <typename T, int E, bool VEC>
__global__ void __launch_bounds__(NORM_WARP_THREADS)
    norm_bwd_dx_warp_kernel(T *dx, float *stats, const T *dy, const T *x, const T *w, long n,
                            long c, float eps, bool centered) {
  typedef WarpRow<T, E, VEC> R;
  float xv[E], gv[E], wv[E];
  R::load(wv, w, c);
  long warps = blockDim.x / 32;
  for (long row = blockIdx.x * warps + threadIdx.x / 32; row < n; row += gridDim.x * warps) {
    float mu, rs, a1 = 0.0f, a2 = 0.0f;  // sums of dnorm, dnorm * norm
    R::load(xv, x + row * c, c);
    R::load(gv, dy + row * c, c);
    R::stats(xv, c, eps, centered, &mu, &rs);
#pragma unroll
    for (int i = 0; i < E; i++) {  // past c dy is 0, and so is dnorm
      xv[i] = (xv[i] - mu) * rs;   // norm
      gv[i] *= wv[i];              // dnorm
      a1 += gv[i];
      a2 += gv[i] * xv[i];
    }
    float dm = centered ? warp_sum(a1) / (float)c : 0.0f;
    float dnm = warp_sum(a2) / (float)c;
#pragma unroll
    for (int i = 0; i < E; i++) gv[i] = (gv[i] - dm - xv[i] * dnm) * rs;
    R::store(dx + row * c, gv, c);
    if (threadIdx.x % 32 == 0) {
      stats[2 * row] = mu;
      stats[2 * row + 1] = rs;
    }
  }
}

// dw[j] = sum_rows dy * norm, db[j] = sum_rows dy. Block (32, LN_RG): column
// blockIdx.x*32 + threadIdx.x, row group threadIdx.y takes the rows
// y, y + LN_RG, ...; the groups' sums are added in order. db NULL: no bias.
// Summed in float, written once (in U).
#define LN_RG 16
template <typename T, typename U>
__global__ void norm_bwd_dwdb_kernel(U *dw, U *db, const float *stats, const T *dy, const T *x,
                                     long n, long c) {
  __shared__ float sw[LN_RG][32], sb[LN_RG][32];
  long j = (long)blockIdx.x * 32 + threadIdx.x;
  float aw = 0.0f, ab = 0.0f;
  if (j < c) {
    for (long i = threadIdx.y; i < n; i += LN_RG) {
      float mu = stats[2 * i], rs = stats[2 * i + 1];
      float d = ld(dy[i * c + j]);
      aw += d * ((ld(x[i * c + j]) - mu) * rs);
      ab += d;
    }
  }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && j < c) {
    float tw = 0.0f, tb = 0.0f;
    for (int g = 0; g < LN_RG; g++) {
      tw += sw[g][threadIdx.x];
      tb += sb[g][threadIdx.x];
    }
    dw[j] = to<U>(tw);
    if (db) db[j] = to<U>(tb);
  }
}

// one block per row: y = exp(x - max) / sum (causal: over the row's first row % c + 1 values,
// the rest 0). The exponentials are computed again in the last pass rather than kept in y, so
// that a bf16 y is rounded once (the float32 results are the same bits either way).
template <typename T>
__global__ void softmax_fwd_kernel(T *y, const T *x, long n, long c, int causal) {
  for (long row = blockIdx.x; row < n; row += gridDim.x) {
    const T *xr = x + row * c;
    T *yr = y + row * c;
    long seen = causal ? row % c + 1 : c;
    float m = -INFINITY;
    for (long j = threadIdx.x; j < seen; j += blockDim.x) m = ld(xr[j]) > m ? ld(xr[j]) : m;
    m = block_max(m);
    float s = 0.0f;
    for (long j = threadIdx.x; j < seen; j += blockDim.x) s += expf(ld(xr[j]) - m);
    float inv = 1.0f / block_sum(s);
    // this thread's own xr[j] and yr[j]: y may be x
    for (long j = threadIdx.x; j < c; j += blockDim.x)
      yr[j] = to<T>(j < seen ? expf(ld(xr[j]) - m) * inv : 0.0f);
  }
}

// dx = y * (dy - sum(dy * y)) per row
template <typename T>
__global__ void softmax_bwd_kernel(T *dx, const T *dy, const T *y, long n, long c) {
  for (long row = blockIdx.x; row < n; row += gridDim.x) {
    const T *dyr = dy + row * c, *yr = y + row * c;
    T *dxr = dx + row * c;
    float s = 0.0f;
    for (long j = threadIdx.x; j < c; j += blockDim.x) s += ld(dyr[j]) * ld(yr[j]);
    float d = block_sum(s);
    for (long j = threadIdx.x; j < c; j += blockDim.x)
      dxr[j] = to<T>(ld(yr[j]) * (ld(dyr[j]) - d));
  }
}

// A thread's running max m and sum s of exp(x - m) (online softmax: the sum is
// rescaled when the max moves), to which a group of values with max gm and
// sum gs of exp(x - gm) is added.
__device__ inline void softmax_merge(float *m, double *s, float gm, double gs) {
  if (gm == -INFINITY) return;
  if (gm > *m) {
    *s = *s * (double)expf(*m - gm) + gs;  // 0 * exp(-inf) = 0 at the first group
    *m = gm;
  } else {
    *s += gs * (double)expf(gm - *m);
  }
}

// A row's max and sum of exp(x - max) over its first vocab values, in one
// pass, then over the block; every thread of the block gets them. With packs
// (the row whole aligned 16-byte packs) a thread reads a pack at a time and
// merges its 8 (or 4) values at once.
template <typename T>
__device__ void row_softmax_stats(const T *xr, long vocab, bool packs, float *max, double *sum) {
  constexpr int N = Pack<T>::N;
  float m = -INFINITY;
  double s = 0.0;
  if (packs) {
    for (long p = threadIdx.x; p * N < vocab; p += blockDim.x) {
      Pack<T> a = ((const Pack<T> *)xr)[p];
      float x[N], pm = -INFINITY, ps = 0.0f;
#pragma unroll
      for (int k = 0; k < N; k++) {
        x[k] = p * N + k < vocab ? ld(a.v[k]) : -INFINITY;
        pm = x[k] > pm ? x[k] : pm;
      }
#pragma unroll
      for (int k = 0; k < N; k++) ps += x[k] == -INFINITY ? 0.0f : expf(x[k] - pm);
      softmax_merge(&m, &s, pm, ps);
    }
  } else {
    for (long j = threadIdx.x; j < vocab; j += blockDim.x) softmax_merge(&m, &s, ld(xr[j]), 1.0);
  }
  float bm = block_max(m);
  *sum = block_sum(m == -INFINITY ? 0.0 : s * (double)expf(m - bm));
  *max = bm;
}

// per-row loss of cross-entropy: logsumexp(row) - row[target], in double,
// to part[row] (one block per row; the row's first vocab of v values)
template <typename T>
__global__ void crossentropy_rows_kernel(double *part, const T *logits, const int *targets, long n,
                                         long v, long vocab, long ignore, bool packs) {
  for (long row = blockIdx.x; row < n; row += gridDim.x) {
    const T *xr = logits + row * v;
    float m;
    double s;
    row_softmax_stats(xr, vocab, packs, &m, &s);
    if (threadIdx.x == 0)
      part[row] =
          targets[row] == ignore ? 0.0 : (double)m + log(s) - (double)ld(xr[targets[row]]);
  }
}

// *count = the rows whose target is not `ignore` (one block)
__global__ void count_rows_kernel(long *count, const int *targets, long n, long ignore) {
  long c = 0;
  for (long i = threadIdx.x; i < n; i += blockDim.x) c += targets[i] != ignore;
  c = block_sum(c);
  if (threadIdx.x == 0) *count = c;
}

// loss[0] = the sum of part[0..n) over the rows that count (0 when none; one block)
__global__ void mean_kernel(float *loss, const double *part, const int *targets, long n,
                            long ignore) {
  double s = 0.0;
  long c = 0;
  for (long i = threadIdx.x; i < n; i += blockDim.x) {
    s += part[i];
    c += targets[i] != ignore;
  }
  s = block_sum(s);
  c = block_sum(c);
  if (threadIdx.x == 0) loss[0] = c ? (float)(s / (double)c) : 0.0f;
}

// A row's gradient dr (softmax - onehot(target)) * g from its logits xr, their max m and
// scale = g e^(m - lse), zero on an ignored row and the padding: each element read, then its
// gradient written, by the same thread (dr may be xr), a pack a thread with packs.
template <typename T>
__device__ void row_grad(T *dr, const T *xr, long v, long vocab, int target, long ignore, float m,
                         float scale, float g, bool packs) {
  constexpr int N = Pack<T>::N;
  // element j of the row's gradient, x its logit
  auto grad = [&](long j, float x) {
    float d = j < vocab && target != ignore ? expf(x - m) * scale : 0.0f;
    return j == target ? d - g : d;
  };
  if (packs) {
    for (long p = threadIdx.x; p < v / N; p += blockDim.x) {
      Pack<T> a = ((const Pack<T> *)xr)[p], r;
#pragma unroll
      for (int k = 0; k < N; k++) r.v[k] = to<T>(grad(p * N + k, ld(a.v[k])));
      ((Pack<T> *)dr)[p] = r;
    }
  } else {
    for (long j = threadIdx.x; j < v; j += blockDim.x) dr[j] = to<T>(grad(j, ld(xr[j])));
  }
}

// dlogits = (softmax - onehot(target)) * dloss / count, zero on ignored rows and the padding
// (dloss: *dloss_at, or the value dloss where dloss_at is NULL), one block per row, with grad;
// and with part (NULL: none) crossentropy_rows_kernel's part[row], from the same reading of the
// row's sums (llm.c's classifier). The exponentials are computed again in the last pass rather
// than kept in dlogits, so that a bf16 dlogits is rounded once. dlogits may be logits itself:
// every thread reads the target's logit before the barrier after which the row is written.
template <typename T>
__global__ void crossentropy_rows_grad_kernel(double *part, T *dlogits, const T *logits,
                                              const int *targets, long n, long v, long vocab,
                                              const long *count, const float *dloss_at,
                                              float dloss, long ignore, bool packs, bool grad) {
  float g = *count ? (dloss_at ? dloss_at[0] : dloss) / (float)*count : 0.0f;
  for (long row = blockIdx.x; row < n; row += gridDim.x) {
    const T *xr = logits + row * v;
    T *dr = dlogits + row * v;
    int target = targets[row];
    float m = 0.0f, scale = 0.0f;  // an ignored row: zeros
    if (target != ignore) {
      double s;
      row_softmax_stats(xr, vocab, packs, &m, &s);
      double lse = (double)m + log(s);
      scale = g * (float)exp((double)m - lse);
      double x = (double)ld(xr[target]);
      if (part && threadIdx.x == 0) part[row] = lse - x;
    } else if (part && threadIdx.x == 0) {
      part[row] = 0.0;
    }
    __syncthreads();  // (the row read before it is written)
    if (grad) row_grad(dr, xr, v, vocab, target, ignore, m, scale, g, packs);
  }
}

// ---- neural-net ops: launchers

template <typename T>
static void embedding_fwd(T *out, const T *w, const int *idx, long n, long c) {
  if (n <= 0 || c <= 0) return;
  RT_LAUNCH(embedding_fwd_kernel, grid_for(n * c, NT), NT, 0, rt_cuda_stream, out, w, idx, n, c);
  LAUNCHED();
}
RT_CUDA_KT(embedding_fwd, (T *out, const T *w, const int *idx, long n, long c),
           (dev(out), dev(w), idx, n, c))

// rows [first, first + v) of a table's gradient
template <typename T>
static void embedding_rows_bwd(float *dw, const T *dout, const int *idx, long n, long first,
                               long v, long c) {
  if (v * c > 0) fill(dw, v * c, 0.0f);
  if (n <= 0 || c <= 0 || v <= 0) return;
  dim3 grid((unsigned)((c + 127) / 128), EMB_GROUPS);
  RT_LAUNCH(embedding_bwd_kernel, grid, 128, 0, rt_cuda_stream, dw, dout, idx, n, c, first, v);
  LAUNCHED();
}

// a bf16 dw: summed in float32, rounded once
template <typename T>
static void embedding_rows_bwd(__nv_bfloat16 *dw, const T *dout, const int *idx, long n,
                               long first, long v, long c) {
  if (v * c <= 0) return;
  float *f = temp_f32(v * c, "embedding_bwd");
  embedding_rows_bwd(f, dout, idx, n, first, v, c);
  cast(dw, f, v * c);
}

template <typename U, typename T>
static void embedding_bwd(U *dw, const T *dout, const int *idx, long n, long v, long c) {
  embedding_rows_bwd(dw, dout, idx, n, 0, v, c);
}
RT_CUDA_KTU(embedding_bwd, (U *dw, const T *dout, const int *idx, long n, long v, long c),
            (dev(dw), dev(dout), idx, n, v, c))

// f(std::integral_constant<int, E>(), std::integral_constant<bool, VEC>()) for the warp-a-row
// norm kernels' registers a lane for rows of c, packs where vec; false (f not called) when the
// rows are too long for them
template <typename T, typename F>
static bool norm_warp(long c, bool vec, F f) {
  auto go = [&](auto e) {
    vec ? f(e, std::true_type()) : f(e, std::false_type());
    return true;
  };
  if (c <= 256) return go(std::integral_constant<int, 8>());
  if (c <= 512) return go(std::integral_constant<int, 16>());
  if (c <= NORM_WARP_MAX) return go(std::integral_constant<int, 32>());
  return false;
}

// whether rows of c of T at these pointers (NULL: none) are whole aligned packs
template <typename T>
static bool rows_of_packs(long c, const void *a, const void *b, const void *d, const void *e,
                          const void *g) {
  return c % Pack<T>::N == 0 && aligned16(a) && aligned16(b) && aligned16(d) && aligned16(e) &&
         aligned16(g);
}

static unsigned grid_warp_rows(long n) {
  return grid_for(n, NORM_WARP_THREADS / 32);
}

// y = the norm of x's rows, or with res (NULL: none) of x + res, written to sum
template <typename T>
static void norm_fwd(T *y, T *sum, const T *x, const T *res, const T *w, const T *b, long n,
                     long c, float eps, bool centered) {
  if (n <= 0 || c <= 0) return;
  bool packs = rows_of_packs<T>(c, y, x, w, b, res) && aligned16(sum);
  if (norm_warp<T>(c, packs, [&](auto e, auto vec) {
        RT_LAUNCH((norm_fwd_warp_kernel<T, decltype(e)::value, decltype(vec)::value>),
                  grid_warp_rows(n), NORM_WARP_THREADS, 0, rt_cuda_stream, y, sum, x, res, w, b,
                  n, c, eps, centered);
      })) {
    LAUNCHED();
    return;
  }
  RT_LAUNCH(norm_fwd_kernel, grid_rows(n), row_threads(c), 0, rt_cuda_stream, y, sum, x, res, w,
            b, n, c, eps, centered);
  LAUNCHED();
}

template <typename T>
static void layernorm_fwd(T *y, const T *x, const T *w, const T *b, long n, long c, float eps) {
  norm_fwd(y, (T *)NULL, x, (const T *)NULL, w, b, n, c, eps, true);
}
RT_CUDA_KT(layernorm_fwd,
           (T *y, const T *x, const T *w, const T *b, long n, long c, float eps),
           (dev(y), dev(x), dev(w), dev(b), n, c, eps))

template <typename T>
static void add_layernorm(T *r, T *y, const T *a, const T *b, const T *w, const T *bias, long n,
                          long c, float eps) {
  norm_fwd(y, r, a, b, w, bias, n, c, eps, true);
}
RT_CUDA_KT(add_layernorm,
           (T *r, T *y, const T *a, const T *b, const T *w, const T *bias, long n, long c,
            float eps),
           (dev(r), dev(y), dev(a), dev(b), dev(w), dev(bias), n, c, eps))

template <typename T>
static void rmsnorm_fwd(T *y, const T *x, const T *w, long n, long c, float eps) {
  norm_fwd(y, (T *)NULL, x, (const T *)NULL, w, (const T *)NULL, n, c, eps, false);
}
RT_CUDA_KT(rmsnorm_fwd, (T *y, const T *x, const T *w, long n, long c, float eps),
           (dev(y), dev(x), dev(w), n, c, eps))

// A norm's dw and db (NULL: no bias) from dy, x and the rows' stats: the
// column sums in chunks where there are rows enough, else one block a
// 32 columns.
template <typename T, typename U>
static void norm_dwdb(U *dw, U *db, const float *stats, const T *dy, const T *x, long n, long c) {
  if (col_sums<2>(dw, db, n, c, 1L, 1.0f, NormGradsOf<T>{dy, x, stats, c})) return;
  RT_LAUNCH(norm_bwd_dwdb_kernel, (unsigned)((c + 31) / 32), dim3(32, LN_RG), 0, rt_cuda_stream, dw,
            db, stats, dy, x, n, c);
  LAUNCHED();
}

template <typename T, typename U>
static void norm_bwd(T *dx, U *dw, U *db, const T *dy, const T *x, const T *w, long n, long c,
                     float eps, bool centered) {
  if (c <= 0) return;
  float *stats = (float *)scratch((size_t)(n > 0 ? n : 1) * 2 * sizeof(float),
                                  centered ? "layernorm_bwd" : "rmsnorm_bwd");
  if (n > 0) {
    if (!norm_warp<T>(c, rows_of_packs<T>(c, dx, dy, x, w, NULL), [&](auto e, auto vec) {
          RT_LAUNCH((norm_bwd_dx_warp_kernel<T, decltype(e)::value, decltype(vec)::value>),
                    grid_warp_rows(n), NORM_WARP_THREADS, 0, rt_cuda_stream, dx, stats, dy, x, w,
                    n, c, eps, centered);
        }))
      RT_LAUNCH(norm_bwd_dx_kernel, grid_rows(n), row_threads(c), 0, rt_cuda_stream, dx, stats,
                dy, x, w, n, c, eps, centered);
    LAUNCHED();
  }
  norm_dwdb(dw, db, (const float *)stats, dy, x, n > 0 ? n : 0, c);
}

template <typename T, typename U>
static void layernorm_bwd(T *dx, U *dw, U *db, const T *dy, const T *x, const T *w, long n,
                          long c, float eps) {
  norm_bwd(dx, dw, db, dy, x, w, n, c, eps, true);
}
RT_CUDA_KTU(layernorm_bwd,
            (T *dx, U *dw, U *db, const T *dy, const T *x, const T *w, long n, long c, float eps),
            (dev(dx), dev(dw), dev(db), dev(dy), dev(x), dev(w), n, c, eps))

template <typename T, typename U>
static void rmsnorm_bwd(T *dx, U *dw, const T *dy, const T *x, const T *w, long n, long c,
                        float eps) {
  norm_bwd(dx, dw, (U *)NULL, dy, x, w, n, c, eps, false);
}
RT_CUDA_KTU(rmsnorm_bwd,
            (T *dx, U *dw, const T *dy, const T *x, const T *w, long n, long c, float eps),
            (dev(dx), dev(dw), dev(dy), dev(x), dev(w), n, c, eps))

template <typename T>
static void softmax_fwd(T *y, const T *x, long n, long c, int causal) {
  if (n <= 0 || c <= 0) return;
  RT_LAUNCH(softmax_fwd_kernel, grid_rows(n), row_threads(c), 0, rt_cuda_stream, y, x, n, c,
            causal);
  LAUNCHED();
}
RT_CUDA_KT(softmax_fwd, (T *y, const T *x, long n, long c, int causal),
           (dev(y), dev(x), n, c, causal))

template <typename T>
static void softmax_bwd(T *dx, const T *dy, const T *y, long n, long c) {
  if (n <= 0 || c <= 0) return;
  RT_LAUNCH(softmax_bwd_kernel, grid_rows(n), row_threads(c), 0, rt_cuda_stream, dx, dy, y, n, c);
  LAUNCHED();
}
RT_CUDA_KT(softmax_bwd, (T *dx, const T *dy, const T *y, long n, long c),
           (dev(dx), dev(dy), dev(y), n, c))


template <typename T>
static void crossentropy_fwd(float *loss, const T *logits, const int *targets, long n, long v,
                             long vocab, long ignore) {
  if (n <= 0) {
    cudaCheck(cudaMemsetAsync(loss, 0, sizeof(float), rt_cuda_stream));  // 0.0f
    return;
  }
  double *part = (double *)scratch((size_t)n * sizeof(double), "crossentropy_fwd");
  RT_LAUNCH(crossentropy_rows_kernel, grid_rows(n), row_threads(vocab), 0, rt_cuda_stream, part,
            logits, targets, n, v, vocab, ignore,
            v % Pack<T>::N == 0 && aligned16(logits));
  LAUNCHED();
  RT_LAUNCH(mean_kernel, 1, 1024, 0, rt_cuda_stream, loss, part, targets, n, ignore);
  LAUNCHED();
}
RT_CUDA_KT(crossentropy_fwd,
           (float *loss, const T *logits, const int *targets, long n, long v, long vocab,
            long ignore),
           (loss, dev(logits), targets, n, v, vocab, ignore))

// the rows that count, into the scratch (8 x n bytes, kernels.def)
static long *count_rows(const int *targets, long n, long ignore, const char *who) {
  long *count = (long *)scratch((size_t)n * sizeof(long), who);
  RT_LAUNCH(count_rows_kernel, 1, 1024, 0, rt_cuda_stream, count, targets, n, ignore);
  LAUNCHED();
  return count;
}

// The rows' losses and the count of rows in one scratch (kernels.def: 16 x n bytes); the
// gradient but in eval mode.
template <typename T>
static void crossentropy_fused(float *loss, T *dlogits, const T *logits, const int *targets,
                               long n, long v, long vocab, long ignore, float dloss) {
  if (n <= 0) {
    cudaCheck(cudaMemsetAsync(loss, 0, sizeof(float), rt_cuda_stream));  // 0.0f
    return;
  }
  double *part = (double *)scratch((size_t)n * (sizeof(double) + sizeof(long)),
                                   "crossentropy_fused");
  long *count = (long *)(part + n);
  RT_LAUNCH(count_rows_kernel, 1, 1024, 0, rt_cuda_stream, count, targets, n, ignore);
  LAUNCHED();
  bool grad = !rt_eval_mode;
  RT_LAUNCH(crossentropy_rows_grad_kernel, grid_rows(n), row_threads(v), 0, rt_cuda_stream, part,
            dlogits, logits, targets, n, v, vocab, count, (const float *)NULL, dloss, ignore,
            v % Pack<T>::N == 0 && aligned16(logits) && aligned16(dlogits), grad);
  LAUNCHED();
  RT_LAUNCH(mean_kernel, 1, 1024, 0, rt_cuda_stream, loss, part, targets, n, ignore);
  LAUNCHED();
}
RT_CUDA_KT(crossentropy_fused,
           (float *loss, T *dlogits, const T *logits, const int *targets, long n, long v,
            long vocab, long ignore, float dloss),
           (loss, dev(dlogits), dev(logits), targets, n, v, vocab, ignore, dloss))

template <typename T>
static void crossentropy_bwd(T *dlogits, const float *dloss, const T *logits, const int *targets,
                             long n, long v, long vocab, long ignore) {
  if (n <= 0) return;
  long *count = count_rows(targets, n, ignore, "crossentropy_bwd");
  RT_LAUNCH(crossentropy_rows_grad_kernel, grid_rows(n), row_threads(v), 0, rt_cuda_stream,
            (double *)NULL, dlogits, logits, targets, n, v, vocab, count, dloss, 0.0f, ignore,
            v % Pack<T>::N == 0 && aligned16(logits) && aligned16(dlogits), true);
  LAUNCHED();
}
RT_CUDA_KT(crossentropy_bwd,
           (T *dlogits, const float *dloss, const T *logits, const int *targets, long n, long v,
            long vocab, long ignore),
           (dev(dlogits), dloss, dev(logits), targets, n, v, vocab, ignore))
