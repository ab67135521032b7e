// Shared by the CPU kernels (kernels_cpu.c) and their CUDA twins
// (kernels_cuda.cu), so that both walk strided tensors the same way. Static
// inline, C and C++.
#ifndef MTC_RT_COALESCE_H
#define MTC_RT_COALESCE_H

// Simplifies an iteration space: drops size-1 dims and merges neighbouring
// dims that are contiguous with each other in every stride array (the
// output, contiguous with `shape`, always is). s1 may be NULL. Returns the new
// rank, at least 1. The caller has checked that no dim is zero.
static inline int coalesce(int rank, const long *shape, const long *s0, const long *s1,
                    long *sh, long *t0, long *t1) {
  int r = 0;
  for (int d = 0; d < rank; d++) {
    if (shape[d] == 1) continue;
    long b0 = s0[d], b1 = s1 ? s1[d] : 0;
    if (r > 0 && t0[r - 1] == b0 * shape[d] && t1[r - 1] == b1 * shape[d]) {
      sh[r - 1] *= shape[d];
      t0[r - 1] = b0;
      t1[r - 1] = b1;
    } else {
      sh[r] = shape[d];
      t0[r] = b0;
      t1[r] = b1;
      r++;
    }
  }
  if (r == 0) {  // a single element
    sh[0] = 1;
    t0[0] = 0;
    t1[0] = 0;
    r = 1;
  }
  return r;
}

#endif
