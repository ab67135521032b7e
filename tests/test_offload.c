// Offload of optimizer state (passes/lower.c, runtime rt_adamw_host).
//
// The host AdamW against the device AdamW: the same parameters, gradients
// and moments through three steps give bit-identical results for every
// thread count, on sizes with short tails and sizes that take many threads;
// the copies move exactly their range.
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels.h"
#include "rng.h"

static rt_rng rng;

static float *randoms(long n, float scale) {
  float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
  if (!x)
    abort();
  for (long i = 0; i < n; i++)
    x[i] = scale * rt_rng_normal(&rng);
  return x;
}

static float *copy_of(const float *x, long n) {
  float *y = malloc((size_t)(n > 0 ? n : 1) * sizeof *y);
  if (!y)
    abort();
  memcpy(y, x, (size_t)n * sizeof *y);
  return y;
}

// First differing index of a and b, or -1.
static long first_diff(const float *a, const float *b, long n) {
  for (long i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], sizeof *a))
      return i;
  return -1;
}

static void test_adamw_host(long n, int threads) {
  float *p = randoms(n, 1.0f), *m = randoms(n, 0.1f), *v = randoms(n, 0.1f);
  for (long i = 0; i < n; i++)
    v[i] = v[i] * v[i]; // a second moment is not negative
  float *hp = copy_of(p, n), *hm = copy_of(m, n), *hv = copy_of(v, n);
  for (int t = 1; t <= 3; t++) {
    float *g = randoms(n, 0.5f);
    rt_adamw(p, g, m, v, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    rt_adamw_host(hp, g, hm, hv, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t, threads);
    free(g);
  }
  const char *what[3] = {"p", "m", "v"};
  float *dev[3] = {p, m, v}, *host[3] = {hp, hm, hv};
  for (int k = 0; k < 3; k++) {
    long at = first_diff(dev[k], host[k], n);
    check(at < 0, "adamw_host n=%ld threads=%d: %s[%ld] = %.9g, the device's %.9g", n, threads,
          what[k], at, at < 0 ? 0.0 : host[k][at], at < 0 ? 0.0 : dev[k][at]);
  }
  // and the update did something (a chunk that never ran would agree with an
  // unchanged input): nearly every parameter moves (a few steps fall below
  // the parameter's float spacing)
  long moved = 0;
  float *p0 = copy_of(hp, n);
  float *g = randoms(n, 0.5f);
  rt_adamw_host(hp, g, hm, hv, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 4, threads);
  for (long i = 0; i < n; i++)
    moved += hp[i] != p0[i];
  check(moved >= n - n / 1000, "adamw_host n=%ld threads=%d: step 4 moved only %ld of %ld parameters", n,
        threads, moved, n);
  free(p0), free(g);
  free(p), free(m), free(v), free(hp), free(hm), free(hv);
}

static void test_copies(void) {
  long n = 1000;
  float *dev = randoms(n, 1.0f), *host = calloc((size_t)n, sizeof *host);
  float *before = copy_of(dev, n);
  rt_to_host(host, dev + 100, 300);
  check(first_diff(host, dev + 100, 300) < 0 && host[300] == 0.0f,
        "to_host: 300 floats from offset 100, nothing past them");
  for (long i = 0; i < 300; i++)
    host[i] += 1.0f;
  rt_to_device(dev + 100, host, 300);
  bool ok = first_diff(dev, before, 100) < 0 && first_diff(dev + 400, before + 400, n - 400) < 0;
  for (long i = 100; i < 400; i++)
    ok &= dev[i] == before[i] + 1.0f;
  check(ok, "to_device: 300 floats back to offset 100, nothing else changed");
  free(dev), free(host), free(before);
}

int main(void) {
  rt_rng_seed(&rng, 7);
  long sizes[] = {1, 15, 16, 17, 1000, 3 * 65536 + 5, (1L << 20) + 3};
  int threads[] = {1, 2, 3, 4, 7, 16, 0};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++)
      test_adamw_host(sizes[s], threads[t]);
  test_copies();
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail ? 1 : 0;
}
