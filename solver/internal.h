// Declarations shared by the solver's files; not part of its interface.
#ifndef MTC_SOLVER_INTERNAL_H
#define MTC_SOLVER_INTERNAL_H

#include "solver.h"

#define GiB (1024.0 * 1024.0 * 1024.0)

// ---- cost.c --------------------------------------------------------------------------

// What a choice's cost depends on besides the block.
typedef struct SvCtx {
  const SvConfig *cfg;
  int gpus;                  // all GPUs
  int64_t micro_total;       // micro-batches per step
} SvCtx;

void sv_num_eval(const SvModel *m, const SvConfig *cfg, int block, SvNum *out);
// The cost of one block with layout l on a device of group g.
// With grads, the gradients leave the device too (offload 100 only), with params the
// parameters (ZeRO-3 and grads only); with swap (not with ckpt), its activations wait in host
// memory between forward and backward.
void sv_cost(const SvCtx *x, const SvNum *n, SvLayout l, bool ckpt, bool swap, int zero,
             int offload, bool grads, bool params, int g, SvCost *out);
// Seconds to move `bytes` of a block boundary between two layouts, per step.
double sv_reshard_time(const SvCtx *x, double bytes, SvLayout a, SvLayout b, int g);

// ---- problem.c -----------------------------------------------------------------------

// The problem of model m under cfg's bindings. nums gets one SvNum per unit
// (the cost of the unit's representative block). NULL with d on bad input.
SvProblem *sv_problem_build(const SvModel *m, const SvConfig *cfg, SvNum **nums, IrDiag *d);
// Sums a choice's categories into its totals.
void sv_choice_fill(SvChoice *c, int g, const SvCost *k);
// Unit u's choice c can checkpoint (or swap) some of the unit's blocks and not the others
// (SvSolution.nplain > 0): a checkpointing choice of several blocks, on one group of GPUs
// (on several, the count would multiply each group's micro-batches in the program).
bool sv_partial_ckpt(const SvProblem *p, int u, const SvChoice *c);
// Whether choice c moves its blocks' activations off the device between forward and
// backward: recomputed or swapped.
bool sv_moves_acts(const SvChoice *c);
// The index of the choice of u like s but without checkpointing or swap; -1 when there is none.
int sv_choice_plain(const SvUnit *u, int s);
// With p->ckpt_first: the unit that holds alone the repeated layer after unit u's (u
// holding one layer alone), whose checkpointing needs u's; -1 when there is none.
int sv_next_layer(const SvProblem *p, int u);
// s checkpoints as p->ckpt_first asks (always true without it): the layers it swaps first,
// then those it checkpoints, then the rest.
bool sv_ckpt_ordered(const SvProblem *p, const SvSolution *s);
// A copy of p without the choices that cannot be optimal: those too big on
// their own, and those another choice of the same layout matches or beats on
// every coefficient (without gpu_caps, GPU capacity is not checked).
// map[u][s]: the kept choice (new index) that is no worse than s, or -1;
// keep[u][k]: the old index of kept choice k.
SvProblem *sv_problem_prune(const SvProblem *p, bool gpu_caps, int **map, int **keep);
// A copy of p with only the choices s of each unit u that take(p, u, s); keep[u][k]: the old
// index of kept choice k.
SvProblem *sv_problem_subset(const SvProblem *p, bool (*take)(const SvProblem *, int, int),
                             int **keep);
// The layouts a cluster allows (dp x tp x q x q over all GPUs, inner groups
// inside every device group). Returns their count.
int sv_layouts(const SvCluster *c, int64_t micro_total, SvLayout *out, int max);

// ---- ilp.c: GLPK behind a small interface ------------------------------------------
//
// Columns and rows are 0-based here; the wrapper adds GLPK's 1 and keeps
// GLPK's error handler from aborting the process.

typedef struct Ilp Ilp;

typedef enum IlpKind { ILP_CONT, ILP_INT, ILP_BIN } IlpKind;

typedef enum IlpStatus {
  ILP_OPTIMAL,     // proven optimal (within the gap)
  ILP_FEASIBLE,    // a solution, optimality not proven (time limit)
  ILP_INFEASIBLE,  // proven: no solution
  ILP_NOSOLUTION,  // time limit before any solution
  ILP_CUTOFF,      // stopped: no solution can reach below IlpOptions.cutoff
  ILP_ERROR,       // GLPK failed; see msg
} IlpStatus;

typedef struct IlpOptions {
  double mip_gap;
  double time_limit;           // seconds
  bool presolve;               // GLPK's MIP presolver (ignored with an incumbent)
  bool cuts;                   // cover, MIR, Gomory and clique cuts
  bool verbose;
  const double *incumbent;     // a feasible point (ncols values) or NULL
  double cutoff;               // stop once the bound shows no solution below it (0: none)
} IlpOptions;

typedef struct IlpResult {
  IlpStatus status;
  double obj, gap, seconds;
  double *x;                   // ncols values (malloc'd; NULL without a solution)
  bool seeded;                 // the incumbent was accepted
  char msg[256];
} IlpResult;

Ilp *ilp_new(void);
void ilp_free(Ilp *p);
int ilp_col(Ilp *p, double lo, double hi, double cost, IlpKind kind);  // its index
int ilp_row(Ilp *p, double lo, double hi);                              // its index
void ilp_coef(Ilp *p, int row, int col, double a);                      // repeats add up
int ilp_ncols(const Ilp *p);
int ilp_nrows(const Ilp *p);
int ilp_nnz(const Ilp *p);
int ilp_count(const Ilp *p, IlpKind kind);
int ilp_solve(Ilp *p, const IlpOptions *o, IlpResult *r);   // 0, or -1 when status is ILP_ERROR
void ilp_result_free(IlpResult *r);

// ---- cluster.c: JSON files (cluster files, plan.json) ---------------------------------

struct cJSON;
// o's number `key` in [lo, hi] (whole: an integer) into *out. Absent: 0 and *out
// untouched unless required. -1 with d ("WHERE: "KEY" must be ...") otherwise.
int sv_json_number(const struct cJSON *o, const char *key, double lo, double hi, bool whole,
                   bool required, double *out, const char *where, IrDiag *d);

#endif
