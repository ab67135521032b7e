// Max pooling's window walk, shared by the CPU kernels (kernels_cpu_t.h) and
// their CUDA twins (kernels_cuda.cu), so that both pick the same maximum and
// sum a pixel's gradient in the same order. Static inline, C and C++ (host and
// device: POOL_FN).
#ifndef MTC_RT_POOL_H
#define MTC_RT_POOL_H

#include <math.h>

#ifdef __CUDACC__
#define POOL_FN static inline __host__ __device__
#else
#define POOL_FN static inline

#endif

// The window of output (oy, ox): its first row and column in the plane (maybe
// negative: padding) and the rows and columns of it inside the plane.
typedef struct PoolWindow {
  long y0, y1, x0, x1;  // [y0, y1) x [x0, x1), clipped to the plane
} PoolWindow;

POOL_FN PoolWindow pool_window(long oy, long ox, long h, long w, long kh, long kw, long sh,
                               long sw, long ph, long pw) {
  PoolWindow r;
  long ty = oy * sh - ph, tx = ox * sw - pw;
  r.y0 = ty < 0 ? 0 : ty;
  r.x0 = tx < 0 ? 0 : tx;
  r.y1 = ty + kh < h ? ty + kh : h;
  r.x1 = tx + kw < w ? tx + kw : w;
  return r;
}

// The index (y * w + x) of the window's maximum in the plane xp, read by ld:
// the first of equal maxima in row-major order, or the last NaN, as PyTorch
// picks it. Every window holds at least one pixel (the shape rule).
#define POOL_ARGMAX(ld, xp, win, w, out)                                   \
  do {                                                                     \
    float best_ = -INFINITY;                                               \
    long at_ = (win).y0 * (w) + (win).x0;                                  \
    for (long y_ = (win).y0; y_ < (win).y1; y_++)                          \
      for (long x_ = (win).x0; x_ < (win).x1; x_++) {                      \
        float v_ = ld((xp)[y_ * (w) + x_]);                                \
        if (v_ > best_ || isnan(v_)) best_ = v_, at_ = y_ * (w) + x_;      \
      }                                                                    \
    (out) = at_;                                                           \
  } while (0)

// The outputs whose windows hold row (or column) i of a plane: [*lo, *hi).
POOL_FN void pool_outputs(long i, long k, long s, long p, long n, long *lo, long *hi) {
  long a = i + p - k + 1;           // the first output o with o*s - p + k - 1 >= i
  *lo = a <= 0 ? 0 : (a + s - 1) / s;
  long b = (i + p) / s + 1;          // one past the last o with o*s - p <= i
  *hi = b < n ? b : n;
}

// The gradient at pixel (iy, ix) of the plane xp into the float out: the plane dyp of the
// pooled gradient summed over the windows whose max the pixel is, in (oy, ox) order, read by
// ld.
#define POOL_PIXEL_GRAD(ld, xp, dyp, iy, ix, h, w, kh, kw, oh, ow, sh, sw, ph, pw, out)      \
  do {                                                                                        \
    long ylo_, yhi_, xlo_, xhi_;                                                              \
    float s_ = 0.0f;                                                                          \
    pool_outputs(iy, kh, sh, ph, oh, &ylo_, &yhi_);                                           \
    pool_outputs(ix, kw, sw, pw, ow, &xlo_, &xhi_);                                           \
    for (long oy_ = ylo_; oy_ < yhi_; oy_++)                                                  \
      for (long ox_ = xlo_; ox_ < xhi_; ox_++) {                                              \
        PoolWindow win_ = pool_window(oy_, ox_, h, w, kh, kw, sh, sw, ph, pw);                \
        long max_;                                                                            \
        POOL_ARGMAX(ld, xp, win_, w, max_);                                                   \
        if (max_ == (iy) * (w) + (ix)) s_ += ld((dyp)[oy_ * (ow) + ox_]);                     \
      }                                                                                       \
    (out) = s_;                                                                               \
  } while (0)

#endif
