// Host code of every build (CPU and CUDA): the update of optimizer state
// offloaded to host memory (rt_adamw_host, declared in kernels.def), the
// number of host threads it uses, the casts of host arrays (rt_cast_host:
// bf16 offload's working copies from the host's masters), the
// accumulation of offloaded gradients (rt_accumulate_host) and the scans of
// what the host holds (rt_norm2sq_host, rt_find_nonfinite_host).
#define _POSIX_C_SOURCE 200809L  // sysconf, pthreads under -std=c11
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "adamw_cpu.h"
#include "scan_cpu.h"
#include "dist.h"
#include "kernels.h"

// The host's passes (AdamW, the scans below) run on POSIX threads rather than
// OpenMP: in a GPU build OpenMP is not the device's, and the host update runs
// beside the device's work. Each thread takes a contiguous run of the pass's
// parts (AdamW: 16-element blocks).

// Below this many elements per thread a thread costs more than it saves.
#define HOST_MIN_PER_THREAD (1L << 20)
#define HOST_MAX_THREADS 256

typedef struct HostChunk {
  float *p, *m, *v;
  const void *g;  // float32, or (g16) bf16
  bool g16;
  long n, b0, b1;
  const AdamwStep *s;
} HostChunk;

// Blocks [b0, b1) in runs of ADAMW_GRAD_RUN (adamw_run: adamw_blocks' bits).
static void *adamw_chunk(void *arg) {
  const HostChunk *c = arg;
  long end = c->b1 * 16 < c->n ? c->b1 * 16 : c->n;
  for (long i0 = c->b0 * 16; i0 < end; i0 += ADAMW_GRAD_RUN) {
    long i1 = i0 + ADAMW_GRAD_RUN < end ? i0 + ADAMW_GRAD_RUN : end;
    adamw_run(c->p, c->g, c->g16, c->m, c->v, i0, i1, c->s);
  }
  return NULL;
}

int rt_host_threads(void) {
  const char *env = getenv("MTC_HOST_THREADS");
  long n = env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > HOST_MAX_THREADS ? HOST_MAX_THREADS : (int)n;
}

// The threads a pass over n elements in nparts parts takes: `threads` (0: rt_host_threads()),
// at most one per HOST_MIN_PER_THREAD elements and one per part.
static long host_nthreads(long n, long nparts, int threads) {
  long most = n / HOST_MIN_PER_THREAD > 1 ? n / HOST_MIN_PER_THREAD : 1;
  long nt = threads > 0 ? threads : rt_host_threads();
  nt = nt > most ? most : nt > HOST_MAX_THREADS ? HOST_MAX_THREADS : nt;
  return nt > nparts ? (nparts > 0 ? nparts : 1) : nt;
}

// Runs fn on each of nt items (`size` bytes apart), the first on the caller's thread and the
// others on threads of their own; an item whose thread cannot start runs on the caller's too.
static void on_threads(void *(*fn)(void *), void *items, size_t size, long nt) {
  pthread_t tid[HOST_MAX_THREADS];
  bool started[HOST_MAX_THREADS] = {false};
  char *at = items;
  for (long t = 1; t < nt; t++)
    started[t] = pthread_create(&tid[t], NULL, fn, at + (size_t)t * size) == 0;
  fn(at);
  for (long t = 1; t < nt; t++) {
    if (started[t]) pthread_join(tid[t], NULL);
    else fn(at + (size_t)t * size);
  }
}

static void adamw_host(float *p, const void *g, bool g16, float *m, float *v, long n, float lr,
                       float beta1, float beta2, float eps, float wd, int t, float gscale,
                       long decay_n, int threads) {
  AdamwStep s = adamw_step(lr, beta1, beta2, eps, wd, t, gscale, decay_n);
  long nblocks = (n + 15) / 16, nt = host_nthreads(n, nblocks, threads);
  HostChunk chunk[HOST_MAX_THREADS];
  for (long k = 0; k < nt; k++)
    chunk[k] = (HostChunk){.p = p, .g = g, .g16 = g16, .m = m, .v = v, .n = n,
                           .b0 = nblocks * k / nt, .b1 = nblocks * (k + 1) / nt, .s = &s};
  on_threads(adamw_chunk, chunk, sizeof *chunk, nt);
}

// rt_sgd's arithmetic (sgd_run), on the caller's thread.
static void sgd_host(float *p, const void *g, bool g16, long n, float lr, float wd, float gscale,
                     long decay_n) {
  for (long i0 = 0; i0 < n; i0 += ADAMW_GRAD_RUN)
    sgd_run(p, g, g16, i0, i0 + ADAMW_GRAD_RUN < n ? i0 + ADAMW_GRAD_RUN : n, lr, wd, gscale,
            decay_n);
}

// The element types' loads and stores, widened to float32 as read and rounded to nearest even
// as written (as the device kernels do).
static inline float host_ld_F32(float x) { return x; }
static inline float host_ld_BF16(rt_bf16 x) { return rt_bf16_to_f32(x); }
static inline float host_st_F32(float x) { return x; }
static inline rt_bf16 host_st_BF16(float x) { return rt_f32_to_bf16(x); }

// The typed host kernels in each element type T of the gradient (RT_T_VARIANTS): AdamW and
// SGD over float32 masters, and the accumulation of the micro-batches (as rt_accumulate: the
// first writes, the others add).
#define HOST_KT(suffix, T, ...)                                                               \
  void rt_adamw_host##suffix(float *p, const RT_CTYPE_##T *g, float *m, float *v, long n,     \
                             float lr, float beta1, float beta2, float eps, float wd, int t,  \
                             float gscale, long decay_n, int threads) {                       \
    adamw_host(p, g, sizeof(RT_CTYPE_##T) == 2, m, v, n, lr, beta1, beta2, eps, wd, t, gscale,  \
               decay_n, threads);                                                             \
  }                                                                                           \
  void rt_sgd_host##suffix(float *p, const RT_CTYPE_##T *g, long n, float lr, float wd,       \
                           float gscale, long decay_n) {                                      \
    sgd_host(p, g, sizeof(RT_CTYPE_##T) == 2, n, lr, wd, gscale, decay_n);                      \
  }                                                                                           \
  void rt_accumulate_host##suffix(RT_CTYPE_##T *acc, const RT_CTYPE_##T *x, long n,          \
                                  float scale) {                                              \
    bool first = rt_dist.micro == 0;                                                          \
    for (long i = 0; i < n; i++)                                                              \
      acc[i] = host_st_##T((first ? 0.0f : host_ld_##T(acc[i])) + scale * host_ld_##T(x[i])); \
  }
RT_T_VARIANTS(HOST_KT, _)
#undef HOST_KT

// rt_cast_host in each pair of element types (RT_TU_VARIANTS), as rt_cast does.
#define CAST_HOST(suffix, T, U, ...)                                                      \
  void rt_cast_host##suffix(RT_CTYPE_##U *out, const RT_CTYPE_##T *x, long n) {           \
    for (long i = 0; i < n; i++) out[i] = host_st_##U(host_ld_##T(x[i]));                 \
  }
RT_TU_VARIANTS(CAST_HOST, _)
#undef CAST_HOST

// ---- scans of host arrays, on the host's threads ----

// Parts [0, n) of a scan, each thread a contiguous run of them (the caller's the first).
typedef struct HostScan {
  void (*part)(struct HostScan *s, long k);
  const void *x;  // float32, or (bf16) bf16
  bool bf16;
  long n, k0, k1;
  double *sums;   // rt_norm2sq_host: each chunk's
  long first;     // rt_find_nonfinite_host: the first non-finite element of the run, or n
} HostScan;

static void *scan_run(void *arg) {
  HostScan *s = arg;
  for (long k = s->k0; k < s->k1; k++)
    s->part(s, k);
  return NULL;
}

// Runs the parts on the host's threads, runs[t] each's; returns how many.
static long scan_parts(HostScan *proto, long nparts, HostScan *runs) {
  long nt = host_nthreads(proto->n, nparts, 0);
  for (long t = 0; t < nt; t++) {
    runs[t] = *proto;
    runs[t].k0 = nparts * t / nt, runs[t].k1 = nparts * (t + 1) / nt;
  }
  on_threads(scan_run, runs, sizeof *runs, nt);
  return nt;
}

static void norm_part(HostScan *s, long k) {
  s->sums[k] = s->bf16 ? rt_norm2sq_chunk_bf16(s->x, s->n, (int)k)
                       : rt_norm2sq_chunk(s->x, s->n, (int)k);
}

static double norm2sq_host(const void *x, bool bf16, long n) {
  double sums[RT_NORM2_CHUNKS];
  HostScan proto = {.part = norm_part, .x = x, .bf16 = bf16, .n = n, .sums = sums},
           runs[HOST_MAX_THREADS];
  scan_parts(&proto, RT_NORM2_CHUNKS, runs);
  double s = 0.0;
  for (int ch = 0; ch < RT_NORM2_CHUNKS; ch++) s += sums[ch];
  return s;
}

static void finite_part(HostScan *s, long b) {
  if (s->first == s->n)   // (a run stops at its first)
    s->first = s->bf16 ? rt_block_nonfinite_bf16(s->x, s->n, b)
                       : rt_block_nonfinite(s->x, s->n, b);
}

static long find_nonfinite_host(const void *x, bool bf16, long n) {
  HostScan proto = {.part = finite_part, .x = x, .bf16 = bf16, .n = n, .first = n},
           runs[HOST_MAX_THREADS];
  long nt = scan_parts(&proto, (n + RT_FINITE_BLOCK - 1) / RT_FINITE_BLOCK, runs), first = n;
  for (long t = 0; t < nt; t++)
    first = runs[t].first < first ? runs[t].first : first;
  return first;
}

double rt_norm2sq_host(const float *x, long n) { return norm2sq_host(x, false, n); }
double rt_norm2sq_host_bf16(const rt_bf16 *x, long n) { return norm2sq_host(x, true, n); }
long rt_find_nonfinite_host(const float *x, long n) { return find_nonfinite_host(x, false, n); }
long rt_find_nonfinite_host_bf16(const rt_bf16 *x, long n) {
  return find_nonfinite_host(x, true, n);
}
