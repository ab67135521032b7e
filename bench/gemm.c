// bench/gemm.c: mtc's CPU SGEMM (rt_matmul) and its bf16 GEMM
// (rt_matmul_bf16: bf16 operands and result, float32 accumulators) on the
// GEMMs of a GPT-2 124M training step, against this machine's fp32 FMA peak.
//
//   cc -O3 -march=native -fopenmp -std=c11 -Iruntime bench/gemm.c runtime/kernels_cpu.c
//      runtime/dist.c runtime/comm_single.c -lm -o /tmp/gemm && /tmp/gemm [T] [reps]
//   (one command line)
//
// For batch 4 and sequence length T (default 256) it times every distinct
// GEMM shape of the forward and backward pass (best of `reps`, default 10),
// prints GFLOP/s per shape in float32 and in bf16 (and which bf16 path the
// build took: rt_cpu_gemm_bf16_kind), the GEMM time of one step (each shape times the
// number of times a step runs it) and the peaks: every thread running
// independent vector FMAs (and, with AVX512-BF16, bf16 dot products) from
// registers, no memory traffic.
#define _DEFAULT_SOURCE  // MAP_ANONYMOUS
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels.h"

// The widest vector the target has registers for: 16 floats with AVX-512,
// else 8 (AVX2; split in two without AVX). 16 zmm or 12 ymm chains: enough
// to cover the FMA latency on both ports, few enough to stay in registers.
#if defined(__AVX512F__)
typedef float vec __attribute__((vector_size(64)));
#define CHAINS(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11) F(12) F(13) F(14) F(15)
#define NCHAINS 16
#else
typedef float vec __attribute__((vector_size(32)));
#define CHAINS(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11)
#define NCHAINS 12
#endif

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// GFLOP/s of NCHAINS independent chains of vector FMAs per thread (the
// chains named one by one: in an array the compiler keeps them in memory).
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("fp-contract=fast")))
#endif
static double fma_peak(void) {
  const long iters = 200000000;
  double flops = 0.0, t = now();
#pragma omp parallel reduction(+ : flops)
  {
    volatile float seed[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    vec x = (vec){0} + 0.999999f, y = (vec){0} + 1e-9f;
#define INIT(i) vec a##i = x * seed[i];
#define STEP(i) a##i = a##i * x + y;
#define SUM(i) s += a##i;
    CHAINS(INIT)
    for (long it = 0; it < iters; it++) {
      CHAINS(STEP)
    }
    vec s = (vec){0};
    CHAINS(SUM)
    seed[0] = s[0];
    flops = (double)iters * NCHAINS * (sizeof(vec) / sizeof(float)) * 2;
  }
  return flops / (now() - t) * 1e-9;
}

// GFLOP/s of NCHAINS independent chains of bf16 dot products (vdpbf16ps:
// 2 products per float32 lane) per thread; 0 on a target without them.
static double bf16_peak(void) {
#if defined(__AVX512BF16__)
  const long iters = 100000000;
  double flops = 0.0, t = now();
#pragma omp parallel reduction(+ : flops)
  {
    volatile float seed = 1.0f;
    __m512bh x = (__m512bh)_mm512_set1_epi16((short)0x3f80), y = x;  // bf16 1.0
#define INIT16(i) __m512 d##i = _mm512_set1_ps(seed * (float)(i));
#define STEP16(i) d##i = _mm512_dpbf16_ps(d##i, x, y);
#define KEEP16(i) __asm__ volatile("" : : "v"(d##i));  // the sums are used
    CHAINS(INIT16)
    for (long it = 0; it < iters; it++) {
      CHAINS(STEP16)
      __asm__ volatile("" : "+v"(x));  // a new operand every round: nothing to hoist
    }
    CHAINS(KEEP16)
    flops = (double)iters * NCHAINS * 16 * 4;
  }
  return flops / (now() - t) * 1e-9;
#else
  return 0.0;
#endif
}

static float *buffer(long n) {  // anonymous pages, as the training program's arena
  float *p = mmap(NULL, (size_t)n * sizeof(float), PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  for (long i = 0; i < n; i++) p[i] = (float)(i % 7) * 0.1f - 0.3f;
  return p;
}

static rt_bf16 *buffer_bf16(long n) {  // the same values in bf16, on their own pages
  rt_bf16 *p = (rt_bf16 *)buffer((n + 1) / 2);
  for (long i = 0; i < n; i++) p[i] = rt_f32_to_bf16((float)(i % 7) * 0.1f - 0.3f);
  return p;
}

// The best of reps runs of one GEMM, in seconds; bf16 operands and result when bf16.
static double best_time(int bf16, void *c, const void *a, const void *b, long m, long n, long k,
                        int ta, int tb, long reps) {
  double best = 1e30;
  for (long r = 0; r < reps; r++) {
    double t = now();
    if (bf16)
      rt_matmul_bf16(c, a, b, 1, m, n, k, ta, tb, 0, 0, 0);
    else
      rt_matmul(c, a, b, 1, m, n, k, ta, tb, 0, 0, 0);
    t = now() - t;
    if (t < best) best = t;
  }
  return best;
}

int main(int argc, char **argv) {
  long T = argc > 1 ? atol(argv[1]) : 256, reps = argc > 2 ? atol(argv[2]) : 10;
  const long L = 12, C = 768, V = 50257, BT = 4 * T;
  struct {
    const char *name;
    long m, n, k;
    int ta, tb;
    long per_step;
  } g[] = {
      {"fwd qkv", BT, 3 * C, C, 0, 0, L},        {"fwd attn proj", BT, C, C, 0, 0, L},
      {"fwd fc", BT, 4 * C, C, 0, 0, L},         {"fwd fc proj", BT, C, 4 * C, 0, 0, L},
      {"fwd lm head", BT, V, C, 0, 1, 1},        {"bwd lm head dx", BT, C, V, 0, 0, 1},
      {"bwd lm head dw", V, C, BT, 1, 0, 1},     {"bwd qkv dx", BT, C, 3 * C, 0, 1, L},
      {"bwd qkv dw", C, 3 * C, BT, 1, 0, L},     {"bwd attn proj dx", BT, C, C, 0, 1, L},
      {"bwd attn proj dw", C, C, BT, 1, 0, L},   {"bwd fc dx", BT, C, 4 * C, 0, 1, L},
      {"bwd fc dw", C, 4 * C, BT, 1, 0, L},      {"bwd fc proj dx", BT, 4 * C, C, 0, 1, L},
      {"bwd fc proj dw", 4 * C, C, BT, 1, 0, L},
  };
  long most = BT * V > V * C ? BT * V : V * C;
  float *a = buffer(most), *b = buffer(most), *c = buffer(most);
  rt_bf16 *ah = buffer_bf16(most), *bh = buffer_bf16(most), *ch = buffer_bf16(most);
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  printf("GPT-2 124M GEMMs, B=4 T=%ld, %d threads, best of %ld; bf16: %s\n\n", T, threads, reps,
         rt_cpu_gemm_bf16_kind());
  printf("| GEMM | m | n | k | fp32 ms | fp32 GFLOP/s | bf16 ms | bf16 GFLOP/s |\n"
         "|---|---|---|---|---|---|---|---|\n");
  double step = 0.0, step16 = 0.0, step_flops = 0.0;
  for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
    double t32 = best_time(0, c, a, b, g[i].m, g[i].n, g[i].k, g[i].ta, g[i].tb, reps);
    double t16 = best_time(1, ch, ah, bh, g[i].m, g[i].n, g[i].k, g[i].ta, g[i].tb, reps);
    double flops = 2.0 * (double)g[i].m * (double)g[i].n * (double)g[i].k;
    printf("| %s | %ld | %ld | %ld | %.2f | %.0f | %.2f | %.0f |\n", g[i].name, g[i].m, g[i].n,
           g[i].k, t32 * 1e3, flops / t32 * 1e-9, t16 * 1e3, flops / t16 * 1e-9);
    step += t32 * (double)g[i].per_step;
    step16 += t16 * (double)g[i].per_step;
    step_flops += flops * (double)g[i].per_step;
  }
  double peak = fma_peak(), peak16 = bf16_peak();
  printf("\nGEMMs of one step: fp32 %.0f ms, %.0f GFLOP/s; bf16 %.0f ms, %.0f GFLOP/s; "
         "fp32 FMA peak %.0f GFLOP/s (fp32 at %.0f%% of it)\n",
         step * 1e3, step_flops / step * 1e-9, step16 * 1e3, step_flops / step16 * 1e-9, peak,
         100.0 * step_flops / step * 1e-9 / peak);
  if (peak16 > 0)
    printf("bf16 dot-product peak %.0f GFLOP/s (bf16 at %.0f%% of it): a step's GEMMs take at "
           "least %.0f ms in bf16\n", peak16, 100.0 * step_flops / step16 * 1e-9 / peak16,
           step_flops / peak16 * 1e-6);
  return 0;
}
