// Deterministic random numbers for the mtc runtime and compiler (prefix
// rt_rng_). Header-only and self-contained: the training main uses it for
// synthetic inputs and the compiler for initial weights, so both draw the
// same streams from the same seed on every platform.
//
// The generator is splitmix64: a 64-bit counter advanced by a fixed odd
// constant and passed through a bijective mixer. Every seed (0 included)
// gives a full-period stream.
#ifndef MTC_RT_RNG_H
#define MTC_RT_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct rt_rng {
  uint64_t state;
} rt_rng;

static inline void rt_rng_seed(rt_rng *r, uint64_t seed) { r->state = seed; }

// The stream n draws of rt_rng_u64 further on (the state is a counter: any
// position is one multiply away, so parts of a stream can be drawn in parallel).
static inline void rt_rng_skip(rt_rng *r, uint64_t n) { r->state += n * 0x9E3779B97F4A7C15ull; }

// next 64 random bits
static inline uint64_t rt_rng_u64(rt_rng *r) {
  uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// next 32 random bits (the high half, the best mixed)
static inline uint32_t rt_rng_u32(rt_rng *r) {
  return (uint32_t)(rt_rng_u64(r) >> 32);
}

// integer uniform in [0, n) for 0 < n <= 2^32 (multiply-shift, no division)
static inline uint32_t rt_rng_below(rt_rng *r, uint64_t n) {
  return (uint32_t)(((uint64_t)rt_rng_u32(r) * n) >> 32);
}

// float uniform in [0, 1): 24 random bits, so every value is exact
static inline float rt_rng_uniform(rt_rng *r) {
  return (float)(rt_rng_u32(r) >> 8) * (1.0f / 16777216.0f);
}

// u1 in (0, 1] so its log is finite, u2 in [0, 1): the pair Box-Muller maps
static inline void rt_rng_box_muller(rt_rng *r, double *radius, double *angle) {
  double u1 = ((double)(rt_rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  double u2 = (double)(rt_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
  *radius = sqrt(-2.0 * log(u1));
  *angle = 6.283185307179586 * u2;
}

// float from normal(0, 1) by Box-Muller; one draw per call (the state stays a
// single uint64), computed in double and rounded once.
static inline float rt_rng_normal(rt_rng *r) {
  double radius, angle;
  rt_rng_box_muller(r, &radius, &angle);
  return (float)(radius * cos(angle));
}

// two independent floats from normal(0, 1), both outputs of one Box-Muller
// pair (two draws of the stream): half the work per value of rt_rng_normal.
static inline void rt_rng_normal2(rt_rng *r, float *a, float *b) {
  double radius, angle;
  rt_rng_box_muller(r, &radius, &angle);
  *a = (float)(radius * cos(angle));
  *b = (float)(radius * sin(angle));
}

// A padding mask of n values in rows of `row` (a tokenizer's attention_mask):
// each row 1 up to a length uniform in [1, row], then 0.
static inline void rt_rng_padding_mask(rt_rng *r, int32_t *out, long n, long row) {
  for (long j = 0; row > 0 && j < n; j += row) {
    long len = 1 + (long)rt_rng_below(r, (uint64_t)row);
    for (long c = 0; c < row && j + c < n; c++) out[j + c] = c < len;
  }
}

// A parameter's initial normal(0, std) values, out[i] for i in [0, n): a
// stream of its own (seed and the parameter's index in the model's table),
// elements i and i + 1 (i even) one Box-Muller pair of draws i and i + 1, so
// that chunks of even length drawn apart (threads, ranks) give the values of
// one pass. mtc compile (weights.bin, the interpreter) and the programs that
// draw their own weights share it: the same values everywhere.
static inline void rt_rng_init_normal(float *out, long n, float std, uint64_t seed, int index) {
  const long chunk = 1 << 12;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n > chunk)
#endif
  for (long c = 0; c < n; c += chunk) {
    rt_rng rng;
    rt_rng_seed(&rng, seed * 1000003u + (uint64_t)index);
    rt_rng_skip(&rng, (uint64_t)c);
    long end = c + chunk < n ? c + chunk : n;
    for (long i = c; i < end; i += 2) {
      float a, b;
      rt_rng_normal2(&rng, &a, &b);
      out[i] = std * a;
      if (i + 1 < end) out[i + 1] = std * b;
    }
  }
}

#endif
