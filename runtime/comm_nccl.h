// NCCL under comm.h, for the GPU build of a multi-rank program: comm_mpi.c
// compiled with -DRT_COMM_NCCL hands every collective on device memory to
// the functions here and keeps MPI for the rest (host buffers: train.c's
// gathers for --save, the loss, barriers). MPI launches the ranks; rank 0
// makes the NCCL id and MPI broadcasts it; each MPI group has its NCCL
// communicator, split from the world's.
//
// Collectives run on their own stream, after what the kernels' stream
// (rt_cuda_stream) has launched before them; a blocking one (req NULL)
// makes the kernels' stream wait for it, a non-blocking one only when
// rt_wait is called. The host never waits: the stream order is the contract.
#ifndef MTC_RT_COMM_NCCL_H
#define MTC_RT_COMM_NCCL_H

#include <mpi.h>

#include "comm.h"

typedef struct rt_nccl rt_nccl;  // a group's communicator

// After MPI_Init: the world's communicator, one GPU per rank (device.h picks it).
rt_nccl *rt_nccl_world(MPI_Comm world, int size, int rank);
rt_nccl *rt_nccl_split(rt_nccl *parent, int color, int key);
void rt_nccl_free(rt_nccl *c);

// Whether buf is device memory (NCCL's) rather than host memory (MPI's).
int rt_nccl_owns(const void *buf);

// The collectives of comm.h on device memory, in place, with NCCL's in-place
// layouts (which are comm.h's). req, when given, gets what rt_nccl_wait needs.
// parts: the group's uneven parts (parts.h), or NULL; NCCL's reduce-scatter and
// all-gather take equal ones, so uneven parts are a reduce to each rank of its part
// (and a broadcast from each rank of its part), grouped into one launch.
void rt_nccl_allreduce(rt_nccl *c, void *buf, long count, int dtype, int op, rt_request *req);
void rt_nccl_reduce_scatter(rt_nccl *c, void *buf, long count, int dtype, int op,
                            const int *parts, rt_request *req);
void rt_nccl_allgather(rt_nccl *c, void *buf, long count, int dtype, const int *parts,
                       rt_request *req);
void rt_nccl_broadcast(rt_nccl *c, void *buf, long bytes, int root, rt_request *req);
void rt_nccl_reduce(rt_nccl *c, void *buf, long count, int dtype, int op, int root,
                    rt_request *req);
void rt_nccl_wait(rt_request *req);

#endif
