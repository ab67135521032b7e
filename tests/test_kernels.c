// Tests of the CPU runtime kernels (runtime/kernels_cpu.c), and of the
// tensor-parallel kernels (runtime/dist_cpu.c) where one process can run them.
//
// Every kernel is compared against a naive double-precision reference written
// here, on random inputs from a fixed seed, over several shapes (odd sizes,
// broadcast and transposed strides, sizes big enough to take the parallel
// paths). A check passes when max|got - ref| / max(1, max|ref|) <= 1e-5.
// The backward references are themselves checked against central finite
// differences of the forward references. Last, the kernels whose sums cross
// rows are run twice and must give bit-identical results.
//
// Output: one "name: maxdiff X" line per check, then "N passed, M failed".
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "kernels.h"
#include "rng.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define TOL 1e-5

static int n_passed, n_failed;
static rt_rng rng;

// ---------------------------------------------------------------------------
// helpers

static float *fbuf(long n) {
  float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

static double *dbuf(long n) {
  double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

static int *ibuf(long n) {
  int *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

// uniform in [lo, hi)
static float *frand(long n, float lo, float hi) {
  float *p = fbuf(n);
  for (long i = 0; i < n; i++) p[i] = lo + (hi - lo) * rt_rng_uniform(&rng);
  return p;
}

static int *irand(long n, long range) {
  int *p = ibuf(n);
  for (long i = 0; i < n; i++) p[i] = (int)rt_rng_below(&rng, (uint64_t)range);
  return p;
}

static double *to_d(const float *x, long n) {
  double *p = dbuf(n);
  for (long i = 0; i < n; i++) p[i] = x[i];
  return p;
}

// compare got (float) with ref (double); print and count
static void check(const char *name, const float *got, const double *ref, long n) {
  double maxdiff = 0.0, maxref = 0.0;
  int bad = 0;
  for (long i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]);
    if (!(d <= maxdiff)) maxdiff = d;  // NaN propagates
    if (isnan(got[i]) != isnan(ref[i])) bad = 1;
    if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
  }
  double err = maxdiff / (maxref > 1.0 ? maxref : 1.0);
  int ok = !bad && err <= TOL;
  printf("%s: maxdiff %.3g%s\n", name, maxdiff, ok ? "" : "  FAILED");
  if (ok) n_passed++;
  else n_failed++;
}

// double vs double (for checking references against finite differences)
static void check_dd(const char *name, const double *got, const double *ref, long n) {
  double maxdiff = 0.0, maxref = 0.0;
  for (long i = 0; i < n; i++) {
    double d = fabs(got[i] - ref[i]);
    if (!(d <= maxdiff)) maxdiff = d;
    if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
  }
  double err = maxdiff / (maxref > 1.0 ? maxref : 1.0);
  int ok = err <= TOL;
  printf("%s: maxdiff %.3g%s\n", name, maxdiff, ok ? "" : "  FAILED");
  if (ok) n_passed++;
  else n_failed++;
}

static void check_same(const char *name, const float *a, const float *b, long n) {
  int ok = memcmp(a, b, (size_t)n * sizeof(float)) == 0;
  printf("%s: %s\n", name, ok ? "bit-identical" : "DIFFERENT  FAILED");
  if (ok) n_passed++;
  else n_failed++;
}

static long numel(int rank, const long *shape) {
  long n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  return n;
}

// offset of flat index `flat` (row-major over shape) through `stride`
static long offset_of(long flat, int rank, const long *shape, const long *stride) {
  long off = 0;
  for (int d = rank - 1; d >= 0; d--) {
    off += (flat % shape[d]) * stride[d];
    flat /= shape[d];
  }
  return off;
}

// largest offset + 1 reachable through strides (the size an input must have)
static long extent(int rank, const long *shape, const long *stride) {
  long e = 1;
  for (int d = 0; d < rank; d++) e += (shape[d] - 1) * stride[d];
  return e;
}

// ---------------------------------------------------------------------------
// data movement

static void test_fill_copy(void) {
  long n = 40001;
  float *out = fbuf(n), *x = frand(n, -1, 1);
  double *ref = dbuf(n);
  rt_fill(out, n, 2.5f);
  for (long i = 0; i < n; i++) ref[i] = 2.5;
  check("fill", out, ref, n);
  rt_copy(out, x, n);
  for (long i = 0; i < n; i++) ref[i] = x[i];
  check("copy", out, ref, n);
  int *xi = malloc((size_t)n * sizeof *xi);
  for (long i = 0; i < n; i++) xi[i] = (int)(i % 2001) - 1000, ref[i] = xi[i];
  rt_cast_i32_f32(out, xi, n);
  check("cast_i32_f32", out, ref, n);
  free(xi);
  free(out); free(x); free(ref);
}

// The synthetic padding mask (train's RT_IN_MASK): each row 1s then 0s, at
// least one 1, the lengths varied; the same seed the same mask.
static void test_padding_mask(void) {
  enum { ROWS = 64, ROW = 16 };
  int32_t m[ROWS * ROW], again[ROWS * ROW];
  rt_rng r;
  rt_rng_seed(&r, 7);
  rt_rng_padding_mask(&r, m, ROWS * ROW, ROW);
  rt_rng_seed(&r, 7);
  rt_rng_padding_mask(&r, again, ROWS * ROW, ROW);
  int prefix_rows = 0, seen[ROW + 1] = {0}, lengths = 0;
  for (int i = 0; i < ROWS; i++) {
    int len = 0;
    while (len < ROW && m[i * ROW + len] == 1) len++;
    int zeros = 1;
    for (int c = len; c < ROW; c++) zeros &= m[i * ROW + c] == 0;
    prefix_rows += zeros && len >= 1;
    lengths += !seen[len]++;
  }
  double got[3] = {prefix_rows, lengths >= 8, !memcmp(m, again, sizeof m)};
  double want[3] = {ROWS, 1, 1};
  check_dd("padding mask: rows of 1s then 0s, lengths varied, seeded", got, want, 3);
}

static void strided_case(const char *name, int rank, const long *shape, const long *xs) {
  long n = numel(rank, shape), ne = extent(rank, shape, xs);
  float *x = frand(ne, -1, 1), *out = fbuf(n);
  double *ref = dbuf(n), *got = dbuf(n);
  for (long i = 0; i < n; i++) ref[i] = x[offset_of(i, rank, shape, xs)];
  rt_strided_copy(out, x, rank, shape, xs);
  check(name, out, ref, n);
  // the same on integers (a padding mask broadcast before its cast)
  int *xi = malloc((size_t)ne * sizeof *xi), *outi = malloc((size_t)n * sizeof *outi);
  for (long i = 0; i < ne; i++) xi[i] = (int)(i * 7919 % 1000) - 500;
  for (long i = 0; i < n; i++) ref[i] = xi[offset_of(i, rank, shape, xs)];
  rt_strided_copy_i32(outi, xi, rank, shape, xs);
  for (long i = 0; i < n; i++) got[i] = outi[i];
  char iname[256];
  snprintf(iname, sizeof iname, "%s (i32)", name);
  check_dd(iname, got, ref, n);
  free(x); free(out); free(ref); free(got); free(xi); free(outi);
}

static void test_strided_copy(void) {
  { long s[] = {3, 5, 7}, xs[] = {35, 7, 1}; strided_case("strided_copy contiguous", 3, s, xs); }
  { long s[] = {37, 53}, xs[] = {1, 37}; strided_case("strided_copy transpose 37x53", 2, s, xs); }
  { long s[] = {301, 203}, xs[] = {1, 301}; strided_case("strided_copy transpose 301x203", 2, s, xs); }
  // (2,4,3,5) -> permute (0,2,1,3) -> (2,3,4,5)
  { long s[] = {2, 3, 4, 5}, xs[] = {60, 5, 15, 1}; strided_case("strided_copy permute 0213", 4, s, xs); }
  { long s[] = {16, 48, 64}, xs[] = {64, 1024, 1}; strided_case("strided_copy permute large", 3, s, xs); }
  { long s[] = {4, 6, 5}, xs[] = {0, 5, 1}; strided_case("strided_copy broadcast leading", 3, s, xs); }
  { long s[] = {6, 5, 4}, xs[] = {5, 1, 0}; strided_case("strided_copy broadcast last", 3, s, xs); }
  { long s[] = {7, 3}, xs[] = {0, 0}; strided_case("strided_copy broadcast scalar", 2, s, xs); }
  { long s[] = {1, 9, 1}, xs[] = {0, 2, 0}; strided_case("strided_copy size-1 dims, stride 2", 3, s, xs); }
  { long s[] = {1}, xs[] = {0}; strided_case("strided_copy rank 0", 0, s, xs); }
  { long s[] = {2, 3, 2, 3, 2, 3, 2, 3}, xs[] = {1, 2, 6, 12, 36, 72, 216, 432};
    strided_case("strided_copy rank 8 reversed", 8, s, xs); }
}

static void reduce_case(const char *name, int rank, const long *shape, const long *os,
                        long onumel, float scale) {
  long n = numel(rank, shape);
  float *x = frand(n, -1, 1), *out = fbuf(onumel);
  double *ref = dbuf(onumel);
  for (long i = 0; i < onumel; i++) out[i] = 123.0f;  // must be overwritten
  for (long i = 0; i < n; i++) ref[offset_of(i, rank, shape, os)] += (double)scale * x[i];
  rt_reduce_sum(out, x, rank, shape, os, onumel, scale);
  check(name, out, ref, onumel);
  free(x); free(out); free(ref);
}

static void test_reduce_sum(void) {
  { long s[] = {37, 129}, os[] = {0, 1}; reduce_case("reduce_sum (37,129)->(129)", 2, s, os, 129, 1.0f); }
  { long s[] = {1000, 200}, os[] = {0, 1}; reduce_case("reduce_sum (1000,200)->(200)", 2, s, os, 200, 1.0f); }
  { long s[] = {4, 50, 96}, os[] = {0, 0, 1}; reduce_case("reduce_sum (4,50,96)->(96)", 3, s, os, 96, 0.5f); }
  { long s[] = {37, 129}, os[] = {1, 0}; reduce_case("reduce_sum (37,129)->(37,1)", 2, s, os, 37, 1.0f); }
  { long s[] = {300, 100}, os[] = {1, 0}; reduce_case("reduce_sum (300,100)->(300,1)", 2, s, os, 300, -2.0f); }
  { long s[] = {3, 4, 5}, os[] = {0, 0, 0}; reduce_case("reduce_sum all (3,4,5)", 3, s, os, 1, 1.0f); }
  { long s[] = {100003}, os[] = {0}; reduce_case("reduce_sum all (100003)", 1, s, os, 1, 0.25f); }
  { long s[] = {2, 3, 4}, os[] = {0, 1, 0}; reduce_case("reduce_sum (2,3,4)->(1,3,1)", 3, s, os, 3, 1.0f); }
  { long s[] = {20, 30, 40}, os[] = {0, 1, 0}; reduce_case("reduce_sum (20,30,40)->(1,30,1)", 3, s, os, 30, 1.0f); }
  { long s[] = {2, 3, 4}, os[] = {4, 0, 1}; reduce_case("reduce_sum (2,3,4)->(2,1,4)", 3, s, os, 8, 1.0f); }
  { long s[] = {64, 33, 17}, os[] = {17, 0, 1}; reduce_case("reduce_sum (64,33,17)->(64,1,17)", 3, s, os, 64 * 17, 1.0f); }
  { long s[] = {3, 4}, os[] = {1, 3}; reduce_case("reduce_sum none, transposed out", 2, s, os, 12, 0.5f); }
  { long s[] = {5, 7}, os[] = {7, 1}; reduce_case("reduce_sum none, contiguous", 2, s, os, 35, 3.0f); }
}

static void test_slice(void) {
  long outer = 5, xinner = 10, off = 3, len = 4;
  float *x = frand(outer * xinner, -1, 1), *out = fbuf(outer * len);
  double *ref = dbuf(outer * len);
  for (long o = 0; o < outer; o++)
    for (long i = 0; i < len; i++) ref[o * len + i] = x[o * xinner + off + i];
  rt_slice(out, x, outer, xinner, off, len);
  check("slice", out, ref, outer * len);
  // unslice into a prefilled buffer: only the slice region changes
  long oinner = 11;
  float *x2 = frand(outer * len, -1, 1), *o2 = frand(outer * oinner, -1, 1);
  double *ref2 = to_d(o2, outer * oinner);
  for (long o = 0; o < outer; o++)
    for (long i = 0; i < len; i++) ref2[o * oinner + off + i] = x2[o * len + i];
  rt_unslice(o2, x2, outer, oinner, off, len);
  check("unslice", o2, ref2, outer * oinner);
  // along a middle axis, on integers: (3, 9, 2) rows 1, 3, 5
  int *xi = irand(3 * 9 * 2, 1000), *oi = ibuf(3 * 3 * 2);
  double *got = dbuf(3 * 3 * 2), *want = dbuf(3 * 3 * 2);
  rt_slice_axis_i32(oi, xi, 3, 9, 2, 1, 2, 3);
  for (long o = 0; o < 3; o++)
    for (long i = 0; i < 3; i++)
      for (long k = 0; k < 2; k++) {
        want[(o * 3 + i) * 2 + k] = xi[(o * 9 + 1 + 2 * i) * 2 + k];
        got[(o * 3 + i) * 2 + k] = oi[(o * 3 + i) * 2 + k];
      }
  check_dd("slice_axis_i32", got, want, 3 * 3 * 2);
  free(x); free(out); free(ref); free(x2); free(o2); free(ref2);
  free(xi); free(oi); free(got); free(want);
}

// Integer token ids at run time (T5's decoder inputs: labels shifted right, -100 replaced):
// concatenation, masked_fill and equal on i32.
static void test_int_ops(void) {
  // unslice_i32 into a prefilled (4, 7): columns 2..4 change, the rest stays
  long outer = 4, oinner = 7, off = 2, len = 3;
  int *x = irand(outer * len, 1000), *o = irand(outer * oinner, 1000);
  double *got = dbuf(outer * oinner), *want = dbuf(outer * oinner);
  for (long i = 0; i < outer * oinner; i++) want[i] = o[i];
  for (long r = 0; r < outer; r++)
    for (long i = 0; i < len; i++) want[r * oinner + off + i] = x[r * len + i];
  rt_unslice_i32(o, x, outer, oinner, off, len);
  for (long i = 0; i < outer * oinner; i++) got[i] = o[i];
  check_dd("unslice_i32", got, want, outer * oinner);
  // equal_i32: ids against -100, some of them -100
  long n = 3 * 5;
  int *ids = irand(n, 4), *eq = ibuf(n);
  for (long i = 0; i < n; i += 3) ids[i] = -100;
  rt_equal_i32(eq, ids, n, -100);
  int right = 0;
  for (long i = 0; i < n; i++) right += eq[i] == (ids[i] == -100);
  check_dd("equal_i32", (double[]){right}, (double[]){n}, 1);
  // equal_f32: a causal mask's 0s and lowest floats against 0
  float xs[6] = {0.0f, -FLT_MAX, -0.0f, 1e-30f, -FLT_MAX, 0.0f};
  int eqf[6];
  rt_equal_f32(eqf, xs, 6, 0.0f);
  right = 0;
  for (long i = 0; i < 6; i++) right += eqf[i] == (xs[i] == 0.0f);
  check_dd("equal_f32", (double[]){right}, (double[]){6}, 1);
  // masked_fill_i32 (3, 5) with that mask, then with a mask broadcast over the rows (0, 1)
  long shape[2] = {3, 5}, full[2] = {5, 1}, rows[2] = {0, 1};
  int *filled = ibuf(n), *colmask = irand(5, 2);
  double *g2 = dbuf(n), *w2 = dbuf(n);
  rt_masked_fill_i32(filled, ids, eq, 2, shape, full, 7);
  for (long i = 0; i < n; i++) g2[i] = filled[i], w2[i] = ids[i] == -100 ? 7 : ids[i];
  check_dd("masked_fill_i32", g2, w2, n);
  rt_masked_fill_i32(filled, ids, colmask, 2, shape, rows, -5);
  for (long i = 0; i < n; i++) g2[i] = filled[i], w2[i] = colmask[i % 5] ? -5 : ids[i];
  check_dd("masked_fill_i32 broadcast", g2, w2, n);
  free(x); free(o); free(got); free(want); free(ids); free(eq); free(filled); free(colmask);
  free(g2); free(w2);
}

// Positions computed at run time from tokens, as RoBERTa does: keep = ids != pad,
// (cumsum(keep) * keep) + pad: 2, 3, ... along each row, pad at the padding.
static void test_int_positions(void) {
  enum { B = 2, T = 6, PAD = 1 };
  int ids[B * T] = {5, 9, 7, 3, 8, 4, 6, 2, 9, PAD, PAD, PAD}, eq[B * T], keep[B * T];
  int sums[B * T], pos[B * T];
  long shape[1] = {B * T}, one[1] = {1};
  rt_equal_i32(eq, ids, B * T, PAD);
  rt_equal_i32(keep, eq, B * T, 0);  // Not
  rt_cumsum_i32(sums, keep, B, T, 1, 0, 0);
  rt_binary_i32(RT_MUL, pos, sums, keep, 1, shape, one, one);
  rt_scale_i32(pos, pos, B * T, 1, PAD);
  double got[B * T], want[B * T] = {2, 3, 4, 5, 6, 7, 2, 3, 4, PAD, PAD, PAD};
  for (int i = 0; i < B * T; i++) got[i] = pos[i];
  check_dd("positions from tokens (cumsum_i32, binary_i32, scale_i32)", got, want, B * T);
  // the other directions along the middle dim of [2, 3, 2], and a sum that wraps
  int x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, INT_MAX}, y[12];
  double g[12], w[4][12] = {{1, 2, 4, 6, 9, 12, 7, 8, 16, 18, 27, 0},
                            {0, 0, 1, 2, 4, 6, 0, 0, 7, 8, 16, 18},
                            {9, 12, 8, 10, 5, 6, 27, 0, 20, (double)INT_MIN + 9, 11, INT_MAX},
                            {8, 10, 5, 6, 0, 0, 20, (double)INT_MIN + 9, 11, INT_MAX, 0, 0}};
  w[0][11] = w[2][7] = (double)INT_MIN + 17;  // 8 + 10 + INT_MAX wraps
  const char *names[4] = {"inclusive", "exclusive", "reverse", "exclusive reverse"};
  for (int k = 0; k < 4; k++) {
    rt_cumsum_i32(y, x, 2, 3, 2, k & 1, k >> 1);
    for (int i = 0; i < 12; i++) g[i] = y[i];
    char name[64];
    snprintf(name, sizeof name, "cumsum_i32 %s", names[k]);
    check_dd(name, g, w[k], 12);
  }
  // comparisons: ids < 2 broadcast over the rows ([B*T] against [1]); floats >= 0.25, a NaN
  int two = 2, lt[B * T];
  long st0[1] = {0};
  rt_compare_i32(RT_LT, lt, ids, &two, 1, shape, one, st0);
  double gl[B * T], wl[B * T];
  for (int i = 0; i < B * T; i++) gl[i] = lt[i], wl[i] = ids[i] < 2;
  check_dd("compare_i32 lt, broadcast", gl, wl, B * T);
  float fa[4] = {0.25f, -1.0f, NAN, 3.0f}, quarter = 0.25f;
  int ge[4];
  long four[1] = {4};
  rt_compare(RT_GE, ge, fa, &quarter, 1, four, one, st0);
  double gg[4], wg[4] = {1, 0, 0, 1};
  for (int i = 0; i < 4; i++) gg[i] = ge[i];
  check_dd("compare ge, a NaN", gg, wg, 4);
  float xf[6] = {0.5f, -1.0f, 2.0f, 0.25f, 4.0f, 8.0f}, yf[6];
  rt_cumsum(yf, xf, 1, 6, 1, 0, 1);
  double gf[6], wf[6] = {13.75, 13.25, 14.25, 12.25, 12.0, 8.0};
  for (int i = 0; i < 6; i++) gf[i] = yf[i];
  check_dd("cumsum reverse", gf, wf, 6);
}

// ---------------------------------------------------------------------------
// elementwise

static const char *op_name[] = {"add", "sub", "mul", "div", "min", "max"};

static double ref_op(int op, double a, double b) {
  switch (op) {
    case RT_ADD: return a + b;
    case RT_SUB: return a - b;
    case RT_MUL: return a * b;
    case RT_MIN: return a < b ? a : b;
    case RT_MAX: return a > b ? a : b;
    default: return a / b;
  }
}

static void binary_case(const char *what, int rank, const long *shape, const long *as,
                        const long *bs) {
  long n = numel(rank, shape);
  long na = extent(rank, shape, as), nb = extent(rank, shape, bs);
  float *a = frand(na, -2, 2), *b = frand(nb, 0.5f, 2.0f), *out = fbuf(n);
  for (long i = 0; i < nb; i++)
    if (i % 3 == 1) b[i] = -b[i];  // both signs, away from zero for div
  double *ref = dbuf(n);
  for (int op = RT_ADD; op <= RT_MAX; op++) {
    for (long i = 0; i < n; i++)
      ref[i] = ref_op(op, a[offset_of(i, rank, shape, as)], b[offset_of(i, rank, shape, bs)]);
    rt_binary(op, out, a, b, rank, shape, as, bs);
    char name[128];
    snprintf(name, sizeof name, "binary %s %s", op_name[op], what);
    check(name, out, ref, n);
  }
  free(a); free(b); free(out); free(ref);
}

static void test_binary(void) {
  { long s[] = {7, 9}, as[] = {9, 1}, bs[] = {9, 1}; binary_case("same (7,9)", 2, s, as, bs); }
  { long s[] = {50001}, as[] = {1}, bs[] = {1}; binary_case("same (50001)", 1, s, as, bs); }
  { long s[] = {13, 37}, as[] = {37, 1}, bs[] = {0, 1}; binary_case("bias (13,37)+(37)", 2, s, as, bs); }
  { long s[] = {512, 96}, as[] = {96, 1}, bs[] = {0, 1}; binary_case("bias (512,96)+(96)", 2, s, as, bs); }
  { long s[] = {13, 37}, as[] = {0, 1}, bs[] = {37, 1}; binary_case("(37)+(13,37)", 2, s, as, bs); }
  { long s[] = {13, 37}, as[] = {37, 1}, bs[] = {1, 0}; binary_case("rowwise (13,37)*(13,1)", 2, s, as, bs); }
  { long s[] = {13, 37}, as[] = {1, 13}, bs[] = {37, 1}; binary_case("transposed a", 2, s, as, bs); }
  { long s[] = {13, 37}, as[] = {37, 1}, bs[] = {0, 0}; binary_case("scalar b", 2, s, as, bs); }
  { long s[] = {30001}, as[] = {0}, bs[] = {1}; binary_case("scalar a (30001)", 1, s, as, bs); }
  { long s[] = {2, 3, 5}, as[] = {5, 0, 1}, bs[] = {0, 5, 1}; binary_case("(2,1,5)+(1,3,5)", 3, s, as, bs); }
  { long s[] = {4, 8, 64, 16}, as[] = {8192, 1024, 16, 1}, bs[] = {0, 16, 128, 1};
    binary_case("4-D, permuted b", 4, s, as, bs); }
}

static double ref_gelu(double x) {
  double s = sqrt(2.0 / 3.14159265358979323846);
  return 0.5 * x * (1.0 + tanh(s * (x + 0.044715 * x * x * x)));
}

static double ref_gelu_grad(double x) {
  double s = sqrt(2.0 / 3.14159265358979323846);
  double th = tanh(s * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

static double ref_sign(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; }
static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

// rt_unary's ops against libm in double, over a range and at the edges
static void test_unary_ops(void) {
  static const struct {
    int op;
    const char *name;
    double (*f)(double);
    float lo, hi;
  } ops[] = {{RT_EXP, "exp", exp, -20, 20},      {RT_LOG, "log", log, 1e-3f, 1e3f},
             {RT_SQRT, "sqrt", sqrt, 0, 100},    {RT_TANH, "tanh", tanh, -10, 10},
             {RT_ERF, "erf", erf, -4, 4},        {RT_SIN, "sin", sin, -100, 100},
             {RT_COS, "cos", cos, -100, 100},    {RT_ABS, "abs", fabs, -5, 5},
             {RT_SIGN, "sign", ref_sign, -5, 5}, {RT_SIGMOID, "sigmoid", ref_sigmoid, -30, 30}};
  long n = 10007;
  float edges[] = {-1e30f, -100.0f, -1.0f, -0.0f, 0.0f, 1e-30f, 1.0f, 100.0f, 1e30f};
  long ne = (long)(sizeof edges / sizeof edges[0]);
  float *y = fbuf(n);
  double *ref = dbuf(n);
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    float *x = frand(n, ops[k].lo, ops[k].hi);
    rt_unary(ops[k].op, y, x, n, 1.0f);
    for (long i = 0; i < n; i++) ref[i] = ops[k].f(x[i]);
    check(ops[k].name, y, ref, n);
    free(x);
    if (ops[k].op == RT_LOG || ops[k].op == RT_SQRT || ops[k].op == RT_EXP)
      continue; // their edges are inf, nan or overflow
    rt_unary(ops[k].op, y, edges, ne, 1.0f);
    for (long i = 0; i < ne; i++) ref[i] = ops[k].f(edges[i]);
    check(ops[k].name, y, ref, ne);
  }
  float pw[] = {0.5f, 1.0f, 2.0f, 3.5f};
  rt_unary(RT_POW, y, pw, 4, 2.5f);
  for (long i = 0; i < 4; i++) ref[i] = pow(pw[i], 2.5);
  check("pow 2.5", y, ref, 4);
  free(y), free(ref);
}

static double ref_silu(double x) { return x / (1.0 + exp(-x)); }

// SiLU against double, its backward against central differences of that,
// over a range and at the tails (e^-x overflows below -88).
static void test_silu(void) {
  long n = 10007;
  float *x = frand(n, -20, 20), *dy = frand(n, -1, 1), *y = fbuf(n);
  x[0] = -100.0f, x[1] = 100.0f, x[2] = -0.0f, x[3] = 1e-30f;
  double *ref = dbuf(n), h = 1e-6;
  rt_silu_fwd(y, x, n);
  for (long i = 0; i < n; i++) ref[i] = ref_silu(x[i]);
  check("silu_fwd", y, ref, n);
  rt_silu_bwd(y, dy, x, n);
  for (long i = 0; i < n; i++) ref[i] = dy[i] * (ref_silu(x[i] + h) - ref_silu(x[i] - h)) / (2 * h);
  check("silu_bwd vs finite differences", y, ref, n);
  free(x), free(dy), free(y), free(ref);
}

static void test_unary(void) {
  long n = 20011;
  float *x = frand(n, -5, 5), *dy = frand(n, -1, 1), *out = fbuf(n);
  double *ref = dbuf(n);
  rt_scale(out, x, n, -1.5f, 0.25f);
  for (long i = 0; i < n; i++) ref[i] = -1.5 * x[i] + 0.25;
  check("scale", out, ref, n);
  rt_gelu_fwd(out, x, n);
  for (long i = 0; i < n; i++) ref[i] = ref_gelu(x[i]);
  check("gelu_fwd", out, ref, n);
  rt_gelu_bwd(out, dy, x, n);
  for (long i = 0; i < n; i++) ref[i] = dy[i] * ref_gelu_grad(x[i]);
  check("gelu_bwd", out, ref, n);
  // the reference derivative against central differences
  double *fd = dbuf(n), *an = dbuf(n);
  for (long i = 0; i < n; i++) {
    double h = 1e-5;
    fd[i] = (ref_gelu(x[i] + h) - ref_gelu(x[i] - h)) / (2 * h);
    an[i] = ref_gelu_grad(x[i]);
  }
  check_dd("gelu reference vs finite differences", an, fd, n);
  // the tails, far beyond where tanh saturates
  float wide[] = {-1e30f, -1e15f, -1e4f, -100.0f, -30.0f, -9.0f, -7.5f, -0.0f, 0.0f,
                  1e-30f, 7.5f, 9.0f, 30.0f, 100.0f, 1e4f, 1e15f, 1e30f};
  long nw = (long)(sizeof wide / sizeof wide[0]);
  float ones[sizeof wide / sizeof wide[0]];
  for (long i = 0; i < nw; i++) ones[i] = 1.0f;
  rt_gelu_fwd(out, wide, nw);
  for (long i = 0; i < nw; i++) ref[i] = ref_gelu(wide[i]);
  check("gelu_fwd tails", out, ref, nw);
  rt_gelu_bwd(out, ones, wide, nw);
  for (long i = 0; i < nw; i++) ref[i] = ref_gelu_grad(wide[i]);
  check("gelu_bwd tails", out, ref, nw);
  rt_relu_fwd(out, x, n);
  for (long i = 0; i < n; i++) ref[i] = x[i] > 0 ? x[i] : 0.0;
  check("relu_fwd", out, ref, n);
  rt_relu_bwd(out, dy, x, n);
  for (long i = 0; i < n; i++) ref[i] = x[i] > 0 ? dy[i] : 0.0;
  check("relu_bwd", out, ref, n);
  free(x); free(dy); free(out); free(ref); free(fd); free(an);
}

// ---------------------------------------------------------------------------
// matmul

static void matmul_case(long batch, long m, long n, long k, int ta, int tb, int bcast_a,
                        int bcast_b, int sum_batch) {
  long sa = bcast_a ? 0 : m * k, sb = bcast_b ? 0 : k * n, sc = sum_batch ? 0 : m * n;
  long na = (bcast_a ? 1 : batch) * m * k, nb = (bcast_b ? 1 : batch) * k * n;
  long nc = (sum_batch ? 1 : batch) * m * n;
  float *a = frand(na, -1, 1), *b = frand(nb, -1, 1), *c = frand(nc, -9, 9);
  double *ref = dbuf(nc);
  for (long bi = 0; bi < batch; bi++) {
    const float *A = a + bi * sa, *B = b + bi * sb;
    double *C = ref + bi * sc;
    for (long i = 0; i < m; i++)
      for (long j = 0; j < n; j++) {
        double s = 0.0;
        for (long p = 0; p < k; p++) {
          double av = ta ? A[p * m + i] : A[i * k + p];
          double bv = tb ? B[j * k + p] : B[p * n + j];
          s += av * bv;
        }
        C[i * n + j] += s;
      }
  }
  rt_matmul(c, a, b, batch, m, n, k, ta, tb, sa, sb, sc);
  char name[160];
  snprintf(name, sizeof name, "matmul batch %ld m %ld n %ld k %ld ta %d tb %d%s%s%s", batch, m, n,
           k, ta, tb, bcast_a ? " sa=0" : "", bcast_b ? " sb=0" : "", sum_batch ? " sc=0" : "");
  check(name, c, ref, nc);
  free(a); free(b); free(c); free(ref);
}

static void test_matmul(void) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      matmul_case(1, 5, 7, 3, ta, tb, 0, 0, 0);
      matmul_case(1, 33, 17, 65, ta, tb, 0, 0, 0);
      matmul_case(1, 1, 1, 1, ta, tb, 0, 0, 0);
      matmul_case(3, 6, 4, 9, ta, tb, 0, 0, 0);
      matmul_case(3, 6, 4, 9, ta, tb, 0, 1, 0);
      matmul_case(4, 7, 5, 11, ta, tb, 0, 0, 1);
      matmul_case(4, 7, 5, 11, ta, tb, 1, 0, 1);
    }
  matmul_case(1, 128, 96, 200, 0, 0, 0, 0, 0);
  matmul_case(8, 64, 64, 32, 0, 1, 0, 0, 0);
  // partial micro-tiles (12 x 32 with AVX-512, else 6 x 16) at the edges, and K not a
  // multiple of the packers' register transposes (16 or 8 wide)
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) matmul_case(1, 397, 1061, 263, ta, tb, 0, 0, 0);
  matmul_case(3, 50, 70, 300, 1, 0, 0, 0, 1);
  for (int ta = 0; ta < 2; ta++)  // K past one slice (512), with a remainder of 12
    for (int tb = 0; tb < 2; tb++) matmul_case(1, 40, 70, 1100, ta, tb, 0, 0, 0);
  for (int ta = 0; ta < 2; ta++)  // more rows than one A block (1032)
    for (int tb = 0; tb < 2; tb++) matmul_case(1, 1100, 40, 70, ta, tb, 0, 0, 0);
  matmul_case(2, 4, 3, 0, 0, 0, 0, 0, 0);  // k = 0: zeros
}

// ---------------------------------------------------------------------------
// neural-net ops

static void test_embedding(long n, long v, long c) {
  float *w = frand(v * c, -1, 1), *dout = frand(n * c, -1, 1);
  float *out = fbuf(n * c), *dw = frand(v * c, -1, 1);
  int *idx = irand(n, v);
  double *ref = dbuf(n * c), *dref = dbuf(v * c);
  for (long i = 0; i < n; i++)
    for (long j = 0; j < c; j++) {
      ref[i * c + j] = w[idx[i] * c + j];
      dref[idx[i] * c + j] += dout[i * c + j];
    }
  char name[96];
  rt_embedding_fwd(out, w, idx, n, c);
  snprintf(name, sizeof name, "embedding_fwd n %ld v %ld c %ld", n, v, c);
  check(name, out, ref, n * c);
  rt_embedding_bwd(dw, dout, idx, n, v, c);
  snprintf(name, sizeof name, "embedding_bwd n %ld v %ld c %ld", n, v, c);
  check(name, dw, dref, v * c);
  free(w); free(dout); free(out); free(dw); free(idx); free(ref); free(dref);
}

static void ref_layernorm_fwd(double *y, const double *x, const double *w, const double *b,
                              long n, long c, double eps) {
  for (long i = 0; i < n; i++) {
    const double *xr = x + i * c;
    double mean = 0, var = 0;
    for (long j = 0; j < c; j++) mean += xr[j];
    mean /= c;
    for (long j = 0; j < c; j++) var += (xr[j] - mean) * (xr[j] - mean);
    var /= c;
    double rstd = 1.0 / sqrt(var + eps);
    for (long j = 0; j < c; j++) y[i * c + j] = (xr[j] - mean) * rstd * w[j] + b[j];
  }
}

static void ref_layernorm_bwd(double *dx, double *dw, double *db, const double *dy,
                              const double *x, const double *w, long n, long c, double eps) {
  for (long j = 0; j < c; j++) dw[j] = db[j] = 0;
  for (long i = 0; i < n; i++) {
    const double *xr = x + i * c, *dyr = dy + i * c;
    double mean = 0, var = 0;
    for (long j = 0; j < c; j++) mean += xr[j];
    mean /= c;
    for (long j = 0; j < c; j++) var += (xr[j] - mean) * (xr[j] - mean);
    var /= c;
    double rstd = 1.0 / sqrt(var + eps);
    double a = 0, bsum = 0;
    for (long j = 0; j < c; j++) {
      double norm = (xr[j] - mean) * rstd;
      a += dyr[j] * w[j];
      bsum += dyr[j] * w[j] * norm;
      dw[j] += dyr[j] * norm;
      db[j] += dyr[j];
    }
    for (long j = 0; j < c; j++) {
      double norm = (xr[j] - mean) * rstd;
      dx[i * c + j] = rstd * (dyr[j] * w[j] - a / c - norm * bsum / c);
    }
  }
}

// sum dy * f(x) for finite differences
static double dot_d(const double *a, const double *b, long n) {
  double s = 0;
  for (long i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

// convolution: im2col + rt_matmul (as codegen/kcall.c lowers conv2d) against a
// direct convolution

typedef struct ConvCase {
  long n, c, h, w, oc, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw;
} ConvCase;

// The input pixel tap (i, j) of output (y, x) reads, or -1 in the padding.
static long conv_tap(const ConvCase *k, long y, long x, long i, long j) {
  long iy = y * k->sh - k->pt + i * k->dh, ix = x * k->sw - k->pl + j * k->dw;
  return iy < 0 || iy >= k->h || ix < 0 || ix >= k->w ? -1 : iy * k->w + ix;
}

// y = conv(x, w) and, for dy, the adjoints dx and dw, all in double by the definition.
static void ref_conv(const ConvCase *k, long oh, long ow, const double *x, const double *w,
                     const double *dy, double *y, double *dx, double *dw) {
  long hw = k->h * k->w, ckk = k->c * k->kh * k->kw;
  memset(dx, 0, (size_t)(k->n * k->c * hw) * sizeof *dx);
  memset(dw, 0, (size_t)(k->oc * ckk) * sizeof *dw);
  for (long b = 0; b < k->n; b++)
    for (long o = 0; o < k->oc; o++)
      for (long py = 0; py < oh; py++)
        for (long px = 0; px < ow; px++) {
          long at = ((b * k->oc + o) * oh + py) * ow + px;
          double s = 0;
          for (long c = 0; c < k->c; c++)
            for (long i = 0; i < k->kh; i++)
              for (long j = 0; j < k->kw; j++) {
                long t = conv_tap(k, py, px, i, j);
                if (t < 0) continue;
                long xi = (b * k->c + c) * hw + t, wi = ((o * k->c + c) * k->kh + i) * k->kw + j;
                s += x[xi] * w[wi];
                dx[xi] += dy[at] * w[wi];
                dw[wi] += dy[at] * x[xi];
              }
          y[at] = s;
        }
}

static void test_conv2d(ConvCase k) {
  long oh = (k.h + k.pt + k.pb - k.dh * (k.kh - 1) - 1) / k.sh + 1;
  long ow = (k.w + k.pl + k.pr - k.dw * (k.kw - 1) - 1) / k.sw + 1;
  long nx = k.n * k.c * k.h * k.w, ckk = k.c * k.kh * k.kw, p = oh * ow;
  long nw = k.oc * ckk, ny = k.n * k.oc * p, ncol = k.n * ckk * p;
  float *x = frand(nx, -1, 1), *w = frand(nw, -1, 1), *dy = frand(ny, -1, 1);
  float *y = frand(ny, -1, 1), *col = frand(ncol, -1, 1), *dx = frand(nx, -1, 1);
  float *dw = frand(nw, -1, 1);
  double *xd = to_d(x, nx), *wd = to_d(w, nw), *dyd = to_d(dy, ny);
  double *ry = dbuf(ny), *rdx = dbuf(nx), *rdw = dbuf(nw);
  ref_conv(&k, oh, ow, xd, wd, dyd, ry, rdx, rdw);
  // The references agree: <conv(x, w), dy> = <x, dx> = <w, dw> (bilinear).
  double f = dot_d(ry, dyd, ny), fx = dot_d(xd, rdx, nx), fw = dot_d(wd, rdw, nw);
  char name[160];
  snprintf(name, sizeof name, "conv2d reference adjoints (%ld,%ld,%ld,%ld)*(%ld,%ld,%ld)", k.n,
           k.c, k.h, k.w, k.oc, k.kh, k.kw);
  check_dd(name, (double[]){fx, fw}, (double[]){f, f}, 2);

  long win[13] = {k.n * k.c, k.h, k.w, k.kh, k.kw, oh, ow, k.sh, k.sw, k.pt, k.pl, k.dh, k.dw};
#define CONV_ARGS win[0], win[1], win[2], win[3], win[4], win[5], win[6], win[7], win[8], win[9], \
                  win[10], win[11], win[12]
  snprintf(name, sizeof name, "conv2d (%ld,%ld,%ld,%ld)*(%ld,%ld,%ld) stride %ldx%ld pads "
           "%ld,%ld,%ld,%ld dilation %ldx%ld", k.n, k.c, k.h, k.w, k.oc, k.kh, k.kw, k.sh, k.sw,
           k.pt, k.pl, k.pb, k.pr, k.dh, k.dw);
  rt_im2col(col, x, CONV_ARGS);
  rt_matmul(y, w, col, k.n, k.oc, p, ckk, 0, 0, 0, ckk * p, k.oc * p);
  check(name, y, ry, ny);
  rt_matmul(col, w, dy, k.n, ckk, p, k.oc, 1, 0, 0, k.oc * p, ckk * p);
  rt_col2im(dx, col, CONV_ARGS);
  snprintf(name, sizeof name, "conv2d dx (col2im) (%ld,%ld,%ld,%ld)*(%ld,%ld,%ld)", k.n, k.c, k.h,
           k.w, k.oc, k.kh, k.kw);
  check(name, dx, rdx, nx);
  rt_im2col(col, x, CONV_ARGS);
  rt_matmul(dw, dy, col, k.n, k.oc, ckk, p, 0, 1, k.oc * p, ckk * p, 0);
  snprintf(name, sizeof name, "conv2d dw (%ld,%ld,%ld,%ld)*(%ld,%ld,%ld)", k.n, k.c, k.h, k.w,
           k.oc, k.kh, k.kw);
  check(name, dw, rdw, nw);
#undef CONV_ARGS
  free(x), free(w), free(dy), free(y), free(col), free(dx), free(dw);
  free(xd), free(wd), free(dyd), free(ry), free(rdx), free(rdw);
}

// max pooling against the definition: each window's first maximum (PyTorch's),
// the padding never; dx the sum of dy over the windows a pixel is the max of
typedef struct PoolCase {
  long nc, h, w, kh, kw, sh, sw, ph, pw, pb, pr;
} PoolCase;

static void test_maxpool(PoolCase k, int ties) {
  long oh = (k.h + k.ph + k.pb - k.kh) / k.sh + 1, ow = (k.w + k.pw + k.pr - k.kw) / k.sw + 1;
  long nx = k.nc * k.h * k.w, ny = k.nc * oh * ow;
  float *x = frand(nx, -1, 1), *dy = frand(ny, -1, 1), *y = frand(ny, -1, 1);
  float *dx = frand(nx, -1, 1);
  double *ry = dbuf(ny), *rdx = dbuf(nx);
  if (ties)   // few distinct values: windows with equal maxima
    for (long i = 0; i < nx; i++) x[i] = (float)(int)(x[i] * 2.0f);
  memset(rdx, 0, (size_t)nx * sizeof *rdx);
  for (long p = 0; p < k.nc; p++)
    for (long oy = 0; oy < oh; oy++)
      for (long ox = 0; ox < ow; ox++) {
        long best = -1;
        for (long i = 0; i < k.kh; i++)
          for (long j = 0; j < k.kw; j++) {
            long iy = oy * k.sh - k.ph + i, ix = ox * k.sw - k.pw + j;
            if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
            long at = (p * k.h + iy) * k.w + ix;
            if (best < 0 || x[at] > x[best]) best = at;
          }
        long o = (p * oh + oy) * ow + ox;
        ry[o] = x[best];
        rdx[best] += dy[o];
      }
  char name[160];
  snprintf(name, sizeof name, "maxpool2d %ldx(%ld,%ld) kernel %ldx%ld stride %ldx%ld pads "
           "%ld,%ld,%ld,%ld%s", k.nc, k.h, k.w, k.kh, k.kw, k.sh, k.sw, k.ph, k.pw, k.pb, k.pr,
           ties ? " with ties" : "");
  rt_maxpool2d(y, x, k.nc, k.h, k.w, k.kh, k.kw, oh, ow, k.sh, k.sw, k.ph, k.pw);
  check(name, y, ry, ny);
  rt_maxpool2d_bwd(dx, dy, x, k.nc, k.h, k.w, k.kh, k.kw, oh, ow, k.sh, k.sw, k.ph, k.pw);
  strcat(name, " dx");
  check(name, dx, rdx, nx);
  free(x), free(dy), free(y), free(dx), free(ry), free(rdx);
}

static void test_maxpools(void) {
  // nc h w kh kw sh sw ph pw pb pr
  for (int ties = 0; ties < 2; ties++) {
    test_maxpool((PoolCase){6, 8, 8, 3, 3, 2, 2, 1, 1, 1, 1}, ties);    // ResNet's stem
    test_maxpool((PoolCase){2, 7, 9, 2, 2, 2, 2, 0, 0, 0, 0}, ties);    // 2x2, a ragged edge
    test_maxpool((PoolCase){3, 5, 6, 3, 2, 1, 1, 2, 1, 0, 1}, ties);    // overlapping, uneven pads
    test_maxpool((PoolCase){1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0}, ties);
    test_maxpool((PoolCase){64, 34, 30, 3, 3, 2, 2, 1, 1, 1, 1}, ties); // the parallel paths
  }
  // a NaN wins its windows (and takes their gradient); the last of two NaNs does
  float x[4] = {1, NAN, 3, NAN}, dy[1] = {2}, y[1], dx[4];
  rt_maxpool2d(y, x, 1, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0);
  rt_maxpool2d_bwd(dx, dy, x, 1, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0);
  double rdx[4] = {0, 0, 0, 2};
  printf("maxpool2d with NaNs: %g%s\n", y[0], isnan(y[0]) ? "" : "  FAILED");
  if (isnan(y[0])) n_passed++;
  else n_failed++;
  check("maxpool2d with NaNs dx", dx, rdx, 4);
}

static void test_conv2ds(void) {
  // n c h w oc kh kw sh sw pt pl pb pr dh dw
  test_conv2d((ConvCase){2, 3, 16, 16, 32, 4, 4, 4, 4, 0, 0, 0, 0, 1, 1});  // ViT's patches
  test_conv2d((ConvCase){1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1});
  test_conv2d((ConvCase){2, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1});     // "same" padding
  test_conv2d((ConvCase){3, 2, 11, 8, 4, 3, 2, 2, 3, 1, 0, 2, 1, 1, 1});    // uneven everything
  test_conv2d((ConvCase){2, 4, 10, 12, 3, 3, 3, 1, 2, 2, 1, 0, 2, 2, 3});   // dilated
  test_conv2d((ConvCase){1, 2, 6, 6, 3, 5, 5, 3, 3, 2, 2, 2, 2, 1, 1});     // taps past the edge
  test_conv2d((ConvCase){4, 16, 34, 30, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}); // the parallel paths
}

// y = x / sqrt(mean(x^2) + eps) * w, in double
static void ref_rmsnorm_row(double *y, const double *x, const double *w, long c, double eps) {
  double ms = 0;
  for (long j = 0; j < c; j++) ms += x[j] * x[j];
  double r = 1.0 / sqrt(ms / c + eps);
  for (long j = 0; j < c; j++) y[j] = x[j] * r * w[j];
}

// The kernels against the double reference; the backward against central
// differences of that reference (a row's inputs change only that row).
static void test_rmsnorm(long n, long c) {
  float eps = 1e-6f;
  float *x = frand(n * c, -2, 2), *w = frand(c, 0.5f, 1.5f), *dy = frand(n * c, -1, 1);
  for (long i = 0; i < n; i++)  // rows of different scales, some off zero
    for (long j = 0; j < c; j++) x[i * c + j] = x[i * c + j] * (1 + i % 3) + (float)(i % 2);
  float *y = fbuf(n * c), *dx = fbuf(n * c), *dw = frand(c, -1, 1);
  double *xd = to_d(x, n * c), *wd = to_d(w, c), *dyd = to_d(dy, n * c);
  double *ry = dbuf(n * c), *fdx = dbuf(n * c), *fdw = dbuf(c), *tmp = dbuf(c), h = 1e-6;
  for (long i = 0; i < n; i++) {
    double *xr = xd + i * c;
    ref_rmsnorm_row(ry + i * c, xr, wd, c, eps);
    for (long j = 0; j < c; j++) {
      double s = xr[j];
      xr[j] = s + h; ref_rmsnorm_row(tmp, xr, wd, c, eps); double lp = dot_d(tmp, dyd + i * c, c);
      xr[j] = s - h; ref_rmsnorm_row(tmp, xr, wd, c, eps); double lm = dot_d(tmp, dyd + i * c, c);
      xr[j] = s;
      fdx[i * c + j] = (lp - lm) / (2 * h);
    }
  }
  for (long i = 0; i < n; i++)  // y is linear in w: dw[j] = sum_rows dy * y / w
    for (long j = 0; j < c; j++) fdw[j] += dyd[i * c + j] * ry[i * c + j] / wd[j];
  char name[96];
  rt_rmsnorm_fwd(y, x, w, n, c, eps);
  snprintf(name, sizeof name, "rmsnorm_fwd (%ld,%ld)", n, c);
  check(name, y, ry, n * c);
  rt_rmsnorm_bwd(dx, dw, dy, x, w, n, c, eps);
  snprintf(name, sizeof name, "rmsnorm_bwd dx (%ld,%ld) vs finite differences", n, c);
  check(name, dx, fdx, n * c);
  snprintf(name, sizeof name, "rmsnorm_bwd dw (%ld,%ld)", n, c);
  check(name, dw, fdw, c);
  free(x); free(w); free(dy); free(y); free(dx); free(dw);
  free(xd); free(wd); free(dyd); free(ry); free(fdx); free(fdw); free(tmp);
}

// rope against a double reference (the rotation written out), and the
// inverse rotation taking it back to x.
static void test_rope(long rows, long t, long hs, float theta) {
  long n = rows * t * hs, half = hs / 2;
  float *x = frand(n, -2, 2), *y = fbuf(n), *back = fbuf(n);
  double *ref = dbuf(n);
  for (long r = 0; r < rows; r++)
    for (long p = 0; p < t; p++)
      for (long i = 0; i < half; i++) {
        const float *xr = x + (r * t + p) * hs;
        double a = p / pow(theta, 2.0 * i / hs), x1 = xr[i], x2 = xr[i + half];
        ref[(r * t + p) * hs + i] = x1 * cos(a) - x2 * sin(a);
        ref[(r * t + p) * hs + i + half] = x1 * sin(a) + x2 * cos(a);
      }
  char name[96];
  rt_rope(y, x, rows, t, hs, theta, 0);
  snprintf(name, sizeof name, "rope (%ld,%ld,%ld) theta %g", rows, t, hs, theta);
  check(name, y, ref, n);
  rt_rope(back, y, rows, t, hs, theta, 1);
  double *xd = to_d(x, n);
  snprintf(name, sizeof name, "rope inverse (%ld,%ld,%ld)", rows, t, hs);
  check(name, back, xd, n);
  free(x), free(y), free(back), free(ref), free(xd);
}

static void test_layernorm(long n, long c, int fd) {
  float eps = 1e-5f;
  float *x = frand(n * c, -2, 2), *w = frand(c, 0.5f, 1.5f), *b = frand(c, -1, 1);
  float *dy = frand(n * c, -1, 1);
  for (long i = 0; i < n; i++)  // give each row its own offset and scale
    for (long j = 0; j < c; j++) x[i * c + j] = x[i * c + j] * (1 + i % 3) + (float)(i % 5);
  float *y = fbuf(n * c), *dx = fbuf(n * c), *dw = frand(c, -1, 1), *db = frand(c, -1, 1);
  double *xd = to_d(x, n * c), *wd = to_d(w, c), *bd = to_d(b, c), *dyd = to_d(dy, n * c);
  double *ry = dbuf(n * c), *rdx = dbuf(n * c), *rdw = dbuf(c), *rdb = dbuf(c);
  ref_layernorm_fwd(ry, xd, wd, bd, n, c, eps);
  ref_layernorm_bwd(rdx, rdw, rdb, dyd, xd, wd, n, c, eps);
  char name[96];
  rt_layernorm_fwd(y, x, w, b, n, c, eps);
  snprintf(name, sizeof name, "layernorm_fwd (%ld,%ld)", n, c);
  check(name, y, ry, n * c);
  rt_layernorm_bwd(dx, dw, db, dy, x, w, n, c, eps);
  snprintf(name, sizeof name, "layernorm_bwd dx (%ld,%ld)", n, c);
  check(name, dx, rdx, n * c);
  snprintf(name, sizeof name, "layernorm_bwd dw (%ld,%ld)", n, c);
  check(name, dw, rdw, c);
  snprintf(name, sizeof name, "layernorm_bwd db (%ld,%ld)", n, c);
  check(name, db, rdb, c);
  if (fd) {  // the reference backward against finite differences
    double *tmp = dbuf(n * c), *fdx = dbuf(n * c), *fdw = dbuf(c), *fdb = dbuf(c);
    double h = 1e-6;
    for (long i = 0; i < n * c; i++) {
      double s = xd[i];
      xd[i] = s + h; ref_layernorm_fwd(tmp, xd, wd, bd, n, c, eps); double lp = dot_d(tmp, dyd, n * c);
      xd[i] = s - h; ref_layernorm_fwd(tmp, xd, wd, bd, n, c, eps); double lm = dot_d(tmp, dyd, n * c);
      xd[i] = s;
      fdx[i] = (lp - lm) / (2 * h);
    }
    for (long j = 0; j < c; j++) {
      double s = wd[j];
      wd[j] = s + h; ref_layernorm_fwd(tmp, xd, wd, bd, n, c, eps); double lp = dot_d(tmp, dyd, n * c);
      wd[j] = s - h; ref_layernorm_fwd(tmp, xd, wd, bd, n, c, eps); double lm = dot_d(tmp, dyd, n * c);
      wd[j] = s;
      fdw[j] = (lp - lm) / (2 * h);
      s = bd[j];
      bd[j] = s + h; ref_layernorm_fwd(tmp, xd, wd, bd, n, c, eps); lp = dot_d(tmp, dyd, n * c);
      bd[j] = s - h; ref_layernorm_fwd(tmp, xd, wd, bd, n, c, eps); lm = dot_d(tmp, dyd, n * c);
      bd[j] = s;
      fdb[j] = (lp - lm) / (2 * h);
    }
    check_dd("layernorm reference dx vs finite differences", rdx, fdx, n * c);
    check_dd("layernorm reference dw vs finite differences", rdw, fdw, c);
    check_dd("layernorm reference db vs finite differences", rdb, fdb, c);
    free(tmp); free(fdx); free(fdw); free(fdb);
  }
  free(x); free(w); free(b); free(dy); free(y); free(dx); free(dw); free(db);
  free(xd); free(wd); free(bd); free(dyd); free(ry); free(rdx); free(rdw); free(rdb);
}

// causal: the rows are (n / c) square matrices, and the reference masks key j > i % c with
// -inf (the scores' exp 0), as an exporter's mask does
static void test_softmax(long n, long c, int causal) {
  float *x = frand(n * c, -8, 8), *dy = frand(n * c, -1, 1), *y = fbuf(n * c), *dx = fbuf(n * c);
  double *ry = dbuf(n * c), *rdx = dbuf(n * c);
  for (long i = 0; i < n; i++) {
    double maxv = -INFINITY, sum = 0, dot = 0, xm[c];
    for (long j = 0; j < c; j++) xm[j] = causal && j > i % c ? -INFINITY : x[i * c + j];
    for (long j = 0; j < c; j++) maxv = fmax(maxv, xm[j]);
    for (long j = 0; j < c; j++) sum += exp(xm[j] - maxv);
    for (long j = 0; j < c; j++) ry[i * c + j] = exp(xm[j] - maxv) / sum;
    for (long j = 0; j < c; j++) dot += dy[i * c + j] * ry[i * c + j];
    for (long j = 0; j < c; j++) rdx[i * c + j] = ry[i * c + j] * (dy[i * c + j] - dot);
  }
  char name[96];
  rt_softmax_fwd(y, x, n, c, causal);
  snprintf(name, sizeof name, "softmax_fwd (%ld,%ld)%s", n, c, causal ? " causal" : "");
  check(name, y, ry, n * c);
  for (long i = 0; causal && i < n; i++)   // exactly 0 past the diagonal
    for (long j = i % c + 1; j < c; j++)
      if (y[i * c + j] != 0.0f) {
        printf("%s: y[%ld][%ld] = %g past the diagonal  FAILED\n", name, i, j, y[i * c + j]);
        n_failed++;
        i = n;
        break;
      }
  // bwd from the float y the kernel produced (as a model would)
  float *yf = fbuf(n * c);
  for (long i = 0; i < n * c; i++) yf[i] = (float)ry[i];
  rt_softmax_bwd(dx, dy, yf, n, c);
  snprintf(name, sizeof name, "softmax_bwd (%ld,%ld)%s", n, c, causal ? " causal" : "");
  check(name, dx, rdx, n * c);
  free(x); free(dy); free(y); free(dx); free(ry); free(rdx); free(yf);
}

// The additive mask of key j of head h (tk keys), as Hugging Face writes a
// padding mask: the lowest float where keep drops the key (a window that
// keeps none is left with equal scores, the lowest float swamping them), 0
// elsewhere.
static double ref_keep(const int *keep, long heads, long h, long tk, long j) {
  return keep && !keep[h / heads * tk + j] ? -FLT_MAX : 0.0;
}

// An attention case: bh heads of t queries and tk keys (0: t) of size hs;
// with heads > 0 a key-padding mask of bh / heads rows, with nb > 0 a bias
// of nb (t, tk) tables, head h's the table h / bdiv % nb (bdiv 0: 1); fd:
// the reference's gradients against finite differences too.
typedef struct att_case {
  long bh, t, tk, hs;
  int causal;
  long heads, nb, bdiv;
  int fd;
} att_case;

// A case's optional operands in double, as the reference reads them.
typedef struct att_opt {
  const int *keep;
  const double *bias;
} att_opt;

// The score of query i and key j of head h past the scaled dot product: the
// bias and the padding mask.
static double ref_extra(const att_case *c, att_opt o, long h, long i, long j) {
  long b = h / c->bdiv % (c->nb ? c->nb : 1);
  return ref_keep(o.keep, c->heads ? c->heads : c->bh, h, c->tk, j) +
         (o.bias ? o.bias[(b * c->t + i) * c->tk + j] : 0.0);
}

// out (bh, t, hs) = softmax(q k^T / sqrt(hs) + bias + padding mask, causal) v;
// lse (bh, t, NULL: not wanted) each query's log-sum-exp of those scores (of
// zeros where the mask keeps none of its keys)
static void ref_attention_fwd(double *out, double *lse, const double *q, const double *k,
                              const double *v, const att_case *c, att_opt o) {
  long t = c->t, tk = c->tk, hs = c->hs;
  double *p = dbuf(tk);
  double scale = 1.0 / sqrt((double)hs);
  for (long h = 0; h < c->bh; h++)
    for (long i = 0; i < t; i++) {
      const double *qi = q + (h * t + i) * hs;
      long jn = c->causal ? i + 1 : tk;
      double maxv = -INFINITY, sum = 0;
      for (long j = 0; j < jn; j++) {
        p[j] = scale * dot_d(qi, k + (h * tk + j) * hs, hs) + ref_extra(c, o, h, i, j);
        maxv = fmax(maxv, p[j]);
      }
      for (long j = 0; j < jn; j++) sum += (p[j] = exp(p[j] - maxv));
      // a window that keeps no key: its scores as the kernels see them, all 0
      if (lse) lse[h * t + i] = maxv <= -FLT_MAX / 2 ? log((double)jn) : maxv + log(sum);
      for (long d = 0; d < hs; d++) {
        double s = 0;
        for (long j = 0; j < jn; j++) s += p[j] / sum * v[(h * tk + j) * hs + d];
        out[(h * t + i) * hs + d] = s;
      }
    }
  free(p);
}

// ... and its gradients; ds (bh, t, tk): the scores' after the scale
static void ref_attention_bwd(double *dq, double *dk, double *dv, double *ds_all,
                              const double *dout, const double *q, const double *k,
                              const double *v, const att_case *c, att_opt o) {
  long t = c->t, tk = c->tk, hs = c->hs, bh = c->bh;
  double *p = dbuf(tk), *dp = dbuf(tk);
  double scale = 1.0 / sqrt((double)hs);
  for (long i = 0; i < bh * t * hs; i++) dq[i] = 0;
  for (long i = 0; i < bh * tk * hs; i++) dk[i] = dv[i] = 0;
  for (long i = 0; i < bh * t * tk; i++) ds_all[i] = 0;
  for (long h = 0; h < bh; h++)
    for (long i = 0; i < t; i++) {
      const double *qi = q + (h * t + i) * hs, *doi = dout + (h * t + i) * hs;
      long jn = c->causal ? i + 1 : tk;
      double maxv = -INFINITY, sum = 0, pdp = 0;
      for (long j = 0; j < jn; j++) {
        p[j] = scale * dot_d(qi, k + (h * tk + j) * hs, hs) + ref_extra(c, o, h, i, j);
        maxv = fmax(maxv, p[j]);
      }
      for (long j = 0; j < jn; j++) sum += (p[j] = exp(p[j] - maxv));
      for (long j = 0; j < jn; j++) {
        p[j] /= sum;
        dp[j] = dot_d(doi, v + (h * tk + j) * hs, hs);
        pdp += p[j] * dp[j];
        for (long d = 0; d < hs; d++) dv[(h * tk + j) * hs + d] += p[j] * doi[d];
      }
      for (long j = 0; j < jn; j++) {
        double ds = p[j] * (dp[j] - pdp);
        ds_all[(h * t + i) * tk + j] = ds;
        for (long d = 0; d < hs; d++) {
          dq[(h * t + i) * hs + d] += scale * ds * k[(h * tk + j) * hs + d];
          dk[(h * tk + j) * hs + d] += scale * ds * qi[d];
        }
      }
    }
  free(p); free(dp);
}

// A key-padding mask of rows x tk: row 0 keeps every key, row 1 none, the
// others a scattered pattern (each window of a causal mask before the first
// kept key keeps none). With `every`, each window keeps a key (key 0).
static int *padding_mask(long rows, long tk, int every) {
  int *m = malloc((size_t)(rows * tk) * sizeof *m);
  for (long r = 0; r < rows; r++)
    for (long j = 0; j < tk; j++)
      m[r * tk + j] = r == 0 || (every && j == 0) ? 1 : r == 1 ? 0 : (j * 7 + r * 3) % 5 > 1;
  return m;
}

// The kernels against the reference. A window whose keys are all masked
// attends to them alike, and its gradient is PyTorch's (the softmax's at
// equal scores, as if the mask's lowest float did not swamp them), not the
// flat function's 0, so the finite differences run on masks that leave every
// window a key.
static void test_attention(att_case c) {
  c.tk = c.tk ? c.tk : c.t;
  c.bdiv = c.bdiv ? c.bdiv : 1;
  long bh = c.bh, t = c.t, tk = c.tk, hs = c.hs, nb = c.nb;
  long n = bh * t * hs, nk = bh * tk * hs, nd = bh * t * tk, nbias = nb * t * tk;
  float *q = frand(n, -2, 2), *k = frand(nk, -2, 2), *v = frand(nk, -1, 1), *dout = frand(n, -1, 1);
  float *out = fbuf(n), *lse = fbuf(bh * t), *dq = frand(n, -1, 1), *dk = frand(nk, -1, 1), *dv = frand(nk, -1, 1);
  float *bias = nb ? frand(nbias, -2, 2) : NULL, *ds = nb ? frand(nd, -1, 1) : NULL;
  double *qd = to_d(q, n), *kd = to_d(k, nk), *vd = to_d(v, nk), *dod = to_d(dout, n);
  double *rout = dbuf(n), *rlse = dbuf(bh * t), *rdq = dbuf(n), *rdk = dbuf(nk), *rdv = dbuf(nk), *rds = dbuf(nd);
  double *biasd = nb ? to_d(bias, nbias) : NULL;
  int *keep = c.heads ? padding_mask(bh / c.heads, tk, c.fd) : NULL;
  att_opt o = {keep, biasd};
  ref_attention_fwd(rout, rlse, qd, kd, vd, &c, o);
  ref_attention_bwd(rdq, rdk, rdv, rds, dod, qd, kd, vd, &c, o);
  char cs[96], name[192];
  snprintf(cs, sizeof cs, "bh %ld t %ld tk %ld hs %ld %s%s%s", bh, t, tk, hs,
           c.causal ? "causal" : "non-causal", keep ? ", padded" : "", nb ? ", bias" : "");
  long heads = c.heads ? c.heads : bh, bmod = nb ? nb : 1;
  rt_attention_fwd(out, lse, q, k, v, keep, bias, bh, t, tk, hs, heads, c.bdiv, bmod, c.causal);
  snprintf(name, sizeof name, "attention_fwd %s", cs);
  check(name, out, rout, n);
  snprintf(name, sizeof name, "attention_fwd lse %s", cs);
  check(name, lse, rlse, bh * t);
  rt_attention_bwd(dq, dk, dv, ds, dout, q, k, v, out, lse, keep, bias, bh, t, tk, hs, heads,
                   c.bdiv, bmod, c.causal);
  const char *what[4] = {"dq", "dk", "dv", "dscores"};
  float *got[4] = {dq, dk, dv, ds};
  double *want[4] = {rdq, rdk, rdv, rds};
  long sizes[4] = {n, nk, nk, nbias};
  for (int w = 0; w < (nb ? 4 : 3); w++) {
    snprintf(name, sizeof name, "attention_bwd %s %s", what[w], cs);
    check(name, got[w], want[w], w < 3 ? sizes[w] : nd);
  }
  if (c.fd) { // the reference's gradients against its forward: q, k, v and the bias
    double *tmp = dbuf(n), *arr[4] = {qd, kd, vd, biasd};
    double h = 1e-6;
    for (int w = 0; w < (nb ? 4 : 3); w++) {
      double *fds = dbuf(sizes[w]), *a = arr[w];
      for (long i = 0; i < sizes[w]; i++) {
        double s0 = a[i];
        a[i] = s0 + h; ref_attention_fwd(tmp, NULL, qd, kd, vd, &c, o);
        double lp = dot_d(tmp, dod, n);
        a[i] = s0 - h; ref_attention_fwd(tmp, NULL, qd, kd, vd, &c, o);
        double lm = dot_d(tmp, dod, n);
        a[i] = s0;
        fds[i] = (lp - lm) / (2 * h);
      }
      double *ref = want[w];
      if (w == 3) { // the bias's gradient: the scores' summed over the heads sharing it
        ref = dbuf(nbias);
        for (long i = 0; i < nd; i++)
          ref[i / (t * tk) / c.bdiv % nb * t * tk + i % (t * tk)] += rds[i];
      }
      snprintf(name, sizeof name, "attention reference %s vs finite differences (%s)",
               w == 3 ? "dbias" : what[w], cs);
      check_dd(name, ref, fds, sizes[w]);
      if (w == 3) free(ref);
      free(fds);
    }
    free(tmp);
  }
  free(q); free(k); free(v); free(dout); free(out); free(lse); free(dq); free(dk); free(dv);
  free(qd); free(kd); free(vd); free(dod); free(rout); free(rlse); free(rdq); free(rdk); free(rdv);
  free(keep); free(bias); free(ds); free(rds); free(biasd);
}

#define IGNORE (-100)  // the ignored target of the cross-entropy tests (HF's)

static long counted(const int *targets, long n) {
  long c = 0;
  for (long i = 0; i < n; i++) c += targets[i] != IGNORE;
  return c;
}

// the mean over rows whose target is not IGNORE
static double ref_crossentropy(const double *logits, const int *targets, long n, long v) {
  double total = 0;
  for (long i = 0; i < n; i++) {
    if (targets[i] == IGNORE) continue;
    const double *r = logits + i * v;
    double maxv = -INFINITY, sum = 0;
    for (long j = 0; j < v; j++) maxv = fmax(maxv, r[j]);
    for (long j = 0; j < v; j++) sum += exp(r[j] - maxv);
    total += maxv + log(sum) - r[targets[i]];
  }
  return counted(targets, n) ? total / counted(targets, n) : 0.0;
}

// rt_add_layernorm: binary's add, then layernorm_fwd of the sum, to the bit
static void test_add_layernorm(long n, long c) {
  float *a = frand(n * c, -2, 3), *b = frand(n * c, -1, 1), *w = frand(c, -1, 1);
  float *bias = frand(c, -1, 1), *r = fbuf(n * c), *y = fbuf(n * c), *r2 = fbuf(n * c);
  float *y2 = fbuf(n * c);
  long shape[1] = {n * c}, stride[1] = {1};
  rt_binary(RT_ADD, r, a, b, 1, shape, stride, stride);
  rt_layernorm_fwd(y, r, w, bias, n, c, 1e-5f);
  rt_add_layernorm(r2, y2, a, b, w, bias, n, c, 1e-5f);
  char name[96];
  snprintf(name, sizeof name, "add_layernorm sum (%ld,%ld)", n, c);
  check_same(name, r2, r, n * c);
  snprintf(name, sizeof name, "add_layernorm norm (%ld,%ld)", n, c);
  check_same(name, y2, y, n * c);
  free(a), free(b), free(w), free(bias), free(r), free(y), free(r2), free(y2);
}

static void test_crossentropy(long n, long v, int fd) {
  float *logits = frand(n * v, -6, 6), *dl = fbuf(n * v), loss = -1.0f, dloss = 0.7f;
  int *tg = irand(n, v);
  for (long i = 3; i < n; i += 4) tg[i] = IGNORE;  // every fourth row ignored
  double *ld = to_d(logits, n * v), *rdl = dbuf(n * v);
  double rloss = ref_crossentropy(ld, tg, n, v);
  long count = counted(tg, n);
  for (long i = 0; i < n; i++) {
    double maxv = -INFINITY, sum = 0;
    for (long j = 0; j < v; j++) maxv = fmax(maxv, ld[i * v + j]);
    for (long j = 0; j < v; j++) sum += exp(ld[i * v + j] - maxv);
    for (long j = 0; j < v; j++)
      rdl[i * v + j] = tg[i] == IGNORE ? 0.0
                       : (exp(ld[i * v + j] - maxv) / sum - (j == tg[i])) * dloss / count;
  }
  char name[96];
  rt_crossentropy_fwd(&loss, logits, tg, n, v, v, IGNORE);
  snprintf(name, sizeof name, "crossentropy_fwd (%ld,%ld)", n, v);
  check(name, &loss, &rloss, 1);
  rt_crossentropy_bwd(dl, &dloss, logits, tg, n, v, v, IGNORE);
  snprintf(name, sizeof name, "crossentropy_bwd (%ld,%ld)", n, v);
  check(name, dl, rdl, n * v);
  // in place, the gradient over the logits (passes/memplan.c's pass_in_place): the same bits
  float *over = fbuf(n * v);
  memcpy(over, logits, (size_t)(n * v) * sizeof *over);
  rt_crossentropy_bwd(over, &dloss, over, tg, n, v, v, IGNORE);
  snprintf(name, sizeof name, "crossentropy_bwd in place (%ld,%ld)", n, v);
  check_same(name, over, dl, n * v);
  // both in one pass, over the logits as a program runs it: crossentropy_fwd's loss and
  // crossentropy_bwd's gradient to the bit; in eval mode the loss alone, the logits untouched
  float floss = -1.0f;
  memcpy(over, logits, (size_t)(n * v) * sizeof *over);
  rt_crossentropy_fused(&floss, over, over, tg, n, v, v, IGNORE, dloss);
  snprintf(name, sizeof name, "crossentropy_fused loss (%ld,%ld)", n, v);
  check_same(name, &floss, &loss, 1);
  snprintf(name, sizeof name, "crossentropy_fused gradient, in place (%ld,%ld)", n, v);
  check_same(name, over, dl, n * v);
  memcpy(over, logits, (size_t)(n * v) * sizeof *over);
  floss = -1.0f;
  rt_eval_mode = 1;
  rt_crossentropy_fused(&floss, over, over, tg, n, v, v, IGNORE, dloss);
  rt_eval_mode = 0;
  snprintf(name, sizeof name, "crossentropy_fused loss, eval mode (%ld,%ld)", n, v);
  check_same(name, &floss, &loss, 1);
  snprintf(name, sizeof name, "crossentropy_fused in eval mode leaves the logits (%ld,%ld)", n, v);
  check_same(name, over, logits, n * v);
  // the vocabulary-parallel kernels on one rank (the whole vocabulary): the same
  // loss and gradient, and each row's logsumexp kept for backward
  float vloss = -1.0f, *stats = fbuf(2 * n), *vdl = fbuf(n * v);
  double *rlse = dbuf(n);
  for (long i = 0; i < n; i++) {
    double maxv = -INFINITY, sum = 0;
    for (long j = 0; j < v; j++) maxv = fmax(maxv, ld[i * v + j]);
    for (long j = 0; j < v; j++) sum += exp(ld[i * v + j] - maxv);
    rlse[i] = maxv + log(sum);
  }
  rt_vp_crossentropy_fwd(RT_AXIS_TP, &vloss, stats, logits, tg, n, v, v, IGNORE);
  snprintf(name, sizeof name, "vp_crossentropy_fwd, one rank (%ld,%ld)", n, v);
  check(name, &vloss, &rloss, 1);
  snprintf(name, sizeof name, "vp_crossentropy_fwd row logsumexp (%ld,%ld)", n, v);
  check(name, stats, rlse, n);
  rt_vp_crossentropy_bwd(RT_AXIS_TP, vdl, &dloss, logits, tg, stats, n, v, v, IGNORE);
  snprintf(name, sizeof name, "vp_crossentropy_bwd, one rank (%ld,%ld)", n, v);
  check(name, vdl, rdl, n * v);
  memcpy(over, logits, (size_t)(n * v) * sizeof *over);
  rt_vp_crossentropy_bwd(RT_AXIS_TP, over, &dloss, over, tg, stats, n, v, v, IGNORE);
  snprintf(name, sizeof name, "vp_crossentropy_bwd in place, one rank (%ld,%ld)", n, v);
  check_same(name, over, vdl, n * v);
  free(over);
  // ... and over a vocabulary padded by 3 columns that hold large values: the
  // padding takes no part, and its gradient is zero
  long vp = v + 3;
  float *padded = fbuf(n * vp), *pdl = fbuf(n * vp);
  double *rpdl = dbuf(n * vp);
  for (long i = 0; i < n; i++)
    for (long j = 0; j < vp; j++) {
      padded[i * vp + j] = j < v ? logits[i * v + j] : 40.0f;
      rpdl[i * vp + j] = j < v ? rdl[i * v + j] : 0.0;
    }
  rt_vp_crossentropy_fwd(RT_AXIS_TP, &vloss, stats, padded, tg, n, vp, v, IGNORE);
  snprintf(name, sizeof name, "vp_crossentropy_fwd, padded vocabulary (%ld,%ld+3)", n, v);
  check(name, &vloss, &rloss, 1);
  rt_vp_crossentropy_bwd(RT_AXIS_TP, pdl, &dloss, padded, tg, stats, n, vp, v, IGNORE);
  snprintf(name, sizeof name, "vp_crossentropy_bwd, padded vocabulary (%ld,%ld+3)", n, v);
  check(name, pdl, rpdl, n * vp);
  // the one-rank kernels over the padded rows (bf16 programs pad the vocabulary,
  // passes/tp.c): the unpadded loss and gradient to the bit, zero on the padding
  float ploss = -1.0f, *want = fbuf(n * vp);
  for (long i = 0; i < n; i++)
    for (long j = 0; j < vp; j++) want[i * vp + j] = j < v ? dl[i * v + j] : 0.0f;
  rt_crossentropy_fwd(&ploss, padded, tg, n, vp, v, IGNORE);
  snprintf(name, sizeof name, "crossentropy_fwd, padded vocabulary (%ld,%ld+3)", n, v);
  check_same(name, &ploss, &loss, 1);
  for (long i = 0; i < n * vp; i++) pdl[i] = NAN;
  rt_crossentropy_bwd(pdl, &dloss, padded, tg, n, vp, v, IGNORE);
  snprintf(name, sizeof name, "crossentropy_bwd, padded vocabulary (%ld,%ld+3)", n, v);
  check_same(name, pdl, want, n * vp);
  free(want);
  free(padded); free(pdl); free(rpdl);
  free(stats); free(vdl); free(rlse);
  if (fd) {
    double *fdl = dbuf(n * v), h = 1e-6;
    for (long i = 0; i < n * v; i++) {
      double s = ld[i];
      ld[i] = s + h; double lp = ref_crossentropy(ld, tg, n, v);
      ld[i] = s - h; double lm = ref_crossentropy(ld, tg, n, v);
      ld[i] = s;
      fdl[i] = dloss * (lp - lm) / (2 * h);
    }
    check_dd("crossentropy reference vs finite differences", rdl, fdl, n * v);
    free(fdl);
  }
  free(logits); free(dl); free(tg); free(ld); free(rdl);
}

// ---------------------------------------------------------------------------
// tensor parallelism (runtime/dist_cpu.c)

// rt_tp_take / rt_tp_place: rank r's part of [outer][pieces][tp][chunk] is
// [outer][pieces][chunk] of its r-th chunks; placing every part rebuilds the
// whole. rt_tp_slice and rt_embedding_vp_fwd on a pretend rank 1 of 3 (no
// collective involved): its slice, and its rows of the table only (and of its
// gradient, rt_embedding_vp_bwd); the table over a grid's columns: the rows of
// the rank's column.
static void test_tensor_parallel(void) {
  long outer = 3, pieces = 2, tp = 3, chunk = 5, part_n = outer * pieces * chunk;
  float *whole = frand(part_n * tp, -1, 1), *back = fbuf(part_n * tp), *part = fbuf(part_n);
  int ok = 1;
  for (int r = 0; r < tp; r++) {
    rt_tp_take(part, whole, outer, pieces, chunk, r, (int)tp);
    for (long o = 0; o < outer * pieces; o++)
      for (long c = 0; c < chunk; c++)
        ok &= part[o * chunk + c] == whole[(o * tp + r) * chunk + c];
    rt_tp_place(back, part, outer, pieces, chunk, r, (int)tp);
  }
  printf("tp_take: rank r's chunks of every piece: %s\n", ok ? "ok" : "WRONG  FAILED");
  ok ? n_passed++ : n_failed++;
  check_same("tp_place of every rank's part gives the whole back", back, whole, part_n * tp);

  rt_dist_state saved = rt_dist;
  rt_dist.tp = (int)tp;
  rt_dist.tp_rank = 1;
  rt_tp_slice(RT_AXIS_TP, part, whole, outer, pieces, chunk);
  rt_tp_take(back, whole, outer, pieces, chunk, 1, (int)tp);
  check_same("tp_slice: this rank's part", part, back, part_n);
  long n = 50, v = 4, c = 6;   // this rank: rows 4..7 of a 12-row table
  float *w = frand(v * c, -1, 1), *out = fbuf(n * c);
  int *idx = irand(n, v * tp);
  rt_embedding_vp_fwd(RT_AXIS_TP, out, w, idx, n, c, v);
  double *eg = dbuf(n * c), *er = dbuf(n * c);
  for (long i = 0; i < n; i++)
    for (long j = 0; j < c; j++) {
      eg[i * c + j] = out[i * c + j];
      er[i * c + j] = idx[i] >= v && idx[i] < 2 * v ? w[(idx[i] - v) * c + j] : 0.0;
    }
  check_dd("embedding_vp_fwd: this rank's rows, zeros for the others", eg, er, n * c);
  // its backward: rows 4..7 of the whole table's gradient, to the bit (the same sums in the
  // same order), and nothing written past them
  float *dout = frand(n * c, -1, 1), *dwhole = fbuf(v * tp * c), *dmine = fbuf(v * c + 1);
  dmine[v * c] = 7.0f;
  rt_embedding_bwd(dwhole, dout, idx, n, v * tp, c);
  rt_embedding_vp_bwd(RT_AXIS_TP, dmine, dout, idx, n, v, c);
  check_same("embedding_vp_bwd: this rank's rows of embedding_bwd's", dmine, dwhole + v * c,
             v * c);
  check_same("embedding_vp_bwd: nothing past its rows", dmine + v * c, (float[]){7.0f}, 1);
  free(dout), free(dwhole), free(dmine);
  // the same table over a 3 x 3 grid's columns, from the rank at row 2, column 1: rows 4..7
  rt_dist.tp = 1, rt_dist.q = (int)tp, rt_dist.tp_rank = 2 * (int)tp + 1;
  rt_embedding_vp_fwd(RT_AXIS_COL, out, w, idx, n, c, v);
  for (long i = 0; i < n * c; i++)
    eg[i] = out[i];
  check_dd("embedding_vp_fwd over the grid's columns: its column's rows", eg, er, n * c);
  rt_dist = saved;
  free(whole); free(back); free(part); free(w); free(out); free(idx);
  free(eg); free(er);
}

// ---------------------------------------------------------------------------
// optimizers

static void test_optimizers(void) {
  long n = 20003, decay_n = 12345;  // weight decay on [0, decay_n) only (not a block edge)
  float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  float *p = frand(n, -1, 1), *m = fbuf(n), *v = fbuf(n);
  double *pd = to_d(p, n), *md = dbuf(n), *vd = dbuf(n);
  for (long i = 0; i < n; i++) m[i] = v[i] = 0.0f;
  for (int t = 1; t <= 3; t++) {
    float *g = frand(n, -1, 1);
    float gscale = t == 2 ? 0.25f : 1.0f;  // step 2 clipped
    for (long i = 0; i < n; i++) {
      double gi = (double)g[i] * gscale;
      if (i < decay_n) pd[i] *= 1.0 - (double)lr * wd;
      md[i] = b1 * md[i] + (1.0 - b1) * gi;
      vd[i] = b2 * vd[i] + (1.0 - b2) * gi * gi;
      double mhat = md[i] / (1.0 - pow(b1, t)), vhat = vd[i] / (1.0 - pow(b2, t));
      pd[i] -= lr * mhat / (sqrt(vhat) + eps);
    }
    rt_adamw(p, g, m, v, n, lr, b1, b2, eps, wd, t, gscale, decay_n);
    free(g);
  }
  check("adamw p (3 steps)", p, pd, n);
  check("adamw m (3 steps)", m, md, n);
  check("adamw v (3 steps)", v, vd, n);
  float *g = frand(n, -1, 1);
  for (long i = 0; i < n; i++)
    pd[i] = p[i] - (double)lr * (g[i] * 0.5 + (i < decay_n ? (double)wd : 0.0) * p[i]);
  rt_sgd(p, g, n, lr, wd, 0.5f, decay_n);
  check("sgd", p, pd, n);
  free(p); free(m); free(v); free(pd); free(md); free(vd); free(g);
}

// the norm of a run of gradients: sqrt(sum x^2) to float precision, the same
// bits for every thread count
static void test_norm2(void) {
  long sizes[] = {1, 7, 8, 63, 1000, (1L << 19) + 13};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    long n = sizes[k];
    float *x = frand(n, -2, 2), out[1], again[1];
    double s = 0;
    for (long i = 0; i < n; i++) s += (double)x[i] * x[i];
    double want = sqrt(s);
    char name[64];
    snprintf(name, sizeof name, "norm2 n=%ld", n);
    rt_norm2(out, x, n);
    check(name, out, &want, 1);
#ifdef _OPENMP
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    rt_norm2(again, x, n);
    omp_set_num_threads(threads);
    snprintf(name, sizeof name, "norm2 n=%ld on one thread", n);
    check_same(name, out, again, 1);
#else
    (void)again;
#endif
    free(x);
  }
}

// ---------------------------------------------------------------------------
// the finite check: the first NaN or infinity, wherever the blocks and threads split

static void test_find_nonfinite(void) {
  long n = (1L << 20) + 37;  // above PAR_MIN: the blocks run in parallel
  float *x = frand(n, -1e30f, 1e30f);
  x[5] = FLT_MAX, x[6] = -FLT_MAX, x[7] = FLT_TRUE_MIN;  // finite extremes
  struct {
    long len;          // the prefix of x scanned
    long at[3];        // where the bad values go (-1: unused)
    float value;
    int want;
  } cases[] = {
      {0, {-1, -1, -1}, 0, -1},
      {n, {-1, -1, -1}, 0, -1},
      {1, {0, -1, -1}, NAN, 0},
      {n, {n - 1, -1, -1}, INFINITY, (int)(n - 1)},
      {n, {900000, 4096, 4095}, -INFINITY, 4095},
      {n, {700001, 300000, -1}, NAN, 300000},
      {4097, {4096, -1, -1}, -NAN, 4096},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    float *y = malloc((size_t)n * sizeof *y);
    memcpy(y, x, (size_t)n * sizeof *y);
    for (int k = 0; k < 3; k++)
      if (cases[c].at[k] >= 0) y[cases[c].at[k]] = cases[c].value;
    int got = 7;
    rt_find_nonfinite(&got, y, cases[c].len);
    int ok = got == cases[c].want;
    printf("find_nonfinite n=%ld (%g): %d%s\n", cases[c].len, (double)cases[c].value, got,
           ok ? "" : "  FAILED");
    ok ? n_passed++ : n_failed++;
    free(y);
  }
  free(x);
}

// ---------------------------------------------------------------------------
// determinism: the kernels whose sums cross rows, run twice

static void test_determinism(void) {
  {
    long bh = 6, t = 128, hs = 32, n = bh * t * hs;
    float *q = frand(n, -2, 2), *k = frand(n, -2, 2), *v = frand(n, -1, 1), *d = frand(n, -1, 1);
    float *r1 = fbuf(3 * n), *r2 = fbuf(3 * n), *out = fbuf(n), *lse = fbuf(bh * t);
    rt_attention_fwd(out, lse, q, k, v, NULL, NULL, bh, t, t, hs, bh, 1, 1, 1);
    rt_attention_bwd(r1, r1 + n, r1 + 2 * n, NULL, d, q, k, v, out, lse, NULL, NULL, bh, t, t, hs,
                     bh, 1, 1, 1);
    rt_attention_bwd(r2, r2 + n, r2 + 2 * n, NULL, d, q, k, v, out, lse, NULL, NULL, bh, t, t, hs,
                     bh, 1, 1, 1);
    check_same("determinism attention_bwd", r1, r2, 3 * n);
    free(q); free(k); free(v); free(d); free(r1); free(r2); free(out); free(lse);
  }
  {
    long n = 512, c = 384;
    float *x = frand(n * c, -2, 2), *w = frand(c, -1, 1), *dy = frand(n * c, -1, 1);
    float *r1 = fbuf(n * c + 2 * c), *r2 = fbuf(n * c + 2 * c);
    rt_layernorm_bwd(r1, r1 + n * c, r1 + n * c + c, dy, x, w, n, c, 1e-5f);
    rt_layernorm_bwd(r2, r2 + n * c, r2 + n * c + c, dy, x, w, n, c, 1e-5f);
    check_same("determinism layernorm_bwd", r1, r2, n * c + 2 * c);
    free(x); free(w); free(dy); free(r1); free(r2);
  }
  {
    long n = 2048, v = 50, c = 256;
    float *d = frand(n * c, -1, 1), *r1 = fbuf(v * c), *r2 = fbuf(v * c);
    int *idx = irand(n, v);
    rt_embedding_bwd(r1, d, idx, n, v, c);
    rt_embedding_bwd(r2, d, idx, n, v, c);
    check_same("determinism embedding_bwd", r1, r2, v * c);
    free(d); free(r1); free(r2); free(idx);
  }
  {
    long s[] = {2000, 300}, os[] = {0, 1}, all[] = {0, 0};
    float *x = frand(2000 * 300, -1, 1), r1[301], r2[301];
    rt_reduce_sum(r1, x, 2, s, os, 300, 1.0f);
    rt_reduce_sum(r1 + 300, x, 2, s, all, 1, 1.0f);
    rt_reduce_sum(r2, x, 2, s, os, 300, 1.0f);
    rt_reduce_sum(r2 + 300, x, 2, s, all, 1, 1.0f);
    check_same("determinism reduce_sum", r1, r2, 301);
    free(x);
  }
  {
    long n = 256, v = 1000;
    float *logits = frand(n * v, -6, 6), l1, l2;
    int *tg = irand(n, v);
    rt_crossentropy_fwd(&l1, logits, tg, n, v, v, IGNORE);
    rt_crossentropy_fwd(&l2, logits, tg, n, v, v, IGNORE);
    check_same("determinism crossentropy_fwd", &l1, &l2, 1);
    free(logits); free(tg);
  }
}

// ---------------------------------------------------------------------------
// thread-count invariance: the kernels that split work between threads, on
// inputs big enough to take their parallel paths, give bit-identical results
// with 1 thread and with 3 (so that no sum depends on the split)

static void run_with_threads(int nth, float **q, float **k, float **v, float **d, int **ix,
                             float *out) {
#ifdef _OPENMP
  omp_set_num_threads(nth);
#else
  (void)nth;
#endif
  long bh = 12, t = 256, hs = 64, na = bh * t * hs;     // attention
  long n = 1024, c = 768;                                // layernorm rows
  long m = 300, nn = 1100, kk = 700;                     // matmul
  float *o = out;
  float *att = o, *lse = o + na;
  rt_attention_fwd(att, lse, q[0], k[0], v[0], NULL, NULL, bh, t, t, hs, bh, 1, 1, 1);
  o += na + bh * t;
  rt_attention_bwd(o, o + na, o + 2 * na, NULL, d[0], q[0], k[0], v[0], att, lse, NULL, NULL, bh,
                   t, t, hs, bh, 1, 1, 1), o += 3 * na;
  rt_layernorm_fwd(o, q[1], k[1], v[1], n, c, 1e-5f), o += n * c;
  rt_layernorm_bwd(o, o + n * c, o + n * c + c, d[1], q[1], k[1], n, c, 1e-5f);
  o += n * c + 2 * c;
  rt_matmul(o, q[2], k[2], 1, m, nn, kk, 0, 1, 0, 0, 0), o += m * nn;
  rt_matmul(o, q[2], k[2], 1, kk, kk, m, 1, 0, 0, 0, 0), o += kk * kk;
  long shape[] = {4096, 300}, cols[] = {0, 1};
  rt_reduce_sum(o, q[3], 2, shape, cols, 300, 1.0f), o += 300;
  rt_embedding_bwd(o, q[3], ix[0], 4096, 50, 300), o += 50 * 300;
  rt_crossentropy_fwd(o, q[4], ix[1], 256, 1000, 1000, IGNORE), o += 1;
  rt_crossentropy_bwd(o, d[2], q[4], ix[1], 256, 1000, 1000, IGNORE), o += 256 * 1000;
  rt_softmax_fwd(o, q[4], 256, 1000, 0), o += 256 * 1000;
  rt_gelu_bwd(o, d[3], q[3], 4096 * 300), o += 4096 * 300;
  long np = 1 << 21;
  memcpy(o, q[5], (size_t)np * sizeof(float));  // AdamW updates in place
  memcpy(o + np, k[5], (size_t)np * sizeof(float));
  memcpy(o + 2 * np, v[5], (size_t)np * sizeof(float));
  rt_adamw(o, d[4], o + np, o + 2 * np, np, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 3, 1.0f, np);
}

static void test_threads(void) {
  long bh = 12, t = 256, hs = 64, na = bh * t * hs, np = 1 << 21;
  float *q[6] = {frand(na, -2, 2), frand(1024 * 768, -2, 2), frand(300 * 700, -1, 1),
                 frand(4096 * 300, -3, 3), frand(256 * 1000, -6, 6), frand(np, -1, 1)};
  float *k[6] = {frand(na, -2, 2), frand(768, -1, 1), frand(700 * 1100, -1, 1), NULL, NULL,
                 frand(np, -1, 1)};
  float *v[6] = {frand(na, -1, 1), frand(768, -1, 1), NULL, NULL, NULL, frand(np, 0, 1)};
  float *d[5] = {frand(na, -1, 1), frand(1024 * 768, -1, 1), frand(1, 1, 2),
                 frand(4096 * 300, -1, 1), frand(np, -1, 1)};
  int *ix[2] = {irand(4096, 50), irand(256, 1000)};
  long total = 4 * na + bh * t + 2 * 1024 * 768 + 2 * 768 + 300 * 1100 + 700 * 700 + 300 + 50 * 300 +
               1 + 2 * 256 * 1000 + 4096 * 300 + 3 * np;
  float *one = fbuf(total), *three = fbuf(total);
  run_with_threads(1, q, k, v, d, ix, one);
  run_with_threads(3, q, k, v, d, ix, three);
#ifdef _OPENMP
  omp_set_num_threads(omp_get_num_procs());
#endif
  check_same("threads 1 vs 3: attention, layernorm, matmul, reduce_sum, embedding_bwd, "
             "crossentropy, softmax, gelu_bwd, adamw", one, three, total);
  for (int i = 0; i < 6; i++) free(q[i]), free(k[i]), free(v[i]);
  for (int i = 0; i < 5; i++) free(d[i]);
  free(ix[0]), free(ix[1]), free(one), free(three);
}

int main(void) {
  rt_rng_seed(&rng, 42);
  test_fill_copy();
  test_padding_mask();
  test_strided_copy();
  test_reduce_sum();
  test_slice();
  test_int_ops();
  test_int_positions();
  test_binary();
  test_unary();
  test_unary_ops();
  test_silu();
  test_matmul();
  test_conv2ds();
  test_maxpools();
  test_embedding(40, 13, 7);
  test_embedding(1000, 97, 200);
  test_layernorm(3, 5, 1);
  test_layernorm(5, 7, 0);
  test_layernorm(64, 129, 0);
  test_layernorm(256, 768, 0);
  test_rmsnorm(3, 5);
  test_rope(1, 5, 2, 10000.0f);
  test_rope(6, 33, 16, 10000.0f);
  test_rope(2, 256, 64, 500000.0f);
  test_rmsnorm(64, 129);
  test_rmsnorm(256, 768);
  test_softmax(4, 9, 0);
  test_softmax(100, 1000, 0);
  test_softmax(3 * 7, 7, 1);
  test_softmax(2 * 300, 300, 1);
  test_attention((att_case){.bh = 2, .t = 5, .hs = 3, .causal = 1, .fd = 1});
  test_attention((att_case){.bh = 2, .t = 5, .hs = 3, .fd = 1});
  test_attention((att_case){.bh = 3, .t = 7, .hs = 5, .causal = 1});
  test_attention((att_case){.bh = 3, .t = 7, .hs = 5});
  test_attention((att_case){.bh = 4, .t = 64, .hs = 16, .causal = 1});
  test_attention((att_case){.bh = 4, .t = 64, .hs = 16});
  test_attention((att_case){.bh = 2, .t = 1, .hs = 8, .causal = 1});
  // too big for the block form: rows
  test_attention((att_case){.bh = 1, .t = 1100, .hs = 128, .causal = 1});
  // key-padding masks: 3 rows of 2 heads
  test_attention((att_case){.bh = 6, .t = 5, .hs = 3, .heads = 2, .fd = 1});
  test_attention((att_case){.bh = 6, .t = 5, .hs = 3, .causal = 1, .heads = 2, .fd = 1});
  test_attention((att_case){.bh = 8, .t = 64, .hs = 16, .heads = 2});
  test_attention((att_case){.bh = 8, .t = 64, .hs = 16, .causal = 1, .heads = 4});
  test_attention((att_case){.bh = 3, .t = 1100, .hs = 128, .heads = 1});
  // biases: shared by 2 batch rows of 3 heads, with causal and padding masks, per batch row
  // (shared by its 3 heads), one per head, and in the row form
  test_attention((att_case){.bh = 6, .t = 5, .hs = 3, .nb = 3, .fd = 1});
  test_attention((att_case){.bh = 6, .t = 5, .hs = 3, .causal = 1, .heads = 2, .nb = 3, .fd = 1});
  test_attention((att_case){.bh = 6, .t = 5, .hs = 3, .causal = 1, .nb = 2, .bdiv = 3, .fd = 1});
  test_attention((att_case){.bh = 4, .t = 64, .hs = 16, .heads = 2, .nb = 4});
  test_attention((att_case){.bh = 2, .t = 1100, .hs = 128, .causal = 1, .nb = 1});
  // cross-attention: fewer and more keys than queries, with a mask and a bias, both forms
  test_attention((att_case){.bh = 4, .t = 5, .tk = 7, .hs = 3, .heads = 2, .nb = 2, .fd = 1});
  test_attention((att_case){.bh = 2, .t = 9, .tk = 4, .hs = 3, .nb = 2, .fd = 1});
  test_attention((att_case){.bh = 4, .t = 40, .tk = 70, .hs = 16, .heads = 2, .nb = 4});
  test_attention((att_case){.bh = 2, .t = 300, .tk = 1100, .hs = 128, .heads = 1});
  test_crossentropy(4, 5, 1);
  test_crossentropy(6, 5, 0);
  test_crossentropy(64, 1000, 0);
  test_add_layernorm(3, 7);
  test_add_layernorm(64, 768);
  test_tensor_parallel();
  test_optimizers();
  test_norm2();
  test_find_nonfinite();
  test_determinism();
  test_threads();
  printf("%d passed, %d failed\n", n_passed, n_failed);
  return n_failed ? 1 : 0;
}
