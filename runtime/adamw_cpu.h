// AdamW's (and SGD's) arithmetic on the host's vector units, shared by the CPU
// build's device kernels (rt_adamw, rt_sgd, kernels_cpu.c) and the host update
// of offloaded optimizer state (rt_adamw_host, rt_sgd_host, host.c), so that
// both give the same bits.
// Internal to the runtime's C files; static inline, one definition.
#ifndef MTC_RT_ADAMW_CPU_H
#define MTC_RT_ADAMW_CPU_H

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "bf16.h"

#if defined(__AVX__) || defined(__AVX512F__)
#include <immintrin.h>  // one instruction: sqrt16
#endif

// 16 floats: a GCC/Clang vector extension, for the few loops the compiler
// does not vectorize by itself. With AVX-512 one register; without, the
// compiler splits it, so the code stays portable.
typedef float v16f __attribute__((vector_size(64)));

// sqrt of each lane, in place. Loops of sqrtf vectorize only under
// -fno-math-errno, which -std=c11 leaves off, so on x86 the instruction is
// named here.
static inline void sqrt16(v16f *x) {
#if defined(__AVX512F__)
  *x = (v16f)_mm512_sqrt_ps((__m512)*x);
#elif defined(__AVX__)
  __m256 h[2];
  memcpy(h, x, sizeof h);
  h[0] = _mm256_sqrt_ps(h[0]);
  h[1] = _mm256_sqrt_ps(h[1]);
  memcpy(x, h, sizeof h);
#else
  float f[16];
  memcpy(f, x, sizeof f);
  for (int l = 0; l < 16; l++) f[l] = sqrtf(f[l]);
  memcpy(x, f, sizeof f);
#endif
}

// torch.optim.AdamW (1.13, single-tensor path), in its order of operations:
// p *= 1 - lr wd; m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
// p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps), bc = 1 - beta^t.
// 16 elements at a time (a short tail through zero-padded copies); one pass
// over the four arrays, bound by memory bandwidth. The device kernel
// (rt_adamw) and the host one (rt_adamw_host, offload) run the same
// adamw_blocks on blocks of 16, so they give the same bits.
// The gradient is read as g * gscale (gradient clipping; 1 leaves its bits).
// Weight decay reaches elements [0, decay_n) only; the others are multiplied
// by 1 (torch's p *= 1 - lr * 0: the same bits).
typedef struct AdamwStep {
  float beta1, beta2, eps, step_size, bc2_sqrt, decay, gscale;
  long decay_n;
} AdamwStep;

static AdamwStep adamw_step(float lr, float beta1, float beta2, float eps, float wd, int t,
                            float gscale, long decay_n) {
  double bc1 = 1.0 - pow((double)beta1, (double)t);
  double bc2 = 1.0 - pow((double)beta2, (double)t);
  return (AdamwStep){.beta1 = beta1, .beta2 = beta2, .eps = eps,
                     .step_size = (float)((double)lr / bc1), .bc2_sqrt = (float)sqrt(bc2),
                     .decay = 1.0f - lr * wd, .gscale = gscale, .decay_n = decay_n};
}

// Blocks [b0, b1) of 16 elements of arrays of n.
static inline void adamw_blocks(float *p, const float *g, float *m, float *v, long n, long b0,
                                long b1, const AdamwStep *s) {
  float beta1 = s->beta1, beta2 = s->beta2;
  for (long blk = b0; blk < b1; blk++) {
    long i = blk * 16, len = n - i < 16 ? n - i : 16;
    float *pb = p + i, *mb = m + i, *vb = v + i;
    const float *gb = g + i;
    float tail[4][16] = {{0}};
    if (len < 16) {
      memcpy(tail[0], pb, (size_t)len * sizeof(float));
      memcpy(tail[1], gb, (size_t)len * sizeof(float));
      memcpy(tail[2], mb, (size_t)len * sizeof(float));
      memcpy(tail[3], vb, (size_t)len * sizeof(float));
      pb = tail[0], gb = tail[1], mb = tail[2], vb = tail[3];
    }
    v16f pi, gi, mi, vi, denom;
    v16f decay = (v16f){0} + (i < s->decay_n ? s->decay : 1.0f);
    if (i < s->decay_n && s->decay_n < i + 16)  // the block the decayed run ends in
      for (long l = s->decay_n - i; l < 16; l++) decay[l] = 1.0f;
    memcpy(&pi, pb, sizeof pi);
    memcpy(&gi, gb, sizeof gi);
    memcpy(&mi, mb, sizeof mi);
    memcpy(&vi, vb, sizeof vi);
    gi = gi * s->gscale;
    mi = beta1 * mi + (1.0f - beta1) * gi;
    vi = beta2 * vi + (1.0f - beta2) * gi * gi;
    denom = vi;
    sqrt16(&denom);
    denom = denom / s->bc2_sqrt + s->eps;
    pi = pi * decay - s->step_size * (mi / denom);
    memcpy(pb, &pi, sizeof pi);
    memcpy(mb, &mi, sizeof mi);
    memcpy(vb, &vi, sizeof vi);
    if (len < 16) {
      memcpy(p + i, tail[0], (size_t)len * sizeof(float));
      memcpy(m + i, tail[2], (size_t)len * sizeof(float));
      memcpy(v + i, tail[3], (size_t)len * sizeof(float));
    }
  }
}

// A bf16 gradient (--grad-precision bf16) is widened to float32 a run of at most
// ADAMW_GRAD_RUN elements at a time (16 KiB of floats, on the stack), and the
// float32 update runs on the run: the same bits as over the widened gradient.
#define ADAMW_GRAD_RUN 4096L

// The gradient of elements [i0, i1) as float32: g itself (float32), or a bf16
// g's (g16) widened into w.
static inline const float *adamw_grad_run(const void *g, bool g16, long i0, long i1, float *w) {
  if (!g16)
    return (const float *)g + i0;
  const rt_bf16 *h = (const rt_bf16 *)g + i0;
  for (long i = 0; i < i1 - i0; i++) w[i] = rt_bf16_to_f32(h[i]);
  return w;
}

// AdamW over the run of elements [i0, i1) (i0 a multiple of 16, at most ADAMW_GRAD_RUN
// elements) with a float32 or (g16) bf16 gradient: adamw_blocks' bits over it.
static inline void adamw_run(float *p, const void *g, bool g16, float *m, float *v, long i0,
                             long i1, const AdamwStep *s) {
  float w[ADAMW_GRAD_RUN];
  AdamwStep r = *s;  // the run's blocks numbered from 0, the decay's boundary with them
  r.decay_n -= i0;
  adamw_blocks(p + i0, adamw_grad_run(g, g16, i0, i1, w), m + i0, v + i0, i1 - i0, 0,
               (i1 - i0 + 15) / 16, &r);
}

// SGD (torch.optim.SGD without momentum) over the run [i0, i1) (at most ADAMW_GRAD_RUN
// elements) with a float32 or (g16) bf16 gradient: p -= lr * (g * gscale + wd * p), weight
// decay on [0, decay_n) only.
static inline void sgd_run(float *p, const void *g, bool g16, long i0, long i1, float lr,
                           float wd, float gscale, long decay_n) {
  float w[ADAMW_GRAD_RUN];
  const float *gr = adamw_grad_run(g, g16, i0, i1, w);
  for (long i = 0; i < i1 - i0; i++)
    p[i0 + i] -= lr * (gr[i] * gscale + (i0 + i < decay_n ? wd : 0.0f) * p[i0 + i]);
}

#endif
