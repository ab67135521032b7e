// Scaled dot-product attention (kernels.def's attention_fwd and attention_bwd)
// on the GPU: its kernels and their launchers, included by kernels_cuda.cu
// where the launchers' helpers are defined (ld, to, the block sums, scratch,
// RT_CUDA_KT). Two sets: the CUDA-core kernels, for every variant and
// operand (a bias, its gradient dscores, any head size), and bf16's
// tensor-core kernels for the common case.

// Attention: one block per (head, row) of (bh, t, hs) tensors; keys (or, for
// dk/dv, queries) in tiles of ATT_TILE. A warp computes one dot product of
// length hs at a time; a thread owns output columns d = threadIdx.x + k *
// blockDim.x (its accumulators in dynamic shared memory, hs floats each, in
// every variant).
#define ATT_THREADS 256
#define ATT_TILE 256

// sc[jj] = mul * (a . B[(j0 + jj) * hs ...]) for jj < jt, one warp per jj
template <typename T>
__device__ inline void att_dots(float *sc, const T *a, const T *B, long j0, long jt, long hs,
                                float mul) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  for (long jj = warp; jj < jt; jj += nwarps) {
    const T *bj = B + (j0 + jj) * hs;
    float s = 0.0f;
    for (long d = lane; d < hs; d += 32) s += ld(a[d]) * ld(bj[d]);
    s = warp_sum(s);
    if (lane == 0) sc[jj] = mul * s;
  }
}

// The first key a key-padding mask keeps (t when none; 0 without a mask), over
// the whole block.
__device__ long att_first_kept(const int *keep, long t) {
  if (!keep) return 0;
  float f = -INFINITY;  // -j of the first kept key j
  for (long j = threadIdx.x; j < t; j += blockDim.x)
    if (keep[j] && -(float)j > f) f = -(float)j;
  f = block_max(f);
  return f == -INFINITY ? t : (long)-f;
}

// Key j's score s as the softmax sees it: -inf where the key-padding mask
// drops j, and 0 for every key of a query's window that keeps none (`none`),
// as an additive mask of the lowest float does.
__device__ inline float att_keep(float s, const int *keep, long j, bool none) {
  return !keep ? s : none ? 0.0f : keep[j] ? s : -INFINITY;
}

// One query row's optional operands: its key-padding mask row (tk keys),
// whether its window keeps no key, and its bias row (tk); keep and bias NULL
// when absent.
template <typename T>
struct att_row {
  const int *keep;
  bool none;
  const T *bias;
};

// Key j's score: the scaled dot product s plus the bias, as the softmax sees it (att_keep).
template <typename T>
__device__ inline float att_score(float s, att_row<T> x, long j) {
  return att_keep(x.bias ? s + ld(x.bias[j]) : s, x.keep, j, x.none);
}

// Query i's row of head h's extras; the mask's first kept key is computed by the whole block.
template <typename T>
__device__ att_row<T> att_row_of(const int *keep, const T *bias, long h, long i, long tq, long tk,
                                 long heads, long bdiv, long bmod, int causal) {
  att_row<T> x;
  x.keep = keep ? keep + h / heads * tk : NULL;
  x.none = att_first_kept(x.keep, tk) >= (causal ? i + 1 : tk);
  x.bias = bias ? bias + (h / bdiv % bmod * tq + i) * tk : NULL;
  return x;
}

// Online softmax over the scores of query row qi against keys [0, jn) of kh
// (att_score): the running max m and sum l of exp(s - m); with vh != NULL
// also acc[d] = sum_j exp(s_j - m) vh[j, d]. pt: ATT_TILE floats of shared
// memory.
template <typename T>
__device__ void att_online(float *m_out, float *l_out, float *acc, float *pt, const T *qi,
                           const T *kh, const T *vh, att_row<T> x, long jn, long hs,
                           float scale) {
  float m = -INFINITY, l = 0.0f;
  for (long j0 = 0; j0 < jn; j0 += ATT_TILE) {
    long jt = jn - j0 < ATT_TILE ? jn - j0 : ATT_TILE;
    att_dots(pt, qi, kh, j0, jt, hs, scale);
    __syncthreads();
    float tm = -INFINITY;
    for (long jj = threadIdx.x; jj < jt; jj += blockDim.x) {
      pt[jj] = att_score(pt[jj], x, j0 + jj);
      tm = pt[jj] > tm ? pt[jj] : tm;
    }
    tm = block_max(tm);
    float mn = tm > m ? tm : m;
    // 0 on the first tile (m = -inf); 1 while every key so far is masked
    float corr = mn == -INFINITY ? 1.0f : expf(m - mn);
    float ts = 0.0f;
    for (long jj = threadIdx.x; jj < jt; jj += blockDim.x) {
      float e = pt[jj] == -INFINITY ? 0.0f : expf(pt[jj] - mn);
      pt[jj] = e;
      ts += e;
    }
    ts = block_sum(ts);  // its barriers also publish pt
    l = l * corr + ts;
    if (vh)
      for (long d = threadIdx.x; d < hs; d += blockDim.x) {
        float a = acc[d] * corr;
        for (long jj = 0; jj < jt; jj++) a += pt[jj] * ld(vh[(j0 + jj) * hs + d]);
        acc[d] = a;
      }
    m = mn;
    __syncthreads();  // pt is rewritten by the next tile
  }
  *m_out = m;
  *l_out = l;
}

// out row = softmax(q_i k^T scale + bias) v, lse its log-sum-exp; shared: acc
// (hs), pt (ATT_TILE)
template <typename T>
__global__ void attention_fwd_kernel(T *out, float *lse, const T *q, const T *k, const T *v,
                                     const int *keep, const T *bias, long bh, long tq, long tk,
                                     long hs, long heads, long bdiv, long bmod, int causal,
                                     float scale) {
  RT_DYNAMIC_SHARED(float, smem);
  float *acc = smem, *pt = smem + hs;
  for (long row = blockIdx.x; row < bh * tq; row += gridDim.x) {
    long h = row / tq, i = row - h * tq;
    const T *kh = k + h * tk * hs, *vh = v + h * tk * hs;
    att_row<T> x = att_row_of(keep, bias, h, i, tq, tk, heads, bdiv, bmod, causal);
    long jn = causal ? i + 1 : tk;
    for (long d = threadIdx.x; d < hs; d += blockDim.x) acc[d] = 0.0f;
    float m, l;
    att_online(&m, &l, acc, pt, q + row * hs, kh, vh, x, jn, hs, scale);
    float inv = 1.0f / l;
    for (long d = threadIdx.x; d < hs; d += blockDim.x) out[row * hs + d] = to<T>(acc[d] * inv);
    if (threadIdx.x == 0) lse[row] = m + logf(l);
  }
}

// Backward, per query row: D_i = dout_i . out_i (sum_j p_ij dp_ij) into dsum[row], and
// dq_i = sum_j ds_ij k_j, ds_ij = scale p_ij (dp_ij - D_i), p_ij = exp(s_ij - lse_i).
// shared: acc (hs), pt, dpt (ATT_TILE each)
// With dscores, also the row's gradient of the scores after the scale,
// p_ij (dp_ij - D_i), zeros past the window.
template <typename T>
__global__ void attention_bwd_dq_kernel(T *dq, T *dscores, float *dsum, const T *dout,
                                        const T *q, const T *k, const T *v, const T *out,
                                        const float *lse, const int *keep, const T *bias,
                                        long bh, long tq, long tk, long hs, long heads,
                                        long bdiv, long bmod, int causal, float scale) {
  RT_DYNAMIC_SHARED(float, smem);
  float *acc = smem, *pt = smem + hs, *dpt = pt + ATT_TILE;
  for (long row = blockIdx.x; row < bh * tq; row += gridDim.x) {
    long h = row / tq, i = row - h * tq;
    const T *kh = k + h * tk * hs, *vh = v + h * tk * hs;
    const T *qi = q + row * hs, *doi = dout + row * hs, *oi = out + row * hs;
    att_row<T> x = att_row_of(keep, bias, h, i, tq, tk, heads, bdiv, bmod, causal);
    long jn = causal ? i + 1 : tk;
    float dpart = 0.0f, L = lse[row];
    for (long d = threadIdx.x; d < hs; d += blockDim.x) {
      dpart += ld(doi[d]) * ld(oi[d]);
      acc[d] = 0.0f;
    }
    float D = block_sum(dpart);
    // dq_i = sum_j ds_j k_j
    for (long j0 = 0; j0 < jn; j0 += ATT_TILE) {
      long jt = jn - j0 < ATT_TILE ? jn - j0 : ATT_TILE;
      att_dots(pt, qi, kh, j0, jt, hs, scale);
      att_dots(dpt, doi, vh, j0, jt, hs, 1.0f);
      __syncthreads();
      for (long jj = threadIdx.x; jj < jt; jj += blockDim.x) {
        float p = expf(att_score(pt[jj], x, j0 + jj) - L);
        float g = p * (dpt[jj] - D);
        if (dscores) dscores[row * tk + j0 + jj] = to<T>(g);
        pt[jj] = scale * g;  // ds
      }
      __syncthreads();
      for (long d = threadIdx.x; d < hs; d += blockDim.x) {
        float a = acc[d];
        for (long jj = 0; jj < jt; jj++) a += pt[jj] * ld(kh[(j0 + jj) * hs + d]);
        acc[d] = a;
      }
      __syncthreads();
    }
    for (long d = threadIdx.x; d < hs; d += blockDim.x) dq[row * hs + d] = to<T>(acc[d]);
    if (dscores)
      for (long j = jn + threadIdx.x; j < tk; j += blockDim.x)
        dscores[row * tk + j] = to<T>(0.0f);
    if (threadIdx.x == 0) dsum[row] = D;
  }
}

// Backward, per key row j: dv_j = sum_i p_ij dout_i, dk_j = sum_i ds_ij q_i
// over the queries that see j (i >= j when causal), with the rows' lse and D
// (dsum). shared: acck, accv (hs each), pt, dst (ATT_TILE each)
template <typename T>
__global__ void attention_bwd_dkdv_kernel(T *dk, T *dv, const float *lse, const float *dsum,
                                          const T *dout, const T *q, const T *k, const T *v,
                                          const int *keep, const T *bias, long bh, long tq,
                                          long tk, long hs, long heads, long bdiv, long bmod,
                                          int causal, float scale) {
  RT_DYNAMIC_SHARED(float, smem);
  float *acck = smem, *accv = smem + hs, *pt = smem + 2 * hs, *dst = pt + ATT_TILE;
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  for (long row = blockIdx.x; row < bh * tk; row += gridDim.x) {
    long h = row / tk, j = row - h * tk;
    const T *qh = q + h * tq * hs, *doh = dout + h * tq * hs;
    const T *kj = k + row * hs, *vj = v + row * hs;
    const float *lh = lse + h * tq, *dh = dsum + h * tq;
    const int *keeph = keep ? keep + h / heads * tk : NULL;
    const T *biash = bias ? bias + h / bdiv % bmod * tq * tk : NULL;
    long first = att_first_kept(keeph, tk);  // query i's window keeps none when i < first
    for (long d = threadIdx.x; d < hs; d += blockDim.x) {
      acck[d] = 0.0f;
      accv[d] = 0.0f;
    }
    long i0 = causal ? j : 0;
    for (long ib = i0; ib < tq; ib += ATT_TILE) {
      long it = tq - ib < ATT_TILE ? tq - ib : ATT_TILE;
      for (long ii = warp; ii < it; ii += nwarps) {
        long i = ib + ii;
        const T *qi = qh + i * hs, *doi = doh + i * hs;
        float s = 0.0f, dp = 0.0f;
        for (long d = lane; d < hs; d += 32) {
          s += ld(qi[d]) * ld(kj[d]);
          dp += ld(doi[d]) * ld(vj[d]);
        }
        s = warp_sum(s);
        dp = warp_sum(dp);
        if (lane == 0) {
          att_row<T> x = {keeph, first >= (causal ? i + 1 : tk), biash ? biash + i * tk : NULL};
          float p = expf(att_score(scale * s, x, j) - lh[i]);
          pt[ii] = p;
          dst[ii] = scale * p * (dp - dh[i]);
        }
      }
      __syncthreads();
      for (long d = threadIdx.x; d < hs; d += blockDim.x) {
        float ak = acck[d], av = accv[d];
        for (long ii = 0; ii < it; ii++) {
          av += pt[ii] * ld(doh[(ib + ii) * hs + d]);
          ak += dst[ii] * ld(qh[(ib + ii) * hs + d]);
        }
        acck[d] = ak;
        accv[d] = av;
      }
      __syncthreads();
    }
    for (long d = threadIdx.x; d < hs; d += blockDim.x) {
      dk[row * hs + d] = to<T>(acck[d]);
      dv[row * hs + d] = to<T>(accv[d]);
    }
  }
}

// ---- attention on the tensor cores (bf16)
//
// FlashAttention-2's tiling on mma.sync (mma_cuda.cuh): a block takes FA_ROWS
// query rows of one head (forward, dq) or FA_ROWS keys (dk, dv), 16 to a warp,
// and walks the other side in tiles of FA_COLS, each tile staged in shared
// memory. A warp's products (q k^T, p v, dout v^T, ds k, p^T dout, ds^T q) are
// 16 x 8 x 16 bf16 mma ops summing in float; their results stay in registers,
// the softmax runs on them there, and its probabilities (and ds), rounded to
// bf16, are the next product's operand as they are (never the T x T matrix,
// nor a tile of it in shared memory). Head sizes are padded with zeros to HS
// (32, 64 or 128). The masks are att_score's: causal, and the key-padding
// mask with its all-masked rows. Used for bf16 without a bias or dscores, on
// sm_80 and later; otherwise the kernels above.
#define FA_ROWS 64
#define FA_COLS 64
#define FA_THREADS 128
#define FA_MAXHS 128
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define FA_ARCH_OK 0  // no bf16 mma.sync: the kernels trap, and the launchers never pick them
#else
#define FA_ARCH_OK 1
#endif

typedef __nv_bfloat16 bf16;

// Shared memory carved in 128-byte pieces, at `base` (or from 0, to size it on the host).
struct fa_carve {
  char *base;
  size_t off;
  template <typename X>
  __host__ __device__ X *take(long n) {
    X *p = base ? (X *)(base + off) : NULL;
    off += ((size_t)n * sizeof(X) + 127) / 128 * 128;
    return p;
  }
};

// The shared memory of the three kernels: bf16 tiles of 64 rows of HS, LD
// elements a row (16 bytes past HS, so that ldmatrix's eight rows fall in
// different banks). The tiles a block walks are two of each: the next one
// fills (cp.async) while the warps use this one.
template <int HS>
struct fa_tiles {
  static constexpr int LD = HS + 8;
  enum Kind { FWD, DQ, DKDV };
  bf16 *a, *b;          // the block's own rows: fwd, dq: q (and dout); dkdv: keys and values
  bf16 *c[2], *d[2];    // the walked tiles: fwd, dq: keys and values; dkdv: q and dout
  float *m[2], *D[2];   // dkdv: the query tile's lse (log2 units) and D
  int *none[2];         // dkdv: the query tile's rows that keep no key
  size_t bytes;
  // buffer `at` (0 or 1) of each: a select, not an index (which would put the pointers in local
  // memory)
  __device__ bf16 *cb(long at) const { return at ? c[1] : c[0]; }
  __device__ bf16 *db(long at) const { return at ? d[1] : d[0]; }
  __device__ float *mb(long at) const { return at ? m[1] : m[0]; }
  __device__ float *Db(long at) const { return at ? D[1] : D[0]; }
  __device__ int *noneb(long at) const { return at ? none[1] : none[0]; }
  __host__ __device__ fa_tiles(char *base, Kind kind) {
    fa_carve t = {base, 0};
    bool dkdv = kind == DKDV;
    a = t.take<bf16>(FA_ROWS * LD);
    b = kind != FWD ? t.take<bf16>(FA_ROWS * LD) : NULL;
    for (int s = 0; s < 2; s++) {
      c[s] = t.take<bf16>(FA_COLS * LD);
      d[s] = t.take<bf16>(FA_COLS * LD);
      m[s] = dkdv ? t.take<float>(FA_COLS) : NULL;
      D[s] = dkdv ? t.take<float>(FA_COLS) : NULL;
      none[s] = dkdv ? t.take<int>(FA_COLS) : NULL;
    }
    bytes = t.off;
  }
};

// dst[r][d] (ld HS + 8) <- rows [r0, r0 + 64) of src (n rows of hs), zeros
// past n and hs. With vec (hs % 8 == 0, src 16-byte aligned) 16 bytes a
// thread by cp.async, landed once the caller's cp_async_wait says so; else
// stored at once.
template <int HS>
__device__ void fa_load(bf16 *dst, const bf16 *src, long r0, long n, long hs, bool vec) {
  constexpr int LD = HS + 8;
  if (vec) {
    constexpr int per = HS / 8;
    for (int e = threadIdx.x; e < 64 * per; e += blockDim.x) {
      int r = e / per, c = e % per * 8;
      bool in = r0 + r < n && c < hs;
      cp_async16(dst + r * LD + c, in ? src + (r0 + r) * hs + c : src, in);
    }
  } else {
    for (int e = threadIdx.x; e < 64 * HS; e += blockDim.x) {
      int r = e / HS, c = e % HS;
      dst[r * LD + c] = r0 + r < n && c < hs ? src[(r0 + r) * hs + c] : __float2bfloat16(0.0f);
    }
  }
}

// A warp's tile of 16 rows (its rows r0.. of a block's 64) by n columns is
// n / 8 mma tiles x[n / 8][4]: a lane's x[c][e] is row r0 + FA_ROW(e), column
// FA_COL(c, e) (mma_16816's d). The four lanes of a row are a quad.
#define FA_ROW(e) (threadIdx.x % 32 / 4 + 8 * ((e) / 2))
#define FA_COL(c, e) (8 * (c) + 2 * (threadIdx.x % 4) + (e) % 2)
#define FA_LOG2E 1.4426950408889634f

// s (16 x 64) = rows r0.. of tile a times tile b transposed (64 x HS each)
template <int HS>
__device__ inline void fa_abt(float s[FA_COLS / 8][4], const bf16 *a, const bf16 *b, int r0) {
  constexpr int LD = HS + 8;
#pragma unroll
  for (int c = 0; c < FA_COLS / 8; c++)
#pragma unroll
    for (int e = 0; e < 4; e++) s[c][e] = 0.0f;
#pragma unroll
  for (int kb = 0; kb < HS / 16; kb++) {
    uint32_t af[4];
    mma_a(af, a, LD, r0, 16 * kb);
#pragma unroll
    for (int c = 0; c < FA_COLS / 8; c += 2) {
      uint32_t bf[4];
      mma_bt(bf, b, LD, 8 * c, 16 * kb);
      mma_16816(s[c], af, bf);
      mma_16816(s[c + 1], af, bf + 2);
    }
  }
}

// acc (16 x HS) += p (16 x 64, rounded to bf16) times tile b (64 x HS)
template <int HS>
__device__ inline void fa_pb(float acc[HS / 8][4], const float p[FA_COLS / 8][4], const bf16 *b) {
  constexpr int LD = HS + 8;
#pragma unroll
  for (int kk = 0; kk < FA_COLS / 16; kk++) {
    const float *lo = p[2 * kk], *hi = p[2 * kk + 1];
    uint32_t pa[4] = {mma_pack(lo[0], lo[1]), mma_pack(lo[2], lo[3]), mma_pack(hi[0], hi[1]),
                      mma_pack(hi[2], hi[3])};
#pragma unroll
    for (int c = 0; c < HS / 8; c += 2) {
      uint32_t bf[4];
      mma_b(bf, b, LD, 16 * kk, 8 * c);
      mma_16816(acc[c], pa, bf);
      mma_16816(acc[c + 1], pa, bf + 2);
    }
  }
}

// Rows r0 + FA_ROW(e) of dst (n rows of hs) <- a warp's acc (16 x HS), each
// row divided by div[e / 2] when div is given; rows at or past n are left out.
template <int HS>
__device__ void fa_store(bf16 *dst, const float acc[HS / 8][4], const float *div, int r0, long n,
                         long hs) {
#pragma unroll
  for (int c = 0; c < HS / 8; c++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      long r = r0 + FA_ROW(e), d = FA_COL(c, e);
      if (r < n && d < hs)
        dst[r * hs + d] = __float2bfloat16_rn(div ? acc[c][e] / div[e / 2] : acc[c][e]);
    }
}

// the max and the sum over a quad (the four lanes of a row)
__device__ inline float fa_row_max(float v) {
  for (int o = 1; o < 4; o <<= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}
__device__ inline float fa_row_sum(float v) {
  for (int o = 1; o < 4; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The score of query i for key j as the softmax sees it (att_keep), s the
// scaled product (in log2 units: the kernels take exp2): -inf outside the
// query's window (past tk; after i when causal).
__device__ inline float fa_score(float s, long i, long j, long tk, int causal, const int *keep,
                                 bool none) {
  if (j >= tk || (causal && j > i)) return -INFINITY;
  return att_keep(s, keep, j, none);
}

// Whether query i's window keeps no key (first: the mask's first kept key).
__device__ inline bool fa_none(const int *keep, long first, long i, long tk, int causal) {
  return keep && first >= (causal ? i + 1 : tk);
}

// out = softmax(q k^T scale) v for blocks of 64 query rows, lse each row's log-sum-exp
template <int HS>
__global__ void __launch_bounds__(FA_THREADS)
    flash_fwd_kernel(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                     const int *keep, long bh, long tq, long tk, long hs, long heads, int causal,
                     float scale, bool vec) {
#if FA_ARCH_OK
  typedef fa_tiles<HS> F;
  RT_DYNAMIC_SHARED(float, smem);
  F t((char *)smem, F::FWD);
  long nq = (tq + FA_ROWS - 1) / FA_ROWS;
  int r0 = threadIdx.x / 32 * 16;
  float scale2 = scale * FA_LOG2E;
  for (long blk = blockIdx.x; blk < bh * nq; blk += gridDim.x) {
    long h = blk / nq, q0 = (nq - 1 - blk % nq) * FA_ROWS;  // the longest causal rows first
    const int *keeph = keep ? keep + h / heads * tk : NULL;
    const bf16 *kh = k + h * tk * hs, *vh = v + h * tk * hs;
    long first = att_first_kept(keeph, tk), i[2];
    bool none[2];
    // a lane's two rows: the running max (log2 units, of the scores times scale2) and sum
    float o[HS / 8][4] = {}, m[2], l[2];
    for (int r = 0; r < 2; r++) {
      i[r] = q0 + r0 + FA_ROW(2 * r);
      none[r] = fa_none(keeph, first, i[r], tk, causal);
      m[r] = -INFINITY;
      l[r] = 0.0f;  // the lane's part, summed over the quad at the end
    }
    __syncthreads();  // the previous block's rows are read
    fa_load<HS>(t.a, q + h * tq * hs, q0, tq, hs, vec);
    long jend = causal && q0 + FA_ROWS < tk ? q0 + FA_ROWS : tk;
    fa_load<HS>(t.cb(0), kh, 0, tk, hs, vec);
    fa_load<HS>(t.db(0), vh, 0, tk, hs, vec);
    cp_async_commit();
    for (long j0 = 0, at = 0; j0 < jend; j0 += FA_COLS, at ^= 1) {
      if (j0 + FA_COLS < jend) {  // the next tile fills while this one is used
        fa_load<HS>(t.cb(at ^ 1), kh, j0 + FA_COLS, tk, hs, vec);
        fa_load<HS>(t.db(at ^ 1), vh, j0 + FA_COLS, tk, hs, vec);
      }
      cp_async_commit();
      cp_async_wait<1>();  // this tile (and q) landed
      __syncthreads();
      const bf16 *kt = t.cb(at), *vt = t.db(at);
      float s[FA_COLS / 8][4], mx[2] = {m[0], m[1]}, corr[2];
      fa_abt<HS>(s, t.a, kt, r0);
#pragma unroll
      for (int c = 0; c < FA_COLS / 8; c++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          float x = fa_score(scale2 * s[c][e], i[e / 2], j0 + FA_COL(c, e), tk, causal, keeph,
                             none[e / 2]);
          s[c][e] = x;
          mx[e / 2] = x > mx[e / 2] ? x : mx[e / 2];
        }
      for (int r = 0; r < 2; r++) {
        mx[r] = fa_row_max(mx[r]);
        // 0 on the first tile (m = -inf); 1 while every key so far is masked
        corr[r] = mx[r] == -INFINITY ? 1.0f : exp2f(m[r] - mx[r]);
        m[r] = mx[r];
        l[r] *= corr[r];
      }
#pragma unroll
      for (int c = 0; c < HS / 8; c++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[c][e] *= corr[e / 2];
#pragma unroll
      for (int c = 0; c < FA_COLS / 8; c++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          float p = s[c][e] == -INFINITY ? 0.0f : exp2f(s[c][e] - m[e / 2]);
          l[e / 2] += p;
          s[c][e] = p;
        }
      fa_pb<HS>(o, s, vt);
      __syncthreads();  // every warp has read the tile before it is filled again
    }
    for (int r = 0; r < 2; r++) l[r] = fa_row_sum(l[r]);
    fa_store<HS>(out + (h * tq + q0) * hs, o, l, r0, tq - q0, hs);
    for (int r = 0; r < 2; r++)
      if (threadIdx.x % 4 == 0 && i[r] < tq) lse[h * tq + i[r]] = (m[r] + log2f(l[r])) / FA_LOG2E;
  }
#else
  __trap();
#endif
}

// Backward, per block of 64 query rows: D = dout . out, then dq = sum_j ds_ij
// k_j over the key tiles, ds_ij = scale p_ij (dp_ij - D_i), p_ij = exp(s_ij -
// lse_i); the rows' D into dsum.
template <int HS>
__global__ void __launch_bounds__(FA_THREADS)
    flash_bwd_dq_kernel(bf16 *dq, float *dsum, const bf16 *dout, const bf16 *q, const bf16 *k,
                        const bf16 *v, const bf16 *out, const float *lse, const int *keep,
                        long bh, long tq, long tk, long hs, long heads, int causal, float scale,
                        bool vec) {
#if FA_ARCH_OK
  typedef fa_tiles<HS> F;
  RT_DYNAMIC_SHARED(float, smem);
  F t((char *)smem, F::DQ);
  long nq = (tq + FA_ROWS - 1) / FA_ROWS;
  int r0 = threadIdx.x / 32 * 16;
  float scale2 = scale * FA_LOG2E;
  for (long blk = blockIdx.x; blk < bh * nq; blk += gridDim.x) {
    long h = blk / nq, q0 = (nq - 1 - blk % nq) * FA_ROWS;
    const int *keeph = keep ? keep + h / heads * tk : NULL;
    const bf16 *kh = k + h * tk * hs, *vh = v + h * tk * hs;
    long first = att_first_kept(keeph, tk);
    __syncthreads();
    fa_load<HS>(t.a, q + h * tq * hs, q0, tq, hs, vec);
    fa_load<HS>(t.b, dout + h * tq * hs, q0, tq, hs, vec);
    fa_load<HS>(t.cb(0), kh, 0, tk, hs, vec);
    fa_load<HS>(t.db(0), vh, 0, tk, hs, vec);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    // a lane's two rows: lse (log2 units) and D = dout . out (a quarter of the row a lane)
    float m[2], D[2], acc[HS / 8][4] = {};
    long i[2];
    bool none[2];
    for (int r = 0; r < 2; r++) {
      int row = r0 + FA_ROW(2 * r);
      i[r] = q0 + row;
      float s = 0.0f;
      if (i[r] < tq)
        for (long d = threadIdx.x % 4; d < hs; d += 4)
          s += __bfloat162float(t.b[row * F::LD + d]) *
               __bfloat162float(out[(h * tq + i[r]) * hs + d]);
      m[r] = i[r] < tq ? lse[h * tq + i[r]] * FA_LOG2E : 0.0f;
      D[r] = fa_row_sum(s);
      none[r] = fa_none(keeph, first, i[r], tk, causal);
    }
    long jend = causal && q0 + FA_ROWS < tk ? q0 + FA_ROWS : tk;
    for (long j0 = 0, at = 0; j0 < jend; j0 += FA_COLS, at ^= 1) {
      if (j0 + FA_COLS < jend) {  // the next tile fills while this one is used
        fa_load<HS>(t.cb(at ^ 1), kh, j0 + FA_COLS, tk, hs, vec);
        fa_load<HS>(t.db(at ^ 1), vh, j0 + FA_COLS, tk, hs, vec);
      }
      cp_async_commit();
      cp_async_wait<1>();
      __syncthreads();
      const bf16 *kt = t.cb(at), *vt = t.db(at);
      float s[FA_COLS / 8][4], dp[FA_COLS / 8][4];
      fa_abt<HS>(s, t.a, kt, r0);
      fa_abt<HS>(dp, t.b, vt, r0);
#pragma unroll
      for (int c = 0; c < FA_COLS / 8; c++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          float x = fa_score(scale2 * s[c][e], i[e / 2], j0 + FA_COL(c, e), tk, causal, keeph,
                             none[e / 2]);
          float p = x == -INFINITY ? 0.0f : exp2f(x - m[e / 2]);
          s[c][e] = scale * p * (dp[c][e] - D[e / 2]);  // ds
        }
      fa_pb<HS>(acc, s, kt);
      __syncthreads();  // every warp has read the tile before it is filled again
    }
    fa_store<HS>(dq + (h * tq + q0) * hs, acc, NULL, r0, tq - q0, hs);
    for (int r = 0; r < 2; r++)
      if (threadIdx.x % 4 == 0 && i[r] < tq) dsum[h * tq + i[r]] = D[r];
  }
#else
  __trap();
#endif
}

// Backward, per block of 64 keys: dv_j = sum_i p_ij dout_i and dk_j = sum_i
// ds_ij q_i over the query tiles that see them, with the rows' stats.
template <int HS>
__global__ void __launch_bounds__(FA_THREADS)
    flash_bwd_dkdv_kernel(bf16 *dk, bf16 *dv, const float *lse, const float *dsum,
                          const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
                          const int *keep, long bh, long tq, long tk, long hs, long heads,
                          int causal, float scale, bool vec) {
#if FA_ARCH_OK
  typedef fa_tiles<HS> F;
  RT_DYNAMIC_SHARED(float, smem);
  F t((char *)smem, F::DKDV);
  long nk = (tk + FA_ROWS - 1) / FA_ROWS;
  int r0 = threadIdx.x / 32 * 16;
  float scale2 = scale * FA_LOG2E;
  for (long blk = blockIdx.x; blk < bh * nk; blk += gridDim.x) {
    long h = blk / nk, j0 = blk % nk * FA_ROWS;
    const int *keeph = keep ? keep + h / heads * tk : NULL;
    const bf16 *qh = q + h * tq * hs, *doh = dout + h * tq * hs;
    const float *lh = lse + h * tq, *dh = dsum + h * tq;
    long first = att_first_kept(keeph, tk);
    long j[2] = {j0 + r0 + FA_ROW(0), j0 + r0 + FA_ROW(2)};  // a lane's two keys
    float gk[HS / 8][4] = {}, gv[HS / 8][4] = {};
    __syncthreads();
    fa_load<HS>(t.a, k + h * tk * hs, j0, tk, hs, vec);
    fa_load<HS>(t.b, v + h * tk * hs, j0, tk, hs, vec);
    // the query tile i0 into buffer `at`: q, dout (cp.async), their rows' stats
    auto load_queries = [&](long i0, int at) {
      fa_load<HS>(t.cb(at), qh, i0, tq, hs, vec);
      fa_load<HS>(t.db(at), doh, i0, tq, hs, vec);
      for (int c = threadIdx.x; c < FA_COLS; c += blockDim.x) {
        long i = i0 + c;
        bool in = i < tq;
        t.mb(at)[c] = in ? lh[i] * FA_LOG2E : 0.0f;
        t.Db(at)[c] = in ? dh[i] : 0.0f;
        t.noneb(at)[c] = in && fa_none(keeph, first, i, tk, causal);
      }
    };
    long istart = causal ? j0 : 0;
    if (istart < tq) load_queries(istart, 0);
    cp_async_commit();
    for (long i0 = istart, at = 0; i0 < tq; i0 += FA_COLS, at ^= 1) {
      if (i0 + FA_COLS < tq) load_queries(i0 + FA_COLS, at ^ 1);  // fills while this is used
      cp_async_commit();
      cp_async_wait<1>();  // this tile (and the block's keys and values) landed
      __syncthreads();
      const bf16 *qt = t.cb(at), *dot = t.db(at);
      const float *mt = t.mb(at), *Dt = t.Db(at);
      const int *nonet = t.noneb(at);
      // s^T = k q^T and dp^T = v dout^T, the warp's 16 keys against the tile's queries
      float s[FA_COLS / 8][4], dp[FA_COLS / 8][4];
      fa_abt<HS>(s, t.a, qt, r0);
      fa_abt<HS>(dp, t.b, dot, r0);
#pragma unroll
      for (int c = 0; c < FA_COLS / 8; c++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          int col = FA_COL(c, e);
          long i = i0 + col;
          float x = i < tq ? fa_score(scale2 * s[c][e], i, j[e / 2], tk, causal, keeph,
                                      nonet[col])
                           : -INFINITY;
          float p = x == -INFINITY ? 0.0f : exp2f(x - mt[col]);
          s[c][e] = p;                                 // p^T
          dp[c][e] = scale * p * (dp[c][e] - Dt[col]);  // ds^T
        }
      fa_pb<HS>(gv, s, dot);
      fa_pb<HS>(gk, dp, qt);
      __syncthreads();  // every warp has read the tile before it is filled again
    }
    cp_async_wait<0>();  // nothing in flight (a block with no query tile)
    fa_store<HS>(dk + (h * tk + j0) * hs, gk, NULL, r0, tk - j0, hs);
    fa_store<HS>(dv + (h * tk + j0) * hs, gv, NULL, r0, tk - j0, hs);
  }
#else
  __trap();
#endif
}

// ---- launchers

// dynamic shared memory of an attention kernel: opts in past the default
// 48 KiB when hs needs it
static size_t att_smem(const void *kernel, size_t bytes, long hs) {
  if (bytes > 48 * 1024) {
    int device, most;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (bytes > (size_t)most) {
      fprintf(stderr, "attention: head size %ld needs %zu bytes of shared memory (most %d)\n",
              hs, bytes, most);
      exit(EXIT_FAILURE);
    }
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)bytes));
  }
  return bytes;
}

// The padded head size (32, 64, 128) of the tensor-core attention for these
// operands, or 0 when it does not take them: bf16, no bias, no dscores, hs at
// most FA_MAXHS, a device of compute capability 8.0 or later.
template <typename T>
static int fa_hs(long hs, const void *bias, const void *dscores) {
  if (!std::is_same<T, bf16>::value || bias || dscores || hs > FA_MAXHS) return 0;
  static int major = -1;
  if (major < 0) {
    int device;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  }
  return major < 8 ? 0 : hs <= 32 ? 32 : hs <= 64 ? 64 : 128;
}

// f(std::integral_constant<int, HS>()) for the padded head size hsp; false when hsp is 0
template <typename F>
static bool fa_dispatch(int hsp, F f) {
  switch (hsp) {
    case 32: f(std::integral_constant<int, 32>()); return true;
    case 64: f(std::integral_constant<int, 64>()); return true;
    case 128: f(std::integral_constant<int, 128>()); return true;
  }
  return false;
}

// whether rows of hs bf16 at each pointer (NULL: none) load 16 bytes at a time
static bool fa_vec(long hs, const void *a, const void *b, const void *c, const void *d) {
  const void *ps[] = {a, b, c, d};
  for (const void *p : ps)
    if ((uintptr_t)p % 16 != 0) return false;
  return hs % 8 == 0;
}

template <int HS>
static void flash_fwd(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                      const int *keep, long bh, long t, long tk, long hs, long heads, int causal,
                      float scale) {
  size_t smem = att_smem((const void *)flash_fwd_kernel<HS>,
                         fa_tiles<HS>(NULL, fa_tiles<HS>::FWD).bytes, hs);
  RT_LAUNCH(flash_fwd_kernel<HS>, grid_rows(bh * ((t + FA_ROWS - 1) / FA_ROWS)), FA_THREADS, smem,
            rt_cuda_stream, out, lse, q, k, v, keep, bh, t, tk, hs, heads, causal, scale,
            fa_vec(hs, q, k, v, NULL));
  LAUNCHED();
}

template <int HS>
static void flash_bwd(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q,
                      const bf16 *k, const bf16 *v, const bf16 *out, const float *lse,
                      const int *keep, long bh, long t, long tk, long hs, long heads, int causal,
                      float scale) {
  float *dsum = (float *)scratch((size_t)(bh * t) * sizeof(float), "attention_bwd");
  bool vec = fa_vec(hs, q, k, v, dout);
  size_t smem = att_smem((const void *)flash_bwd_dq_kernel<HS>,
                         fa_tiles<HS>(NULL, fa_tiles<HS>::DQ).bytes, hs);
  RT_LAUNCH(flash_bwd_dq_kernel<HS>, grid_rows(bh * ((t + FA_ROWS - 1) / FA_ROWS)), FA_THREADS,
            smem, rt_cuda_stream, dq, dsum, dout, q, k, v, out, lse, keep, bh, t, tk, hs, heads,
            causal, scale, vec);
  LAUNCHED();
  smem = att_smem((const void *)flash_bwd_dkdv_kernel<HS>,
                  fa_tiles<HS>(NULL, fa_tiles<HS>::DKDV).bytes, hs);
  RT_LAUNCH(flash_bwd_dkdv_kernel<HS>, grid_rows(bh * ((tk + FA_ROWS - 1) / FA_ROWS)),
            FA_THREADS, smem, rt_cuda_stream, dk, dv, lse, dsum, dout, q, k, v, keep, bh, t, tk,
            hs, heads, causal, scale, vec);
  LAUNCHED();
}

template <typename T>
static void attention_fwd(T *out, float *lse, const T *q, const T *k, const T *v, const int *keep,
                          const T *bias, long bh, long t, long tk, long hs, long heads, long bdiv,
                          long bmod, int causal) {
  if (bh <= 0 || t <= 0 || tk <= 0 || hs <= 0) return;
  float scale = 1.0f / sqrtf((float)hs);
  if constexpr (std::is_same<T, bf16>::value)
    if (fa_dispatch(fa_hs<T>(hs, bias, NULL), [&](auto hsp) {
          flash_fwd<decltype(hsp)::value>(out, lse, q, k, v, keep, bh, t, tk, hs, heads, causal,
                                          scale);
        }))
      return;
  size_t smem = att_smem((const void *)attention_fwd_kernel<T>, (hs + ATT_TILE) * sizeof(float), hs);
  RT_LAUNCH(attention_fwd_kernel, grid_rows(bh * t), ATT_THREADS, smem, rt_cuda_stream, out, lse,
            q, k, v, keep, bias, bh, t, tk, hs, heads, bdiv, bmod, causal, scale);
  LAUNCHED();
}
RT_CUDA_KT(attention_fwd,
           (T *out, float *lse, const T *q, const T *k, const T *v, const int *keep, const T *bias,
            long bh, long t, long tk, long hs, long heads, long bdiv, long bmod, int causal),
           (dev(out), lse, dev(q), dev(k), dev(v), keep, dev(bias), bh, t, tk, hs, heads, bdiv,
            bmod, causal))

template <typename T>
static void attention_bwd(T *dq, T *dk, T *dv, T *dscores, const T *dout, const T *q, const T *k,
                          const T *v, const T *out, const float *lse, const int *keep,
                          const T *bias, long bh, long t, long tk, long hs, long heads, long bdiv,
                          long bmod, int causal) {
  if (bh <= 0 || t <= 0 || tk <= 0 || hs <= 0) return;
  float scale = 1.0f / sqrtf((float)hs);
  if constexpr (std::is_same<T, bf16>::value)
    if (fa_dispatch(fa_hs<T>(hs, bias, dscores), [&](auto hsp) {
          flash_bwd<decltype(hsp)::value>(dq, dk, dv, dout, q, k, v, out, lse, keep, bh, t, tk,
                                          hs, heads, causal, scale);
        }))
      return;
  float *dsum = (float *)scratch((size_t)(bh * t) * sizeof(float), "attention_bwd");
  size_t smem = att_smem((const void *)attention_bwd_dq_kernel<T>, (hs + 2 * ATT_TILE) * sizeof(float), hs);
  RT_LAUNCH(attention_bwd_dq_kernel, grid_rows(bh * t), ATT_THREADS, smem, rt_cuda_stream, dq,
            dscores, dsum, dout, q, k, v, out, lse, keep, bias, bh, t, tk, hs, heads, bdiv, bmod,
            causal, scale);
  LAUNCHED();
  smem = att_smem((const void *)attention_bwd_dkdv_kernel<T>, (2 * hs + 2 * ATT_TILE) * sizeof(float),
                  hs);
  RT_LAUNCH(attention_bwd_dkdv_kernel, grid_rows(bh * tk), ATT_THREADS, smem, rt_cuda_stream, dk,
            dv, lse, dsum, dout, q, k, v, keep, bias, bh, t, tk, hs, heads, bdiv, bmod, causal,
            scale);
  LAUNCHED();
}
RT_CUDA_KT(attention_bwd,
           (T *dq, T *dk, T *dv, T *dscores, const T *dout, const T *q, const T *k, const T *v,
            const T *out, const float *lse, const int *keep, const T *bias, long bh, long t,
            long tk, long hs, long heads, long bdiv, long bmod, int causal),
           (dev(dq), dev(dk), dev(dv), dev(dscores), dev(dout), dev(q), dev(k), dev(v), dev(out),
            lse, keep, dev(bias), bh, t, tk, hs, heads, bdiv, bmod, causal))
