// Graph passes. Each pass is a name and run(graph, ctx, &changed); the
// pipeline is an ordered list; the verifier runs after every pass that
// changed something, and a failure names the pass.
#ifndef MTC_PASSES_H
#define MTC_PASSES_H

#include <regex.h>
#include <stdbool.h>
#include <stdio.h>

#include "ir.h"
#include "plan.h"
#include "shard.h"

typedef enum PassOptimizer { OPTIM_ADAMW, OPTIM_SGD } PassOptimizer;

typedef enum PassPrecision { PASS_PRECISION_FP32, PASS_PRECISION_BF16 } PassPrecision;

typedef struct PassOptions {
  PassOptimizer optimizer;
  double lr;                               // default learning rate (train --lr overrides)
  double beta1, beta2, eps, weight_decay;  // AdamW (SGD uses weight_decay)
  const char *no_decay;    // POSIX extended regex: the parameters it matches (by name) get no
                           // weight decay; NULL: those of rank < 2 (norms, biases), as nanoGPT
  const char *freeze;      // POSIX extended regex: the parameters it matches are not trained
                           // (passes/freeze.c); NULL: every parameter is
  const char *padding_idx; // "REGEX=ROW": embedding tables the regex matches give row ROW no
                           // gradient (PyTorch's padding_idx; passes/freeze.c); NULL: none
  const char *dump_after;  // print the IR after this pass ("all": after every pass)
  FILE *dump;              // where dumps go (stdout when NULL)
  bool dot;                // dumps as Graphviz instead of IR text
  const char *stop_after;  // stop the pipeline after this pass (NULL: run all)
  bool no_fusion;          // skip the fusion pass (tests compare fused and unfused graphs)
  bool no_epilogue;        // --no-epilogue: no GEMM epilogues (passes/epilogue.c)
  PassPrecision precision; // bf16 mixed precision (passes/precision.c), or fp32 throughout
  bool grads_bf16;         // under bf16: the parameters' gradients in bf16 too (ZeRO's 16 bytes
                           // a parameter), made, accumulated and reduced in bf16
} PassOptions;

// PyTorch's AdamW defaults, except weight decay 0.
PassOptions pass_default_options(void);

// A bucket (passes/lower.c) pads every parameter to PASS_ALIGN_ELEMS elements
// (64 bytes of f32) and itself to PASS_ALIGN_ELEMS x its shards (dp, or every rank for a block
// data parallel over tp); the planner prices the same layout (solver/cost.c).
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
  IrMeshAxis axis;         // the axis it is reduced and sharded over: dp, or (a block data
                           // parallel over tp, its gradients partial sums over tp) every rank
  int shards;              // the ranks along that axis
  int64_t numel;           // elements, padded to a multiple of 16 x shards (x the sum of the
                           // replicas' parts, Plan.replica_parts)
  int64_t shard;           // elements of this rank's shard: numel / shards, or its part
  IrValue *params;         // the whole parameter bucket (ZeRO 0-2); NULL under ZeRO-3
  IrValue *pshard;         // ZeRO-3: this rank's 1/shards of it
  IrValue *grads;          // the whole gradient bucket backward writes (transient)
  IrValue *reduced;        // the reduced gradient the update reads
  bool bwd_gather;         // ZeRO-3: backward gathers the bucket again (false: backward reads
                           // none of its parameters)
  bool reduced_sharded;    // only this rank's 1/shards of it is reduced (ZeRO 1-3): the value
                           // is that shard, or (ZeRO 1) the whole bucket, reduced in its slot
  IrNode *reduce;          // ZeRO 0, 1: the collective that update waits for
  int nstate;              // optimizer-state values per parameter (AdamW 2, SGD 0)
  int64_t part;            // elements this rank updates: numel (ZeRO 0) or numel/shards
  int64_t host_numel;      // offload: the last ones of them, updated on the host (AdamW)
  int64_t decay_end;       // weight decay reaches the elements before it (its decayed members
                           // come first), -1: all of them
  IrValue *host_params;    // offload: the host's copy of those parameters (NULL: none)
  IrValue *host_grads;     // offload: the host's copy of their reduced gradient (NULL: none);
                           // with offload_grads made in backward, the only one kept
  IrValue *copies;         // bf16 mixed precision: the parameters' working copies, a bucket of
                           // numel bf16 laid out as params, written from it after the update
                           // (parameter offload: this rank's shard of it, in host memory)
  bool params_host;        // parameter offload (PlanBlock.offload_params): host_params is this
                           // rank's only copy of the last host_numel elements of its shard of
                           // the parameters, all of it or the offload share (bf16: and copies,
                           // or host_copies, of their working copies); forward's and backward's
                           // gathers take those from the host
  IrValue *host_copies;    // bf16 parameter offload of part of the shard: the host's working
                           // copies of its last host_numel elements (copies: the device's of
                           // the rest); NULL where all or none of it is offloaded
} PassBucket;

typedef struct PassLowered {
  Plan plan;               // the plan lowered (its blocks: the caller's)
  int nbuckets;
  PassBucket *bucket;      // in the graph's arena
  int nslots;              // request slots the collectives use
  // tensor parallelism (passes/tp.c)
  double tp_comm_bytes[IR_MESH_NAXES];  // bytes all-reduced over each of the axes that split
                           // one replica (tp; the grid's rows and columns; sub, subdp) per
                           // micro-batch (an all-gather of n bytes counts n/2), from the
                           // collectives ir_shard lists
  double dp_sync_bytes;    // bytes all-reduced over dp per micro-batch for the batch's statistics
                           // (SyncBatchNorm: passes/lower.c's row_syncs)
  unsigned loss_partial;   // the axes (1 << IrMeshAxis: tp, row) over which each rank's loss
                           // is its term of a sum
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
  const Plan *plan;        // the layout to lower (recompute, lower, swap), or NULL: one rank as the
                           // model is (so inspect and plan need none)
  PassLowered *lowered;    // set by pass_lower when it lowered a plan
  int nlayers;             // set by pass_recompute: the model's repeated layers (IR blocks 1..)
  int ncheckpointed;       // ... and how many of them backward recomputes
  int nswapped;            // set by pass_swap: the layers whose activations go to the host
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
// lowering (recompute, lower, swap, memplan; up to opt.stop_after).
#define PASS_TRAINING_LAST "vocab"
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
int pass_freeze(IrGraph *g, PassCtx *ctx, bool *changed);     // --freeze: parameters made constants
// A flag's pattern (--no-decay, --freeze: POSIX extended, names only) compiled
// into *re (regfree it), or -1 with d naming the flag.
int pass_regex(regex_t *re, const char *flag, const char *pattern, IrDiag *d);
// How many parameters --freeze froze (pass_freeze), their names in the graph's
// order into names ("" when none; at most cap bytes) and their elements.
int pass_frozen(const IrGraph *g, char *names, size_t cap, int64_t *elems);
int pass_recompute(IrGraph *g, PassCtx *ctx, bool *changed);  // checkpointed blocks in backward
int pass_lower(IrGraph *g, PassCtx *ctx, bool *changed);      // the plan: buckets, collectives
// A linear layer's bias add, and the GELU after it, as their GEMM's epilogue (passes/epilogue.c).
int pass_epilogue(IrGraph *g, PassCtx *ctx, bool *changed);
// A node that becomes a matmul's epilogue: the matmul (NULL: none), and for a bias gradient,
// which of the matmul's operands it sums (matmul_bgrad's "of").
typedef struct {
  IrNode *into;
  int of;
} PassEpilogue;
// For each node of g (by id), the matmul whose epilogue it becomes: the adds of a bias, the
// GELUs after them and the bias gradients, by pass_epilogue's rule (the planner prices g before
// the pass with it). A calloc'd array the caller frees.
PassEpilogue *pass_epilogues(IrGraph *g);
int pass_swap(IrGraph *g, PassCtx *ctx, bool *changed);       // swapped layers' activations to host
int pass_copies(IrGraph *g, PassCtx *ctx, bool *changed);     // copies, gathers beside compute
// The highest block id of a forward node: the number of repeated layers (IR blocks 1..L).
int pass_count_layers(const IrGraph *g);
int pass_memplan(IrGraph *g, PassCtx *ctx, bool *changed);    // liveness + arena offsets
// Tensor parallelism of the plan's mesh's tp (with Megatron's sequence
// parallelism or without), or its q x q grid (Optimus 2D), over every block,
// or the tp ranks splitting the batch of the blocks that say so
// (PlanBlock.batch_tp) (passes/tp.c; pass_lower calls it before data
// parallelism): per-rank shapes and the conversions between layouts. -1 with
// d when the plan cannot be lowered.
int pass_lower_tp(IrGraph *g, const Plan *P, PassLowered *out, IrDiag *d);
// The vocabulary of the loss's logits padded with zeros to a multiple of
// align (passes/tp.c says where it can be): its tables, logits and their
// gradients, so that each row of logits starts aligned. Nothing is padded
// where align <= 1 or an op would not keep the padding zero.
int pass_pad_vocab(IrGraph *g, int align, IrDiag *d);
#define PASS_VOCAB_ALIGN 128   // bf16 programs' (llm.c's and Megatron's multiple)
int pass_vocab(IrGraph *g, PassCtx *ctx, bool *changed);      // bf16: pass_pad_vocab

// Node `at` made v: the position of the last node that finishes it, the
// all_reduce and comm_wait over it in place that follow `at`, if any.
int pass_reduced_at(const IrGraph *g, int at, const IrValue *v);

// Repeated blocks (passes/repeat.c). A run is `count` consecutive stretches
// of the schedule, each all the nodes of one block in one phase, for blocks
// block, block + step, ... (step +1 in forward order, -1 in backward), each
// the same as the first node by node, values at the same places. The memory
// plan lays the values at one place of a run out at a constant stride; the
// emitter writes a run as one loop.
typedef struct PassRun {
  int first;   // schedule position of the first stretch's first node
  int len;     // nodes per stretch
  int count;   // stretches (blocks, or uses of one block's shared layers), at least 2
  int block;   // the IR block id of the first stretch
  bool by_use; // the stretches are uses of one block's layers (IrNode.use), not blocks
  int use;     // ... and the first stretch's use
  int step;    // +1 or -1
} PassRun;

PassRun *pass_find_runs(const IrGraph *g, int *nruns);   // malloc'd, in schedule order
// The block id (by_use: the use) of stretch j of a run.
int pass_run_index(const PassRun *r, int j);
// A run's places: its stretch's node inputs and outputs, node by node.
int pass_run_places(const IrGraph *g, const PassRun *r);
IrValue *pass_run_value(const IrGraph *g, const PassRun *r, int stretch, int place);

// Memory-plan queries.
bool pass_is_persistent(const IrValue *v);   // lives for the whole program
// The value whose bytes v shares when v is a view (a reshape's output placed
// on its input, or a value in a bucket), else NULL.
const IrValue *pass_view_of(const MemPlan *m, const IrValue *v);
// The input of node n whose buffer its output *out may take (its kernel reads each element of
// it before it writes that element of the output), or -1: memplan gives it where that buffer
// dies at n.
int pass_in_place(const IrNode *n, int *out);
// Exact bytes live at schedule position t.
int64_t pass_live_bytes_at(const MemPlan *m, const IrGraph *g, int t);

#endif
