// CUDA twins of the CPU kernels (runtime/kernels_cpu.c; kernels.h has the
// contract), in the style of llm.c: the __global__ functions first, then the
// launchers.
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
// Attention's kernels and launchers are in attention_cuda.cuh, included among
// the launchers (a file per family of kernels, as llm.c's llmc/*.cuh, is
// where the rest is going).
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

// ---- kernels ----

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
template <typename T>
struct alignas(16) Pack {
  static constexpr int N = 16 / sizeof(T);
  T v[N];
};

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

// ---- data movement

template <typename T>
__global__ void fill_kernel(T *out, long n, T value) {
  GRID_LOOP(i, n) out[i] = value;
}

// out[i] = x[i] in another element type
template <typename T, typename U>
__global__ void cast_kernel(U *out, const T *x, long n) {
  GRID_LOOP(i, n) out[i] = to<U>(ld(x[i]));
}

// out[i] = x[offset of i through d.s0]
template <typename T>
__global__ void strided_copy_kernel(T *out, const T *x, long n, Dims d) {
  GRID_LOOP(i, n) {
    long xo, unused;
    dims_offsets(d, i, &xo, &unused);
    out[i] = x[xo];
  }
}

// ... a pack a thread (packable(d, n, ...)): a head's transpose moves 16 bytes at a time
template <typename T>
__global__ void strided_copy_packs_kernel(T *out, const T *x, long n, Dims d) {
  constexpr int N = Pack<T>::N;
  GRID_LOOP(p, n / N) {
    long xo, unused;
    dims_offsets(d, p * N, &xo, &unused);
    *(Pack<T> *)(out + p * N) = load_pack(x + xo, d.s0[d.rank - 1]);
  }
}

// The dims of reduce_sum split into kept ones (ostride != 0) and reduced ones
// (ostride == 0); x is contiguous.
struct ReduceDims {
  int nk, nr;
  long ksh[RT_MAXRANK], kx[RT_MAXRANK], ko[RT_MAXRANK];  // kept: shape, x stride, out stride
  long rsh[RT_MAXRANK], rx[RT_MAXRANK];                 // reduced: shape, x stride
};

__device__ inline void reduce_kept(const ReduceDims &rd, long k, long *xo, long *oo) {
  long a = 0, b = 0;
  for (int d = rd.nk - 1; d >= 0; d--) {
    long q = k / rd.ksh[d], r = k - q * rd.ksh[d];
    a += r * rd.kx[d];
    b += r * rd.ko[d];
    k = q;
  }
  *xo = a;
  *oo = b;
}

__device__ inline long reduce_inner(const ReduceDims &rd, long j) {
  long a = 0;
  for (int d = rd.nr - 1; d >= 0; d--) {
    long q = j / rd.rsh[d];
    a += (j - q * rd.rsh[d]) * rd.rx[d];
    j = q;
  }
  return a;
}

// One thread per kept index: its R reduced elements summed in double, added
// to out (zeroed by the launcher; each out element gets one addition unless
// two kept indices share it). out is float32 (a bf16 result is rounded from
// it by the launcher).
template <typename T>
__global__ void reduce_sum_threads_kernel(float *out, const T *x, ReduceDims rd, long K, long R,
                                          float scale) {
  GRID_LOOP(k, K) {
    long xo, oo;
    reduce_kept(rd, k, &xo, &oo);
    double s = 0.0;
    for (long j = 0; j < R; j++) s += ld(x[xo + reduce_inner(rd, j)]);
    atomicAdd(out + oo, (float)(scale * s));
  }
}

// The same with one block per kept index (long reductions).
template <typename T>
__global__ void reduce_sum_blocks_kernel(float *out, const T *x, ReduceDims rd, long K, long R,
                                         float scale) {
  for (long k = blockIdx.x; k < K; k += gridDim.x) {
    long xo, oo;
    reduce_kept(rd, k, &xo, &oo);
    double s = 0.0;
    for (long j = threadIdx.x; j < R; j += blockDim.x) s += ld(x[xo + reduce_inner(rd, j)]);
    s = block_sum(s);
    if (threadIdx.x == 0) atomicAdd(out + oo, (float)(scale * s));
  }
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

// ---- elementwise

// a op b for op RT_ADD .. RT_MAX (binary() launches no other)
__device__ inline float binary_op(int op, float a, float b) {
  switch (op) {
    case RT_ADD: return a + b;
    case RT_SUB: return a - b;
    case RT_MUL: return a * b;
    case RT_DIV: return a / b;
    case RT_MIN: return a < b || a != a ? a : b;
    default: return a > b || a != a ? a : b;  // RT_MAX
  }
}

// out[i] = a[.] op b[.], a through d.s0, b through d.s1
template <typename T>
__global__ void binary_kernel(int op, T *out, const T *a, const T *b, long n, Dims d) {
  GRID_LOOP(i, n) {
    long ao, bo;
    dims_offsets(d, i, &ao, &bo);
    out[i] = to<T>(binary_op(op, ld(a[ao]), ld(b[bo])));
  }
}

// ... a pack a thread (packable(d, n, ...)): residual and bias adds
template <typename T>
__global__ void binary_packs_kernel(int op, T *out, const T *a, const T *b, long n, Dims d) {
  constexpr int N = Pack<T>::N;
  GRID_LOOP(p, n / N) {
    long ao, bo;
    dims_offsets(d, p * N, &ao, &bo);
    Pack<T> x = load_pack(a + ao, d.s0[d.rank - 1]), y = load_pack(b + bo, d.s1[d.rank - 1]), r;
#pragma unroll
    for (int k = 0; k < N; k++) r.v[k] = to<T>(binary_op(op, ld(x.v[k]), ld(y.v[k])));
    *(Pack<T> *)(out + p * N) = r;
  }
}

template <typename T>
__global__ void scale_kernel(T *out, const T *x, long n, float s, float b) {
  GRID_LOOP(i, n) out[i] = to<T>(s * ld(x[i]) + b);
}

#define GELU_SCALE 0.7978845608028654f  // sqrt(2 / pi)
#define GELU_COEF 0.044715f
#define GELU_TAIL 20.0f

// The activations, each a function of one element (forward: f(x); backward:
// f(dy, x)) that map1_kernel and map2_kernel run over a tensor.

// the CPU's form: 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)), u clamped at +-20
struct GeluFwd {
  __device__ float operator()(float xi) const {
    float u = GELU_SCALE * (xi + GELU_COEF * xi * xi * xi);
    float uc = u > GELU_TAIL ? GELU_TAIL : (u < -GELU_TAIL ? -GELU_TAIL : u);
    float s = 1.0f / (1.0f + expf(-2.0f * uc));
    return u > GELU_TAIL ? xi : (u < -GELU_TAIL ? 0.0f : xi * s);
  }
};

struct GeluBwd {
  __device__ float operator()(float dy, float xi) const {
    float u = GELU_SCALE * (xi + GELU_COEF * xi * xi * xi);
    float uc = u > GELU_TAIL ? GELU_TAIL : (u < -GELU_TAIL ? -GELU_TAIL : u);
    float e = expf(-2.0f * uc);
    float s = 1.0f / (1.0f + e);
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_COEF * xi * xi);
    float grad = s + 2.0f * xi * s * (e * s) * du;
    grad = u > GELU_TAIL ? 1.0f : (u < -GELU_TAIL ? 0.0f : grad);
    return grad * dy;
  }
};

struct ReluFwd {
  __device__ float operator()(float x) const { return x > 0.0f ? x : 0.0f; }
};

struct ReluBwd {
  __device__ float operator()(float dy, float x) const { return x > 0.0f ? dy : 0.0f; }
};

template <typename T>
__global__ void cast_i32_f32_kernel(T *out, const int *x, long n) {
  GRID_LOOP(i, n) out[i] = to<T>((float)x[i]);
}

struct Unary {
  int op;
  float p;
  __device__ float operator()(float v) const {
    switch (op) {
      case RT_EXP: return expf(v);
      case RT_LOG: return logf(v);
      case RT_SQRT: return sqrtf(v);
      case RT_TANH: return tanhf(v);
      case RT_ERF: return erff(v);
      case RT_POW: return powf(v, p);
      case RT_SIN: return sinf(v);
      case RT_COS: return cosf(v);
      case RT_ABS: return fabsf(v);
      case RT_SIGN: return v > 0.0f ? 1.0f : v < 0.0f ? -1.0f : v;
      default: return 1.0f / (1.0f + expf(-v));  // RT_SIGMOID
    }
  }
};

struct GeluErfFwd {
  __device__ float operator()(float xi) const {
    return 0.5f * xi * (1.0f + erff(xi * 0.70710678118654752f));
  }
};

struct GeluErfBwd {
  __device__ float operator()(float dy, float xi) const {
    const float inv_sqrt_2pi = 0.3989422804014327f;
    float cdf = 0.5f * (1.0f + erff(xi * 0.70710678118654752f));
    float pdf = inv_sqrt_2pi * expf(-0.5f * xi * xi);
    return dy * (cdf + xi * pdf);
  }
};

struct SiluFwd {
  __device__ float operator()(float xi) const { return xi / (1.0f + expf(-xi)); }
};

struct SiluBwd {
  __device__ float operator()(float dy, float xi) const {
    float s = 1.0f / (1.0f + expf(-xi));
    return dy * s * (1.0f + xi * (1.0f - s));
  }
};

// y = f(x) (map1) and dx = f(dy, x) (map2) elementwise: an element a thread,
// or with PACK a 16-byte pack a thread (n whole packs, the pointers aligned).
template <bool PACK, typename T, typename F>
__global__ void map1_kernel(T *y, const T *x, long n, F f) {
  if constexpr (PACK) {
    GRID_LOOP(i, n / Pack<T>::N) {
      Pack<T> a = ((const Pack<T> *)x)[i], r;
#pragma unroll
      for (int k = 0; k < Pack<T>::N; k++) r.v[k] = to<T>(f(ld(a.v[k])));
      ((Pack<T> *)y)[i] = r;
    }
  } else {
    GRID_LOOP(i, n) y[i] = to<T>(f(ld(x[i])));
  }
}

template <bool PACK, typename T, typename F>
__global__ void map2_kernel(T *dx, const T *dy, const T *x, long n, F f) {
  if constexpr (PACK) {
    GRID_LOOP(i, n / Pack<T>::N) {
      Pack<T> g = ((const Pack<T> *)dy)[i], a = ((const Pack<T> *)x)[i], r;
#pragma unroll
      for (int k = 0; k < Pack<T>::N; k++) r.v[k] = to<T>(f(ld(g.v[k]), ld(a.v[k])));
      ((Pack<T> *)dx)[i] = r;
    }
  } else {
    GRID_LOOP(i, n) dx[i] = to<T>(f(ld(dy[i]), ld(x[i])));
  }
}

// one thread per (row, position, pair); the angle in double, as on the CPU
template <typename T>
__global__ void rope_kernel(T *out, const T *x, long rows, long t, long hs, float theta,
                            int inverse) {
  long half = hs / 2;
  GRID_LOOP(k, rows * t * half) {
    long i = k % half, rp = k / half, p = rp % t;
    double a = (double)p * pow((double)theta, -2.0 * (double)i / (double)hs);
    float c = (float)cos(a), s = inverse ? -(float)sin(a) : (float)sin(a);
    const T *xr = x + rp * hs;
    float x1 = ld(xr[i]), x2 = ld(xr[i + half]);
    out[rp * hs + i] = to<T>(x1 * c - x2 * s);
    out[rp * hs + i + half] = to<T>(x2 * c + x1 * s);
  }
}

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

// one block per row: layernorm, or RMSNorm when not centered (b NULL)
template <typename T>
__global__ void norm_fwd_kernel(T *y, const T *x, const T *w, const T *b, long n, long c,
                                float eps, bool centered) {
  for (long row = blockIdx.x; row < n; row += gridDim.x) {
    const T *xr = x + row * c;
    T *yr = y + row * c;
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

// norm_fwd_kernel, a warp a row
template <typename T, int E, bool VEC>
__global__ void __launch_bounds__(NORM_WARP_THREADS)
    norm_fwd_warp_kernel(T *y, const T *x, const T *w, const T *b, long n, long c, float eps,
                         bool centered) {
  typedef WarpRow<T, E, VEC> R;
  float v[E], wv[E], bv[E];
  R::load(wv, w, c);
  if (b) R::load(bv, b, c);
  long warps = blockDim.x / 32;
  for (long row = blockIdx.x * warps + threadIdx.x / 32; row < n; row += gridDim.x * warps) {
    float mean, rstd;
    R::load(v, x + row * c, c);
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

// dlogits = (softmax - onehot(target)) * dloss[0] / count, zero on ignored
// rows and the padding, one block per row, a pack a thread with packs (the
// rows of both whole aligned packs). The exponentials are computed again in
// the last pass rather than kept in dlogits, so that a bf16 dlogits is
// rounded once.
template <typename T>
__global__ void crossentropy_bwd_kernel(T *dlogits, const float *dloss, const T *logits,
                                        const int *targets, long n, long v, long vocab,
                                        const long *count, long ignore, bool packs) {
  constexpr int N = Pack<T>::N;
  float g = *count ? dloss[0] / (float)*count : 0.0f;
  for (long row = blockIdx.x; row < n; row += gridDim.x) {
    const T *xr = logits + row * v;
    T *dr = dlogits + row * v;
    int target = targets[row];
    float m = 0.0f, scale = 0.0f;  // an ignored row: zeros
    if (target != ignore) {
      double s;
      row_softmax_stats(xr, vocab, packs, &m, &s);
      scale = g * (float)exp((double)m - ((double)m + log(s)));
    }
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
}

// ---- optimizers (float32 master weights and moments; the gradient float32 or bf16)

// W consecutive elements of X at p, as floats, in one load (W * sizeof(X) bytes,
// aligned so); and back, rounded to X.
template <int W, typename X>
struct alignas(W * sizeof(X)) Run {
  X v[W];
};
template <int W, typename X>
__device__ inline void load_run(float *dst, const X *p) {
  Run<W, X> r = *(const Run<W, X> *)p;
#pragma unroll
  for (int k = 0; k < W; k++) dst[k] = ld(r.v[k]);
}
template <int W, typename X>
__device__ inline void store_run(X *p, const float *src) {
  Run<W, X> r;
#pragma unroll
  for (int k = 0; k < W; k++) r.v[k] = to<X>(src[k]);
  *(Run<W, X> *)p = r;
}

// The optimizers take W elements a thread: 4 (16 bytes of p, m and v a load)
// where n and the pointers allow it, else 1.
#define OPT_W 4

// torch.optim.AdamW in the CPU's order of operations (rt_adamw in kernels_cpu.c); with c, the
// updated p rounded into it (bf16 mixed precision's working copy: rt_adamw_copy)
template <int W, typename G>
__global__ void adamw_kernel(float *p, const G *g, float *m, float *v, long n, float beta1,
                             float beta2, float eps, float step_size, float bc2_sqrt,
                             float decay, float gscale, long decay_n, __nv_bfloat16 *c) {
  GRID_LOOP(t, n / W) {
    long i0 = t * W;
    float pv[W], gv[W], mv[W], vv[W];
    load_run<W>(pv, p + i0);
    load_run<W>(gv, g + i0);
    load_run<W>(mv, m + i0);
    load_run<W>(vv, v + i0);
#pragma unroll
    for (int k = 0; k < W; k++) {
      float gi = gv[k] * gscale;
      mv[k] = beta1 * mv[k] + (1.0f - beta1) * gi;
      vv[k] = beta2 * vv[k] + (1.0f - beta2) * gi * gi;
      float denom = sqrtf(vv[k]) / bc2_sqrt + eps;
      pv[k] = pv[k] * (i0 + k < decay_n ? decay : 1.0f) - step_size * (mv[k] / denom);
    }
    store_run<W>(p + i0, pv);
    store_run<W>(m + i0, mv);
    store_run<W>(v + i0, vv);
    if (c) store_run<W>(c + i0, pv);
  }
}

template <int W, typename G>
__global__ void sgd_kernel(float *p, const G *g, long n, float lr, float wd, float gscale,
                           long decay_n, __nv_bfloat16 *c) {
  GRID_LOOP(t, n / W) {
    long i0 = t * W;
    float pv[W], gv[W];
    load_run<W>(pv, p + i0);
    load_run<W>(gv, g + i0);
#pragma unroll
    for (int k = 0; k < W; k++)
      pv[k] = pv[k] - lr * (gv[k] * gscale + (i0 + k < decay_n ? wd : 0.0f) * pv[k]);
    store_run<W>(p + i0, pv);
    if (c) store_run<W>(c + i0, pv);
  }
}

// out[0] = sqrt(sum x^2) in float64, deterministic: norm2_parts_kernel's
// blocks (their number a function of n alone, at most NORM2_BLOCKS) each sum
// a fixed part of x, every thread NORM2_UNROLL loads in flight at a time,
// then a tree over the threads in a fixed order, into norm2_part;
// norm2_kernel sums the parts the same way.
#define NORM2_THREADS 256
#define NORM2_BLOCKS 1024
#define NORM2_UNROLL 4
__device__ double norm2_part[NORM2_BLOCKS];

// the sum over the block of each thread's v, in a fixed tree, to thread 0
__device__ double norm2_tree(double v) {
  __shared__ double part[NORM2_THREADS];
  __syncthreads();  // the previous tree's part[0] is read
  part[threadIdx.x] = v;
  __syncthreads();
  for (int w = NORM2_THREADS / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  return part[0];
}

template <typename T>
__global__ void norm2_parts_kernel(const T *x, long n) {
  long stride = (long)gridDim.x * NORM2_THREADS;
  double s = 0.0;
  for (long i = blockIdx.x * NORM2_THREADS + threadIdx.x; i < n; i += NORM2_UNROLL * stride) {
    float v[NORM2_UNROLL];
    for (int u = 0; u < NORM2_UNROLL; u++)
      v[u] = i + u * stride < n ? ld(x[i + u * stride]) : 0.0f;
    for (int u = 0; u < NORM2_UNROLL; u++) s += (double)v[u] * (double)v[u];
  }
  double b = norm2_tree(s);
  if (threadIdx.x == 0) norm2_part[blockIdx.x] = b;
}

__global__ void norm2_kernel(float *out, int parts) {
  double b = norm2_tree(threadIdx.x < parts ? norm2_part[threadIdx.x] : 0.0);
  for (int p = NORM2_THREADS; p < parts; p += NORM2_THREADS)  // whole trees, in order
    b += norm2_tree(threadIdx.x + p < parts ? norm2_part[threadIdx.x + p] : 0.0);
  if (threadIdx.x == 0) out[0] = (float)sqrt(b);
}

// ---- checks

// at (set to 0xffffffff before: -1 as an int) <- the least i with x[i] NaN or
// infinite: each thread's first is its least, so it stops there.
template <typename T>
__global__ void find_nonfinite_kernel(unsigned *at, const T *x, long n) {
  GRID_LOOP(i, n) {
    if (!isfinite(ld(x[i]))) {
      atomicMin(at, (unsigned)i);
      break;
    }
  }
}

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

// ---- launchers ----

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

// ---- data movement

template <typename T>
static void fill(T *out, long n, float value) {
  if (n <= 0) return;
  RT_LAUNCH(fill_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, out, n, to<T>(value));
  LAUNCHED();
}
RT_CUDA_KT(fill, (T *out, long n, float value), (dev(out), n, value))

// memmove semantics: overlapping ranges are copied in chunks no longer than
// the distance between them, in the order that reads before it overwrites.
template <typename T>
static void copy(T *out, const T *x, long n) {
  if (n <= 0 || out == x) return;
  long dist = out > x ? (long)(out - x) : (long)(x - out);
  if (dist >= n) {
    cudaCheck(cudaMemcpyAsync(out, x, (size_t)n * sizeof(T), cudaMemcpyDeviceToDevice,
                              rt_cuda_stream));
  } else if (out < x) {
    for (long i = 0; i < n; i += dist) {
      long len = n - i < dist ? n - i : dist;
      cudaCheck(cudaMemcpyAsync(out + i, x + i, (size_t)len * sizeof(T),
                                cudaMemcpyDeviceToDevice, rt_cuda_stream));
    }
  } else {
    for (long hi = n; hi > 0; hi -= dist) {
      long lo = hi - dist > 0 ? hi - dist : 0;
      cudaCheck(cudaMemcpyAsync(out + lo, x + lo, (size_t)(hi - lo) * sizeof(T),
                                cudaMemcpyDeviceToDevice, rt_cuda_stream));
    }
  }
}
RT_CUDA_KT(copy, (T *out, const T *x, long n), (dev(out), dev(x), n))

// float32 to bf16 rounds to nearest even, bf16 to float32 is exact; between
// two buffers of one type it is rt_copy
template <typename T, typename U>
static void cast(U *out, const T *x, long n) {
  if constexpr (std::is_same<T, U>::value) {
    copy(out, x, n);
  } else {
    if (n <= 0) return;
    RT_LAUNCH(cast_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, out, x, n);
    LAUNCHED();
  }
}
RT_CUDA_KTU(cast, (U *out, const T *x, long n), (dev(out), dev(x), n))

template <typename T>
static void strided_copy(T *out, const T *x, int rank, const long *shape, const long *xstride) {
  check_rank(rank, "rt_strided_copy");
  long n = numel_of(rank, shape);
  if (n <= 0) return;
  Dims d = make_dims(rank, shape, xstride, NULL);
  if (d.rank == 1 && d.s0[0] == 1) {  // contiguous
    copy(out, x, n);
    return;
  }
  if (packable<T>(d, n, out, x, NULL)) {
    long packs = n / Pack<T>::N;
    RT_LAUNCH(strided_copy_packs_kernel, grid_for(packs, NT), NT, 0, rt_cuda_stream, out, x, n,
              d);
  } else {
    RT_LAUNCH(strided_copy_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, out, x, n, d);
  }
  LAUNCHED();
}
RT_CUDA_KT(strided_copy, (T *out, const T *x, int rank, const long *shape, const long *xstride),
           (dev(out), dev(x), rank, shape, xstride))

void rt_strided_copy_i32(int *out, const int *x, int rank, const long *shape,
                         const long *xstride) {
  strided_copy(out, x, rank, shape, xstride);
}

template <typename T>
static void reduce_sum(float *out, const T *x, int rank, const long *shape, const long *ostride,
                       long onumel, float scale) {
  check_rank(rank, "rt_reduce_sum");
  if (onumel > 0)
    cudaCheck(cudaMemsetAsync(out, 0, (size_t)onumel * sizeof(float), rt_cuda_stream));
  long n = numel_of(rank, shape);
  if (n <= 0) return;
  long sh[RT_MAXRANK], os[RT_MAXRANK], unused[RT_MAXRANK], xs[RT_MAXRANK];
  int r = coalesce(rank, shape, ostride, NULL, sh, os, unused);
  xs[r - 1] = 1;  // x is contiguous
  for (int d = r - 2; d >= 0; d--) xs[d] = xs[d + 1] * sh[d + 1];
  ReduceDims rd = {};
  long K = 1, R = 1;
  for (int d = 0; d < r; d++) {
    if (os[d] != 0) {
      rd.ksh[rd.nk] = sh[d];
      rd.kx[rd.nk] = xs[d];
      rd.ko[rd.nk] = os[d];
      rd.nk++;
      K *= sh[d];
    } else {
      rd.rsh[rd.nr] = sh[d];
      rd.rx[rd.nr] = xs[d];
      rd.nr++;
      R *= sh[d];
    }
  }
  if (rd.nk == 1 && rd.kx[0] == 1 &&  // x [R, K]: the sums of its columns
      col_sums<1>(out, (float *)NULL, R, K, rd.ko[0], scale, ColumnOf<T>{x, K}))
    return;
  if (R >= 256) {
    RT_LAUNCH(reduce_sum_blocks_kernel, grid_rows(K), 512, 0, rt_cuda_stream, out, x, rd, K, R,
              scale);
  } else {
    RT_LAUNCH(reduce_sum_threads_kernel, grid_for(K, NT), NT, 0, rt_cuda_stream, out, x, rd, K, R,
              scale);
  }
  LAUNCHED();
}

// a bf16 out: summed in float32 (the kernels add with atomics), rounded once
template <typename T>
static void reduce_sum(__nv_bfloat16 *out, const T *x, int rank, const long *shape,
                       const long *ostride, long onumel, float scale) {
  if (onumel <= 0) return;
  float *f = temp_f32(onumel, "reduce_sum");
  reduce_sum(f, x, rank, shape, ostride, onumel, scale);
  cast(out, f, onumel);
}
RT_CUDA_KTU(reduce_sum,
            (U *out, const T *x, int rank, const long *shape, const long *ostride, long onumel,
             float scale),
            (dev(out), dev(x), rank, shape, ostride, onumel, scale))

// rows_copy_kernel over elements, or over 16-byte packs where every row,
// offset and pointer falls in whole packs
template <typename T>
static void rows_copy(T *out, const T *x, long outer, long len, long oinner, long ooff,
                      long xinner, long xoff) {
  if (len <= 0 || outer <= 0) return;
  constexpr long N = Pack<T>::N;
  if (len % N == 0 && oinner % N == 0 && ooff % N == 0 && xinner % N == 0 && xoff % N == 0 &&
      aligned16(out) && aligned16(x)) {
    RT_LAUNCH(rows_copy_kernel, grid_for(outer * len / N, NT), NT, 0, rt_cuda_stream,
              (Pack<T> *)out, (const Pack<T> *)x, outer, len / N, oinner / N, ooff / N,
              xinner / N, xoff / N);
  } else {
    RT_LAUNCH(rows_copy_kernel, grid_for(outer * len, NT), NT, 0, rt_cuda_stream, out, x, outer,
              len, oinner, ooff, xinner, xoff);
  }
  LAUNCHED();
}

template <typename T>
static void slice(T *out, const T *x, long outer, long xinner, long off, long len) {
  rows_copy(out, x, outer, len, len, 0L, xinner, off);
}
RT_CUDA_KT(slice, (T *out, const T *x, long outer, long xinner, long off, long len),
           (dev(out), dev(x), outer, xinner, off, len))

template <typename T>
static void unslice(T *out, const T *x, long outer, long oinner, long off, long len) {
  rows_copy(out, x, outer, len, oinner, off, len, 0L);
}
RT_CUDA_KT(unslice, (T *out, const T *x, long outer, long oinner, long off, long len),
           (dev(out), dev(x), outer, oinner, off, len))

void rt_unslice_i32(int *out, const int *x, long outer, long oinner, long off, long len) {
  unslice(out, x, outer, oinner, off, len);
}

// ---- elementwise

template <typename T>
static void binary(int op, T *out, const T *a, const T *b, int rank, const long *shape,
                   const long *astride, const long *bstride) {
  check_rank(rank, "rt_binary");
  long n = numel_of(rank, shape);
  if (n <= 0) return;
  if (op < RT_ADD || op > RT_MAX) return;  // the CPU leaves out alone
  Dims d = make_dims(rank, shape, astride, bstride);
  if (packable(d, n, out, a, b)) {
    long packs = n / Pack<T>::N;
    RT_LAUNCH(binary_packs_kernel, grid_for(packs, NT), NT, 0, rt_cuda_stream, op, out, a, b, n,
              d);
  } else {
    RT_LAUNCH(binary_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, op, out, a, b, n, d);
  }
  LAUNCHED();
}
RT_CUDA_KT(binary,
           (int op, T *out, const T *a, const T *b, int rank, const long *shape,
            const long *astride, const long *bstride),
           (op, dev(out), dev(a), dev(b), rank, shape, astride, bstride))

template <typename T>
static void scale(T *out, const T *x, long n, float s, float b) {
  if (n <= 0) return;
  RT_LAUNCH(scale_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, out, x, n, s, b);
  LAUNCHED();
}
RT_CUDA_KT(scale, (T *out, const T *x, long n, float s, float b), (dev(out), dev(x), n, s, b))

// map1_kernel and map2_kernel's launches: packs where n and the pointers allow
template <typename T, typename F>
static void map1(T *y, const T *x, long n, F f) {
  if (n <= 0) return;
  if (n % Pack<T>::N == 0 && aligned16(y) && aligned16(x))
    RT_LAUNCH((map1_kernel<true, T, F>), grid_for(n / Pack<T>::N, NT), NT, 0, rt_cuda_stream, y,
              x, n, f);
  else
    RT_LAUNCH((map1_kernel<false, T, F>), grid_for(n, NT), NT, 0, rt_cuda_stream, y, x, n, f);
  LAUNCHED();
}

template <typename T, typename F>
static void map2(T *dx, const T *dy, const T *x, long n, F f) {
  if (n <= 0) return;
  if (n % Pack<T>::N == 0 && aligned16(dx) && aligned16(dy) && aligned16(x))
    RT_LAUNCH((map2_kernel<true, T, F>), grid_for(n / Pack<T>::N, NT), NT, 0, rt_cuda_stream, dx,
              dy, x, n, f);
  else
    RT_LAUNCH((map2_kernel<false, T, F>), grid_for(n, NT), NT, 0, rt_cuda_stream, dx, dy, x, n,
              f);
  LAUNCHED();
}

template <typename T>
static void gelu_fwd(T *y, const T *x, long n) {
  map1(y, x, n, GeluFwd());
}
RT_CUDA_KT(gelu_fwd, (T *y, const T *x, long n), (dev(y), dev(x), n))

template <typename T>
static void gelu_bwd(T *dx, const T *dy, const T *x, long n) {
  map2(dx, dy, x, n, GeluBwd());
}
RT_CUDA_KT(gelu_bwd, (T *dx, const T *dy, const T *x, long n), (dev(dx), dev(dy), dev(x), n))

template <typename T>
static void relu_fwd(T *y, const T *x, long n) {
  map1(y, x, n, ReluFwd());
}
RT_CUDA_KT(relu_fwd, (T *y, const T *x, long n), (dev(y), dev(x), n))

template <typename T>
static void relu_bwd(T *dx, const T *dy, const T *x, long n) {
  map2(dx, dy, x, n, ReluBwd());
}
RT_CUDA_KT(relu_bwd, (T *dx, const T *dy, const T *x, long n), (dev(dx), dev(dy), dev(x), n))

// ---- matmul

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

// ---- convolution

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

// ---- max pooling

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

// ---- neural-net ops

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

template <typename T>
static void norm_fwd(T *y, const T *x, const T *w, const T *b, long n, long c, float eps,
                     bool centered) {
  if (n <= 0 || c <= 0) return;
  if (norm_warp<T>(c, rows_of_packs<T>(c, y, x, w, b, NULL), [&](auto e, auto vec) {
        RT_LAUNCH((norm_fwd_warp_kernel<T, decltype(e)::value, decltype(vec)::value>),
                  grid_warp_rows(n), NORM_WARP_THREADS, 0, rt_cuda_stream, y, x, w, b, n, c, eps,
                  centered);
      })) {
    LAUNCHED();
    return;
  }
  RT_LAUNCH(norm_fwd_kernel, grid_rows(n), row_threads(c), 0, rt_cuda_stream, y, x, w, b, n, c, eps,
            centered);
  LAUNCHED();
}

template <typename T>
static void layernorm_fwd(T *y, const T *x, const T *w, const T *b, long n, long c, float eps) {
  norm_fwd(y, x, w, b, n, c, eps, true);
}
RT_CUDA_KT(layernorm_fwd,
           (T *y, const T *x, const T *w, const T *b, long n, long c, float eps),
           (dev(y), dev(x), dev(w), dev(b), n, c, eps))

template <typename T>
static void rmsnorm_fwd(T *y, const T *x, const T *w, long n, long c, float eps) {
  norm_fwd(y, x, w, (const T *)NULL, n, c, eps, false);
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

#include "attention_cuda.cuh"  // attention's kernels and launchers

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

template <typename T>
static void crossentropy_bwd(T *dlogits, const float *dloss, const T *logits, const int *targets,
                             long n, long v, long vocab, long ignore) {
  if (n <= 0) return;
  long *count = count_rows(targets, n, ignore, "crossentropy_bwd");
  RT_LAUNCH(crossentropy_bwd_kernel, grid_rows(n), row_threads(v), 0, rt_cuda_stream, dlogits,
            dloss, logits, targets, n, v, vocab, count, ignore,
            v % Pack<T>::N == 0 && aligned16(logits) && aligned16(dlogits));
  LAUNCHED();
}
RT_CUDA_KT(crossentropy_bwd,
           (T *dlogits, const float *dloss, const T *logits, const int *targets, long n, long v,
            long vocab, long ignore),
           (dev(dlogits), dloss, dev(logits), targets, n, v, vocab, ignore))

// ---- optimizers

// whether an update of n elements takes OPT_W a thread: n whole runs, each pointer (NULL:
// none) aligned to a run of its type
template <typename G>
static bool opt_runs(long n, const float *p, const G *g, const float *m, const float *v,
                     const __nv_bfloat16 *c) {
  auto at = [](const void *q, size_t bytes) { return q == NULL || (uintptr_t)q % bytes == 0; };
  return n % OPT_W == 0 && at(p, OPT_W * 4) && at(m, OPT_W * 4) && at(v, OPT_W * 4) &&
         at(g, OPT_W * sizeof(G)) && at(c, OPT_W * sizeof(*c));
}

// the CPU's adamw_step, on the host; c: NULL, or the bf16 copy written
template <typename G>
static void adamw(float *p, const G *g, float *m, float *v, long n, float lr, float beta1,
                  float beta2, float eps, float wd, int t, float gscale, long decay_n,
                  __nv_bfloat16 *c) {
  if (n <= 0) return;
  double bc1 = 1.0 - pow((double)beta1, (double)t);
  double bc2 = 1.0 - pow((double)beta2, (double)t);
  float step_size = (float)((double)lr / bc1), bc2_sqrt = (float)sqrt(bc2);
  float decay = 1.0f - lr * wd;
  if (opt_runs(n, p, g, m, v, c))
    RT_LAUNCH((adamw_kernel<OPT_W, G>), grid_for(n / OPT_W, NT), NT, 0, rt_cuda_stream, p, g, m, v,
              n, beta1, beta2, eps, step_size, bc2_sqrt, decay, gscale, decay_n, c);
  else
    RT_LAUNCH((adamw_kernel<1, G>), grid_for(n, NT), NT, 0, rt_cuda_stream, p, g, m, v, n, beta1,
              beta2, eps, step_size, bc2_sqrt, decay, gscale, decay_n, c);
  LAUNCHED();
}

RT_CUDA_KT(adamw,
           (float *p, const T *g, float *m, float *v, long n, float lr, float beta1, float beta2,
            float eps, float wd, int t, float gscale, long decay_n),
           (p, dev(g), m, v, n, lr, beta1, beta2, eps, wd, t, gscale, decay_n,
            (__nv_bfloat16 *)NULL))
// (RT_CUDA_KT calls the function of the kernel's name: the updates that write the copies are
// the same launchers under another)
template <typename G, typename... A>
static void adamw_copy(float *p, const G *g, A... rest) { adamw(p, g, rest...); }
RT_CUDA_KT(adamw_copy,
           (float *p, const T *g, float *m, float *v, long n, float lr, float beta1, float beta2,
            float eps, float wd, int t, float gscale, long decay_n, rt_bf16 *c),
           (p, dev(g), m, v, n, lr, beta1, beta2, eps, wd, t, gscale, decay_n, dev(c)))

template <typename G>
static void sgd(float *p, const G *g, long n, float lr, float wd, float gscale, long decay_n,
                __nv_bfloat16 *c) {
  if (n <= 0) return;
  if (opt_runs(n, p, g, (float *)NULL, (float *)NULL, c))
    RT_LAUNCH((sgd_kernel<OPT_W, G>), grid_for(n / OPT_W, NT), NT, 0, rt_cuda_stream, p, g, n, lr,
              wd, gscale, decay_n, c);
  else
    RT_LAUNCH((sgd_kernel<1, G>), grid_for(n, NT), NT, 0, rt_cuda_stream, p, g, n, lr, wd, gscale,
              decay_n, c);
  LAUNCHED();
}

RT_CUDA_KT(sgd, (float *p, const T *g, long n, float lr, float wd, float gscale, long decay_n),
           (p, dev(g), n, lr, wd, gscale, decay_n, (__nv_bfloat16 *)NULL))
template <typename G, typename... A>
static void sgd_copy(float *p, const G *g, A... rest) { sgd(p, g, rest...); }
RT_CUDA_KT(sgd_copy,
           (float *p, const T *g, long n, float lr, float wd, float gscale, long decay_n,
            rt_bf16 *c),
           (p, dev(g), n, lr, wd, gscale, decay_n, dev(c)))

template <typename T>
static void norm2(float *out, const T *x, long n) {
  long per = (long)NORM2_THREADS * NORM2_UNROLL, parts = (n + per - 1) / per;
  parts = parts < 1 ? 1 : parts > NORM2_BLOCKS ? NORM2_BLOCKS : parts;
  RT_LAUNCH(norm2_parts_kernel, (unsigned)parts, NORM2_THREADS, 0, rt_cuda_stream, x, n);
  LAUNCHED();
  RT_LAUNCH(norm2_kernel, 1, NORM2_THREADS, 0, rt_cuda_stream, out, (int)parts);
  LAUNCHED();
}
RT_CUDA_KT(norm2, (float *out, const T *x, long n), (out, dev(x), n))

template <typename T>
static void find_nonfinite(int *at, const T *x, long n) {
  cudaCheck(cudaMemsetAsync(at, 0xff, sizeof *at, rt_cuda_stream));
  if (n <= 0) return;
  RT_LAUNCH(find_nonfinite_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, (unsigned *)at, x, n);
  LAUNCHED();
}
RT_CUDA_KT(find_nonfinite, (int *at, const T *x, long n), (at, dev(x), n))

// ---- offload: host memory
//
// rt_adamw_host, rt_cast_host, rt_accumulate_host and rt_host_threads are host code over host
// memory (runtime/host.c in every build). The host region is pinned (device_cuda.cu). A copy
// without a slot waits for the stream, as the host reads or rewrites `host` right after. A copy
// with a slot runs on the copy stream once the kernels launched before it have finished, beside
// those launched after it; copy_wait(slot, host) makes the kernels launched after the wait wait
// for it, and where the host reads what came (host), the host too. A copy's host source is not
// written again before the step's end waits for the device (train.c).

static rt_copy_slots copy_slots;
static cudaStream_t copy_stream;
static cudaEvent_t kernels_before_copy;  // reused: each record is queued before the next

static void copy_start(int slot, void *dst, const void *src, size_t bytes,
                       cudaMemcpyKind kind) {
  if (slot < 0) {
    if (!bytes) return;
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, kind, rt_cuda_stream));
    cudaCheck(cudaStreamSynchronize(rt_cuda_stream));
    return;
  }
  rt_copy_slot *c = rt_copy_slot_start(&copy_slots, slot);
  if (!copy_stream) {
    cudaCheck(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&kernels_before_copy, cudaEventDisableTiming));
  }
  cudaEvent_t done = (cudaEvent_t)c->event;
  if (!done) {
    cudaCheck(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    c->event = done;
  }
  cudaCheck(cudaEventRecord(kernels_before_copy, rt_cuda_stream));
  cudaCheck(cudaStreamWaitEvent(copy_stream, kernels_before_copy, 0));
  if (bytes) cudaCheck(cudaMemcpyAsync(dst, src, bytes, kind, copy_stream));
  cudaCheck(cudaEventRecord(done, copy_stream));
}

extern "C" void rt_copy_wait(int slot, int host) {
  cudaEvent_t done = (cudaEvent_t)rt_copy_slot_wait(&copy_slots, slot)->event;
  cudaCheck(cudaStreamWaitEvent(rt_cuda_stream, done, 0));
  if (host) cudaCheck(cudaEventSynchronize(done));
}

extern "C" int rt_copies_pending(void) { return rt_copy_slots_pending(&copy_slots); }

template <typename T>
static void to_host(T *host, const T *x, long n, int slot) {
  copy_start(slot, host, x, (size_t)(n > 0 ? n : 0) * sizeof(T), cudaMemcpyDeviceToHost);
}
RT_CUDA_KT(to_host, (T *host, const T *x, long n, int slot), (dev(host), dev(x), n, slot))

template <typename T>
static void to_device(T *x, const T *host, long n, int slot) {
  copy_start(slot, x, host, (size_t)(n > 0 ? n : 0) * sizeof(T), cudaMemcpyHostToDevice);
}
RT_CUDA_KT(to_device, (T *x, const T *host, long n, int slot), (dev(x), dev(host), n, slot))

// ---- kernels for ONNX ops

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
  map1(y, x, n, Unary{op, p});
}
RT_CUDA_KT(unary, (int op, T *y, const T *x, long n, float p), (op, dev(y), dev(x), n, p))

template <typename T>
static void gelu_erf_fwd(T *y, const T *x, long n) {
  map1(y, x, n, GeluErfFwd());
}
RT_CUDA_KT(gelu_erf_fwd, (T *y, const T *x, long n), (dev(y), dev(x), n))

template <typename T>
static void gelu_erf_bwd(T *dx, const T *dy, const T *x, long n) {
  map2(dx, dy, x, n, GeluErfBwd());
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
  map1(y, x, n, SiluFwd());
}
RT_CUDA_KT(silu_fwd, (T *y, const T *x, long n), (dev(y), dev(x), n))

template <typename T>
static void silu_bwd(T *dx, const T *dy, const T *x, long n) {
  map2(dx, dy, x, n, SiluBwd());
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

// ---- dist.h's kernels (the collectives they call run over comm.h)

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
