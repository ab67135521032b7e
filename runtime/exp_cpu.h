// The CPU build's e^x, shared by its kernels (kernels_cpu.c) and the vocabulary-parallel loss
// (dist_cpu_t.h), so that a loss split over ranks sums the exponentials one rank's does.
// Internal to the runtime's C files; static inline, one definition.
#ifndef MTC_RT_EXP_CPU_H
#define MTC_RT_EXP_CPU_H

#include <stdint.h>
#include <string.h>

// e^x for the softmax, GELU and cross-entropy loops (Cephes expf): x = n ln2
// + r with |r| <= ln2/2, a degree-5 polynomial for e^r, 2^n put into the
// exponent bits. Relative error about 2e-7; e^x < FLT_MIN (x < -87.3) is 0,
// x > 88 saturates at e^88. No call and no branch, so the loops around it
// vectorize, unlike loops that call expf.
static inline float exp_fast(float x) {
  float xc = x < -87.3f ? -87.3f : (x > 88.0f ? 88.0f : x);
  // n = round(x / ln2): adding 1.5 * 2^23 rounds to an integer
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f + n * 2.12194440e-4f;  // ln2 in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = ((int32_t)n + 127) << 23;  // 2^n, n in [-126, 127]
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return x < -87.3f ? 0.0f : p * scale;
}

#endif
