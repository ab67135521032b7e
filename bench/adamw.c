// bench/adamw.c: the bf16 program's optimizer step on the CPU, as mtc's programs ran it before
// and as they run it now: AdamW over the float32 masters, then the bf16 working copies rounded
// from them in a second pass (rt_adamw, rt_cast_f32_bf16), against the update writing the
// copies in its own pass (rt_adamw_copy); AdamW alone beside them. The arrays are GPT-2 124M's
// embedding table (50257 x 768 floats), larger than any cache.
//
//   cc -O3 -march=native -fopenmp -std=c11 -Iruntime bench/adamw.c runtime/kernels_cpu.c
//      runtime/dist.c runtime/comm_single.c -lm -o /tmp/adamw && /tmp/adamw [reps]
//   (one command line)
//
// Prints the median of `reps` (default 15) of each, in milliseconds, and the bytes a parameter
// each moves.
#include <stdio.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <time.h>

#include "kernels.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, by_value);
  return t[n / 2];
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 15;
  if (reps < 1 || reps > 1000) {
    fprintf(stderr, "usage: adamw [reps (1 to 1000)]\n");
    return 2;
  }
  long n = 50257L * 768;
  float *p = malloc((size_t)n * sizeof *p), *g = malloc((size_t)n * sizeof *g);
  float *m = calloc((size_t)n, sizeof *m), *v = calloc((size_t)n, sizeof *v);
  rt_bf16 *c = malloc((size_t)n * sizeof *c);
  double *t = malloc(3 * (size_t)reps * sizeof *t);
  if (!p || !g || !m || !v || !c || !t) {
    fprintf(stderr, "adamw: out of memory\n");
    return 1;
  }
  for (long i = 0; i < n; i++)
    p[i] = 0.02f * (float)((i * 7919) % 1000 - 500) / 500, g[i] = 1e-3f, c[i].bits = 0;
  rt_adamw_copy(p, g, m, v, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f, n, c);  // pages in
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    rt_adamw(p, g, m, v, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, r + 2, 1.0f, n);
    double t1 = now();
    rt_cast_f32_bf16(c, p, n);
    double t2 = now();
    rt_adamw_copy(p, g, m, v, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, r + 2, 1.0f, n, c);
    double t3 = now();
    t[r] = t1 - t0, t[reps + r] = t2 - t0, t[2 * reps + r] = t3 - t2;
  }
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  printf("%ld parameters, %d threads, median of %d (ms):\n", n, threads, reps);
  printf("  AdamW alone                    %7.2f  (28 bytes a parameter)\n",
         1e3 * median(t, reps));
  printf("  AdamW, then the bf16 copy      %7.2f  (34: the copy reads the weights again)\n",
         1e3 * median(t + reps, reps));
  printf("  AdamW writing the copy         %7.2f  (30)\n", 1e3 * median(t + 2 * reps, reps));
  free(p), free(g), free(m), free(v), free(c), free(t);
  return 0;
}
