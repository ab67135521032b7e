// NCCL under comm.h (see comm_nccl.h): the collectives of a multi-rank GPU
// build on device memory.
#include "comm_nccl.h"
#include "parts.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "cuda_common.h"

// A request's event lives in the second half of rt_request.impl, apart from
// where comm_mpi.c keeps an MPI_Request.
#define REQ_EVENT(req) ((req)->impl + 2)
_Static_assert(sizeof(cudaEvent_t) <= 2 * sizeof(((rt_request *)0)->impl[0]),
               "a cudaEvent_t must fit in half of rt_request.impl");

struct rt_nccl {
  ncclComm_t comm;
  int size, rank;
};

static cudaStream_t comm_stream;  // every collective's
// Reused for the order of the two streams: an event can be recorded again as
// soon as a stream's wait for it is queued (the wait keeps the recorded work).
static cudaEvent_t kernels_done, comm_done;
static int world_rank;

_Noreturn static void nccl_fail(const char *call, const char *why) {
  fflush(stdout);
  fprintf(stderr, "train: error: rank %d: %s failed: %s\n", world_rank, call, why);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);  // MPI_Abort does not return
}

#define NCCL_CHECK(x)                                          \
  do {                                                         \
    ncclResult_t nccl_rc_ = (x);                               \
    if (nccl_rc_ != ncclSuccess) nccl_fail(#x, ncclGetErrorString(nccl_rc_)); \
  } while (0)

// `to` waits for what `from` has queued so far (e: an event of ours).
static void order(cudaEvent_t e, cudaStream_t from, cudaStream_t to) {
  cudaCheck(cudaEventRecord(e, from));
  cudaCheck(cudaStreamWaitEvent(to, e, 0));
}

rt_nccl *rt_nccl_world(MPI_Comm world, int size, int rank) {
  world_rank = rank;
  ncclUniqueId id;
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  if (MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, world) != MPI_SUCCESS)
    nccl_fail("MPI_Bcast", "the NCCL id did not reach every rank");
  rt_nccl *c = calloc(1, sizeof *c);
  if (!c) nccl_fail("rt_nccl_world", "out of memory");
  NCCL_CHECK(ncclCommInitRank(&c->comm, size, id, rank));
  c->size = size;
  c->rank = rank;
  cudaCheck(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking));
  cudaCheck(cudaEventCreateWithFlags(&kernels_done, cudaEventDisableTiming));
  cudaCheck(cudaEventCreateWithFlags(&comm_done, cudaEventDisableTiming));
  return c;
}

rt_nccl *rt_nccl_split(rt_nccl *parent, int color, int key) {
  rt_nccl *c = calloc(1, sizeof *c);
  if (!c) nccl_fail("rt_nccl_split", "out of memory");
  NCCL_CHECK(ncclCommSplit(parent->comm, color, key, &c->comm, NULL));
  NCCL_CHECK(ncclCommCount(c->comm, &c->size));
  NCCL_CHECK(ncclCommUserRank(c->comm, &c->rank));
  return c;
}

void rt_nccl_free(rt_nccl *c) {
  if (!c) return;
  cudaCheck(cudaStreamSynchronize(comm_stream));
  NCCL_CHECK(ncclCommDestroy(c->comm));
  free(c);
}

int rt_nccl_owns(const void *buf) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, buf) != cudaSuccess) {
    (void)cudaGetLastError();  // an unknown host pointer: not an error to keep
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// NCCL's type of an element type
static ncclDataType_t nccl_type(int dtype) { return dtype == RT_BF16 ? ncclBfloat16 : ncclFloat; }
static size_t elem_size(int dtype) { return (size_t)rt_dtype_size(dtype); }

// NCCL's reduction for op. A mean over other than the group's size (rt_reduce_mean) is a sum of
// the inputs each multiplied by 1/n first (an operator of the communicator's, which
// done_op destroys once the call that takes it has returned, as NCCL allows).
static ncclRedOp_t nccl_op(rt_nccl *c, int op, int dtype) {
  switch (op) {
  case RT_REDUCE_SUM: return ncclSum;
  case RT_REDUCE_AVG: return ncclAvg;
  case RT_REDUCE_MAX: return ncclMax;
  }
  int n = rt_reduce_divisor(op, c->size);
  if (op < RT_REDUCE_MEAN || n < 1)
    nccl_fail("rt_nccl", "unknown reduction");
  ncclRedOp_t r;
  float f = 1.0f / (float)n;
  rt_bf16 h = rt_f32_to_bf16(f);
  void *scalar = dtype == RT_BF16 ? (void *)&h : (void *)&f;
  NCCL_CHECK(ncclRedOpCreatePreMulSum(&r, scalar, nccl_type(dtype), ncclScalarHostImmediate,
                                      c->comm));
  return r;
}

static void done_op(rt_nccl *c, ncclRedOp_t r) {
  if (r != ncclSum && r != ncclAvg && r != ncclMax)
    NCCL_CHECK(ncclRedOpDestroy(r, c->comm));
}

// Before a collective: the comm stream waits for the kernels launched so far.
static void start(void) { order(kernels_done, rt_cuda_stream, comm_stream); }

// After it: the kernels' stream waits for it now (req NULL), or at rt_wait.
// A request keeps its own event from its first use on (requests are the
// program's slots, reused every step; a zeroed impl has none yet).
static void started(rt_request *req, void *buf, long count) {
  if (!req) {
    order(comm_done, comm_stream, rt_cuda_stream);
    return;
  }
  cudaEvent_t e = NULL;
  memcpy(&e, REQ_EVENT(req), sizeof e);
  if (!e) {
    cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    memcpy(REQ_EVENT(req), &e, sizeof e);
  }
  cudaCheck(cudaEventRecord(e, comm_stream));
  req->active = 1;
  req->buf = buf;
  req->count = count;
}

void rt_nccl_wait(rt_request *req) {
  cudaEvent_t e;
  memcpy(&e, REQ_EVENT(req), sizeof e);
  cudaCheck(cudaStreamWaitEvent(rt_cuda_stream, e, 0));
  req->active = 0;
}

void rt_nccl_allreduce(rt_nccl *c, void *buf, long count, int dtype, int op, rt_request *req) {
  start();
  ncclRedOp_t r = nccl_op(c, op, dtype);
  NCCL_CHECK(ncclAllReduce(buf, buf, (size_t)count, nccl_type(dtype), r, c->comm, comm_stream));
  done_op(c, r);
  started(req, buf, count);
}

// in place: rank r's shard is reduced at buf + r * shard (NCCL's in-place layout)
void rt_nccl_reduce_scatter(rt_nccl *c, void *buf, long count, int dtype, int op,
                            const int *parts, rt_request *req) {
  size_t size = elem_size(dtype);
  start();
  ncclRedOp_t r = nccl_op(c, op, dtype);
  if (parts) {   // rank k's part reduced to rank k
    NCCL_CHECK(ncclGroupStart());
    for (int k = 0; k < c->size; k++) {
      long len, lo = rt_part(count, parts, c->size, k, &len);
      char *at = (char *)buf + (size_t)lo * size;
      NCCL_CHECK(ncclReduce(at, at, (size_t)len, nccl_type(dtype), r, k, c->comm, comm_stream));
    }
    NCCL_CHECK(ncclGroupEnd());
  } else {
    long shard = count / c->size;
    char *mine = (char *)buf + (size_t)(c->rank * shard) * size;
    NCCL_CHECK(ncclReduceScatter(buf, mine, (size_t)shard, nccl_type(dtype), r, c->comm,
                                 comm_stream));
  }
  done_op(c, r);
  started(req, buf, count);
}

// in place: rank r contributes its shard (or part) of buf
void rt_nccl_allgather(rt_nccl *c, void *buf, long count, int dtype, const int *parts,
                       rt_request *req) {
  size_t size = elem_size(dtype);
  start();
  if (parts) {   // rank k's part broadcast from rank k
    NCCL_CHECK(ncclGroupStart());
    for (int k = 0; k < c->size; k++) {
      long len, lo = rt_part(count, parts, c->size, k, &len);
      char *at = (char *)buf + (size_t)lo * size;
      NCCL_CHECK(ncclBroadcast(at, at, (size_t)len * size, ncclChar, k, c->comm, comm_stream));
    }
    NCCL_CHECK(ncclGroupEnd());
  } else {
    long shard = count / c->size;
    char *mine = (char *)buf + (size_t)(c->rank * shard) * size;
    NCCL_CHECK(ncclAllGather(mine, buf, (size_t)shard, nccl_type(dtype), c->comm, comm_stream));
  }
  started(req, buf, count);
}

// in place at the root
void rt_nccl_reduce(rt_nccl *c, void *buf, long count, int dtype, int op, int root,
                    rt_request *req) {
  start();
  ncclRedOp_t r = nccl_op(c, op, dtype);
  NCCL_CHECK(ncclReduce(buf, buf, (size_t)count, nccl_type(dtype), r, root, c->comm, comm_stream));
  done_op(c, r);
  started(req, buf, count);
}

void rt_nccl_broadcast(rt_nccl *c, void *buf, long bytes, int root, rt_request *req) {
  start();
  NCCL_CHECK(ncclBroadcast(buf, buf, (size_t)bytes, ncclChar, root, c->comm, comm_stream));
  started(req, buf, bytes);
}
