// Scans of float arrays on the host's vector units, shared by the CPU build's
// device kernels (rt_norm2, rt_find_nonfinite: kernels_cpu.c) and the host's
// scans of offloaded state (rt_norm2sq_host, rt_find_nonfinite_host: host.c),
// so that both give the same bits at the same speed.
// Internal to the runtime's C files; static inline, one definition.
#ifndef MTC_RT_SCAN_CPU_H
#define MTC_RT_SCAN_CPU_H

#include <stdint.h>
#include <string.h>

#include "bf16.h"

// The sum of squares is taken in RT_NORM2_CHUNKS fixed chunks, each in float64 over eight
// lanes (they vectorize) combined in a fixed order, the chunks then added in order: the same
// bits whatever the number of threads.
#define RT_NORM2_CHUNKS 64

// Chunk ch's sum of squares of x[0, n), its elements widened by LOAD (the bf16 twin: the
// same bits as the float32 one over the widened array).
#define RT_NORM2SQ_CHUNK(name, T, LOAD)                                                       \
  static inline double name(const T *x, long n, int ch) {                                     \
    long lo = n * ch / RT_NORM2_CHUNKS, hi = n * (ch + 1) / RT_NORM2_CHUNKS;                  \
    double acc[8] = {0};                                                                      \
    long i = lo;                                                                              \
    for (; i + 8 <= hi; i += 8)                                                               \
      for (int k = 0; k < 8; k++) acc[k] += (double)LOAD(x[i + k]) * (double)LOAD(x[i + k]);  \
    for (; i < hi; i++) acc[0] += (double)LOAD(x[i]) * (double)LOAD(x[i]);                    \
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])); \
  }
RT_NORM2SQ_CHUNK(rt_norm2sq_chunk, float, )
RT_NORM2SQ_CHUNK(rt_norm2sq_chunk_bf16, rt_bf16, rt_bf16_to_f32)
#undef RT_NORM2SQ_CHUNK

// Non-finite floats are searched in blocks of RT_FINITE_BLOCK, each first tested on its bits
// (NaN and infinities have every exponent bit set: |x|'s bits >= 0x7f800000) by a max that
// vectorizes, and searched only when it has one.
#define RT_FINITE_BLOCK 4096

// The first non-finite element of block b of x[0, n), or n.
static inline long rt_block_nonfinite(const float *x, long n, long b) {
  long lo = b * RT_FINITE_BLOCK, hi = lo + RT_FINITE_BLOCK < n ? lo + RT_FINITE_BLOCK : n;
  uint32_t most = 0;
  for (long i = lo; i < hi; i++) {
    uint32_t w;
    memcpy(&w, &x[i], sizeof w);
    w &= 0x7fffffffu;
    most = w > most ? w : most;
  }
  if (most < 0x7f800000u)
    return n;
  for (long i = lo; i < hi; i++) {
    uint32_t w;
    memcpy(&w, &x[i], sizeof w);
    if ((w & 0x7f800000u) == 0x7f800000u)
      return i;
  }
  return n;
}

// The same over bf16 elements (NaN and infinities have every exponent bit set: 0x7f80).
static inline long rt_block_nonfinite_bf16(const rt_bf16 *x, long n, long b) {
  long lo = b * RT_FINITE_BLOCK, hi = lo + RT_FINITE_BLOCK < n ? lo + RT_FINITE_BLOCK : n;
  for (long i = lo; i < hi; i++)
    if ((x[i].bits & 0x7f80u) == 0x7f80u)
      return i;
  return n;
}

#endif
