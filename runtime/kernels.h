// CPU reference kernels of the mtc runtime (prefix rt_).
//
// Every generated forward/backward/update is a straight-line list of calls to
// these functions. Conventions: all tensors are contiguous row-major float32
// (int32 for indices) unless a stride array says otherwise; the first
// arguments are the outputs; outputs are overwritten, never accumulated into,
// unless the comment says so; sizes are `long`.
#ifndef MTC_RT_KERNELS_H
#define MTC_RT_KERNELS_H

#define RT_MAXRANK 8

// --- data movement ---------------------------------------------------------
void rt_fill(float *out, long n, float value);
void rt_copy(float *out, const float *x, long n);
// out is contiguous with `shape`; element idx of out reads x at
// sum_i idx[i] * xstride[i]. A zero stride broadcasts; permuted strides
// transpose.
void rt_strided_copy(float *out, const float *x, int rank, const long *shape,
                     const long *xstride);
// Sum-reduce: x is contiguous with `shape`; out is zeroed first, then
// out[sum_i idx[i] * ostride[i]] += scale * x[idx]. A zero ostride reduces
// that dim. onumel is the number of elements of out.
void rt_reduce_sum(float *out, const float *x, int rank, const long *shape,
                   const long *ostride, long onumel, float scale);
// out[o*len + i] = x[o*xinner + off + i] for o < outer, i < len
void rt_slice(float *out, const float *x, long outer, long xinner, long off,
              long len);
// out[o*oinner + off + i] = x[o*len + i] for o < outer, i < len
void rt_unslice(float *out, const float *x, long outer, long oinner, long off,
                long len);

// --- elementwise -----------------------------------------------------------
enum { RT_ADD, RT_SUB, RT_MUL, RT_DIV };
// out (contiguous, `shape`) = a op b, with a and b read through strides
// (zero strides broadcast).
void rt_binary(int op, float *out, const float *a, const float *b, int rank,
               const long *shape, const long *astride, const long *bstride);
void rt_scale(float *out, const float *x, long n, float s, float b); // s*x + b
void rt_gelu_fwd(float *y, const float *x, long n);                  // tanh approximation
void rt_gelu_bwd(float *dx, const float *dy, const float *x, long n);
void rt_relu_fwd(float *y, const float *x, long n);
void rt_relu_bwd(float *dx, const float *dy, const float *x, long n);

// --- matmul ----------------------------------------------------------------
// For each i < batch: C_i = op(A_i) @ op(B_i), op = transpose when ta/tb.
// A_i = a + i*sa, B_i = b + i*sb, C_i = c + i*sc; op(A_i) is m x k, op(B_i)
// is k x n, C_i is m x n. sa or sb = 0 broadcasts an operand. sc = 0 with
// batch > 1 sums all products into one m x n result.
void rt_matmul(float *c, const float *a, const float *b, long batch, long m,
               long n, long k, int ta, int tb, long sa, long sb, long sc);

// --- neural-net ops --------------------------------------------------------
// out (n, c) = w[idx[i]] ; w (v, c)
void rt_embedding_fwd(float *out, const float *w, const int *idx, long n, long c);
// dw (v, c) is zeroed, then dw[idx[i]] += dout[i]
void rt_embedding_bwd(float *dw, const float *dout, const int *idx, long n,
                      long v, long c);
// rows of x (n, c) normalized, then * w + b; biased variance, like PyTorch.
void rt_layernorm_fwd(float *y, const float *x, const float *w, const float *b,
                      long n, long c, float eps);
// dx (n, c), dw (c), db (c) all overwritten; mean/rstd recomputed from x.
void rt_layernorm_bwd(float *dx, float *dw, float *db, const float *dy,
                      const float *x, const float *w, long n, long c, float eps);
// softmax over the last dim of (n, c)
void rt_softmax_fwd(float *y, const float *x, long n, long c);
void rt_softmax_bwd(float *dx, const float *dy, const float *y, long n, long c);
// Scaled dot-product attention per (batch*head): q, k, v, out are (bh, t, hs);
// scores scaled by 1/sqrt(hs); causal masks j > i.
void rt_attention_fwd(float *out, const float *q, const float *k,
                      const float *v, long bh, long t, long hs, int causal);
// dq, dk, dv overwritten; probabilities recomputed from q, k.
void rt_attention_bwd(float *dq, float *dk, float *dv, const float *dout,
                      const float *q, const float *k, const float *v, long bh,
                      long t, long hs, int causal);
// loss[0] = mean over n rows of -log softmax(logits)[target]
void rt_crossentropy_fwd(float *loss, const float *logits, const int *targets,
                         long n, long v);
// dlogits = (softmax(logits) - onehot(target)) * dloss[0] / n
void rt_crossentropy_bwd(float *dlogits, const float *dloss,
                         const float *logits, const int *targets, long n, long v);

// --- optimizers (PyTorch semantics) -----------------------------------------
// AdamW, t is the 1-based step: p -= lr*wd*p; m,v moments; bias-corrected.
void rt_adamw(float *p, const float *g, float *m, float *v, long n, float lr,
              float beta1, float beta2, float eps, float wd, int t);
// SGD: p -= lr * (g + wd * p)
void rt_sgd(float *p, const float *g, long n, float lr, float wd);

// --- offload: host memory ----------------------------------------------------
// These run on the host in every build. rt_adamw_host is rt_adamw over host
// arrays on `threads` POSIX threads (<= 0: rt_host_threads()), each taking a
// contiguous run of 16-element blocks: the same bits as rt_adamw for any
// thread count. Small arrays run on fewer threads.
void rt_adamw_host(float *p, const float *g, float *m, float *v, long n, float lr,
                   float beta1, float beta2, float eps, float wd, int t, int threads);
// The host's threads: $MTC_HOST_THREADS, else the online CPUs.
int rt_host_threads(void);
// n floats from device memory x to host memory, and back.
void rt_to_host(float *host, const float *x, long n);
void rt_to_device(float *x, const float *host, long n);

// --- kernels for ONNX ops ----------------------------------------------------
void rt_copy_i32(int *out, const int *x, long n);  // reshape of integer tensors (labels)
enum { RT_EXP, RT_LOG, RT_SQRT, RT_TANH, RT_ERF, RT_POW };
// y = f(x) elementwise: e^x, log x, sqrt x, tanh x, erf x, x^p (p used by RT_POW only)
void rt_unary(int op, float *y, const float *x, long n, float p);
// exact GELU: y = x/2 * (1 + erf(x/sqrt(2))); dx = dy * (Phi(x) + x*phi(x))
void rt_gelu_erf_fwd(float *y, const float *x, long n);
void rt_gelu_erf_bwd(float *dx, const float *dy, const float *x, long n);
// out (contiguous, `shape`) = mask ? value : x, x contiguous like out, the
// int mask read through mstride (zero strides broadcast)
void rt_masked_fill(float *out, const float *x, const int *mask, int rank,
                    const long *shape, const long *mstride, float value);
// out = x * keep / (1 - ratio), keep[i] drawn from (seed, key, *step, i) by a
// counter-based generator: the same arguments give the same mask, so the
// backward is the same call on dy. ratio in [0, 1).
void rt_dropout(float *out, const float *x, const int *step, long n,
                float ratio, long seed, long key);
// step[0] += 1: a new dropout mask for every training step
void rt_tick(int *step);
// log-softmax over the last dim of (n, c); backward dx = dy - exp(y) * sum(dy)
void rt_log_softmax_fwd(float *y, const float *x, long n, long c);
void rt_log_softmax_bwd(float *dx, const float *dy, const float *y, long n, long c);
// loss[0] = -sum over rows i with targets[i] != ignore of logp[i, targets[i]],
// divided by the count of those rows unless sum; the backward writes dlogp
// (zeros but -dloss[0] / count at each target)
void rt_nll_loss_fwd(float *loss, const float *logp, const int *targets, long n,
                     long c, int sum, long ignore);
void rt_nll_loss_bwd(float *dlogp, const float *dloss, const int *targets,
                     long n, long c, int sum, long ignore);
// x viewed as (outer, xdim, inner): out (outer, len, inner) takes the rows
// start, start+step, ...; the backward zeroes dx and writes them back
void rt_slice_axis(float *out, const float *x, long outer, long xdim, long inner,
                   long start, long step, long len);
void rt_slice_axis_bwd(float *dx, const float *dy, long outer, long xdim,
                       long inner, long start, long step, long len);

#endif
