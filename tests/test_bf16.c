// bf16 in the CPU runtime (runtime/bf16.h, the typed kernels of
// runtime/kernels_cpu_t.h and dist_cpu_t.h).
//
// The conversions: every one of the 65536 bf16 values widens to float and
// rounds back to itself (NaN to a NaN); float32 rounds to the nearest bf16,
// ties to even, on random floats, every float near a tie, and the overflow to
// infinity, against a reference in double.
//
// The kernels: every bf16 variant computes in float32 from its widened
// inputs and rounds its results once, so on the same inputs (values that are
// bf16 already) it must give exactly the float32 variant's results rounded to
// bf16: a check passes when every element is that, bit for bit (1 ulp where a
// kernel rounds a partial result on purpose, said at the check). The mixed
// variants of the KTU kernels (bf16 operands and a float32 result; float32
// operands and a bf16 result) are checked the same way.
//
// Output: one line per check, then "N passed, M failed".
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "kernels.h"
#include "rng.h"

static int n_passed, n_failed;
static rt_rng rng;

static void verdict(const char *what, long bad, long n, const char *detail) {
  if (bad) {
    n_failed++;
    printf("FAIL %s: %ld of %ld elements differ%s\n", what, bad, n, detail);
  } else {
    n_passed++;
    printf("ok   %s (%ld elements)\n", what, n);
  }
}

static void *alloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

// ---------------------------------------------------------------------------
// the conversions

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// The nearest bf16 to f by distances in double, ties to the even pattern.
static uint16_t nearest_bf16(float f) {
  uint32_t u = bits_of(f);
  uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);  // |f| between lo and hi
  double h = (double)rt_bf16_to_f32((rt_bf16){hi});
  if (isinf(h))  // past the largest bf16: the next value would be 2^128 (IEEE rounds to inf there)
    h = copysign(ldexp(1.0, 128), h);
  double dl = fabs((double)f - (double)rt_bf16_to_f32((rt_bf16){lo})), dh = fabs(h - (double)f);
  if ((u & 0xffffu) == 0) return lo;
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

static void test_conversions(void) {
  long bad = 0;
  for (uint32_t b = 0; b < 65536; b++) {
    rt_bf16 h = {(uint16_t)b};
    float f = rt_bf16_to_f32(h);
    rt_bf16 back = rt_f32_to_bf16(f);
    bool nan = isnan(f);
    if (bits_of(f) != b << 16 || (nan ? !isnan(rt_bf16_to_f32(back)) : back.bits != b)) bad++;
  }
  verdict("every bf16 widens and rounds back to itself", bad, 65536, "");

  bad = 0;
  long n = 0;
  for (int i = 0; i < 2000000; i++, n++) {  // random finite floats of every magnitude
    float f = float_of((uint32_t)rt_rng_below(&rng, 0x7f800000u) | (i & 1 ? 0x80000000u : 0));
    if (rt_f32_to_bf16(f).bits != nearest_bf16(f)) bad++;
  }
  for (uint32_t hi = 0; hi < 0x7f80; hi += 7, n += 3) {  // ties and their neighbours
    for (int d = -1; d <= 1; d++) {
      float f = float_of((hi << 16 | 0x8000u) + (uint32_t)d);
      if (rt_f32_to_bf16(f).bits != nearest_bf16(f)) bad++;
    }
  }
  verdict("float32 rounds to the nearest bf16, ties to even", bad, n, "");

  float big = float_of(0x7f7fffffu);  // FLT_MAX: past the largest bf16's half-way point
  bool ok = isinf(rt_bf16_to_f32(rt_f32_to_bf16(big))) &&
            isinf(rt_bf16_to_f32(rt_f32_to_bf16(INFINITY))) &&
            isnan(rt_bf16_to_f32(rt_f32_to_bf16(NAN))) &&
            isnan(rt_bf16_to_f32(rt_f32_to_bf16(float_of(0x7f800001u)))) &&  // a signaling NaN
            rt_f32_to_bf16(-0.0f).bits == 0x8000u;
  verdict("overflow to infinity, NaN stays NaN, -0 stays -0", !ok, 5, "");
}

// ---------------------------------------------------------------------------
// the kernels: buffers holding the same values as float32 and as bf16

typedef struct {
  float *f;    // float32
  rt_bf16 *h;  // the same values in bf16 (inputs), or the bf16 variant's output
  long n;
} Buf;

// n random values in [lo, hi), each a bf16 value, in both types
static Buf in(long n, float lo, float hi) {
  Buf b = {alloc((size_t)n * sizeof(float)), alloc((size_t)n * sizeof(rt_bf16)), n};
  for (long i = 0; i < n; i++) {
    b.h[i] = rt_f32_to_bf16(lo + (hi - lo) * rt_rng_uniform(&rng));
    b.f[i] = rt_bf16_to_f32(b.h[i]);
  }
  return b;
}

// an output: poisoned with NaN in both types, so that an element not written shows
static Buf out(long n) {
  Buf b = {alloc((size_t)n * sizeof(float)), alloc((size_t)n * sizeof(rt_bf16)), n};
  for (long i = 0; i < n; i++) b.f[i] = NAN, b.h[i] = rt_f32_to_bf16(NAN);
  return b;
}

static void drop(Buf b) { free(b.f), free(b.h); }

static int *ints(long n, long range) {
  int *p = alloc((size_t)(n > 0 ? n : 1) * sizeof(int));
  for (long i = 0; i < n; i++) p[i] = (int)rt_rng_below(&rng, (uint64_t)range);
  return p;
}

// The bf16 output against the float32 output rounded: equal bit for bit
// (NaN to NaN), or within `ulps` units of the last bf16 place.
static void same_ulps(const char *what, Buf o, int ulps) {
  long bad = 0;
  for (long i = 0; i < o.n; i++) {
    rt_bf16 want = rt_f32_to_bf16(o.f[i]);
    float w = rt_bf16_to_f32(want), g = rt_bf16_to_f32(o.h[i]);
    if (isnan(w) || isnan(g)) {
      bad += isnan(w) != isnan(g);
      continue;
    }
    long d = labs((long)(int16_t)want.bits - (long)(int16_t)o.h[i].bits);
    if (want.bits != o.h[i].bits && !(ulps && d <= ulps && signbit(w) == signbit(g))) bad++;
  }
  verdict(what, bad, o.n, ulps ? " (by more than an ulp)" : "");
}
static void same(const char *what, Buf o) { same_ulps(what, o, 0); }

// A float32 result of a mixed variant (bf16 operands) against the float32 variant's
static void same_f32(const char *what, const float *want, const float *got, long n) {
  long bad = 0;
  for (long i = 0; i < n; i++)
    bad += !(want[i] == got[i] || (isnan(want[i]) && isnan(got[i])));
  verdict(what, bad, n, "");
}

// ---------------------------------------------------------------------------

static void test_movement(void) {
  long n = 1000;
  Buf x = in(n, -3, 3), y = out(n);
  rt_fill(y.f, n, 1.2345f), rt_fill_bf16(y.h, n, 1.2345f);
  same("fill", y);
  rt_copy(y.f, x.f, n), rt_copy_bf16(y.h, x.h, n);
  same("copy", y);
  long shape[3] = {4, 5, 6}, st[3] = {1, 24, 4};  // a permuted view of 120 elements
  Buf z = out(120);
  rt_strided_copy(z.f, x.f, 3, shape, st), rt_strided_copy_bf16(z.h, x.h, 3, shape, st);
  same("strided_copy (permuted)", z);
  Buf s = out(20 * 7);
  rt_slice(s.f, x.f, 20, 30, 5, 7), rt_slice_bf16(s.h, x.h, 20, 30, 5, 7);
  same("slice", s);
  Buf u = in(20 * 30, -1, 1);
  rt_unslice(u.f, s.f, 20, 30, 5, 7), rt_unslice_bf16(u.h, s.h, 20, 30, 5, 7);
  same("unslice", u);
  Buf a = out(3 * 4 * 10);
  rt_slice_axis(a.f, x.f, 3, 10, 10, 0, 3, 4), rt_slice_axis_bf16(a.h, x.h, 3, 10, 10, 0, 3, 4);
  same("slice_axis", a);
  Buf dx = out(300);
  rt_slice_axis_bwd(dx.f, a.f, 3, 10, 10, 0, 3, 4), rt_slice_axis_bwd_bf16(dx.h, a.h, 3, 10, 10, 0, 3, 4);
  same("slice_axis_bwd", dx);
  Buf host = out(n);
  rt_to_host(host.f, x.f, n, -1), rt_to_host_bf16(host.h, x.h, n, -1);
  same("to_host", host);
  rt_to_device(y.f, host.f, n, -1), rt_to_device_bf16(y.h, host.h, n, -1);
  same("to_device", y);
  int *idx = ints(50, 40);
  Buf w = in(40 * 16, -1, 1), e = out(50 * 16);
  rt_embedding_fwd(e.f, w.f, idx, 50, 16), rt_embedding_fwd_bf16(e.h, w.h, idx, 50, 16);
  same("embedding_fwd", e);
  free(idx);
  drop(x), drop(y), drop(z), drop(s), drop(u), drop(a), drop(dx), drop(host), drop(w), drop(e);
}

static void test_casts(void) {
  long n = 4096;
  Buf x = in(n, -1e3f, 1e3f);
  float *f = alloc((size_t)n * sizeof(float));
  rt_bf16 *h = alloc((size_t)n * sizeof(rt_bf16));
  float *xf = alloc((size_t)n * sizeof(float));  // values between the bf16 ones
  for (long i = 0; i < n; i++) xf[i] = x.f[i] * 1.0001f;
  rt_cast_f32_bf16(h, xf, n);
  long bad = 0;
  for (long i = 0; i < n; i++) bad += h[i].bits != rt_f32_to_bf16(xf[i]).bits;
  verdict("cast float32 -> bf16", bad, n, "");
  rt_cast_bf16_f32(f, x.h, n);
  bad = 0;
  for (long i = 0; i < n; i++) bad += f[i] != x.f[i];
  verdict("cast bf16 -> float32", bad, n, "");
  rt_cast_bf16(h, x.h, n), rt_cast(f, x.f, n);
  bad = 0;
  for (long i = 0; i < n; i++) bad += h[i].bits != x.h[i].bits || f[i] != x.f[i];
  verdict("cast to the same type copies", bad, n, "");
  int *k = ints(n, 1000);
  Buf c = out(n);
  rt_cast_i32_f32(c.f, k, n), rt_cast_i32_f32_bf16(c.h, k, n);
  same("cast_i32_f32", c);
  free(f), free(h), free(xf), free(k), drop(x), drop(c);
}

static void test_elementwise(void) {
  long n = 3001;
  Buf x = in(n, -6, 6), dy = in(n, -2, 2), y = out(n);
#define UNARY(name)                                                   \
  rt_##name(y.f, x.f, n), rt_##name##_bf16(y.h, x.h, n);              \
  same(#name, y);
#define GRAD(name)                                                    \
  rt_##name(y.f, dy.f, x.f, n), rt_##name##_bf16(y.h, dy.h, x.h, n);  \
  same(#name, y);
  UNARY(gelu_fwd) GRAD(gelu_bwd) UNARY(relu_fwd) GRAD(relu_bwd) UNARY(gelu_erf_fwd)
  GRAD(gelu_erf_bwd) UNARY(silu_fwd) GRAD(silu_bwd)
#undef UNARY
#undef GRAD
  rt_scale(y.f, x.f, n, 0.37f, -1.5f), rt_scale_bf16(y.h, x.h, n, 0.37f, -1.5f);
  same("scale", y);
  static const char *const unames[] = {"exp", "log", "sqrt", "tanh", "erf", "pow", "sin", "cos",
                                       "abs", "sign", "sigmoid"};
  Buf pos = in(n, 0.01f, 5);
  for (int op = RT_EXP; op <= RT_SIGMOID; op++) {
    Buf *a = op == RT_LOG || op == RT_SQRT || op == RT_POW ? &pos : &x;
    rt_unary(op, y.f, a->f, n, 1.7f), rt_unary_bf16(op, y.h, a->h, n, 1.7f);
    char what[32];
    snprintf(what, sizeof what, "unary %s", unames[op]);
    same(what, y);
  }
  static const char *const bnames[] = {"add", "sub", "mul", "div", "min", "max"};
  long shape[3] = {7, 11, 13}, as[3] = {143, 13, 1}, bs[3] = {0, 1, 0};  // b broadcast
  Buf a = in(1001, -2, 2), b = in(1001, 0.5f, 2), o = out(1001);
  for (int op = RT_ADD; op <= RT_MAX; op++) {
    rt_binary(op, o.f, a.f, b.f, 3, shape, as, bs), rt_binary_bf16(op, o.h, a.h, b.h, 3, shape, as, bs);
    char what[32];
    snprintf(what, sizeof what, "binary %s", bnames[op]);
    same(what, o);
  }
  int *mask = ints(11, 2);
  long ms[3] = {0, 1, 0};
  rt_masked_fill(o.f, a.f, mask, 3, shape, ms, -7.25f);
  rt_masked_fill_bf16(o.h, a.h, mask, 3, shape, ms, -7.25f);
  same("masked_fill", o);
  int *e32 = alloc((size_t)n * sizeof(int)), *e16 = alloc((size_t)n * sizeof(int));
  rt_equal_f32(e32, x.f, n, x.f[5]), rt_equal_f32_bf16(e16, x.h, n, x.f[5]);
  verdict("equal_f32", memcmp(e32, e16, (size_t)n * sizeof(int)) != 0, n, "");
  int step = 3;
  rt_dropout(y.f, x.f, &step, n, 0.3f, 42, 7, 0, 0, RT_AXIS_TP, RT_AXIS_NONE);
  rt_dropout_bf16(y.h, x.h, &step, n, 0.3f, 42, 7, 0, 0, RT_AXIS_TP, RT_AXIS_NONE);
  same("dropout", y);
  Buf r = in(4 * 6 * 16, -2, 2), ro = out(4 * 6 * 16);
  rt_rope(ro.f, r.f, 4, 6, 16, 10000.0f, 0), rt_rope_bf16(ro.h, r.h, 4, 6, 16, 10000.0f, 0);
  same("rope", ro);
  free(mask), free(e32), free(e16);
  drop(x), drop(dy), drop(y), drop(pos), drop(a), drop(b), drop(o), drop(r), drop(ro);
}

static void test_rows(void) {
  long n = 37, c = 129;
  Buf x = in(n * c, -3, 3), dy = in(n * c, -1, 1), w = in(c, 0.5f, 1.5f), b = in(c, -0.5f, 0.5f);
  Buf y = out(n * c), dx = out(n * c);
  rt_layernorm_fwd(y.f, x.f, w.f, b.f, n, c, 1e-5f), rt_layernorm_fwd_bf16(y.h, x.h, w.h, b.h, n, c, 1e-5f);
  same("layernorm_fwd", y);
  rt_rmsnorm_fwd(y.f, x.f, w.f, n, c, 1e-6f), rt_rmsnorm_fwd_bf16(y.h, x.h, w.h, n, c, 1e-6f);
  same("rmsnorm_fwd", y);
  rt_softmax_fwd(y.f, x.f, n, c, 0), rt_softmax_fwd_bf16(y.h, x.h, n, c, 0);
  same("softmax_fwd", y);
  rt_softmax_fwd(y.f, x.f, 37 * 3, 37, 1), rt_softmax_fwd_bf16(y.h, x.h, 37 * 3, 37, 1);
  same("softmax_fwd causal", y);
  Buf p = in(n * c, 0, 0.1f);
  rt_softmax_bwd(dx.f, dy.f, p.f, n, c), rt_softmax_bwd_bf16(dx.h, dy.h, p.h, n, c);
  same("softmax_bwd", dx);
  rt_log_softmax_fwd(y.f, x.f, n, c), rt_log_softmax_fwd_bf16(y.h, x.h, n, c);
  same("log_softmax_fwd", y);
  Buf lp = in(n * c, -6, -0.1f);
  rt_log_softmax_bwd(dx.f, dy.f, lp.f, n, c), rt_log_softmax_bwd_bf16(dx.h, dy.h, lp.h, n, c);
  same("log_softmax_bwd", dx);

  // the norms' backward: dx in T; dw, db in U (float32, bf16)
  float *dw32 = alloc((size_t)c * sizeof(float)), *db32 = alloc((size_t)c * sizeof(float));
  float *dwm = alloc((size_t)c * sizeof(float)), *dbm = alloc((size_t)c * sizeof(float));
  Buf dw = out(c), db = out(c), dx2 = out(n * c);
  rt_layernorm_bwd(dx.f, dw32, db32, dy.f, x.f, w.f, n, c, 1e-5f);
  rt_layernorm_bwd_bf16_f32(dx2.h, dwm, dbm, dy.h, x.h, w.h, n, c, 1e-5f);
  memcpy(dx2.f, dx.f, (size_t)(n * c) * sizeof(float));
  same("layernorm_bwd bf16, dx", dx2);
  same_f32("layernorm_bwd bf16 -> f32, dw", dw32, dwm, c);
  same_f32("layernorm_bwd bf16 -> f32, db", db32, dbm, c);
  rt_layernorm_bwd_bf16(dx2.h, dw.h, db.h, dy.h, x.h, w.h, n, c, 1e-5f);
  memcpy(dw.f, dw32, (size_t)c * sizeof(float)), memcpy(db.f, db32, (size_t)c * sizeof(float));
  same("layernorm_bwd bf16, dw", dw), same("layernorm_bwd bf16, db", db);
  rt_layernorm_bwd_f32_bf16(dx.f, dw.h, db.h, dy.f, x.f, w.f, n, c, 1e-5f);
  same("layernorm_bwd f32 -> bf16, dw", dw), same("layernorm_bwd f32 -> bf16, db", db);
  rt_rmsnorm_bwd(dx.f, dw32, dy.f, x.f, w.f, n, c, 1e-6f);
  rt_rmsnorm_bwd_bf16_f32(dx2.h, dwm, dy.h, x.h, w.h, n, c, 1e-6f);
  memcpy(dx2.f, dx.f, (size_t)(n * c) * sizeof(float));
  same("rmsnorm_bwd bf16, dx", dx2);
  same_f32("rmsnorm_bwd bf16 -> f32, dw", dw32, dwm, c);
  free(dw32), free(db32), free(dwm), free(dbm);
  drop(x), drop(dy), drop(w), drop(b), drop(y), drop(dx), drop(p), drop(lp), drop(dw), drop(db),
      drop(dx2);
}

static void test_losses(void) {
  long n = 19, v = 301;
  Buf logits = in(n * v, -4, 4), dl = out(n * v);
  int *t = ints(n, v);
  t[3] = -100;  // an ignored row
  float loss32, loss16, dloss = 1.5f;
  rt_crossentropy_fwd(&loss32, logits.f, t, n, v, v, -100);
  rt_crossentropy_fwd_bf16(&loss16, logits.h, t, n, v, v, -100);
  verdict("crossentropy_fwd (a float32 loss)", loss32 != loss16, 1, "");
  rt_crossentropy_bwd(dl.f, &dloss, logits.f, t, n, v, v, -100);
  rt_crossentropy_bwd_bf16(dl.h, &dloss, logits.h, t, n, v, v, -100);
  same("crossentropy_bwd", dl);
  Buf lp = in(n * v, -8, -0.01f);
  rt_nll_loss_fwd(&loss32, lp.f, t, n, v, 0, -100), rt_nll_loss_fwd_bf16(&loss16, lp.h, t, n, v, 0, -100);
  verdict("nll_loss_fwd (a float32 loss)", loss32 != loss16, 1, "");
  rt_nll_loss_bwd(dl.f, &dloss, t, n, v, 0, -100), rt_nll_loss_bwd_bf16(dl.h, &dloss, t, n, v, 0, -100);
  same("nll_loss_bwd", dl);
  free(t), drop(logits), drop(dl), drop(lp);
}

// The GEMM with bf16 operands runs one of two paths (rt_cpu_gemm_bf16_kind):
// bf16 widened to float32 panels, which is the float32 GEMM of the same
// values (checked bit for bit), or AVX512-BF16 dot products, which add the
// same exact products in another order: its float32 results must be within
// 2 k 2^-24 sum_p |a_ip b_pj| of the float32 GEMM's (twice the bound of
// either sum's rounding error), its bf16 results within an ulp.
static bool gemm_dot;

static void close_gemm(const char *what, const float *want, const float *got, const float *absdot,
                       long n, long k) {
  long bad = 0;
  for (long i = 0; i < n; i++) {
    double tol = 2.0 * (double)k * ldexp(1.0, -24) * absdot[i] + 1e-30;
    bad += !(fabs((double)want[i] - (double)got[i]) <= tol);
  }
  verdict(what, bad, n, " (by more than the rounding bound)");
}

static void test_matmul_size(long batch, long m, long n, long k) {
  Buf a = in(batch * m * k, -1, 1), b = in(k * n, -1, 1), c = out(batch * m * n);
  float *c32 = alloc((size_t)(batch * m * n) * sizeof(float));
  float *aa = alloc((size_t)(batch * m * k) * sizeof(float)), *ab = alloc((size_t)(k * n) * sizeof(float));
  float *absdot = alloc((size_t)(batch * m * n) * sizeof(float));
  for (long i = 0; i < batch * m * k; i++) aa[i] = fabsf(a.f[i]);
  for (long i = 0; i < k * n; i++) ab[i] = fabsf(b.f[i]);
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      char what[96];
      rt_matmul(absdot, aa, ab, batch, m, n, k, ta, tb, m * k, 0, m * n);
      rt_matmul(c.f, a.f, b.f, batch, m, n, k, ta, tb, m * k, 0, m * n);
      rt_matmul_bf16(c.h, a.h, b.h, batch, m, n, k, ta, tb, m * k, 0, m * n);
      snprintf(what, sizeof what, "matmul bf16 %ldx%ldx%ldx%ld ta=%d tb=%d (b broadcast)", batch, m,
               n, k, ta, tb);
      same_ulps(what, c, gemm_dot);
      rt_matmul_bf16_f32(c32, a.h, b.h, batch, m, n, k, ta, tb, m * k, 0, m * n);
      snprintf(what, sizeof what, "matmul bf16 -> f32 %ldx%ldx%ldx%ld ta=%d tb=%d", batch, m, n, k,
               ta, tb);
      if (gemm_dot)
        close_gemm(what, c.f, c32, absdot, batch * m * n, k);
      else
        same_f32(what, c.f, c32, batch * m * n);
      rt_matmul_f32_bf16(c.h, a.f, b.f, batch, m, n, k, ta, tb, m * k, 0, m * n);
      snprintf(what, sizeof what, "matmul f32 -> bf16 %ldx%ldx%ldx%ld ta=%d tb=%d", batch, m, n, k,
               ta, tb);
      same(what, c);
    }
  // sc = 0: every product summed into one result (a weight's gradient over the batch)
  long n2 = n < k ? n : k;
  Buf g = out(m * n2);
  rt_matmul(g.f, a.f, a.f, batch, m, n2, m, 1, 0, m * k, m * k, 0);
  rt_matmul_bf16(g.h, a.h, a.h, batch, m, n2, m, 1, 0, m * k, m * k, 0);
  g.n = m * n2;
  char what[96];
  snprintf(what, sizeof what, "matmul bf16 %ldx%ldx%ldx%ld, products summed (sc = 0)", batch, m,
           n2, m);
  same_ulps(what, g, gemm_dot);
  free(c32), free(aa), free(ab), free(absdot), drop(a), drop(b), drop(c), drop(g);
}

static void test_matmul(void) {
  gemm_dot = strstr(rt_cpu_gemm_bf16_kind(), "dot") != NULL;
  printf("bf16 GEMM: %s\n", rt_cpu_gemm_bf16_kind());
  test_matmul_size(3, 17, 23, 31);   // edge tiles only, an odd k
  test_matmul_size(2, 40, 70, 1029);  // full and edge tiles, three K slices, the last odd
  test_matmul_size(2, 40, 70, 1030);  // the same, even: the vector packers
}

static void test_reductions(void) {
  long shape[3] = {9, 10, 33}, os[3] = {0, 33, 1};  // (9,10,33) -> (10,33)
  long n = 9 * 10 * 33, on = 10 * 33;
  Buf x = in(n, -2, 2), o = out(on);
  float *f = alloc((size_t)on * sizeof(float));
  rt_reduce_sum(o.f, x.f, 3, shape, os, on, 0.5f), rt_reduce_sum_bf16(o.h, x.h, 3, shape, os, on, 0.5f);
  same("reduce_sum bf16", o);
  rt_reduce_sum_bf16_f32(f, x.h, 3, shape, os, on, 0.5f);
  same_f32("reduce_sum bf16 -> f32", o.f, f, on);
  rt_reduce_sum_f32_bf16(o.h, x.f, 3, shape, os, on, 0.5f);
  same("reduce_sum f32 -> bf16", o);
  long all[1] = {0};  // everything into one number
  rt_reduce_sum(o.f, x.f, 1, (long[]){n}, all, 1, 1.0f);
  rt_reduce_sum_bf16_f32(f, x.h, 1, (long[]){n}, all, 1, 1.0f);
  same_f32("reduce_sum bf16 -> f32 of everything", o.f, f, 1);
  // the embedding's backward into a float32 gradient
  int *idx = ints(64, 20);
  Buf dout = in(64 * 8, -1, 1), dw = out(20 * 8);
  rt_embedding_bwd(dw.f, dout.f, idx, 64, 20, 8), rt_embedding_bwd_bf16(dw.h, dout.h, idx, 64, 20, 8);
  same("embedding_bwd bf16", dw);
  float *dwf = alloc(20 * 8 * sizeof(float));
  rt_embedding_bwd_bf16_f32(dwf, dout.h, idx, 64, 20, 8);
  same_f32("embedding_bwd bf16 -> f32", dw.f, dwf, 20 * 8);
  free(f), free(idx), free(dwf), drop(x), drop(o), drop(dout), drop(dw);
}

static void test_conv(void) {
  long nc = 3, h = 9, w = 8, kh = 3, kw = 2, oh = 4, ow = 4;
  Buf x = in(nc * h * w, -1, 1), col = out(nc * kh * kw * oh * ow), back = out(nc * h * w);
  rt_im2col(col.f, x.f, nc, h, w, kh, kw, oh, ow, 2, 2, 1, 0, 1, 1);
  rt_im2col_bf16(col.h, x.h, nc, h, w, kh, kw, oh, ow, 2, 2, 1, 0, 1, 1);
  same("im2col", col);
  rt_col2im(back.f, col.f, nc, h, w, kh, kw, oh, ow, 2, 2, 1, 0, 1, 1);
  rt_col2im_bf16(back.h, col.h, nc, h, w, kh, kw, oh, ow, 2, 2, 1, 0, 1, 1);
  same("col2im", back);
  drop(x), drop(col), drop(back);
}

static void test_attention(int causal, long tk) {
  long bh = 6, t = causal ? tk : 13, hs = 16, heads = 3;
  Buf q = in(bh * t * hs, -1, 1), k = in(bh * tk * hs, -1, 1), v = in(bh * tk * hs, -1, 1);
  Buf bias = in(heads * t * tk, -0.5f, 0.5f), o = out(bh * t * hs), dout = in(bh * t * hs, -1, 1);
  int *keep = ints(2 * tk, 4);  // 3 in 4 kept
  for (long i = 0; i < 2 * tk; i++) keep[i] = keep[i] != 0;
  char what[64];
  float *lse = alloc((size_t)(bh * t) * sizeof(float));
  float *lse16 = alloc((size_t)(bh * t) * sizeof(float));
  rt_attention_fwd(o.f, lse, q.f, k.f, v.f, keep, bias.f, bh, t, tk, hs, heads, 1, heads, causal);
  rt_attention_fwd_bf16(o.h, lse16, q.h, k.h, v.h, keep, bias.h, bh, t, tk, hs, heads, 1, heads,
                        causal);
  snprintf(what, sizeof what, "attention_fwd causal=%d t=%ld tk=%ld", causal, t, tk);
  same(what, o);
  snprintf(what, sizeof what, "attention_fwd causal=%d t=%ld tk=%ld: lse", causal, t, tk);
  same_f32(what, lse, lse16, bh * t);
  // the backward reads the bf16 variant's output in both types
  for (long i = 0; i < o.n; i++) o.f[i] = rt_bf16_to_f32(o.h[i]);
  Buf dq = out(bh * t * hs), dk = out(bh * tk * hs), dv = out(bh * tk * hs), ds = out(bh * t * tk);
  rt_attention_bwd(dq.f, dk.f, dv.f, ds.f, dout.f, q.f, k.f, v.f, o.f, lse, keep, bias.f, bh, t,
                   tk, hs, heads, 1, heads, causal);
  rt_attention_bwd_bf16(dq.h, dk.h, dv.h, ds.h, dout.h, q.h, k.h, v.h, o.h, lse, keep, bias.h, bh,
                        t, tk, hs, heads, 1, heads, causal);
  snprintf(what, sizeof what, "attention_bwd causal=%d: dq", causal);
  same(what, dq);
  snprintf(what, sizeof what, "attention_bwd causal=%d: dk, dv, dscores", causal);
  same(what, dk), same(what, dv), same(what, ds);
  free(keep), free(lse), free(lse16);
  drop(q), drop(k), drop(v), drop(bias), drop(o), drop(dout), drop(dq), drop(dk), drop(dv), drop(ds);
}

static void test_checks(void) {
  long n = 5000;
  Buf x = in(n, -1, 1);
  int a32, a16;
  rt_find_nonfinite(&a32, x.f, n), rt_find_nonfinite_bf16(&a16, x.h, n);
  verdict("find_nonfinite: none", a32 != -1 || a16 != -1, n, "");
  x.f[4321] = INFINITY, x.h[4321] = rt_f32_to_bf16(INFINITY);
  x.f[4400] = NAN, x.h[4400] = rt_f32_to_bf16(NAN);
  rt_find_nonfinite(&a32, x.f, n), rt_find_nonfinite_bf16(&a16, x.h, n);
  verdict("find_nonfinite: the first of an inf and a NaN", a32 != 4321 || a16 != 4321, n, "");
  drop(x);
}

// One rank: the distribution kernels reduce to copies, the vocabulary-parallel
// loss to the whole loss.
static void test_dist(void) {
  long n = 300;
  Buf x = in(n, -1, 1), acc = out(n);
  rt_accumulate(acc.f, x.f, n, 0.5f), rt_accumulate_bf16(acc.h, x.h, n, 0.5f);
  same("accumulate (micro-batch 0)", acc);
  Buf g = out(n), scr = out(n);
  rt_tp_gather(RT_AXIS_TP, g.f, scr.f, x.f, 3, 2, 50), rt_tp_gather_bf16(RT_AXIS_TP, g.h, scr.h, x.h, 3, 2, 50);
  same("tp_gather (one rank)", g);
  rt_tp_slice(RT_AXIS_TP, g.f, x.f, 3, 2, 50), rt_tp_slice_bf16(RT_AXIS_TP, g.h, x.h, 3, 2, 50);
  same("tp_slice (one rank)", g);
  int *idx = ints(10, 30);
  Buf w = in(30 * 10, -1, 1), e = out(10 * 10);
  rt_embedding_vp_fwd(RT_AXIS_TP, e.f, w.f, idx, 10, 10, 30), rt_embedding_vp_fwd_bf16(RT_AXIS_TP, e.h, w.h, idx, 10, 10, 30);
  same("embedding_vp_fwd (one rank)", e);
  long rows = 7, v = 40;
  Buf logits = in(rows * v, -3, 3), dl = out(rows * v);
  int *t = ints(rows, v);
  float l32, l16, s32[14], s16[14], dloss = 1.0f;
  rt_vp_crossentropy_fwd(RT_AXIS_TP, &l32, s32, logits.f, t, rows, v, v, -100);
  rt_vp_crossentropy_fwd_bf16(RT_AXIS_TP, &l16, s16, logits.h, t, rows, v, v, -100);
  verdict("vp_crossentropy_fwd (float32 loss and statistics)",
          l32 != l16 || memcmp(s32, s16, sizeof s32) != 0, 1 + 14, "");
  rt_vp_crossentropy_bwd(RT_AXIS_TP, dl.f, &dloss, logits.f, t, s32, rows, v, v, -100);
  rt_vp_crossentropy_bwd_bf16(RT_AXIS_TP, dl.h, &dloss, logits.h, t, s16, rows, v, v, -100);
  same_ulps("vp_crossentropy_bwd (the target's element rounded twice)", dl, 1);
  free(idx), free(t);
  drop(x), drop(acc), drop(g), drop(scr), drop(w), drop(e), drop(logits), drop(dl);
}

int main(void) {
  rt_rng_seed(&rng, 20261126);
  test_conversions();
  test_movement();
  test_casts();
  test_elementwise();
  test_rows();
  test_losses();
  test_matmul();
  test_reductions();
  test_conv();
  test_attention(0, 11);
  test_attention(1, 12);
  test_checks();
  test_dist();
  printf("%d passed, %d failed\n", n_passed, n_failed);
  return n_failed ? 1 : 0;
}
