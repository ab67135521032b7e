// CPU reference kernels of the mtc runtime (see kernels.h for the contract).
//
// Plain C11 + OpenMP, in the style of llm.c: one function per kernel,
// readable loops (GEMM included: no BLAS library is needed). Every kernel is
// deterministic: a given input produces bit-identical output from run to run,
// whatever the thread timing and the thread count. Where a sum crosses rows,
// either one thread owns each output element and adds in a fixed order, or
// the sum is split into a fixed number of chunks (independent of the thread
// count) that are combined in order. Without -fopenmp the pragmas are
// ignored and everything runs serially.
#include <math.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#include "adamw_cpu.h"
#include "exp_cpu.h"
#include "scan_cpu.h"
#include "coalesce.h"
#include "copy_slots.h"
#include "dist.h"
#include "kernels.h"
#include "pool.h"

// Below this many elements a parallel region costs more than it saves. A
// pass over 2^19 floats takes about 0.2 ms; a parallel region costs a few
// microseconds on an idle machine, but on a loaded one the team can wait a
// whole time slice (milliseconds) for a preempted thread at its barrier, so
// only work well above that size is split.
#define PAR_MIN (1L << 19)
// The same for kernels that do tens of operations per element (exp, rows).
#define PAR_MIN_MATH (1L << 17)
// Column block (floats) for kernels that parallelize over output columns.
#define COL_BLOCK 64L
// Fixed chunk count for deterministic parallel sums.
#define SUM_CHUNKS 64

static long numel_of(int rank, const long *shape) {
  long n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  return n;
}


// Offset of row `row` of the leading `nd` dims (row-major over sh[0..nd)).
static long row_offset(long row, int nd, const long *sh, const long *st) {
  long off = 0;
  for (int d = nd - 1; d >= 0; d--) {
    off += (row % sh[d]) * st[d];
    row /= sh[d];
  }
  return off;
}


// Row reductions in LANES interleaved partial results (x[i] goes to lane
// i % LANES), combined in lane order at the end: the lanes are independent,
// so the compiler vectorizes the loop without reassociating anything, and
// the result is the same on every run.
#define LANES 16

// 16 ints, beside adamw_cpu.h's 16 floats (v16f).
typedef int32_t v16i __attribute__((vector_size(64)));

static long ceil_div(long a, long b) { return (a + b - 1) / b; }
static long min_l(long a, long b) { return a < b ? a : b; }

// acc[0] + ... + acc[LANES-1] as a tree: halves added lane by lane
static float lanes_total(float *acc) {
  for (int w = LANES / 2; w > 0; w /= 2)
    for (int l = 0; l < w; l++) acc[l] += acc[l + w];
  return acc[0];
}

static float sum_lanes(const float *x, long n) {
  float acc[LANES] = {0};
  long i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++) acc[l] += x[i + l];
  for (int l = 0; i + l < n; l++) acc[l] += x[i + l];
  return lanes_total(acc);
}

static float dot_lanes(const float *x, const float *y, long n) {
  float acc[LANES] = {0};
  long i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++) acc[l] += x[i + l] * y[i + l];
  for (int l = 0; i + l < n; l++) acc[l] += x[i + l] * y[i + l];
  return lanes_total(acc);
}

// (GCC does not vectorize a float max without -ffinite-math-only, so the
// lanes are a vector here: a compare gives a mask, the mask selects.)
static float max_lanes(const float *x, long n) {
  v16f m16 = (v16f){0} - INFINITY;
  long i = 0;
  for (; i + LANES <= n; i += LANES) {
    v16f v;
    memcpy(&v, x + i, sizeof v);
    v16i bigger = v > m16;
    m16 = (v16f)(((v16i)v & bigger) | ((v16i)m16 & ~bigger));
  }
  float acc[LANES];
  memcpy(acc, &m16, sizeof acc);
  for (int l = 0; i + l < n; l++) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  float m = -INFINITY;
  for (int l = 0; l < LANES; l++) m = acc[l] > m ? acc[l] : m;
  return m;
}

// ---------------------------------------------------------------------------
// data movement







void rt_unslice_i32(int *out, const int *x, long outer, long oinner, long off, long len) {
  if (len <= 0) return;
#pragma omp parallel for if (outer * len >= PAR_MIN)
  for (long o = 0; o < outer; o++)
    memcpy(out + o * oinner + off, x + o * len, (size_t)len * sizeof(int));
}

// ---------------------------------------------------------------------------
// elementwise





#define GELU_SCALE 0.7978845608028654f  // sqrt(2 / pi)
#define GELU_COEF 0.044715f

// Both kernels use 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)) and
// 1 - tanh(u)^2 = 4 s (1 - s): one exponential instead of tanhf, and no
// cancellation in 1 - tanh^2. Beyond |u| = 20 the results are exact to
// float (tanh u = +-1), so u is clamped there: no overflow, no denormals,
// and the loops vectorize (selects, no branches).
#define GELU_TAIL 20.0f

// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): rt_gelu_fwd's, and a GEMM's epilogue's
static inline float gelu_f(float x) {
  float u = GELU_SCALE * (x + GELU_COEF * x * x * x);
  float uc = u > GELU_TAIL ? GELU_TAIL : (u < -GELU_TAIL ? -GELU_TAIL : u);
  float s = 1.0f / (1.0f + exp_fast(-2.0f * uc));  // 0.5 (1 + tanh u)
  return u > GELU_TAIL ? x : (u < -GELU_TAIL ? 0.0f : x * s);
}





// ---------------------------------------------------------------------------
// matmul

// SGEMM in the style of BLIS/GotoBLAS, in portable C: the output is cut
// into tasks (row block x column block) that the threads take in turn;
// a task walks K in GEMM_KC slices and packs its slice of op(A) into
// GEMM_MR-row micro-panels (the A block); then, GEMM_NB column micro-panels
// of op(B) at a time, it packs them (in L2) and runs the micro-kernel along
// each row of micro-tiles: the A micro-panel stays in L1 and the C tiles it
// writes are neighbours (few pages, few TLB misses). The A block is read
// once per B group, from L2 or L3: a large GEMM_MC costs little, and lets
// one task cover all rows, so that a wide op(B) (the LM head's, 154 MB at
// GPT-2 124M) is packed once, not once per row block.
// Every element of C is summed in the same order (K slices in order, p in
// order within a slice) whatever the task split or the thread count, so
// results are bit-identical run to run.
//
// The micro-tile is GEMM_MR rows x GEMM_NV vectors of GEMM_VW floats, sized
// so that its accumulators, the B vectors of one p and a broadcast fit the
// vector registers (a spilled accumulator costs a load and a store per FMA):
//  - AVX-512 (32 zmm): 12 x 32, 24 accumulators of 16 floats;
//  - otherwise: 6 x 16, 12 accumulators of 8 floats (BLIS's Haswell shape),
//    for AVX2's 16 ymm; without AVX each vector is split in two and some
//    spill, but the code stays portable.
// A larger tile loads less per FMA; one that spills runs many times slower.
#if defined(__AVX512F__)
typedef v16f gemm_v;
#define GEMM_VW 16    // floats per vector
#define GEMM_MR 12    // rows of a micro-tile
#define GEMM_KC 512   // K slice: a packed B micro-panel is 64 KiB
#define GEMM_NB 8     // B micro-panels packed together: 512 KiB (in L2)
#else
typedef float v8f __attribute__((vector_size(32)));
typedef v8f gemm_v;
#define GEMM_VW 8
#define GEMM_MR 6
#define GEMM_KC 512   // K slice: a packed B micro-panel is 32 KiB
#define GEMM_NB 16    // B micro-panels packed together: 512 KiB (in L2)
#endif
#define GEMM_NV 2                    // vectors per row of a micro-tile
#define GEMM_NR (GEMM_NV * GEMM_VW)  // columns of a micro-tile
#define GEMM_MC 1032  // most rows per task, a multiple of MR: A block 2 MiB
// the A packer transposes MR x VW blocks
_Static_assert(GEMM_MC % GEMM_MR == 0 && GEMM_MR <= GEMM_VW, "GEMM blocking");

static _Thread_local _Alignas(64) float gemm_pack_a[GEMM_MC * GEMM_KC];
static _Thread_local _Alignas(64) float gemm_pack_b[GEMM_NB * GEMM_KC * GEMM_NR];

// A GEMM_VW x GEMM_VW block transposed in registers: for each bit b of the
// row and column index the two are swapped, one two-input shuffle per output
// row (log2 VW stages x VW shuffles), instead of VW^2 scalar loads from rows
// far apart. Needs __builtin_shufflevector (GCC 12, Clang); the packers below
// fall back to scalar loops without it.
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define HAVE_SHUFFLEVECTOR 1
// One stage: rows i and i + S (for every i without bit S) exchange the
// halves that differ in bit S of the column, LO and HI the shuffle indices.
#define UNPAREN(...) __VA_ARGS__
#define TRANSPOSE_STAGE(r, S, LO, HI)                         \
  for (int i = 0; i < GEMM_VW; i++) {                         \
    if (i & (S)) continue;                                    \
    gemm_v x = (r)[i], y = (r)[i + (S)];                      \
    (r)[i] = __builtin_shufflevector(x, y, UNPAREN LO);       \
    (r)[i + (S)] = __builtin_shufflevector(x, y, UNPAREN HI); \
  }
__attribute__((always_inline)) static inline void transpose_vw(gemm_v r[GEMM_VW]) {
#if GEMM_VW == 16
  TRANSPOSE_STAGE(r, 1, (0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30),
                  (1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31))
  TRANSPOSE_STAGE(r, 2, (0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29),
                  (2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31))
  TRANSPOSE_STAGE(r, 4, (0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27),
                  (4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31))
  TRANSPOSE_STAGE(r, 8, (0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23),
                  (8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31))
#else
  TRANSPOSE_STAGE(r, 1, (0, 8, 2, 10, 4, 12, 6, 14), (1, 9, 3, 11, 5, 13, 7, 15))
  TRANSPOSE_STAGE(r, 2, (0, 1, 8, 9, 4, 5, 12, 13), (2, 3, 10, 11, 6, 7, 14, 15))
  TRANSPOSE_STAGE(r, 4, (0, 1, 2, 3, 8, 9, 10, 11), (4, 5, 6, 7, 12, 13, 14, 15))
#endif
}
#undef TRANSPOSE_STAGE
#undef UNPAREN

// Reads `rows` (<= VW) rows of VW floats (row i at src + i*ld) and writes
// the block transposed: its column q, `rows` floats, to dst + q*dstride.
static inline void pack_transposed(float *dst, long dstride, const float *src, long ld,
                                   int rows) {
  gemm_v r[GEMM_VW];
  for (int i = 0; i < GEMM_VW; i++) {
    if (i < rows)
      memcpy(&r[i], src + i * ld, sizeof r[i]);
    else
      r[i] = (gemm_v){0};
  }
  transpose_vw(r);
  for (int q = 0; q < GEMM_VW; q++) memcpy(dst + q * dstride, &r[q], (size_t)rows * sizeof(float));
}
#endif

// Packs rows [0, mc) x columns [0, kc) of op(A) (A read at a, leading dim lda)
// into micro-panels of GEMM_MR rows: panel r holds element (r*MR + i, p) at
// [r*MR*kc + p*MR + i]; rows past mc are zero. Full panels take loops with a
// fixed trip count, which the compiler unrolls.
static void gemm_pack_a_block(float *dst, const float *a, long lda, int ta, long mc,
                              long kc) {
  for (long r = 0; r < mc; r += GEMM_MR) {
    long mr = min_l(GEMM_MR, mc - r);
    float *d = dst + r * kc;
    if (ta) {  // op(A)(i, p) = a[p*lda + i]: contiguous in i
      const float *s = a + r;
      if (mr == GEMM_MR) {
        for (long p = 0; p < kc; p++)
          memcpy(d + p * GEMM_MR, s + p * lda, GEMM_MR * sizeof(float));
        continue;
      }
      for (long p = 0; p < kc; p++)
        for (long i = 0; i < GEMM_MR; i++) d[p * GEMM_MR + i] = i < mr ? s[p * lda + i] : 0.0f;
    } else {  // op(A)(i, p) = a[i*lda + p]
      const float *s = a + r * lda;
      if (mr == GEMM_MR) {
        long p = 0;
#ifdef HAVE_SHUFFLEVECTOR
        for (; p + GEMM_VW <= kc; p += GEMM_VW)
          pack_transposed(d + p * GEMM_MR, GEMM_MR, s + p, lda, GEMM_MR);
#endif
        for (; p < kc; p++)
          for (long i = 0; i < GEMM_MR; i++) d[p * GEMM_MR + i] = s[i * lda + p];
        continue;
      }
      for (long p = 0; p < kc; p++)
        for (long i = 0; i < GEMM_MR; i++) d[p * GEMM_MR + i] = i < mr ? s[i * lda + p] : 0.0f;
    }
  }
}

// Packs columns [0, nr) x rows [0, kc) of op(B) into one micro-panel:
// element (p, j) at [p*NR + j]; columns past nr are zero.
static void gemm_pack_b_panel(float *dst, const float *b, long ldb, int tb, long nr,
                              long kc) {
  if (!tb && nr == GEMM_NR) {  // op(B)(p, j) = b[p*ldb + j]: rows of NR floats
    for (long p = 0; p < kc; p++)
      memcpy(dst + p * GEMM_NR, b + p * ldb, GEMM_NR * sizeof(float));
  } else if (tb && nr == GEMM_NR) {  // op(B)(p, j) = b[j*ldb + p]: a transpose
    long p = 0;
#ifdef HAVE_SHUFFLEVECTOR
    for (; p + GEMM_VW <= kc; p += GEMM_VW)
      for (long j = 0; j < GEMM_NR; j += GEMM_VW)
        pack_transposed(dst + p * GEMM_NR + j, GEMM_NR, b + j * ldb + p, ldb, GEMM_VW);
#endif
    for (; p < kc; p++)
      for (long j = 0; j < GEMM_NR; j++) dst[p * GEMM_NR + j] = b[j * ldb + p];
  } else {  // the last, partial panel
    for (long p = 0; p < kc; p++)
      for (long j = 0; j < GEMM_NR; j++)
        dst[p * GEMM_NR + j] = j >= nr ? 0.0f : tb ? b[j * ldb + p] : b[p * ldb + j];
  }
}

// A hint that the cache line at p will be written soon (no-op without
// GCC/Clang).
#if defined(__GNUC__)
#define PREFETCH_W(p) __builtin_prefetch(p, 1)
#else
#define PREFETCH_W(p) ((void)(p))
#endif

// Writes the accumulators of a micro-tile into c (row stride ldc; only its
// mr x nr corner is valid), adding what c holds when accumulating.
__attribute__((always_inline)) static inline void gemm_store(gemm_v acc[GEMM_MR][GEMM_NV],
                                                             float *c, long ldc, int accumulate,
                                                             long mr, long nr) {
  if (mr == GEMM_MR && nr == GEMM_NR) {
    for (int i = 0; i < GEMM_MR; i++) {
      float *ci = c + i * ldc;
      for (int v = 0; v < GEMM_NV; v++) {
        if (accumulate) {
          gemm_v x;
          memcpy(&x, ci + v * GEMM_VW, sizeof x);
          acc[i][v] += x;
        }
        memcpy(ci + v * GEMM_VW, &acc[i][v], sizeof acc[i][v]);
      }
    }
    return;
  }
  float t[GEMM_MR][GEMM_NR];  // an edge tile: through a buffer
  for (int i = 0; i < GEMM_MR; i++)
    for (int v = 0; v < GEMM_NV; v++) memcpy(t[i] + v * GEMM_VW, &acc[i][v], sizeof acc[i][v]);
  for (long i = 0; i < mr; i++)
    for (long j = 0; j < nr; j++)
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + t[i][j] : t[i][j];
}

// The micro-kernel: the GEMM_MR x GEMM_NR tile c (row stride ldc, only
// mr x nr of it valid) = (accumulate ? c : 0) + sum_p a[p, :] (x) b[p, :].
// MR x NV accumulator vectors; per p: NV vector loads, MR broadcasts,
// MR x NV FMAs. The loops over i and v have fixed trip counts: unrolled, so
// that acc lives in registers. fp-contract is switched on here because
// -std=c11 turns it off.
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("fp-contract=fast")))
#endif
static void gemm_micro(long kc, const float *a, const float *b, float *c, long ldc,
                       int accumulate, long mr, long nr) {
  for (long i = 0; i < mr; i++) {  // the tile is written at the end: fetch it now
    PREFETCH_W(c + i * ldc);
    PREFETCH_W(c + i * ldc + nr - 1);
  }
  gemm_v acc[GEMM_MR][GEMM_NV];
  for (int i = 0; i < GEMM_MR; i++)
    for (int v = 0; v < GEMM_NV; v++) acc[i][v] = (gemm_v){0};
  for (long p = 0; p < kc; p++) {
    gemm_v bv[GEMM_NV];
    for (int v = 0; v < GEMM_NV; v++)
      memcpy(&bv[v], b + p * GEMM_NR + v * GEMM_VW, sizeof bv[v]);
    const float *ap = a + p * GEMM_MR;
    for (int i = 0; i < GEMM_MR; i++)
      for (int v = 0; v < GEMM_NV; v++) acc[i][v] += ap[i] * bv[v];
  }
  gemm_store(acc, c, ldc, accumulate, mr, nr);
}

// ---- bf16 operands, float32 results and accumulators
//
// With AVX512-BF16 (GCC/Clang's __AVX512BF16__, as -march=native gives on
// CPUs that have it) the micro-kernel multiplies bf16 pairs: vdpbf16ps adds
// a[p] b[p] + a[p+1] b[p+1] (each product exact in float32) to 16 float32
// accumulators, twice the multiply-adds of a float32 FMA per instruction.
// The packed panels hold pairs of consecutive p side by side:
//   A panel   the pair (i, pp) at 32-bit word [pp*MR + i],
//   B panel   the pair (pp, j) at 32-bit word [pp*NR + j],
// so that one 32-bit broadcast of A and one vector load of B feed a
// vdpbf16ps; an odd K slice ends with a zero. Elsewhere (or built with
// -DMTC_GEMM_NO_BF16_DOT, as a test forces) the packers widen bf16 to
// float32 panels and the float32 micro-kernel runs: exactly the float32
// GEMM of the widened operands. The two differ only in the order of the
// float32 additions (and vdpbf16ps flushes subnormal inputs and results
// to zero).
#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(HAVE_SHUFFLEVECTOR) && GEMM_VW == 16 && !defined(MTC_GEMM_NO_BF16_DOT)
#define GEMM_BF16_DOT 1
#include <immintrin.h>
#else
#define GEMM_BF16_DOT 0
#endif

const char *rt_cpu_gemm_bf16_kind(void) {
  return GEMM_BF16_DOT ? "avx512-bf16 dot products" : "bf16 widened to float32";
}

// op(X)(r, q) of a bf16 matrix at x with leading dimension ld (t: transposed)
static inline rt_bf16 gemm_op16(const rt_bf16 *x, long ld, int t, long r, long q) {
  return t ? x[q * ld + r] : x[r * ld + q];
}

#if GEMM_BF16_DOT
static inline uint32_t bf16_pair(rt_bf16 lo, rt_bf16 hi) {
  return (uint32_t)lo.bits | (uint32_t)hi.bits << 16;
}

// Pairs (s0[j], s1[j]) of two rows, j < n, as 32-bit words at d: 16 at a
// time, by one word permutation of the two rows' halves.
static void interleave_rows(uint32_t *d, const rt_bf16 *s0, const rt_bf16 *s1, long n) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                       8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (long j = 0; j < n; j += 16) {
    __mmask16 m = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
    __m256i lo = _mm256_maskz_loadu_epi16(m, s0 + j), hi = _mm256_maskz_loadu_epi16(m, s1 + j);
    __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    _mm512_mask_storeu_epi32(d + j, m, _mm512_permutexvar_epi16(idx, both));
  }
}

// The words of pair panel rows whose pairs are two neighbours in memory:
// word (q, i) = the pair at s + i*ld + 2q (ld even), i < rows (<= VW), for
// q in [0, VW), written to d + q*dstride: a VW x VW transpose of 32-bit words.
static inline void transpose_pairs(uint32_t *d, long dstride, const rt_bf16 *s, long ld,
                                   int rows) {
  pack_transposed((float *)d, dstride, (const float *)s, ld / 2, rows);
}

// A block of op(A) (rows [0, mc), columns [0, kc)) as pair panels of MR
// rows. Full panels with an even slice go by vectors.
static void gemm_pack_a_pairs(uint32_t *dst, const rt_bf16 *a, long lda, int ta, long mc,
                              long kc) {
  long kp = (kc + 1) / 2;
  for (long r = 0; r < mc; r += GEMM_MR) {
    long mr = min_l(GEMM_MR, mc - r);
    uint32_t *d = dst + r * kp;
    if (mr == GEMM_MR && kc % 2 == 0 && (ta || lda % 2 == 0)) {
      if (ta) {  // op(A)(i, p) = a[p*lda + i]: rows p and p+1 interleaved
        for (long pp = 0; pp < kp; pp++)
          interleave_rows(d + pp * GEMM_MR, a + 2 * pp * lda + r, a + (2 * pp + 1) * lda + r,
                          GEMM_MR);
      } else {  // op(A)(i, p) = a[i*lda + p]: a pair is two neighbours
        const rt_bf16 *s = a + r * lda;
        long pp = 0;
        for (; pp + GEMM_VW <= kp; pp += GEMM_VW)
          transpose_pairs(d + pp * GEMM_MR, GEMM_MR, s + 2 * pp, lda, GEMM_MR);
        for (; pp < kp; pp++)
          for (long i = 0; i < GEMM_MR; i++)
            d[pp * GEMM_MR + i] = bf16_pair(s[i * lda + 2 * pp], s[i * lda + 2 * pp + 1]);
      }
      continue;
    }
    for (long pp = 0; pp < kp; pp++)
      for (long i = 0; i < GEMM_MR; i++) {
        rt_bf16 lo = {0}, hi = {0};
        if (i < mr) {
          lo = gemm_op16(a, lda, ta, r + i, 2 * pp);
          if (2 * pp + 1 < kc) hi = gemm_op16(a, lda, ta, r + i, 2 * pp + 1);
        }
        d[pp * GEMM_MR + i] = bf16_pair(lo, hi);
      }
  }
}

// Columns [0, nr) x rows [0, kc) of op(B) as one pair panel.
static void gemm_pack_b_pairs(uint32_t *dst, const rt_bf16 *b, long ldb, int tb, long nr,
                              long kc) {
  long kp = (kc + 1) / 2;
  if (nr == GEMM_NR && kc % 2 == 0 && (!tb || ldb % 2 == 0)) {
    if (tb) {  // op(B)(p, j) = b[j*ldb + p]: a pair is two neighbours
      long pp = 0;
      for (; pp + GEMM_VW <= kp; pp += GEMM_VW)
        for (long j = 0; j < GEMM_NR; j += GEMM_VW)
          transpose_pairs(dst + pp * GEMM_NR + j, GEMM_NR, b + j * ldb + 2 * pp, ldb, GEMM_VW);
      for (; pp < kp; pp++)
        for (long j = 0; j < GEMM_NR; j++)
          dst[pp * GEMM_NR + j] = bf16_pair(b[j * ldb + 2 * pp], b[j * ldb + 2 * pp + 1]);
    } else {  // op(B)(p, j) = b[p*ldb + j]: rows p and p+1 interleaved
      for (long pp = 0; pp < kp; pp++)
        interleave_rows(dst + pp * GEMM_NR, b + 2 * pp * ldb, b + (2 * pp + 1) * ldb, GEMM_NR);
    }
    return;
  }
  for (long pp = 0; pp < kp; pp++)
    for (long j = 0; j < GEMM_NR; j++) {
      rt_bf16 lo = {0}, hi = {0};
      if (j < nr) {
        lo = gemm_op16(b, ldb, tb, 2 * pp, j);
        if (2 * pp + 1 < kc) hi = gemm_op16(b, ldb, tb, 2 * pp + 1, j);
      }
      dst[pp * GEMM_NR + j] = bf16_pair(lo, hi);
    }
}

// The micro-kernel of the pair panels (kp pairs): as gemm_micro.
static void gemm_micro_dot(long kp, const uint32_t *a, const uint32_t *b, float *c, long ldc,
                           int accumulate, long mr, long nr) {
  for (long i = 0; i < mr; i++) {
    PREFETCH_W(c + i * ldc);
    PREFETCH_W(c + i * ldc + nr - 1);
  }
  gemm_v acc[GEMM_MR][GEMM_NV];
  for (int i = 0; i < GEMM_MR; i++)
    for (int v = 0; v < GEMM_NV; v++) acc[i][v] = (gemm_v){0};
  for (long pp = 0; pp < kp; pp++) {
    __m512bh bv[GEMM_NV];
    for (int v = 0; v < GEMM_NV; v++)
      bv[v] = (__m512bh)_mm512_loadu_si512(b + pp * GEMM_NR + v * GEMM_VW);
    const uint32_t *ap = a + pp * GEMM_MR;
    for (int i = 0; i < GEMM_MR; i++) {
      __m512bh ai = (__m512bh)_mm512_set1_epi32((int)ap[i]);
      for (int v = 0; v < GEMM_NV; v++)
        acc[i][v] = (gemm_v)_mm512_dpbf16_ps((__m512)acc[i][v], ai, bv[v]);
    }
  }
  gemm_store(acc, c, ldc, accumulate, mr, nr);
}
#else
// A block of op(A) widened into float32 micro-panels (as gemm_pack_a_block).
static void gemm_pack_a_wide(float *dst, const rt_bf16 *a, long lda, int ta, long mc, long kc) {
  for (long r = 0; r < mc; r += GEMM_MR) {
    long mr = min_l(GEMM_MR, mc - r);
    float *d = dst + r * kc;
    for (long p = 0; p < kc; p++)
      for (long i = 0; i < GEMM_MR; i++)
        d[p * GEMM_MR + i] = i < mr ? rt_bf16_to_f32(gemm_op16(a, lda, ta, r + i, p)) : 0.0f;
  }
}

// A micro-panel of op(B) widened to float32 (as gemm_pack_b_panel).
static void gemm_pack_b_wide(float *dst, const rt_bf16 *b, long ldb, int tb, long nr, long kc) {
  for (long p = 0; p < kc; p++)
    for (long j = 0; j < GEMM_NR; j++)
      dst[p * GEMM_NR + j] = j < nr ? rt_bf16_to_f32(gemm_op16(b, ldb, tb, p, j)) : 0.0f;
}
#endif

// One task: rows [i0, i0+mc) x columns [j0, j1) of C for batch items
// [b0, b1). With sc == 0 the items add into one C (the first overwrites).
// The operands are float32, or bf16 (bf16 set).
// epi (rt_matmul_bias; NULL: none): each block of the product, once finished, gets its bias
// and activation as it is written out.
typedef struct gemm_epilogue {
  const void *bias;  // [n]
  void *y, *pre;     // the product's items (stride m x n); pre: NULL without act
  int act;           // 0 none, 1 GELU (tanh)
} gemm_epilogue;

typedef struct gemm_args {
  float *c;
  const void *a, *b;
  long m, n, k, lda, ldb, sa, sb, sc;
  int ta, tb, bf16;  // (bf16: the bias, y and pre are bf16 too)
  const gemm_epilogue *epi;
} gemm_args;

// The task with bf16 operands: gemm_task's loops over the pair panels, or
// over widened float32 panels.
static void gemm_task_bf16(const gemm_args *g, long b0, long b1, long i0, long mc, long j0,
                           long j1) {
  for (long bi = b0; bi < b1; bi++) {
    const rt_bf16 *a = (const rt_bf16 *)g->a + bi * g->sa, *b = (const rt_bf16 *)g->b + bi * g->sb;
    float *c = g->c + bi * g->sc + i0 * g->n;
    for (long p0 = 0; p0 < g->k; p0 += GEMM_KC) {
      long kc = min_l(GEMM_KC, g->k - p0);
      int accumulate = p0 > 0 || (g->sc == 0 && bi > 0);
      const rt_bf16 *ap = g->ta ? a + p0 * g->lda + i0 : a + i0 * g->lda + p0;
#if GEMM_BF16_DOT
      long kp = (kc + 1) / 2;  // pairs; a panel of pairs takes half the bytes of a float panel
      uint32_t *pa = (uint32_t *)gemm_pack_a, *pb = (uint32_t *)gemm_pack_b;
      gemm_pack_a_pairs(pa, ap, g->lda, g->ta, mc, kc);
#else
      long kp = kc;
      float *pa = gemm_pack_a, *pb = gemm_pack_b;
      gemm_pack_a_wide(pa, ap, g->lda, g->ta, mc, kc);
#endif
      for (long jg = j0; jg < j1; jg += GEMM_NB * GEMM_NR) {
        long jend = min_l(j1, jg + GEMM_NB * GEMM_NR);
        for (long j = jg; j < jend; j += GEMM_NR) {
          const rt_bf16 *bj = g->tb ? b + j * g->ldb + p0 : b + p0 * g->ldb + j;
#if GEMM_BF16_DOT
          gemm_pack_b_pairs(pb + (j - jg) * kp, bj, g->ldb, g->tb, min_l(GEMM_NR, jend - j), kc);
#else
          gemm_pack_b_wide(pb + (j - jg) * kp, bj, g->ldb, g->tb, min_l(GEMM_NR, jend - j), kc);
#endif
        }
        for (long r = 0; r < mc; r += GEMM_MR)
          for (long j = jg; j < jend; j += GEMM_NR)
#if GEMM_BF16_DOT
            gemm_micro_dot(kp, pa + r * kp, pb + (j - jg) * kp, c + r * g->n + j, g->n,
                           accumulate, min_l(GEMM_MR, mc - r), min_l(GEMM_NR, jend - j));
#else
            gemm_micro(kp, pa + r * kp, pb + (j - jg) * kp, c + r * g->n + j, g->n, accumulate,
                       min_l(GEMM_MR, mc - r), min_l(GEMM_NR, jend - j));
#endif
      }
    }
  }
}

static void gemm_task(const gemm_args *g, long b0, long b1, long i0, long mc, long j0,
                      long j1) {
  if (g->bf16) {
    gemm_task_bf16(g, b0, b1, i0, mc, j0, j1);
    return;
  }
  float *pa = gemm_pack_a, *pb = gemm_pack_b;
  for (long bi = b0; bi < b1; bi++) {
    const float *a = (const float *)g->a + bi * g->sa, *b = (const float *)g->b + bi * g->sb;
    float *c = g->c + bi * g->sc + i0 * g->n;
    for (long p0 = 0; p0 < g->k; p0 += GEMM_KC) {
      long kc = min_l(GEMM_KC, g->k - p0);
      int accumulate = p0 > 0 || (g->sc == 0 && bi > 0);
      gemm_pack_a_block(pa, g->ta ? a + p0 * g->lda + i0 : a + i0 * g->lda + p0, g->lda,
                        g->ta, mc, kc);
      for (long jg = j0; jg < j1; jg += GEMM_NB * GEMM_NR) {  // a group of B panels
        long jend = min_l(j1, jg + GEMM_NB * GEMM_NR);
        for (long j = jg; j < jend; j += GEMM_NR) {
          const float *bj = g->tb ? b + j * g->ldb + p0 : b + p0 * g->ldb + j;
          gemm_pack_b_panel(pb + (j - jg) * kc, bj, g->ldb, g->tb, min_l(GEMM_NR, jend - j), kc);
        }
        for (long r = 0; r < mc; r += GEMM_MR)  // a row of micro-tiles
          for (long j = jg; j < jend; j += GEMM_NR)
            gemm_micro(kc, pa + r * kc, pb + (j - jg) * kc, c + r * g->n + j, g->n, accumulate,
                       min_l(GEMM_MR, mc - r), min_l(GEMM_NR, jend - j));
      }
    }
  }
}

// y = act(c + bias) over rows [i0, i0 + mc) and columns [j0, j1) of items [b0, b1), pre = the
// sum act reads; in place where c is y or pre (float32), else from the float32 scratch c.
static void gemm_epilogue_block(const gemm_args *g, long b0, long b1, long i0, long mc, long j0,
                                long j1) {
  const gemm_epilogue *e = g->epi;
  for (long bi = b0; bi < b1; bi++)
    for (long i = i0; i < i0 + mc; i++) {
      long at = bi * g->sc + i * g->n;
      const float *c = g->c + at;
      if (g->bf16) {
        const rt_bf16 *bias = e->bias;
        rt_bf16 *y = (rt_bf16 *)e->y + at, *pre = e->pre ? (rt_bf16 *)e->pre + at : NULL;
        for (long j = j0; j < j1; j++) {
          float v = c[j] + rt_bf16_to_f32(bias[j]);
          if (pre)
            pre[j] = rt_f32_to_bf16(v);
          y[j] = rt_f32_to_bf16(e->act ? gelu_f(v) : v);
        }
      } else {
        const float *bias = e->bias;
        float *y = (float *)e->y + at, *pre = e->pre ? (float *)e->pre + at : NULL;
#pragma omp simd
        for (long j = j0; j < j1; j++) {
          float v = c[j] + bias[j];
          if (pre)
            pre[j] = v;
          y[j] = e->act ? gelu_f(v) : v;
        }
      }
    }
}

static int max_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Nanoseconds per element to pack (a guess that only steers the split): a
// contiguous copy, and a transpose (strided reads).
#define PACK_NS_COPY 0.15
#define PACK_NS_TRANSPOSE 0.5

// C_i = op(A_i) @ op(B_i). Tasks: batch items (unless sc == 0 sums them)
// x row blocks x column blocks. Every task packs the A rows and the B
// columns it uses, so a split into more row blocks re-packs B and one into
// more column blocks re-packs A: of the splits with a multiple of the thread
// count of tasks (up to 4 per thread), the one that packs least is taken.
// The split changes the speed, never the result.
static void matmul_any(float *c, const void *a, const void *b, int bf16, long batch, long m,
                       long n, long k, int ta, int tb, long sa, long sb, long sc,
                       const gemm_epilogue *epi) {
  if (m <= 0 || n <= 0) return;
  if (batch <= 0 || k <= 0) {  // empty products are zero
    long nc = (sc == 0 || batch <= 0) ? 1 : batch;
    for (long i = 0; i < nc; i++) rt_fill(c + i * sc, m * n, 0.0f);
    if (epi) {
      gemm_args z = {c, a, b, m, n, k, 0, 0, sa, sb, m * n, ta, tb, bf16, epi};
      gemm_epilogue_block(&z, 0, batch <= 0 ? 0 : batch, 0, m, 0, n);
    }
    return;
  }
  gemm_args g = {c, a, b, m, n, k, ta ? m : k, tb ? k : n, sa, sb, sc, ta, tb, bf16, epi};
  long nb = sc == 0 ? 1 : batch;  // batch tasks
  long nth = max_threads(), rpanels = ceil_div(m, GEMM_MR), cpanels = ceil_div(n, GEMM_NR);
  double a_ns = (double)(nb * m * k) * (ta ? PACK_NS_COPY : PACK_NS_TRANSPOSE);
  double b_ns = (double)(nb * n * k) * (tb ? PACK_NS_TRANSPOSE : PACK_NS_COPY);
  long nrow = ceil_div(m, GEMM_MC), ncol = 1;
  double best = -1.0;
  for (long r = ceil_div(m, GEMM_MC); r <= rpanels && r <= 4 * nth; r++)
    for (long cn = 1; cn <= cpanels && nb * r * cn <= 4 * nth; cn++) {
      if ((nb * r * cn) % nth != 0 && nb * r * cn < 4 * nth) continue;
      double cost = (double)r * b_ns + (double)cn * a_ns;
      if (best < 0.0 || cost < best) best = cost, nrow = r, ncol = cn;
    }
  long mc = ceil_div(rpanels, nrow) * GEMM_MR;  // rows per block, MR-aligned
  long nc = ceil_div(cpanels, ncol) * GEMM_NR;  // columns per block
  nrow = ceil_div(m, mc), ncol = ceil_div(n, nc);
  long ntasks = nb * nrow * ncol;
#pragma omp parallel for schedule(dynamic, 1) if (ntasks > 1 && 2.0 * batch * m * n * k >= 4e6)
  for (long t = 0; t < ntasks; t++) {
    long bt = t / (nrow * ncol), rt = t / ncol % nrow, ct = t % ncol;
    long i0 = rt * mc, j0 = ct * nc;
    long rows = m - i0 < mc ? m - i0 : mc, j1 = j0 + nc < n ? j0 + nc : n;
    long b0 = sc == 0 ? 0 : bt, b1 = sc == 0 ? batch : bt + 1;
    gemm_task(&g, b0, b1, i0, rows, j0, j1);
    if (epi)
      gemm_epilogue_block(&g, b0, b1, i0, rows, j0, j1);
  }
}

static void matmul_f32(float *c, const float *a, const float *b, long batch, long m, long n,
                       long k, int ta, int tb, long sa, long sb, long sc) {
  matmul_any(c, a, b, 0, batch, m, n, k, ta, tb, sa, sb, sc, NULL);
}

// bf16 operands, float32 results
static void matmul_bf16(float *c, const rt_bf16 *a, const rt_bf16 *b, long batch, long m,
                        long n, long k, int ta, int tb, long sa, long sb, long sc) {
  matmul_any(c, a, b, 1, batch, m, n, k, ta, tb, sa, sb, sc, NULL);
}

// rt_matmul_bias's GEMM: float32 (the product in place in y, or in pre with act) or bf16
// operands (through the float32 scratch c), the epilogue on each finished block.
static void matmul_epilogue(float *c, const void *a, const void *b, int bf16, long batch, long m,
                            long n, long k, int ta, int tb, long sa, long sb,
                            const gemm_epilogue *epi) {
  matmul_any(c, a, b, bf16, batch, m, n, k, ta, tb, sa, sb, m * n, epi);
}

// ---------------------------------------------------------------------------
// convolution: im2col and its adjoint (the GEMMs are rt_matmul)



// ---------------------------------------------------------------------------
// neural-net ops



// A row's mean and 1/sqrt(biased variance + eps) (two passes); uncentered
// (RMSNorm): mean 0, so the variance is the mean square.
static void row_stats(const float *x, long c, float eps, bool centered, float *mean,
                      float *rstd) {
  float m = centered ? sum_lanes(x, c) / (float)c : 0.0f;
  float acc[LANES] = {0};
  long j = 0;
  for (; j + LANES <= c; j += LANES)
    for (int l = 0; l < LANES; l++) {
      float d = x[j + l] - m;
      acc[l] += d * d;
    }
  for (int l = 0; j + l < c; l++) {
    float d = x[j + l] - m;
    acc[l] += d * d;
  }
  float var = lanes_total(acc);
  *mean = m;
  *rstd = 1.0f / sqrtf(var / (float)c + eps);
}

// y = (x - mean) * rstd * w (+ b), row by row: layernorm, or RMSNorm when
// not centered (b is then NULL).
static void norm_fwd(float *y, const float *x, const float *w, const float *b, long n, long c,
                     float eps, bool centered) {
#pragma omp parallel for if (n * c >= PAR_MIN_MATH)
  for (long i = 0; i < n; i++) {
    const float *xr = x + i * c;
    float *yr = y + i * c;
    float mean, rstd;
    row_stats(xr, c, eps, centered, &mean, &rstd);
    if (b)
      for (long j = 0; j < c; j++) yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];
    else
      for (long j = 0; j < c; j++) yr[j] = (xr[j] - mean) * rstd * w[j];
  }
}



// Rows per pass of norm_bwd: their mean and rstd live on the stack.
#define LN_ROWS 256

// dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy*w;
// dw = sum_rows dy * norm, db = sum_rows dy. Not centered (RMSNorm): the
// mean(dnorm) term drops and db is NULL. In passes of LN_ROWS rows: first
// the rows' statistics and dx (threads split the rows), then dw and db
// (threads split the columns; each column adds the rows in order).
static void norm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                     const float *w, long n, long c, float eps, bool centered) {
  float mean[LN_ROWS], rstd[LN_ROWS];
  long nblocks = (c + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel if (n * c >= PAR_MIN_MATH)
  {
#pragma omp for
    for (long j = 0; j < c; j++) {
      dw[j] = 0.0f;
      if (db) db[j] = 0.0f;
    }
    for (long r0 = 0; r0 < n; r0 += LN_ROWS) {
      long r1 = r0 + LN_ROWS < n ? r0 + LN_ROWS : n;
#pragma omp for
      for (long i = r0; i < r1; i++) {
        const float *xr = x + i * c, *dyr = dy + i * c;
        float *dxr = dx + i * c;
        float mu, rs;
        row_stats(xr, c, eps, centered, &mu, &rs);
        mean[i - r0] = mu;
        rstd[i - r0] = rs;
        float a1[LANES] = {0}, a2[LANES] = {0};  // sums of dnorm, dnorm*norm
        long j = 0;
        for (; j + LANES <= c; j += LANES)
          for (int l = 0; l < LANES; l++) {
            float dn = dyr[j + l] * w[j + l];
            a1[l] += dn;
            a2[l] += dn * ((xr[j + l] - mu) * rs);
          }
        for (int l = 0; j + l < c; l++) {
          float dn = dyr[j + l] * w[j + l];
          a1[l] += dn;
          a2[l] += dn * ((xr[j + l] - mu) * rs);
        }
        float dm = centered ? lanes_total(a1) / (float)c : 0.0f;
        float dnm = lanes_total(a2) / (float)c;
        for (j = 0; j < c; j++) {
          float norm = (xr[j] - mu) * rs;
          dxr[j] = (dyr[j] * w[j] - dm - norm * dnm) * rs;
        }
      }  // implicit barrier: mean and rstd of the pass are ready
#pragma omp for
      for (long blk = 0; blk < nblocks; blk++) {
        long lo = blk * COL_BLOCK, hi = lo + COL_BLOCK < c ? lo + COL_BLOCK : c;
        for (long i = r0; i < r1; i++) {
          const float *xr = x + i * c, *dyr = dy + i * c;
          float mu = mean[i - r0], rs = rstd[i - r0];
          if (db)
            for (long j = lo; j < hi; j++) {
              dw[j] += dyr[j] * ((xr[j] - mu) * rs);
              db[j] += dyr[j];
            }
          else
            for (long j = lo; j < hi; j++) dw[j] += dyr[j] * ((xr[j] - mu) * rs);
        }
      }  // implicit barrier before the next pass overwrites mean and rstd
    }
  }
}




// y = softmax over each row of x (n, c), max subtracted for stability; causal: over row i's
// first i % c + 1 values, the rest 0
static void softmax_fwd_f32(float *y, const float *x, long n, long c, int causal) {
#pragma omp parallel for if (n * c >= PAR_MIN_MATH)
  for (long i = 0; i < n; i++) {
    const float *xr = x + i * c;
    float *yr = y + i * c;
    long seen = causal ? i % c + 1 : c;
    float maxv = max_lanes(xr, seen);
    for (long j = 0; j < seen; j++) yr[j] = exp_fast(xr[j] - maxv);
    float inv = 1.0f / sum_lanes(yr, seen);
    for (long j = 0; j < seen; j++) yr[j] *= inv;
    for (long j = seen; j < c; j++) yr[j] = 0.0f;
  }
}

// dx = y * (dy - sum(dy * y)) per row
static void softmax_bwd_f32(float *dx, const float *dy, const float *y, long n, long c) {
#pragma omp parallel for if (n * c >= PAR_MIN_MATH)
  for (long i = 0; i < n; i++) {
    const float *dyr = dy + i * c, *yr = y + i * c;
    float *dxr = dx + i * c;
    float d = dot_lanes(dyr, yr, c);
    for (long j = 0; j < c; j++) dxr[j] = yr[j] * (dyr[j] - d);
  }
}

// Attention, one head per task, in two forms with the same probabilities
// (within rounding):
//  - blocks: GEMM_MR query rows at a time as small GEMMs on the micro-kernel:
//    S = Q_blk K^T, a softmax over each row of S, O_blk = P V (and in the
//    backward dP = dO_blk V^T, dS = P (dP - rowsum(P dP)) scale, dQ_blk =
//    dS K, dK += dS^T Q_blk, dV += P^T dO_blk). K and V are packed once per
//    head as micro-kernel operands in a per-thread scratch of ATT_SCRATCH
//    floats; a row block's scores live in a GEMM_MR x t tile there.
//  - rows: one query row at a time with vector dot products, for heads too
//    big for the scratch.
#define ATT_SCRATCH (1L << 18)  // floats: 1 MiB per thread
static _Thread_local _Alignas(64) float att_scratch[ATT_SCRATCH];

// Where the block form keeps its buffers in the scratch (offsets in floats,
// each 64-byte aligned): the forward's (kp vp st pa qa) or the backward's
// (kp vtp kb st dst pa qa doa ta qb dob), and how many floats they take.
// The same layout decides whether a head fits and carves the scratch.
typedef struct att_layout {
  long kp, vp, vtp, kb, st, dst, pa, qa, doa, ta, qb, dob;
  long total;
} att_layout;

// The next carve-out of n floats at *at, rounded up to 16.
static long att_take(long *at, long n) {
  long o = *at;
  *at += (n + 15) / 16 * 16;
  return o;
}

static att_layout att_plan(long t, long hs, int backward) {
  long tp = ceil_div(t, GEMM_NR) * GEMM_NR, hp = ceil_div(hs, GEMM_NR) * GEMM_NR;
  att_layout L = {0};
  long at = 0;
  L.kp = att_take(&at, tp * hs);  // K^T panels
  if (backward) {
    L.vtp = att_take(&at, tp * hs);  // V^T panels
    L.kb = att_take(&at, hp * t);    // K column panels
  } else {
    L.vp = att_take(&at, hp * t);  // V column panels
  }
  L.st = att_take(&at, GEMM_MR * tp);  // scores, then P
  if (backward) L.dst = att_take(&at, GEMM_MR * tp);  // dP, then dS
  L.pa = att_take(&at, GEMM_MR * tp);  // P or dS packed as a row block
  L.qa = att_take(&at, GEMM_MR * hs);
  if (backward) {
    L.doa = att_take(&at, GEMM_MR * hs);
    L.ta = att_take(&at, ceil_div(t, GEMM_MR) * GEMM_MR * GEMM_MR);  // P^T or dS^T
    L.qb = att_take(&at, hp * GEMM_MR);
    L.dob = att_take(&at, hp * GEMM_MR);
  }
  L.total = at;
  return L;
}

// Packs the t rows (keys) of x (t x hs) as the B operand of Q x^T: panels of
// GEMM_NR rows of x, element (d, j) of panel jp at [jp*NR*hs + d*NR + j].
static void att_pack_rows_t(float *dst, const float *x, long t, long hs) {
  for (long j = 0; j < t; j += GEMM_NR)
    gemm_pack_b_panel(dst + j * hs, x + j * hs, hs, 1, min_l(GEMM_NR, t - j), hs);
}

// Packs x (t x hs) as the B operand of P x: panels of GEMM_NR columns,
// element (j, c) of panel cp at [cp*NR*t + j*NR + c].
static void att_pack_cols(float *dst, const float *x, long t, long hs) {
  for (long c = 0; c < hs; c += GEMM_NR)
    gemm_pack_b_panel(dst + c * t, x + c, hs, 0, min_l(GEMM_NR, hs - c), t);
}

// tile (GEMM_MR x tpad, row stride tpad) = a (packed GEMM_MR x kc) times the
// first ncols columns of the B panels bp (kc deep, packed by att_pack_rows_t)
static void att_tile(float *tile, long tpad, const float *a, const float *bp, long kc,
                     long ncols) {
  for (long j = 0; j < ncols; j += GEMM_NR)
    gemm_micro(kc, a, bp + j * kc, tile + j, tpad, 0, GEMM_MR, GEMM_NR);
}

// out rows (mr x hs, row stride hs) (+)= a (packed GEMM_MR x kc) times the
// column panels bp (packed by att_pack_cols for t rows; the first kc used)
static void att_rows_out(float *out, long mr, long hs, const float *a, const float *bp,
                         long kc, long t, int accumulate) {
  for (long c = 0; c < hs; c += GEMM_NR)
    gemm_micro(kc, a, bp + c * t, out + c, hs, accumulate, mr,
               min_l(GEMM_NR, hs - c));
}

// One head's optional operands: its row of the key-padding mask (tk keys)
// and its bias (tq queries x tk), each NULL when absent.
typedef struct att_extras {
  const int *keep;
  const float *bias;
} att_extras;

// The scores s[0, len) of query i's window, scaled, plus the bias. With a
// key-padding mask the masked keys get -inf, and a window that keeps none
// attends to all its keys alike (scores 0), as an additive mask of the lowest
// float does.
static void att_scale_row(float *s, long i, long tk, long len, float scale, att_extras x) {
  const float *b = x.bias ? x.bias + i * tk : NULL;
  long kept = 0;
  for (long j = 0; j < len; j++) s[j] = s[j] * scale + (b ? b[j] : 0.0f);
  if (!x.keep) return;
  for (long j = 0; j < len; j++) kept += x.keep[j] != 0;
  for (long j = 0; j < len; j++) s[j] = !kept ? 0.0f : x.keep[j] ? s[j] : -INFINITY;
}

// Query i's row of scale * s: its softmax over the keys it sees (j <= i
// when causal, and kept), zeros up to jn; returns the log-sum-exp of the
// scores (att_scale_row's).
static float att_softmax_row(float *s, long i, long tk, long jn, int causal, float scale,
                             att_extras x) {
  long len = causal ? i + 1 : tk;
  att_scale_row(s, i, tk, len, scale, x);
  float maxv = max_lanes(s, len);
  for (long j = 0; j < len; j++) s[j] = exp_fast(s[j] - maxv);
  float sum = sum_lanes(s, len), inv = 1.0f / sum;
  for (long j = 0; j < len; j++) s[j] *= inv;
  for (long j = len; j < jn; j++) s[j] = 0.0f;
  return maxv + logf(sum);
}

// The backward's form of the above: the probabilities exp(s_j - lse) from
// the forward's log-sum-exp.
static void att_prob_row(float *s, long i, long tk, long jn, int causal, float scale,
                         att_extras x, float lse) {
  long len = causal ? i + 1 : tk;
  att_scale_row(s, i, tk, len, scale, x);
  for (long j = 0; j < len; j++) s[j] = exp_fast(s[j] - lse);
  for (long j = len; j < jn; j++) s[j] = 0.0f;
}

// p[j] = exp(scale * q_i . k_j - max) for j < jn: the unnormalized softmax
// of one row of scores (the row form); returns their sum, and the
// log-sum-exp in *lse.
static float attention_row(float *p, float *lse, const float *qi, const float *kh, long i,
                           long tk, long jn, long hs, float scale, att_extras x) {
  for (long j = 0; j < jn; j++) p[j] = dot_lanes(qi, kh + j * hs, hs);
  att_scale_row(p, i, tk, jn, scale, x);
  float maxv = max_lanes(p, jn);
  for (long j = 0; j < jn; j++) p[j] = exp_fast(p[j] - maxv);
  float sum = sum_lanes(p, jn);
  *lse = maxv + logf(sum);
  return sum;
}

// One head, block form: oh = softmax(qh kh^T scale) vh, tq queries and tk
// keys; lh each query's log-sum-exp.
static void attention_fwd_blocks(float *oh, float *lh, const float *qh, const float *kh,
                                 const float *vh, att_extras x, long tq, long tk, long hs,
                                 int causal, float scale, const att_layout *L) {
  long tp = ceil_div(tk, GEMM_NR) * GEMM_NR;
  float *sc = att_scratch;
  float *kp = sc + L->kp, *vp = sc + L->vp, *st = sc + L->st, *pa = sc + L->pa, *qa = sc + L->qa;
  att_pack_rows_t(kp, kh, tk, hs);
  att_pack_cols(vp, vh, tk, hs);
  for (long i0 = 0; i0 < tq; i0 += GEMM_MR) {
    long mr = min_l(GEMM_MR, tq - i0), jn = causal ? i0 + mr : tk;
    gemm_pack_a_block(qa, qh + i0 * hs, hs, 0, mr, hs);
    att_tile(st, tp, qa, kp, hs, jn);  // S = Q_blk K^T
    for (long r = 0; r < mr; r++)
      lh[i0 + r] = att_softmax_row(st + r * tp, i0 + r, tk, jn, causal, scale, x);
    gemm_pack_a_block(pa, st, tp, 0, mr, jn);
    att_rows_out(oh + i0 * hs, mr, hs, pa, vp, jn, tk, 0);  // O_blk = P V
  }
}

// One head, row form.
static void attention_fwd_rows(float *oh, float *lh, const float *qh, const float *kh,
                               const float *vh, att_extras x, long tq, long tk, long hs,
                               int causal, float scale) {
  float p[tk];
  for (long i = 0; i < tq; i++) {
    float *restrict oi = oh + i * hs;
    long jn = causal ? i + 1 : tk;
    float inv = 1.0f / attention_row(p, &lh[i], qh + i * hs, kh, i, tk, jn, hs, scale, x);
    for (long d = 0; d < hs; d++) oi[d] = 0.0f;
    for (long j = 0; j < jn; j++) {
      const float *restrict vj = vh + j * hs;
      float pj = p[j] * inv;
      for (long d = 0; d < hs; d++) oi[d] += pj * vj[d];
    }
  }
}

static att_extras att_head(const int *keep, const float *bias, long h, long tq, long tk,
                           long heads, long bdiv, long bmod) {
  return (att_extras){keep ? keep + h / heads * tk : NULL,
                      bias ? bias + h / bdiv % bmod * tq * tk : NULL};
}

// out = softmax(q k^T / sqrt(hs) + bias) v per head, lse each query's
// log-sum-exp; threads share the heads
static void attention_fwd_f32(float *out, float *lse, const float *q, const float *k,
                              const float *v, const int *keep, const float *bias, long bh,
                              long tq, long tk, long hs, long heads, long bdiv, long bmod,
                              int causal) {
  if (bh <= 0 || tq <= 0 || tk <= 0 || hs <= 0) return;
  float scale = 1.0f / sqrtf((float)hs);
  att_layout L = att_plan(tk, hs, 0);
  int blocks = L.total <= ATT_SCRATCH;
#pragma omp parallel for schedule(dynamic, 1)
  for (long h = 0; h < bh; h++) {
    long oq = h * tq * hs, ok = h * tk * hs;
    att_extras x = att_head(keep, bias, h, tq, tk, heads, bdiv, bmod);
    if (blocks)
      attention_fwd_blocks(out + oq, lse + h * tq, q + oq, k + ok, v + ok, x, tq, tk, hs, causal,
                           scale, &L);
    else
      attention_fwd_rows(out + oq, lse + h * tq, q + oq, k + ok, v + ok, x, tq, tk, hs, causal,
                         scale);
  }
}

// The gradient of row i's scores (after the scale) into dsh (rows of tk) when
// there: g[0, jn), then zeros.
static void att_store_ds(float *dsh, long i, long tk, const float *g, long jn) {
  if (!dsh) return;
  memcpy(dsh + i * tk, g, (size_t)jn * sizeof *g);
  memset(dsh + i * tk + jn, 0, (size_t)(tk - jn) * sizeof *g);
}

// One head, block form, dqh and dsh overwritten; dkh and dvh zeroed by the
// caller. lh: the forward's log-sum-exp of each query.
static void attention_bwd_blocks(float *dqh, float *dkh, float *dvh, float *dsh,
                                 const float *doh, const float *qh, const float *kh,
                                 const float *vh, const float *lh, att_extras x, long tq,
                                 long tk, long hs, int causal, float scale, const att_layout *L) {
  long tp = ceil_div(tk, GEMM_NR) * GEMM_NR;
  float *sc = att_scratch;
  float *kp = sc + L->kp, *vtp = sc + L->vtp, *kb = sc + L->kb, *st = sc + L->st;
  float *dst = sc + L->dst, *pa = sc + L->pa, *qa = sc + L->qa, *doa = sc + L->doa;
  float *ta = sc + L->ta, *qb = sc + L->qb, *dob = sc + L->dob;
  att_pack_rows_t(kp, kh, tk, hs);
  att_pack_rows_t(vtp, vh, tk, hs);
  att_pack_cols(kb, kh, tk, hs);
  for (long i0 = 0; i0 < tq; i0 += GEMM_MR) {
    long mr = min_l(GEMM_MR, tq - i0), jn = causal ? i0 + mr : tk;
    gemm_pack_a_block(qa, qh + i0 * hs, hs, 0, mr, hs);
    gemm_pack_a_block(doa, doh + i0 * hs, hs, 0, mr, hs);
    att_pack_cols(qb, qh + i0 * hs, mr, hs);  // Q_blk, dO_blk as B operands (mr deep)
    att_pack_cols(dob, doh + i0 * hs, mr, hs);
    att_tile(st, tp, qa, kp, hs, jn);    // S = Q_blk K^T, then P
    for (long r = 0; r < mr; r++)
      att_prob_row(st + r * tp, i0 + r, tk, jn, causal, scale, x, lh[i0 + r]);
    att_tile(dst, tp, doa, vtp, hs, jn);  // dP = dO_blk V^T, then dS
    for (long r = 0; r < mr; r++) {
      float *pr = st + r * tp, *dr = dst + r * tp;
      float pdp = dot_lanes(pr, dr, jn);
      for (long j = 0; j < jn; j++) dr[j] = pr[j] * (dr[j] - pdp);
      att_store_ds(dsh, i0 + r, tk, dr, jn);
      for (long j = 0; j < jn; j++) dr[j] *= scale;
    }
    gemm_pack_a_block(pa, dst, tp, 0, mr, jn);
    att_rows_out(dqh + i0 * hs, mr, hs, pa, kb, jn, tk, 0);  // dQ_blk = dS K
    // dK[0, jn) += dS^T Q_blk and dV[0, jn) += P^T dO_blk, GEMM_MR keys at a time
    gemm_pack_a_block(ta, dst, tp, 1, jn, mr);
    for (long j = 0; j < jn; j += GEMM_MR)
      att_rows_out(dkh + j * hs, min_l(GEMM_MR, jn - j), hs, ta + j * mr, qb,
                   mr, mr, 1);
    gemm_pack_a_block(ta, st, tp, 1, jn, mr);
    for (long j = 0; j < jn; j += GEMM_MR)
      att_rows_out(dvh + j * hs, min_l(GEMM_MR, jn - j), hs, ta + j * mr, dob,
                   mr, mr, 1);
  }
}

// One head, row form, dqh, dkh, dvh zeroed by the caller, dsh overwritten;
// lh as in the block form.
static void attention_bwd_rows(float *dqh, float *dkh, float *dvh, float *dsh,
                               const float *doh, const float *qh, const float *kh,
                               const float *vh, const float *lh, att_extras x, long tq, long tk,
                               long hs, int causal, float scale) {
  float p[tk], dp[tk];
  for (long i = 0; i < tq; i++) {
    const float *restrict qi = qh + i * hs, *restrict doi = doh + i * hs;
    float *restrict dqi = dqh + i * hs;
    long jn = causal ? i + 1 : tk;
    for (long j = 0; j < jn; j++) p[j] = dot_lanes(qi, kh + j * hs, hs);
    att_prob_row(p, i, tk, jn, causal, scale, x, lh[i]);
    // dp_ij = dout_i . v_j; dv_j += p_ij dout_i
    for (long j = 0; j < jn; j++) {
      float *restrict dvj = dvh + j * hs;
      dp[j] = dot_lanes(doi, vh + j * hs, hs);
      for (long d = 0; d < hs; d++) dvj[d] += p[j] * doi[d];
    }
    float pdp = dot_lanes(p, dp, jn);
    // ds_ij = p_ij (dp_ij - sum_j p_ij dp_ij); dq_i, dk_j through the scores
    for (long j = 0; j < jn; j++) dp[j] = p[j] * (dp[j] - pdp);
    att_store_ds(dsh, i, tk, dp, jn);
    for (long j = 0; j < jn; j++) {
      const float *restrict kj = kh + j * hs;
      float *restrict dkj = dkh + j * hs;
      float ds = scale * dp[j];
      for (long d = 0; d < hs; d++) {
        dqi[d] += ds * kj[d];
        dkj[d] += ds * qi[d];
      }
    }
  }
}

// Backward of the above, its probabilities from the forward's lse. Each row
// of scores is at hand whole, so sum_j p_ij dp_ij is summed from them (the
// GPU's kernels, which walk the keys in tiles, take it as dout_i . out_i:
// the same sum in exact arithmetic; a key bias's gradient, 0 in exact
// arithmetic, then follows PyTorch's rounding more closely). dk and dv sum
// over the rows i of a head, so one thread owns each head.
static void attention_bwd_f32(float *dq, float *dk, float *dv, float *dscores,
                              const float *dout, const float *q, const float *k, const float *v,
                              const float *lse, const int *keep,
                              const float *bias, long bh, long tq, long tk, long hs, long heads,
                              long bdiv, long bmod, int causal) {
  if (bh <= 0 || tq <= 0 || tk <= 0 || hs <= 0) return;
  float scale = 1.0f / sqrtf((float)hs);
  att_layout L = att_plan(tk, hs, 1);
  int blocks = L.total <= ATT_SCRATCH;
#pragma omp parallel for schedule(dynamic, 1)
  for (long h = 0; h < bh; h++) {
    long oq = h * tq * hs, ok = h * tk * hs;
    memset(dq + oq, 0, (size_t)(tq * hs) * sizeof(float));
    memset(dk + ok, 0, (size_t)(tk * hs) * sizeof(float));
    memset(dv + ok, 0, (size_t)(tk * hs) * sizeof(float));
    att_extras x = att_head(keep, bias, h, tq, tk, heads, bdiv, bmod);
    float *dsh = dscores ? dscores + h * tq * tk : NULL;
    if (blocks)
      attention_bwd_blocks(dq + oq, dk + ok, dv + ok, dsh, dout + oq, q + oq, k + ok, v + ok,
                           lse + h * tq, x, tq, tk, hs, causal, scale, &L);
    else
      attention_bwd_rows(dq + oq, dk + ok, dv + ok, dsh, dout + oq, q + oq, k + ok, v + ok,
                         lse + h * tq, x, tq, tk, hs, causal, scale);
  }
}

// exp(row[j] - maxv), also stored at exps[j] when exps != NULL
static inline float exp_kept(const float *row, float *exps, long j, float maxv) {
  float e = exp_fast(row[j] - maxv);
  if (exps) exps[j] = e;
  return e;
}

// logsumexp of one row of v logits: max, then the exponentials summed in
// LANES float lanes of at most 2^16 terms each, the lanes in double. With
// exps != NULL the exponentials exp(row - max) are also stored there.
static double logsumexp_row(const float *row, float *exps, long v, float *maxp) {
  float maxv = max_lanes(row, v);
  double total[LANES] = {0};
  for (long j0 = 0; j0 < v; j0 += 65536L * LANES) {
    long j1 = j0 + 65536L * LANES < v ? j0 + 65536L * LANES : v;
    float acc[LANES] = {0};
    long j = j0;
    for (; j + LANES <= j1; j += LANES)
      for (int l = 0; l < LANES; l++) acc[l] += exp_kept(row, exps, j + l, maxv);
    for (int l = 0; j + l < j1; l++) acc[l] += exp_kept(row, exps, j + l, maxv);
    for (int l = 0; l < LANES; l++) total[l] += acc[l];
  }
  double sum = 0.0;
  for (int l = 0; l < LANES; l++) sum += total[l];
  *maxp = maxv;
  return (double)maxv + log(sum);
}

// Row i's gradient (softmax(row) - onehot(target)) * g over drow (which may be row itself),
// zero on the padding; its logsumexp, for the loss.
static double crossentropy_row_grad(float *drow, const float *row, long target, long v,
                                    long vocab, float g) {
  float maxv;
  double lse = logsumexp_row(row, drow, vocab, &maxv);  // drow = exp(row - max)
  // softmax_j = exp(row_j - lse) = exp(row_j - max) * e^(max - lse)
  float scale = g * (float)exp((double)maxv - lse);
  for (long j = 0; j < vocab; j++) drow[j] *= scale;
  for (long j = vocab; j < v; j++) drow[j] = 0.0f;
  drow[target] -= g;
  return lse;
}

// loss[0] = mean over counted rows of logsumexp(row) - row[target], rows summed in SUM_CHUNKS
// fixed chunks (a row is v values, the first vocab of them scores, the rest padding), and with
// grad dlogits as crossentropy_bwd_f32's for dloss, from the same sums of each row; dlogits may
// be logits (the target's logit read first).
static void crossentropy_fused_f32(float *loss, float *dlogits, const float *logits,
                                   const int *targets, long n, long v, long vocab, long ignore,
                                   float dloss, int grad) {
  long count = rt_counted_rows(targets, n, ignore);
  float g = count ? dloss / (float)count : 0.0f;
  double part[SUM_CHUNKS];
#pragma omp parallel for schedule(dynamic) if (n * v >= PAR_MIN_MATH)
  for (int ch = 0; ch < SUM_CHUNKS; ch++) {
    long lo = n * ch / SUM_CHUNKS, hi = n * (ch + 1) / SUM_CHUNKS;
    double s = 0.0;
    for (long i = lo; i < hi; i++) {
      const float *row = logits + i * v;
      float *drow = dlogits + i * v;
      if (targets[i] == ignore) {
        if (grad) memset(drow, 0, (size_t)v * sizeof *drow);
        continue;
      }
      float maxv, target = row[targets[i]];
      double lse = grad ? crossentropy_row_grad(drow, row, targets[i], v, vocab, g)
                        : logsumexp_row(row, NULL, vocab, &maxv);
      s += lse - (double)target;
    }
    part[ch] = s;
  }
  double s = 0.0;
  for (int ch = 0; ch < SUM_CHUNKS; ch++) s += part[ch];
  loss[0] = count ? (float)(s / (double)count) : 0.0f;
}

// the loss alone
static void crossentropy_fwd_f32(float *loss, const float *logits, const int *targets,
                                 long n, long v, long vocab, long ignore) {
  crossentropy_fused_f32(loss, NULL, logits, targets, n, v, vocab, ignore, 0.0f, 0);
}

// dlogits = (softmax(logits) - onehot(target)) * dloss[0] / count, row by
// row; zero on the padding (columns vocab .. v-1)
static void crossentropy_bwd_f32(float *dlogits, const float *dloss,
                                 const float *logits, const int *targets, long n,
                                 long v, long vocab, long ignore) {
  long count = rt_counted_rows(targets, n, ignore);
  float g = count ? dloss[0] / (float)count : 0.0f;
#pragma omp parallel for schedule(dynamic, 1) if (n * v >= PAR_MIN_MATH)
  for (long i = 0; i < n; i++) {
    const float *row = logits + i * v;
    float *drow = dlogits + i * v;
    if (targets[i] == ignore) {
      memset(drow, 0, (size_t)v * sizeof *drow);
      continue;
    }
    crossentropy_row_grad(drow, row, targets[i], v, vocab, g);
  }
}

// ---------------------------------------------------------------------------
// optimizers

// The optimizers run over chunks of OPT_CHUNK elements (16 KiB of each float array), so that a
// chunk's updated weights are still in cache when the bf16 copy reads them.
#define OPT_CHUNK ADAMW_GRAD_RUN  // (a bf16 gradient is widened a chunk at a time: adamw_cpu.h)

// c[i] = p[i] rounded to bf16, for i in [i0, i1): a loop the compiler vectorizes.
static void round_into(rt_bf16 *c, const float *p, long i0, long i1) {
  for (long i = i0; i < i1; i++) c[i] = rt_f32_to_bf16(p[i]);
}

// AdamW over p (blocks of 16, as adamw_blocks runs them) with a float32 or (g16) bf16
// gradient; with c, p rounded into it chunk by chunk.
static void adamw(float *p, const void *g, bool g16, float *m, float *v, long n, float lr,
                  float beta1, float beta2, float eps, float wd, int t, float gscale,
                  long decay_n, rt_bf16 *c) {
  AdamwStep s = adamw_step(lr, beta1, beta2, eps, wd, t, gscale, decay_n);
  long nchunks = (n + OPT_CHUNK - 1) / OPT_CHUNK;
#pragma omp parallel for if (n >= PAR_MIN)
  for (long k = 0; k < nchunks; k++) {
    long i0 = k * OPT_CHUNK, i1 = i0 + OPT_CHUNK < n ? i0 + OPT_CHUNK : n;
    adamw_run(p, g, g16, m, v, i0, i1, &s);
    if (c)
      round_into(c, p, i0, i1);
  }
}

// SGD (sgd_run) with a float32 or (g16) bf16 gradient; with c, p rounded into it chunk by
// chunk (bf16)
static void sgd(float *p, const void *g, bool g16, long n, float lr, float wd, float gscale,
                long decay_n, rt_bf16 *c) {
  long nchunks = (n + OPT_CHUNK - 1) / OPT_CHUNK;
#pragma omp parallel for if (n >= PAR_MIN)
  for (long k = 0; k < nchunks; k++) {
    long i0 = k * OPT_CHUNK, i1 = i0 + OPT_CHUNK < n ? i0 + OPT_CHUNK : n;
    sgd_run(p, g, g16, i0, i1, lr, wd, gscale, decay_n);
    if (c)
      round_into(c, p, i0, i1);
  }
}

// ---------------------------------------------------------------------------
// checks

// Blocks of floats in parallel, each tested on its bits first (scan_cpu.h).
static void find_nonfinite_f32(int *at, const float *x, long n) {
  long nblocks = (n + RT_FINITE_BLOCK - 1) / RT_FINITE_BLOCK, first = n;
#pragma omp parallel for reduction(min : first) if (n >= PAR_MIN)
  for (long b = 0; b < nblocks; b++) {
    long i = rt_block_nonfinite(x, n, b);
    first = i < first ? i : first;
  }
  *at = first < n ? (int)first : -1;
}

// The chunks of scan_cpu.h in parallel, combined in order, over float32 or (bf16) bf16 x.
static void norm2(float *out, const void *x, bool bf16, long n) {
  double part[RT_NORM2_CHUNKS];
#pragma omp parallel for if (n >= PAR_MIN)
  for (int ch = 0; ch < RT_NORM2_CHUNKS; ch++)
    part[ch] = bf16 ? rt_norm2sq_chunk_bf16(x, n, ch) : rt_norm2sq_chunk(x, n, ch);
  double s = 0.0;
  for (int ch = 0; ch < RT_NORM2_CHUNKS; ch++) s += part[ch];
  out[0] = (float)sqrt(s);
}

// ---- kernels for ONNX ops ----------------------------------------------------

void rt_copy_i32(int *out, const int *x, long n) { memcpy(out, x, (size_t)n * sizeof *out); }


static float unary_one(int op, float x, float p) {
  switch (op) {
  case RT_EXP: return expf(x);
  case RT_LOG: return logf(x);
  case RT_SQRT: return sqrtf(x);
  case RT_TANH: return tanhf(x);
  case RT_ERF: return erff(x);
  case RT_POW: return powf(x, p);
  case RT_SIN: return sinf(x);
  case RT_COS: return cosf(x);
  case RT_ABS: return fabsf(x);
  case RT_SIGN: return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x;
  default: return 1.0f / (1.0f + expf(-x)); // RT_SIGMOID: e^-x overflows to inf, giving 0
  }
}






// The mask offset of row r of a (rows, shape[rank-1]) view of `shape`.
static long mask_row_offset(long r, int rank, const long *shape, const long *mstride) {
  long moff = 0, rest = r;
  for (int d = rank - 2; d >= 0; d--) {
    moff += (rest % shape[d]) * mstride[d];
    rest /= shape[d];
  }
  return moff;
}

void rt_strided_copy_i32(int *out, const int *x, int rank, const long *shape,
                         const long *xstride) {
  if (rank == 0) {
    out[0] = x[0];
    return;
  }
  long inner = shape[rank - 1], rows = numel_of(rank - 1, shape), xs = xstride[rank - 1];
#pragma omp parallel for if (rows * inner >= PAR_MIN)
  for (long r = 0; r < rows; r++) {
    long xoff = mask_row_offset(r, rank, shape, xstride);
    for (long j = 0; j < inner; j++) out[r * inner + j] = x[xoff + j * xs];
  }
}

void rt_masked_fill_i32(int *out, const int *x, const int *mask, int rank, const long *shape,
                        const long *mstride, int value) {
  if (rank == 0) {
    out[0] = mask[0] ? value : x[0];
    return;
  }
  long inner = shape[rank - 1], rows = numel_of(rank - 1, shape);
  long ms = mstride[rank - 1];
#pragma omp parallel for if (rows * inner >= PAR_MIN)
  for (long r = 0; r < rows; r++) {
    long moff = mask_row_offset(r, rank, shape, mstride);
    for (long j = 0; j < inner; j++) out[r * inner + j] = mask[moff + j * ms] ? value : x[r * inner + j];
  }
}

void rt_equal_i32(int *out, const int *x, long n, int value) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) out[i] = x[i] == value;
}

// int32 arithmetic that wraps around (in unsigned, where overflow is defined)
static int i32_op(int op, int a, int b) {
  unsigned ua = (unsigned)a, ub = (unsigned)b;
  switch (op) {
    case RT_ADD: return (int)(ua + ub);
    case RT_SUB: return (int)(ua - ub);
    case RT_MUL: return (int)(ua * ub);
    case RT_MIN: return a < b ? a : b;
    default: return a > b ? a : b;  // RT_MAX
  }
}

// a op b as 1 or 0 (rt_compare's ops); a double holds every int32 and float exactly
static int compare_one(int op, double a, double b) {
  switch (op) {
    case RT_EQ: return a == b;
    case RT_LT: return a < b;
    case RT_LE: return a <= b;
    case RT_GT: return a > b;
    default: return a >= b;  // RT_GE
  }
}

// rt_compare's loop over rows of a broadcast, elements read with LOAD (the typed kernels'
// rt_compare, kernels_cpu_t.h, and rt_compare_i32)
#define COMPARE_ROWS(LOAD)                                                                     \
  do {                                                                                         \
    long n = numel_of(rank, shape);                                                            \
    if (n <= 0 || op < RT_EQ || op > RT_GE) return;                                            \
    long sh[RT_MAXRANK], as[RT_MAXRANK], bs[RT_MAXRANK];                                       \
    int r = coalesce(rank, shape, astride, bstride, sh, as, bs);                               \
    long len = sh[r - 1];                                                                      \
    for (long row = 0; row < n / len; row++) {                                                 \
      long ao = row_offset(row, r - 1, sh, as), bo = row_offset(row, r - 1, sh, bs);           \
      for (long i = 0; i < len; i++)                                                           \
        out[row * len + i] =                                                                   \
            compare_one(op, (double)LOAD(a[ao + i * as[r - 1]]), (double)LOAD(b[bo + i * bs[r - 1]])); \
    }                                                                                          \
  } while (0)
#define AS_INT(x) (x)

void rt_compare_i32(int op, int *out, const int *a, const int *b, int rank, const long *shape,
                    const long *astride, const long *bstride) {
  COMPARE_ROWS(AS_INT);
}

void rt_binary_i32(int op, int *out, const int *a, const int *b, int rank, const long *shape,
                   const long *astride, const long *bstride) {
  long n = numel_of(rank, shape);
  if (n <= 0 || op == RT_DIV) return;
  long sh[RT_MAXRANK], as[RT_MAXRANK], bs[RT_MAXRANK];
  int r = coalesce(rank, shape, astride, bstride, sh, as, bs);
  long len = sh[r - 1], rows = n / len;
#pragma omp parallel for if (n >= PAR_MIN)
  for (long row = 0; row < rows; row++) {
    const int *ar = a + row_offset(row, r - 1, sh, as), *br = b + row_offset(row, r - 1, sh, bs);
    for (long i = 0; i < len; i++)
      out[row * len + i] = i32_op(op, ar[i * as[r - 1]], br[i * bs[r - 1]]);
  }
}

void rt_scale_i32(int *out, const int *x, long n, int s, int b) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) out[i] = i32_op(RT_ADD, i32_op(RT_MUL, s, x[i]), b);
}

void rt_cumsum_i32(int *out, const int *x, long outer, long len, long inner, int exclusive,
                   int reverse) {
#pragma omp parallel for if (outer * len * inner >= PAR_MIN)
  for (long c = 0; c < outer * inner; c++) {
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


// splitmix64's finalizer: a bijective mix of 64 bits
static unsigned long long mix64(unsigned long long z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}


// not in eval mode: a validation or sampling forward leaves training's masks as they were;
// once a step: its micro-batches share the count (rt_dist.row tells them apart)
void rt_tick(int *step) {
  if (!rt_eval_mode && rt_dist.micro == 0) step[0] += 1;
}



// Rows that count: a target in [0, c) that is not `ignore`.
static int nll_counts(int t, long c, long ignore) { return t != ignore && t >= 0 && t < c; }

static long nll_rows(const int *targets, long n, long c, long ignore) {
  long count = 0;
  for (long i = 0; i < n; i++) count += nll_counts(targets[i], c, ignore);
  return count;
}



// rt_slice_axis on elements of `size` bytes
static void slice_rows(char *out, const char *x, size_t size, long outer, long xdim, long inner,
                       long start, long step, long len) {
#pragma omp parallel for if (outer * len * inner >= PAR_MIN)
  for (long o = 0; o < outer; o++)
    for (long i = 0; i < len; i++)
      memcpy(out + (size_t)((o * len + i) * inner) * size,
             x + (size_t)((o * xdim + start + i * step) * inner) * size, (size_t)inner * size);
}


void rt_slice_axis_i32(int *out, const int *x, long outer, long xdim, long inner,
                       long start, long step, long len) {
  slice_rows((char *)out, (const char *)x, sizeof *out, outer, xdim, inner, start, step, len);
}

// ---------------------------------------------------------------------------
// the typed kernels, once per variant (float32, bf16, ...): runtime/kernels_cpu_t.h

// ---------------------------------------------------------------------------
// scratch for the bf16 variants' float32 copies: a stack in one buffer per
// thread, emptied when the last piece is given back. A request that does not
// fit is malloc'd and remembered; the next time the stack is empty, the
// buffer grows to the most it was asked to hold, so from the second step on
// every kernel's pieces come from it (no page faults, no system calls).

#define SCRATCH_ALIGN 64  // bytes: each piece starts on a cache line

static _Thread_local struct {
  char *base;
  size_t cap, top, want;  // bytes: the buffer's, in use, the most asked for at once
  long live;              // pieces not given back (from the buffer or malloc)
} scratch;

static void *scratch_fail(long n) {
  fprintf(stderr, "train: error: out of memory for a float32 copy of %ld elements\n", n);
  exit(1);
}

float *rt_cpu_alloc(long n) {
  size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + SCRATCH_ALIGN - 1) /
                 SCRATCH_ALIGN * SCRATCH_ALIGN;
  if (scratch.live == 0 && scratch.want > scratch.cap) {  // grow while empty
    free(scratch.base);
    scratch.base = aligned_alloc(SCRATCH_ALIGN, scratch.want);
    scratch.cap = scratch.base ? scratch.want : 0;
  }
  scratch.live++;
  if (scratch.top + bytes > scratch.want) scratch.want = scratch.top + bytes;
  if (scratch.top + bytes <= scratch.cap) {
    float *p = (float *)(scratch.base + scratch.top);
    scratch.top += bytes;
    return p;
  }
  scratch.top += bytes;  // counted as if in the buffer, so that want covers it next time
  float *p = malloc(bytes);
  return p ? p : scratch_fail(n);
}

void rt_cpu_free(float *p) {
  if (!p) return;
  char *c = (char *)p;
  if (!(scratch.base && c >= scratch.base && c < scratch.base + scratch.cap)) free(p);
  if (--scratch.live == 0) scratch.top = 0;
}

// ---------------------------------------------------------------------------
// copies between device and host memory started with a slot (kernels.def): this build's device
// memory is host memory, and each is made when its copy_wait comes, as late as the program
// allows the GPU's copy stream to make it. A read of what it writes before the wait sees the
// old bytes, and a write of what it reads before the wait is copied: either shows in the numbers.

static rt_copy_slots copy_slots;

static void copy_start(int slot, void *dst, const void *src, size_t bytes) {
  if (slot < 0) {
    memcpy(dst, src, bytes);
    return;
  }
  rt_copy_slot *c = rt_copy_slot_start(&copy_slots, slot);
  c->dst = dst, c->src = src, c->bytes = bytes;
}

void rt_copy_wait(int slot, int host) {
  (void)host;  // (the host is the device)
  rt_copy_slot *c = rt_copy_slot_wait(&copy_slots, slot);
  memcpy(c->dst, c->src, c->bytes);
}

int rt_copies_pending(void) { return rt_copy_slots_pending(&copy_slots); }

#define RT_TEMPLATE "kernels_cpu_t.h"
#include "cpu_variants.h"
