// Matrix products (cuBLAS), convolution through im2col, and max pooling. The CUDA build's kernels,
// each family's launchers after its kernels; included by kernels_cuda.cu after the helpers every
// family shares (ld, to, Pack, the block sums; grid_for, scratch, dev, RT_CUDA_KT).

// ---- matmul: launchers

static cublasHandle_t cublas_handle(void) {
  static cublasHandle_t h = NULL;
  if (!h) {
    cublasCheck(cublasCreate(&h));
    // fp32 compute, no TF32 (CUBLAS_TF32_TENSOR_OP_MATH would allow it)
    cublasCheck(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    // once: cublasSetStream also puts back cuBLAS's own workspace, so calling
    // it again would undo rt_cuda_set_workspace's
    cublasCheck(cublasSetStream(h, rt_cuda_stream));
  }
  return h;
}

static int as_int(long x, const char *what) {
  if (x < 0 || x > 2147483647L) {
    fprintf(stderr, "rt_matmul: %s = %ld does not fit cuBLAS's int\n", what, x);
    exit(EXIT_FAILURE);
  }
  return (int)x;
}

// cuBLAS's name of an element type
static cudaDataType_t cuda_type(const float *) { return CUDA_R_32F; }
static cudaDataType_t cuda_type(const __nv_bfloat16 *) { return CUDA_R_16BF; }

// The GEMMs of rt_matmul, in cuBLAS's column-major terms: C (n x m, ldc n) =
// op(B) op(A), alpha 1. float32 operands and product: SGEMM, as the float32
// kernel has always run (no TF32: cublas_handle). bf16 operands: GemmEx,
// accumulating in float32 (CUBLAS_COMPUTE_32F), into a bf16 or a float32 C.
// (No cuBLAS GEMM reads float32 and writes bf16: rt_matmul_f32_bf16 rounds
// an SGEMM's product.)
//
// One GEMM, C = op(B) op(A) + beta C:
static void gemm(cublasHandle_t h, cublasOperation_t opb, cublasOperation_t opa, int n, int m,
                 int k, const float *b, int ldb, const float *a, int lda, const float *beta,
                 float *c) {
  const float one = 1.0f;
  cublasCheck(cublasSgemm(h, opb, opa, n, m, k, &one, b, ldb, a, lda, beta, c, n));
}

template <typename U>
static void gemm(cublasHandle_t h, cublasOperation_t opb, cublasOperation_t opa, int n, int m,
                 int k, const __nv_bfloat16 *b, int ldb, const __nv_bfloat16 *a, int lda,
                 const float *beta, U *c) {
  const float one = 1.0f;
  cublasCheck(cublasGemmEx(h, opb, opa, n, m, k, &one, b, CUDA_R_16BF, ldb, a, CUDA_R_16BF, lda,
                           beta, c, cuda_type(c), n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// A strided batch of them, C_i = op(B_i) op(A_i):
static void gemm_batched(cublasHandle_t h, cublasOperation_t opb, cublasOperation_t opa, int n,
                         int m, int k, const float *b, int ldb, long sb, const float *a, int lda,
                         long sa, float *c, long sc, int batch) {
  const float one = 1.0f, zero = 0.0f;
  cublasCheck(cublasSgemmStridedBatched(h, opb, opa, n, m, k, &one, b, ldb, sb, a, lda, sa, &zero,
                                        c, n, sc, batch));
}

template <typename U>
static void gemm_batched(cublasHandle_t h, cublasOperation_t opb, cublasOperation_t opa, int n,
                         int m, int k, const __nv_bfloat16 *b, int ldb, long sb,
                         const __nv_bfloat16 *a, int lda, long sa, U *c, long sc, int batch) {
  const float one = 1.0f, zero = 0.0f;
  cublasCheck(cublasGemmStridedBatchedEx(h, opb, opa, n, m, k, &one, b, CUDA_R_16BF, ldb, sb, a,
                                         CUDA_R_16BF, lda, sa, &zero, c, cuda_type(c), n, sc,
                                         batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS
// gets B first (its row-major storage read as column-major is B^T), then A.
// sc == 0 with batch > 1 sums the products into one C: one GEMM per item,
// beta = 1 after the first (into a bf16 C: in float32, rounded once, as
// beta = 1 on a bf16 C would round after every item).
template <typename T, typename U>
static void matmul(U *c, const T *a, const T *b, long batch, long m, long n, long k, int ta,
                   int tb, long sa, long sb, long sc) {
  if (m <= 0 || n <= 0) return;
  if (batch <= 0 || k <= 0) {  // empty products are zero
    long nc = (sc == 0 || batch <= 0) ? 1 : batch;
    for (long i = 0; i < nc; i++) fill(c + i * sc, m * n, 0.0f);
    return;
  }
  if (std::is_same<U, __nv_bfloat16>::value && sc == 0 && batch > 1) {
    float *f = temp_f32(m * n, "matmul");
    matmul(f, a, b, batch, m, n, k, ta, tb, sa, sb, 0L);
    cast(c, f, m * n);
    return;
  }
  cublasHandle_t h = cublas_handle();
  int im = as_int(m, "m"), in = as_int(n, "n"), ik = as_int(k, "k"), ib = as_int(batch, "batch");
  int lda = ta ? im : ik, ldb = tb ? ik : in;
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (sc != 0 || batch == 1) {
    gemm_batched(h, opb, opa, in, im, ik, b, ldb, sb, a, lda, sa, c, sc, ib);
  } else {
    const float one = 1.0f, zero = 0.0f;
    for (long i = 0; i < batch; i++)
      gemm(h, opb, opa, in, im, ik, b + i * sb, ldb, a + i * sa, lda, i == 0 ? &zero : &one, c);
  }
  LAUNCHED();
}

// float32 operands, a bf16 product (rt_matmul_f32_bf16): rt_matmul's
// float32 products into a temporary, each rounded once into its place in c.
static void matmul(__nv_bfloat16 *c, const float *a, const float *b, long batch, long m, long n,
                   long k, int ta, int tb, long sa, long sb, long sc) {
  if (m <= 0 || n <= 0) return;
  long items = sc == 0 || batch <= 1 ? 1 : batch, mn = m * n;
  float *f = temp_f32(items * mn, "matmul");
  matmul(f, a, b, batch, m, n, k, ta, tb, sa, sb, items == 1 ? 0L : mn);
  if (items == 1 || sc == mn) {
    cast(c, f, items * mn);
  } else {
    for (long i = 0; i < items; i++) cast(c + i * sc, f + i * mn, mn);
  }
}
RT_CUDA_KTU(matmul,
            (U *c, const T *a, const T *b, long batch, long m, long n, long k, int ta, int tb,
             long sa, long sb, long sc),
            (dev(c), dev(a), dev(b), batch, m, n, k, ta, tb, sa, sb, sc))

// ---- matmul_bias: cuBLASLt's GEMM with the bias (and GELU) in its epilogue

static cublasLtHandle_t lt_handle(void) {
  static cublasLtHandle_t h = NULL;
  if (!h) cublasCheck(cublasLtCreate(&h));
  return h;
}

template <typename V>
static void lt_set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, V v) {
  cublasCheck(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v));
}

// A column-major rows x cols layout of type t (leading dimension rows), `batch` of them `stride`
// elements apart.
static cublasLtMatrixLayout_t lt_layout(cudaDataType_t t, long rows, long cols, int batch,
                                        long stride) {
  cublasLtMatrixLayout_t l;
  cublasCheck(cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, rows));
  if (batch > 1) {
    int64_t s = stride;
    cublasCheck(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                 sizeof batch));
    cublasCheck(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                 &s, sizeof s));
  }
  return l;
}

// cuBLASLt's description of rt_matmul's product D (n x m, column-major) = op(B) op(A), of
// `batch` items sa, sb and m x n elements apart, float32 compute, with `epilogue` on `bias`.
struct LtProduct {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t b, a, d;
};
template <typename T, typename U>
static LtProduct lt_product(const T *a, const U *d, long batch, long m, long n, long k, int ta,
                            int tb, long sa, long sb, uint32_t epilogue, const void *bias) {
  int im = as_int(m, "m"), in = as_int(n, "n"), ik = as_int(k, "k"), ib = as_int(batch, "batch");
  LtProduct p;
  cublasCheck(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  lt_set<int32_t>(p.op, CUBLASLT_MATMUL_DESC_TRANSA, tb ? CUBLAS_OP_T : CUBLAS_OP_N);
  lt_set<int32_t>(p.op, CUBLASLT_MATMUL_DESC_TRANSB, ta ? CUBLAS_OP_T : CUBLAS_OP_N);
  lt_set<uint32_t>(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  lt_set<const void *>(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  p.b = lt_layout(cuda_type(a), tb ? ik : in, tb ? in : ik, ib, sb);
  p.a = lt_layout(cuda_type(a), ta ? im : ik, ta ? ik : im, ib, sa);
  p.d = lt_layout(cuda_type(d), in, im, ib, m * n);
  return p;
}

// Runs p (C is D: beta 0) with cuBLASLt's algorithm for it, and frees it: 1, or 0 where it has
// none (CUBLAS_STATUS_NOT_SUPPORTED; any other status is an error) or k = 0 (the callers'
// fallbacks do empty products). The workspace is the GEMMs' (cuBLAS's and cuBLASLt's calls
// take turns on the one stream).
static int lt_run(LtProduct p, const void *a, const void *b, void *d, long k) {
  cublasLtMatmulHeuristicResult_t found;
  int n = 0;
  if (k > 0) {
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = workspace ? (uint64_t)RT_GEMM_WORKSPACE_BYTES : 0;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(lt_handle(), p.op, p.b, p.a, p.d, p.d, pref, 1, &found, &n);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) cublasCheck(st);
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
  }
  if (n > 0) {
    const float one = 1.0f, zero = 0.0f;
    cublasCheck(cublasLtMatmul(lt_handle(), p.op, &one, b, p.b, a, p.a, &zero, d, p.d, d, p.d,
                               &found.algo, workspace, found.workspaceSize, rt_cuda_stream));
  }
  cublasCheck(cublasLtMatrixLayoutDestroy(p.b));
  cublasCheck(cublasLtMatrixLayoutDestroy(p.a));
  cublasCheck(cublasLtMatrixLayoutDestroy(p.d));
  cublasCheck(cublasLtMatmulDescDestroy(p.op));
  return n > 0;
}

// y = act(c + bias) over rows x n: a product c already where it lies (pre with act, else y),
// pre = the sum act reads; GeluFwd is gelu_fwd's function (the CPU's gelu_f). For the
// products cuBLASLt's epilogue does not take.
template <typename T>
__global__ void bias_act_kernel(T *y, T *pre, const T *bias, long rows, long n, int act) {
  GRID_LOOP(e, rows * n) {
    float v = ld(act ? pre[e] : y[e]) + ld(bias[e % n]);
    if (act) pre[e] = to<T>(v);
    y[e] = to<T>(act ? GeluFwd()(v) : v);
  }
}

// rt_matmul_bias: as rt_matmul, column-major D (n x m) = op(B) op(A), with cuBLASLt's epilogue
// BIAS (bias[j] on row j of D, a column of the row-major product) or GELU_AUX_BIAS (aux, the
// sum GELU reads, is pre): summed in float32 with the bias and rounded once, as on the CPU.
// Where cuBLASLt has no algorithm for it (GELU's aux needs n a multiple of 8) and for k = 0:
// rt_matmul's GEMM, then one pass of bias_act_kernel.
template <typename T>
static void matmul_bias(T *y, T *pre, const T *a, const T *b, const T *bias, long batch, long m,
                        long n, long k, int ta, int tb, long sa, long sb, int act) {
  if (m <= 0 || n <= 0 || batch <= 0) return;
  LtProduct p = lt_product(a, y, batch, m, n, k, ta, tb, sa, sb,
                           act ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_BIAS, bias);
  if (act) {
    lt_set<void *>(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, pre);
    lt_set<int64_t>(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, n);
    lt_set<int64_t>(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, m * n);
  }
  int found = lt_run(p, a, b, y, k);
  if (!found) {
    matmul(act ? pre : y, a, b, batch, m, n, k, ta, tb, sa, sb, m * n);
    RT_LAUNCH(bias_act_kernel, grid_for(batch * m * n, NT), NT, 0, rt_cuda_stream, y, pre, bias,
              batch * m, n, act);
  }
  LAUNCHED();
}
RT_CUDA_KT(matmul_bias,
           (T *y, T *pre, const T *a, const T *b, const T *bias, long batch, long m, long n,
            long k, int ta, int tb, long sa, long sb, int act),
           (dev(y), dev(pre), dev(a), dev(b), dev(bias), batch, m, n, k, ta, tb, sa, sb, act))

// ---- matmul_bgrad: cuBLASLt's GEMM with a bias's gradient in its epilogue

// rt_matmul_bgrad: C = op(A) op(B), column-major D (n x m) = op(B) op(A) as rt_matmul's, with
// cuBLASLt's BGRADA (of 1: the sums over k of op(B), cuBLASLt's A, one per row of D: n) or
// BGRADB (of 0: of op(A), its B, one per column: m) into db, of D's type. Where cuBLASLt has no
// algorithm for it: rt_matmul's GEMM, then reduce_sum's sums (the CPU twin's order).
template <typename T, typename U>
static void matmul_bgrad(U *c, U *db, const T *a, const T *b, long m, long n, long k, int ta,
                         int tb, int of) {
  if (m <= 0 || n <= 0) return;
  int found = lt_run(lt_product(a, c, 1L, m, n, k, ta, tb, 0L, 0L,
                                of ? CUBLASLT_EPILOGUE_BGRADA : CUBLASLT_EPILOGUE_BGRADB, db),
                     a, b, c, k);
  if (!found) {
    matmul(c, a, b, 1L, m, n, k, ta, tb, 0L, 0L, m * n);
    long shape[2] = {k, of ? n : m}, ostride[2] = {0, 1};
    reduce_sum(db, of ? b : a, 2, shape, ostride, shape[1], 1.0f);
  }
  LAUNCHED();
}
RT_CUDA_KTU(matmul_bgrad,
            (U *c, U *db, const T *a, const T *b, long m, long n, long k, int ta, int tb, int of),
            (dev(c), dev(db), dev(a), dev(b), m, n, k, ta, tb, of))

// ---- convolution: im2col and its adjoint

// one thread per col entry (plane, i, j, y, x)
template <typename T>
__global__ void im2col_kernel(T *col, const T *x, long nc, long h, long w, long kh, long kw,
                              long oh, long ow, long sh, long sw, long ph, long pw, long dh,
                              long dw) {
  GRID_LOOP(e, nc * kh * kw * oh * ow) {
    long xo = e % ow, y = e / ow % oh, r = e / (ow * oh);
    long j = r % kw, i = r / kw % kh, p = r / (kw * kh);
    long iy = y * sh - ph + i * dh, ix = xo * sw - pw + j * dw;
    col[e] = iy >= 0 && iy < h && ix >= 0 && ix < w ? x[(p * h + iy) * w + ix] : to<T>(0.0f);
  }
}

// one thread per pixel, adding its col entries in the order of (i, j), as on the CPU
template <typename T>
__global__ void col2im_kernel(T *x, const T *col, long nc, long h, long w, long kh, long kw,
                              long oh, long ow, long sh, long sw, long ph, long pw, long dh,
                              long dw) {
  GRID_LOOP(e, nc * h * w) {
    long ix = e % w, iy = e / w % h, p = e / (w * h);
    float s = 0.0f;
    for (long i = 0; i < kh; i++) {
      long ty = iy + ph - i * dh;
      if (ty < 0 || ty % sh || ty / sh >= oh) continue;
      for (long j = 0; j < kw; j++) {
        long tx = ix + pw - j * dw;
        if (tx >= 0 && tx % sw == 0 && tx / sw < ow)
          s += ld(col[((p * kh + i) * kw + j) * oh * ow + ty / sh * ow + tx / sw]);
      }
    }
    x[e] = to<T>(s);
  }
}

// ---- convolution: launchers

template <typename T>
static void im2col(T *col, const T *x, long nc, long h, long w, long kh, long kw, long oh,
                   long ow, long sh, long sw, long ph, long pw, long dh, long dw) {
  long n = nc * kh * kw * oh * ow;
  if (n <= 0) return;
  RT_LAUNCH(im2col_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, col, x, nc, h, w, kh, kw, oh, ow,
            sh, sw, ph, pw, dh, dw);
  LAUNCHED();
}
RT_CUDA_KT(im2col,
           (T *col, const T *x, long nc, long h, long w, long kh, long kw, long oh, long ow,
            long sh, long sw, long ph, long pw, long dh, long dw),
           (dev(col), dev(x), nc, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw))

template <typename T>
static void col2im(T *x, const T *col, long nc, long h, long w, long kh, long kw, long oh,
                   long ow, long sh, long sw, long ph, long pw, long dh, long dw) {
  long n = nc * h * w;
  if (n <= 0) return;
  RT_LAUNCH(col2im_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, x, col, nc, h, w, kh, kw, oh, ow,
            sh, sw, ph, pw, dh, dw);
  LAUNCHED();
}
RT_CUDA_KT(col2im,
           (T *x, const T *col, long nc, long h, long w, long kh, long kw, long oh, long ow,
            long sh, long sw, long ph, long pw, long dh, long dw),
           (dev(x), dev(col), nc, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw))

// ---- max pooling (runtime/pool.h walks the windows, as on the CPU)

// one thread per output
template <typename T>
__global__ void maxpool2d_kernel(T *y, const T *x, long nc, long h, long w, long kh, long kw,
                                 long oh, long ow, long sh, long sw, long ph, long pw) {
  GRID_LOOP(e, nc * oh * ow) {
    long ox = e % ow, oy = e / ow % oh, p = e / (ow * oh);
    const T *xp = x + p * h * w;
    PoolWindow win = pool_window(oy, ox, h, w, kh, kw, sh, sw, ph, pw);
    long at;
    POOL_ARGMAX(ld, xp, win, w, at);
    y[e] = xp[at];
  }
}

// one thread per pixel, summing dy over the windows whose max it is in (oy, ox) order
template <typename T>
__global__ void maxpool2d_bwd_kernel(T *dx, const T *dy, const T *x, long nc, long h, long w,
                                     long kh, long kw, long oh, long ow, long sh, long sw,
                                     long ph, long pw) {
  GRID_LOOP(e, nc * h * w) {
    long ix = e % w, iy = e / w % h, p = e / (w * h);
    const T *xp = x + p * h * w, *dyp = dy + p * oh * ow;
    float s;
    POOL_PIXEL_GRAD(ld, xp, dyp, iy, ix, h, w, kh, kw, oh, ow, sh, sw, ph, pw, s);
    dx[e] = to<T>(s);
  }
}

// ---- max pooling: launchers

template <typename T>
static void maxpool2d(T *y, const T *x, long nc, long h, long w, long kh, long kw, long oh,
                      long ow, long sh, long sw, long ph, long pw) {
  long n = nc * oh * ow;
  if (n <= 0) return;
  RT_LAUNCH(maxpool2d_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, y, x, nc, h, w, kh, kw, oh,
            ow, sh, sw, ph, pw);
  LAUNCHED();
}
RT_CUDA_KT(maxpool2d,
           (T *y, const T *x, long nc, long h, long w, long kh, long kw, long oh, long ow, long sh,
            long sw, long ph, long pw),
           (dev(y), dev(x), nc, h, w, kh, kw, oh, ow, sh, sw, ph, pw))

template <typename T>
static void maxpool2d_bwd(T *dx, const T *dy, const T *x, long nc, long h, long w, long kh,
                          long kw, long oh, long ow, long sh, long sw, long ph, long pw) {
  long n = nc * h * w;
  if (n <= 0) return;
  RT_LAUNCH(maxpool2d_bwd_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, dx, dy, x, nc, h, w, kh,
            kw, oh, ow, sh, sw, ph, pw);
  LAUNCHED();
}
RT_CUDA_KT(maxpool2d_bwd,
           (T *dx, const T *dy, const T *x, long nc, long h, long w, long kh, long kw, long oh,
            long ow, long sh, long sw, long ph, long pw),
           (dev(dx), dev(dy), dev(x), nc, h, w, kh, kw, oh, ow, sh, sw, ph, pw))
