// The tensor cores' warp-wide instructions (PTX) that the bf16 attention
// kernels (attention_cuda.cuh) are written in: mma.sync m16n8k16 (bf16
// operands, float sums) and ldmatrix, each the whole warp's (every lane
// takes part, at the same instruction); and cp.async, the copies that fill
// their tiles in shared memory while they compute. Sizes and lanes as the PTX ISA's
// "Matrix Fragments for mma.m16n8k16" and ldmatrix lay them out; the CUDA
// emulation (tests/cuda_emu/cuda_emu.h, included first) runs them lane by
// lane with the same layout. Lane l = 4 g + q (g = l / 4, q = l % 4); a
// 32-bit register holds two bf16, the lower column (or row) in its low half.
#ifndef MTC_RT_MMA_CUDA_CUH
#define MTC_RT_MMA_CUDA_CUH

#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>

// bf16 mma.sync, ldmatrix and cp.async: sm_80 and later (the callers check FA_ARCH_OK)
#if !defined(MTC_CUDA_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define RT_MMA_PTX 1
#endif

// Two floats as two bf16 (rounded to nearest even), lo in the low half.
__device__ inline uint32_t mma_pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}

// d += a b for A 16 x 16 and B 16 x 8 (bf16), D 16 x 8 (float). Lane l holds
//   a[0] = A[g][2q, 2q+1]      a[1] = A[g+8][2q, 2q+1]
//   a[2] = A[g][2q+8, 2q+9]    a[3] = A[g+8][2q+8, 2q+9]
//   b[0] = B[2q, 2q+1][g]      b[1] = B[2q+8, 2q+9][g]
//   d[0], d[1] = D[g][2q, 2q+1]  d[2], d[3] = D[g+8][2q, 2q+1]
// so that a D tile of 16 x 16 (two of them side by side) is, rounded to
// bf16, the A operand of the next product (mma_pack).
__device__ inline void mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
#if defined(MTC_CUDA_EMU)
  emu::mma_16816(d, a, b);
#elif defined(RT_MMA_PTX)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(__CUDA_ARCH__)
  (void)d, (void)a, (void)b;
  __trap();
#endif
}

// Four 8 x 8 bf16 matrices from shared memory: lane l gives p, the address of
// row l % 8 of matrix l / 8 (16 bytes, 16-byte aligned), and gets r[j] =
// matrix j's row g, columns 2q and 2q + 1; with trans, its rows 2q and 2q + 1
// of column g (ldmatrix .x4, .trans).
__device__ inline void ldsm_x4(uint32_t r[4], const __nv_bfloat16 *p, bool trans) {
#if defined(MTC_CUDA_EMU)
  emu::ldmatrix_x4(r, p, trans);
#elif defined(RT_MMA_PTX)
  unsigned s = (unsigned)__cvta_generic_to_shared(p);
  if (trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
#elif defined(__CUDA_ARCH__)
  (void)r, (void)p, (void)trans;
  __trap();
#endif
}

// Asynchronous copies into shared memory (cp.async, sm_80): 16 bytes from
// src to dst (both 16-byte aligned), or 16 zeros when !full (src is not read,
// but must be a valid address); issued in groups (cp_async_commit) and waited
// for with cp_async_wait<N>(), which returns when at most the N groups the
// thread committed last are in flight. A thread's wait covers its own copies
// only: a __syncthreads after it shows every thread's to the block.
__device__ inline void cp_async16(void *dst, const void *src, bool full) {
#if defined(MTC_CUDA_EMU)
  emu::cp_async(dst, src, full ? 16 : 0);
#elif defined(RT_MMA_PTX)
  unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src),
               "r"(full ? 16 : 0));
#elif defined(__CUDA_ARCH__)
  (void)dst, (void)src, (void)full;
  __trap();
#endif
}
__device__ inline void cp_async_commit(void) {
#if defined(MTC_CUDA_EMU)
  emu::cp_async_commit();
#elif defined(RT_MMA_PTX)
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ inline void cp_async_wait(void) {
#if defined(MTC_CUDA_EMU)
  emu::cp_async_wait(N);
#elif defined(RT_MMA_PTX)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// The operands of a warp's products from a bf16 tile in shared memory (row-major,
// ld elements a row; ld * 2 bytes a multiple of 16), 16 x 16 at (r0, c0):
//   mma_a:  the A operand, the tile itself
//   mma_bt: the B operands of two products, B[k][n] = tile[n][k] for rows n of
//           r0.. (b[0..1]) and r0 + 8.. (b[2..3]): the tile is B transposed
//   mma_b:  the B operands of two products, B[k][n] = tile[k][n] for columns n
//           of c0.. (b[0..1]) and c0 + 8.. (b[2..3])
__device__ inline void mma_a(uint32_t a[4], const __nv_bfloat16 *t, int ld, int r0, int c0) {
  int l = threadIdx.x % 32;
  ldsm_x4(a, t + (r0 + l % 16) * ld + c0 + l / 16 * 8, false);
}
__device__ inline void mma_bt(uint32_t b[4], const __nv_bfloat16 *t, int ld, int r0, int c0) {
  int l = threadIdx.x % 32;
  ldsm_x4(b, t + (r0 + l % 8 + l / 16 * 8) * ld + c0 + l / 8 % 2 * 8, false);
}
__device__ inline void mma_b(uint32_t b[4], const __nv_bfloat16 *t, int ld, int r0, int c0) {
  int l = threadIdx.x % 32;
  ldsm_x4(b, t + (r0 + l % 8 + l / 8 % 2 * 8) * ld + c0 + l / 16 * 8, true);
}

#endif
