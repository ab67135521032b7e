#ifndef MTC_SHARD_H
#define MTC_SHARD_H

#include <stdio.h>

#include "ir.h"

// Sharding (ir/shard.c): each op's sharding rule, beside the op table, and
// the propagation of a plan's layouts through a training graph.
//
// GSPMD-style layouts: per dim of a value, replicated or split over a mesh
// axis, plus the axes over which it is a partial sum still to be reduced. Each
// op of ir/ops.def has a sharding rule (shard_<op>) that maps its inputs'
// layouts to the layouts it needs them in and to its outputs' layouts;
// ir_shard propagates a plan's per-block tensor-parallel degrees through the
// whole training graph (forward, backward, update) and lists the collectives
// those layouts imply. It does not change the graph: the lowering reads the
// result, and the cost model (solver/cost.c) prices the same collectives.
//
// Converting a value between layouts: replicated -> split is free (each rank
// keeps its slice); split -> replicated is an all_gather; partial ->
// replicated an all_reduce; partial -> split a reduce_scatter.

// The tp degree of a block whose degree is not known yet (the cost model
// prices every tp > 1 from one propagation): every split is assumed to divide
// and recorded as a requirement.
#define SHARD_TP_ANY (-1)

typedef struct ShardLayout {
  int rank;                          // the value's rank
  unsigned char split[IR_MAXRANK];   // per dim: IR_MESH_NONE (replicated) or the axis it is
                                     // split over
  unsigned char partial;             // bit (1 << axis): a partial sum over that axis, pending
                                     // reduction
} ShardLayout;

// What to propagate: the batch split over dp ranks, each block's tp degree
// or the 2D grid.
typedef struct ShardSpec {
  int dp;                  // data-parallel degree (1: the batch is not split; SHARD_TP_ANY:
                           // split, its degree left open, as the batch of a program whose
                           // shapes are one rank's)
  int nblocks;             // entries of tp (IR block ids 0 .. nblocks-1)
  const int *tp;           // tp[b]: block b's tensor-parallel degree (1: none; SHARD_TP_ANY)
  const bool *batch_tp;    // NULL, or batch_tp[b]: block b is data parallel over its tp[b]
                           // ranks instead: its batch splits over tp, its weights are whole
                           // (their gradients partial sums over tp, left so for the update)
  bool pad_vocab;          // an embedding table whose vocabulary the degree does not divide is
                           // split all the same: the lowering pads it (passes/tp.c)
  bool seq_parallel;       // Megatron's sequence parallelism in tensor-parallel blocks: the
                           // activations between their tp regions split on the sequence
  int mesh_tp;             // the program's tp (0: every block's own): a block whose tp[b] is
                           // above 1 and below it splits its ops over IR_MESH_SUB (tp[b]
                           // ranks) and its batch over IR_MESH_SUBDP (mesh_tp / tp[b] ranks),
                           // its weights' gradients partial sums over subdp
  int q;                   // Optimus 2D: the side of every block's q x q grid (0 or 1: none;
                           // SHARD_TP_ANY: not known yet; with tp 1 and dp 1): the batch
                           // splits over its rows, features over its columns, a weight
                           // [k, n] as [k/q, n/q]
} ShardSpec;

typedef enum ShardKind { SHARD_ALL_REDUCE, SHARD_REDUCE_SCATTER, SHARD_ALL_GATHER } ShardKind;

// Where a collective goes relative to its node.
typedef enum ShardAt {
  SHARD_BEFORE,   // on input `operand` before the node runs (that consumer needs another layout)
  SHARD_AFTER,    // on output `operand` right after the node (every later reader sees the result)
  SHARD_WITHIN,   // inside the node's kernel (a vocabulary-parallel cross-entropy's row statistics)
} ShardAt;

typedef struct ShardColl {
  const IrNode *node;
  ShardAt at;
  int operand;               // input (BEFORE) or output (AFTER) index; -1 WITHIN
  const IrValue *value;      // the value reduced or gathered (WITHIN: the input it comes from)
  ShardKind kind;
  IrMeshAxis axis;
  int dim;                   // the dim a reduce_scatter splits or an all_gather makes whole
                             // (-1: an all_reduce)
  const Sym *count;          // elements per rank: the buffer a ring all-reduce moves 2(n-1)/n of,
                             // an all-gather or reduce-scatter (n-1)/n of
  unsigned char over;        // the axes (1 << axis) that buffer is split over: count is divided
                             // by their degrees, except those that are SHARD_TP_ANY
  IrPhase phase;             // node->phase
  int block;                 // node->block
  char what[96];             // "partial sum of a row-parallel matmul", "row max", ...
} ShardColl;

// A split the propagation assumed divides: dim must be a multiple of the
// axis's degree (the degree is unknown, or the dim is unbound).
typedef struct ShardNeed {
  const IrNode *node;
  const Sym *dim;
  IrMeshAxis axis;
  int block;
} ShardNeed;

// A parameter left replicated in a tensor-parallel block, and why.
typedef struct ShardNote {
  const IrValue *param;
  const IrNode *node;
  char text[160];            // "replicated: w2: its output dim K = 3 does not divide by tp = 2"
} ShardNote;

typedef struct ShardResult {
  int nvalues, nnodes;
  ShardLayout *layout;       // [value id]: as produced (parameters and state: as seeded;
                             // inputs: as fed)
  int *use_at;               // [node id]: index into use of its first input
  ShardLayout *use;          // the layout each node reads each input in (after any collective)
  int ncolls;
  ShardColl *coll;
  int nneeds;
  ShardNeed *need;
  int nnotes;
  ShardNote *note;
  int nvocab;                // vocabularies (embedding tables' first dims, as formulas) split
  const Sym *vocab[4];       // over tp though the degree does not divide them: spec->pad_vocab,
                             // tp.c pads every dim of one of these formulas
} ShardResult;

// Propagates spec through g (after the optimizer pass). 0 with *out filled
// (free it with ir_shard_free); -1 with d when a layout cannot be carried:
// attention heads that do not divide by the block's tp, a batch that does not
// divide by dp. Never fails with SHARD_TP_ANY and dp 1.
int ir_shard(IrGraph *g, const ShardSpec *spec, ShardResult *out, IrDiag *d);
void ir_shard_free(ShardResult *r);
// The layout node n reads its input k in.
const ShardLayout *ir_shard_use(const ShardResult *r, const IrNode *n, int k);
// Is dim (as a formula) one of the vocabularies r splits for the lowering to pad?
bool ir_shard_pads(const ShardResult *r, const Sym *dim);
// "[B/dp, T, C/tp]", "[B, T, C] partial(tp)": v's dims with their splits (snprintf semantics).
int ir_shard_layout_str(char *buf, size_t n, const IrGraph *g, const IrValue *v,
                        const ShardLayout *l);
// "all_reduce", "reduce_scatter", "all_gather"
const char *ir_shard_kind_name(ShardKind k);
// What collective c moves, as elements of a ring all-reduce: its count for an
// all-reduce, half of it for an all-gather or reduce-scatter (one ring pass
// instead of two). The cost model prices it and the lowering predicts bytes from it.
const Sym *ir_shard_allreduce_elems(IrGraph *g, const ShardColl *c);
// ... as bytes: of the value's element type (float32 for an op's row statistics).
const Sym *ir_shard_allreduce_bytes(IrGraph *g, const ShardColl *c);
// Every node with its layouts, each collective under its node, the notes and
// requirements: for tests and for reading a plan.
void ir_shard_print(FILE *f, IrGraph *g, const ShardResult *r);

#endif
