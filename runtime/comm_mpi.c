// comm.h over MPI (Open MPI): the collectives of a multi-rank CPU build.
//
// Every collective runs in place (MPI_IN_PLACE). Two results need work after
// MPI is done, in finish(): in-place MPI_Reduce_scatter_block leaves rank r's
// shard at the start of the buffer, where comm.h promises it at r*count/n,
// so it is moved there; and MPI has no average, so a mean (RT_REDUCE_AVG,
// rt_reduce_mean) is a sum scaled by 1/divisor. A non-blocking collective keeps in its rt_request what
// finish() needs, and rt_wait calls it.
//
// Errors: MPI returns codes (MPI_ERRORS_RETURN on the world, inherited by
// every group); each is checked, printed as one line naming the rank, and
// ends the job with MPI_Abort, so that no other rank waits forever in a
// collective this one will never join.
//
// The GPU build compiles this file with -DRT_COMM_NCCL: collectives on device
// memory go to NCCL (comm_nccl.c), each group having its NCCL communicator
// beside its MPI one; MPI keeps the host buffers, scalars and barriers.
#include "comm.h"
#include "parts.h"

#include <limits.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef RT_COMM_NCCL
#include "comm_nccl.h"
#endif

// An MPI_Request lives in the first half of rt_request.impl (comm_nccl.c keeps
// its event in the second).
_Static_assert(sizeof(MPI_Request) <= 2 * sizeof(((rt_request *)0)->impl[0]),
               "an MPI_Request must fit in half of rt_request.impl");

// A group's uneven parts (rt_group_set_parts) of buffers of one count, as MPI's counts and
// displacements, made when a collective first needs them and kept: a non-blocking one reads
// them until it is waited for.
typedef struct parts_of {
  long count;
  int *counts, *displs;
  struct parts_of *next;
} parts_of;

struct rt_group {
  MPI_Comm comm;
  int size, rank;
  const int *parts;      // NULL: equal parts (rt_group_set_parts)
  parts_of *made;
#ifdef RT_COMM_NCCL
  rt_nccl *nccl;   // the same ranks' NCCL communicator
#endif
  rt_group *next;  // every group split off, freed by rt_comm_finalize
};

// the collectives, as rt_request.kind
enum {
  KIND_ALLREDUCE,       // 2(n-1)/n x S sent
  KIND_REDUCE_SCATTER,  // (n-1)/n x S
  KIND_ALLGATHER,       // (n-1)/n x S
  KIND_BROADCAST,       // S at every rank but the last of the ring from the root
  KIND_REDUCE,          // S at every rank but the root
  KIND_MASK = 7,  // the bits above
  KIND_NCCL = 16,  // on device memory, over NCCL: rt_nccl_wait finishes it
};

static rt_group world;
static rt_group *groups;  // split off the world, newest first
// Bytes sent (comm.h), exactly: a ring's (n-1)/n of each buffer is summed per group size n,
// and only the total is rounded down. ring[i].bytes: the buffers' bytes over groups of
// ring[i].n ranks (an all-reduce's twice); whole: what broadcasts send.
#define RING_SIZES 8
static struct { int n; int64_t bytes; } ring[RING_SIZES];
static int64_t whole_sent;
static double comm_seconds;  // inside the calls below (rt_comm_seconds)

// ---------------------------------------------------------------------------
// errors

__attribute__((format(printf, 1, 2))) _Noreturn static void comm_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fflush(stdout);
  fprintf(stderr, "train: error: rank %d: ", world.rank);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);  // MPI_Abort does not return; this is for the compiler
}

static void mpi_check(int rc, const char *call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
  comm_fail("%s failed: %s", call, msg);
}

// MPI takes counts as int; larger buckets are refused rather than split (see comm.h).
static int mpi_count(const char *fn, long count, const char *unit) {
  if (count < 0) comm_fail("%s: negative count %ld", fn, count);
  if (count > INT_MAX)
    comm_fail("%s: %ld %s is more than MPI's int count allows (%d); split the buffer", fn, count,
              unit, INT_MAX);
  return (int)count;
}

// bf16 reductions: MPI has no bf16 type, so its elements travel as
// MPI_UINT16_T and are reduced by these user operations, each partial result
// computed in float32 and rounded to bf16 (as NCCL's bf16 reductions are).
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  const rt_bf16 *a = in;
  rt_bf16 *b = inout;
  for (int i = 0; i < *len; i++) b[i] = rt_f32_to_bf16(rt_bf16_to_f32(a[i]) + rt_bf16_to_f32(b[i]));
}

static void bf16_max(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  const rt_bf16 *a = in;
  rt_bf16 *b = inout;
  for (int i = 0; i < *len; i++)
    if (rt_bf16_to_f32(a[i]) > rt_bf16_to_f32(b[i])) b[i] = a[i];
}

static MPI_Op bf16_ops[2];  // sum, max: made when first needed
static bool have_bf16_ops[2];

static MPI_Datatype mpi_type(int dtype) { return dtype == RT_BF16 ? MPI_UINT16_T : MPI_FLOAT; }

static MPI_Op mpi_op(const char *fn, int op, int dtype) {
  if (op < RT_REDUCE_SUM || op == RT_REDUCE_MEAN)
    comm_fail("%s: unknown reduction %d", fn, op);
  bool max = op == RT_REDUCE_MAX;  // a sum and a mean are sums, scaled in finish()
  if (dtype != RT_BF16) return max ? MPI_MAX : MPI_SUM;
  if (!have_bf16_ops[max])
    mpi_check(MPI_Op_create(max ? bf16_max : bf16_sum, 1, &bf16_ops[max]), "MPI_Op_create");
  have_bf16_ops[max] = true;
  return bf16_ops[max];
}

// reduce_scatter and allgather split the buffer into one shard per rank (or part)
static void check_shards(const char *fn, const rt_group *g, long count) {
  long total = rt_parts_total(g->parts, g->size);
  if (count % total)
    comm_fail("%s: count %ld does not divide by the group's %ld parts", fn, count, total);
}

// ---------------------------------------------------------------------------
// bytes sent, as a ring sends them (comm.h)

static void count_ring(int n, int64_t bytes) {
  int i = 0;
  while (i < RING_SIZES && ring[i].n && ring[i].n != n) i++;
  if (i == RING_SIZES) comm_fail("rt_comm: collectives over more than %d group sizes", RING_SIZES);
  ring[i].n = n;
  ring[i].bytes += bytes;
}

static void count_bytes(int kind, const rt_group *g, long bytes, int root) {
  if (g->size == 1) return;
  long own;   // over uneven parts: all of the buffer but this rank's part
  switch (kind & KIND_MASK) {
  case KIND_ALLREDUCE: count_ring(g->size, 2 * (int64_t)bytes); break;
  case KIND_REDUCE_SCATTER:
  case KIND_ALLGATHER:
    if (!g->parts) {
      count_ring(g->size, bytes);
      break;
    }
    rt_part(bytes, g->parts, g->size, g->rank, &own);
    whole_sent += bytes - own;
    break;
  case KIND_BROADCAST: whole_sent += (g->rank + 1) % g->size == root ? 0 : bytes; break;
  case KIND_REDUCE: whole_sent += g->rank == root ? 0 : bytes; break;
  }
}

int64_t rt_comm_bytes_sent(void) {
  int64_t sent = whole_sent;
  double fractions = 0;   // under 1 per group size: exact enough to round down
  for (int i = 0; i < RING_SIZES && ring[i].n; i++) {
    int64_t n = ring[i].n, part = (n - 1) * ring[i].bytes;
    sent += part / n;
    fractions += (double)(part % n) / (double)n;
  }
  return sent + (int64_t)(fractions + 1e-9);
}
void rt_comm_reset_bytes(void) {
  memset(ring, 0, sizeof ring);
  whole_sent = 0;
}

// ---------------------------------------------------------------------------
// time spent communicating: every call below adds its wall time, from entry
// to return, with timer_stop(timer_start())

static double timer_start(void) { return MPI_Wtime(); }
static void timer_stop(double t0) { comm_seconds += MPI_Wtime() - t0; }
double rt_comm_seconds(void) { return comm_seconds; }

// ---------------------------------------------------------------------------
// start-up and groups

static void print_launch_error(const char *prog, int ranks, const char *what, int started) {
  fprintf(stderr, "train: error: this program was compiled for %d ranks", ranks);
  if (what && *what) fprintf(stderr, " (%s)", what);
  fprintf(stderr, "; run it with mpirun -np %d %s (started on %d)\n", ranks, prog, started);
}

// MPI_THREAD_FUNNELED: the kernels run OpenMP threads, but only the main
// thread calls MPI.
void rt_comm_init(int *argc, char ***argv, int ranks, const char *what) {
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "train: error: MPI_Init_thread failed\n");
    exit(1);
  }
  world.comm = MPI_COMM_WORLD;
  mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &world.size), "MPI_Comm_size");
  mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &world.rank), "MPI_Comm_rank");
  if (provided < MPI_THREAD_FUNNELED)
    comm_fail("MPI provides thread level %d, below MPI_THREAD_FUNNELED", provided);
  if (world.size != ranks) {
    // Every rank sees the same mismatch, so all of them can finalize and
    // leave cleanly; only rank 0 says why.
    if (world.rank == 0) {
      const char *prog = argv && *argv && (*argv)[0] ? (*argv)[0] : "./train";
      print_launch_error(prog, ranks, what, world.size);
    }
    MPI_Finalize();
    exit(1);
  }
#ifdef RT_COMM_NCCL
  world.nccl = rt_nccl_world(MPI_COMM_WORLD, world.size, world.rank);
#endif
}

static void free_parts(rt_group *g) {
  while (g->made) {
    parts_of *p = g->made;
    g->made = p->next;
    free(p->counts);
    free(p->displs);
    free(p);
  }
}

void rt_comm_finalize(void) {
  free_parts(&world);
  while (groups) {
    rt_group *g = groups;
    groups = g->next;
    free_parts(g);
    mpi_check(MPI_Comm_free(&g->comm), "MPI_Comm_free");
#ifdef RT_COMM_NCCL
    rt_nccl_free(g->nccl);
#endif
    free(g);
  }
#ifdef RT_COMM_NCCL
  rt_nccl_free(world.nccl);
#endif
  mpi_check(MPI_Finalize(), "MPI_Finalize");
}

int rt_comm_rank(void) { return world.rank; }
int rt_comm_size(void) { return world.size; }
rt_group *rt_group_world(void) { return &world; }
int rt_group_rank(const rt_group *g) { return g->rank; }
int rt_group_size(const rt_group *g) { return g->size; }

void rt_group_set_parts(rt_group *g, const int *w) {
  for (int r = 0; w && r < g->size; r++)
    if (w[r] < 1) comm_fail("rt_group_set_parts: rank %d's part is %d, not 1 or more", r, w[r]);
  free_parts(g);
  g->parts = w;
}

// g's uneven parts of count elements, as MPI takes them.
static const parts_of *parts_for(rt_group *g, long count) {
  for (parts_of *p = g->made; p; p = p->next)
    if (p->count == count) return p;
  parts_of *p = calloc(1, sizeof *p);
  if (p) p->counts = malloc((size_t)g->size * sizeof *p->counts);
  if (p) p->displs = malloc((size_t)g->size * sizeof *p->displs);
  if (!p || !p->counts || !p->displs) comm_fail("rt_comm: out of memory");
  for (int r = 0; r < g->size; r++) {
    long len, lo = rt_part(count, g->parts, g->size, r, &len);
    p->counts[r] = (int)len;
    p->displs[r] = (int)lo;
  }
  p->count = count;
  p->next = g->made;
  g->made = p;
  return p;
}

rt_group *rt_group_split(rt_group *parent, int color, int key) {
  if (color < 0) comm_fail("rt_group_split: color %d is negative", color);
  rt_group *g = calloc(1, sizeof *g);
  if (!g) comm_fail("rt_group_split: out of memory");
  mpi_check(MPI_Comm_split(parent->comm, color, key, &g->comm), "MPI_Comm_split");
  mpi_check(MPI_Comm_size(g->comm, &g->size), "MPI_Comm_size");
  mpi_check(MPI_Comm_rank(g->comm, &g->rank), "MPI_Comm_rank");
#ifdef RT_COMM_NCCL
  g->nccl = rt_nccl_split(parent->nccl, color, key);
#endif
  g->next = groups;
  groups = g;
  return g;
}

// ---------------------------------------------------------------------------
// collectives

// What is left after MPI is done: the reduce-scatter shard to its place,
// a mean's 1/divisor.
static void finish(int kind, const rt_group *g, void *buf, long count, int dtype, int divisor) {
  long lo = 0, n = count;
  size_t size = (size_t)rt_dtype_size(dtype);
  if ((kind & KIND_MASK) == KIND_REDUCE_SCATTER) {
    lo = rt_part(count, g->parts, g->size, g->rank, &n);
    if (lo) memmove((char *)buf + (size_t)lo * size, buf, (size_t)n * size);
  }
  if (divisor > 1) {
    float scale = 1.0f / (float)divisor;
    if (dtype == RT_BF16)
      for (long i = lo; i < lo + n; i++) {
        rt_bf16 *b = (rt_bf16 *)buf + i;
        *b = rt_f32_to_bf16(rt_bf16_to_f32(*b) * scale);
      }
    else
      for (long i = lo; i < lo + n; i++) ((float *)buf)[i] *= scale;
  }
}

// Records a started collective in req, for rt_wait.
static void pending(rt_request *req, int kind, rt_group *g, void *buf, long count, int dtype,
                    int divisor, MPI_Request mreq) {
  req->active = 1;
  req->kind = kind;
  req->divisor = divisor;
  req->buf = buf;
  req->count = count;
  req->dtype = dtype;
  req->group = g;
  memcpy(req->impl, &mreq, sizeof mreq);
}

static void check_root(const char *fn, const rt_group *g, int root) {
  if (root < 0 || root >= g->size)
    comm_fail("%s: root %d is not a rank of the group (0..%d)", fn, root, g->size - 1);
}

static void check_idle(const char *fn, const rt_request *req) {
  if (req && req->active) comm_fail("%s: the request is still in flight (rt_wait it first)", fn);
}

// A collective on device memory runs over NCCL (the GPU build): returns
// whether it did. rt_wait hands a non-blocking one back to NCCL.
static bool on_device(int kind, rt_group *g, void *buf, long count, int dtype, int op, int root,
                      rt_request *req, double t0) {
#ifdef RT_COMM_NCCL
  if (!rt_nccl_owns(buf)) return false;
  switch (kind & KIND_MASK) {
  case KIND_ALLREDUCE: rt_nccl_allreduce(g->nccl, buf, count, dtype, op, req); break;
  case KIND_REDUCE_SCATTER:
    rt_nccl_reduce_scatter(g->nccl, buf, count, dtype, op, g->parts, req);
    break;
  case KIND_ALLGATHER: rt_nccl_allgather(g->nccl, buf, count, dtype, g->parts, req); break;
  case KIND_BROADCAST: rt_nccl_broadcast(g->nccl, buf, count, root, req); break;
  case KIND_REDUCE: rt_nccl_reduce(g->nccl, buf, count, dtype, op, root, req); break;
  }
  if (req) {
    req->kind = kind | KIND_NCCL;
    req->group = g;
  }
  timer_stop(t0);
  return true;
#else
  (void)kind, (void)g, (void)buf, (void)count, (void)dtype, (void)op, (void)root, (void)req,
      (void)t0;
  return false;
#endif
}

void rt_allreduce_typed(rt_group *g, void *buf, long count, int dtype, int op, rt_request *req) {
  double t0 = timer_start();
  const char *fn = "rt_allreduce";
  check_idle(fn, req);
  int n = mpi_count(fn, count, "elements");
  MPI_Op mop = mpi_op(fn, op, dtype);
  MPI_Datatype type = mpi_type(dtype);
  int kind = KIND_ALLREDUCE, divisor = rt_reduce_divisor(op, g->size);
  count_bytes(kind, g, count * rt_dtype_size(dtype), 0);
  if (on_device(kind, g, buf, count, dtype, op, 0, req, t0)) return;
  if (req) {
    MPI_Request mreq;
    mpi_check(MPI_Iallreduce(MPI_IN_PLACE, buf, n, type, mop, g->comm, &mreq), "MPI_Iallreduce");
    pending(req, kind, g, buf, count, dtype, divisor, mreq);
  } else {
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, buf, n, type, mop, g->comm), "MPI_Allreduce");
    finish(kind, g, buf, count, dtype, divisor);
  }
  timer_stop(t0);
}

void rt_reduce_scatter_typed(rt_group *g, void *buf, long count, int dtype, int op,
                             rt_request *req) {
  double t0 = timer_start();
  const char *fn = "rt_reduce_scatter";
  check_idle(fn, req);
  mpi_count(fn, count, "elements");
  check_shards(fn, g, count);
  int shard = (int)(count / g->size);
  MPI_Op mop = mpi_op(fn, op, dtype);
  MPI_Datatype type = mpi_type(dtype);
  int kind = KIND_REDUCE_SCATTER, divisor = rt_reduce_divisor(op, g->size);
  count_bytes(kind, g, count * rt_dtype_size(dtype), 0);
  if (on_device(kind, g, buf, count, dtype, op, 0, req, t0)) return;
  const int *counts = g->parts ? parts_for(g, count)->counts : NULL;  // uneven parts
  if (req) {
    MPI_Request mreq;
    if (counts)
      mpi_check(MPI_Ireduce_scatter(MPI_IN_PLACE, buf, counts, type, mop, g->comm, &mreq),
                "MPI_Ireduce_scatter");
    else
      mpi_check(MPI_Ireduce_scatter_block(MPI_IN_PLACE, buf, shard, type, mop, g->comm, &mreq),
                "MPI_Ireduce_scatter_block");
    pending(req, kind, g, buf, count, dtype, divisor, mreq);
  } else {
    if (counts)
      mpi_check(MPI_Reduce_scatter(MPI_IN_PLACE, buf, counts, type, mop, g->comm),
                "MPI_Reduce_scatter");
    else
      mpi_check(MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, shard, type, mop, g->comm),
                "MPI_Reduce_scatter_block");
    finish(kind, g, buf, count, dtype, divisor);
  }
  timer_stop(t0);
}

void rt_reduce_typed(rt_group *g, void *buf, long count, int dtype, int op, int root,
                     rt_request *req) {
  double t0 = timer_start();
  const char *fn = "rt_reduce";
  check_idle(fn, req);
  int n = mpi_count(fn, count, "elements");
  check_root(fn, g, root);
  MPI_Op mop = mpi_op(fn, op, dtype);
  MPI_Datatype type = mpi_type(dtype);
  int kind = KIND_REDUCE, divisor = rt_reduce_divisor(op, g->size);
  count_bytes(kind, g, count * rt_dtype_size(dtype), root);
  if (on_device(kind, g, buf, count, dtype, op, root, req, t0)) return;
  const void *send = g->rank == root ? MPI_IN_PLACE : buf;
  void *recv = g->rank == root ? buf : NULL;
  if (req) {
    MPI_Request mreq;
    mpi_check(MPI_Ireduce(send, recv, n, type, mop, root, g->comm, &mreq), "MPI_Ireduce");
    pending(req, kind, g, buf, count, dtype, g->rank == root ? divisor : 1, mreq);
  } else {
    mpi_check(MPI_Reduce(send, recv, n, type, mop, root, g->comm), "MPI_Reduce");
    finish(kind, g, buf, count, dtype, g->rank == root ? divisor : 1);
  }
  timer_stop(t0);
}

void rt_allgather_typed(rt_group *g, void *buf, long count, int dtype, rt_request *req) {
  double t0 = timer_start();
  const char *fn = "rt_allgather";
  check_idle(fn, req);
  mpi_count(fn, count, "elements");
  check_shards(fn, g, count);
  int shard = (int)(count / g->size);
  MPI_Datatype type = mpi_type(dtype);
  count_bytes(KIND_ALLGATHER, g, count * rt_dtype_size(dtype), 0);
  if (on_device(KIND_ALLGATHER, g, buf, count, dtype, 0, 0, req, t0)) return;
  // in place: each rank's contribution is already at its shard (or part) of buf
  const parts_of *p = g->parts ? parts_for(g, count) : NULL;
  if (req) {
    MPI_Request mreq;
    if (p)
      mpi_check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, p->counts, p->displs,
                                type, g->comm, &mreq), "MPI_Iallgatherv");
    else
      mpi_check(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, shard, type, g->comm,
                               &mreq), "MPI_Iallgather");
    pending(req, KIND_ALLGATHER, g, buf, count, dtype, 1, mreq);
  } else if (p) {
    mpi_check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, p->counts, p->displs, type,
                             g->comm), "MPI_Allgatherv");
  } else {
    mpi_check(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, shard, type, g->comm),
              "MPI_Allgather");
  }
  timer_stop(t0);
}

void rt_broadcast(rt_group *g, void *buf, long bytes, int root, rt_request *req) {
  double t0 = timer_start();
  const char *fn = "rt_broadcast";
  check_idle(fn, req);
  int n = mpi_count(fn, bytes, "bytes");
  check_root(fn, g, root);
  count_bytes(KIND_BROADCAST, g, bytes, root);
  if (on_device(KIND_BROADCAST, g, buf, bytes, RT_F32, 0, root, req, t0)) return;
  if (req) {
    MPI_Request mreq;
    mpi_check(MPI_Ibcast(buf, n, MPI_BYTE, root, g->comm, &mreq), "MPI_Ibcast");
    pending(req, KIND_BROADCAST, g, buf, bytes, RT_F32, 1, mreq);  // nothing to finish
  } else {
    mpi_check(MPI_Bcast(buf, n, MPI_BYTE, root, g->comm), "MPI_Bcast");
  }
  timer_stop(t0);
}

void rt_wait(rt_request *req) {
  if (!req->active) return;
  double t0 = timer_start();
#ifdef RT_COMM_NCCL
  if (req->kind & KIND_NCCL) {
    rt_nccl_wait(req);
    timer_stop(t0);
    return;
  }
#endif
  MPI_Request mreq;
  memcpy(&mreq, req->impl, sizeof mreq);
  mpi_check(MPI_Wait(&mreq, MPI_STATUS_IGNORE), "MPI_Wait");
  req->active = 0;
  if ((req->kind & KIND_MASK) != KIND_BROADCAST)
    finish(req->kind, req->group, req->buf, req->count, req->dtype, req->divisor);
  timer_stop(t0);
}

void rt_barrier(rt_group *g) {
  double t0 = timer_start();
  mpi_check(MPI_Barrier(g->comm), "MPI_Barrier");
  timer_stop(t0);
}

double rt_allreduce_scalar(rt_group *g, double x, int op) {
  double t0 = timer_start();
  MPI_Op mop = mpi_op("rt_allreduce_scalar", op, RT_F32);
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, mop, g->comm), "MPI_Allreduce");
  timer_stop(t0);
  return x / rt_reduce_divisor(op, g->size);
}
