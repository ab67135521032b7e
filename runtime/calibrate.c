// The measuring program of `mtc calibrate`: times this machine's kernels and
// collectives, built as the emitted programs are (the same sources and
// flags: the CPU build's, or with --gpu the GPU build's, its kernels by nvcc),
// and prints a device profile, a cluster file of one group that `mtc plan`
// and `mtc compile` read (--device FILE, or --cluster FILE):
//
//   mpirun -np R ./calibrate R [--quick]    (R = 1 without MPI)
//
// (--tiny: the smallest of each measurement, once: for a test that runs it emulated.)
//
// Its buffers lie in device memory (runtime/device.h: a GPU's in the GPU
// build, host memory in the CPU build), filled through the host copy, and
// every time is read after the device has finished (rt_device_sync).
// Every rank runs every measurement at the same moment, as the ranks of a
// program share the machine while it trains, and each figure is the slowest
// rank's. What it measures, and the profile's key for it:
//   gemm           rt_matmul (float32) and rt_matmul_bf16 at m, n, k of 32 to
//                  2048 (a GPU: to 8192) (FLOP/s), B read from memory each call, as
//                  a step's GEMMs read their weights; flops_fp32/flops_bf16 are
//                  the fastest
//   ops            seconds per element of the other kernels a step runs most
//                  (gelu, the norms, softmax, cross-entropy, adds, scale, dropout, a head
//                  split's transpose, splits and concats, ...), at
//                  64Ki, 1Mi and 8Mi elements (a GPU: and 64Mi; rows of 1024), their operands
//                  from memory as a step's activations are, keyed by the IR
//                  op they run (ir/ops.def); each size's float32 time, then the
//                  bf16 kernel's
//   hbm_bw         rt_binary's add on arrays far larger than the caches
//                  (bytes read and written per second)
//   attention      rt_attention_fwd's and _bwd's FLOP/s (causal) at 64, 256
//                  and 1024 tokens and heads of 32, 64 and 128 (--quick: the
//                  first two of each), then the bf16 kernels
//   efficiency     simt: rt_gelu_fwd's rate in the IR's count (8 FLOPs an
//                  element), of flops_fp32; attn: rt_attention_fwd + _bwd
//                  (causal, 256 tokens, heads of 64), of flops_fp32; update:
//                  rt_adamw's float32 traffic on 32Mi parameters (28 bytes a parameter, as the
//                  planner counts it), of hbm_bw; launch: a small kernel's
//                  time beyond its traffic; overlap: how much of a
//                  non-blocking all-reduce a kernel beside it hides
//   collectives    rt_allreduce's, rt_allgather's and rt_reduce_scatter's bus
//                  bandwidth among the R ranks at 16 KiB to 64 MiB (bytes/s, after
//                  the latency); intra_bw: the all-reduce's at 64 MiB, and
//                  efficiency.gather and .scatter the others' there, of it (over Open
//                  MPI's shared memory they differ several times, and with the size)
//   alpha_intra    the latency (a 4-byte all-reduce)
//   host_bw        rt_to_host's and rt_to_device's bytes per second between the
//                  arena and the host region (pinned on a GPU), as offload copies
//   cpu_adam       rt_adamw_host's parameters per second (offloaded AdamW)
// A GPU's profile names the GPU as CUDA does ("gpu": "NVIDIA H100 80GB HBM3"), which
// the planner reads as its built-in entry (H100-80GB) with the measured rates in
// place of the datasheet's; what it did not measure (links between nodes, and
// with one rank those between GPUs) stays the entry's.
// The FLOP counts are those of ir/ops.c (matmul 2mnk; attention 2 x 2 GEMMs
// forward and 5 backward over the causal half), so that the planner's
// formulas divided by these rates give the kernels' times.
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "comm.h"
#include "device.h"
#include "dist.h"
#include "kernels.h"
#include "model_api.h"   // RT_GEMM_WORKSPACE_BYTES

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double min_time = 0.05;   // seconds each measurement repeats for (--quick: less)
static int ranks;
static int quick;   // 1: --quick; 2: --tiny

// A size (or count) by the level: full, --quick's, --tiny's.
static long sized(long full, long quick_size, long tiny) {
  return quick > 1 ? tiny : quick ? quick_size : full;
}

// The device memory the measurements run on: one arena, taken from in turn and given back a
// phase at a time (arena_top saved and restored), each buffer zeroed; buffers are filled in the
// arena's host copy (the stage; the arena itself in the CPU build) and put to the device.
static RtDeviceInfo info;
static char *arena, *stage;
static long arena_cap, arena_top;

static void *dev_alloc(size_t bytes) {
  long at = arena_top, n = ((long)bytes + 255) / 256 * 256;
  if (n > arena_cap - at) {
    fprintf(stderr, "calibrate: error: the measurements need more than the %ld bytes of device "
            "memory taken for them\n", arena_cap);
    exit(1);
  }
  arena_top += n;
  memset(stage + at, 0, bytes);
  rt_device_put(arena, stage, at, (long)bytes);
  return arena + at;
}

// n values at x (float32, or bf16) from a fixed pattern in [-scale, scale].
static void fill_as(void *x, long n, float scale, bool bf16) {
  long at = (long)((char *)x - arena);
  for (long i = 0; i < n; i++) {
    float v = scale * (float)((i * 7919) % 1001 - 500) / 500.0f;
    if (bf16)
      ((rt_bf16 *)(stage + at))[i] = rt_f32_to_bf16(v);
    else
      ((float *)(stage + at))[i] = v;
  }
  rt_device_put(arena, stage, at, n * (bf16 ? 2 : 4));
}
static void fill(float *x, long n, float scale) { fill_as(x, n, scale, false); }

// Seconds per call of fn(ctx): once to warm up, then three trials of as many
// calls as fill min_time / 3, the fastest trial counting (a rank the system
// paused for a moment slows one trial, not the figure); all ranks start each
// trial together and repeat alike (fn may be a collective), and the slowest
// rank's time counts.
typedef void (*Fn)(void *ctx);
static double timed(Fn fn, void *ctx) {
  rt_group *w = rt_group_world();
  rt_device_sync();
  rt_barrier(w);
  double t0 = now();
  fn(ctx);
  rt_device_sync();
  double warm = rt_allreduce_scalar(w, now() - t0, RT_REDUCE_MAX);
  double span = min_time / 3;
  long reps = warm >= span ? 1 : (long)fmin(1e6, ceil(span / fmax(warm, 1e-9)));
  double best = INFINITY;
  for (int trial = 0; trial < 3; trial++) {
    rt_barrier(w);
    t0 = now();
    for (long r = 0; r < reps; r++) fn(ctx);
    rt_device_sync();
    best = fmin(best, rt_allreduce_scalar(w, (now() - t0) / (double)reps, RT_REDUCE_MAX));
  }
  return best;
}

// ---- GEMMs --------------------------------------------------------------------------------------

// A training step's GEMMs find one operand in memory, not in cache (forward's and the input
// gradients' the weights, the weight gradients' the activations forward saved): each call
// takes the next of as many copies of B as fill gemm_pool bytes, the first again after the last
// (64 MiB, or four times a GPU's L2 cache, and at least one B of the largest shape).
static long gemm_pool = 64L << 20;

typedef struct Gemm {
  long m, n, k;
  float *a, *b, *c;   // b, bh: gemm_pool bytes each
  rt_bf16 *ah, *bh, *ch;
  long turn;
} Gemm;

// The next copy of B (elements of `size` bytes) in the pool at b.
static const void *next_b(Gemm *g, const void *b, size_t size) {
  long each = g->k * g->n, copies = gemm_pool / (long)size / each;
  copies = copies < 1 ? 1 : copies;
  return (const char *)b + (size_t)(g->turn++ % copies * each) * size;
}

static void gemm_f32(void *p) {
  Gemm *g = p;
  rt_matmul(g->c, g->a, next_b(g, g->b, sizeof(float)), 1, g->m, g->n, g->k, 0, 0, 0, 0, 0);
}
static void gemm_bf16(void *p) {
  Gemm *g = p;
  rt_matmul_bf16(g->ch, g->ah, next_b(g, g->bh, sizeof(rt_bf16)), 1, g->m, g->n, g->k, 0, 0, 0,
                 0, 0);
}

// ---- memory-bound and other kernels -------------------------------------------------------------

typedef struct Vec {
  long n;
  float *x, *y, *z;
} Vec;

static void add(void *p) {
  Vec *v = p;
  long shape[1] = {v->n}, stride[1] = {1};
  rt_binary(RT_ADD, v->z, v->x, v->y, 1, shape, stride, stride);
}
static void gelu(void *p) {
  Vec *v = p;
  rt_gelu_fwd(v->y, v->x, v->n);
}

typedef struct Adam {
  long n;
  float *p, *g, *m, *v;
} Adam;

static void adamw(void *q) {
  Adam *a = q;
  rt_adamw(a->p, a->g, a->m, a->v, a->n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f, a->n);
}
static void adamw_host(void *q) {
  Adam *a = q;
  rt_adamw_host(a->p, a->g, a->m, a->v, a->n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f, a->n, 0);
}

typedef struct Attn {   // q .. dv: float32, or bf16
  long bh, t, hs;
  bool bf16;
  void *q, *k, *v, *out, *dout, *dq, *dk, *dv;
  float *lse;
} Attn;

static void attn_fwd(void *p) {
  Attn *a = p;
  if (a->bf16)
    rt_attention_fwd_bf16(a->out, a->lse, a->q, a->k, a->v, NULL, NULL, a->bh, a->t, a->t, a->hs,
                          1, 1, 1, 1);
  else
    rt_attention_fwd(a->out, a->lse, a->q, a->k, a->v, NULL, NULL, a->bh, a->t, a->t, a->hs, 1, 1,
                     1, 1);
}
static void attn_bwd(void *p) {
  Attn *a = p;
  if (a->bf16)
    rt_attention_bwd_bf16(a->dq, a->dk, a->dv, NULL, a->dout, a->q, a->k, a->v, a->out, a->lse,
                          NULL, NULL, a->bh, a->t, a->t, a->hs, 1, 1, 1, 1);
  else
    rt_attention_bwd(a->dq, a->dk, a->dv, NULL, a->dout, a->q, a->k, a->v, a->out, a->lse, NULL,
                     NULL, a->bh, a->t, a->t, a->hs, 1, 1, 1, 1);
}

// Causal attention of t tokens, heads of hs, over enough heads (bh) to take a few ms (on a GPU,
// and at least two per SM, as a step's batch of heads fills it): its forward's and backward's
// FLOP/s in the IR's count (2 and 5 GEMMs over the causal half), fwd[bf16] and bwd[bf16].
static void attn_rates(long t, long hs, double fwd[2], double bwd[2]) {
  double work = quick > 1 ? 0x1p16 : info.gpu ? 0x1p30 : 0x1p23;
  Attn a = {.bh = (long)fmax(info.gpu ? 2.0 * info.units : 1, ceil(work / ((double)t * t * hs))),
            .t = t, .hs = hs};
  long qn = a.bh * t * hs, mark = arena_top;
  void **bufs[] = {&a.q, &a.k, &a.v, &a.out, &a.dout, &a.dq, &a.dk, &a.dv};
  enum { NBUF = sizeof bufs / sizeof bufs[0] };
  for (int i = 0; i < NBUF; i++)
    *bufs[i] = dev_alloc(sizeof(float) * qn);
  a.lse = dev_alloc(sizeof(float) * a.bh * t);
  double gemm = 2.0 * (double)qn * (double)t / 2;   // one GEMM over the causal half
  for (int b = 0; b < 2; b++) {
    a.bf16 = b;
    for (int i = 0; i < NBUF; i++)
      fill_as(*bufs[i], qn, 0.1f * (float)(i + 1), b);
    fwd[b] = 2 * gemm / timed(attn_fwd, &a);
    bwd[b] = 5 * gemm / timed(attn_bwd, &a);
  }
  arena_top = mark;
}

static const long att_t[] = {64, 256, 1024}, att_hs[] = {32, 64, 128};
enum { NATT = sizeof att_t / sizeof att_t[0] };

// ---- the other kernels, per element --------------------------------------------------------------

#define ROW 1024   // the row-wise kernels' rows: n / ROW of ROW elements

typedef struct Bufs {   // device memory; x .. db of elements of `size` bytes (float32, bf16)
  void *x, *y, *z, *w, *bias, *dw, *db;
  float *loss, *dloss;
  int *targets, *step;
  size_t size;
} Bufs;

typedef struct OpCase {
  const char *op;                    // the IR op the kernel runs
  void (*run[2])(Bufs *b, long n);   // its float32 kernel, and its bf16 one
} OpCase;

// The kernels, by element type T (S: the suffix of its variants, kernels.h).
#define OP_KERNELS(S, T)                                                                          \
  static void k_gelu##S(Bufs *b, long n) { rt_gelu_fwd##S((T *)b->y, (T *)b->x, n); }              \
  static void k_gelu_bwd##S(Bufs *b, long n) {                                                    \
    rt_gelu_bwd##S((T *)b->z, (T *)b->y, (T *)b->x, n);                                           \
  }                                                                                               \
  static void k_silu##S(Bufs *b, long n) { rt_silu_fwd##S((T *)b->y, (T *)b->x, n); }              \
  static void k_silu_bwd##S(Bufs *b, long n) {                                                    \
    rt_silu_bwd##S((T *)b->z, (T *)b->y, (T *)b->x, n);                                           \
  }                                                                                               \
  static void k_layernorm##S(Bufs *b, long n) {                                                   \
    rt_layernorm_fwd##S((T *)b->y, (T *)b->x, (T *)b->w, (T *)b->bias, n / ROW, ROW, 1e-5f);      \
  }                                                                                               \
  static void k_layernorm_bwd##S(Bufs *b, long n) {                                               \
    rt_layernorm_bwd##S((T *)b->z, (T *)b->dw, (T *)b->db, (T *)b->y, (T *)b->x, (T *)b->w,       \
                        n / ROW, ROW, 1e-5f);                                                     \
  }                                                                                               \
  static void k_rmsnorm##S(Bufs *b, long n) {                                                     \
    rt_rmsnorm_fwd##S((T *)b->y, (T *)b->x, (T *)b->w, n / ROW, ROW, 1e-5f);                      \
  }                                                                                               \
  static void k_rmsnorm_bwd##S(Bufs *b, long n) {                                                 \
    rt_rmsnorm_bwd##S((T *)b->z, (T *)b->dw, (T *)b->y, (T *)b->x, (T *)b->w, n / ROW, ROW,       \
                      1e-5f);                                                                     \
  }                                                                                               \
  static void k_softmax##S(Bufs *b, long n) {                                                     \
    rt_softmax_fwd##S((T *)b->y, (T *)b->x, n / ROW, ROW, 0);                                     \
  }                                                                                               \
  static void k_softmax_bwd##S(Bufs *b, long n) {                                                 \
    rt_softmax_bwd##S((T *)b->z, (T *)b->y, (T *)b->x, n / ROW, ROW);                             \
  }                                                                                               \
  static void k_xent##S(Bufs *b, long n) {                                                        \
    rt_crossentropy_fwd##S(b->loss, (T *)b->x, b->targets, n / ROW, ROW, ROW, -100);              \
  }                                                                                               \
  static void k_xent_bwd##S(Bufs *b, long n) {                                                    \
    rt_crossentropy_bwd##S((T *)b->y, b->dloss, (T *)b->x, b->targets, n / ROW, ROW, ROW, -100);  \
  }                                                                                               \
  static void binary##S(Bufs *b, long n, int op) {                                                \
    long shape[1] = {n}, stride[1] = {1};                                                         \
    rt_binary##S(op, (T *)b->z, (T *)b->x, (T *)b->y, 1, shape, stride, stride);                  \
  }                                                                                               \
  static void k_scale##S(Bufs *b, long n) { rt_scale##S((T *)b->y, (T *)b->x, n, 0.125f, 0.0f); } \
  /* a whole tensor's mask, as one rank draws it */                                               \
  static void k_dropout##S(Bufs *b, long n) {                                                     \
    rt_dropout##S((T *)b->y, (T *)b->x, b->step, n, 0.1f, 1337, 1, 0, 0, RT_AXIS_NONE,             \
                  RT_AXIS_NONE);                                                                  \
  }                                                                                               \
  static void k_add##S(Bufs *b, long n) { binary##S(b, n, RT_ADD); }                              \
  static void k_mul##S(Bufs *b, long n) { binary##S(b, n, RT_MUL); }                              \
  /* a bias's gradient: the rows summed */                                                        \
  static void k_sum_to##S(Bufs *b, long n) {                                                      \
    long shape[2] = {n / ROW, ROW}, ostride[2] = {0, 1};                                          \
    rt_reduce_sum##S((T *)b->dw, (T *)b->x, 2, shape, ostride, ROW, 1.0f);                        \
  }                                                                                               \
  /* the data movement a head split runs (ir/ops.def's transpose: [T, NH, HS] to [NH, T, HS],     \
     rows of a head's 64 elements), and a 3-way split of rows (q, k, v) and its concat, per       \
     element of the whole */                                                                      \
  static void k_transpose##S(Bufs *b, long n) {                                                   \
    long shape[3] = {8, n / (8 * 64), 64}, stride[3] = {64, 8 * 64, 1};                           \
    rt_strided_copy##S((T *)b->y, (T *)b->x, 3, shape, stride);                                   \
  }                                                                                               \
  static void k_split##S(Bufs *b, long n) {                                                       \
    for (long i = 0; i < 3; i++)                                                                  \
      rt_slice##S((T *)b->y + i * (n / 3), (T *)b->x, n / (3 * ROW), 3 * ROW, i * ROW, ROW);      \
  }                                                                                               \
  static void k_concat##S(Bufs *b, long n) {                                                      \
    for (long i = 0; i < 3; i++)                                                                  \
      rt_unslice##S((T *)b->y, (T *)b->x + i * (n / 3), n / (3 * ROW), 3 * ROW, i * ROW, ROW);    \
  }
OP_KERNELS(, float)
OP_KERNELS(_bf16, rt_bf16)
#undef OP_KERNELS

#define OP(op, k) {op, {k, k##_bf16}}
static const OpCase op_cases[] = {
    OP("gelu", k_gelu),           OP("gelu_bwd", k_gelu_bwd),
    OP("silu", k_silu),           OP("silu_bwd", k_silu_bwd),
    OP("layernorm", k_layernorm), OP("layernorm_bwd", k_layernorm_bwd),
    OP("rmsnorm", k_rmsnorm),     OP("rmsnorm_bwd", k_rmsnorm_bwd),
    OP("softmax", k_softmax),     OP("softmax_bwd", k_softmax_bwd),
    OP("cross_entropy", k_xent),  OP("cross_entropy_bwd", k_xent_bwd),
    OP("add", k_add),             OP("mul", k_mul),
    OP("scale", k_scale),         OP("dropout", k_dropout),
    OP("sum_to", k_sum_to),
    OP("transpose", k_transpose), OP("split", k_split),
    OP("concat", k_concat),
};
#undef OP
enum { NOPS = sizeof op_cases / sizeof op_cases[0] };
static const long op_sizes[] = {1L << 16, 1L << 20, 1L << 23, 1L << 26};   // a GPU's: all four
enum { NSIZES = sizeof op_sizes / sizeof op_sizes[0] };

// A step's activations are not in the core's cache when a kernel reads them: other kernels ran
// between their writer and their reader. Each call takes the next n elements of x, y and z, in
// turn through op_pool elements: four times the core's (or the GPU's) L2 cache (8 MiB where it
// is not known).
// (On a 2-core Xeon with a 2 MiB L2, GPT-2 small's step priced/measured: 0.95 with the
// operands in cache, 1.19 through 64 MiB, 0.99-1.05 through 8 MiB; at 256 tokens 0.81, 1.11,
// 0.91. README, "This machine's profile", has the commands.)
static long op_pool = 2L << 20;

typedef struct OpRun {
  const OpCase *c;
  Bufs *b;
  long n, turn;
} OpRun;

static void op_run(void *p) {
  OpRun *r = p;
  long copies = op_pool / r->n, off = r->turn++ % (copies < 1 ? 1 : copies) * r->n;
  Bufs b = *r->b;
  size_t at = (size_t)off * b.size;
  b.x = (char *)b.x + at, b.y = (char *)b.y + at, b.z = (char *)b.z + at;
  r->c->run[b.size == sizeof(rt_bf16)](&b, r->n);
}

// ---- collectives --------------------------------------------------------------------------------

typedef struct Coll {
  long n;
  float *buf;
  Vec *beside;   // overlap: a kernel run while the all-reduce is in flight
} Coll;

static void allreduce(void *p) {
  Coll *c = p;
  rt_allreduce(rt_group_world(), c->buf, c->n, RT_REDUCE_SUM, NULL);
}
static void allgather(void *p) {
  Coll *c = p;
  rt_allgather(rt_group_world(), c->buf, c->n, NULL);
}
static void reduce_scatter(void *p) {
  Coll *c = p;
  rt_reduce_scatter(rt_group_world(), c->buf, c->n, RT_REDUCE_SUM, NULL);
}
// The collectives' sizes in bytes (a tensor-parallel all-reduce of a small model's activations
// to a data-parallel bucket of GPT-2's layer): over Open MPI's shared memory a buffer that
// stays in the caches moves several times faster than one that does not.
#define NCOLL 3
#define NCOLL_SIZES 5
static const long coll_sizes[NCOLL_SIZES] = {16L << 10, 256L << 10, 1L << 20, 4L << 20,
                                             64L << 20};
static void (*const coll_fns[NCOLL])(void *) = {allreduce, allgather, reduce_scatter};
static const char *const coll_keys[NCOLL] = {"all_reduce", "all_gather", "reduce_scatter"};

static void allreduce_beside(void *p) {
  Coll *c = p;
  rt_request req = {0};
  rt_allreduce(rt_group_world(), c->buf, c->n, RT_REDUCE_SUM, &req);
  add(c->beside);
  rt_wait(&req);
}

// ---- the profile --------------------------------------------------------------------------------

static double clamp01(double x) { return x < 0 ? 0 : x > 1 ? 1 : x; }

// The device's name for the profile: the CPU's model, or the GPU's as CUDA gives it (without
// rt_device_name's "(device N)"); no quotes or backslashes, which JSON would need escaped.
static void device_name(char *buf, size_t n) {
  snprintf(buf, n, "%s", info.gpu ? rt_device_name() : "CPU");
  char *at = strstr(buf, " (device ");
  if (at)
    *at = '\0';
  FILE *f = info.gpu ? NULL : fopen("/proc/cpuinfo", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10)) {
      char *v = strchr(line, ':');
      if (v) {
        v += 1 + (v[1] == ' ');
        snprintf(buf, n, "%s", v);
      }
      break;
    }
  if (f)
    fclose(f);
  buf[strcspn(buf, "\n\"\\")] = '\0';
}

// ---- the measurements ---------------------------------------------------------------------------


// GEMMs on a grid of shapes: rate[i][j][l][bf16] at dims[i], dims[j], dims[l]; the fastest of
// each type into best.
static const long dims[] = {32, 128, 512, 2048, 8192};   // a CPU's: the first four
enum { ND = sizeof dims / sizeof dims[0] };

static int gemm_dims(void) {
  int all = info.gpu ? ND : ND - 1;
  return (int)sized(all, all - 1, 2);
}

static void measure_gemms(double rate[ND][ND][ND][2], double best[2]) {
  int nd = gemm_dims();
  long big = dims[nd - 1], mark = arena_top;
  double least = (double)sized(64L << 20, 64L << 20, 1L << 20);
  gemm_pool = (long)fmax(fmax(least, 4.0 * (double)info.cache_bytes),
                         4.0 * (double)big * (double)big);
  Gemm g = {0};
  g.a = dev_alloc(sizeof(float) * big * big);
  g.b = dev_alloc((size_t)gemm_pool);
  g.c = dev_alloc(sizeof(float) * big * big);
  g.ah = dev_alloc(sizeof(rt_bf16) * big * big);
  g.bh = dev_alloc((size_t)gemm_pool);
  g.ch = dev_alloc(sizeof(rt_bf16) * big * big);
  fill(g.a, big * big, 1.0f);
  fill(g.b, gemm_pool / 4, 0.5f);
  fill_as(g.ah, big * big, 1.0f, true);
  fill_as(g.bh, gemm_pool / 2, 0.5f, true);
  best[0] = best[1] = 0;
  for (int i = 0; i < nd; i++)
    for (int j = 0; j < nd; j++)
      for (int l = 0; l < nd; l++) {
        g.m = dims[i], g.n = dims[j], g.k = dims[l];
        double flops = 2.0 * (double)g.m * (double)g.n * (double)g.k;
        for (int t = 0; t < 2; t++) {
          rate[i][j][l][t] = flops / timed(t ? gemm_bf16 : gemm_f32, &g);
          best[t] = fmax(best[t], rate[i][j][l][t]);
        }
      }
  arena_top = mark;
}

// The other kernels, per element, at each size of op_sizes: per_elem[op][size][bf16].
static int op_nsizes(void) {
  int all = info.gpu ? NSIZES : NSIZES - 1;
  return (int)sized(all, all - 1, 1);
}

static void measure_ops(double per_elem[NOPS][NSIZES][2]) {
  int nsizes = op_nsizes();
  if (info.cache_bytes > 0)
    op_pool = 4 * info.cache_bytes / (long)sizeof(float);
  long most = op_sizes[nsizes - 1], held = most > op_pool ? most : op_pool, mark = arena_top;
  Bufs bu = {dev_alloc(4 * held), dev_alloc(4 * held), dev_alloc(4 * held), dev_alloc(4 * ROW),
             dev_alloc(4 * ROW), dev_alloc(4 * ROW), dev_alloc(4 * ROW), dev_alloc(4),
             dev_alloc(4), dev_alloc(sizeof(int) * (most / ROW)), dev_alloc(sizeof(int)), 0};
  *(float *)(stage + ((char *)bu.dloss - arena)) = 1;
  rt_device_put(arena, stage, (char *)bu.dloss - arena, 4);
  for (int t = 0; t < 2; t++) {   // float32, then bf16: the operands in the type
    bu.size = t ? sizeof(rt_bf16) : sizeof(float);
    fill_as(bu.x, held, 1.0f, t);
    fill_as(bu.y, held, 0.5f, t);
    fill_as(bu.w, ROW, 1.0f, t);
    for (int o = 0; o < NOPS; o++)
      for (int z = 0; z < nsizes; z++) {
        OpRun r = {&op_cases[o], &bu, op_sizes[z], 0};
        per_elem[o][z][t] = timed(op_run, &r) / (double)op_sizes[z];
      }
  }
  arena_top = mark;
}

// Copies between the arena and host memory (pinned on a GPU), each way, as offload makes them:
// bytes per second over both.
typedef struct HostCopy {
  long n;
  float *dev, *host;
  bool back;
} HostCopy;

static void host_copy(void *p) {
  HostCopy *h = p;
  if (h->back)
    rt_to_device(h->dev, h->host, h->n, -1);
  else
    rt_to_host(h->host, h->dev, h->n, -1);
}

static double measure_host_bw(void) {
  long mark = arena_top;
  HostCopy h = {sized(1L << 24, 1L << 22, 1L << 16), NULL, NULL, false};
  h.dev = dev_alloc(4 * (size_t)h.n);
  h.host = (float *)rt_device_host_alloc(4 * h.n);
  fill(h.dev, h.n, 1.0f);
  double to = timed(host_copy, &h);
  h.back = true;
  double from = timed(host_copy, &h);
  rt_device_host_free((char *)h.host);
  arena_top = mark;
  return 2.0 * 4 * (double)h.n / (to + from);
}

// AdamW over host memory (offloaded optimizer state): parameters per second.
static double measure_cpu_adam(long n) {
  float *p[4];
  for (int i = 0; i < 4; i++)
    p[i] = (float *)rt_device_host_alloc(4 * n);
  for (long i = 0; i < n; i++)
    p[0][i] = 1.0f, p[1][i] = 0.01f;
  Adam a = {n, p[0], p[1], p[2], p[3]};
  double s = timed(adamw_host, &a);
  for (int i = 0; i < 4; i++)
    rt_device_host_free((char *)p[i]);
  return (double)n / s;
}

int main(int argc, char **argv) {
  ranks = argc > 1 ? atoi(argv[1]) : 1;
  quick = argc < 3 ? 0 : !strcmp(argv[2], "--quick") ? 1 : !strcmp(argv[2], "--tiny") ? 2 : -1;
  if (ranks < 1 || argc > 3 || quick < 0) {
    fprintf(stderr, "usage: [mpirun -np R] calibrate R [--quick | --tiny]\n");
    return 2;
  }
  min_time = quick > 1 ? 0 : quick ? 0.005 : min_time;
  rt_device_init();
  rt_comm_init(&argc, &argv, ranks, "calibrate");
  int me = rt_comm_rank();
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  info = rt_device_info();
  double mem = info.gpu ? (double)info.mem_bytes : (double)info.mem_bytes / ranks;
  // the arena: what the measurements take at most (a GPU's largest GEMMs and kernels, about
  // 2 GiB; --tiny's, 256 MiB), within half the memory; the CPU build's pages are taken only
  // where written
  arena_cap = (long)fmin(mem / 2, (double)sized(1L << 34, 1L << 34, 1L << 28));
  arena = rt_device_alloc(arena_cap, RT_GEMM_WORKSPACE_BYTES + (16L << 20));
  stage = rt_device_stage(arena, arena_cap);

  double rate[ND][ND][ND][2], best[2];
  measure_gemms(rate, best);

  // memory bandwidth, arithmetic, launch
  long vn = sized(1L << 24, 1L << 24, 1L << 18);
  size_t vbytes = 4 * (size_t)vn;
  Vec big_v = {vn, dev_alloc(vbytes), dev_alloc(vbytes), dev_alloc(vbytes)};
  fill(big_v.x, big_v.n, 1.0f);
  fill(big_v.y, big_v.n, 2.0f);
  double bw = 12.0 * (double)big_v.n / timed(add, &big_v);
  double simt = 8.0 * (double)big_v.n / timed(gelu, &big_v);
  Vec small_v = big_v;
  small_v.n = 4096;
  double launch = fmax(0, timed(add, &small_v) - 12.0 * (double)small_v.n / bw);

  // AdamW on 32Mi parameters (--quick: 4Mi): a step's update finds the state it last wrote a
  // step before out of cache; on the device, and over host memory (offload)
  long an = sized(1L << 25, 1L << 22, 1L << 16), mark = arena_top;
  Adam ad = {an, dev_alloc(4 * an), dev_alloc(4 * an), dev_alloc(4 * an), dev_alloc(4 * an)};
  fill(ad.p, ad.n, 1.0f);
  fill(ad.g, ad.n, 0.01f);
  double update_bw = 28.0 * (double)ad.n / timed(adamw, &ad);
  arena_top = mark;
  double cpu_adam = measure_cpu_adam(an);
  double host_bw = measure_host_bw();

  // attention on a grid of sequence lengths and head sizes (causal); efficiency.attn, for a
  // planner without the grid: forward and backward together (2 + 5 GEMMs' FLOPs over both
  // times) at 256 tokens and heads of 64 (--tiny: at the one shape it measures)
  int nat = (int)sized(NATT, NATT - 1, 1), at = nat > 1;
  double att_fwd[NATT][NATT][2], att_bwd[NATT][NATT][2];
  for (int i = 0; i < nat; i++)
    for (int j = 0; j < nat; j++)
      attn_rates(att_t[i], att_hs[j], att_fwd[i][j], att_bwd[i][j]);
  double attn_rate = 7 / (2 / att_fwd[at][at][0] + 5 / att_bwd[at][at][0]);

  double per_elem[NOPS][NSIZES][2];
  measure_ops(per_elem);

  // collectives among the ranks: latency, bus bandwidth by size, overlap
  double alpha = 0, link = bw, gather = 1, scatter = 1, overlap = 0;
  double coll_bw[NCOLL][NCOLL_SIZES];
  if (ranks > 1) {
    Coll c = {1, dev_alloc(sizeof(float) << 24), NULL};
    alpha = timed(allreduce, &c);
    double ring = (double)(ranks - 1) / ranks, t = 0;
    for (int z = 0; z < NCOLL_SIZES; z++) {
      c.n = coll_sizes[z] / 4;
      double bytes = 4.0 * (double)c.n;
      for (int k = 0; k < NCOLL; k++) {
        double tk = timed(coll_fns[k], &c);
        double moved = (k == 0 ? 2 : 1) * ring * bytes;   // per rank, as the planner counts
        coll_bw[k][z] = fmin(1e15, fmax(1e6, moved / fmax(tk - alpha, 1e-9)));
        if (k == 0)
          t = tk;
      }
    }
    // the largest: the link's bandwidth, and all-gathers' and reduce-scatters' shares of it
    // (the planner's rates for sizes a profile without the table prices; across nodes)
    link = coll_bw[0][NCOLL_SIZES - 1];
    gather = fmin(100, coll_bw[1][NCOLL_SIZES - 1] / link);
    scatter = fmin(100, coll_bw[2][NCOLL_SIZES - 1] / link);
    // a kernel as long as the all-reduce beside it: the share of it hidden
    Vec beside = big_v;
    beside.n = (long)fmin((double)big_v.n, t * bw / 12.0);
    double tk = timed(add, &beside);
    c.beside = &beside;
    double both = timed(allreduce_beside, &c);
    overlap = clamp01((t + tk - both) / fmin(t, tk));
  }

  if (me == 0) {
    char name[160];
    device_name(name, sizeof name);
    if (info.gpu)
      printf("{\n"
             "  \"calibrated\": \"mtc calibrate: %d rank%s, a GPU each (%ld SMs)%s\",\n",
             ranks, ranks > 1 ? "s" : "", info.units, quick ? " (quick)" : "");
    else
      printf("{\n"
             "  \"calibrated\": \"mtc calibrate: %d rank%s of %d thread%s on %ld core%s%s\",\n",
             ranks, ranks > 1 ? "s" : "", threads, threads > 1 ? "s" : "", info.units,
             info.units > 1 ? "s" : "", quick ? " (quick)" : "");
    printf("  \"groups\": [{\n"
           "    \"name\": \"%.31s\",\n", name);
    if (info.gpu)   // the built-in entry's links between GPUs and nodes, unless measured here
      printf("    \"gpu\": \"%s\", \"count\": %d, \"gpus_per_node\": %d, \"sms\": %ld,\n",
             name, ranks, ranks, info.units);
    else
      printf("    \"gpu\": \"CPU\", \"count\": %d, \"gpus_per_node\": %d,\n"
             "    \"cores\": %ld, \"threads\": %d, \"ranks\": %d,\n",
             ranks, ranks, info.units, threads, ranks);
    printf("    \"mem\": %.0f,%s\n"
           "    \"flops_fp32\": %.4g, \"flops_bf16\": %.4g, \"hbm_bw\": %.4g,\n"
           "    \"host_bw\": %.4g, \"cpu_adam\": %.4g,\n",
           mem, info.gpu ? "" : " \"host_mem\": 0,", best[0], best[1], bw, host_bw, cpu_adam);
    // the links: one machine's ranks' are all there is; ranks of GPUs measured theirs (the
    // whole latency among them, no ring steps beyond it); one GPU keeps the entry's
    if (!info.gpu || ranks > 1)
      printf("    \"intra_bw\": %.4g,\n", link);
    if (!info.gpu)
      printf("    \"inter_bw\": %.4g,\n", link);
    printf("    \"efficiency\": {\"gemm\": 1, \"attn\": %.4g, \"simt\": %.4g, \"mem\": 1, "
           "\"update\": %.4g, \"host\": 1, \"launch\": %.4g",
           attn_rate / best[0], simt / best[0], update_bw / bw, launch);
    if (!info.gpu || ranks > 1)
      printf(",\n                   \"gather\": %.4g, \"scatter\": %.4g, \"alpha_intra\": %.4g, "
             "\"overlap\": %.3g",
             gather, scatter, alpha, overlap);
    if (!info.gpu)
      printf(", \"link\": 1, \"alpha_inter\": %.4g", alpha);
    else if (ranks > 1)
      printf(", \"hop_intra\": 0");
    printf("},\n");
    if (ranks > 1) {
      printf("    \"collectives\": {\n");
      for (int k = 0; k < NCOLL; k++) {
        printf("      \"%s\": [", coll_keys[k]);
        for (int z = 0; z < NCOLL_SIZES; z++)
          printf("%s[%ld, %.4g]", z ? ", " : "", coll_sizes[z], coll_bw[k][z]);
        printf("]%s\n", k + 1 < NCOLL ? "," : "");
      }
      printf("    },\n");
    }
    int nsizes = op_nsizes();
    printf("    \"ops\": {\n");
    for (int o = 0; o < NOPS; o++) {
      printf("      \"%s\": [", op_cases[o].op);
      for (int z = 0; z < nsizes; z++)
        printf("%s[%ld, %.4g, %.4g]", z ? ", " : "", op_sizes[z], per_elem[o][z][0],
               per_elem[o][z][1]);
      printf("]%s\n", o + 1 < NOPS ? "," : "");
    }
    printf("    },\n");
    printf("    \"attention\": [\n");
    for (int i = 0; i < nat; i++)
      for (int j = 0; j < nat; j++)
        printf("      [%ld, %ld, %.4g, %.4g, %.4g, %.4g]%s\n", att_t[i], att_hs[j],
               att_fwd[i][j][0], att_bwd[i][j][0], att_fwd[i][j][1], att_bwd[i][j][1],
               i == nat - 1 && j == nat - 1 ? "" : ",");
    printf("    ],\n");
    printf("    \"gemm\": [\n");
    int nd = gemm_dims();
    for (int i = 0; i < nd; i++)
      for (int j = 0; j < nd; j++)
        for (int l = 0; l < nd; l++)
          printf("      [%ld, %ld, %ld, %.4g, %.4g]%s\n", dims[i], dims[j], dims[l],
                 rate[i][j][l][0], rate[i][j][l][1],
                 i == nd - 1 && j == nd - 1 && l == nd - 1 ? "" : ",");
    printf("    ]\n  }]\n}\n");
  }
  rt_device_free_stage(stage, arena, arena_cap);
  rt_device_free(arena, arena_cap);
  rt_comm_finalize();
  return 0;
}
