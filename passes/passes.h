// Graph passes. Each pass is a name and run(graph, ctx, &changed); the
// pipeline is an ordered list; the verifier runs after every pass that
// changed something, and a failure names the pass.
#ifndef MTC_PASSES_H
#define MTC_PASSES_H

#include <stdbool.h>
#include <stdio.h>

#include "ir.h"

typedef enum PassOptimizer { OPTIM_ADAMW, OPTIM_SGD } PassOptimizer;

typedef struct PassOptions {
  PassOptimizer optimizer;
  double lr;                               // default learning rate (train --lr overrides)
  double beta1, beta2, eps, weight_decay;  // AdamW (SGD uses weight_decay)
  const char *dump_after;  // print the IR after this pass ("all": after every pass)
  FILE *dump;              // where dumps go (stdout when NULL)
  bool dot;                // dumps as Graphviz instead of IR text
  const char *stop_after;  // stop the pipeline after this pass (NULL: run all)
  bool no_fusion;          // skip the fusion pass (tests compare fused and unfused graphs)
} PassOptions;

// PyTorch's AdamW defaults, except weight decay 0.
PassOptions pass_default_options(void);

// A parallel plan to lower (passes/lower.c): the mesh, micro-batches, and
// the ZeRO stage of each block.
typedef struct PassDist {
  int dp, tp;              // the mesh: dp x tp ranks
  int micro_batches;       // forward/backward passes per optimizer step
  int nzero;               // entries of zero[] (IR block ids 0 .. nzero-1)
  const int *zero;         // ZeRO stage (0-3) per block
  int zero_all;            // the stage of blocks past nzero
} PassDist;

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
} PassBucket;

typedef struct PassLowered {
  PassDist dist;
  int nbuckets;
  PassBucket *bucket;      // in the graph's arena
  int nslots;              // request slots the collectives use
} PassLowered;

typedef struct PassCtx {
  PassOptions opt;
  IrDiag *diag;
  const PassDist *dist;    // a plan to lower, or NULL (one rank, nothing to lower)
  PassLowered *lowered;    // set by pass_lower when it lowered a plan
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

// The passes, for tests.
int pass_shapes(IrGraph *g, PassCtx *ctx, bool *changed);     // infer/check every shape
int pass_fusion(IrGraph *g, PassCtx *ctx, bool *changed);     // fused ops for known patterns
int pass_autodiff(IrGraph *g, PassCtx *ctx, bool *changed);   // backward graph from g->loss
int pass_optimizer(IrGraph *g, PassCtx *ctx, bool *changed);  // AdamW / SGD update ops
int pass_lower(IrGraph *g, PassCtx *ctx, bool *changed);      // the plan: buckets, collectives
int pass_memplan(IrGraph *g, PassCtx *ctx, bool *changed);    // liveness + arena offsets

// Memory-plan queries (valid after pass_memplan).
bool pass_is_persistent(const IrValue *v);   // lives for the whole program
// The value whose bytes v shares when v is a view (a reshape's output placed
// on its input), else NULL.
const IrValue *pass_view_of(const IrValue *v);
int64_t pass_live_bytes_at(const IrGraph *g, int t); // exact bytes live at schedule position t

#endif
