// Communication between the ranks of a training program: one interface over
// process groups. Implemented by comm_mpi.c (Open MPI; the CPU build of a
// multi-rank program), comm_single.c (one rank, no MPI needed) and, for GPU
// builds, comm_nccl.c.
//
// Buffers hold elements of a dtype (model_api.h's RT_F32 or RT_BF16; a bf16
// sum or average is computed in float32 and rounded once, as NCCL does), and
// collectives work in place, as NCCL's do:
//   allreduce       buf[0, count) <- op over the group of buf[0, count)
//   reduce_scatter  rank r's shard buf[r*count/n, (r+1)*count/n) <- op over the
//                   group of that shard; the rest of buf is left undefined
//   allgather       every rank gets buf[0, count), rank r having contributed
//                   its shard buf[r*count/n, (r+1)*count/n)
//   reduce          root's buf[0, count) <- op over the group of buf[0, count); the other
//                   ranks' buf is left as it was
//   broadcast       buf[0, bytes) <- root's
// count must divide by the group's size for reduce_scatter and allgather
// (the lowering pads buckets to the group size). A group may have uneven parts
// instead (rt_group_set_parts: a mixed cluster's state shares): rank r's shard
// is then its part in their ratio (parts.h), and count divides by their sum.
//
// Every collective can be blocking (req NULL) or non-blocking: it starts and
// returns, and rt_wait(req) finishes it; buf must not be touched in between.
// Errors end the program with one message (this is the runtime of a program,
// not a library). A request must start zeroed (static storage, or = {0}):
// starting a collective on a request that is still active is an error.
//
// MPI counts are ints: comm_mpi.c refuses, with a message, a collective over
// more than INT_MAX elements (bytes for broadcast), 8 GiB of floats; the
// lowering's buckets are far smaller, so it does not split them.
#ifndef MTC_RT_COMM_H
#define MTC_RT_COMM_H

#include <stdint.h>

#include "model_api.h"  // RT_F32, RT_BF16

typedef struct rt_group rt_group;   // a process group (opaque)

// Reductions: a sum, the group's mean (the sum divided by its size), a maximum, or
// rt_reduce_mean(n): the sum divided by n (the mean over a mesh's n replicas of a bucket that
// all of its ranks hold partial sums of, dist.c).
enum { RT_REDUCE_SUM, RT_REDUCE_AVG, RT_REDUCE_MAX, RT_REDUCE_MEAN };
static inline int rt_reduce_mean(int n) { return RT_REDUCE_MEAN + n; }
// What the sum is divided by under op over a group of `size` ranks (1: a sum or a maximum).
static inline int rt_reduce_divisor(int op, int size) {
  return op == RT_REDUCE_AVG ? size : op > RT_REDUCE_MEAN ? op - RT_REDUCE_MEAN : 1;
}

// A non-blocking collective in flight. Plain storage, so that the program can
// keep its requests in static arrays; no allocation per call.
typedef struct rt_request {
  int active;          // started and not yet waited for
  int kind;            // the collective (implementation's use)
  void *buf;
  long count;
  int dtype;
  int divisor;         // a reduction's result is scaled by 1/divisor (rt_reduce_divisor)
  rt_group *group;
  uint64_t impl[4];    // the implementation's handle (an MPI_Request)
} rt_request;

// Starts the communication layer (MPI_Init under mpirun) and checks the
// launch: a program compiled for `ranks` ranks started on another number of
// processes, or a multi-rank program without MPI, ends with one message that
// says how to run it. `what` describes the layout for that message
// ("dp 2 x tp 2").
void rt_comm_init(int *argc, char ***argv, int ranks, const char *what);
void rt_comm_finalize(void);
int rt_comm_rank(void);   // in the world
int rt_comm_size(void);

// The world, and subgroups of it: ranks passing the same color form one
// group, ordered by key. Collective over the parent group.
rt_group *rt_group_world(void);
rt_group *rt_group_split(rt_group *parent, int color, int key);
int rt_group_rank(const rt_group *g);
int rt_group_size(const rt_group *g);
// Gives reduce_scatter and allgather over g the parts w[0..size) (parts.h; each at least 1,
// kept by the caller for g's life), or equal ones again (NULL). Every rank of g passes the same.
void rt_group_set_parts(rt_group *g, const int *w);

void rt_allreduce_typed(rt_group *g, void *buf, long count, int dtype, int op, rt_request *req);
void rt_reduce_scatter_typed(rt_group *g, void *buf, long count, int dtype, int op,
                             rt_request *req);
void rt_allgather_typed(rt_group *g, void *buf, long count, int dtype, rt_request *req);
void rt_reduce_typed(rt_group *g, void *buf, long count, int dtype, int op, int root,
                     rt_request *req);
// the same on float32 buffers
static inline void rt_allreduce(rt_group *g, float *buf, long count, int op, rt_request *req) {
  rt_allreduce_typed(g, buf, count, RT_F32, op, req);
}
static inline void rt_reduce_scatter(rt_group *g, float *buf, long count, int op,
                                     rt_request *req) {
  rt_reduce_scatter_typed(g, buf, count, RT_F32, op, req);
}
static inline void rt_allgather(rt_group *g, float *buf, long count, rt_request *req) {
  rt_allgather_typed(g, buf, count, RT_F32, req);
}
void rt_broadcast(rt_group *g, void *buf, long bytes, int root, rt_request *req);
void rt_wait(rt_request *req);      // no-op when req is not active
void rt_barrier(rt_group *g);
// A double reduced over the group (losses, norms, timings). Blocking.
double rt_allreduce_scalar(rt_group *g, double x, int op);

// Bytes this rank has sent since the last reset, counted as a ring algorithm
// sends them (what the planner predicts): all-reduce 2(n-1)/n x S,
// reduce-scatter and all-gather (n-1)/n x S, broadcast S at every rank but the last of the
// ring from the root (a pipelined ring, as NCCL runs it: the rank before the root), reduce S
// at every rank but the root (the ring's other end); S the
// buffer's bytes (count x the dtype's size), n the group's size; summed exactly and rounded down
// to whole bytes when read (as the planner's sum is). Over uneven parts, reduce-scatter and
// all-gather send S less this rank's part.
// Counted when a collective starts. One-rank groups send nothing.
int64_t rt_comm_bytes_sent(void);
void rt_comm_reset_bytes(void);

// Wall seconds this rank has spent inside the collectives, rt_wait and
// rt_barrier since rt_comm_init: the time communication kept it from
// computing, including any wait for slower ranks to arrive. A non-blocking
// collective counts only its start and its rt_wait, so what overlaps with
// compute is not counted. 0 with one rank.
double rt_comm_seconds(void);

#endif
