// The CUDA emulation (cuda_emu.h says what it models and checks): the
// scheduler that runs a launch's threads as fibers, and the CUDA runtime and
// cuBLAS calls of runtime/kernels_cuda.cu over host memory.
#include "cuda_emu.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

// ASan must be told when the stack changes (or it reports false stack
// errors): the scheduler's stack to a fiber's and back.
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif

namespace emu {

dim3 grid_dim, block_dim;
uint3 block_idx, thread_idx;

#define STACK_BYTES (32 * 1024)  // a thread's stack (the kernels take under 4 KiB)
#define MAX_THREADS 1024         // a block's
#define MAX_SMEM (227 * 1024)    // dynamic shared memory a block may have (H100)
#define GUARD 256                // bytes after the dynamic shared memory, checked after each block

enum State {
  RUN,   // runs (or is ready to) until it waits or exits
  SYNC,  // waits at __syncthreads()
  WARP,  // waits at a warp op
  DONE,  // has exited
};

// A thread of the running block: a fiber, and where it waits.
// A cp.async in flight: its group is the number of commits before it.
struct Copy {
  void *dst;
  const void *src;
  int bytes;
  long group;
  bool made;  // landed already (the orders that make copies at once), not yet waited for
};

struct Thread {
  ucontext_t ctx;
  char *stack;
  uint3 idx;
  State state;
  const char *file;  // the barrier or warp op it waits at
  int line;
  WarpOp op;
  unsigned mask;
  int arg, width;
  uint64_t val, res;  // its value for the warp op, and what it reads
  void *fake_stack;   // ASan's, while it waits
  Copy copies[64];    // its cp.async copies in flight, and how many
  int ncopies;
  long commits;       // its cp.async.commit_groups so far
};

static const char *const op_names[] = {"__shfl_sync",     "__shfl_up_sync", "__shfl_down_sync",
                                       "__shfl_xor_sync", "__ballot_sync",  "__any_sync",
                                       "__all_sync",      "__syncwarp",     "mma.sync",
                                       "ldmatrix"};

static const char *kernel;  // the running launch's name
static Thread threads[MAX_THREADS];
static int nthreads;               // of the running block
static Thread *cur;                // the running thread
static void (*thread_fn)(void *);  // what each thread runs
static void *thread_arg;
static char *smem;  // the launch's dynamic shared memory, GUARD bytes after it
static size_t smem_bytes;
static ucontext_t sched, proto;  // the scheduler's context; one to copy for each fiber
#ifdef EMU_ASAN
static const void *sched_stack;  // the scheduler's stack
static size_t sched_stack_bytes;
#endif

// ---- errors

// Reports what went wrong in the running block, and aborts.
[[noreturn]] static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
  fprintf(stderr, "cuda_emu: %s, block (%u,%u,%u): ", kernel, block_idx.x, block_idx.y,
          block_idx.z);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stdout);
  abort();
}

// "thread (x,y,z)", and where a thread waits: "__syncthreads at file:line"
struct Text {
  char s[160];
};
static Text name(const Thread &t) {
  Text x;
  snprintf(x.s, sizeof x.s, "thread (%u,%u,%u)", t.idx.x, t.idx.y, t.idx.z);
  return x;
}
static Text where(const Thread &t) {
  Text x;
  if (t.state == DONE) {  // (its file and line are a previous wait's, or none)
    snprintf(x.s, sizeof x.s, "has exited");
    return x;
  }
  const char *base = strrchr(t.file, '/') ? strrchr(t.file, '/') + 1 : t.file;
  if (t.state == SYNC)
    snprintf(x.s, sizeof x.s, "waits at __syncthreads at %s:%d", base, t.line);
  else
    snprintf(x.s, sizeof x.s, "waits at %s(mask 0x%08x) at %s:%d", op_names[t.op], t.mask, base,
             t.line);
  return x;
}

// ---- barriers: where the threads wait, and who may go on

static bool same_place(const Thread &a, const Thread &b) {
  return a.state == b.state && a.line == b.line &&
         (a.file == b.file || strcmp(a.file, b.file) == 0) &&
         (a.state != WARP || (a.op == b.op && a.mask == b.mask));
}

// Checks that every lane of the warp op thread i waits at is there too.
static void check_warp(int i) {
  const Thread &t = threads[i];
  int lane = i % 32, base = i - lane;
  if (t.width < 1 || t.width > 32 || (t.width & (t.width - 1)))
    fail("%s %s with width %d (not a power of 2 up to 32)", name(t).s, where(t).s, t.width);
  if (!(t.mask >> lane & 1))
    fail("%s %s, which leaves out its own lane %d", name(t).s, where(t).s, lane);
  for (int l = 0; l < 32; l++) {
    if (!(t.mask >> l & 1)) continue;
    if (base + l >= nthreads)
      fail("%s %s, and lane %d of the mask is not a thread of the block (%d threads)", name(t).s,
           where(t).s, l, nthreads);
    const Thread &u = threads[base + l];
    if (!same_place(t, u))
      fail("%s %s, and lane %d of its mask, %s, %s: %s", name(t).s, where(t).s, l, name(u).s,
           where(u).s, u.state == SYNC ? "deadlock" : "divergent warp op");
  }
}

// What thread i (waiting at a warp op whose every lane has arrived) reads.
static uint64_t warp_result(int i) {
  const Thread &t = threads[i];
  int lane = i % 32, base = i - lane, w = t.width, seg = lane & ~(w - 1), src = lane;
  switch (t.op) {
    case SHFL: src = seg + (t.arg & (w - 1)); break;
    case SHFL_UP: src = lane - t.arg >= seg ? lane - t.arg : lane; break;
    case SHFL_DOWN: src = lane + t.arg < seg + w ? lane + t.arg : lane; break;
    case SHFL_XOR: src = (lane ^ t.arg) < seg + w ? lane ^ t.arg : lane; break;
    case SYNCWARP:
    case MMA:
    case LDMATRIX: return 0;  // a barrier of the lanes (the others write their results)
    default: {  // votes
      unsigned ballot = 0;
      for (int l = 0; l < 32; l++)
        if ((t.mask >> l & 1) && threads[base + l].val) ballot |= 1u << l;
      return t.op == BALLOT ? ballot : t.op == ANY ? ballot != 0 : ballot == t.mask;
    }
  }
  if (!(t.mask >> src & 1))
    fail("%s %s, which reads lane %d, not in its mask", name(t).s, where(t).s, src);
  return threads[base + src].val;
}

// ---- mma.sync and ldmatrix: the warp's lanes wait at one, each with a pointer
// to its operands (val); the scheduler computes every lane's share at once.

struct MmaArgs {
  float *d;
  const uint32_t *a, *b;
};
struct LdmatrixArgs {
  uint32_t *r;
  const void *p;
  bool trans;
};

// the bf16 in the low (hi = 0) or high half of a register, as a float
static float bf16_half(uint32_t r, int hi) {
  uint32_t bits = (hi ? r >> 16 : r & 0xffffu) << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

// The mma.sync of warp lo..lo+31 (runtime/mma_cuda.cuh's layout).
static void mma_warp(int lo) {
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; l++) {
    const MmaArgs *m = (const MmaArgs *)threads[lo + l].val;
    int g = l / 4, q = l % 4;
    for (int h = 0; h < 2; h++) {
      for (int r = 0; r < 4; r++)
        A[g + 8 * (r % 2)][2 * q + h + 8 * (r / 2)] = bf16_half(m->a[r], h);
      for (int r = 0; r < 2; r++) B[2 * q + h + 8 * r][g] = bf16_half(m->b[r], h);
    }
  }
  for (int l = 0; l < 32; l++) {  // every operand read: d may be any lane's a or b
    const MmaArgs *m = (const MmaArgs *)threads[lo + l].val;
    for (int e = 0; e < 4; e++) {
      int row = l / 4 + 8 * (e / 2), col = 2 * (l % 4) + e % 2;
      float s = m->d[e];
      for (int k = 0; k < 16; k++) s += A[row][k] * B[k][col];
      m->d[e] = s;
    }
  }
}

// The ldmatrix .x4 of warp lo..lo+31.
static void ldmatrix_warp(int lo) {
  const uint16_t *rows[4][8];
  for (int l = 0; l < 32; l++) {
    const Thread &t = threads[lo + l];
    const char *p = (const char *)((const LdmatrixArgs *)t.val)->p;
    if ((uintptr_t)p % 16 != 0 || p < smem || p + 16 > smem + smem_bytes)
      fail("%s %s: its row address %p is not 16-byte aligned dynamic shared memory", name(t).s,
           where(t).s, (const void *)p);
    rows[l / 8][l % 8] = (const uint16_t *)p;
  }
  for (int l = 0; l < 32; l++) {
    const LdmatrixArgs *m = (const LdmatrixArgs *)threads[lo + l].val;
    int g = l / 4, q = l % 4;
    for (int j = 0; j < 4; j++) {
      uint32_t x = m->trans ? rows[j][2 * q][g] : rows[j][g][2 * q];
      uint32_t y = m->trans ? rows[j][2 * q + 1][g] : rows[j][g][2 * q + 1];
      m->r[j] = x | y << 16;
    }
  }
}

// No thread of warp w runs: lets its warp ops go on (every lane of their masks
// must be there), and says whether there were any.
static bool release_warp(int w) {
  int lo = 32 * w, hi = lo + 32 < nthreads ? lo + 32 : nthreads;
  unsigned checked = 0;  // lanes whose warp op is known to be complete
  bool any = false;
  for (int i = lo; i < hi; i++)
    if (threads[i].state == WARP) {
      if (!(checked >> (i - lo) & 1)) {
        check_warp(i);
        checked |= threads[i].mask;
        const Thread &t = threads[i];
        if ((t.op == MMA || t.op == LDMATRIX) && t.mask != 0xffffffffu)
          fail("%s %s: the instruction needs every lane of the warp", name(t).s, where(t).s);
        if (t.op == MMA) mma_warp(lo);
        if (t.op == LDMATRIX) ldmatrix_warp(lo);
      }
      threads[i].res = warp_result(i);
      any = true;
    }
  for (int i = lo; i < hi; i++)  // after every lane has read the others' values
    if (threads[i].state == WARP) threads[i].state = RUN;
  return any;
}

// No thread runs: the warp ops go on, else the block's barrier, when every
// thread waits at the same one.
static void release(void) {
  bool warp = false;
  for (int w = 0; 32 * w < nthreads; w++) warp |= release_warp(w);
  if (warp) return;
  const Thread *first = NULL;
  for (int i = 0; i < nthreads && !first; i++)
    if (threads[i].state == SYNC) first = &threads[i];
  for (int i = 0; i < nthreads; i++)
    if (!same_place(*first, threads[i]))
      fail("divergent __syncthreads: %s %s, %s %s", name(*first).s, where(*first).s,
           name(threads[i]).s, where(threads[i]).s);
  for (int i = 0; i < nthreads; i++) threads[i].state = RUN;
}

// ---- the schedule: from one barrier to the next, the threads take turns in
// one of four orders, the next block the next order:
//   0, 1: rounds; each thread that can runs one turn, in index order (1: in
//         reverse), until every thread waits; then release() lets some go on;
//   2, 3: warp by warp (3: the last warp first, lanes in reverse too), each
//         warp until it waits at __syncthreads or has exited, its warp ops
//         going on as soon as their lanes are there.
// Rounds give a missing barrier between the threads of a warp a chance to
// show, warps that run ahead one between warps.

static int order;     // the block's order
static int turn;      // 0, 1: turns taken this round; 2, 3: warps done
static long nblocks;  // blocks run so far

// The next thread to run, or NULL when they all wait or have exited.
static Thread *next_ready(void) {
  if (order < 2) {
    while (++turn < nthreads) {
      Thread *t = &threads[order ? nthreads - 1 - turn : turn];
      if (t->state == RUN) return t;
    }
    return NULL;
  }
  for (int nwarps = (nthreads + 31) / 32; turn < nwarps;) {
    int w = order == 3 ? nwarps - 1 - turn : turn;
    for (int l = 0; l < 32; l++) {
      int i = 32 * w + (order == 3 ? 31 - l : l);
      if (i < nthreads && threads[i].state == RUN) return &threads[i];
    }
    if (!release_warp(w)) turn++;  // the warp waits at __syncthreads or has exited
  }
  return NULL;
}

// ---- switching: each thread switches straight to the next (one swapcontext
// a turn); the last before all wait, back to the scheduler.

// Leaves the running thread, or the scheduler (from NULL), for thread `to`, or
// for the scheduler (to NULL); a thread that has exited never comes back.
static void switch_to(Thread *from, Thread *to) {
  ucontext_t *save = from ? &from->ctx : &sched;
  cur = to;
  if (to) thread_idx = to->idx;
#ifdef EMU_ASAN
  void *fake, **save_fake = !from ? &fake : from->state == DONE ? NULL : &from->fake_stack;
  if (to)
    __sanitizer_start_switch_fiber(save_fake, to->stack, STACK_BYTES);
  else
    __sanitizer_start_switch_fiber(save_fake, sched_stack, sched_stack_bytes);
#endif
  swapcontext(save, to ? &to->ctx : &sched);
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(from ? from->fake_stack : fake, NULL, NULL);
#endif
}

// The running thread waits (or has exited): the next one runs.
static void leave(State s) {
  cur->state = s;
  switch_to(cur, next_ready());
}

// cp.async: copy c lands.
static void make_copy(Copy *c) {
  if (!c->made) {
    if (c->bytes)
      memcpy(c->dst, c->src, 16);
    else
      memset(c->dst, 0, 16);
  }
  c->made = true;
}

// cp.async.wait_group: the copies of thread t in the groups before `upto` land and are done.
static void land_copies(Thread *t, long upto) {
  int keep = 0;
  for (int i = 0; i < t->ncopies; i++) {
    Copy c = t->copies[i];
    if (c.group < upto)
      make_copy(&c);
    else
      t->copies[keep++] = c;
  }
  t->ncopies = keep;
}

void cp_async(void *dst, const void *src, int bytes, const char *file, int line) {
  Thread *t = cur;
  if ((uintptr_t)dst % 16 || (char *)dst < smem || (char *)dst + 16 > smem + smem_bytes ||
      (bytes && (uintptr_t)src % 16) || (bytes != 0 && bytes != 16))
    fail("thread (%u,%u,%u): cp.async at %s:%d of %d bytes to %p from %p: not 16 aligned bytes "
         "into the dynamic shared memory", t->idx.x, t->idx.y, t->idx.z, file, line, bytes, dst,
         src);
  if (t->ncopies == (int)(sizeof t->copies / sizeof t->copies[0]))
    fail("thread (%u,%u,%u): more than %d cp.async copies in flight", t->idx.x, t->idx.y,
         t->idx.z, t->ncopies);
  Copy *c = &t->copies[t->ncopies++];
  *c = Copy{dst, src, bytes, t->commits, false};
  if (order % 2 == 0)  // in half the orders a copy lands at once: an overwrite of a tile that
    make_copy(c);      // others still read shows; in the others at the wait
}

void cp_async_commit(void) { cur->commits++; }

void cp_async_wait(int groups) { land_copies(cur, cur->commits - groups); }

static void thread_main(void) {
#ifdef EMU_ASAN
  // the first switch of all comes from the scheduler: its stack
  const void *from;
  size_t from_bytes;
  __sanitizer_finish_switch_fiber(NULL, &from, &from_bytes);
  if (!sched_stack) sched_stack = from, sched_stack_bytes = from_bytes;
#endif
  thread_fn(thread_arg);
  if (cur->ncopies)
    fail("thread (%u,%u,%u) exited with %d cp.async copies it did not wait for", cur->idx.x,
         cur->idx.y, cur->idx.z, cur->ncopies);
  leave(DONE);
}

void syncthreads(const char *file, int line) {
  if (!cur) {
    fprintf(stderr, "cuda_emu: __syncthreads outside a kernel (%s:%d)\n", file, line);
    abort();
  }
  cur->file = file;
  cur->line = line;
  leave(SYNC);
}

uint64_t warp_op(WarpOp op, unsigned mask, uint64_t v, int arg, int width, const char *file,
                 int line) {
  if (!cur) {
    fprintf(stderr, "cuda_emu: %s outside a kernel (%s:%d)\n", op_names[op], file, line);
    abort();
  }
  Thread *t = cur;
  t->op = op;
  t->mask = mask;
  t->val = v;
  t->arg = arg;
  t->width = width;
  t->file = file;
  t->line = line;
  leave(WARP);
  return t->res;
}

void mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const char *file, int line) {
  MmaArgs m = {d, a, b};
  warp_op(MMA, 0xffffffffu, (uint64_t)(uintptr_t)&m, 0, 32, file, line);
}

void ldmatrix_x4(uint32_t r[4], const void *p, bool trans, const char *file, int line) {
  LdmatrixArgs m = {r, p, trans};
  warp_op(LDMATRIX, 0xffffffffu, (uint64_t)(uintptr_t)&m, 0, 32, file, line);
}

void *dynamic_shared(void) { return smem; }

// ---- launches

static void run_block(void) {
  int bx = (int)block_dim.x, by = (int)block_dim.y;
  memset(smem, 0xff, smem_bytes);  // NaN as floats: reads before writes show
  memset(smem + smem_bytes, 0xa5, GUARD);
#ifdef EMU_ASAN
  ASAN_POISON_MEMORY_REGION(smem + smem_bytes, GUARD);
#endif
  for (int i = 0; i < nthreads; i++) {
    Thread &t = threads[i];
    t.idx = make_uint3((unsigned)(i % bx), (unsigned)(i / bx % by), (unsigned)(i / (bx * by)));
    t.state = RUN;
    t.ncopies = 0;
    t.commits = 0;
    t.ctx = proto;
    t.ctx.uc_stack.ss_sp = t.stack;
    t.ctx.uc_stack.ss_size = STACK_BYTES;
    t.ctx.uc_link = NULL;
    makecontext(&t.ctx, thread_main, 0);
  }
  order = (int)(nblocks++ % 4);
  for (;;) {
    turn = order < 2 ? -1 : 0;
    Thread *first = next_ready();
    if (first) switch_to(NULL, first);
    int done = 0;
    for (int i = 0; i < nthreads; i++) done += threads[i].state == DONE;
    if (done == nthreads) break;
    release();
  }
#ifdef EMU_ASAN
  ASAN_UNPOISON_MEMORY_REGION(smem + smem_bytes, GUARD);
#endif
  size_t past = 0;  // bytes up to the last one written in the guard
  for (size_t i = 0; i < GUARD; i++)
    if ((unsigned char)smem[smem_bytes + i] != 0xa5) past = i + 1;
  if (past) fail("wrote %zu bytes past its %zu bytes of dynamic shared memory", past, smem_bytes);
}

void run(const char *name, dim3 grid, dim3 block, size_t smem_size, void (*fn)(void *), void *arg) {
  kernel = name;
  block_idx = make_uint3(0, 0, 0);
  long n = (long)block.x * block.y * block.z;
  if (n < 1 || n > MAX_THREADS || block.z > 64 || grid.x < 1 || grid.y < 1 || grid.z < 1 ||
      grid.y > 65535 || grid.z > 65535 || smem_size > MAX_SMEM)
    fail("(%u,%u,%u) blocks of (%u,%u,%u) threads, %zu bytes of shared memory: past the limits",
         grid.x, grid.y, grid.z, block.x, block.y, block.z, smem_size);
  static bool started;
  if (!started) {  // once: the stacks, and a context to copy
    for (Thread &t : threads)
      if (!(t.stack = (char *)malloc(STACK_BYTES))) fail("out of memory");
    getcontext(&proto);
    started = true;
  }
  grid_dim = grid;
  block_dim = block;
  nthreads = (int)n;
  thread_fn = fn;
  thread_arg = arg;
  smem_bytes = smem_size;
  // aligned as the device's (RT_DYNAMIC_SHARED: 128 bytes)
  smem = (char *)aligned_alloc(128, (smem_bytes + GUARD + 127) / 128 * 128);
  if (!smem) fail("out of memory");
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) {
        block_idx = make_uint3(x, y, z);
        run_block();
      }
  free(smem);
  smem = NULL;
}

}  // namespace emu

// ---- the CUDA runtime: host memory, one device; kernels and the default stream's work run at
// once, a created stream's copies when something waits for them

// A created stream queues its copies; an event recorded on it marks how many of them it waits
// for. Waiting for the event (another stream or the host) makes those copies then, so that a
// copy read before its wait, or its source written before it, shows as it would on a GPU.
struct EmuCopy {
  void *dst;
  const void *src;
  size_t bytes;
};
struct CUstream_st {
  EmuCopy *queue;
  size_t made, queued, cap;  // copies made so far, queued in all
};
struct CUevent_st {
  CUstream_st *stream;  // NULL: nothing to wait for
  size_t upto;          // the stream's copies before it
};

static void stream_make(CUstream_st *s, size_t upto) {
  for (; s->made < upto; s->made++) {
    EmuCopy *c = &s->queue[s->made % s->cap];
    memcpy(c->dst, c->src, c->bytes);
  }
}

static void stream_push(CUstream_st *s, void *dst, const void *src, size_t bytes) {
  if (s->queued - s->made == s->cap) {  // full: grow, keeping the ring's order
    size_t cap = s->cap ? 2 * s->cap : 16;
    EmuCopy *q = (EmuCopy *)malloc(cap * sizeof *q);
    if (!q) emu::fail("out of memory");
    for (size_t i = s->made; i < s->queued; i++) q[i % cap] = s->queue[i % s->cap];
    free(s->queue);
    s->queue = q, s->cap = cap;
  }
  s->queue[s->queued++ % s->cap] = EmuCopy{dst, src, bytes};
}

extern "C" {

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
  *s = (cudaStream_t)calloc(1, sizeof(CUstream_st));
  return *s ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s) stream_make(s, s->queued), free(s->queue), free(s);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
  *e = (cudaEvent_t)calloc(1, sizeof(CUevent_st));
  return *e ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  free(e);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  e->stream = s;
  e->upto = s ? s->queued : 0;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (e->stream) stream_make(e->stream, e->upto);
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t e, unsigned) {
  return cudaEventSynchronize(e);
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
  *p = malloc(bytes ? bytes : 1);  // the exact size: ASan sees a kernel read past it
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void *p) {
  free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind) {
  memcpy(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind,
                            cudaStream_t s) {
  if (s)
    stream_push(s, dst, src, bytes);
  else
    memcpy(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind, cudaStream_t) {
  if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
  for (size_t r = 0; r < height; r++)
    memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
  return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t bytes) {
  memset(p, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t) {
  memset(p, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (s) stream_make(s, s->queued);
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }

const char *cudaGetErrorString(cudaError_t err) {
  static char s[64];
  snprintf(s, sizeof s, "emulated CUDA error %d", (int)err);
  return s;
}

cudaError_t cudaGetDeviceCount(int *count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t cudaGetDevice(int *device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int) {
  switch (attr) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = MAX_SMEM; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;  // an H100's
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t cudaFuncSetAttribute(const void *, enum cudaFuncAttribute, int) { return cudaSuccess; }

// The device a program of the GPU build sees (device_cuda_emu.cc): an H100 as CUDA names it,
// its memory (what it allocates is host memory, taken as it is touched), with the L2 and SMs
// of a small one, so that what it sizes by them stays small.
static const size_t EMU_MEM = (size_t)80 << 30;

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "NVIDIA H100 80GB HBM3 (emulated)");
  prop->totalGlobalMem = EMU_MEM;
  prop->l2CacheSize = 1 << 20;
  prop->multiProcessorCount = 2;
  prop->major = 9;
  return cudaSuccess;
}

// No accounting: every allocation is its own malloc (what is free does not change).
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  *free_bytes = *total = EMU_MEM;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t bytes) { return cudaMalloc(p, bytes); }
cudaError_t cudaFreeHost(void *p) { return cudaFree(p); }

}  // extern "C"

// ---- cuBLAS: a reference GEMM

struct cublasContext {
  cublasMath_t math;
};

// Element i of a matrix of type t, as a float.
static float load(const void *p, cudaDataType t, long i) {
  return t == CUDA_R_32F ? ((const float *)p)[i] : __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

// For each of batch items b: C_b = alpha op(A_b) op(B_b) + beta C_b, column-major:
// op(A_b) m x k, op(B_b) k x n, C_b m x n; X_b = X + b * stride. Summed in
// double, the product times alpha plus beta C (C not read when beta is 0) rounded
// once to C's type. Float or bf16 operands (both the same), a float or bf16 C.
static cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const void *a, cudaDataType at,
                           int lda, long long sa, const void *b, cudaDataType bt, int ldb,
                           long long sb, const float *beta, void *c, cudaDataType ct, int ldc,
                           long long sc, int batch) {
  if (!h || h->math != CUBLAS_DEFAULT_MATH) return CUBLAS_STATUS_NOT_SUPPORTED;  // no TF32
  bool ok_types = at == bt && (at == CUDA_R_32F || at == CUDA_R_16BF) &&
                  (ct == CUDA_R_32F || ct == CUDA_R_16BF) && (at == CUDA_R_16BF || ct == at);
  if (!ok_types) return CUBLAS_STATUS_NOT_SUPPORTED;
  if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) ||
      m < 0 || n < 0 || k < 0 || batch < 0 || lda < (ta == CUBLAS_OP_N ? m : k) || lda < 1 ||
      ldb < (tb == CUBLAS_OP_N ? k : n) || ldb < 1 || ldc < m || ldc < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  for (int i = 0; i < batch; i++)
    for (int col = 0; col < n; col++)
      for (int row = 0; row < m; row++) {
        double s = 0.0;
        for (int l = 0; l < k; l++) {
          long ia = ta == CUBLAS_OP_N ? row + (long)l * lda : l + (long)row * lda;
          long ib = tb == CUBLAS_OP_N ? l + (long)col * ldb : col + (long)l * ldb;
          s += (double)load(a, at, i * sa + ia) * (double)load(b, bt, i * sb + ib);
        }
        long ic = i * sc + row + (long)col * ldc;
        double r = *alpha * s + (*beta != 0.0f ? *beta * (double)load(c, ct, ic) : 0.0);
        if (ct == CUDA_R_32F)
          ((float *)c)[ic] = (float)r;
        else
          ((__nv_bfloat16 *)c)[ic] = __float2bfloat16_rn((float)r);
      }
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
  static cublasContext ctx;
  ctx.math = CUBLAS_DEFAULT_MATH;
  *h = &ctx;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
  h->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t, void *, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t st) {
  static char s[64];
  snprintf(s, sizeof s, "emulated cuBLAS status %d", (int)st);
  return s;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                              int n, int k, const float *alpha, const float *a, int lda,
                              const float *b, int ldb, const float *beta, float *c, int ldc) {
  return gemm(h, ta, tb, m, n, k, alpha, a, CUDA_R_32F, lda, 0, b, CUDA_R_32F, ldb, 0, beta, c,
              CUDA_R_32F, ldc, 0, 1);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float *alpha, const float *a, int lda, long long sa,
                                         const float *b, int ldb, long long sb, const float *beta,
                                         float *c, int ldc, long long sc, int batch) {
  return gemm(h, ta, tb, m, n, k, alpha, a, CUDA_R_32F, lda, sa, b, CUDA_R_32F, ldb, sb, beta, c,
              CUDA_R_32F, ldc, sc, batch);
}

// float32 accumulation (CUBLAS_COMPUTE_32F), alpha and beta floats
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *a, cudaDataType at,
                            int lda, const void *b, cudaDataType bt, int ldb, const void *beta,
                            void *c, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t) {
  if (compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  return gemm(h, ta, tb, m, n, k, (const float *)alpha, a, at, lda, 0, b, bt, ldb, 0,
              (const float *)beta, c, ct, ldc, 0, 1);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *a, cudaDataType at,
                                          int lda, long long sa, const void *b, cudaDataType bt,
                                          int ldb, long long sb, const void *beta, void *c,
                                          cudaDataType ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  return gemm(h, ta, tb, m, n, k, (const float *)alpha, a, at, lda, sa, b, bt, ldb, sb,
              (const float *)beta, c, ct, ldc, sc, batch);
}

}  // extern "C"

// ---- cuBLASLt: the reference GEMM with the epilogues rt_matmul_bias asks for (bias, GELU with
// its input kept). An attribute it does not know is refused (CUBLAS_STATUS_NOT_SUPPORTED), so
// a launcher cannot rely on one the emulation ignores.

struct cublasLtContext {
  int unused;
};

namespace {
struct LtDesc {   // in a cublasLtMatmulDescOpaque_t
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t ta, tb;   // cublasOperation_t
  uint32_t epilogue;
  const void *bias;   // (BGRADA, BGRADB: written)
  void *aux;
  int64_t aux_ld, aux_stride, bias_stride;
};
struct LtLayout {   // in a cublasLtMatrixLayoutOpaque_t
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld, stride;
  int32_t batch;
};
static_assert(sizeof(LtDesc) <= sizeof(cublasLtMatmulDescOpaque_t), "LtDesc fits");
static_assert(sizeof(LtLayout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "LtLayout fits");

LtDesc *lt_desc(cublasLtMatmulDesc_t d) { return reinterpret_cast<LtDesc *>(d->data); }
LtLayout *lt_layout(cublasLtMatrixLayout_t l) { return reinterpret_cast<LtLayout *>(l->data); }

template <typename V>
cublasStatus_t set(V *to, const void *buf, size_t bytes) {
  if (!buf || bytes != sizeof *to) return CUBLAS_STATUS_INVALID_VALUE;
  memcpy(to, buf, sizeof *to);
  return CUBLAS_STATUS_SUCCESS;
}

// GELU as cuBLASLt's epilogue applies it: the tanh form
double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// Why the product cannot run as described ("" where it can): the checks cuBLASLt's
// heuristic makes on what rt_matmul_bias sets.
const char *lt_refusal(const LtDesc *o, const LtLayout *a, const LtLayout *b, const LtLayout *c,
                       const LtLayout *d) {
  uint32_t e = o->epilogue;
  bool aux = e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  if (o->compute != CUBLAS_COMPUTE_32F || o->scale != CUDA_R_32F) return "not float32 compute";
  bool bgrad = e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
  if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS && !aux && !bgrad)
    return "an epilogue the emulation does not have";
  if (a->type != b->type || c->type != d->type || (a->type == CUDA_R_32F && d->type != a->type))
    return "no kernel: types";
  if (bgrad && (d->batch > 1 || !o->bias)) return "a bias gradient of one product, a pointer";
  bool na = o->ta == CUBLAS_OP_N, nb = o->tb == CUBLAS_OP_N;
  uint64_t m = na ? a->rows : a->cols, k = na ? a->cols : a->rows;
  uint64_t kb = nb ? b->rows : b->cols, n = nb ? b->cols : b->rows;
  if (k != kb || d->rows != m || d->cols != n || c->rows != m || c->cols != n) return "shapes";
  for (const LtLayout *l : {a, b, c, d})
    if (l->ld < (int64_t)l->rows || l->ld < 1) return "a leading dimension below the rows";
  if (a->batch != d->batch || b->batch != d->batch || c->batch != d->batch) return "batch counts";
  if (e == CUBLASLT_EPILOGUE_BIAS && !o->bias) return "no bias pointer";
  if (aux && !o->bias) return "no bias pointer";
  if (aux && (!o->aux || o->aux_ld % 8 || o->aux_ld < (int64_t)m ||
              (d->batch > 1 && o->aux_stride % 8)))
    return "no kernel: GELU's aux, its ld a multiple of 8 no less than the rows, its stride too";
  return "";
}
// BGRADA: the sums over k of op(A)'s rows, one per row of D; BGRADB: of op(B)'s columns, one
// per column of D; summed in double, rounded once to D's type.
void lt_bgrad(const LtDesc *o, const void *a, const LtLayout *la, const void *b,
              const LtLayout *lb, cudaDataType dt) {
  bool ofa = o->epilogue == CUBLASLT_EPILOGUE_BGRADA;
  const LtLayout *l = ofa ? la : lb;
  bool n = (ofa ? o->ta : o->tb) == CUBLAS_OP_N;
  long len = ofa ? (n ? l->rows : l->cols) : (n ? l->cols : l->rows);
  long k = ofa ? (n ? l->cols : l->rows) : (n ? l->rows : l->cols);
  for (long i = 0; i < len; i++) {
    double s = 0.0;
    for (long r = 0; r < k; r++) {   // op(A)(i, r) or op(B)(r, i)
      long at = ofa ? (n ? i + r * l->ld : r + i * l->ld) : (n ? r + i * l->ld : i + r * l->ld);
      s += load(ofa ? a : b, l->type, at);
    }
    if (dt == CUDA_R_32F)
      ((float *)o->bias)[i] = (float)s;
    else
      ((__nv_bfloat16 *)o->bias)[i] = __float2bfloat16_rn((float)s);
  }
}
}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  static cublasLtContext ctx;
  *h = &ctx;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  *d = new cublasLtMatmulDescOpaque_t();
  *lt_desc(*d) = LtDesc{compute, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT,
                        NULL, NULL, 0, 0, 0};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t bytes) {
  LtDesc *o = lt_desc(d);
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_TRANSA: return set(&o->ta, buf, bytes);
  case CUBLASLT_MATMUL_DESC_TRANSB: return set(&o->tb, buf, bytes);
  case CUBLASLT_MATMUL_DESC_EPILOGUE: return set(&o->epilogue, buf, bytes);
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set(&o->bias, buf, bytes);
  case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return set(&o->bias_stride, buf, bytes);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set(&o->aux, buf, bytes);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set(&o->aux_ld, buf, bytes);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: return set(&o->aux_stride, buf, bytes);
  default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  *l = new cublasLtMatrixLayoutOpaque_t();
  *lt_layout(*l) = LtLayout{type, rows, cols, ld, 0, 1};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t bytes) {
  LtLayout *o = lt_layout(l);
  switch (attr) {
  case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return set(&o->batch, buf, bytes);
  case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return set(&o->stride, buf, bytes);
  default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  *p = new cublasLtMatmulPreferenceOpaque_t();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t bytes) {
  if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return CUBLAS_STATUS_NOT_SUPPORTED;
  return set(&p->data[0], buf, bytes);
}

// One algorithm, needing no workspace, where the product can run; none, and
// CUBLAS_STATUS_NOT_SUPPORTED, for GELU's aux off its multiples of 8 and float32 operands into
// a bf16 D (as cuBLASLt answers a product it has no kernel for); CUBLAS_STATUS_INVALID_VALUE
// for what describes no product.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int *count) {
  *count = 0;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  const char *why = lt_refusal(lt_desc(op), lt_layout(a), lt_layout(b), lt_layout(c),
                               lt_layout(d));
  if (!strncmp(why, "no kernel", 9))   // cuBLASLt has none for it
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (*why) {   // a call that describes no product: an error, not a fallback
    fprintf(stderr, "emulated cublasLtMatmulAlgoGetHeuristic: %s\n", why);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  memset(&results[0], 0, sizeof results[0]);
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// D = alpha op(A) op(B) + beta C, then the epilogue: + bias (one per row of D), aux = that sum,
// GELU; each batch item's X at X + item x its layout's stride. Summed in double, the epilogue
// in double, rounded once to D's type (and aux's, D's).
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t op, const void *alpha,
                              const void *a, cublasLtMatrixLayout_t adesc, const void *b,
                              cublasLtMatrixLayout_t bdesc, const void *beta, const void *c,
                              cublasLtMatrixLayout_t cdesc, void *d, cublasLtMatrixLayout_t ddesc,
                              const cublasLtMatmulAlgo_t *algo, void *, size_t, cudaStream_t) {
  const LtDesc *o = lt_desc(op);
  const LtLayout *la = lt_layout(adesc), *lb = lt_layout(bdesc), *lc = lt_layout(cdesc),
                 *ld = lt_layout(ddesc);
  const char *why = lt_refusal(o, la, lb, lc, ld);
  if (*why || !algo) {
    fprintf(stderr, "emulated cublasLtMatmul: %s\n", *why ? why : "no algorithm");
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  float al = *(const float *)alpha, be = *(const float *)beta;
  bool aux = o->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  bool bias = o->epilogue == CUBLASLT_EPILOGUE_BIAS || aux;
  if (o->epilogue == CUBLASLT_EPILOGUE_BGRADA || o->epilogue == CUBLASLT_EPILOGUE_BGRADB)
    lt_bgrad(o, a, la, b, lb, ld->type);
  long k = o->ta == CUBLAS_OP_N ? (long)la->cols : (long)la->rows;
  for (int i = 0; i < ld->batch; i++)
    for (uint64_t col = 0; col < ld->cols; col++)
      for (uint64_t row = 0; row < ld->rows; row++) {
        double s = 0.0;
        for (long l = 0; l < k; l++) {
          long ia = o->ta == CUBLAS_OP_N ? row + l * la->ld : l + row * la->ld;
          long ib = o->tb == CUBLAS_OP_N ? l + col * lb->ld : col + l * lb->ld;
          s += (double)load(a, la->type, i * la->stride + ia) *
               (double)load(b, lb->type, i * lb->stride + ib);
        }
        double v = al * s;
        if (be != 0.0f) v += be * (double)load(c, lc->type, i * lc->stride + row + col * lc->ld);
        if (bias) v += load(o->bias, ld->type, i * o->bias_stride + row);
        if (aux) {
          long at = i * o->aux_stride + row + col * o->aux_ld;
          if (ld->type == CUDA_R_32F)
            ((float *)o->aux)[at] = (float)v;
          else
            ((__nv_bfloat16 *)o->aux)[at] = __float2bfloat16_rn((float)v);
          v = gelu_tanh(v);
        }
        long at = i * ld->stride + row + col * ld->ld;
        if (ld->type == CUDA_R_32F)
          ((float *)d)[at] = (float)v;
        else
          ((__nv_bfloat16 *)d)[at] = __float2bfloat16_rn((float)v);
      }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
