// Code generation: lowering IR nodes to runtime kernel calls, running them
// in-process (the interpreter), and writing the self-contained C program.
#ifndef MTC_CODEGEN_H
#define MTC_CODEGEN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir.h"
#include "model_api.h"
#include "passes.h"

// ---- kernel calls (codegen/kcall.c) -------------------------------------------

// The runtime's kernels (runtime/kernels.def): CG_K_matmul calls rt_matmul.
typedef enum CgKernel {
#define K(name, ...) CG_K_##name,
#define KT K
#define KTU K
#include "kernels.def"
  CG_K_COUNT
} CgKernel;

// How a program's builds compile its sources (the Makefile's CFLAGS; GPU_CFLAGS, NVCCFLAGS and
// CUDA_ARCH), and mtc calibrate its measuring program, so that both run the same code. An fp32
// program's kernels add --fmad=false to NVCCFLAGS, to round as the CPU build does.
#define CG_CPU_CFLAGS "-O3 -march=native -fopenmp -std=c11 -Wall -Wextra"
#define CG_GPU_CFLAGS "-O3 -march=native -std=c11 -Wall -Wextra"
#define CG_NVCC_FLAGS "-O3 -std=c++17 -Xcompiler -Wall,-Wextra"
#define CG_CUDA_ARCH "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90"

const char *cg_kernel_name(CgKernel k);   // "matmul" (the C function is rt_matmul)
const char *cg_rt_axis_name(IrMeshAxis a); // "RT_AXIS_ROW": the runtime's name of a mesh axis

typedef enum CgArgKind {
  CG_BUF,     // a tensor: its arena buffer
  CG_INT,     // an integer, as a formula
  CG_ENUM,    // an integer printed by name (RT_ADD ...)
  CG_FLOAT,   // a float constant
  CG_INTS,    // an array of integers, as formulas
  CG_HPARAM,  // an optimizer hyper-parameter read at run time: h->name
  CG_NONE,    // an optional tensor that is absent: NULL
} CgArgKind;

typedef struct CgArg {
  CgArgKind kind;
  const IrValue *buf;
  const Sym *rank_stride;  // CG_BUF: when set, this rank's part: buf + r * rank_stride elements;
                           // CG_INT: i - r * rank_stride (an offset into this rank's part), r
  int rank_axis;           // this rank's place along the runtime's mesh axis rank_axis (RT_AXIS_DP,
                           // or RT_AXIS_ALL: a bucket sharded over every rank)
  int rank_first;          // with rank_base (uneven parts, passes/lower.c): the part starts at
  const Sym *rank_base;    // (r - rank_first) * rank_stride + rank_base elements
  const Sym *elem_off;     // CG_BUF: when set, that many elements further (a range of the part)
  const Sym *i;
  const char *name;     // CG_ENUM, CG_HPARAM (a field of rt_hparams)
  double f;
  int n;                // CG_INTS
  const Sym *ints[IR_MAXRANK];
} CgArg;

#define CG_MAXARGS 20  // attention_bwd has 20

typedef struct CgCall {
  CgKernel k;
  int nargs;
  CgArg args[CG_MAXARGS];
  IrDType t, u;  // the element types of its tensors of kinds T and U (runtime/kernels.def)
} CgCall;

// The kernel calls that execute node n (split and concat take one per part)
// under the memory plan m (a reshape it made a view moves nothing; m NULL:
// none is). Returns the number of calls written to `calls` (at most max), or -1.
int cg_lower(IrGraph *g, const MemPlan *m, const IrNode *n, CgCall *calls, int max, IrDiag *d);
// ... of n on its own: the assign of a bucket's bf16 working copies, which its update writes in
// the same pass (rt_adamw_copy), gets its own cast, for the copies' first rounding (init_copies).
int cg_lower_alone(IrGraph *g, const MemPlan *m, const IrNode *n, CgCall *calls, int max,
                   IrDiag *d);
// The suffix of the variant a lowered call runs ("" for float32, "_bf16", ...):
// the function is rt_<cg_kernel_name(c->k)><suffix> (runtime/kernels.h).
const char *cg_call_suffix(const CgCall *c);
// Bytes of device scratch the call's GPU kernel needs (0 for most; KS in
// runtime/kernels.def), at the graph's dim values.
int64_t cg_call_scratch(const IrGraph *g, const CgCall *c);
// The SGD step for an adamw node's parameter (update() can switch at run time).
void cg_lower_adamw_as_sgd(IrGraph *g, const IrNode *adamw, CgCall *call);

// ---- the interpreter (codegen/interp.c) -------------------------------------------

// Executes a planned graph in-process with the runtime's CPU kernels, on one
// arena of the memory plan m's arena_bytes (m stays the caller's).
typedef struct CgInterp CgInterp;
CgInterp *cg_interp_new(IrGraph *g, const MemPlan *m, IrDiag *d); // lowers every node; NULL on error
void cg_interp_free(CgInterp *it);
char *cg_interp_arena(CgInterp *it);
float *cg_interp_f32(CgInterp *it, const IrValue *v);
int32_t *cg_interp_i32(CgInterp *it, const IrValue *v);
void cg_interp_init_params(CgInterp *it, uint64_t seed); // same values as the emitted weights
void cg_interp_run(CgInterp *it, IrPhase phase, const rt_hparams *h);
// The optimizer settings the graph was compiled with (from its update ops).
rt_hparams cg_default_hparams(const IrGraph *g);

// ---- the emitted program (codegen/emit_c.c) -----------------------------------------

typedef struct CgOptions {
  const MemPlan *mem;       // the graph's memory plan (pass_memplan)
  const char *outdir;
  const char *runtime_dir;  // where runtime/ sources are (copied into outdir)
  uint64_t seed;            // initial weights
  const char *source;       // the model file, for the README
  const PassLowered *lowered; // the parallel plan pass_lower applied (NULL: one rank)
  const char *layout;        // the plan in words ("dp 4 x tp 1, ZeRO-3")
  int64_t planner_state_bytes, planner_comm_bytes;  // the planner's per-rank predictions (the
  int64_t planner_comm_micro_bytes;                 // bytes sent: of a replica running the most
                                                    // micro-batches, and those of each one, and
  int64_t planner_comm_ghost_bytes;                 // of each ghost one (rt_model.ghost))
  int64_t planner_host_bytes;                       // ... and of model state in host memory
  int64_t planner_swap_bytes;                       // ... of activations swapped (0: none given)
  // The planner's step time for the layout on planner_device (NULL: not priced), and its
  // split: compute, recompute, tensor-parallel and data-parallel communication, offload,
  // optimizer, resharding (runtime/model_api.h's planner_time_s)
  const char *planner_device;
  double planner_step_s, planner_time_s[RT_PLANNER_NTIMES];
  // NULL, or by IrOp: the planner's price of the program's nodes of each op on
  // planner_device, seconds per micro-batch (forward, backward) and per step (update); -1:
  // not priced per node (communication, host copies). train --profile prints them.
  const double *op_micro_s, *op_step_s;
  double op_outside_s;   // ... and of the scans the program runs each step outside its nodes
  // A program of several models (uneven state shares: Plan.replica_parts, one per run of
  // replicas with one part): this one is model `model` of `nmodels` (0: model.c, written with
  // every other file of the program; k > 0: model_gK.c alone, written after it), for the world
  // ranks below rank_end (0: all of them).
  int model, nmodels, rank_end;
} CgOptions;

// Writes outdir/: model.c, train.c and runtime sources, Makefile, weights.bin,
// README.md, from the graph and its memory plan opt->mem (opt->model > 0: model_gK.c).
int cg_emit_c(IrGraph *g, const CgOptions *opt, IrDiag *d);

// ---- names from the model in the emitted C (codegen/cnames.c) ---------------------

// A C identifier of mtc's own for `name` (its first `max` bytes): letters,
// digits and '_', a letter first, never a C keyword, a name the headers of
// model.c define, one model.c defines itself or the runtime's rt_/RT_/mtc_
// prefix; unique in `taken` (added to it). In `arena`.
const char *cg_ident(IrArena *arena, const char *name, IrStrSet *taken, size_t max);
// Would `s` clash with C or the emitted program's own names?
bool cg_reserved(const char *s);
// `s` as a C string literal, quotes included: '"', '\\', '?', control and
// non-ASCII bytes escaped.
void cg_put_string(FILE *f, const char *s);
// `s` in a // comment: as it is when it holds only letters, digits and
// "_.:-+@[], /", else as cg_put_string writes it.
void cg_put_comment_name(FILE *f, const char *s);

// ---- the output folder, written whole or not at all (codegen/outdir.c) -------------

typedef struct CgOutdir {
  char target[4096];  // the folder the user named
  char tmp[4200];     // where the program is written: beside it, hidden (empty: none)
  char old[4200];     // where a previous program moves while the new one takes its place
  char doomed[4200];  // where o->tmp moves to be removed (cg_outdir_abort)
} CgOutdir;

// Checks the target (absent, empty, or a folder mtc wrote: nothing else is
// replaced), removes temporary folders that killed compiles left, and
// creates o->tmp to write into.
int cg_outdir_begin(CgOutdir *o, const char *target, IrDiag *d);
// Renames o->tmp onto the target (a previous program there is removed).
int cg_outdir_commit(CgOutdir *o, IrDiag *d);
// Removes o->tmp and everything in it (after an error, or on a signal).
void cg_outdir_abort(CgOutdir *o);

// Initial values of a parameter (normal/zeros/ones from the seed), the same
// in the interpreter and in weights.bin. `index` is the parameter's position.
void cg_init_param(const IrGraph *g, const IrValue *p, int index, uint64_t seed, float *out);

#endif
