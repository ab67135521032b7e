// CUDA twins of the CPU kernels (runtime/kernels_cpu.c; kernels.h has the
// contract), in the style of llm.c: this file has what every kernel and
// launcher shares, and includes a file per family of kernels, each with its
// __global__ functions and their launchers (as llm.c's llmc/*.cuh):
// move_cuda.cuh, elementwise_cuda.cuh, matmul_cuda.cuh, nn_cuda.cuh and
// attention_cuda.cuh, optim_cuda.cuh, onnx_cuda.cuh, dist_cuda.cuh.
//
// Every launcher has the name and the C prototype of its CPU twin and takes
// device pointers for every tensor (float, bf16 and int buffers); the shape
// and stride arrays (`const long *`) are host arrays of at most RT_MAXRANK
// entries, passed to the kernels by value. Launches are asynchronous on
// rt_cuda_stream and checked with cudaGetLastError. Scalars the CPU reads
// through a pointer (dloss[0], step[0]) are read on the device.
//
// Element types: the kernels of kernels.def's KT and KTU lines are written
// once, as templates over their element types T (and U): float, or CUDA's
// __nv_bfloat16 for rt_bf16 (the same 16 bits, llm.c's floatX). They read an
// element with ld() (widened to float, exact) and write one with to<T>()
// (rounded to nearest even), and compute and accumulate in float (or double)
// in between; for float both are the identity, so the float32 variants are
// the kernels they always were. The launchers are templates too, and the C
// entry points of each variant (rt_gelu_fwd, rt_gelu_fwd_bf16, ...) are
// one-line wrappers (RT_CUDA_KT, RT_CUDA_KTU).
//
// Not here: the collectives (runtime/dist.c, over comm.h in every build),
// and rt_adamw_host and rt_host_threads, which run on the host over host
// memory in every build (runtime/host.c).
//
// Arithmetic follows the CPU code in its order of operations. The CPU build
// (-std=c11) does not contract a*b + c into an FMA; an fp32 program compiles
// this file with --fmad=false so that its elementwise kernels round the same
// way (a bf16 program's Makefile leaves the flag out: its checks allow bf16's
// rounding).
// Reductions sum in the CPU's precision (float, or double where the CPU uses
// double) but in another order (per-thread partials, then warp shuffles), so
// they agree with the CPU to rounding, not bit for bit.
//
// Scratch: layernorm_bwd, crossentropy_fwd and attention_bwd keep per-row
// statistics in the workspace a program plans beside its arena (KS in
// kernels.def gives each one's size; rt_cuda_set_workspace). The statistics
// are float (or double) in every variant, so the sizes do not depend on T.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "coalesce.h"
#include "copy_slots.h"
#include "cuda_common.h"
#include "mma_cuda.cuh"
#include "pool.h"
extern "C" {
#include "dist.h"
#include "kernels.h"
#include "model_api.h"
}

cudaStream_t rt_cuda_stream = 0;

// bf16 on the device is __nv_bfloat16; a launcher hands an rt_bf16 buffer
// to the kernels as one (dev()), which is sound because both are the upper
// 16 bits of an IEEE float32.
static_assert(sizeof(rt_bf16) == sizeof(__nv_bfloat16) &&
                  alignof(rt_bf16) == alignof(__nv_bfloat16),
              "rt_bf16 and __nv_bfloat16 must have the same layout");

// Threads per block of the elementwise kernels; the grid is capped and the
// kernels loop (grid-stride).
#define NT 256
#define MAX_GRID (1L << 20)

#define GRID_LOOP(i, n)                                                   \
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (long)gridDim.x * blockDim.x)

// Shapes and up to two stride arrays, by value (rank <= RT_MAXRANK).
struct Dims {
  int rank;
  long shape[RT_MAXRANK], s0[RT_MAXRANK], s1[RT_MAXRANK];
};

// ---- what every kernel shares

// Loading and storing an element: ld widens it to float (exact for bf16),
// to<T> rounds a float to T (bf16: to nearest, ties to even, as the CPU's
// rt_f32_to_bf16; a NaN stays a NaN). For float both do nothing.
__host__ __device__ inline float ld(float x) { return x; }
__host__ __device__ inline float ld(__nv_bfloat16 x) { return __bfloat162float(x); }
__host__ __device__ inline int ld(int x) { return x; }  // integers stay integers (rt_compare_i32)

template <typename T>
__host__ __device__ inline T to(float x);
template <>
__host__ __device__ inline float to<float>(float x) {
  return x;
}
template <>
__host__ __device__ inline __nv_bfloat16 to<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Offsets of element i of a contiguous array with shape d.shape in arrays
// with strides d.s0 and d.s1.
__device__ inline void dims_offsets(const Dims &d, long i, long *o0, long *o1) {
  long a = 0, b = 0;
  for (int k = d.rank - 1; k >= 0; k--) {
    long q = i / d.shape[k], r = i - q * d.shape[k];
    a += r * d.s0[k];
    b += r * d.s1[k];
    i = q;
  }
  *o0 = a;
  *o1 = b;
}

// Sixteen bytes of T (8 bf16 or 4 floats): the elementwise kernels move a
// pack a thread with one 128-bit load or store where the shapes and strides
// allow it (packable()).
template <int W, typename T>
struct alignas(W * sizeof(T)) Run;
template <typename T>
using Pack = Run<16 / sizeof(T), T>;

// W consecutive elements of T, aligned as a whole (W * sizeof(T) bytes), so
// that one load or store moves them: a Pack, or the optimizers' runs of four
// (4 floats, or 4 bf16 gradients).
template <int W, typename T>
struct alignas(W * sizeof(T)) Run {
  static constexpr int N = W;
  T v[W];
};

// the run of W at p, as floats; and back, rounded to T
template <int W, typename T>
__device__ inline void load_run(float *dst, const T *p) {
  Run<W, T> r = *(const Run<W, T> *)p;
#pragma unroll
  for (int k = 0; k < W; k++) dst[k] = ld(r.v[k]);
}
template <int W, typename T>
__device__ inline void store_run(T *p, const float *src) {
  Run<W, T> r;
#pragma unroll
  for (int k = 0; k < W; k++) r.v[k] = to<T>(src[k]);
  *(Run<W, T> *)p = r;
}

// The pack at p: N consecutive elements (stride 1), or one element N times (stride 0).
template <typename T>
__device__ inline Pack<T> load_pack(const T *p, long stride) {
  if (stride) return *(const Pack<T> *)p;
  Pack<T> r;
#pragma unroll
  for (int k = 0; k < Pack<T>::N; k++) r.v[k] = *p;
  return r;
}

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

// The sum over the block, returned to every thread. blockDim.x is a multiple
// of 32 (at most 1024); every thread of the block must call it.
template <typename T>
__device__ T block_sum(T v) {
  __shared__ T part[32];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // part may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < nwarps ? part[lane] : T(0);
  return warp_sum(v);
}

__device__ float block_max(float v) {
  __shared__ float part[32];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < nwarps ? part[lane] : -INFINITY;
  return warp_max(v);
}

// ---- column sums: an [R, K] matrix summed over its rows, deterministically
//
// Bias gradients and a norm's weight and bias gradients sum the columns of
// [R, K] matrices. Two passes: blocks of 32 x COL_Y threads each sum 32
// columns over one chunk of the rows (a warp reads 32 adjacent elements of
// a row), into a partial per chunk and column; then a thread per column adds
// its chunks' partials in order. The chunks make enough blocks to fill the
// GPU however few columns there are, and the bits depend on neither timing
// nor the grid. NV sums a column (f adds its terms of row r, column c to
// acc[0 .. NV)); the partials lie in the GEMM's workspace (col_parts_buffer).
#define COL_Y 8
#define COL_CHUNKS 64

template <int NV, typename F>
__global__ void col_parts_kernel(float *parts, long R, long K, long per, F f) {
  __shared__ float sh[NV][COL_Y][33];
  long c = (long)blockIdx.x * 32 + threadIdx.x, r0 = (long)blockIdx.y * per;
  long r1 = r0 + per < R ? r0 + per : R;
  float acc[NV] = {};
  if (c < K)
    for (long r = r0 + threadIdx.y; r < r1; r += COL_Y) f(r, c, acc);
#pragma unroll
  for (int v = 0; v < NV; v++) sh[v][threadIdx.y][threadIdx.x] = acc[v];
  __syncthreads();
  if (threadIdx.y == 0 && c < K)
#pragma unroll
    for (int v = 0; v < NV; v++) {
      float t = 0.0f;
      for (int y = 0; y < COL_Y; y++) t += sh[v][y][threadIdx.x];
      parts[((long)v * gridDim.y + blockIdx.y) * K + c] = t;
    }
}

// out_v[c * ostride] = scale * (the sum of column c's partials of sum v), in order
template <int NV, typename U>
__global__ void col_sums_kernel(U *out0, U *out1, const float *parts, long K, int chunks,
                                long ostride, float scale) {
  GRID_LOOP(c, K) {
#pragma unroll
    for (int v = 0; v < NV; v++) {
      U *out = v ? out1 : out0;
      if (!out) continue;
      double t = 0.0;
      for (int ch = 0; ch < chunks; ch++) t += parts[((long)v * chunks + ch) * K + c];
      out[c * ostride] = to<U>((float)(scale * t));
    }
  }
}

// The terms of reduce_sum's columns: x[r, c]
template <typename T>
struct ColumnOf {
  const T *x;
  long K;
  __device__ void operator()(long r, long c, float *acc) const { acc[0] += ld(x[r * K + c]); }
};

// ... of a norm's weight and bias gradients: dy * norm(x) and dy (stats: each row's mean, rstd)
template <typename T>
struct NormGradsOf {
  const T *dy, *x;
  const float *stats;
  long K;
  __device__ void operator()(long r, long c, float *acc) const {
    float d = ld(dy[r * K + c]);
    acc[0] += d * ((ld(x[r * K + c]) - stats[2 * r]) * stats[2 * r + 1]);
    acc[1] += d;
  }
};

// out[o*oinner + ooff + i] = x[o*xinner + xoff + i] for i < len: slice
// (oinner = len) and unslice (xinner = len), in units of U: T itself, or a
// Pack<T> where every row and offset is whole packs (rows_copy())
template <typename U>
__global__ void rows_copy_kernel(U *out, const U *x, long outer, long len, long oinner,
                                 long ooff, long xinner, long xoff) {
  GRID_LOOP(e, outer * len) {
    long o = e / len, i = e - o * len;
    out[o * oinner + ooff + i] = x[o * xinner + xoff + i];
  }
}

// ---- what every launcher shares

#define LAUNCHED() cudaCheck(cudaGetLastError())

static unsigned grid_for(long n, int threads) {
  long b = (n + threads - 1) / threads;
  return (unsigned)(b < MAX_GRID ? b : MAX_GRID);
}

static unsigned grid_rows(long rows) { return (unsigned)(rows < MAX_GRID ? rows : MAX_GRID); }

// Threads for one block per row of c: a multiple of 32, at most 512.
static int row_threads(long c) {
  if (c <= 32) return 32;
  if (c <= 128) return 128;
  if (c <= 256) return 256;
  return 512;
}

static long numel_of(int rank, const long *shape) {
  long n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  return n;
}

static void check_rank(int rank, const char *who) {
  if (rank < 0 || rank > RT_MAXRANK) {
    fprintf(stderr, "%s: rank %d is past RT_MAXRANK (%d)\n", who, rank, RT_MAXRANK);
    exit(EXIT_FAILURE);
  }
}


static Dims make_dims(int rank, const long *shape, const long *s0, const long *s1) {
  Dims d = {};
  d.rank = coalesce(rank, shape, s0, s1, d.shape, d.s0, d.s1);
  return d;
}

static bool aligned16(const void *p) { return p == NULL || (uintptr_t)p % 16 == 0; }

// Can a kernel over d (n elements of T; s1 NULL: one input) move whole
// packs (Pack<T>)? The last dim's size a multiple of a pack, its strides 0
// or 1, every other stride a multiple of a pack, the pointers 16-byte
// aligned: then each pack of the output reads whole aligned packs (or one
// element) of the inputs.
template <typename T>
static bool packable(const Dims &d, long n, const T *out, const T *a, const T *b) {
  const long N = Pack<T>::N;
  int last = d.rank - 1;
  if (d.rank < 1 || n % N || d.shape[last] % N || !aligned16(out) || !aligned16(a) ||
      !aligned16(b))
    return false;
  for (int k = 0; k <= last; k++) {
    long s0 = d.s0[k], s1 = b ? d.s1[k] : 0;
    if (k == last ? (s0 > 1 || s1 > 1) : (s0 % N || s1 % N)) return false;
  }
  return true;
}


// The workspace (rt_cuda_set_workspace): the GEMM library's, then the
// kernels' scratch. A program plans it (KS in kernels.def); without one (the
// kernel tests), scratch is allocated here and grown when needed.
static char *workspace = NULL;
static size_t workspace_bytes = 0;

static cublasHandle_t cublas_handle(void);

void rt_cuda_set_workspace(void *p, size_t bytes) {
  if (bytes < (size_t)RT_GEMM_WORKSPACE_BYTES) {
    fprintf(stderr, "train: error: a workspace of %zu bytes is less than the GEMM's %ld\n", bytes,
            (long)RT_GEMM_WORKSPACE_BYTES);
    exit(EXIT_FAILURE);
  }
  workspace = (char *)p;
  workspace_bytes = bytes;
  cublasCheck(cublasSetWorkspace(cublas_handle(), workspace, RT_GEMM_WORKSPACE_BYTES));
}

// *buf of at least `bytes` (*cap: its size), reallocated when it is smaller:
// the kernel tests' buffers, where no workspace is planned.
static void *grown(void **buf, size_t *cap, size_t bytes) {
  if (bytes > *cap) {
    if (*buf) cudaCheck(cudaFree(*buf));  // waits for the kernels that may still use it
    *cap = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
    cudaCheck(cudaMalloc(buf, *cap));
  }
  return *buf;
}

// At least `bytes` of scratch for the kernel `who`.
static void *scratch(size_t bytes, const char *who) {
  if (workspace) {
    size_t have = workspace_bytes - (size_t)RT_GEMM_WORKSPACE_BYTES;
    if (bytes > have) {
      fprintf(stderr, "train: error: rt_%s needs %zu bytes of scratch, the planned workspace "
              "has %zu (model and runtime disagree: KS in kernels.def)\n", who, bytes, have);
      exit(EXIT_FAILURE);
    }
    return workspace + RT_GEMM_WORKSPACE_BYTES;
  }
  static void *buf = NULL;
  static size_t cap = 0;
  return grown(&buf, &cap, bytes);
}

// A float32 buffer of n elements for a bf16 result that is summed in place
// (atomics, GEMMs with beta = 1): the sum is kept in float32 and rounded
// once, as the CPU's bf16 variants do. Only the bf16-output variants of
// reduce_sum, embedding_bwd and matmul take one, from the kernels' scratch
// (their float32 bodies take none), which the program plans for them
// (codegen/kcall.c's cg_call_scratch).
static float *temp_f32(long n, const char *who) {
  return (float *)scratch((size_t)(n > 0 ? n : 1) * sizeof(float), who);
}

// The GEMM's workspace, lent to the column sums for their partials (bytes <=
// RT_GEMM_WORKSPACE_BYTES): every GEMM and kernel runs on rt_cuda_stream, so
// no GEMM is in flight while they run. Without a planned workspace (the
// kernel tests), a buffer of its own, grown when needed.
static float *col_parts_buffer(size_t bytes) {
  if (workspace) return (float *)workspace;
  static void *buf = NULL;
  static size_t cap = 0;
  return (float *)grown(&buf, &cap, bytes);
}

// The NV column sums of an [R, K] matrix whose terms f gives, times scale,
// into out0 and out1 (NULL: not wanted; element c at c * ostride). False
// (nothing done) when the partials of even two chunks would not fit the
// GEMM's workspace or there are too few rows to split: the caller sums
// another way.
template <int NV, typename U, typename F>
static bool col_sums(U *out0, U *out1, long R, long K, long ostride, float scale, F f) {
  long fit = RT_GEMM_WORKSPACE_BYTES / ((long)NV * K * (long)sizeof(float));
  long chunks = R / 64 < COL_CHUNKS ? R / 64 : COL_CHUNKS;
  if (chunks > fit) chunks = fit;
  if (chunks < 2 || K <= 0) return false;
  long per = (R + chunks - 1) / chunks;
  chunks = (R + per - 1) / per;  // none empty
  float *parts = col_parts_buffer((size_t)(NV * chunks * K) * sizeof(float));
  RT_LAUNCH(col_parts_kernel<NV>, dim3((unsigned)((K + 31) / 32), (unsigned)chunks),
            dim3(32, COL_Y), 0, rt_cuda_stream, parts, R, K, per, f);
  LAUNCHED();
  RT_LAUNCH(col_sums_kernel<NV>, grid_for(K, NT), NT, 0, rt_cuda_stream, out0, out1,
            (const float *)parts, K, (int)chunks, ostride, scale);
  LAUNCHED();
  return true;
}

void rt_cuda_init(int device) {
  cudaCheck(cudaSetDevice(device));
  cudaCheck(cudaFree(0));  // creates the context now
  (void)cublas_handle();   // and the GEMM library's handle
}

void rt_cuda_sync(void) { cudaCheck(cudaStreamSynchronize(rt_cuda_stream)); }

// ---- the C entry points of the typed kernels
//
// A tensor as the kernels see it: an rt_bf16 buffer as __nv_bfloat16 (the
// same bits: the static_assert at the top), float as itself.
static inline float *dev(float *p) { return p; }
static inline const float *dev(const float *p) { return p; }
static inline __nv_bfloat16 *dev(rt_bf16 *p) { return reinterpret_cast<__nv_bfloat16 *>(p); }
static inline const __nv_bfloat16 *dev(const rt_bf16 *p) {
  return reinterpret_cast<const __nv_bfloat16 *>(p);
}

// RT_CUDA_KT(name, params, args) defines rt_<name><suffix> for each variant
// of kernels.h's RT_T_VARIANTS: rt_gelu_fwd (T float) and rt_gelu_fwd_bf16
// (T rt_bf16). `params` is the kernel's prototype from kernels.def, written
// over T; `args` calls the launcher template `name`, each tensor through
// dev(). RT_CUDA_KTU does the same for RT_TU_VARIANTS, over T and U.
//
// Each wrapper is defined inside a namespace of its variant,
// rt_variant<suffix>, where T (and U) are typedefs of the variant's C types.
// A function with C linkage is the same function in every namespace, so the
// wrapper defines kernels.h's declaration of it; a parameter list that
// differs from kernels.h's is a "conflicting C language linkage" diagnostic
// here, and an undefined symbol at link time.
#define RT_CUDA_KT(name, params, args) RT_T_VARIANTS(RT_CUDA_KT_VARIANT, name, params, args)
#define RT_CUDA_KT_VARIANT(suffix, tname, name, params, args) \
  namespace rt_variant##suffix {                              \
  typedef RT_CTYPE_##tname T;                                 \
  extern "C" void rt_##name##suffix params { name args; }     \
  }
#define RT_CUDA_KTU(name, params, args) RT_TU_VARIANTS(RT_CUDA_KTU_VARIANT, name, params, args)
#define RT_CUDA_KTU_VARIANT(suffix, tname, uname, name, params, args) \
  namespace rt_variant##suffix {                                      \
  typedef RT_CTYPE_##tname T;                                         \
  typedef RT_CTYPE_##uname U;                                         \
  extern "C" void rt_##name##suffix params { name args; }             \
  }

// ---- the families of kernels, each kernel beside its launcher

#include "move_cuda.cuh"
#include "elementwise_cuda.cuh"
#include "matmul_cuda.cuh"
#include "nn_cuda.cuh"
#include "attention_cuda.cuh"
#include "optim_cuda.cuh"
#include "onnx_cuda.cuh"
#include "dist_cuda.cuh"

// ---- the launchers, by name: runtime/kernels.def less the kernels it names
// that have no CUDA twin. A name of kernels.def is skipped when
// RT_CUDA_SKIP_<name> is defined (to RT_CUDA_PROBE); any other name must have a
// launcher here, or this table does not compile.
#define RT_CUDA_PROBE ~, 1
#define RT_CUDA_SECOND(a, b, ...) b
#define RT_CUDA_IS_PROBE(...) RT_CUDA_SECOND(__VA_ARGS__, 0, ~)
#define RT_CUDA_SKIPPED(name) RT_CUDA_IS_PROBE(RT_CUDA_SKIP_##name)
#define RT_CUDA_CAT(a, b) RT_CUDA_CAT_(a, b)
#define RT_CUDA_CAT_(a, b) a##b
#define RT_CUDA_ENTRY_0(name) (void *)rt_##name,
#define RT_CUDA_ENTRY_1(name)
// host code in every build
#define RT_CUDA_SKIP_adamw_host RT_CUDA_PROBE
#define RT_CUDA_SKIP_sgd_host RT_CUDA_PROBE
#define RT_CUDA_SKIP_cast_host RT_CUDA_PROBE
#define RT_CUDA_SKIP_accumulate_host RT_CUDA_PROBE
// runtime/dist.c: the collectives, over comm.h in every build
#define RT_CUDA_SKIP_comm_all_reduce RT_CUDA_PROBE
#define RT_CUDA_SKIP_comm_reduce_scatter RT_CUDA_PROBE
#define RT_CUDA_SKIP_comm_all_gather RT_CUDA_PROBE
#define RT_CUDA_SKIP_comm_wait RT_CUDA_PROBE

#define RT_CUDA_ENTRY_T(suffix, T, name) RT_CUDA_CAT(RT_CUDA_ENTRY_, RT_CUDA_SKIPPED(name))(name##suffix)
#define RT_CUDA_ENTRY_TU(suffix, T, U, name) RT_CUDA_ENTRY_T(suffix, T, name)
extern "C" void *const rt_cuda_kernels[] = {
#define K(name, ...) RT_CUDA_CAT(RT_CUDA_ENTRY_, RT_CUDA_SKIPPED(name))(name)
#define KT(name, ...) RT_T_VARIANTS(RT_CUDA_ENTRY_T, name)
#define KTU(name, ...) RT_TU_VARIANTS(RT_CUDA_ENTRY_TU, name)
#include "kernels.def"
};
extern "C" const int rt_cuda_nkernels = (int)(sizeof rt_cuda_kernels / sizeof rt_cuda_kernels[0]);
