// Graph passes. Each pass is a name and run(graph, ctx, &changed); the
// pipeline is an ordered list; the verifier runs after every pass that
// changed something, and a failure names the pass.
#ifndef MTC_PASSES_H
#define MTC_PASSES_H

#include <stdbool.h>
#include <stdio.h>

#include "ir.h"
#include "plan.h"

typedef enum PassOptimizer { OPTIM_ADAMW, OPTIM_SGD } PassOptimizer;

typedef enum PassPrecision { PASS_PRECISION_FP32, PASS_PRECISION_BF16 } PassPrecision;

typedef struct PassOptions {
  PassOptimizer optimizer;
  double lr;                               // default learning rate (train --lr overrides)
  double beta1, beta2, eps, weight_decay;  // AdamW (SGD uses weight_decay)
  const char *no_decay;    // POSIX extended regex: the parameters it matches (by name) get no
                           // weight decay; NULL: those of rank < 2 (norms, biases), as nanoGPT
  const char *dump_after;  // print the IR after this pass ("all": after every pass)
  FILE *dump;              // where dumps go (stdout when NULL)
  bool dot;                // dumps as Graphviz instead of IR text
  const char *stop_after;  // stop the pipeline after this pass (NULL: run all)
  bool no_fusion;          // skip the fusion pass (tests compare fused and unfused graphs)
  PassPrecision precision; // bf16 mixed precision (passes/precision.c), or fp32 throughout
} PassOptions;

// PyTorch's AdamW defaults, except weight decay 0.
PassOptions pass_default_options(void);

// A bucket (passes/lower.c) pads every parameter to PASS_ALIGN_ELEMS elements
// (64 bytes of f32) and itself to PASS_ALIGN_ELEMS x dp; the planner prices
// the same layout (solver/cost.c).
#define PASS_ALIGN_ELEMS 16
// The elements of a part of `part` that an offload share moves to the host:
// its last ones, in whole runs of PASS_ALIGN_ELEMS, the share rounded to them.
static inline int64_t pass_offload_elems(int64_t part, double share) {
  return (int64_t)(share * (double)(part / PASS_ALIGN_ELEMS) + 0.5) * PASS_ALIGN_ELEMS;
}

// One block's parameters and gradients as flat buckets (see passes/lower.c).
typedef struct PassBucket {
  const char *name;        // "b3" for IR block 3
  int block;
  int zero;                // ZeRO stage
  int64_t numel;           // elements, padded to a multiple of 16 x dp
  IrValue *params;         // the whole parameter bucket (ZeRO 0-2); NULL under ZeRO-3
  IrValue *pshard;         // ZeRO-3: this rank's 1/dp of it
  IrValue *grads;          // the whole gradient bucket backward writes (transient)
  IrValue *reduced;        // the reduced gradient the update reads
  bool reduced_sharded;    // only this rank's 1/dp of it is reduced (ZeRO 1-3): the value
                           // is that shard, or (ZeRO 1) the whole bucket, reduced in its slot
  IrNode *reduce;          // ZeRO 0, 1: the collective that update waits for
  int nstate;              // optimizer-state values per parameter (AdamW 2, SGD 0)
  int64_t part;            // elements this rank updates: numel (ZeRO 0) or numel/dp
  int64_t host_numel;      // offload: the last ones of them, updated on the host (AdamW)
  int64_t decay_end;       // weight decay reaches the elements before it (its decayed members
                           // come first), -1: all of them
  IrValue *host_params;    // offload: the host's copy of those parameters (NULL: none)
  IrValue *copies;         // bf16 mixed precision: the parameters' working copies, a bucket of
                           // numel bf16 laid out as params, written from it after the update
} PassBucket;

typedef struct PassLowered {
  Plan plan;               // the plan lowered (its blocks: the caller's)
  int nbuckets;
  PassBucket *bucket;      // in the graph's arena
  int nslots;              // request slots the collectives use
  // tensor parallelism (passes/tp.c)
  double tp_comm_bytes;    // bytes all-reduced over tp per micro-batch (an all-gather of n
                           // bytes counts n/2), from the collectives pass_shard lists
  bool loss_tp_partial;    // each tp rank's loss is its term of a sum
  int nreplicated;         // parameters tp leaves replicated on every rank of its group, and
  const char **replicated; // why ("w2: its output dim K = 3 does not divide by tp = 2")
} PassLowered;

// The static memory plan (passes/memplan.c): a table beside the graph, by
// value id. Every rank of an SPMD program has the same one.
typedef struct MemPlan {
  int nvalues;
  int64_t *offset;         // in the arena, or (a host value) in the host region
  int64_t *bytes;
  int *first_use, *last_use; // schedule positions of its live range
  int64_t arena_bytes;     // what the program allocates
  int64_t persistent_bytes;// the arena's first part: inputs, parameters, state, the loss
  int64_t host_bytes;      // the host region (host values, all persistent); 0: none
  int64_t peak_live_bytes; // the most bytes live at once: the lower bound of any plan
  int peak_at;             // ... at this schedule position
  const Sym *peak_formula; // ... as a formula
} MemPlan;

void pass_memplan_free(MemPlan *m);

typedef struct PassCtx {
  PassOptions opt;
  IrDiag *diag;
  const Plan *plan;        // the layout to lower (recompute, lower), or NULL: one rank as the
                           // model is (so inspect and plan need none)
  PassLowered *lowered;    // set by pass_lower when it lowered a plan
  int nlayers;             // set by pass_recompute: the model's repeated layers (IR blocks 1..)
  int ncheckpointed;       // ... and how many of them backward recomputes
  MemPlan *mem;            // set by pass_memplan; the caller frees it (pass_memplan_free)
} PassCtx;

typedef struct Pass {
  const char *name;
  int (*run)(IrGraph *g, PassCtx *ctx, bool *changed);
} Pass;

// The pipeline, in order, terminated by {NULL, NULL}.
extern const Pass pass_pipeline[];
bool pass_exists(const char *name);

// Run the whole pipeline (or up to opt.stop_after). -1 and ctx->diag on error.
int pass_run_all(IrGraph *g, PassCtx *ctx);
// The pipeline in the two stages the plan goes between (main): the training
// graph (shapes .. precision: what the planner reads), then the plan's
// lowering (recompute, lower, memplan; up to opt.stop_after).
#define PASS_TRAINING_LAST "precision"
int pass_build_training(IrGraph *g, PassCtx *ctx);
int pass_lower_plan(IrGraph *g, PassCtx *ctx);

// The passes, for tests.
int pass_shapes(IrGraph *g, PassCtx *ctx, bool *changed);     // infer/check every shape
int pass_fusion(IrGraph *g, PassCtx *ctx, bool *changed);     // fused ops for known patterns
int pass_autodiff(IrGraph *g, PassCtx *ctx, bool *changed);   // backward graph from g->loss
int pass_optimizer(IrGraph *g, PassCtx *ctx, bool *changed);  // AdamW / SGD update ops
// How many of g's parameters there are, and how many of them the optimizer
// pass decays under o (weight decay by role, --no-decay).
int pass_count_decayed(const IrGraph *g, const PassOptions *o, int *nparams, int *ndecayed,
                       IrDiag *d);
int pass_precision(IrGraph *g, PassCtx *ctx, bool *changed);  // bf16 mixed precision (--precision)
int pass_recompute(IrGraph *g, PassCtx *ctx, bool *changed);  // checkpointed blocks in backward
int pass_lower(IrGraph *g, PassCtx *ctx, bool *changed);      // the plan: buckets, collectives
int pass_memplan(IrGraph *g, PassCtx *ctx, bool *changed);    // liveness + arena offsets
// Tensor parallelism of degree tp over every block (passes/tp.c; pass_lower
// calls it before data parallelism): per-rank shapes and the conversions
// between layouts. -1 with d when the plan cannot be lowered.
int pass_lower_tp(IrGraph *g, int tp, PassLowered *out, IrDiag *d);

// Repeated blocks (passes/repeat.c). A run is `count` consecutive stretches
// of the schedule, each all the nodes of one block in one phase, for blocks
// block, block + step, ... (step +1 in forward order, -1 in backward), each
// the same as the first node by node, values at the same places. The memory
// plan lays the values at one place of a run out at a constant stride; the
// emitter writes a run as one loop.
typedef struct PassRun {
  int first;   // schedule position of the first stretch's first node
  int len;     // nodes per stretch
  int count;   // stretches (blocks), at least 2
  int block;   // the IR block id of the first stretch
  int step;    // +1 or -1
} PassRun;

PassRun *pass_find_runs(const IrGraph *g, int *nruns);   // malloc'd, in schedule order
// A run's places: its stretch's node inputs and outputs, node by node.
int pass_run_places(const IrGraph *g, const PassRun *r);
IrValue *pass_run_value(const IrGraph *g, const PassRun *r, int stretch, int place);

// Memory-plan queries.
bool pass_is_persistent(const IrValue *v);   // lives for the whole program
// The value whose bytes v shares when v is a view (a reshape's output placed
// on its input, or a value in a bucket), else NULL.
const IrValue *pass_view_of(const MemPlan *m, const IrValue *v);
// Exact bytes live at schedule position t.
int64_t pass_live_bytes_at(const MemPlan *m, const IrGraph *g, int t);

// ---- sharding (passes/shard.c) ---------------------------------------------------
//
// GSPMD-style layouts: per dim of a value, replicated or split over a mesh
// axis, plus the axes over which it is a partial sum still to be reduced. Each
// op of ir/ops.def has a sharding rule (shard_<op>) that maps its inputs'
// layouts to the layouts it needs them in and to its outputs' layouts;
// pass_shard propagates a plan's per-block tensor-parallel degrees through the
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

// What to propagate: the batch split over dp ranks, each block's tp degree.
typedef struct ShardSpec {
  int dp;                  // data-parallel degree (1: the batch is not split)
  int nblocks;             // entries of tp (IR block ids 0 .. nblocks-1)
  const int *tp;           // tp[b]: block b's tensor-parallel degree (1: none; SHARD_TP_ANY)
  bool pad_vocab;          // an embedding table whose vocabulary the degree does not divide is
                           // split all the same: the lowering pads it (passes/tp.c)
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
  const Sym *count;          // elements per rank: the buffer a ring all-reduce moves 2(n-1)/n of,
                             // an all-gather or reduce-scatter (n-1)/n of
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
// (free it with pass_shard_free); -1 with d when a layout cannot be carried:
// attention heads that do not divide by the block's tp, a batch that does not
// divide by dp. Never fails with SHARD_TP_ANY and dp 1.
int pass_shard(IrGraph *g, const ShardSpec *spec, ShardResult *out, IrDiag *d);
void pass_shard_free(ShardResult *r);
// The layout node n reads its input k in.
const ShardLayout *pass_shard_use(const ShardResult *r, const IrNode *n, int k);
// Is dim (as a formula) one of the vocabularies r splits for the lowering to pad?
bool pass_shard_pads(const ShardResult *r, const Sym *dim);
// "[B/dp, T, C/tp]", "[B, T, C] partial(tp)": v's dims with their splits (snprintf semantics).
int pass_shard_layout_str(char *buf, size_t n, const IrGraph *g, const IrValue *v,
                          const ShardLayout *l);
// "all_reduce", "reduce_scatter", "all_gather"
const char *pass_shard_kind_name(ShardKind k);
// What collective c moves, as elements of a ring all-reduce: its count for an
// all-reduce, half of it for an all-gather or reduce-scatter (one ring pass
// instead of two). The cost model prices it and the lowering predicts bytes from it.
const Sym *pass_shard_allreduce_elems(IrGraph *g, const ShardColl *c);
// ... as bytes: of the value's element type (float32 for an op's row statistics).
const Sym *pass_shard_allreduce_bytes(IrGraph *g, const ShardColl *c);
// Every node with its layouts, each collective under its node, the notes and
// requirements: for tests and for reading a plan.
void pass_shard_print(FILE *f, IrGraph *g, const ShardResult *r);

#endif
