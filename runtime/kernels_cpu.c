// CPU reference kernels of the mtc runtime (see kernels.h for the contract).
//
// Plain C11 + OpenMP + cblas, in the style of llm.c: one function per kernel,
// readable loops. Every kernel is deterministic: a given input produces
// bit-identical output from run to run, whatever the thread timing. Where a
// sum crosses rows, either one thread owns each output element and adds in a
// fixed order, or the sum is split into a fixed number of chunks (independent
// of the thread count) that are combined in order. Without -fopenmp the
// pragmas are ignored and everything runs serially.
#include <math.h>
#include <string.h>

#include <cblas.h>

#include "kernels.h"

// Below this many elements a parallel region costs more than it saves.
#define PAR_MIN 16384L
// Column block (floats) for kernels that parallelize over output columns.
#define COL_BLOCK 64L
// Fixed chunk count for deterministic parallel sums.
#define SUM_CHUNKS 64

static long numel_of(int rank, const long *shape) {
  long n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  return n;
}

// Simplifies an iteration space: drops size-1 dims and merges neighbouring
// dims that are contiguous with each other in every stride array (the
// output, contiguous with `shape`, always is). s1 may be NULL. Returns the new
// rank, at least 1. The caller has checked that no dim is zero.
static int coalesce(int rank, const long *shape, const long *s0, const long *s1,
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

// Offset of row `row` of the leading `nd` dims (row-major over sh[0..nd)).
static long row_offset(long row, int nd, const long *sh, const long *st) {
  long off = 0;
  for (int d = nd - 1; d >= 0; d--) {
    off += (row % sh[d]) * st[d];
    row /= sh[d];
  }
  return off;
}

// Deterministic sum of x[0..n) in double: SUM_CHUNKS fixed chunks, combined
// in order, so the result does not depend on the number of threads.
static double det_sum(const float *x, long n) {
  double part[SUM_CHUNKS];
#pragma omp parallel for if (n >= PAR_MIN)
  for (int ch = 0; ch < SUM_CHUNKS; ch++) {
    long lo = n * ch / SUM_CHUNKS, hi = n * (ch + 1) / SUM_CHUNKS;
    double s = 0.0;
    for (long i = lo; i < hi; i++) s += x[i];
    part[ch] = s;
  }
  double s = 0.0;
  for (int ch = 0; ch < SUM_CHUNKS; ch++) s += part[ch];
  return s;
}

// ---------------------------------------------------------------------------
// data movement

void rt_fill(float *out, long n, float value) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) out[i] = value;
}

void rt_copy(float *out, const float *x, long n) {
  if (n > 0 && out != x) memmove(out, x, (size_t)n * sizeof(float));
}

// out (contiguous) = x read through strides; rows of the last dim at a time,
// with a tiled path for a plain 2-D transpose.
void rt_strided_copy(float *out, const float *x, int rank, const long *shape,
                     const long *xstride) {
  long n = numel_of(rank, shape);
  if (n <= 0) return;
  long sh[RT_MAXRANK], xs[RT_MAXRANK], unused[RT_MAXRANK];
  int r = coalesce(rank, shape, xstride, NULL, sh, xs, unused);
  long len = sh[r - 1], xi = xs[r - 1], rows = n / len;
  if (r == 1 && xi == 1) {  // contiguous
    rt_copy(out, x, n);
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
#pragma omp parallel for if (n >= PAR_MIN)
  for (long row = 0; row < rows; row++) {
    const float *xr = x + row_offset(row, r - 1, sh, xs);
    float *o = out + row * len;
    if (xi == 1) {
      memcpy(o, xr, (size_t)len * sizeof(float));
    } else if (xi == 0) {
      for (long i = 0; i < len; i++) o[i] = xr[0];
    } else {
      for (long i = 0; i < len; i++) o[i] = xr[i * xi];
    }
  }
}

// out = 0, then out[idx . ostride] += scale * x[idx]. Each output element is
// summed in the order of x's rows, whichever thread does it.
void rt_reduce_sum(float *out, const float *x, int rank, const long *shape,
                   const long *ostride, long onumel, float scale) {
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
    out[0] = (float)(scale * det_sum(x, n));
    return;
  }
  if (oi == 0) {
    // the last dim is reduced: one sum per row
    if (injective) {
#pragma omp parallel for if (n >= PAR_MIN)
      for (long row = 0; row < rows; row++) {
        const float *xr = x + row * len;
        double s = 0.0;
        for (long i = 0; i < len; i++) s += xr[i];
        out[row_offset(row, r - 1, sh, os)] = (float)(scale * s);
      }
    } else {
      for (long row = 0; row < rows; row++) {
        const float *xr = x + row * len;
        double s = 0.0;
        for (long i = 0; i < len; i++) s += xr[i];
        out[row_offset(row, r - 1, sh, os)] += (float)(scale * s);
      }
    }
    return;
  }
  if (injective) {  // no reduction at all, only a permutation
#pragma omp parallel for if (n >= PAR_MIN)
    for (long row = 0; row < rows; row++) {
      const float *xr = x + row * len;
      float *o = out + row_offset(row, r - 1, sh, os);
      for (long i = 0; i < len; i++) o[i * oi] = scale * xr[i];
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
      const float *xr = x + row * len;
      float *o = out + row_offset(row, r - 1, sh, os);
      for (long i = lo; i < hi; i++) o[i * oi] += scale * xr[i];
    }
  }
}

// out[o, :len] = x[o, off : off + len]
void rt_slice(float *out, const float *x, long outer, long xinner, long off,
              long len) {
  if (len <= 0) return;
#pragma omp parallel for if (outer * len >= PAR_MIN)
  for (long o = 0; o < outer; o++)
    memcpy(out + o * len, x + o * xinner + off, (size_t)len * sizeof(float));
}

// out[o, off : off + len] = x[o, :len]; the rest of out is left alone
void rt_unslice(float *out, const float *x, long outer, long oinner, long off,
                long len) {
  if (len <= 0) return;
#pragma omp parallel for if (outer * len >= PAR_MIN)
  for (long o = 0; o < outer; o++)
    memcpy(out + o * oinner + off, x + o * len, (size_t)len * sizeof(float));
}

// ---------------------------------------------------------------------------
// elementwise

// one row of out = a op b with element strides as and bs; the common stride
// patterns get their own loops so that they vectorize.
#define BINARY_ROW(EXPR)                                                   \
  do {                                                                     \
    if (as == 1 && bs == 1) {                                              \
      for (long i = 0; i < len; i++) { float av = a[i], bv = b[i]; o[i] = (EXPR); } \
    } else if (as == 1 && bs == 0) {                                       \
      const float bv = b[0];                                               \
      for (long i = 0; i < len; i++) { float av = a[i]; o[i] = (EXPR); }   \
    } else if (as == 0 && bs == 1) {                                       \
      const float av = a[0];                                               \
      for (long i = 0; i < len; i++) { float bv = b[i]; o[i] = (EXPR); }   \
    } else {                                                               \
      for (long i = 0; i < len; i++) {                                     \
        float av = a[i * as], bv = b[i * bs];                              \
        o[i] = (EXPR);                                                     \
      }                                                                    \
    }                                                                      \
  } while (0)

static void binary_row(int op, float *o, const float *a, long as,
                       const float *b, long bs, long len) {
  switch (op) {
    case RT_ADD: BINARY_ROW(av + bv); break;
    case RT_SUB: BINARY_ROW(av - bv); break;
    case RT_MUL: BINARY_ROW(av * bv); break;
    case RT_DIV: BINARY_ROW(av / bv); break;
    default: break;
  }
}

// out = a op b, a and b read through (possibly zero) strides
void rt_binary(int op, float *out, const float *a, const float *b, int rank,
               const long *shape, const long *astride, const long *bstride) {
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
      binary_row(op, out + lo, a + lo * as[0], as[0], b + lo * bs[0], bs[0],
                 hi - lo);
    }
    return;
  }
#pragma omp parallel for if (n >= PAR_MIN)
  for (long row = 0; row < rows; row++) {
    binary_row(op, out + row * len, a + row_offset(row, r - 1, sh, as),
               as[r - 1], b + row_offset(row, r - 1, sh, bs), bs[r - 1], len);
  }
}

// out = s * x + b
void rt_scale(float *out, const float *x, long n, float s, float b) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) out[i] = s * x[i] + b;
}

#define GELU_SCALE 0.7978845608028654f  // sqrt(2 / pi)
#define GELU_COEF 0.044715f

// Both kernels use 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)) and
// 1 - tanh(u)^2 = 4 s (1 - s): one expf instead of glibc's much slower tanhf,
// and no cancellation in 1 - tanh^2.

// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void rt_gelu_fwd(float *y, const float *x, long n) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) {
    float xi = x[i];
    float u = GELU_SCALE * (xi + GELU_COEF * xi * xi * xi);
    y[i] = xi / (1.0f + expf(-2.0f * u));
  }
}

// dx = dy * (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx)
void rt_gelu_bwd(float *dx, const float *dy, const float *x, long n) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) {
    float xi = x[i];
    float u = GELU_SCALE * (xi + GELU_COEF * xi * xi * xi);
    float grad;
    if (u > 20.0f) {  // the tails: tanh u = +-1 and 1 - tanh^2 u < 1e-17
      grad = 1.0f;
    } else if (u < -20.0f) {
      grad = 0.0f;
    } else {
      float e = expf(-2.0f * u);
      float s = 1.0f / (1.0f + e);  // 0.5 (1 + tanh u)
      float du = GELU_SCALE * (1.0f + 3.0f * GELU_COEF * xi * xi);
      grad = s + 2.0f * xi * s * (e * s) * du;  // e*s = 1 - s
    }
    dx[i] = grad * dy[i];
  }
}

void rt_relu_fwd(float *y, const float *x, long n) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// dx = dy where x > 0, else 0
void rt_relu_bwd(float *dx, const float *dy, const float *x, long n) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

// ---------------------------------------------------------------------------
// matmul

// C_i = op(A_i) @ op(B_i), one cblas_sgemm per batch item; with sc == 0 the
// items accumulate into one result (beta = 1 after the first).
void rt_matmul(float *c, const float *a, const float *b, long batch, long m,
               long n, long k, int ta, int tb, long sa, long sb, long sc) {
  if (m <= 0 || n <= 0) return;
  if (batch <= 0 || k <= 0) {  // empty products are zero
    long nc = (sc == 0 || batch <= 0) ? 1 : batch;
    for (long i = 0; i < nc; i++) rt_fill(c + i * sc, m * n, 0.0f);
    return;
  }
  int lda = (int)(ta ? m : k), ldb = (int)(tb ? k : n);
  for (long i = 0; i < batch; i++) {
    float beta = (sc == 0 && i > 0) ? 1.0f : 0.0f;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, 1.0f,
                a + i * sa, lda, b + i * sb, ldb, beta, c + i * sc, (int)n);
  }
}

// ---------------------------------------------------------------------------
// neural-net ops

// out[i, :] = w[idx[i], :]
void rt_embedding_fwd(float *out, const float *w, const int *idx, long n,
                      long c) {
#pragma omp parallel for if (n * c >= PAR_MIN)
  for (long i = 0; i < n; i++)
    memcpy(out + i * c, w + (long)idx[i] * c, (size_t)c * sizeof(float));
}

// dw = 0; dw[idx[i], :] += dout[i, :]. Parallel over column blocks, so each
// element of dw is summed by one thread in the order of i.
void rt_embedding_bwd(float *dw, const float *dout, const int *idx, long n,
                      long v, long c) {
  rt_fill(dw, v * c, 0.0f);
  long nblocks = (c + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(dynamic) if (n * c >= PAR_MIN && nblocks > 1)
  for (long blk = 0; blk < nblocks; blk++) {
    long lo = blk * COL_BLOCK, hi = lo + COL_BLOCK < c ? lo + COL_BLOCK : c;
    for (long i = 0; i < n; i++) {
      float *dwr = dw + (long)idx[i] * c;
      const float *dr = dout + i * c;
      for (long j = lo; j < hi; j++) dwr[j] += dr[j];
    }
  }
}

// mean and 1/sqrt(biased variance + eps) of one row, in double
static void row_stats(const float *x, long c, float eps, float *mean,
                      float *rstd) {
  double m = 0.0;
  for (long j = 0; j < c; j++) m += x[j];
  m /= (double)c;
  double var = 0.0;
  for (long j = 0; j < c; j++) {
    double d = x[j] - m;
    var += d * d;
  }
  var /= (double)c;
  *mean = (float)m;
  *rstd = (float)(1.0 / sqrt(var + (double)eps));
}

// y = (x - mean) * rstd * w + b, row by row
void rt_layernorm_fwd(float *y, const float *x, const float *w, const float *b,
                      long n, long c, float eps) {
#pragma omp parallel for if (n * c >= PAR_MIN)
  for (long i = 0; i < n; i++) {
    const float *xr = x + i * c;
    float *yr = y + i * c;
    float mean, rstd;
    row_stats(xr, c, eps, &mean, &rstd);
    for (long j = 0; j < c; j++) yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];
  }
}

// dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy*w;
// dw = sum_rows dy * norm, db = sum_rows dy. One thread sums dw/db over the
// rows in order while the others (and then it) compute the dx rows.
void rt_layernorm_bwd(float *dx, float *dw, float *db, const float *dy,
                      const float *x, const float *w, long n, long c,
                      float eps) {
#pragma omp parallel if (n * c >= PAR_MIN)
  {
#pragma omp single nowait
    {
      for (long j = 0; j < c; j++) {
        dw[j] = 0.0f;
        db[j] = 0.0f;
      }
      for (long i = 0; i < n; i++) {
        const float *xr = x + i * c, *dyr = dy + i * c;
        float mean, rstd;
        row_stats(xr, c, eps, &mean, &rstd);
        for (long j = 0; j < c; j++) {
          dw[j] += dyr[j] * ((xr[j] - mean) * rstd);
          db[j] += dyr[j];
        }
      }
    }
#pragma omp for schedule(dynamic, 16)
    for (long i = 0; i < n; i++) {
      const float *xr = x + i * c, *dyr = dy + i * c;
      float *dxr = dx + i * c;
      float mean, rstd;
      row_stats(xr, c, eps, &mean, &rstd);
      double dnorm_mean = 0.0, dnorm_norm_mean = 0.0;
      for (long j = 0; j < c; j++) {
        float norm = (xr[j] - mean) * rstd;
        float dnorm = dyr[j] * w[j];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      float dm = (float)(dnorm_mean / (double)c);
      float dnm = (float)(dnorm_norm_mean / (double)c);
      for (long j = 0; j < c; j++) {
        float norm = (xr[j] - mean) * rstd;
        float dnorm = dyr[j] * w[j];
        dxr[j] = (dnorm - dm - norm * dnm) * rstd;
      }
    }
  }
}

// y = softmax over each row of x (n, c), max subtracted for stability
void rt_softmax_fwd(float *y, const float *x, long n, long c) {
#pragma omp parallel for if (n * c >= PAR_MIN)
  for (long i = 0; i < n; i++) {
    const float *xr = x + i * c;
    float *yr = y + i * c;
    float maxv = -INFINITY;
    for (long j = 0; j < c; j++) maxv = xr[j] > maxv ? xr[j] : maxv;
    double sum = 0.0;
    for (long j = 0; j < c; j++) {
      yr[j] = expf(xr[j] - maxv);
      sum += yr[j];
    }
    float inv = (float)(1.0 / sum);
    for (long j = 0; j < c; j++) yr[j] *= inv;
  }
}

// dx = y * (dy - sum(dy * y)) per row
void rt_softmax_bwd(float *dx, const float *dy, const float *y, long n,
                    long c) {
#pragma omp parallel for if (n * c >= PAR_MIN)
  for (long i = 0; i < n; i++) {
    const float *dyr = dy + i * c, *yr = y + i * c;
    float *dxr = dx + i * c;
    double dot = 0.0;
    for (long j = 0; j < c; j++) dot += dyr[j] * yr[j];
    float d = (float)dot;
    for (long j = 0; j < c; j++) dxr[j] = yr[j] * (dyr[j] - d);
  }
}

// softmax(scale * q_i . k_j) over j < jn into p[0..jn), unnormalized exps;
// returns their sum. Shared by attention fwd and bwd so that both see the same
// probabilities.
static float attention_row(float *p, const float *qi, const float *kh, long jn,
                           long hs, float scale) {
  float maxv = -INFINITY;
  for (long j = 0; j < jn; j++) {
    const float *kj = kh + j * hs;
    float s = 0.0f;
    for (long d = 0; d < hs; d++) s += qi[d] * kj[d];
    s *= scale;
    p[j] = s;
    if (s > maxv) maxv = s;
  }
  float sum = 0.0f;
  for (long j = 0; j < jn; j++) {
    p[j] = expf(p[j] - maxv);
    sum += p[j];
  }
  return sum;
}

// out_i = sum_j softmax_j(q_i . k_j / sqrt(hs)) v_j per head, row by row
void rt_attention_fwd(float *out, const float *q, const float *k,
                      const float *v, long bh, long t, long hs, int causal) {
  if (bh <= 0 || t <= 0 || hs <= 0) return;
  float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2) schedule(dynamic, 8)
  for (long h = 0; h < bh; h++) {
    for (long i = 0; i < t; i++) {
      const float *qi = q + (h * t + i) * hs;
      const float *kh = k + h * t * hs, *vh = v + h * t * hs;
      float *oi = out + (h * t + i) * hs;
      long jn = causal ? i + 1 : t;
      float p[t];
      float inv = 1.0f / attention_row(p, qi, kh, jn, hs, scale);
      for (long d = 0; d < hs; d++) oi[d] = 0.0f;
      for (long j = 0; j < jn; j++) {
        const float *vj = vh + j * hs;
        float pj = p[j] * inv;
        for (long d = 0; d < hs; d++) oi[d] += pj * vj[d];
      }
    }
  }
}

// Backward of the above; the probabilities are recomputed row by row.
// dk and dv sum over the rows i of a head, so one thread owns each head.
void rt_attention_bwd(float *dq, float *dk, float *dv, const float *dout,
                      const float *q, const float *k, const float *v, long bh,
                      long t, long hs, int causal) {
  if (bh <= 0 || t <= 0 || hs <= 0) return;
  float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(dynamic, 1)
  for (long h = 0; h < bh; h++) {
    const float *qh = q + h * t * hs, *kh = k + h * t * hs, *vh = v + h * t * hs;
    const float *doh = dout + h * t * hs;
    float *dqh = dq + h * t * hs, *dkh = dk + h * t * hs, *dvh = dv + h * t * hs;
    memset(dqh, 0, (size_t)(t * hs) * sizeof(float));
    memset(dkh, 0, (size_t)(t * hs) * sizeof(float));
    memset(dvh, 0, (size_t)(t * hs) * sizeof(float));
    float p[t], dp[t];
    for (long i = 0; i < t; i++) {
      const float *qi = qh + i * hs, *doi = doh + i * hs;
      float *dqi = dqh + i * hs;
      long jn = causal ? i + 1 : t;
      float inv = 1.0f / attention_row(p, qi, kh, jn, hs, scale);
      // dv_j += p_ij dout_i ; dp_ij = dout_i . v_j
      float pdp = 0.0f;
      for (long j = 0; j < jn; j++) {
        const float *vj = vh + j * hs;
        float *dvj = dvh + j * hs;
        p[j] *= inv;
        float s = 0.0f;
        for (long d = 0; d < hs; d++) {
          dvj[d] += p[j] * doi[d];
          s += doi[d] * vj[d];
        }
        dp[j] = s;
        pdp += p[j] * s;
      }
      // ds_ij = p_ij (dp_ij - sum_j p_ij dp_ij); dq_i, dk_j through the scores
      for (long j = 0; j < jn; j++) {
        const float *kj = kh + j * hs;
        float *dkj = dkh + j * hs;
        float ds = scale * p[j] * (dp[j] - pdp);
        for (long d = 0; d < hs; d++) {
          dqi[d] += ds * kj[d];
          dkj[d] += ds * qi[d];
        }
      }
    }
  }
}

// -log softmax(row)[target] = logsumexp(row) - row[target]
static double crossentropy_row(const float *row, int target, long v) {
  float maxv = -INFINITY;
  for (long j = 0; j < v; j++) maxv = row[j] > maxv ? row[j] : maxv;
  double sum = 0.0;
  for (long j = 0; j < v; j++) sum += expf(row[j] - maxv);
  return (double)maxv + log(sum) - (double)row[target];
}

// loss[0] = mean over rows; rows summed in SUM_CHUNKS fixed chunks
void rt_crossentropy_fwd(float *loss, const float *logits, const int *targets,
                         long n, long v) {
  if (n <= 0) {
    loss[0] = 0.0f;
    return;
  }
  double part[SUM_CHUNKS];
#pragma omp parallel for schedule(dynamic) if (n * v >= PAR_MIN)
  for (int ch = 0; ch < SUM_CHUNKS; ch++) {
    long lo = n * ch / SUM_CHUNKS, hi = n * (ch + 1) / SUM_CHUNKS;
    double s = 0.0;
    for (long i = lo; i < hi; i++) s += crossentropy_row(logits + i * v, targets[i], v);
    part[ch] = s;
  }
  double s = 0.0;
  for (int ch = 0; ch < SUM_CHUNKS; ch++) s += part[ch];
  loss[0] = (float)(s / (double)n);
}

// dlogits = (softmax(logits) - onehot(target)) * dloss[0] / n
void rt_crossentropy_bwd(float *dlogits, const float *dloss,
                         const float *logits, const int *targets, long n,
                         long v) {
  if (n <= 0) return;
  float g = dloss[0] / (float)n;
#pragma omp parallel for if (n * v >= PAR_MIN)
  for (long i = 0; i < n; i++) {
    const float *row = logits + i * v;
    float *drow = dlogits + i * v;
    float maxv = -INFINITY;
    for (long j = 0; j < v; j++) maxv = row[j] > maxv ? row[j] : maxv;
    double sum = 0.0;
    for (long j = 0; j < v; j++) {
      drow[j] = expf(row[j] - maxv);
      sum += drow[j];
    }
    float scale = (float)(g / sum);
    for (long j = 0; j < v; j++) drow[j] *= scale;
    drow[targets[i]] -= g;
  }
}

// ---------------------------------------------------------------------------
// optimizers

// torch.optim.AdamW: decoupled weight decay, bias-corrected moments
void rt_adamw(float *p, const float *g, float *m, float *v, long n, float lr,
              float beta1, float beta2, float eps, float wd, int t) {
  float bc1 = (float)(1.0 - pow((double)beta1, (double)t));
  float bc2 = (float)(1.0 - pow((double)beta2, (double)t));
  float decay = 1.0f - lr * wd;
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) {
    float gi = g[i];
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    p[i] = p[i] * decay - lr * mhat / (sqrtf(vhat) + eps);
  }
}

// p -= lr * (g + wd * p)
void rt_sgd(float *p, const float *g, long n, float lr, float wd) {
#pragma omp parallel for if (n >= PAR_MIN)
  for (long i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]);
}
