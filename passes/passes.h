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

typedef struct PassCtx {
  PassOptions opt;
  IrDiag *diag;
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
int pass_memplan(IrGraph *g, PassCtx *ctx, bool *changed);    // liveness + arena offsets

// Memory-plan queries (valid after pass_memplan).
bool pass_is_persistent(const IrValue *v);   // lives for the whole program
// The value whose bytes v shares when v is a view (a reshape's output placed
// on its input), else NULL.
const IrValue *pass_view_of(const IrValue *v);
int64_t pass_live_bytes_at(const IrGraph *g, int t); // exact bytes live at schedule position t

#endif
