// bfloat16 in C: the upper 16 bits of an IEEE float32. A struct, so that no
// arithmetic happens on the bits by mistake: kernels widen each value to
// float (rt_bf16_to_f32, exact), compute in float, and round the result
// back (rt_f32_to_bf16: to nearest, ties to even, as PyTorch and CUDA's
// __float2bfloat16 do; NaN stays NaN, quiet; past the largest bf16 the
// result is infinite).
#ifndef MTC_RT_BF16_H
#define MTC_RT_BF16_H

#include <stdint.h>
#include <string.h>

typedef struct rt_bf16 {
  uint16_t bits;
} rt_bf16;

static inline float rt_bf16_to_f32(rt_bf16 h) {
  uint32_t u = (uint32_t)h.bits << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline rt_bf16 rt_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u)  // NaN: keep the sign and the top of the payload, quiet
    return (rt_bf16){(uint16_t)((u >> 16) | 0x0040u)};
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even (a carry may reach inf)
  return (rt_bf16){(uint16_t)(u >> 16)};
}

#endif
