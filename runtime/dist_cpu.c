// The CPU build's kernels of dist.h's part of kernels.def: shards of buckets,
// gradient accumulation over micro-batches, tensor parallelism and the
// vocabulary-parallel embedding and loss, each written once over its element
// type (runtime/dist_cpu_t.h). They run on host memory and call the
// collectives of comm.h; kernels_cuda.cu has their device twins.
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "exp_cpu.h"
#include "kernels.h"

#define RT_TEMPLATE "dist_cpu_t.h"
#include "cpu_variants.h"

void rt_tp_slice_i32(int axis, int *out, const int *x, long outer, long pieces, long chunk) {
  rt_tp_take_bytes(out, x, outer, pieces, chunk, rt_axis_rank(axis), rt_axis_size(axis),
                   sizeof *x);
}

void rt_tp_gather_i32(int axis, int *out, int *scratch, const int *x, long outer, long pieces,
                      long chunk) {
  _Static_assert(sizeof(int) == sizeof(float), "an int travels as a float32's bytes");
  rt_tp_gather(axis, (float *)out, (float *)scratch, (const float *)x, outer, pieces, chunk);
}
