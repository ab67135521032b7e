// The plan: the layout a program runs, as one struct from the planner (or
// the flags that force a layout) through the lowering to the emitted program.
//
// A Mesh names the axes of the device mesh with their sizes; a value's layout
// (ir/shard.c) splits its dims over these axes. Every rank of the program
// runs the same code on its coordinates in the mesh (SPMD).
#ifndef MTC_PLAN_H
#define MTC_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir.h"

typedef struct Mesh {
  int size[IR_MESH_NAXES];   // ranks along each axis (1: not split; size[IR_MESH_NONE] is 1)
} Mesh;

Mesh mesh_make(int dp, int tp);
// m, where blocks may also be tensor parallel over s ranks of its tp (1 < s < tp, s divides
// tp; PlanBlock.sub): size[IR_MESH_SUB] s, size[IR_MESH_SUBDP] tp / s.
Mesh mesh_with_sub(Mesh m, int s);
// m, where blocks may also be Optimus 2D on a q x q grid of its tp ranks (PlanBlock.grid):
// size[IR_MESH_ROW] and size[IR_MESH_COL] q; where q * q < tp (q * q dividing it), on each
// group of sub = q * q of them (as mesh_with_sub), their batch over subrow (tp / sub x q).
// (m's sub, if any, is q * q.)
Mesh mesh_with_grid(Mesh m, int q);
// The rows 2D blocks on q x q grids of tp ranks cut each micro-batch into: the grids' rows of
// all tp / (q x q) grids (size[IR_MESH_SUBROW]), q for one grid.
int mesh_grid_rows(int tp, int q);
// dp replicas of a q x q grid (Optimus 2D).
Mesh mesh_grid(int dp, int q);
// The ranks of the mesh (sub, subdp and subrow factor tp, and so does a grid inside it: they
// add none).
int mesh_ranks(const Mesh *m);
// "dp 2 x tp 2", "dp 1 x 2D 2x2" (snprintf semantics)
int mesh_str(char *buf, size_t n, const Mesh *m);

// Checkpointing (or swapping) every repeated layer left (Plan.checkpoint, Plan.swap).
#define PLAN_CHECKPOINT_ALL (-1)

// What the plan chose for one block.
typedef struct PlanBlock {
  int zero;            // ZeRO stage, 0 to 3
  double offload;      // the share (0 to 1) of its optimizer state, and of its update, on the
                       // host (passes/lower.c)
  bool offload_grads;  // its gradients too (ZeRO-Offload): each micro-batch's leaves the device
                       // once reduced, accumulated on the host; needs offload 1
  bool offload_params; // its parameters too (ZeRO-Infinity's offload_param): this rank's shard
                       // lives in host memory only, copied to the device (and gathered) before
                       // forward's and backward's reads, as ZeRO-3 gathers it; needs ZeRO-3
                       // and offload_grads
  bool batch_tp;       // data parallel over the mesh's tp ranks too: they split its batch and
                       // each holds its weights whole (the planner's pure data-parallel block
                       // in a tensor-parallel program, ir/shard.c); needs tp > 1
  bool sub;            // tensor parallel over the mesh's sub ranks only (TP2 beside TP4), and
                       // data parallel over its subdp ranks: its batch split over them, its
                       // weights split over sub (ir/shard.c); needs the mesh's sub > 1
  bool grid;           // Optimus 2D on the q x q grid of the mesh's tp ranks (2D beside 1D;
                       // ir/shard.c), or on each of its sub groups' grids, data parallel over
                       // subdp; needs a mesh of tp > 1 with a grid inside it
} PlanBlock;

typedef struct Plan {
  bool lower;          // false: the model as it is on one rank, nothing lowered (no buckets,
                       // no collectives); true: the layout below, even on one rank
  Mesh mesh;           // every block's
  bool seq_parallel;   // Megatron's sequence parallelism under tp (passes/shard.c)
  int micro_batches;   // forward/backward passes per replica per optimizer step: the most
                       // any replica runs, and what each runs unless replica_micro is set
  int *replica_micro;  // NULL, or dp entries: replica d runs replica_micro[d] micro-batches (a
                       // mixed cluster's uneven batch shares; malloc'd, plan_free)
  int *replica_rows;   // NULL, or dp entries: replica d's micro-batches hold replica_rows[d]
                       // sequences (a mixed cluster's groups' micro-batch sizes; malloc'd,
                       // plan_free). Each run of replicas with one size is a program of its own
                       // (plan_programs), whose micro is its size
  int *replica_parts;  // NULL, or dp entries: the ratio (runtime/parts.h) of replica d's part of
                       // each bucket sharded over dp (a mixed cluster's uneven state shares;
                       // malloc'd, plan_free). Each run of replicas with one part is a program of
                       // its own (its sizes are its parts'): the lowering is for the replicas
  int part_first, part_end;   // [part_first, part_end), one such run (plan_programs)
  int64_t micro, seq;  // sequences per micro-batch and their length as planned (0: the model's)
  int swap;            // repeated layers whose activations go to host memory after forward and
                       // back before backward (passes/swap.c): the first S (IR blocks 1..S),
                       // PLAN_CHECKPOINT_ALL (all of them), or 0 (none)
  int checkpoint;      // repeated layers whose forward backward recomputes (passes/recompute.c):
                       // the first K after the swapped ones (IR blocks S+1..S+K),
                       // PLAN_CHECKPOINT_ALL (all of those), or 0 (none)
  int nblocks;         // entries of block (IR block ids 0 .. nblocks-1)
  PlanBlock *block;    // malloc'd (plan_free)
  PlanBlock rest;      // the choice of blocks past nblocks
} Plan;

// One rank, nothing lowered, no checkpointing.
Plan plan_single(void);
// Room for n blocks' choices, each `rest`. -1 when out of memory.
int plan_alloc_blocks(Plan *p, int n);
void plan_free(Plan *p);
// Block b's choice.
const PlanBlock *plan_block(const Plan *p, int b);
// Does any block shard its state (ZeRO 1-3)?
bool plan_shards_state(const Plan *p);
// The micro-batches replica d runs, and all replicas together per step.
int plan_replica_micro(const Plan *p, int d);
int64_t plan_micro_total(const Plan *p);
// The sequences of replica d's micro-batches (Plan.micro unless replica_rows says), and of the
// step's, all replicas together (0 when Plan.micro is 0: the model's, one size).
int64_t plan_replica_rows(const Plan *p, int d);
int64_t plan_rows_total(const Plan *p);
// Group i's replicas (ranks numbered group by group, gpus[i] GPUs each) run micro-batches of
// rows[i] sequences: replica_rows, or NULL when they are all equal; micro the first group's.
// -1 when out of memory.
int plan_set_group_rows(Plan *p, int ngroups, const int64_t *gpus, const int64_t *rows);
// Replica d runs counts[d] (dp entries, each at least 1): replica_micro, or
// NULL when they are all equal; micro_batches the most. -1 when out of memory.
int plan_set_replica_micro(Plan *p, const int *counts);
// The same from groups of GPUs, ranks numbered group by group: group i has
// gpus[i] GPUs (a whole number of the mesh's replicas) whose replicas share
// runs[i] micro-batches evenly (the caller has checked both divide).
int plan_set_group_micro(Plan *p, int ngroups, const int64_t *gpus, const int64_t *runs);
// Replica d's part of each sharded bucket is parts[d] (dp entries, each at least 1):
// replica_parts, or NULL when they are all equal; the program lowered is the first's. -1 when out
// of memory.
int plan_set_replica_parts(Plan *p, const int *parts);
// The programs of the plan: runs of replicas with one part and one micro-batch size (one
// program when both are equal). Program k's replicas, [*first, *end), for k below the count
// returned.
int plan_programs(const Plan *p, int k, int *first, int *end);

#endif
