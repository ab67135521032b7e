// The typed kernels of the CPU build (kernels.def's KT and KTU), each written
// once over its element types: runtime/cpu_variants.h includes this file once
// per variant, with
//   RT_T, RT_U        the element types (float or rt_bf16), RT_DTYPE T's RT_F32 or RT_BF16,
//   RT_T_F32, RT_U_F32  1 where that type is float,
//   RT_KT             1 in the passes that define the KT kernels too,
//   RT_NAME(name)     the variant's function name (rt_gelu_fwd_bf16),
//   RT_NAME_TF(name)  the name of the same kernel with U = float (KTU),
//   TO_T(x), TO_U(x)  a float rounded to the type.
// LD(x) widens an element of either type to float. Every kernel computes in
// float32 and accumulates in float32 or double, as the float32 kernels did:
// the float32 variants are the kernels they were, bit for bit.
//
// The kernels that compute on float rows with vector helpers (matmul,
// attention, the norms, softmax, cross-entropy) have one float32 body in
// kernels_cpu.c (*_f32); their bf16 variants widen their operands into
// float32 buffers, run it, and round the results.
//
// No include guard: read once per variant.

// ---- widening and rounding whole tensors (the bf16 variants of the float32 bodies)

// x widened to float32: x itself when it is float (*own NULL), else a new
// buffer that the caller frees (*own). NULL stays NULL.
static inline const float *RT_LOCAL(widen)(const RT_T *x, long n, float **own) {
#if RT_T_F32
  *own = NULL;
  (void)n;
  return x;
#else
  *own = NULL;
  if (!x) return NULL;
  float *f = rt_cpu_alloc(n);
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) f[i] = rt_bf16_to_f32(x[i]);
  *own = f;
  return f;
#endif
}

// Where a float32 body writes n results meant for out: out itself when it is
// float, else a new buffer (RT_LOCAL(narrow) rounds it into out and frees it).
static inline float *RT_LOCAL(result)(RT_T *out, long n) {
#if RT_T_F32
  (void)n;
  return out;
#else
  return out ? rt_cpu_alloc(n) : NULL;
#endif
}

static inline void RT_LOCAL(narrow)(RT_T *out, float *f, long n) {
#if RT_T_F32
  (void)out, (void)f, (void)n;
#else
  if (!out) return;
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) out[i] = rt_f32_to_bf16(f[i]);
  rt_cpu_free(f);
#endif
}

#if RT_KT
// ---- data movement

void RT_NAME(fill)(RT_T *out, long n, float value) {
  RT_T v = TO_T(value);
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) out[i] = v;
}

void RT_NAME(copy)(RT_T *out, const RT_T *x, long n) {
  if (n > 0 && out != x) memmove(out, x, (size_t)n * sizeof(RT_T));
}

// out (contiguous) = x read through strides; rows of the last dim at a time,
// with a tiled path for a plain 2-D transpose.
void RT_NAME(strided_copy)(RT_T *out, const RT_T *x, int rank, const long *shape,
                           const long *xstride) {
  long n = numel_of(rank, shape);
  if (n <= 0) return;
  long sh[RT_MAXRANK], xs[RT_MAXRANK], unused[RT_MAXRANK];
  int r = coalesce(rank, shape, xstride, NULL, sh, xs, unused);
  long len = sh[r - 1], xi = xs[r - 1], rows = n / len;
  if (r == 1 && xi == 1) {  // contiguous
    RT_NAME(copy)(out, x, n);
    return;
  }
  if (r == 2 && xs[0] == 1 && xi != 0) {
    // transpose: out[i][j] = x[i + j*xi], in 32x32 tiles
    const long TB = 32;
#pragma omp parallel for collapse(2) if (n >= PAR_MIN)
    for (long i0 = 0; i0 < rows; i0 += TB) {
      for (long j0 = 0; j0 < len; j0 += TB) {
        long i1 = i0 + TB < rows ? i0 + TB : rows;
        long j1 = j0 + TB < len ? j0 + TB : len;
        for (long j = j0; j < j1; j++)
          for (long i = i0; i < i1; i++) out[i * len + j] = x[i + j * xi];
      }
    }
    return;
  }
  // rows in chunks; within a chunk the offset of x steps like an odometer
  // over the leading dims (no division per row)
  int nd = r - 1;
  long nch = n >= PAR_MIN ? 16 : 1;
#pragma omp parallel for if (nch > 1)
  for (long ch = 0; ch < nch; ch++) {
    long r0 = rows * ch / nch, r1 = rows * (ch + 1) / nch;
    long idx[RT_MAXRANK], off = 0, rem = r0;
    for (int d = nd - 1; d >= 0; d--) {
      idx[d] = rem % sh[d];
      rem /= sh[d];
      off += idx[d] * xs[d];
    }
    for (long row = r0; row < r1; row++) {
      const RT_T *xr = x + off;
      RT_T *o = out + row * len;
      if (xi == 1) {
        memcpy(o, xr, (size_t)len * sizeof(RT_T));
      } else if (xi == 0) {
        for (long i = 0; i < len; i++) o[i] = xr[0];
      } else {
        for (long i = 0; i < len; i++) o[i] = xr[i * xi];
      }
      for (int d = nd - 1; d >= 0; d--) {  // the next row
        off += xs[d];
        if (++idx[d] < sh[d]) break;
        off -= sh[d] * xs[d];
        idx[d] = 0;
      }
    }
  }
}

// out[o, :len] = x[o, off : off + len]
void RT_NAME(slice)(RT_T *out, const RT_T *x, long outer, long xinner, long off, long len) {
  if (len <= 0) return;
#pragma omp parallel for if (outer * len >= PAR_MIN)
  for (long o = 0; o < outer; o++)
    memcpy(out + o * len, x + o * xinner + off, (size_t)len * sizeof(RT_T));
}

// out[o, off : off + len] = x[o, :len]; the rest of out is left alone
void RT_NAME(unslice)(RT_T *out, const RT_T *x, long outer, long oinner, long off, long len) {
  if (len <= 0) return;
#pragma omp parallel for if (outer * len >= PAR_MIN)
  for (long o = 0; o < outer; o++)
    memcpy(out + o * oinner + off, x + o * len, (size_t)len * sizeof(RT_T));
}

// ---- elementwise

// one row of out = a op b with element strides as and bs; the common stride
// patterns get their own loops so that they vectorize.
#define BINARY_ROW(EXPR)                                                   \
  do {                                                                     \
    if (as == 1 && bs == 1) {                                              \
      for (long i = 0; i < len; i++) { float av = LD(a[i]), bv = LD(b[i]); o[i] = TO_T(EXPR); } \
    } else if (as == 1 && bs == 0) {                                       \
      const float bv = LD(b[0]);                                           \
      for (long i = 0; i < len; i++) { float av = LD(a[i]); o[i] = TO_T(EXPR); } \
    } else if (as == 0 && bs == 1) {                                       \
      const float av = LD(a[0]);                                           \
      for (long i = 0; i < len; i++) { float bv = LD(b[i]); o[i] = TO_T(EXPR); } \
    } else {                                                               \
      for (long i = 0; i < len; i++) {                                     \
        float av = LD(a[i * as]), bv = LD(b[i * bs]);                      \
        o[i] = TO_T(EXPR);                                                 \
      }                                                                    \
    }                                                                      \
  } while (0)

static void RT_LOCAL(binary_row)(int op, RT_T *o, const RT_T *a, long as, const RT_T *b, long bs,
                                 long len) {
  switch (op) {
    case RT_ADD: BINARY_ROW(av + bv); break;
    case RT_SUB: BINARY_ROW(av - bv); break;
    case RT_MUL: BINARY_ROW(av * bv); break;
    case RT_DIV: BINARY_ROW(av / bv); break;
    case RT_MIN: BINARY_ROW(av < bv || av != av ? av : bv); break;
    case RT_MAX: BINARY_ROW(av > bv || av != av ? av : bv); break;
    default: break;
  }
}
#undef BINARY_ROW

// out = a op b, a and b read through (possibly zero) strides
void RT_NAME(binary)(int op, RT_T *out, const RT_T *a, const RT_T *b, int rank, const long *shape,
                     const long *astride, const long *bstride) {
  long n = numel_of(rank, shape);
  if (n <= 0) return;
  long sh[RT_MAXRANK], as[RT_MAXRANK], bs[RT_MAXRANK];
  int r = coalesce(rank, shape, astride, bstride, sh, as, bs);
  long len = sh[r - 1], rows = n / len;
  if (rows == 1) {
    // one long row (e.g. same-shape contiguous): split it into chunks
    long nch = n >= PAR_MIN ? SUM_CHUNKS : 1;
#pragma omp parallel for if (nch > 1)
    for (long ch = 0; ch < nch; ch++) {
      long lo = n * ch / nch, hi = n * (ch + 1) / nch;
      RT_LOCAL(binary_row)(op, out + lo, a + lo * as[0], as[0], b + lo * bs[0], bs[0], hi - lo);
    }
    return;
  }
#pragma omp parallel for if (n >= PAR_MIN)
  for (long row = 0; row < rows; row++) {
    RT_LOCAL(binary_row)(op, out + row * len, a + row_offset(row, r - 1, sh, as), as[r - 1],
                         b + row_offset(row, r - 1, sh, bs), bs[r - 1], len);
  }
}

// out = a op b as 1 or 0 (kernels_cpu.c's COMPARE_ROWS)
void RT_NAME(compare)(int op, int *out, const RT_T *a, const RT_T *b, int rank, const long *shape,
                      const long *astride, const long *bstride) {
  COMPARE_ROWS(LD);
}

// out = s * x + b
void RT_NAME(scale)(RT_T *out, const RT_T *x, long n, float s, float b) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) out[i] = TO_T(s * LD(x[i]) + b);
}

// running sums along the middle dim of [outer, len, inner], one column at a time, in order
void RT_NAME(cumsum)(RT_T *out, const RT_T *x, long outer, long len, long inner, int exclusive,
                     int reverse) {
#pragma omp parallel for if (outer * len * inner >= PAR_MIN)
  for (long c = 0; c < outer * inner; c++) {
    long o = c / inner, j = c - o * inner;
    float acc = 0.0f;
    for (long k = 0; k < len; k++) {
      long at = (o * len + (reverse ? len - 1 - k : k)) * inner + j;
      float v = LD(x[at]);
      if (!exclusive) acc += v;
      out[at] = TO_T(acc);
      if (exclusive) acc += v;
    }
  }
}

// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (gelu_f in kernels_cpu.c)
// (`if (parallel: ...)`: a bare `if` on a combined construct turns simd off too (OpenMP 5.0),
// so a layer split by tensor parallelism below the threshold ran scalar, 5x slower.)
void RT_NAME(gelu_fwd)(RT_T *y, const RT_T *x, long n) {
#pragma omp parallel for simd if (parallel: n >= PAR_MIN_MATH)
  for (long i = 0; i < n; i++)
    y[i] = TO_T(gelu_f(LD(x[i])));
}

// dx = dy * (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx)
void RT_NAME(gelu_bwd)(RT_T *dx, const RT_T *dy, const RT_T *x, long n) {
#pragma omp parallel for simd if (parallel: n >= PAR_MIN_MATH)
  for (long i = 0; i < n; i++) {
    float xi = LD(x[i]);
    float u = GELU_SCALE * (xi + GELU_COEF * xi * xi * xi);
    float uc = u > GELU_TAIL ? GELU_TAIL : (u < -GELU_TAIL ? -GELU_TAIL : u);
    float e = exp_fast(-2.0f * uc);
    float s = 1.0f / (1.0f + e);  // 0.5 (1 + tanh u)
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_COEF * xi * xi);
    float grad = s + 2.0f * xi * s * (e * s) * du;  // e*s = 1 - s
    grad = u > GELU_TAIL ? 1.0f : (u < -GELU_TAIL ? 0.0f : grad);
    dx[i] = TO_T(grad * LD(dy[i]));
  }
}

void RT_NAME(relu_fwd)(RT_T *y, const RT_T *x, long n) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) y[i] = LD(x[i]) > 0.0f ? x[i] : TO_T(0.0f);
}

// dx = dy where x > 0, else 0
void RT_NAME(relu_bwd)(RT_T *dx, const RT_T *dy, const RT_T *x, long n) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) dx[i] = LD(x[i]) > 0.0f ? dy[i] : TO_T(0.0f);
}

// ---- convolution: im2col and its adjoint (the GEMMs are rt_matmul)

// One row of col per (plane, i, j), parallel over those rows; padding reads 0.
void RT_NAME(im2col)(RT_T *col, const RT_T *x, long nc, long h, long w, long kh, long kw, long oh,
                     long ow, long sh, long sw, long ph, long pw, long dh, long dw) {
  long rows = nc * kh * kw;
  const RT_T zero = TO_T(0.0f);
#pragma omp parallel for if (rows * oh * ow >= PAR_MIN)
  for (long r = 0; r < rows; r++) {
    long p = r / (kh * kw), i = r / kw % kh, j = r % kw;
    const RT_T *xp = x + p * h * w;
    RT_T *cr = col + r * oh * ow;
    for (long y = 0; y < oh; y++) {
      long iy = y * sh - ph + i * dh;
      RT_T *c = cr + y * ow;
      if (iy < 0 || iy >= h) {
        memset(c, 0, (size_t)ow * sizeof(RT_T));  // +0 in float32 and in bf16
        continue;
      }
      const RT_T *xr = xp + iy * w;
      for (long xo = 0; xo < ow; xo++) {
        long ix = xo * sw - pw + j * dw;
        c[xo] = ix >= 0 && ix < w ? xr[ix] : zero;
      }
    }
  }
}

// Each pixel gathers its col entries in the order of (i, j), one thread per
// image row: deterministic, and the order the CUDA kernel adds in (in float32:
// a bf16 row is summed in a float row, then rounded).
void RT_NAME(col2im)(RT_T *x, const RT_T *col, long nc, long h, long w, long kh, long kw, long oh,
                     long ow, long sh, long sw, long ph, long pw, long dh, long dw) {
#pragma omp parallel for if (nc * h * w * kh * kw >= PAR_MIN)
  for (long r = 0; r < nc * h; r++) {
    long p = r / h, iy = r % h;
#if RT_T_F32
    float *xr = x + r * w;
#else
    float xr[w];
#endif
    memset(xr, 0, (size_t)w * sizeof(float));
    for (long i = 0; i < kh; i++) {
      long ty = iy + ph - i * dh;
      if (ty < 0 || ty % sh || ty / sh >= oh) continue;
      for (long j = 0; j < kw; j++) {
        const RT_T *cr = col + ((p * kh + i) * kw + j) * oh * ow + ty / sh * ow;
        for (long ix = 0; ix < w; ix++) {
          long tx = ix + pw - j * dw;
          if (tx >= 0 && tx % sw == 0 && tx / sw < ow) xr[ix] += LD(cr[tx / sw]);
        }
      }
    }
#if !RT_T_F32
    for (long ix = 0; ix < w; ix++) x[r * w + ix] = TO_T(xr[ix]);
#endif
  }
}

// ---- max pooling (runtime/pool.h walks the windows, as the CUDA twins do)

void RT_NAME(maxpool2d)(RT_T *y, const RT_T *x, long nc, long h, long w, long kh, long kw, long oh,
                        long ow, long sh, long sw, long ph, long pw) {
#pragma omp parallel for if (nc * oh * ow * kh * kw >= PAR_MIN)
  for (long r = 0; r < nc * oh; r++) {
    long p = r / oh, oy = r % oh;
    const RT_T *xp = x + p * h * w;
    for (long ox = 0; ox < ow; ox++) {
      PoolWindow win = pool_window(oy, ox, h, w, kh, kw, sh, sw, ph, pw);
      long at;
      POOL_ARGMAX(LD, xp, win, w, at);
      y[r * ow + ox] = xp[at];
    }
  }
}

// Each pixel sums dy over the windows whose max it is, in (oy, ox) order.
void RT_NAME(maxpool2d_bwd)(RT_T *dx, const RT_T *dy, const RT_T *x, long nc, long h, long w,
                            long kh, long kw, long oh, long ow, long sh, long sw, long ph,
                            long pw) {
#pragma omp parallel for if (nc * h * w * kh * kw >= PAR_MIN)
  for (long r = 0; r < nc * h; r++) {
    long p = r / h, iy = r % h;
    const RT_T *xp = x + p * h * w, *dyp = dy + p * oh * ow;
    for (long ix = 0; ix < w; ix++) {
      float s;
      POOL_PIXEL_GRAD(LD, xp, dyp, iy, ix, h, w, kh, kw, oh, ow, sh, sw, ph, pw, s);
      dx[r * w + ix] = TO_T(s);
    }
  }
}

// ---- neural-net ops

// out[i, :] = w[idx[i], :]
void RT_NAME(embedding_fwd)(RT_T *out, const RT_T *w, const int *idx, long n, long c) {
#pragma omp parallel for if (n * c >= PAR_MIN)
  for (long i = 0; i < n; i++)
    memcpy(out + i * c, w + (long)idx[i] * c, (size_t)c * sizeof(RT_T));
}

// the two kernels, one after the other (the CPU saves no pass by fusing them)
void RT_NAME(add_layernorm)(RT_T *r, RT_T *y, const RT_T *a, const RT_T *b, const RT_T *w,
                            const RT_T *bias, long n, long c, float eps) {
  long shape[1] = {n * c}, stride[1] = {1};
  RT_NAME(binary)(RT_ADD, r, a, b, 1, shape, stride, stride);
  RT_NAME(layernorm_fwd)(y, r, w, bias, n, c, eps);
}

void RT_NAME(layernorm_fwd)(RT_T *y, const RT_T *x, const RT_T *w, const RT_T *b, long n, long c,
                            float eps) {
  float *ox, *ow, *ob;
  const float *xf = RT_LOCAL(widen)(x, n * c, &ox), *wf = RT_LOCAL(widen)(w, c, &ow),
              *bf = RT_LOCAL(widen)(b, c, &ob);
  float *yf = RT_LOCAL(result)(y, n * c);
  norm_fwd(yf, xf, wf, bf, n, c, eps, true);
  RT_LOCAL(narrow)(y, yf, n * c);
  rt_cpu_free(ox), rt_cpu_free(ow), rt_cpu_free(ob);
}

void RT_NAME(rmsnorm_fwd)(RT_T *y, const RT_T *x, const RT_T *w, long n, long c, float eps) {
  float *ox, *ow;
  const float *xf = RT_LOCAL(widen)(x, n * c, &ox), *wf = RT_LOCAL(widen)(w, c, &ow);
  float *yf = RT_LOCAL(result)(y, n * c);
  norm_fwd(yf, xf, wf, NULL, n, c, eps, false);
  RT_LOCAL(narrow)(y, yf, n * c);
  rt_cpu_free(ox), rt_cpu_free(ow);
}

// The angles in double (cos and sin of p * theta^(-2i/hs)), rounded once to
// float; one (cos, sin) per position and pair serves every row.
void RT_NAME(rope)(RT_T *out, const RT_T *x, long rows, long t, long hs, float theta, int inverse) {
  long half = hs / 2;
#pragma omp parallel for if (rows * t * hs >= PAR_MIN_MATH)
  for (long p = 0; p < t; p++)
    for (long i = 0; i < half; i++) {
      double a = (double)p * pow((double)theta, -2.0 * (double)i / (double)hs);
      float c = (float)cos(a), s = inverse ? -(float)sin(a) : (float)sin(a);
      for (long r = 0; r < rows; r++) {
        const RT_T *xr = x + (r * t + p) * hs;
        RT_T *yr = out + (r * t + p) * hs;
        float x1 = LD(xr[i]), x2 = LD(xr[i + half]);
        yr[i] = TO_T(x1 * c - x2 * s);
        yr[i + half] = TO_T(x2 * c + x1 * s);
      }
    }
}

void RT_NAME(softmax_fwd)(RT_T *y, const RT_T *x, long n, long c, int causal) {
  float *ox;
  const float *xf = RT_LOCAL(widen)(x, n * c, &ox);
  float *yf = RT_LOCAL(result)(y, n * c);
  softmax_fwd_f32(yf, xf, n, c, causal);
  RT_LOCAL(narrow)(y, yf, n * c);
  rt_cpu_free(ox);
}

void RT_NAME(softmax_bwd)(RT_T *dx, const RT_T *dy, const RT_T *y, long n, long c) {
  float *ody, *oy;
  const float *dyf = RT_LOCAL(widen)(dy, n * c, &ody), *yf = RT_LOCAL(widen)(y, n * c, &oy);
  float *dxf = RT_LOCAL(result)(dx, n * c);
  softmax_bwd_f32(dxf, dyf, yf, n, c);
  RT_LOCAL(narrow)(dx, dxf, n * c);
  rt_cpu_free(ody), rt_cpu_free(oy);
}

void RT_NAME(attention_fwd)(RT_T *out, float *lse, const RT_T *q, const RT_T *k, const RT_T *v,
                            const int *keep, const RT_T *bias, long bh, long tq, long tk, long hs,
                            long heads, long bdiv, long bmod, int causal) {
  long nq = bh * tq * hs, nk = bh * tk * hs;
  float *oq, *ok, *ov, *ob;
  const float *qf = RT_LOCAL(widen)(q, nq, &oq), *kf = RT_LOCAL(widen)(k, nk, &ok),
              *vf = RT_LOCAL(widen)(v, nk, &ov), *bf = RT_LOCAL(widen)(bias, bmod * tq * tk, &ob);
  float *outf = RT_LOCAL(result)(out, nq);
  attention_fwd_f32(outf, lse, qf, kf, vf, keep, bf, bh, tq, tk, hs, heads, bdiv, bmod, causal);
  RT_LOCAL(narrow)(out, outf, nq);
  rt_cpu_free(oq), rt_cpu_free(ok), rt_cpu_free(ov), rt_cpu_free(ob);
}

// out is the GPU kernels' (attention_bwd_f32 sums p dp itself)
void RT_NAME(attention_bwd)(RT_T *dq, RT_T *dk, RT_T *dv, RT_T *dscores, const RT_T *dout,
                            const RT_T *q, const RT_T *k, const RT_T *v, const RT_T *out,
                            const float *lse, const int *keep, const RT_T *bias, long bh,
                            long tq, long tk, long hs, long heads, long bdiv, long bmod,
                            int causal) {
  (void)out;
  long nq = bh * tq * hs, nk = bh * tk * hs, ns = bh * tq * tk;
  float *odo, *oq, *ok, *ov, *ob;
  const float *dof = RT_LOCAL(widen)(dout, nq, &odo), *qf = RT_LOCAL(widen)(q, nq, &oq),
              *kf = RT_LOCAL(widen)(k, nk, &ok), *vf = RT_LOCAL(widen)(v, nk, &ov),
              *bf = RT_LOCAL(widen)(bias, bmod * tq * tk, &ob);
  float *dqf = RT_LOCAL(result)(dq, nq), *dkf = RT_LOCAL(result)(dk, nk),
        *dvf = RT_LOCAL(result)(dv, nk), *dsf = RT_LOCAL(result)(dscores, ns);
  attention_bwd_f32(dqf, dkf, dvf, dsf, dof, qf, kf, vf, lse, keep, bf, bh, tq, tk, hs, heads,
                    bdiv, bmod, causal);
  RT_LOCAL(narrow)(dq, dqf, nq), RT_LOCAL(narrow)(dk, dkf, nk), RT_LOCAL(narrow)(dv, dvf, nk);
  RT_LOCAL(narrow)(dscores, dsf, ns);
  rt_cpu_free(odo), rt_cpu_free(oq), rt_cpu_free(ok), rt_cpu_free(ov), rt_cpu_free(ob);
}

void RT_NAME(crossentropy_fwd)(float *loss, const RT_T *logits, const int *targets, long n, long v,
                               long vocab, long ignore) {
  float *ol;
  const float *lf = RT_LOCAL(widen)(logits, n * v, &ol);
  crossentropy_fwd_f32(loss, lf, targets, n, v, vocab, ignore);
  rt_cpu_free(ol);
}

void RT_NAME(crossentropy_fused)(float *loss, RT_T *dlogits, const RT_T *logits, const int *targets,
                                 long n, long v, long vocab, long ignore, float dloss) {
  float *ol;
  const float *lf = RT_LOCAL(widen)(logits, n * v, &ol);
  int grad = !rt_eval_mode;
  float *df = grad ? RT_LOCAL(result)(dlogits, n * v) : NULL;
  crossentropy_fused_f32(loss, df, lf, targets, n, v, vocab, ignore, dloss, grad);
  if (grad) RT_LOCAL(narrow)(dlogits, df, n * v);
  rt_cpu_free(ol);
}

void RT_NAME(crossentropy_bwd)(RT_T *dlogits, const float *dloss, const RT_T *logits,
                               const int *targets, long n, long v, long vocab, long ignore) {
  float *ol;
  const float *lf = RT_LOCAL(widen)(logits, n * v, &ol);
  float *df = RT_LOCAL(result)(dlogits, n * v);
  crossentropy_bwd_f32(df, dloss, lf, targets, n, v, vocab, ignore);
  RT_LOCAL(narrow)(dlogits, df, n * v);
  rt_cpu_free(ol);
}

// The CPU build's device memory is host memory: the copies are memcpy, made at once or (a slot)
// at their copy_wait. (The GPU build copies to and from pinned memory on a stream of its own.)
void RT_NAME(to_host)(RT_T *host, const RT_T *x, long n, int slot) {
  copy_start(slot, host, x, (size_t)n * sizeof *x);
}

void RT_NAME(to_device)(RT_T *x, const RT_T *host, long n, int slot) {
  copy_start(slot, x, host, (size_t)n * sizeof *x);
}

// ---- optimizers: float32 masters and moments, the gradient in T

void RT_NAME(adamw)(float *p, const RT_T *g, float *m, float *v, long n, float lr, float beta1,
                    float beta2, float eps, float wd, int t, float gscale, long decay_n) {
  adamw(p, g, !RT_T_F32, m, v, n, lr, beta1, beta2, eps, wd, t, gscale, decay_n, NULL);
}

void RT_NAME(adamw_copy)(float *p, const RT_T *g, float *m, float *v, long n, float lr,
                         float beta1, float beta2, float eps, float wd, int t, float gscale,
                         long decay_n, rt_bf16 *c) {
  adamw(p, g, !RT_T_F32, m, v, n, lr, beta1, beta2, eps, wd, t, gscale, decay_n, c);
}

void RT_NAME(sgd)(float *p, const RT_T *g, long n, float lr, float wd, float gscale,
                  long decay_n) {
  sgd(p, g, !RT_T_F32, n, lr, wd, gscale, decay_n, NULL);
}

void RT_NAME(sgd_copy)(float *p, const RT_T *g, long n, float lr, float wd, float gscale,
                       long decay_n, rt_bf16 *c) {
  sgd(p, g, !RT_T_F32, n, lr, wd, gscale, decay_n, c);
}

// ---- checks

void RT_NAME(norm2)(float *out, const RT_T *x, long n) { norm2(out, x, !RT_T_F32, n); }

void RT_NAME(find_nonfinite)(int *at, const RT_T *x, long n) {
#if RT_T_F32
  find_nonfinite_f32(at, x, n);
#else
  long first = n;  // bf16: NaN and infinities have every exponent bit set (0x7f80)
#pragma omp parallel for reduction(min : first) if (n >= PAR_MIN)
  for (long i = 0; i < n; i++)
    if ((x[i].bits & 0x7f80u) == 0x7f80u && i < first) first = i;
  *at = first < n ? (int)first : -1;
#endif
}

// ---- kernels for ONNX ops

void RT_NAME(cast_i32_f32)(RT_T *out, const int *x, long n) {
  for (long i = 0; i < n; i++) out[i] = TO_T((float)x[i]);
}

void RT_NAME(unary)(int op, RT_T *y, const RT_T *x, long n, float p) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) y[i] = TO_T(unary_one(op, LD(x[i]), p));
}

void RT_NAME(gelu_erf_fwd)(RT_T *y, const RT_T *x, long n) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) {
    float xi = LD(x[i]);
    y[i] = TO_T(0.5f * xi * (1.0f + erff(xi * 0.70710678118654752f)));
  }
}

void RT_NAME(gelu_erf_bwd)(RT_T *dx, const RT_T *dy, const RT_T *x, long n) {
  const float inv_sqrt_2pi = 0.3989422804014327f;
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) {
    float xi = LD(x[i]);
    float cdf = 0.5f * (1.0f + erff(xi * 0.70710678118654752f));
    float pdf = inv_sqrt_2pi * expf(-0.5f * xi * xi);
    dx[i] = TO_T(LD(dy[i]) * (cdf + xi * pdf));
  }
}

void RT_NAME(silu_fwd)(RT_T *y, const RT_T *x, long n) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) {
    float xi = LD(x[i]);
    y[i] = TO_T(xi / (1.0f + expf(-xi)));  // e^-x = inf: -0
  }
}

void RT_NAME(silu_bwd)(RT_T *dx, const RT_T *dy, const RT_T *x, long n) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) {
    float xi = LD(x[i]);
    float s = 1.0f / (1.0f + expf(-xi));
    dx[i] = TO_T(LD(dy[i]) * s * (1.0f + xi * (1.0f - s)));
  }
}

void RT_NAME(masked_fill)(RT_T *out, const RT_T *x, const int *mask, int rank, const long *shape,
                          const long *mstride, float value) {
  const RT_T v = TO_T(value);
  if (rank == 0) {
    out[0] = mask[0] ? v : x[0];
    return;
  }
  long inner = shape[rank - 1], rows = numel_of(rank - 1, shape);
  long ms = mstride[rank - 1];
#pragma omp parallel for if (rows * inner >= PAR_MIN)
  for (long r = 0; r < rows; r++) {
    long moff = mask_row_offset(r, rank, shape, mstride);
    const RT_T *xr = x + r * inner;
    RT_T *o = out + r * inner;
    for (long j = 0; j < inner; j++) o[j] = mask[moff + j * ms] ? v : xr[j];
  }
}

void RT_NAME(equal_f32)(int *out, const RT_T *x, long n, float value) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) out[i] = LD(x[i]) == value;
}

void RT_NAME(dropout)(RT_T *out, const RT_T *x, const int *step, long n, float ratio, long seed,
                      long key, long chunk, int batched, int axis, int batch_axis) {
  if (rt_eval_mode) ratio = 0.0f;  // every element kept, times 1: x itself
  long tp = chunk > 0 ? rt_axis_size(axis) : 1, rank = chunk > 0 ? rt_axis_rank(axis) : 0;
  unsigned long long first = rt_dropout_first(n * tp, batched, batch_axis);
  if (chunk <= 0) chunk = n > 0 ? n : 1;
  unsigned long long base =
      mix64((unsigned long long)seed * 0x9E3779B97F4A7C15ull ^
            mix64((unsigned long long)key + 0xD1B54A32D192ED03ull * (unsigned long long)step[0]));
  float keep_scale = 1.0f / (1.0f - ratio);
  unsigned threshold = (unsigned)(ratio * 16777216.0f);  // keep when 24 random bits >= it
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) {
    unsigned long long g = first + (unsigned long long)((i / chunk * tp + rank) * chunk + i % chunk);
    unsigned bits = (unsigned)(mix64(base + 0x9E3779B97F4A7C15ull * g) >> 40);
    out[i] = TO_T(bits >= threshold ? LD(x[i]) * keep_scale : 0.0f);
  }
}

void RT_NAME(log_softmax_fwd)(RT_T *y, const RT_T *x, long n, long c) {
#pragma omp parallel for if (n * c >= PAR_MIN)
  for (long i = 0; i < n; i++) {
    const RT_T *xr = x + i * c;
    RT_T *yr = y + i * c;
    float maxv = -INFINITY;
    for (long j = 0; j < c; j++) maxv = LD(xr[j]) > maxv ? LD(xr[j]) : maxv;
    double sum = 0.0;
    for (long j = 0; j < c; j++) sum += expf(LD(xr[j]) - maxv);
    float lse = maxv + (float)log(sum);
    for (long j = 0; j < c; j++) yr[j] = TO_T(LD(xr[j]) - lse);
  }
}

void RT_NAME(log_softmax_bwd)(RT_T *dx, const RT_T *dy, const RT_T *y, long n, long c) {
#pragma omp parallel for if (n * c >= PAR_MIN)
  for (long i = 0; i < n; i++) {
    const RT_T *dyr = dy + i * c, *yr = y + i * c;
    double sum = 0.0;
    for (long j = 0; j < c; j++) sum += LD(dyr[j]);
    for (long j = 0; j < c; j++) dx[i * c + j] = TO_T(LD(dyr[j]) - expf(LD(yr[j])) * (float)sum);
  }
}

void RT_NAME(nll_loss_fwd)(float *loss, const RT_T *logp, const int *targets, long n, long c,
                           int sum, long ignore) {
  double s = 0.0;
  for (long i = 0; i < n; i++)
    if (nll_counts(targets[i], c, ignore)) s -= LD(logp[i * c + targets[i]]);
  long count = nll_rows(targets, n, c, ignore);
  loss[0] = sum ? (float)s : count ? (float)(s / (double)count) : 0.0f;
}

void RT_NAME(nll_loss_bwd)(RT_T *dlogp, const float *dloss, const int *targets, long n, long c,
                           int sum, long ignore) {
  long count = nll_rows(targets, n, c, ignore);
  float g = sum ? -dloss[0] : count ? -dloss[0] / (float)count : 0.0f;
  memset(dlogp, 0, (size_t)(n * c) * sizeof *dlogp);  // +0 in float32 and in bf16
  for (long i = 0; i < n; i++)
    if (nll_counts(targets[i], c, ignore)) dlogp[i * c + targets[i]] = TO_T(g);
}

void RT_NAME(slice_axis)(RT_T *out, const RT_T *x, long outer, long xdim, long inner, long start,
                         long step, long len) {
  slice_rows((char *)out, (const char *)x, sizeof *out, outer, xdim, inner, start, step, len);
}

void RT_NAME(slice_axis_bwd)(RT_T *dx, const RT_T *dy, long outer, long xdim, long inner,
                             long start, long step, long len) {
  memset(dx, 0, (size_t)(outer * xdim * inner) * sizeof *dx);
#pragma omp parallel for if (outer * len * inner >= PAR_MIN)
  for (long o = 0; o < outer; o++)
    for (long i = 0; i < len; i++)
      memcpy(dx + (o * xdim + start + i * step) * inner, dy + (o * len + i) * inner,
             (size_t)inner * sizeof *dx);
}
// (runtime/kernels.def; the GEMM and its epilogue in kernels_cpu.c)
void RT_NAME(matmul_bias)(RT_T *y, RT_T *pre, const RT_T *a, const RT_T *b, const RT_T *bias,
                          long batch, long m, long n, long k, int ta, int tb, long sa, long sb,
                          int act) {
  gemm_epilogue e = {bias, y, act ? pre : NULL, act};
  long cn = batch <= 0 || m <= 0 || n <= 0 ? 0 : batch * m * n;
#if RT_T_F32
  matmul_epilogue(act ? pre : y, a, b, 0, batch, m, n, k, ta, tb, sa, sb, &e);
  (void)cn;
#else
  float *c = rt_cpu_alloc(cn);   // the float32 sums, rounded once as they are written
  matmul_epilogue(c, a, b, 1, batch, m, n, k, ta, tb, sa, sb, &e);
  rt_cpu_free(c);
#endif
}

#endif  // RT_KT

// ---- KTU kernels: the (T, float32) variants compute; those with a bf16 U
// compute into a float32 buffer through them and round it.

void RT_NAME(cast)(RT_U *out, const RT_T *x, long n) {
#if RT_T_F32 == RT_U_F32
  if (n > 0 && (void *)out != (const void *)x) memmove(out, x, (size_t)n * sizeof *x);
#else
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) out[i] = TO_U(LD(x[i]));
#endif
}

// rounds a float32 result of n elements into out (U = bf16) and frees it
#if !RT_U_F32
static inline void RT_LOCAL(narrow_u)(RT_U *out, float *f, long n) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) out[i] = TO_U(f[i]);
  rt_cpu_free(f);
}
#endif

#if RT_U_F32
// Deterministic sum of x[0..n) in double: SUM_CHUNKS fixed chunks, combined
// in order, so the result does not depend on the number of threads.
static inline double RT_LOCAL(det_sum)(const RT_T *x, long n) {
  double part[SUM_CHUNKS];
#pragma omp parallel for if (n >= PAR_MIN)
  for (int ch = 0; ch < SUM_CHUNKS; ch++) {
    long lo = n * ch / SUM_CHUNKS, hi = n * (ch + 1) / SUM_CHUNKS;
    double s = 0.0;
    for (long i = lo; i < hi; i++) s += LD(x[i]);
    part[ch] = s;
  }
  double s = 0.0;
  for (int ch = 0; ch < SUM_CHUNKS; ch++) s += part[ch];
  return s;
}
#endif

// out = 0, then out[idx . ostride] += scale * x[idx]. Each output element is
// summed in the order of x's rows, whichever thread does it.
void RT_NAME(reduce_sum)(RT_U *out, const RT_T *x, int rank, const long *shape,
                         const long *ostride, long onumel, float scale) {
#if !RT_U_F32
  float *f = rt_cpu_alloc(onumel);
  RT_NAME_TF(reduce_sum)(f, x, rank, shape, ostride, onumel, scale);
  RT_LOCAL(narrow_u)(out, f, onumel);
#else
  if (onumel > 0) memset(out, 0, (size_t)onumel * sizeof(float));
  long n = numel_of(rank, shape);
  if (n <= 0) return;
  long sh[RT_MAXRANK], os[RT_MAXRANK], unused[RT_MAXRANK];
  int r = coalesce(rank, shape, ostride, NULL, sh, os, unused);
  long len = sh[r - 1], oi = os[r - 1], rows = n / len;
  // does every row of x land on its own output elements?
  int injective = 1;
  for (int d = 0; d < r - 1; d++)
    if (os[d] == 0) injective = 0;

  if (r == 1 && oi == 0) {  // everything into one number
    out[0] = (float)(scale * RT_LOCAL(det_sum)(x, n));
    return;
  }
  if (oi == 0) {
    // the last dim is reduced: one sum per row
    if (injective) {
#pragma omp parallel for if (n >= PAR_MIN)
      for (long row = 0; row < rows; row++) {
        const RT_T *xr = x + row * len;
        double s = 0.0;
        for (long i = 0; i < len; i++) s += LD(xr[i]);
        out[row_offset(row, r - 1, sh, os)] = (float)(scale * s);
      }
    } else {
      for (long row = 0; row < rows; row++) {
        const RT_T *xr = x + row * len;
        double s = 0.0;
        for (long i = 0; i < len; i++) s += LD(xr[i]);
        out[row_offset(row, r - 1, sh, os)] += (float)(scale * s);
      }
    }
    return;
  }
  if (injective) {  // no reduction at all, only a permutation
#pragma omp parallel for if (n >= PAR_MIN)
    for (long row = 0; row < rows; row++) {
      const RT_T *xr = x + row * len;
      float *o = out + row_offset(row, r - 1, sh, os);
      for (long i = 0; i < len; i++) o[i * oi] = scale * LD(xr[i]);
    }
    return;
  }
  // leading dims reduced (e.g. a bias gradient (n, c) -> (c)): parallel over
  // blocks of the last dim, each adding all rows in order.
  long nblocks = (len + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(dynamic) if (n >= PAR_MIN && nblocks > 1)
  for (long blk = 0; blk < nblocks; blk++) {
    long lo = blk * COL_BLOCK, hi = lo + COL_BLOCK < len ? lo + COL_BLOCK : len;
    for (long row = 0; row < rows; row++) {
      const RT_T *xr = x + row * len;
      float *o = out + row_offset(row, r - 1, sh, os);
      for (long i = lo; i < hi; i++) o[i * oi] += scale * LD(xr[i]);
    }
  }
#endif
}

// The extent of an operand of rt_matmul: batch matrices of m x k at stride s
// (0: one matrix for all).
static inline long RT_LOCAL(operand_span)(long batch, long rows, long cols, long s) {
  return s == 0 || batch <= 1 ? rows * cols : (batch - 1) * s + rows * cols;
}

void RT_NAME(matmul)(RT_U *c, const RT_T *a, const RT_T *b, long batch, long m, long n, long k,
                     int ta, int tb, long sa, long sb, long sc) {
  long cn = m <= 0 || n <= 0 ? 0 : RT_LOCAL(operand_span)(batch <= 0 ? 1 : batch, m, n, sc);
#if !RT_U_F32
  float *f = rt_cpu_alloc(cn);
  RT_NAME_TF(matmul)(f, a, b, batch, m, n, k, ta, tb, sa, sb, sc);
  RT_LOCAL(narrow_u)(c, f, cn);
#else
  (void)cn;
#if RT_T_F32
  matmul_f32(c, a, b, batch, m, n, k, ta, tb, sa, sb, sc);
#else
  matmul_bf16(c, a, b, batch, m, n, k, ta, tb, sa, sb, sc);  // bf16 operands packed as they are
#endif
#endif
}

// (runtime/kernels.def): the GEMM, then reduce_sum's sums of the operand's rows, as the
// separate sum_to computes them
void RT_NAME(matmul_bgrad)(RT_U *c, RT_U *db, const RT_T *a, const RT_T *b, long m, long n,
                           long k, int ta, int tb, int of) {
  RT_NAME(matmul)(c, a, b, 1, m, n, k, ta, tb, 0, 0, m * n);
  long shape[2] = {k, of ? n : m}, ostride[2] = {0, 1};
  RT_NAME(reduce_sum)(db, of ? b : a, 2, shape, ostride, shape[1], 1.0f);
}

// dw = 0 (rows [first, first + v) of a table's gradient); dw[idx[i] - first, :] += dout[i, :]
// for the tokens of those rows. Parallel over column blocks, so each element of dw is summed
// by one thread in the order of i.
static void RT_LOCAL(embedding_rows_f32)(float *dw, const RT_T *dout, const int *idx, long n,
                                         long first, long v, long c) {
  rt_fill(dw, v * c, 0.0f);
  long nblocks = (c + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(dynamic) if (n * c >= PAR_MIN && nblocks > 1)
  for (long blk = 0; blk < nblocks; blk++) {
    long lo = blk * COL_BLOCK, hi = lo + COL_BLOCK < c ? lo + COL_BLOCK : c;
    for (long i = 0; i < n; i++) {
      long r = (long)idx[i] - first;
      if (r < 0 || r >= v) continue;
      float *dwr = dw + r * c;
      const RT_T *dr = dout + i * c;
      for (long j = lo; j < hi; j++) dwr[j] += LD(dr[j]);
    }
  }
}

// ... into a bf16 dw: summed in float32, rounded once
static void RT_LOCAL(embedding_rows_bwd)(RT_U *dw, const RT_T *dout, const int *idx, long n,
                                         long first, long v, long c) {
#if RT_U_F32
  RT_LOCAL(embedding_rows_f32)(dw, dout, idx, n, first, v, c);
#else
  float *f = rt_cpu_alloc(v * c);
  RT_LOCAL(embedding_rows_f32)(f, dout, idx, n, first, v, c);
  RT_LOCAL(narrow_u)(dw, f, v * c);
#endif
}

void RT_NAME(embedding_bwd)(RT_U *dw, const RT_T *dout, const int *idx, long n, long v, long c) {
  RT_LOCAL(embedding_rows_bwd)(dw, dout, idx, n, 0, v, c);
}

void RT_NAME(embedding_vp_bwd)(int axis, RT_U *dw, const RT_T *dout, const int *idx, long n,
                               long v, long c) {
  RT_LOCAL(embedding_rows_bwd)(dw, dout, idx, n, (long)rt_axis_rank(axis) * v, v, c);
}

// Layernorm's (centered) or RMSNorm's backward: the float32 body on widened
// operands; dw and db (NULL for RMSNorm) summed in float32, rounded once.
static void RT_LOCAL(norm_bwd_any)(RT_T *dx, RT_U *dw, RT_U *db, const RT_T *dy, const RT_T *x,
                                   const RT_T *w, long n, long c, float eps, bool centered) {
  float *ody, *ox, *ow;
  const float *dyf = RT_LOCAL(widen)(dy, n * c, &ody), *xf = RT_LOCAL(widen)(x, n * c, &ox),
              *wf = RT_LOCAL(widen)(w, c, &ow);
  float *dxf = RT_LOCAL(result)(dx, n * c);
#if RT_U_F32
  float *fw = dw, *fb = db;
#else
  float *fw = rt_cpu_alloc(c), *fb = db ? rt_cpu_alloc(c) : NULL;
#endif
  norm_bwd(dxf, fw, fb, dyf, xf, wf, n, c, eps, centered);
  RT_LOCAL(narrow)(dx, dxf, n * c);
#if !RT_U_F32
  RT_LOCAL(narrow_u)(dw, fw, c);
  if (db) RT_LOCAL(narrow_u)(db, fb, c);
#endif
  rt_cpu_free(ody), rt_cpu_free(ox), rt_cpu_free(ow);
}

void RT_NAME(layernorm_bwd)(RT_T *dx, RT_U *dw, RT_U *db, const RT_T *dy, const RT_T *x,
                            const RT_T *w, long n, long c, float eps) {
  RT_LOCAL(norm_bwd_any)(dx, dw, db, dy, x, w, n, c, eps, true);
}

void RT_NAME(rmsnorm_bwd)(RT_T *dx, RT_U *dw, const RT_T *dy, const RT_T *x, const RT_T *w, long n,
                          long c, float eps) {
  RT_LOCAL(norm_bwd_any)(dx, dw, NULL, dy, x, w, n, c, eps, false);
}
