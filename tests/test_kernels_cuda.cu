// Every CUDA launcher (runtime/kernels_cuda.cu) against its CPU twin
// (runtime/kernels_cpu.c and dist_cpu.c, linked as cpu_rt_*: the header
// kernels_cpu_renamed.h that tests/gen_renamed.cmake writes) on random inputs
// of several sizes: odd ones, edge ones, rows longer than a block; in float32,
// then the bf16 variants and the mixed ones of the KTU kernels on the same
// cases (bf16 inputs on both sides). One line per case, the variant first
// (`bf16 `, `bf16->f32 `: bf16 operands, a float32 result):
// `name: max abs diff X, max rel diff Y`, the relative diff taken
// against the largest |cpu| value of the output (results that cancel make an
// element-by-element ratio meaningless). Tolerances:
// exact for data movement, integers and dropout masks, 1e-5 for elementwise
// math, 1e-4 for reductions, matmul and attention (BF16, 1e-2, for a bf16
// result that is not exact). Without a CUDA device:
// `no CUDA device: skipped`, exit 77. The test cuda_emu runs this file over
// the CUDA emulation (tests/cuda_emu/cuda_emu.h), its big cases smaller (BIG).
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_common.h"
extern "C" {
#include "dist.h"
#include "kernels.h"  // the CUDA launchers
}
#undef MTC_RT_KERNELS_H
#include "kernels_cpu_renamed.h"
namespace cpu {
extern "C" {
#include "kernels.h"  // the CPU twins, as cpu_rt_*
}
}  // namespace cpu
#define CPU_RENAMED_UNDEF
#include "kernels_cpu_renamed.h"

// The variants of kernels.def's KT and KTU kernels, in bf16 (rt_gelu_fwd_bf16)
// and in mixed types (rt_matmul_bf16_f32: bf16 operands, a float32 product),
// as overloads of the float32 names on both sides: a case written once over
// its element types calls rt_gelu_fwd(y, x, n) and CPU(rt_gelu_fwd)(y, x, n)
// in every variant, the variant the one its arguments' types take.
#define VARIANT_OF(f, suffix)                        \
  template <typename... A>                           \
  static auto f(A... a)->decltype(f##suffix(a...)) { \
    return f##suffix(a...);                          \
  }
#define VARIANT_F32(suffix, name)  // the float32 functions themselves
#define VARIANT_BF16(suffix, name) \
  VARIANT_OF(rt_##name, suffix) namespace cpu { VARIANT_OF(cpu_rt_##name, suffix) }
#define VARIANT_F32_F32 VARIANT_F32
#define VARIANT_BF16_BF16 VARIANT_BF16
#define VARIANT_BF16_F32 VARIANT_BF16
#define VARIANT_F32_BF16 VARIANT_BF16
#define VARIANT_T(suffix, tname, name) VARIANT_##tname(suffix, name)
#define VARIANT_TU(suffix, tname, uname, name) VARIANT_##tname##_##uname(suffix, name)
#define K(name, ...)
#define KT(name, ...) RT_T_VARIANTS(VARIANT_T, name)
#define KTU(name, ...) RT_TU_VARIANTS(VARIANT_TU, name)
#include "kernels.def"

#define CPU(f) cpu::cpu_##f

typedef std::vector<float> Vec;
typedef std::vector<int> IVec;
template <typename T>
using Buf = std::vector<T>;  // host values of element type T (float or rt_bf16)

// Tolerances; a bf16 result may round to the neighbour of the CPU's (1 ulp, up
// to 2^-7 of the value): BF16 for every bf16 result that is not exact.
static const double EXACT = 0.0, ELEM = 1e-5, RED = 1e-4, BF16 = 1e-2;
static int ncases, nfail;
// the element types of the cases running ("" float32; "bf16 ", "bf16->f32 "
// (bf16 operands, a float32 result) ...), before their names
static const char *variant = "";

// BIG(gpu, emu): a big case's size, `gpu` on a GPU and the smaller `emu` under
// the CUDA emulation (tests/cuda_emu), which runs every GPU thread as a fiber
// on one core.
#ifdef MTC_CUDA_EMU
#define BIG(gpu, emu) (emu)
#else
#define BIG(gpu, emu) (gpu)
#endif

// ---- random inputs (xorshift64*: the same inputs every run)

static unsigned long long rng = 0x9E3779B97F4A7C15ull;
static unsigned long long next_u64(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 2685821657736338717ull;
}
static float uniform(float lo, float hi) {
  return lo + (hi - lo) * (float)((next_u64() >> 40) * (1.0 / 16777216.0));
}

// An element as a float (exact), and a float as an element (to nearest even).
static float wide(float x) { return x; }
static float wide(rt_bf16 x) { return rt_bf16_to_f32(x); }
template <typename T>
static T narrow(float x) {
  if constexpr (std::is_same<T, float>::value)
    return x;
  else
    return rt_f32_to_bf16(x);
}
template <typename T>
static constexpr bool is_f32 = std::is_same<T, float>::value;

template <typename T = float>
static Buf<T> rand_vec(long n, float lo = -1.0f, float hi = 1.0f) {
  Buf<T> v((size_t)n);
  for (auto &x : v) x = narrow<T>(uniform(lo, hi));
  return v;
}
static IVec rand_ivec(long n, int lo, int hi) {  // [lo, hi)
  IVec v((size_t)n);
  for (auto &x : v) x = lo + (int)(next_u64() % (unsigned long long)(hi - lo));
  return v;
}

// ---- device buffers, freed after each case

static std::vector<void *> allocs;

template <typename T>
static T *dev(const std::vector<T> &h) {
  T *d;
  cudaCheck(cudaMalloc(&d, (h.size() > 0 ? h.size() : 1) * sizeof(T)));
  if (!h.empty()) cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  allocs.push_back(d);
  return d;
}

template <typename T>
static std::vector<T> host(const T *d, size_t n) {
  std::vector<T> h(n);
  rt_cuda_sync();
  if (n) cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

static void free_all(void) {
  cudaCheck(cudaDeviceSynchronize());
  for (void *p : allocs) cudaCheck(cudaFree(p));
  allocs.clear();
}

// ---- comparisons

// The largest difference over the largest |ref| (or over `scale` where that
// is larger: an elementwise function's error follows its input's size, not
// its output's, when the output is a small difference of large terms, as
// gelu's 0.5 x (1 + erf(x / sqrt 2)) is at x = -3) against tol.
template <typename T>
static void check(const char *name, const Buf<T> &ref, const T *dgot, double tol,
                  double scale = 0.0) {
  Buf<T> got = host(dgot, ref.size());
  if (!is_f32<T> && tol != EXACT && tol < BF16) tol = BF16;
  double maxabs = 0.0, maxref = 0.0;
  long worst = -1;
  bool exact = true;
  for (size_t i = 0; i < ref.size(); i++) {
    double r = wide(ref[i]), g = wide(got[i]);
    if (isnan(r) && isnan(g)) continue;
    if (memcmp(&ref[i], &got[i], sizeof(T)) != 0) exact = false;
    double d = isnan(r) || isnan(g) ? INFINITY : fabs(r - g);
    if (!isinf(r) && fabs(r) > maxref) maxref = fabs(r);
    if (isinf(r) && r == g) d = 0.0;
    if (d > maxabs) {
      maxabs = d;
      worst = (long)i;
    }
  }
  if (scale > maxref) maxref = scale;
  double rel = maxabs == 0.0 ? 0.0 : maxabs / (maxref > 0.0 ? maxref : 1e-30);
  bool ok = tol == EXACT ? exact : rel <= tol;
  ncases++;
  printf("%s%s: max abs diff %.3g, max rel diff %.3g%s\n", variant, name, maxabs, rel,
         ok ? "" : (tol == EXACT ? "  FAIL (exact)" : "  FAIL"));
  if (!ok) {
    nfail++;
    if (worst >= 0)
      printf("  worst at %ld: cpu %.9g, gpu %.9g\n", worst, (double)wide(ref[(size_t)worst]),
             (double)wide(got[(size_t)worst]));
  }
}

static void check_int(const char *name, const IVec &ref, const int *dgot) {
  IVec got = host(dgot, ref.size());
  long bad = 0;
  for (size_t i = 0; i < ref.size(); i++) bad += ref[i] != got[i];
  ncases++;
  printf("%s%s: %ld of %zu ints differ%s\n", variant, name, bad, ref.size(), bad ? "  FAIL" : "");
  if (bad) nfail++;
}

static const char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static const char *fmt(const char *f, ...) {
  static char buf[256];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

// ---- data movement

template <typename T>
static void test_fill_copy(void) {
  for (long n : {1L, 7L, 1000L, BIG(1L << 20, 1L << 14) + 3}) {
    Buf<T> out = rand_vec<T>(n);
    T *dout = dev(out);
    CPU(rt_fill)(out.data(), n, 3.25f);
    rt_fill(dout, n, 3.25f);
    check(fmt("fill n=%ld", n), out, dout, EXACT);

    Buf<T> x = rand_vec<T>(n), o2 = rand_vec<T>(n);
    T *dx = dev(x), *do2 = dev(o2);
    CPU(rt_copy)(o2.data(), x.data(), n);
    rt_copy(do2, dx, n);
    check(fmt("copy n=%ld", n), o2, do2, EXACT);

    IVec xi = rand_ivec(n, -1000, 1000), oi = rand_ivec(n, 0, 5);
    int *dxi = dev(xi), *doi = dev(oi);
    if (is_f32<T>) {  // int32 only
      CPU(rt_copy_i32)(oi.data(), xi.data(), n);
      rt_copy_i32(doi, dxi, n);
      check_int(fmt("copy_i32 n=%ld", n), oi, doi);
    }

    Buf<T> co = rand_vec<T>(n);
    T *dco = dev(co);
    CPU(rt_cast_i32_f32)(co.data(), xi.data(), n);
    rt_cast_i32_f32(dco, dxi, n);
    check(fmt("cast_i32_f32 n=%ld", n), co, dco, EXACT);
    free_all();
  }
  // overlapping ranges (memmove), both directions
  for (long shift : {-3L, 3L, -700L, 700L}) {
    long n = 1000;
    Buf<T> buf = rand_vec<T>(n + 800);
    T *dbuf = dev(buf);
    long oo = shift < 0 ? 0 : shift, xo = shift < 0 ? -shift : 0;
    CPU(rt_copy)(buf.data() + oo, buf.data() + xo, n);
    rt_copy(dbuf + oo, dbuf + xo, n);
    check(fmt("copy overlapping shift=%ld", shift), buf, dbuf, EXACT);
    free_all();
  }
}

// between every pair of element types (a copy between two of one type); to
// bf16 to nearest even, ties included, NaN a NaN, past the largest bf16 infinity
template <typename T, typename U>
static void test_cast(void) {
  const float special[] = {NAN, INFINITY, -0.0f, 1.00390625f, 1.01171875f, 3.4e38f};
  for (long n : {1L, 1000L, BIG(1L << 20, 1L << 14) + 5}) {
    Buf<T> x = rand_vec<T>(n, -4, 4);
    for (long i = 0; i < n && i < 6; i++) x[i] = narrow<T>(special[i]);
    Buf<U> out = rand_vec<U>(n);
    T *dx = dev(x);
    U *dout = dev(out);
    CPU(rt_cast)(out.data(), x.data(), n);
    rt_cast(dout, dx, n);
    check(fmt("cast n=%ld", n), out, dout, EXACT);
    free_all();
  }
}

// the elements x needs for shape read through xstride (strides >= 0)
static long span_of(int rank, const long *shape, const long *stride) {
  long last = 0;
  for (int d = 0; d < rank; d++) last += (shape[d] - 1) * stride[d];
  return last + 1;
}

static long numel(int rank, const long *shape) {
  long n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  return n;
}

template <typename T>
static void test_strided_copy(void) {
  struct Case {
    int rank;
    long shape[4], xstride[4];
  } cases[] = {
      {0, {0}, {0}},                          // one element
      {1, {1000}, {1}},                       // contiguous
      {2, {37, 53}, {1, 37}},                 // transpose
      {2, {BIG(1025, 129), BIG(1023, 127)}, {1, BIG(1025, 129)}},  // a large transpose
      {3, {6, 4, 5}, {1, 30, 6}},             // permutation
      {3, {5, 64, 7}, {0, 7, 1}},             // broadcast of the leading dim
      {3, {5, 64, 7}, {7, 0, 1}},             // broadcast in the middle
      {2, {300, 17}, {17, 0}},                // broadcast of the last dim
      {4, {2, 1, 3, 129}, {3 * 129 * 2, 5, 129 * 2, 2}},  // a stride of 2, a dim of 1
      {4, {2, 3, 5, 16}, {240, 16, 48, 1}},   // a head transpose, in 16-byte packs
      {2, {40, 16}, {16, 0}},                 // packs of one element
  };
  for (const Case &c : cases) {
    long n = numel(c.rank, c.shape);
    Buf<T> x = rand_vec<T>(span_of(c.rank, c.shape, c.xstride)), out = rand_vec<T>(n);
    T *dx = dev(x), *dout = dev(out);
    CPU(rt_strided_copy)(out.data(), x.data(), c.rank, c.shape, c.xstride);
    rt_strided_copy(dout, dx, c.rank, c.shape, c.xstride);
    check(fmt("strided_copy rank=%d n=%ld", c.rank, n), out, dout, EXACT);
    if (is_f32<T>) {  // int32 only; its values from the index (the random stream of the cases
                      // after this one stays as it was)
      IVec xi(span_of(c.rank, c.shape, c.xstride)), outi(n, -1);
      for (size_t i = 0; i < xi.size(); i++) xi[i] = (int)(i * 7919 % 1000) - 500;
      int *dxi = dev(xi), *douti = dev(outi);
      CPU(rt_strided_copy_i32)(outi.data(), xi.data(), c.rank, c.shape, c.xstride);
      rt_strided_copy_i32(douti, dxi, c.rank, c.shape, c.xstride);
      check_int(fmt("strided_copy_i32 rank=%d n=%ld", c.rank, n), outi, douti);
    }
    free_all();
  }
}

template <typename T, typename U>
static void test_reduce_sum(void) {
  struct Case {
    int rank;
    long shape[3], ostride[3], onumel;
    float scale;
  } cases[] = {
      {0, {0}, {0}, 1, 2.0f},                          // one element
      {2, {300, 77}, {0, 1}, 77, 1.0f},                // bias gradient (n, c) -> (c)
      {2, {300, 77}, {1, 0}, 300, 0.5f},               // rows (n, c) -> (n)
      {1, {(1L << 20) + 5}, {0}, 1, 0.25f},            // everything into one number
      {2, {1000, 1000}, {0, 0}, 1, 1.0f},              // the same, two dims
      {3, {4, 300, 6}, {6, 0, 1}, 24, 1.0f},           // the middle dim
      {3, {4, 3, 600}, {0, 1, 0}, 3, 1.0f},            // the outer and the inner dims
      {2, {5, 7}, {1, 5}, 35, -1.5f},                  // a permutation, no reduction
      {3, {2, 3, 4}, {0, 0, 1}, 6, 1.0f},              // fewer outputs than onumel
      {3, {4, 300, 96}, {0, 0, 1}, 96, 1.0f},          // the columns of x [R, K]
      {2, {BIG(8192, 256), 768}, {0, 1}, 768, 1.0f},    // ... a GPT-2 bias gradient
  };
  for (const Case &c : cases) {
    long n = numel(c.rank, c.shape);
    Buf<T> x = rand_vec<T>(n);
    Buf<U> out = rand_vec<U>(c.onumel);
    T *dx = dev(x);
    U *dout = dev(out);
    CPU(rt_reduce_sum)(out.data(), x.data(), c.rank, c.shape, c.ostride, c.onumel, c.scale);
    rt_reduce_sum(dout, dx, c.rank, c.shape, c.ostride, c.onumel, c.scale);
    check(fmt("reduce_sum rank=%d n=%ld onumel=%ld", c.rank, n, c.onumel), out, dout, RED);
    free_all();
  }
}

template <typename T>
static void test_slices(void) {
  struct Case {
    long outer, xinner, off, len;
  } cases[] = {{1, 1, 0, 1},   {13, 100, 17, 50}, {BIG(1000, 20), 768 * 3, 768, 768},
               {7, 9, 0, 9}, {13, 96, 16, 48}};  // the last two whole rows; packs
  for (const Case &c : cases) {
    Buf<T> x = rand_vec<T>(c.outer * c.xinner), out = rand_vec<T>(c.outer * c.len);
    T *dx = dev(x), *dout = dev(out);
    CPU(rt_slice)(out.data(), x.data(), c.outer, c.xinner, c.off, c.len);
    rt_slice(dout, dx, c.outer, c.xinner, c.off, c.len);
    check(fmt("slice outer=%ld inner=%ld off=%ld len=%ld", c.outer, c.xinner, c.off, c.len), out,
          dout, EXACT);
    // unslice: the rest of its out is left alone
    Buf<T> y = rand_vec<T>(c.outer * c.len), big = rand_vec<T>(c.outer * c.xinner);
    T *dy = dev(y), *dbig = dev(big);
    CPU(rt_unslice)(big.data(), y.data(), c.outer, c.xinner, c.off, c.len);
    rt_unslice(dbig, dy, c.outer, c.xinner, c.off, c.len);
    check(fmt("unslice outer=%ld inner=%ld off=%ld len=%ld", c.outer, c.xinner, c.off, c.len),
          big, dbig, EXACT);
    if (is_f32<T>) {  // int32 only
      IVec yi = rand_ivec(c.outer * c.len, -1000, 1000), bigi = rand_ivec(c.outer * c.xinner, 0, 5);
      int *dyi = dev(yi), *dbigi = dev(bigi);
      CPU(rt_unslice_i32)(bigi.data(), yi.data(), c.outer, c.xinner, c.off, c.len);
      rt_unslice_i32(dbigi, dyi, c.outer, c.xinner, c.off, c.len);
      check_int(
          fmt("unslice_i32 outer=%ld inner=%ld off=%ld len=%ld", c.outer, c.xinner, c.off, c.len),
          bigi, dbigi);
    }
    free_all();
  }
  struct ACase {
    long outer, xdim, inner, start, step, len;
  } acases[] = {{1, 1, 1, 0, 1, 1}, {3, 10, 7, 1, 3, 3}, {4, 50, 33, 5, 1, 40}, {2, 9, 1000, 8, 1, 1}};
  for (const ACase &c : acases) {
    Buf<T> x = rand_vec<T>(c.outer * c.xdim * c.inner),
           out = rand_vec<T>(c.outer * c.len * c.inner);
    T *dx = dev(x), *dout = dev(out);
    CPU(rt_slice_axis)(out.data(), x.data(), c.outer, c.xdim, c.inner, c.start, c.step, c.len);
    rt_slice_axis(dout, dx, c.outer, c.xdim, c.inner, c.start, c.step, c.len);
    check(fmt("slice_axis outer=%ld xdim=%ld inner=%ld start=%ld step=%ld", c.outer, c.xdim,
              c.inner, c.start, c.step),
          out, dout, EXACT);
    Buf<T> dyv = rand_vec<T>(c.outer * c.len * c.inner),
           dxv = rand_vec<T>(c.outer * c.xdim * c.inner);
    T *ddy = dev(dyv), *ddx = dev(dxv);
    CPU(rt_slice_axis_bwd)(dxv.data(), dyv.data(), c.outer, c.xdim, c.inner, c.start, c.step,
                           c.len);
    rt_slice_axis_bwd(ddx, ddy, c.outer, c.xdim, c.inner, c.start, c.step, c.len);
    check(fmt("slice_axis_bwd outer=%ld xdim=%ld inner=%ld start=%ld step=%ld", c.outer, c.xdim,
              c.inner, c.start, c.step),
          dxv, ddx, EXACT);
    if (is_f32<T>) {  // int32 only
      IVec xi = rand_ivec(c.outer * c.xdim * c.inner, -1000, 1000),
           oi = rand_ivec(c.outer * c.len * c.inner, 0, 5);
      int *dxi = dev(xi), *doi = dev(oi);
      CPU(rt_slice_axis_i32)(oi.data(), xi.data(), c.outer, c.xdim, c.inner, c.start, c.step,
                             c.len);
      rt_slice_axis_i32(doi, dxi, c.outer, c.xdim, c.inner, c.start, c.step, c.len);
      check_int(fmt("slice_axis_i32 outer=%ld xdim=%ld inner=%ld", c.outer, c.xdim, c.inner), oi,
                doi);
    }
    free_all();
  }
}

// ---- elementwise

template <typename T>
static void test_binary(void) {
  struct Case {
    int rank;
    long shape[3], as[3], bs[3];
  } cases[] = {
      {1, {1}, {1}, {1}},
      {1, {BIG(100003, 10007)}, {1}, {1}},       // same shape
      {2, {64, 33}, {33, 1}, {0, 1}},            // b broadcast over rows
      {2, {64, 33}, {33, 1}, {1, 0}},            // b broadcast over columns
      {2, {64, 33}, {1, 64}, {33, 1}},           // a transposed
      {3, {3, 5, 700}, {0, 700, 1}, {3500, 0, 1}},
      {2, {64, 48}, {48, 1}, {0, 1}},            // a bias add, in 16-byte packs
      {3, {3, 5, 704}, {0, 704, 1}, {3520, 0, 1}},  // packs with broadcasts
      {2, {64, 48}, {48, 0}, {48, 1}},           // packs of one element
      {0, {0}, {0}, {0}},                        // scalars
  };
  const char *names[] = {"add", "sub", "mul", "div", "min", "max"};
  for (int op = RT_ADD; op <= RT_MAX; op++)
    for (const Case &c : cases) {
      long n = numel(c.rank, c.shape);
      Buf<T> a = rand_vec<T>(span_of(c.rank, c.shape, c.as)),
             b = rand_vec<T>(span_of(c.rank, c.shape, c.bs));
      for (auto &v : b) v = narrow<T>(wide(v) < 0 ? wide(v) - 0.5f : wide(v) + 0.5f);  // from 0
      Buf<T> out = rand_vec<T>(n);
      T *da = dev(a), *db = dev(b), *dout = dev(out);
      CPU(rt_binary)(op, out.data(), a.data(), b.data(), c.rank, c.shape, c.as, c.bs);
      rt_binary(op, dout, da, db, c.rank, c.shape, c.as, c.bs);
      check(fmt("binary %s rank=%d n=%ld", names[op], c.rank, n), out, dout, EXACT);
      if (op <= RT_GE - RT_EQ) {  // the comparisons of floats: rounded to few values, some equal
        static const char *const cmp[] = {"eq", "lt", "le", "gt", "ge"};
        Buf<T> af = a, bf = b;
        for (auto &v : af) v = narrow<T>(roundf(wide(v) * 2.0f) / 2.0f);
        for (auto &v : bf) v = narrow<T>(roundf(wide(v) * 2.0f) / 2.0f);
        IVec ci = rand_ivec(n, 0, 5);
        T *daf = dev(af), *dbf = dev(bf);
        int *dci = dev(ci);
        CPU(rt_compare)(RT_EQ + op, ci.data(), af.data(), bf.data(), c.rank, c.shape, c.as, c.bs);
        rt_compare(RT_EQ + op, dci, daf, dbf, c.rank, c.shape, c.as, c.bs);
        check_int(fmt("compare %s rank=%d n=%ld", cmp[op], c.rank, n), ci, dci);
        if (is_f32<T>) {  // int32 only: small values, some equal
          IVec ai = rand_ivec(span_of(c.rank, c.shape, c.as), -3, 3),
               bi = rand_ivec(span_of(c.rank, c.shape, c.bs), -3, 3);
          int *dai = dev(ai), *dbi = dev(bi);
          CPU(rt_compare_i32)(RT_EQ + op, ci.data(), ai.data(), bi.data(), c.rank, c.shape, c.as,
                              c.bs);
          rt_compare_i32(RT_EQ + op, dci, dai, dbi, c.rank, c.shape, c.as, c.bs);
          check_int(fmt("compare_i32 %s rank=%d n=%ld", cmp[op], c.rank, n), ci, dci);
        }
      }
      if (is_f32<T> && op != RT_DIV) {  // int32 only; big values, so that products wrap
        IVec ai = rand_ivec(span_of(c.rank, c.shape, c.as), -70000, 70000),
             bi = rand_ivec(span_of(c.rank, c.shape, c.bs), -70000, 70000), oi = rand_ivec(n, 0, 5);
        int *dai = dev(ai), *dbi = dev(bi), *doi = dev(oi);
        CPU(rt_binary_i32)(op, oi.data(), ai.data(), bi.data(), c.rank, c.shape, c.as, c.bs);
        rt_binary_i32(op, doi, dai, dbi, c.rank, c.shape, c.as, c.bs);
        check_int(fmt("binary_i32 %s rank=%d n=%ld", names[op], c.rank, n), oi, doi);
        if (op == RT_ADD) {
          IVec xi = rand_ivec(n, -70000, 70000);
          int *dxi = dev(xi);
          CPU(rt_scale_i32)(oi.data(), xi.data(), n, -40000, 2);
          rt_scale_i32(doi, dxi, n, -40000, 2);
          check_int(fmt("scale_i32 n=%ld", n), oi, doi);
        }
      }
      free_all();
    }
}

// running sums along the middle dim, every direction, in float and int32
template <typename T>
static void test_cumsum(void) {
  struct Case {
    long outer, len, inner;
  } cases[] = {{1, 1, 1}, {4, 16, 1}, {2, 37, 5}, {BIG(64, 8), 1024, 3}};
  for (const Case &c : cases)
    for (int exclusive = 0; exclusive < 2; exclusive++)
      for (int reverse = 0; reverse < 2; reverse++) {
        long n = c.outer * c.len * c.inner;
        Buf<T> x = rand_vec<T>(n), out = rand_vec<T>(n);
        T *dx = dev(x), *dout = dev(out);
        CPU(rt_cumsum)(out.data(), x.data(), c.outer, c.len, c.inner, exclusive, reverse);
        rt_cumsum(dout, dx, c.outer, c.len, c.inner, exclusive, reverse);
        const char *how = exclusive ? (reverse ? "exclusive reverse" : "exclusive")
                                    : (reverse ? "reverse" : "inclusive");
        check(fmt("cumsum %s %ldx%ldx%ld", how, c.outer, c.len, c.inner), out, dout, EXACT);
        if (is_f32<T>) {
          IVec xi = rand_ivec(n, -(1 << 24), 1 << 24), oi = rand_ivec(n, 0, 5);  // sums that wrap
          int *dxi = dev(xi), *doi = dev(oi);
          CPU(rt_cumsum_i32)(oi.data(), xi.data(), c.outer, c.len, c.inner, exclusive, reverse);
          rt_cumsum_i32(doi, dxi, c.outer, c.len, c.inner, exclusive, reverse);
          check_int(fmt("cumsum_i32 %s %ldx%ldx%ld", how, c.outer, c.len, c.inner), oi, doi);
        }
        free_all();
      }
}

template <typename T>
static void test_activations(void) {
  typedef void (*Fwd)(T *, const T *, long);
  typedef void (*Bwd)(T *, const T *, const T *, long);
  struct F {
    const char *name;
    Fwd cpu, gpu;
    double tol;
  } fwds[] = {{"gelu_fwd", CPU(rt_gelu_fwd), rt_gelu_fwd, ELEM},
              {"relu_fwd", CPU(rt_relu_fwd), rt_relu_fwd, EXACT},
              {"gelu_erf_fwd", CPU(rt_gelu_erf_fwd), rt_gelu_erf_fwd, ELEM},
              {"silu_fwd", CPU(rt_silu_fwd), rt_silu_fwd, ELEM}};
  struct B {
    const char *name;
    Bwd cpu, gpu;
    double tol;
  } bwds[] = {{"gelu_bwd", CPU(rt_gelu_bwd), rt_gelu_bwd, ELEM},
              {"relu_bwd", CPU(rt_relu_bwd), rt_relu_bwd, EXACT},
              {"gelu_erf_bwd", CPU(rt_gelu_erf_bwd), rt_gelu_erf_bwd, ELEM},
              {"silu_bwd", CPU(rt_silu_bwd), rt_silu_bwd, ELEM}};
  for (long n : {1L, 17L, 1000L, BIG(1L << 20, 1L << 14) + 1}) {
    Buf<T> x = rand_vec<T>(n, -6.0f, 6.0f), dy = rand_vec<T>(n);
    if (n > 4) {  // the tails, and 0
      x[0] = narrow<T>(30.0f), x[1] = narrow<T>(-30.0f);
      x[2] = narrow<T>(0.0f), x[3] = narrow<T>(-0.0f);
    }
    T *dx = dev(x), *ddy = dev(dy);
    double xs = 0.0, dys = 0.0;  // the inputs' sizes (the tails excepted)
    for (long i = n > 4 ? 2 : 0; i < n; i++) xs = fmax(xs, fabs(wide(x[i])));
    for (long i = 0; i < n; i++) dys = fmax(dys, fabs(wide(dy[i])));
    for (const F &f : fwds) {
      Buf<T> y = rand_vec<T>(n);
      T *dyo = dev(y);
      f.cpu(y.data(), x.data(), n);
      f.gpu(dyo, dx, n);
      check(fmt("%s n=%ld", f.name, n), y, dyo, f.tol, xs);
    }
    for (const B &b : bwds) {
      Buf<T> g = rand_vec<T>(n);
      T *dg = dev(g);
      b.cpu(g.data(), dy.data(), x.data(), n);
      b.gpu(dg, ddy, dx, n);
      check(fmt("%s n=%ld", b.name, n), g, dg, b.tol, dys);
    }
    Buf<T> s = rand_vec<T>(n);
    T *ds = dev(s);
    CPU(rt_scale)(s.data(), x.data(), n, -0.75f, 0.125f);
    rt_scale(ds, dx, n, -0.75f, 0.125f);
    check(fmt("scale n=%ld", n), s, ds, ELEM);
    free_all();
  }
}

template <typename T>
static void test_unary(void) {
  struct U {
    int op;
    const char *name;
    float lo, hi, p;
  } ops[] = {{RT_EXP, "exp", -5, 5, 0},       {RT_LOG, "log", 0.01f, 10, 0},
             {RT_SQRT, "sqrt", 0, 10, 0},     {RT_TANH, "tanh", -5, 5, 0},
             {RT_ERF, "erf", -3, 3, 0},       {RT_POW, "pow 2.5", 0.1f, 3, 2.5f},
             {RT_POW, "pow 2", -3, 3, 2.0f},  {RT_POW, "pow -0.5", 0.1f, 3, -0.5f},
             {RT_SIN, "sin", -10, 10, 0},     {RT_COS, "cos", -10, 10, 0},
             {RT_ABS, "abs", -5, 5, 0},       {RT_SIGN, "sign", -5, 5, 0},
             {RT_SIGMOID, "sigmoid", -20, 20, 0}};
  for (long n : {1L, 1000L, BIG(65537L, 4097L)})
    for (const U &u : ops) {
      Buf<T> x = rand_vec<T>(n, u.lo, u.hi), y = rand_vec<T>(n);
      T *dx = dev(x), *dy = dev(y);
      CPU(rt_unary)(u.op, y.data(), x.data(), n, u.p);
      rt_unary(u.op, dy, dx, n, u.p);
      check(fmt("unary %s n=%ld", u.name, n), y, dy, ELEM);
      free_all();
    }
}

// ---- matmul

template <typename T, typename U>
static void test_matmul(void) {
  struct Case {
    long batch, m, n, k;
    int ta, tb;
    int bsa, bsb, bsc;  // strides: 1 = a whole matrix, 0 = broadcast / summed
  } cases[] = {
      {1, 1, 1, 1, 0, 0, 1, 1, 1},       {1, 17, 33, 65, 0, 0, 1, 1, 1},
      {1, 17, 33, 65, 1, 0, 1, 1, 1},    {1, 17, 33, 65, 0, 1, 1, 1, 1},
      {1, 17, 33, 65, 1, 1, 1, 1, 1},    {1, 300, 200, 513, 0, 0, 1, 1, 1},
      {4, 31, 29, 64, 0, 1, 1, 1, 1},    // batched
      {3, 31, 29, 64, 1, 0, 0, 1, 1},    // a broadcast
      {3, 31, 29, 64, 0, 0, 1, 0, 1},    // b broadcast
      {5, 40, 24, 37, 1, 0, 1, 1, 0},    // summed into one C (a weight gradient)
      {5, 40, 24, 37, 0, 1, 1, 0, 0},    // summed, b broadcast
      {2, 9, 11, 0, 0, 0, 1, 1, 1},      // k = 0: zeros
      {3, 9, 11, 0, 0, 0, 1, 1, 0},      // k = 0, summed
      {1, 1, 50257, 64, 0, 1, 1, 1, 1},  // a wide, one-row product
  };
  for (const Case &c : cases) {
    long sa = c.bsa ? c.m * c.k : 0, sb = c.bsb ? c.k * c.n : 0, sc = c.bsc ? c.m * c.n : 0;
    long na = c.bsa ? c.batch * c.m * c.k : c.m * c.k, nb = c.bsb ? c.batch * c.k * c.n : c.k * c.n;
    long nc = c.bsc ? c.batch * c.m * c.n : c.m * c.n;
    Buf<T> a = rand_vec<T>(na), b = rand_vec<T>(nb);
    Buf<U> out = rand_vec<U>(nc);
    T *da = dev(a), *db = dev(b);
    U *dc = dev(out);
    CPU(rt_matmul)(out.data(), a.data(), b.data(), c.batch, c.m, c.n, c.k, c.ta, c.tb, sa, sb, sc);
    rt_matmul(dc, da, db, c.batch, c.m, c.n, c.k, c.ta, c.tb, sa, sb, sc);
    check(fmt("matmul batch=%ld m=%ld n=%ld k=%ld ta=%d tb=%d sa=%ld sb=%ld sc=%ld", c.batch, c.m,
              c.n, c.k, c.ta, c.tb, sa, sb, sc),
          out, dc, RED);
    free_all();
  }
}

// the GEMM with its epilogue (passes/epilogue.c): bias, and GELU with the sum it read
template <typename T>
static void test_matmul_bias(void) {
  struct Case {
    long batch, m, n, k;
    int ta, tb, bsa, act;  // bsa 0: a broadcast over the batch (b always whole)
  } cases[] = {
      {1, 17, 33, 65, 0, 0, 1, 0}, {1, 17, 33, 65, 0, 0, 1, 1}, {1, 17, 33, 65, 1, 0, 1, 1},
      {1, 17, 33, 65, 0, 1, 1, 0}, {1, 64, 256, 128, 0, 1, 1, 1}, {3, 31, 29, 64, 0, 0, 1, 1},
      {3, 31, 29, 64, 1, 1, 0, 0}, {2, 9, 11, 0, 0, 0, 1, 1},   // k = 0: act(bias)
  };
  unsigned long long others = rng;   // (its own draws: the other tests' inputs stay theirs)
  for (const Case &c : cases) {
    long sa = c.bsa ? c.m * c.k : 0, sb = c.k * c.n, ny = c.batch * c.m * c.n;
    Buf<T> a = rand_vec<T>(c.bsa ? c.batch * c.m * c.k : c.m * c.k);
    Buf<T> b = rand_vec<T>(c.batch * c.k * c.n), bias = rand_vec<T>(c.n);
    Buf<T> y = rand_vec<T>(ny), pre = rand_vec<T>(ny);
    T *dy = dev(y), *dpre = dev(pre);
    CPU(rt_matmul_bias)(y.data(), c.act ? pre.data() : NULL, a.data(), b.data(), bias.data(),
                        c.batch, c.m, c.n, c.k, c.ta, c.tb, sa, sb, c.act);
    rt_matmul_bias(dy, c.act ? dpre : NULL, dev(a), dev(b), dev(bias), c.batch, c.m, c.n, c.k,
                   c.ta, c.tb, sa, sb, c.act);
    std::string what = fmt("matmul_bias batch=%ld m=%ld n=%ld k=%ld ta=%d tb=%d sa=%ld act=%d",
                           c.batch, c.m, c.n, c.k, c.ta, c.tb, sa, c.act);
    check(what.c_str(), y, dy, RED);
    if (c.act)
      check((what + " (pre)").c_str(), pre, dpre, RED);
    free_all();
  }
  rng = others;
}

// the GEMM with a bias's gradient in its epilogue: db sums operand `of` over k
template <typename T, typename U>
static void test_matmul_bgrad(void) {
  struct Case {
    long m, n, k;
    int ta, tb, of;
  } cases[] = {
      {64, 96, 200, 1, 0, 1}, {96, 64, 200, 1, 0, 0}, {17, 33, 65, 1, 1, 0},
      {17, 33, 65, 0, 0, 1},  {5, 7, 0, 1, 0, 1},  // k = 0: zeros
  };
  unsigned long long others = rng;   // (its own draws: the other tests' inputs stay theirs)
  for (const Case &c : cases) {
    Buf<T> a = rand_vec<T>(c.m * c.k), b = rand_vec<T>(c.k * c.n);
    Buf<U> out = rand_vec<U>(c.m * c.n), db = rand_vec<U>(c.of ? c.n : c.m);
    U *dc = dev(out), *ddb = dev(db);
    CPU(rt_matmul_bgrad)(out.data(), db.data(), a.data(), b.data(), c.m, c.n, c.k, c.ta, c.tb,
                         c.of);
    rt_matmul_bgrad(dc, ddb, dev(a), dev(b), c.m, c.n, c.k, c.ta, c.tb, c.of);
    std::string what = fmt("matmul_bgrad m=%ld n=%ld k=%ld ta=%d tb=%d of=%d", c.m, c.n, c.k,
                           c.ta, c.tb, c.of);
    check(what.c_str(), out, dc, RED);
    check((what + " (db)").c_str(), db, ddb, RED);
    free_all();
  }
  rng = others;
}

// ---- convolution: im2col and col2im against the CPU's (the GEMMs are rt_matmul's,
// checked above); im2col only copies, and col2im adds in the CPU's order

template <typename T>
static void test_conv(void) {
  struct Case {
    long nc, h, w, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw;
  } cases[] = {
      {6, 16, 16, 4, 4, 4, 4, 0, 0, 0, 0, 1, 1},     // ViT's patches
      {1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1},
      {6, 11, 8, 3, 2, 2, 3, 1, 0, 2, 1, 1, 1},      // uneven
      {8, 10, 12, 3, 3, 1, 2, 2, 1, 0, 2, 2, 3},     // dilated
      {BIG(64, 4), 56, 56, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},  // a ResNet layer's worth
  };
  for (const Case &c : cases) {
    long oh = (c.h + c.pt + c.pb - c.dh * (c.kh - 1) - 1) / c.sh + 1;
    long ow = (c.w + c.pl + c.pr - c.dw * (c.kw - 1) - 1) / c.sw + 1;
    long nx = c.nc * c.h * c.w, ncol = c.nc * c.kh * c.kw * oh * ow;
    Buf<T> x = rand_vec<T>(nx), col = rand_vec<T>(ncol), back = rand_vec<T>(nx),
           out = rand_vec<T>(ncol);
    T *dx = dev(x), *dcol = dev(out), *dback = dev(back);
    CPU(rt_im2col)(out.data(), x.data(), c.nc, c.h, c.w, c.kh, c.kw, oh, ow, c.sh, c.sw, c.pt, c.pl,
                   c.dh, c.dw);
    rt_im2col(dcol, dx, c.nc, c.h, c.w, c.kh, c.kw, oh, ow, c.sh, c.sw, c.pt, c.pl, c.dh, c.dw);
    check(fmt("im2col nc=%ld %ldx%ld k=%ldx%ld", c.nc, c.h, c.w, c.kh, c.kw), out, dcol, EXACT);
    T *dc = dev(col);
    CPU(rt_col2im)(back.data(), col.data(), c.nc, c.h, c.w, c.kh, c.kw, oh, ow, c.sh, c.sw, c.pt,
                   c.pl, c.dh, c.dw);
    rt_col2im(dback, dc, c.nc, c.h, c.w, c.kh, c.kw, oh, ow, c.sh, c.sw, c.pt, c.pl, c.dh, c.dw);
    check(fmt("col2im nc=%ld %ldx%ld k=%ldx%ld", c.nc, c.h, c.w, c.kh, c.kw), back, dback, ELEM);
    free_all();
  }
}

// ---- max pooling against the CPU's: the same maxima, each pixel's gradient summed in the
// same order (runtime/pool.h)

template <typename T>
static void test_maxpool(void) {
  struct Case {
    long nc, h, w, kh, kw, sh, sw, ph, pw, pb, pr;
  } cases[] = {
      {6, 8, 8, 3, 3, 2, 2, 1, 1, 1, 1},               // ResNet's stem
      {1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
      {3, 5, 6, 3, 2, 1, 1, 2, 1, 0, 1},               // overlapping, uneven pads
      {BIG(64, 4), 112, 112, 3, 3, 2, 2, 1, 1, 1, 1},  // ResNet-50's pool
  };
  for (const Case &c : cases) {
    long oh = (c.h + c.ph + c.pb - c.kh) / c.sh + 1, ow = (c.w + c.pw + c.pr - c.kw) / c.sw + 1;
    long nx = c.nc * c.h * c.w, ny = c.nc * oh * ow;
    Buf<T> x = rand_vec<T>(nx), dy = rand_vec<T>(ny), y = rand_vec<T>(ny), dx = rand_vec<T>(nx);
    for (long i = 0; i < nx; i += 7) x[i] = x[i + 1 < nx ? i + 1 : i];   // ties
    T *dxp = dev(x), *ddy = dev(dy), *dyo = dev(y), *ddx = dev(dx);
    CPU(rt_maxpool2d)(y.data(), x.data(), c.nc, c.h, c.w, c.kh, c.kw, oh, ow, c.sh, c.sw, c.ph,
                      c.pw);
    rt_maxpool2d(dyo, dxp, c.nc, c.h, c.w, c.kh, c.kw, oh, ow, c.sh, c.sw, c.ph, c.pw);
    check(fmt("maxpool2d nc=%ld %ldx%ld k=%ldx%ld", c.nc, c.h, c.w, c.kh, c.kw), y, dyo, EXACT);
    CPU(rt_maxpool2d_bwd)(dx.data(), dy.data(), x.data(), c.nc, c.h, c.w, c.kh, c.kw, oh, ow, c.sh,
                          c.sw, c.ph, c.pw);
    rt_maxpool2d_bwd(ddx, ddy, dxp, c.nc, c.h, c.w, c.kh, c.kw, oh, ow, c.sh, c.sw, c.ph, c.pw);
    check(fmt("maxpool2d_bwd nc=%ld %ldx%ld k=%ldx%ld", c.nc, c.h, c.w, c.kh, c.kw), dx, ddx,
          EXACT);
    free_all();
  }
}

// ---- neural-net ops

template <typename T, typename U>
static void test_embedding(void) {
  struct Case {
    long n, v, c;
  } cases[] = {{1, 1, 1}, {300, 50, 33}, {BIG(1024, 64), 500, 768}, {7, 3, 1000}};
  for (const Case &c : cases) {
    IVec idx = rand_ivec(c.n, 0, (int)c.v);
    int *didx = dev(idx);
    if (std::is_same<T, U>::value) {  // the forward is KT: once per T
      Buf<T> w = rand_vec<T>(c.v * c.c), out = rand_vec<T>(c.n * c.c);
      T *dw = dev(w), *dout = dev(out);
      CPU(rt_embedding_fwd)(out.data(), w.data(), idx.data(), c.n, c.c);
      rt_embedding_fwd(dout, dw, didx, c.n, c.c);
      check(fmt("embedding_fwd n=%ld v=%ld c=%ld", c.n, c.v, c.c), out, dout, EXACT);
    }
    Buf<T> dy = rand_vec<T>(c.n * c.c);
    Buf<U> g = rand_vec<U>(c.v * c.c);
    T *ddy = dev(dy);
    U *dg = dev(g);
    CPU(rt_embedding_bwd)(g.data(), dy.data(), idx.data(), c.n, c.v, c.c);
    rt_embedding_bwd(dg, ddy, didx, c.n, c.v, c.c);
    check(fmt("embedding_bwd n=%ld v=%ld c=%ld", c.n, c.v, c.c), g, dg, ELEM);
    free_all();
  }
}

// row shapes (n, c) of the row kernels: short, odd, longer than a block
// (rows enough for the column sums in chunks, col_sums; square matrices for the causal softmax)
static const long row_cases[][2] = {{1, 1},           {3, 7},    {7, 33},
                                    {BIG(64, 8), 768}, {5, 3000}, {3, BIG(50257, 5003)},
                                    {BIG(4096, 160), 96}, {2 * 65, 65}};

template <typename T, typename U>
static void test_layernorm(void) {
  for (const auto &rc : row_cases) {
    long n = rc[0], c = rc[1];
    Buf<T> x = rand_vec<T>(n * c, -2, 3), w = rand_vec<T>(c), b = rand_vec<T>(c),
           y = rand_vec<T>(n * c);
    T *dx = dev(x), *dw = dev(w), *db = dev(b), *dy = dev(y);
    if (std::is_same<T, U>::value) {  // the forward is KT: once per T
      CPU(rt_layernorm_fwd)(y.data(), x.data(), w.data(), b.data(), n, c, 1e-5f);
      rt_layernorm_fwd(dy, dx, dw, db, n, c, 1e-5f);
      check(fmt("layernorm_fwd n=%ld c=%ld", n, c), y, dy, RED);
      // over a dim split along an axis of one rank: as the whole-row kernels, on either side
      Buf<T> ys = rand_vec<T>(n * c);
      T *dys = dev(ys);
      CPU(rt_layernorm_fwd_split)(RT_AXIS_COL, ys.data(), x.data(), w.data(), b.data(), n, c,
                                  1e-5f);
      check(fmt("layernorm_fwd_split (CPU) n=%ld c=%ld", n, c), ys, dy, RED);
      rt_layernorm_fwd_split(RT_AXIS_COL, dys, dx, dw, db, n, c, 1e-5f);
      check(fmt("layernorm_fwd_split n=%ld c=%ld", n, c), y, dys, RED);
      // a residual's add and the norm of its sum in one kernel (a warp a row, or a block); the
      // residual drawn apart from the generator the later cases' data come from
      Buf<T> res((size_t)(n * c)), r((size_t)(n * c)), ry((size_t)(n * c));
      for (long i = 0; i < n * c; i++) res[i] = narrow<T>(sinf(0.7f * (float)i));
      T *dres = dev(res), *dr = dev(r), *dry = dev(ry);
      CPU(rt_add_layernorm)(r.data(), ry.data(), x.data(), res.data(), w.data(), b.data(), n, c,
                            1e-5f);
      rt_add_layernorm(dr, dry, dx, dres, dw, db, n, c, 1e-5f);
      check(fmt("add_layernorm sum n=%ld c=%ld", n, c), r, dr, EXACT);
      check(fmt("add_layernorm norm n=%ld c=%ld", n, c), ry, dry, RED);
    }
    Buf<T> g = rand_vec<T>(n * c), gx = rand_vec<T>(n * c);
    Buf<U> gw = rand_vec<U>(c), gb = rand_vec<U>(c);
    T *dg = dev(g), *dgx = dev(gx);
    U *dgw = dev(gw), *dgb = dev(gb);
    CPU(rt_layernorm_bwd)(gx.data(), gw.data(), gb.data(), g.data(), x.data(), w.data(), n, c, 1e-5f);
    rt_layernorm_bwd(dgx, dgw, dgb, dg, dx, dw, n, c, 1e-5f);
    check(fmt("layernorm_bwd dx n=%ld c=%ld", n, c), gx, dgx, RED);
    check(fmt("layernorm_bwd dw n=%ld c=%ld", n, c), gw, dgw, RED);
    check(fmt("layernorm_bwd db n=%ld c=%ld", n, c), gb, dgb, RED);
    Buf<T> sx = rand_vec<T>(n * c);
    Buf<U> sw = rand_vec<U>(c), sb = rand_vec<U>(c);
    T *dsx = dev(sx);
    U *dsw = dev(sw), *dsb = dev(sb);
    CPU(rt_layernorm_bwd_split)(RT_AXIS_COL, sx.data(), sw.data(), sb.data(), g.data(), x.data(),
                                w.data(), n, c, 1e-5f);
    check(fmt("layernorm_bwd_split (CPU) dx n=%ld c=%ld", n, c), sx, dgx, RED);
    check(fmt("layernorm_bwd_split (CPU) dw n=%ld c=%ld", n, c), sw, dgw, RED);
    check(fmt("layernorm_bwd_split (CPU) db n=%ld c=%ld", n, c), sb, dgb, RED);
    rt_layernorm_bwd_split(RT_AXIS_COL, dsx, dsw, dsb, dg, dx, dw, n, c, 1e-5f);
    check(fmt("layernorm_bwd_split dx n=%ld c=%ld", n, c), gx, dsx, RED);
    check(fmt("layernorm_bwd_split dw n=%ld c=%ld", n, c), gw, dsw, RED);
    check(fmt("layernorm_bwd_split db n=%ld c=%ld", n, c), gb, dsb, RED);
    free_all();
  }
}

template <typename T, typename U>
static void test_rmsnorm(void) {
  for (const auto &rc : row_cases) {
    long n = rc[0], c = rc[1];
    Buf<T> x = rand_vec<T>(n * c, -2, 3), w = rand_vec<T>(c), y = rand_vec<T>(n * c);
    T *dx = dev(x), *dw = dev(w), *dy = dev(y);
    if (std::is_same<T, U>::value) {  // the forward is KT: once per T
      CPU(rt_rmsnorm_fwd)(y.data(), x.data(), w.data(), n, c, 1e-6f);
      rt_rmsnorm_fwd(dy, dx, dw, n, c, 1e-6f);
      check(fmt("rmsnorm_fwd n=%ld c=%ld", n, c), y, dy, RED);
      Buf<T> ys = rand_vec<T>(n * c);
      T *dys = dev(ys);
      CPU(rt_rmsnorm_fwd_split)(RT_AXIS_COL, ys.data(), x.data(), w.data(), n, c, 1e-6f);
      check(fmt("rmsnorm_fwd_split (CPU) n=%ld c=%ld", n, c), ys, dy, RED);
      rt_rmsnorm_fwd_split(RT_AXIS_COL, dys, dx, dw, n, c, 1e-6f);
      check(fmt("rmsnorm_fwd_split n=%ld c=%ld", n, c), y, dys, RED);
    }
    Buf<T> g = rand_vec<T>(n * c), gx = rand_vec<T>(n * c);
    Buf<U> gw = rand_vec<U>(c);
    T *dg = dev(g), *dgx = dev(gx);
    U *dgw = dev(gw);
    CPU(rt_rmsnorm_bwd)(gx.data(), gw.data(), g.data(), x.data(), w.data(), n, c, 1e-6f);
    rt_rmsnorm_bwd(dgx, dgw, dg, dx, dw, n, c, 1e-6f);
    check(fmt("rmsnorm_bwd dx n=%ld c=%ld", n, c), gx, dgx, RED);
    check(fmt("rmsnorm_bwd dw n=%ld c=%ld", n, c), gw, dgw, RED);
    Buf<T> sx = rand_vec<T>(n * c);
    Buf<U> sw = rand_vec<U>(c);
    T *dsx = dev(sx);
    U *dsw = dev(sw);
    CPU(rt_rmsnorm_bwd_split)(RT_AXIS_COL, sx.data(), sw.data(), g.data(), x.data(), w.data(), n,
                              c, 1e-6f);
    check(fmt("rmsnorm_bwd_split (CPU) dx n=%ld c=%ld", n, c), sx, dgx, RED);
    check(fmt("rmsnorm_bwd_split (CPU) dw n=%ld c=%ld", n, c), sw, dgw, RED);
    rt_rmsnorm_bwd_split(RT_AXIS_COL, dsx, dsw, dg, dx, dw, n, c, 1e-6f);
    check(fmt("rmsnorm_bwd_split dx n=%ld c=%ld", n, c), gx, dsx, RED);
    check(fmt("rmsnorm_bwd_split dw n=%ld c=%ld", n, c), gw, dsw, RED);
    free_all();
  }
}

template <typename T>
static void test_softmaxes(void) {
  for (const auto &rc : row_cases) {
    long n = rc[0], c = rc[1];
    Buf<T> x = rand_vec<T>(n * c, -8, 8), dy = rand_vec<T>(n * c);
    T *dx = dev(x), *ddy = dev(dy);
    Buf<T> y = rand_vec<T>(n * c), ly = rand_vec<T>(n * c);
    T *dyo = dev(y), *dly = dev(ly);
    // causal where the rows are square matrices (n a multiple of c)
    for (int causal = 0; causal <= (n % c == 0); causal++) {
      CPU(rt_softmax_fwd)(y.data(), x.data(), n, c, causal);
      rt_softmax_fwd(dyo, dx, n, c, causal);
      check(fmt("softmax_fwd n=%ld c=%ld%s", n, c, causal ? " causal" : ""), y, dyo, RED);
    }
    CPU(rt_log_softmax_fwd)(ly.data(), x.data(), n, c);
    rt_log_softmax_fwd(dly, dx, n, c);
    check(fmt("log_softmax_fwd n=%ld c=%ld", n, c), ly, dly, RED);
    // the backwards from the CPU's forward outputs, on both sides
    T *dyc = dev(y), *dlyc = dev(ly);
    Buf<T> g = rand_vec<T>(n * c), lg = rand_vec<T>(n * c);
    T *dg = dev(g), *dlg = dev(lg);
    CPU(rt_softmax_bwd)(g.data(), dy.data(), y.data(), n, c);
    rt_softmax_bwd(dg, ddy, dyc, n, c);
    check(fmt("softmax_bwd n=%ld c=%ld", n, c), g, dg, RED);
    CPU(rt_log_softmax_bwd)(lg.data(), dy.data(), ly.data(), n, c);
    rt_log_softmax_bwd(dlg, ddy, dlyc, n, c);
    check(fmt("log_softmax_bwd n=%ld c=%ld", n, c), lg, dlg, RED);
    free_all();
  }
}

template <typename T>
static void test_rope(void) {
  const long cases[][3] = {{1, 1, 2}, {6, 17, 64}, {3, 128, 128}};
  for (const auto &cs : cases)
    for (int inverse = 0; inverse < 2; inverse++) {
      long rows = cs[0], t = cs[1], hs = cs[2], n = rows * t * hs;
      Buf<T> x = rand_vec<T>(n, -2, 2), y = rand_vec<T>(n);
      T *dx = dev(x), *dy = dev(y);
      CPU(rt_rope)(y.data(), x.data(), rows, t, hs, 10000.0f, inverse);
      rt_rope(dy, dx, rows, t, hs, 10000.0f, inverse);
      check(fmt("rope rows=%ld t=%ld hs=%ld inverse=%d", rows, t, hs, inverse), y, dy, ELEM);
      free_all();
    }
}

// t queries, tk keys (cross-attention when they differ); padded: a key-padding
// mask per head, row 1 keeping no key, the others scattered; biased: one bias
// (t x tk) shared by every head
template <typename T>
static void test_attention(void) {
  struct Case {
    long bh, t, tk, hs;
    int only = -1;  // the one mode to run (below), or every mode
    int tensor_cores = 0;  // 1: bf16 only, without a bias (the tensor-core kernels)
  } cases[] = {
#ifndef MTC_CUDA_EMU
      {1, 1, 1, 1},     {2, 7, 7, 16},      {3, 64, 64, 64}, {2, 300, 300, 80},
      {1, 1030, 1030, 64}, {2, 33, 33, 300}, {2, 7, 19, 16},  {3, 300, 64, 80},
      {2, 200, 200, 128}, {2, 70, 70, 24}};
#else
      // the emulation: fewer query rows; two tiles of keys (ATT_TILE = 256),
      // and of queries for dk, dv, in the plain mode and the padded, biased
      // one, in float32 (the bf16 kernels are the same templates); bf16's
      // tensor-core kernels (64 x 64 tiles) over two to four tiles, each
      // padded head size (24 -> 32, 64, 128); four whole blocks of four tiles,
      // so that every order of threads meets a tile filled while another is read
      {1, 1, 1, 1},       {2, 7, 7, 16},      {1, 5, 5, 300},    {2, 7, 19, 16},
      {2, 3, 300, 80, 0}, {2, 3, 300, 80, 6}, {1, 260, 3, 16, 6}, {2, 70, 70, 24, -1, 1},
      {1, 66, 130, 64, -1, 1}, {1, 80, 80, 128, -1, 1}, {1, 256, 256, 64, -1, 1}};
#endif
  for (const Case &c : cases)
    for (int mode = 0; mode < 8; mode++) {
      int causal = mode & 1, padded = (mode >> 1) & 1, biased = mode >> 2;
      if ((causal && c.t != c.tk) || (c.only >= 0 && (mode != c.only || !is_f32<T>)) ||
          (c.tensor_cores && (is_f32<T> || biased)))
        continue;
      long n = c.bh * c.t * c.hs, nk = c.bh * c.tk * c.hs, nd = c.bh * c.t * c.tk;
      Buf<T> q = rand_vec<T>(n, -2, 2), k = rand_vec<T>(nk, -2, 2), v = rand_vec<T>(nk),
             out = rand_vec<T>(n);
      T *dq = dev(q), *dk = dev(k), *dv = dev(v), *dout = dev(out);
      IVec keep(c.bh * c.tk);
      for (long r = 0; r < c.bh; r++)
        for (long j = 0; j < c.tk; j++) keep[r * c.tk + j] = r == 1 ? 0 : (j * 7 + r * 3) % 5 > 1;
      Buf<T> bias = rand_vec<T>(c.t * c.tk, -2, 2), ds = rand_vec<T>(nd);
      const int *hk = padded ? keep.data() : NULL, *dkeep = padded ? dev(keep) : NULL;
      const T *hb = biased ? bias.data() : NULL, *dbias = biased ? dev(bias) : NULL;
      T *hds = biased ? ds.data() : NULL, *dds = biased ? dev(ds) : NULL;
      char what[128];
      snprintf(what, sizeof what, "bh=%ld t=%ld tk=%ld hs=%ld causal=%d padded=%d biased=%d", c.bh,
               c.t, c.tk, c.hs, causal, padded, biased);
      Buf<float> lse = rand_vec<float>(c.bh * c.t);
      float *dlse = dev(lse);
      CPU(rt_attention_fwd)(out.data(), lse.data(), q.data(), k.data(), v.data(), hk, hb, c.bh, c.t,
                            c.tk, c.hs, 1, 1, 1, causal);
      rt_attention_fwd(dout, dlse, dq, dk, dv, dkeep, dbias, c.bh, c.t, c.tk, c.hs, 1, 1, 1, causal);
      check(fmt("attention_fwd %s", what), out, dout, RED);
      check(fmt("attention_fwd lse %s", what), lse, dlse, RED);
      // the backward reads the CPU's forward on both sides
      T *dfout = dev(out);
      dlse = dev(lse);
      Buf<T> g = rand_vec<T>(n), gq = rand_vec<T>(n), gk = rand_vec<T>(nk), gv = rand_vec<T>(nk);
      T *dg = dev(g), *dgq = dev(gq), *dgk = dev(gk), *dgv = dev(gv);
      CPU(rt_attention_bwd)(gq.data(), gk.data(), gv.data(), hds, g.data(), q.data(), k.data(),
                            v.data(), out.data(), lse.data(), hk, hb, c.bh, c.t, c.tk, c.hs, 1, 1, 1,
                            causal);
      rt_attention_bwd(dgq, dgk, dgv, dds, dg, dq, dk, dv, dfout, dlse, dkeep, dbias, c.bh, c.t, c.tk,
                       c.hs, 1, 1, 1, causal);
      // Each row's D = sum_j p_j dp_j the CPU sums itself; the GPU reads it as dout . out, out
      // rounded to T: in bf16 D is off by up to 2^-9 sum_d |dout_d out_d|, which ds = p (dp - D)
      // carries, and dq = sum_j ds_j k_j / sqrt(hs) too. The checks allow that much: their
      // scale is that bound over the BF16 tolerance.
      double terms = 0.0, kmax = 0.0;
      for (long r = 0; !is_f32<T> && r < c.bh * c.t; r++) {
        double t = 0.0;
        for (long d = 0; d < c.hs; d++) t += fabs(wide(g[r * c.hs + d]) * wide(out[r * c.hs + d]));
        terms = fmax(terms, t / 512.0 / BF16);
      }
      for (long i = 0; !is_f32<T> && i < nk; i++) kmax = fmax(kmax, fabs(wide(k[i])));
      check(fmt("attention_bwd dq %s", what), gq, dgq, RED, terms * kmax / sqrt((double)c.hs));
      check(fmt("attention_bwd dk %s", what), gk, dgk, RED);
      check(fmt("attention_bwd dv %s", what), gv, dgv, RED);
      if (biased) check(fmt("attention_bwd dscores %s", what), ds, dds, RED, terms);
      free_all();
    }
}

template <typename T>
static void test_losses(void) {
  for (const auto &rc : row_cases) {
    // the vocabulary padded (bf16 programs, passes/tp.c): the last columns are padding
    long n = rc[0], v = rc[1], vocab = v > 16 ? v - 7 : v;
    Buf<T> x = rand_vec<T>(n * v, -6, 6);
    IVec tg = rand_ivec(n, 0, (int)vocab);
    for (long i = 3; i < n; i += 4) tg[i] = -100;  // every fourth row ignored
    Vec loss = {7.0f}, dloss = {0.7f};  // float32 in every variant
    Buf<T> g = rand_vec<T>(n * v);
    T *dx = dev(x), *dg = dev(g);
    float *dl = dev(loss), *ddl = dev(dloss);
    int *dtg = dev(tg);
    CPU(rt_crossentropy_fwd)(loss.data(), x.data(), tg.data(), n, v, vocab, -100);
    rt_crossentropy_fwd(dl, dx, dtg, n, v, vocab, -100);
    check(fmt("crossentropy_fwd n=%ld v=%ld vocab=%ld", n, v, vocab), loss, dl, RED);
    CPU(rt_crossentropy_bwd)(g.data(), dloss.data(), x.data(), tg.data(), n, v, vocab, -100);
    rt_crossentropy_bwd(dg, ddl, dx, dtg, n, v, vocab, -100);
    check(fmt("crossentropy_bwd n=%ld v=%ld vocab=%ld", n, v, vocab), g, dg, RED);
    // in place, the gradient over the logits (passes/memplan.c's pass_in_place): the same
    Buf<T> x0 = x;
    T *dx2 = dev(x);
    rt_crossentropy_bwd(dx, ddl, dx, dtg, n, v, vocab, -100);
    check(fmt("crossentropy_bwd in place n=%ld v=%ld vocab=%ld", n, v, vocab), g, dx, RED);
    // both in one pass, in place; in eval mode the loss alone and the logits as they were
    Vec floss = {7.0f};
    float *dfl = dev(floss);
    CPU(rt_crossentropy_fused)(floss.data(), x.data(), x.data(), tg.data(), n, v, vocab, -100,
                               0.7f);
    rt_crossentropy_fused(dfl, dx2, dx2, dtg, n, v, vocab, -100, 0.7f);
    check(fmt("crossentropy_fused loss n=%ld v=%ld vocab=%ld", n, v, vocab), floss, dfl, RED);
    check(fmt("crossentropy_fused gradient n=%ld v=%ld vocab=%ld", n, v, vocab), x, dx2, RED);
    check(fmt("crossentropy_fused gradient = crossentropy_bwd's n=%ld v=%ld vocab=%ld", n, v,
              vocab), g, dx2, RED);
    T *dx3 = dev(x0);
    rt_eval_mode = 1;
    rt_crossentropy_fused(dfl, dx3, dx3, dtg, n, v, vocab, -100, 0.7f);
    rt_eval_mode = 0;
    check(fmt("crossentropy_fused loss, eval mode n=%ld v=%ld", n, v), loss, dfl, RED);
    check(fmt("crossentropy_fused in eval mode leaves the logits n=%ld v=%ld", n, v), x0, dx3,
          EXACT);
    free_all();
  }
  // nll_loss over log-probabilities; targets that are ignored or out of range
  struct Case {
    long n, c, ignore;
    int sum, all_ignored;
  } cases[] = {{1, 1, -100, 0, 0},  {5, 17, -100, 0, 0}, {300, 10, 3, 0, 0},
               {300, 10, 3, 1, 0},  {4096, 1000, -100, 1, 0}, {6, 5, 2, 0, 1}};
  for (const Case &c : cases) {
    Buf<T> lp = rand_vec<T>(c.n * c.c, -9, 0);
    IVec tg = rand_ivec(c.n, -1, (int)c.c + 1);  // -1 and c: out of range
    for (long i = 0; i < c.n; i += 7) tg[(size_t)i] = (int)c.ignore;
    if (c.all_ignored)
      for (auto &t : tg) t = (int)c.ignore;
    Vec loss = {7.0f}, dloss = {-1.3f};
    Buf<T> g = rand_vec<T>(c.n * c.c);
    T *dlp = dev(lp), *dg = dev(g);
    float *dl = dev(loss), *ddl = dev(dloss);
    int *dtg = dev(tg);
    CPU(rt_nll_loss_fwd)(loss.data(), lp.data(), tg.data(), c.n, c.c, c.sum, c.ignore);
    rt_nll_loss_fwd(dl, dlp, dtg, c.n, c.c, c.sum, c.ignore);
    check(fmt("nll_loss_fwd n=%ld c=%ld ignore=%ld sum=%d", c.n, c.c, c.ignore, c.sum), loss, dl,
          RED);
    CPU(rt_nll_loss_bwd)(g.data(), dloss.data(), tg.data(), c.n, c.c, c.sum, c.ignore);
    rt_nll_loss_bwd(dg, ddl, dtg, c.n, c.c, c.sum, c.ignore);
    check(fmt("nll_loss_bwd n=%ld c=%ld ignore=%ld sum=%d", c.n, c.c, c.ignore, c.sum), g, dg,
          ELEM);
    free_all();
  }
}

// ---- optimizers

// Each element rounded to bf16 (to nearest even).
static Buf<rt_bf16> rounded(const Vec &x) {
  Buf<rt_bf16> r(x.size());
  for (size_t i = 0; i < x.size(); i++) r[i] = rt_f32_to_bf16(x[i]);
  return r;
}

static void test_optimizers(void) {
  for (long n : {1L, 15L, 16L, 17L, 1000L, BIG(1L << 20, 1L << 14) + 1})
    for (int t : {1, 10}) {
      Vec p = rand_vec(n), g = rand_vec(n), m = rand_vec(n, -0.1f, 0.1f), v = rand_vec(n, 0, 0.01f);
      float *dp = dev(p), *dg = dev(g), *dm = dev(m), *dv = dev(v);
      float gscale = t == 10 ? 0.5f : 1.0f;  // a clipped step
      long decay_n = t == 10 ? n / 3 : n;  // norms and biases after the decayed part
      CPU(rt_adamw)(p.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, t,
                    gscale, decay_n);
      rt_adamw(dp, dg, dm, dv, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, t, gscale, decay_n);
      check(fmt("adamw p n=%ld t=%d", n, t), p, dp, ELEM);
      check(fmt("adamw m n=%ld t=%d", n, t), m, dm, ELEM);
      check(fmt("adamw v n=%ld t=%d", n, t), v, dv, ELEM);
      Vec s = rand_vec(n);
      float *ds = dev(s);
      CPU(rt_sgd)(s.data(), g.data(), n, 0.05f, 0.01f, gscale, decay_n);
      rt_sgd(ds, dg, n, 0.05f, 0.01f, gscale, decay_n);
      check(fmt("sgd n=%ld t=%d", n, t), s, ds, ELEM);
      // ... writing the bf16 copy too: the CPU's update is rt_adamw's (rt_sgd's) to the bit and
      // each copy the update rounded, exactly; the GPU's against the CPU's
      Vec q = rand_vec(n), mq = rand_vec(n, -0.1f, 0.1f), vq = rand_vec(n, 0, 0.01f);
      Vec q0 = q, mq0 = mq, vq0 = vq;
      float *dq = dev(q), *dmq = dev(mq), *dvq = dev(vq);
      Buf<rt_bf16> cq((size_t)n);
      rt_bf16 *dc = dev(cq);
      CPU(rt_adamw_copy)(q.data(), g.data(), mq.data(), vq.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f,
                         0.1f, t, gscale, decay_n, cq.data());
      CPU(rt_adamw)(q0.data(), g.data(), mq0.data(), vq0.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f,
                    0.1f, t, gscale, decay_n);
      rt_adamw_copy(dq, dg, dmq, dvq, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, t, gscale, decay_n, dc);
      check(fmt("adamw_copy p n=%ld t=%d", n, t), q, dq, ELEM);
      check(fmt("adamw_copy m n=%ld t=%d", n, t), mq, dmq, ELEM);
      check(fmt("adamw_copy c n=%ld t=%d", n, t), cq, dc, BF16);
      check(fmt("adamw_copy cpu p = adamw's n=%ld t=%d", n, t), q0, dev(q), EXACT);
      check(fmt("adamw_copy cpu c = p rounded n=%ld t=%d", n, t), rounded(q), dev(cq), EXACT);
      check(fmt("adamw_copy gpu c = p rounded n=%ld t=%d", n, t), rounded(host(dq, (size_t)n)), dc,
            EXACT);
      // ... and with the gradients in bf16 (--grad-precision bf16)
      Buf<rt_bf16> gb = rounded(g);
      rt_bf16 *dgb = dev(gb);
      Vec pb = rand_vec(n), mb = rand_vec(n, -0.1f, 0.1f), vb = rand_vec(n, 0, 0.01f);
      float *dpb = dev(pb), *dmb = dev(mb), *dvb = dev(vb);
      CPU(rt_adamw_copy_bf16)(pb.data(), gb.data(), mb.data(), vb.data(), n, 1e-3f, 0.9f, 0.999f,
                              1e-8f, 0.1f, t, gscale, decay_n, cq.data());
      rt_adamw_copy_bf16(dpb, dgb, dmb, dvb, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, t, gscale,
                         decay_n, dc);
      check(fmt("adamw_copy bf16 grads p n=%ld t=%d", n, t), pb, dpb, ELEM);
      check(fmt("adamw_copy bf16 grads v n=%ld t=%d", n, t), vb, dvb, ELEM);
      check(fmt("adamw_copy bf16 grads c n=%ld t=%d", n, t), cq, dc, BF16);
      Vec sb = rand_vec(n);
      float *dsb = dev(sb);
      CPU(rt_sgd_bf16)(sb.data(), gb.data(), n, 0.05f, 0.01f, gscale, decay_n);
      rt_sgd_bf16(dsb, dgb, n, 0.05f, 0.01f, gscale, decay_n);
      check(fmt("sgd bf16 grads n=%ld t=%d", n, t), sb, dsb, ELEM);
      Vec r = rand_vec(n), r0 = r;
      float *dr = dev(r);
      CPU(rt_sgd_copy)(r.data(), g.data(), n, 0.05f, 0.01f, gscale, decay_n, cq.data());
      CPU(rt_sgd)(r0.data(), g.data(), n, 0.05f, 0.01f, gscale, decay_n);
      rt_sgd_copy(dr, dg, n, 0.05f, 0.01f, gscale, decay_n, dc);
      check(fmt("sgd_copy p n=%ld t=%d", n, t), r, dr, ELEM);
      check(fmt("sgd_copy c n=%ld t=%d", n, t), cq, dc, BF16);
      check(fmt("sgd_copy cpu p = sgd's n=%ld t=%d", n, t), r0, dev(r), EXACT);
      check(fmt("sgd_copy cpu c = p rounded n=%ld t=%d", n, t), rounded(r), dev(cq), EXACT);
      // the gradients' norm (float64 sums in another order: float precision)
      Vec want(1), got(1);
      float *dout = dev(got);
      CPU(rt_norm2)(want.data(), g.data(), n);
      rt_norm2(dout, dg, n);
      check(fmt("norm2 n=%ld", n), want, dout, ELEM);
      // bf16 gradients (--grad-precision bf16): the CPU's updates and norm are the float32
      // kernels' on the widened gradient, to the bit; the GPU's against the CPU's
      Buf<rt_bf16> gh = rounded(g);
      Vec gw((size_t)n), a = rand_vec(n), am = rand_vec(n, -0.1f, 0.1f), av = rand_vec(n, 0, 0.01f);
      for (long i = 0; i < n; i++) gw[i] = rt_bf16_to_f32(gh[i]);
      Vec a0 = a, am0 = am, av0 = av, b = rand_vec(n), b0 = b;
      float *da = dev(a), *dam = dev(am), *dav = dev(av), *db = dev(b);
      rt_bf16 *dgh = dev(gh);
      CPU(rt_adamw_bf16)(a.data(), gh.data(), am.data(), av.data(), n, 1e-3f, 0.9f, 0.999f,
                         1e-8f, 0.1f, t, gscale, decay_n);
      CPU(rt_adamw)(a0.data(), gw.data(), am0.data(), av0.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f,
                    0.1f, t, gscale, decay_n);
      rt_adamw_bf16(da, dgh, dam, dav, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, t, gscale, decay_n);
      check(fmt("adamw_bf16 cpu p = adamw's n=%ld t=%d", n, t), a0, dev(a), EXACT);
      check(fmt("adamw_bf16 cpu v = adamw's n=%ld t=%d", n, t), av0, dev(av), EXACT);
      check(fmt("adamw_bf16 p n=%ld t=%d", n, t), a, da, ELEM);
      check(fmt("adamw_bf16 m n=%ld t=%d", n, t), am, dam, ELEM);
      CPU(rt_sgd_bf16)(b.data(), gh.data(), n, 0.05f, 0.01f, gscale, decay_n);
      CPU(rt_sgd)(b0.data(), gw.data(), n, 0.05f, 0.01f, gscale, decay_n);
      rt_sgd_bf16(db, dgh, n, 0.05f, 0.01f, gscale, decay_n);
      check(fmt("sgd_bf16 cpu = sgd's n=%ld t=%d", n, t), b0, dev(b), EXACT);
      check(fmt("sgd_bf16 n=%ld t=%d", n, t), b, db, ELEM);
      Vec nw(1), nb(1);
      float *dnb = dev(nb);
      CPU(rt_norm2)(nw.data(), gw.data(), n);
      CPU(rt_norm2_bf16)(nb.data(), gh.data(), n);
      check(fmt("norm2_bf16 cpu = norm2's n=%ld", n), nw, dev(nb), EXACT);
      rt_norm2_bf16(dnb, dgh, n);
      check(fmt("norm2_bf16 n=%ld", n), nb, dnb, ELEM);
      free_all();
    }
  // the norm over more parts than a block has threads, each thread several strides
  for (long n : {BIG(5L << 20, 300000L) + 3}) {
    Vec g = rand_vec(n), want(1), got(1);
    float *dg = dev(g), *dout = dev(got);
    CPU(rt_norm2)(want.data(), g.data(), n);
    rt_norm2(dout, dg, n);
    check(fmt("norm2 n=%ld", n), want, dout, ELEM);
    free_all();
  }
}

// ---- kernels for ONNX ops, offload copies

template <typename T>
static void test_onnx_ops(void) {
  struct Case {
    int rank;
    long shape[3], mstride[3];
  } cases[] = {{0, {0}, {0}},
               {3, {4, 5, 6}, {30, 6, 1}},
               {3, {4, 5, 6}, {0, 6, 1}},      // broadcast over the batch
               {3, {4, 5, 600}, {5, 1, 0}},    // broadcast along rows
               {2, {64, 64}, {0, 0}}};         // one mask value
  for (const Case &c : cases) {
    long n = numel(c.rank, c.shape);
    IVec mask = rand_ivec(span_of(c.rank, c.shape, c.mstride), 0, 2);
    Buf<T> x = rand_vec<T>(n), out = rand_vec<T>(n);
    int *dmask = dev(mask);
    T *dx = dev(x), *dout = dev(out);
    CPU(rt_masked_fill)(out.data(), x.data(), mask.data(), c.rank, c.shape, c.mstride, -1e9f);
    rt_masked_fill(dout, dx, dmask, c.rank, c.shape, c.mstride, -1e9f);
    check(fmt("masked_fill rank=%d n=%ld", c.rank, n), out, dout, EXACT);
    IVec xi = rand_ivec(n, -3, 3), outi = rand_ivec(n, 0, 5), eq = rand_ivec(n, 0, 5);
    int *dxi = dev(xi), *douti = dev(outi), *deq = dev(eq);
    if (is_f32<T>) {  // int32 only
      CPU(rt_masked_fill_i32)(outi.data(), xi.data(), mask.data(), c.rank, c.shape, c.mstride,
                              -100);
      rt_masked_fill_i32(douti, dxi, dmask, c.rank, c.shape, c.mstride, -100);
      check_int(fmt("masked_fill_i32 rank=%d n=%ld", c.rank, n), outi, douti);
      CPU(rt_equal_i32)(eq.data(), xi.data(), n, -2);
      rt_equal_i32(deq, dxi, n, -2);
      check_int(fmt("equal_i32 n=%ld", n), eq, deq);
    }
    Buf<T> xf = rand_vec<T>(n);
    for (long i = 0; i < n; i += 3) xf[i] = narrow<T>(0.0f);
    T *dxf = dev(xf);
    CPU(rt_equal_f32)(eq.data(), xf.data(), n, 0.0f);
    rt_equal_f32(deq, dxf, n, 0.0f);
    check_int(fmt("equal_f32 n=%ld", n), eq, deq);
    free_all();
  }
  for (long n : {1L, 1000L, BIG(1L << 20, 1L << 14) + 7})
    for (float ratio : {0.0f, 0.1f, 0.5f})
      for (int st : {0, 41, -3}) {
        Buf<T> x = rand_vec<T>(n), out = rand_vec<T>(n);
        IVec step = {st};
        T *dx = dev(x), *dout = dev(out);
        int *dstep = dev(step);
        CPU(rt_dropout)(out.data(), x.data(), step.data(), n, ratio, 1234, 77, 0, 0, RT_AXIS_TP,
                        RT_AXIS_NONE);
        rt_dropout(dout, dx, dstep, n, ratio, 1234, 77, 0, 0, RT_AXIS_TP, RT_AXIS_NONE);
        check(fmt("dropout n=%ld ratio=%g step=%d", n, ratio, st), out, dout, EXACT);
        if (is_f32<T>) {  // int32 only
          CPU(rt_tick)(step.data());
          rt_tick(dstep);
          check_int(fmt("tick from %d", st), step, dstep);
        }
        free_all();
      }
  // each way at once (slot -1), and started on the copy stream then waited for (a slot)
  for (long n : {1L, 1000L})
    for (int slot : {-1, 3}) {
      Buf<T> h = rand_vec<T>(n), back = rand_vec<T>(n), before = back;
      T *d = dev(rand_vec<T>(n));
      rt_to_device(d, h.data(), n, slot);
      if (slot >= 0) rt_copy_wait(slot, 0);
      rt_to_host(back.data(), d, n, slot);
      bool early = false;  // the emulation makes a started copy at its wait: not before
#ifdef MTC_CUDA_EMU
      early = slot >= 0 && memcmp(before.data(), back.data(), (size_t)n * sizeof(T)) != 0;
#endif
      if (slot >= 0) rt_copy_wait(slot, 1);
      ncases++;
      bool ok = memcmp(h.data(), back.data(), (size_t)n * sizeof(T)) == 0 && !early &&
                rt_copies_pending() == 0;
      printf("%sto_device, to_host n=%ld slot %d: round trip %s\n", variant, n, slot,
             ok ? "exact" : early ? "made before its wait  FAIL" : "differs  FAIL");
      if (!ok) nfail++;
      free_all();
    }
}

// ---- the finite check: the GPU's first NaN or infinity is the CPU's

template <typename T>
static void test_find_nonfinite(void) {
  long n = BIG(1L << 20, 1L << 14) + 37;
  Buf<T> x = rand_vec<T>(n);
  for (long at : {-1L, 0L, 4095L, BIG(300000L, 9001L), n - 1}) {
    Buf<T> y = x;
    if (at >= 0) y[(size_t)at] = narrow<T>(at % 2 ? NAN : -INFINITY);
    if (at == 4095) y[(size_t)(n - 2)] = narrow<T>(INFINITY);  // a later one too
    T *dy = dev(y);
    IVec got = {7};
    int *dgot = dev(got);
    IVec want = {7};
    CPU(rt_find_nonfinite)(want.data(), y.data(), n);
    rt_find_nonfinite(dgot, dy, n);
    check_int(fmt("find_nonfinite n=%ld at %ld", n, at), want, dgot);
    free_all();
  }
}

// ---- dist.h's kernels, on one rank (main calls rt_comm_init, rt_dist_init):
// this rank plays tp rank 1 of 2 (the collectives over a group of one leave
// the buffers as they are, on both sides)

// SUMMA at the middle rank (1, 1) of a 3 x 3 grid: panel 1 of each operand is its own, panels
// 0 and 2 land in the two buffers (the broadcasts over a group of one leave them as they
// are), so c = apanel[0] bpanel[0] + a b + apanel[1] bpanel[1], summed in float32 in that
// order and rounded once: the CPU kernel exactly so, the CUDA one as a product (RED).
template <typename T>
static void test_summa(void) {
  rt_dist.q = 3;
  rt_dist.tp_rank = 4;
  const long cases[][3] = {{5, 7, 3}, {65, 130, 33}};
  for (const auto &c : cases) {
    long m = c[0], n = c[1], k = c[2];
    Buf<T> a = rand_vec<T>(m * k), b = rand_vec<T>(k * n), ap = rand_vec<T>(2 * m * k),
           bp = rand_vec<T>(2 * k * n), out = rand_vec<T>(m * n);
    T *da = dev(a), *db = dev(b), *dap = dev(ap), *dbp = dev(bp), *dc = dev(out);
    CPU(rt_summa)(out.data(), ap.data(), bp.data(), a.data(), b.data(), m, n, k);
    rt_summa(dc, dap, dbp, da, db, m, n, k);
    Vec acc((size_t)(m * n)), part((size_t)(m * n));
    const T *as[3] = {ap.data(), a.data(), ap.data() + m * k};
    const T *bs[3] = {bp.data(), b.data(), bp.data() + k * n};
    for (int t = 0; t < 3; t++) {
      CPU(rt_matmul)(t ? part.data() : acc.data(), as[t], bs[t], 1L, m, n, k, 0, 0, 0L, 0L, 0L);
      for (size_t i = 0; t && i < acc.size(); i++) acc[i] += part[i];
    }
    Buf<T> want((size_t)(m * n));
    for (size_t i = 0; i < acc.size(); i++) want[i] = narrow<T>(acc[i]);
    check(fmt("summa m=%ld n=%ld k=%ld (rank 1, 1 of 3 x 3): the CPU's, the panels' sum", m, n,
              k), want, dev(out), EXACT);
    check(fmt("summa m=%ld n=%ld k=%ld (rank 1, 1 of 3 x 3)", m, n, k), out, dc, RED);
    // backward: product t of panel t; this rank's (t = 1) in dx or dw, the others' in the
    // product buffers in turn (the reductions over a group of one leave them as they are)
    Buf<T> dy = rand_vec<T>(m * n), dx = rand_vec<T>(m * k), dw = rand_vec<T>(k * n);
    Buf<T> pdx = rand_vec<T>(2 * m * k), pdw = rand_vec<T>(2 * k * n);
    T *ddy = dev(dy), *ddx = dev(dx), *ddw = dev(dw), *dpdx = dev(pdx), *dpdw = dev(pdw);
    Buf<T> wp = rand_vec<T>(2 * k * n), xp = rand_vec<T>(2 * m * k);
    T *dwp = dev(wp), *dxp = dev(xp);
    CPU(rt_summa_nt)(dx.data(), wp.data(), pdx.data(), dy.data(), b.data(), m, n, k);
    rt_summa_nt(ddx, dwp, dpdx, ddy, db, m, n, k);
    CPU(rt_summa_tn)(dw.data(), xp.data(), pdw.data(), a.data(), dy.data(), m, n, k);
    rt_summa_tn(ddw, dxp, dpdw, da, ddy, m, n, k);
    Buf<T> want_dx((size_t)(m * k)), want_dw((size_t)(k * n));
    Buf<T> want_pdx((size_t)(2 * m * k)), want_pdw((size_t)(2 * k * n));
    for (int t = 0; t < 3; t++) {
      T *ox = t == 1 ? want_dx.data() : want_pdx.data() + (t / 2) * m * k;
      T *ow = t == 1 ? want_dw.data() : want_pdw.data() + (t / 2) * k * n;
      const T *wt = t == 1 ? b.data() : wp.data() + (t / 2) * k * n;
      const T *xt = t == 1 ? a.data() : xp.data() + (t / 2) * m * k;
      CPU(rt_matmul)(ox, dy.data(), wt, 1L, m, k, n, 0, 1, 0L, 0L, 0L);
      CPU(rt_matmul)(ow, xt, dy.data(), 1L, k, n, m, 1, 0, 0L, 0L, 0L);
    }
    check(fmt("summa_nt m=%ld n=%ld k=%ld: the CPU's dx, dy @ w^T", m, n, k), want_dx, dev(dx),
          EXACT);
    check(fmt("summa_nt m=%ld n=%ld k=%ld: the CPU's products for columns 0 and 2", m, n, k),
          want_pdx, dev(pdx), EXACT);
    check(fmt("summa_tn m=%ld n=%ld k=%ld: the CPU's dw, x^T @ dy", m, n, k), want_dw, dev(dw),
          EXACT);
    check(fmt("summa_tn m=%ld n=%ld k=%ld: the CPU's products for rows 0 and 2", m, n, k),
          want_pdw, dev(pdw), EXACT);
    check(fmt("summa_nt m=%ld n=%ld k=%ld dx (rank 1, 1 of 3 x 3)", m, n, k), dx, ddx, RED);
    check(fmt("summa_nt m=%ld n=%ld k=%ld products", m, n, k), pdx, dpdx, RED);
    check(fmt("summa_tn m=%ld n=%ld k=%ld dw (rank 1, 1 of 3 x 3)", m, n, k), dw, ddw, RED);
    check(fmt("summa_tn m=%ld n=%ld k=%ld products", m, n, k), pdw, dpdw, RED);
    free_all();
  }
  rt_dist.q = 1;
  rt_dist.tp_rank = 0;
}

template <typename T>
static void test_dist(void) {
  for (long n : {1L, 1000L, BIG(1L << 18, 1L << 14) + 3}) {
    Buf<T> acc = rand_vec<T>(n), x = rand_vec<T>(n);
    T *dacc = dev(acc), *dx = dev(x);
    for (int micro = 0; micro < 2; micro++) {  // restarts, then adds
      rt_dist.micro = micro;
      CPU(rt_accumulate)(acc.data(), x.data(), n, 0.5f);
      rt_accumulate(dacc, dx, n, 0.5f);
      check(fmt("accumulate n=%ld micro=%d", n, micro), acc, dacc, ELEM);
    }
    free_all();
  }
  rt_dist.micro = 0;
  rt_dist.tp = 2;
  rt_dist.tp_rank = 1;
  long outer = 3, pieces = 3, chunk = 5;
  Buf<T> whole = rand_vec<T>(outer * pieces * 2 * chunk), part((size_t)(outer * pieces * chunk));
  T *dw = dev(whole), *dp = dev(part);
  CPU(rt_tp_slice)(RT_AXIS_TP, part.data(), whole.data(), outer, pieces, chunk);
  rt_tp_slice(RT_AXIS_TP, dp, dw, outer, pieces, chunk);
  check("tp_slice outer=3 pieces=3 chunk=5 (rank 1 of 2)", part, dp, EXACT);
  if (sizeof(T) == 4) {   // token ids: the same cut, of ints
    IVec wi(whole.size()), pi(part.size());
    for (size_t i = 0; i < wi.size(); i++) wi[i] = (int)(i * 7919 % 50257);
    int *dwi = dev(wi), *dpi = dev(pi);
    CPU(rt_tp_slice_i32)(RT_AXIS_TP, pi.data(), wi.data(), outer, pieces, chunk);
    rt_tp_slice_i32(RT_AXIS_TP, dpi, dwi, outer, pieces, chunk);
    check_int("tp_slice_i32 outer=3 pieces=3 chunk=5 (rank 1 of 2)", pi, dpi);
  }
  // tp_gather: this rank's part into its place in the scratch, the other
  // rank's part left as it was there; then both placed
  Buf<T> scratch = rand_vec<T>(2 * outer * pieces * chunk), gathered = rand_vec<T>(whole.size());
  T *dscratch = dev(scratch), *dgathered = dev(gathered);
  CPU(rt_tp_gather)(RT_AXIS_TP, gathered.data(), scratch.data(), part.data(), outer, pieces, chunk);
  rt_tp_gather(RT_AXIS_TP, dgathered, dscratch, dp, outer, pieces, chunk);
  check("tp_gather outer=3 pieces=3 chunk=5 (rank 1 of 2)", gathered, dgathered, EXACT);
  check("tp_gather scratch (rank 1 of 2)", scratch, dscratch, EXACT);
  if (sizeof(T) == 4) {   // a key-padding mask: the same placing, of ints
    IVec pi(part.size()), si(scratch.size()), gi(whole.size());
    for (size_t i = 0; i < pi.size(); i++) pi[i] = (int)(i * 7919 % 2) - (int)(i % 3 == 0);
    int *dpi = dev(pi), *dsi = dev(si), *dgi = dev(gi);
    CPU(rt_tp_gather_i32)(RT_AXIS_TP, gi.data(), si.data(), pi.data(), outer, pieces, chunk);
    rt_tp_gather_i32(RT_AXIS_TP, dgi, dsi, dpi, outer, pieces, chunk);
    check_int("tp_gather_i32 outer=3 pieces=3 chunk=5 (rank 1 of 2)", gi, dgi);
  }
  // tp_reduce_scatter: each rank's part of x into the scratch in rank order, reduced over
  // the group (one process here: as it is), this rank's part out: the slice's
  Buf<T> rs = rand_vec<T>(part.size()), rscratch = rand_vec<T>(whole.size());
  T *drs = dev(rs), *drscratch = dev(rscratch);
  CPU(rt_tp_reduce_scatter)(RT_AXIS_TP, rs.data(), rscratch.data(), whole.data(), outer, pieces, chunk);
  rt_tp_reduce_scatter(RT_AXIS_TP, drs, drscratch, dw, outer, pieces, chunk);
  check("tp_reduce_scatter outer=3 pieces=3 chunk=5 (rank 1 of 2)", rs, drs, EXACT);
  check("tp_reduce_scatter scratch (rank 1 of 2)", rscratch, drscratch, EXACT);
  check("tp_reduce_scatter = tp_slice on one process", part, drs, EXACT);
  free_all();
  for (const auto &rc : row_cases) {
    long n = rc[0], v = rc[1], c = 7;
    // this rank's v rows of the table or columns of the logits, the vocabulary
    // ending inside them (padding after it)
    long vocab = v + v / 2 + 1;
    IVec idx = rand_ivec(n, 0, (int)(2 * v));
    for (long i = 5; i < n; i += 7) idx[i] = -100;  // some rows ignored by the cross-entropy
    Buf<T> w = rand_vec<T>(v * c), out = rand_vec<T>(n * c);
    T *dw2 = dev(w), *dout = dev(out);
    int *didx = dev(idx);
    CPU(rt_embedding_vp_fwd)(RT_AXIS_TP, out.data(), w.data(), idx.data(), n, c, v);
    rt_embedding_vp_fwd(RT_AXIS_TP, dout, dw2, didx, n, c, v);
    check(fmt("embedding_vp_fwd n=%ld v=%ld (rank 1 of 2)", n, v), out, dout, EXACT);
    Buf<T> dy = rand_vec<T>(n * c), gw = rand_vec<T>(v * c);  // gw: overwritten
    T *ddy = dev(dy), *dgw = dev(gw);
    CPU(rt_embedding_vp_bwd)(RT_AXIS_TP, gw.data(), dy.data(), idx.data(), n, v, c);
    rt_embedding_vp_bwd(RT_AXIS_TP, dgw, ddy, didx, n, v, c);
    check(fmt("embedding_vp_bwd n=%ld v=%ld (rank 1 of 2)", n, v), gw, dgw, ELEM);
    Buf<T> x = rand_vec<T>(n * v, -6, 6), g = rand_vec<T>(n * v);
    Vec stats = rand_vec(2 * n), loss = {7.0f}, dloss = {0.7f};  // float32 in every variant
    T *dx = dev(x), *dg = dev(g);
    float *dst = dev(stats), *dl = dev(loss), *ddl = dev(dloss);
    CPU(rt_vp_crossentropy_fwd)(RT_AXIS_TP, loss.data(), stats.data(), x.data(), idx.data(), n, v, vocab, -100);
    rt_vp_crossentropy_fwd(RT_AXIS_TP, dl, dst, dx, didx, n, v, vocab, -100);
    check(fmt("vp_crossentropy_fwd n=%ld v=%ld (rank 1 of 2)", n, v), loss, dl, RED);
    check(fmt("vp_crossentropy_fwd stats n=%ld v=%ld", n, v), Vec(stats.begin(), stats.begin() + n),
          dst, RED);
    CPU(rt_vp_crossentropy_bwd)(RT_AXIS_TP, g.data(), dloss.data(), x.data(), idx.data(), stats.data(), n, v,
                                vocab, -100);
    rt_vp_crossentropy_bwd(RT_AXIS_TP, dg, ddl, dx, didx, dst, n, v, vocab, -100);
    check(fmt("vp_crossentropy_bwd n=%ld v=%ld (rank 1 of 2)", n, v), g, dg, RED);
    rt_vp_crossentropy_bwd(RT_AXIS_TP, dx, ddl, dx, didx, dst, n, v, vocab, -100);
    check(fmt("vp_crossentropy_bwd in place n=%ld v=%ld (rank 1 of 2)", n, v), g, dx, RED);
    free_all();
  }
  rt_dist.tp = 1;
  rt_dist.tp_rank = 0;
  test_summa<T>();
}

static void test_table(void) {
  // kernels.def's kernels, each in all its variants (rt_gelu_fwd, rt_gelu_fwd_bf16, ...)
  int total = 0
#define K(name, ...) +1
#define KT_ONE(...) +1
#define KT(name, ...) RT_T_VARIANTS(KT_ONE, name)
#define KTU(name, ...) RT_TU_VARIANTS(KT_ONE, name)
#include "kernels.def"
      ;
  // less those without a CUDA twin (kernels_cuda.cu's RT_CUDA_SKIP_*), in all
  // their variants: rt_adamw_host, rt_cast_host and rt_accumulate_host (host
  // code) and the collectives of dist.c
  const char *const no_twin[] = {"adamw_host",      "sgd_host",            "cast_host",
                                 "accumulate_host",
                                 "comm_all_reduce", "comm_reduce_scatter", "comm_all_gather",
                                 "comm_wait"};
  auto skipped = [&](const char *name) {
    for (const char *s : no_twin)
      if (strcmp(name, s) == 0) return 1;
    return 0;
  };
  const int nt = 0 RT_T_VARIANTS(KT_ONE, ~), ntu = 0 RT_TU_VARIANTS(KT_ONE, ~);
  int nskipped = 0
#define K(name, ...) +skipped(#name)
#define KT(name, ...) +skipped(#name) * nt
#define KTU(name, ...) +skipped(#name) * ntu
#include "kernels.def"
      ;
  int nonnull = 0;
  for (int i = 0; i < rt_cuda_nkernels; i++) nonnull += rt_cuda_kernels[i] != NULL;
  ncases++;
  bool ok = rt_cuda_nkernels == total - nskipped && nonnull == rt_cuda_nkernels;
  printf("rt_cuda_kernels: %d launchers of %d kernels in kernels.def (%d without a CUDA twin)%s\n",
         rt_cuda_nkernels, total, nskipped, ok ? "" : "  FAIL");
  if (!ok) nfail++;
}

// The cases of an element type T (float32, bf16), and of a pair (T, U) of a
// KTU kernel's.
template <typename T>
static void test_t(const char *name) {
  variant = name;
  test_fill_copy<T>();
  test_strided_copy<T>();
  test_slices<T>();
  test_binary<T>();
  test_activations<T>();
  test_unary<T>();
  test_conv<T>();
  test_maxpool<T>();
  test_softmaxes<T>();
  test_attention<T>();
  test_rope<T>();
  test_losses<T>();
  test_find_nonfinite<T>();
  test_onnx_ops<T>();
  test_cumsum<T>();
  test_dist<T>();
  test_matmul_bias<T>();
}

template <typename T, typename U>
static void test_tu(const char *name) {
  variant = name;
  test_cast<T, U>();
  test_reduce_sum<T, U>();
  test_matmul<T, U>();
  test_embedding<T, U>();
  test_layernorm<T, U>();
  test_rmsnorm<T, U>();
  test_matmul_bgrad<T, U>();
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  rt_cuda_init(0);
  int argc = 0;
  char **argv = NULL;
  rt_comm_init(&argc, &argv, 1, "one rank");
  rt_dist_init(1, 1, 1, 1, 2, 0);
  test_table();
  test_optimizers();  // float32 only
  test_t<float>("");
  test_tu<float, float>("");
  test_t<rt_bf16>("bf16 ");
  test_tu<rt_bf16, rt_bf16>("bf16 ");
  test_tu<rt_bf16, float>("bf16->f32 ");
  test_tu<float, rt_bf16>("f32->bf16 ");
  printf("%d cases, %d failed\n", ncases, nfail);
  return nfail ? 1 : 0;
}
