// The planner: the cluster model, the cost model, the integer program that
// picks a training strategy per block, fixed-strategy baselines, the report.
//
//   cluster.c  the device table, homogeneous clusters from flags, --cluster JSON files
//   cost.c     per-block formulas from the IR (symbolic; --formulas prints them),
//              and what one choice costs on one device (seconds, bytes)
//   problem.c  the numeric problem: units, choices, edges; evaluation, pruning,
//              brute force (tests)
//   ilp.c      the GLPK wrapper (the only file that includes glpk.h)
//   plan.c     the integer program over a problem, baselines, the infeasibility
//              diagnosis, sv_plan
//   report.c   the text report and plan.json
//
// Time is in seconds, memory in bytes, bandwidth in bytes/s, throughput in
// FLOP/s. Everything is per device unless a name says otherwise.
#ifndef MTC_SOLVER_H
#define MTC_SOLVER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir.h"
#include "passes.h"
#include "plan.h"

// ---- devices and clusters (solver/cluster.c) ---------------------------------------

// How much of a device's datasheet rates its kernels reach, and its fixed
// costs: the built-in devices' defaults (cluster.c), or what mtc calibrate
// measured (its rates then are the measured ones and these mostly 1).
typedef struct SvEff {
  double gemm;          // matmuls, of peak FLOP/s
  double attn;          // fused attention, of peak FLOP/s
  double simt;          // other ops' arithmetic, of fp32 FLOP/s
  double mem;           // memory-bound ops, of memory bandwidth
  double update;        // the optimizer's update, of memory bandwidth
  double link;          // collectives' bus bandwidth, of the link
  double gather;        // all-gathers' bus bandwidth, of all-reduces'
  double scatter;       // reduce-scatters' bus bandwidth, of all-reduces' (a profile without
                        // it: gather's)
  double host;          // device <-> host copies, of host_bw
  double launch;        // seconds per kernel
  double alpha_intra;   // seconds per collective inside a node
  double alpha_inter;   // ... between nodes
  double hop_intra;     // and per step of its ring (n - 1 steps over n ranks; an all-reduce's
  double hop_inter;     // 2 (n - 1)) inside a node, and between nodes
  double overlap;       // share of the compute beside a collective that can hide it
} SvEff;

// Measured GEMM rates by shape (a calibrated profile; none for the built-in
// devices): FLOP/s of rt_matmul (fp32) and rt_matmul_bf16 at m x n x k.
#define SV_MAXGEMM 128
typedef struct SvGemmRate {
  double m, n, k;
  double fp32, bf16;
} SvGemmRate;

// Measured attention rates by shape (a calibrated profile): FLOP/s (the IR's count) of
// rt_attention_fwd and _bwd, causal, at t tokens and heads of hs elements; [1] the bf16
// kernels' (the float32 ones' where the profile has none).
#define SV_MAXATT 16
typedef struct SvAttnRate {
  double t, hs;
  double fwd[2], bwd[2];
} SvAttnRate;

// Measured seconds per element of an op's kernel (a calibrated profile):
// at numel[i] elements (its largest input or output), sec[i] each; sec_bf16[i] its bf16
// variant's (sec[i] where the profile has none).
#define SV_MAXOPS 32
#define SV_MAXPTS 8
typedef struct SvOpRate {
  IrOp op;
  int n;
  double numel[SV_MAXPTS], sec[SV_MAXPTS], sec_bf16[SV_MAXPTS];
} SvOpRate;

// Measured bus bandwidth of a collective by its size (a calibrated profile), within a node:
// at bytes[i] bytes (the buffer all-reduced, the whole gathered or reduce-scattered),
// bw[i] bytes/s, as NCCL's tests count bus bandwidth (an all-reduce moves 2 (n - 1) / n of its
// buffer per rank, an all-gather or reduce-scatter (n - 1) / n) after the link's latency.
typedef enum SvColl { SV_ALL_REDUCE, SV_ALL_GATHER, SV_REDUCE_SCATTER, SV_NCOLL } SvColl;
typedef struct SvCollRate {
  int n;                // 0: the link's bandwidth (intra_bw x efficiency) at every size
  double bytes[SV_MAXPTS], bw[SV_MAXPTS];
} SvCollRate;

typedef struct SvDevice {
  char name[32];        // "H100-80GB"
  double flops_bf16;    // dense peak FLOP/s in bf16 (fp16 on V100)
  double flops_fp32;    // dense peak FLOP/s in fp32 (no tensor cores)
  double mem;           // memory, bytes
  double hbm_bw;        // memory bandwidth
  double intra_bw;      // per GPU, per direction, inside a node (NVLink, or PCIe without it)
  double inter_bw;      // per GPU, per direction, between nodes (its InfiniBand/Ethernet share)
  double host_bw;       // per GPU, per direction, GPU <-> CPU (PCIe)
  double host_mem;      // CPU memory per GPU available for offloaded state
  double cpu_adam;      // parameters per second the CPU optimizer updates, per GPU
  SvEff eff;
  int sms;              // a GPU: its multiprocessors, which GEMMs' tiles fill in waves
                        // (0: every GEMM at eff.gemm whatever its shape)
  int cores;            // a CPU: its cores, which the node's ranks share (0: a GPU per rank)
  int threads, ranks;   // a CPU: each rank's threads, and the ranks that shared it, when its
                        // rates were measured
  int ngemm;            // entries of gemm
  SvGemmRate gemm[SV_MAXGEMM];
  int nops;             // entries of ops: these ops' times come from them, not the roofline
  SvOpRate ops[SV_MAXOPS];
  int nattn;            // entries of attn (0: attention at eff.attn whatever its shape)
  SvAttnRate attn[SV_MAXATT];
  SvCollRate coll[SV_NCOLL];   // by SvColl
} SvDevice;

const SvDevice *sv_device_find(const char *name);  // case-insensitive; NULL when unknown
// "A100-40GB, A100-80GB, ..." for messages
const char *sv_device_names(void);

#define SV_MAXGROUPS 8
#define SV_MAX_GPUS 65536  // GPUs in a cluster, ranks of a program: the one limit of every flag and file

// A group of identical devices (all of a homogeneous cluster).
typedef struct SvGroup {
  char name[32];
  SvDevice dev;         // the table's entry with the overrides applied
  int count;            // GPUs
  int per_node;         // GPUs per node
  double reserve;       // bytes per GPU kept free (CUDA context, NCCL, allocator slack)
} SvGroup;

typedef struct SvCluster {
  int ngroups;
  SvGroup group[SV_MAXGROUPS];
  double cross_bw;      // per GPU between groups (0: the smallest inter_bw)
  bool one_node;        // the groups share a node (one machine's ranks priced as the groups of
                        // a plan's replicas: sv_price): between them the intra-node link
} SvCluster;

// Parses "24GiB", "80GB", "512MiB", "1.5T", "1000000": bytes. -1 when malformed.
int sv_parse_size(const char *s, double *bytes);
// count x gpu; mem > 0 overrides its memory, intra/inter > 0 its link bandwidths.
int sv_cluster_simple(SvCluster *c, const char *gpu, int count, int per_node, double mem,
                      double intra_bw, double inter_bw, IrDiag *d);
// The same of a device described whole (a profile's: sv_device_load). A CPU's
// ranks all share one node unless per_node says otherwise.
int sv_cluster_of(SvCluster *c, const SvDevice *dev, int count, int per_node, double mem,
                  double intra_bw, double inter_bw, IrDiag *d);
// The device of a profile (mtc calibrate's): a cluster file of one group.
int sv_device_load(SvDevice *dev, const char *path, IrDiag *d);
// A JSON cluster file (schema in README): {"groups": [{"gpu": "H100-80GB", "count": 8}, ...]}
int sv_cluster_load(SvCluster *c, const char *path, IrDiag *d);
int sv_cluster_parse(SvCluster *c, const char *json, const char *path, IrDiag *d);
int sv_cluster_gpus(const SvCluster *c);
// How much slower each of a group's devices runs its kernels than its rates
// say: a CPU whose node has more ranks' threads than cores (and more than
// when it was measured) shares them; 1 for GPUs.
double sv_group_load(const SvGroup *gr);
// FLOP/s of a batch of GEMMs of m x n x k on dev: a profile's measured rates,
// interpolated between its shapes (whatever the batch); else the peak times
// eff.gemm, times the share the shape keeps on a GPU of dev->sms
// multiprocessors (none lost without sms).
double sv_gemm_rate(const SvDevice *dev, double batch, double m, double n, double k, bool bf16);
// Seconds of op's kernel (its bf16 variant's, or float32's) over numel elements on dev when
// its profile measured the op (interpolated between its sizes); -1 when it did not.
double sv_op_seconds(const SvDevice *dev, IrOp op, double numel, bool bf16);
// The bus bandwidth of a collective of `kind` on a buffer of `bytes` within one of dev's nodes
// when its profile measured it (log-log between its sizes, the nearest end's outside them);
// -1 when it did not.
double sv_coll_bw(const SvDevice *dev, SvColl kind, double bytes);
// The profile's attention rate at t tokens and heads of hs (forward, or backward; bf16, or
// float32): bilinear in the logs between its grid's shapes, the nearest edge's outside it; -1
// without a grid.
double sv_attn_rate(const SvDevice *dev, double t, double hs, bool bwd, bool bf16);

// ---- configuration -------------------------------------------------------------------

typedef struct SvConfig {
  SvCluster cluster;
  int64_t global_batch;   // sequences per step (0: micro_batch x GPUs)
  int64_t micro_batch;    // sequences per model replica per micro-step (0: the model's batch dim)
  int64_t seq;            // sequence length (0: the model's)
  bool share_blocks;      // identical blocks share one set of variables (default on)
  bool seq_parallel;      // 1D tensor parallelism with Megatron sequence parallelism (default
                          // off: compiled programs do not run it; mtc plan --seq-parallel)
  double mip_gap;         // relative optimality gap (default 1e-3)
  double time_limit;      // seconds for GLPK (default 20)
  bool verbose;           // GLPK's log on stderr
  int mesh_tp;            // > 0: only what mtc compile lowers: every block on one mesh of
                          // dp x mesh_tp, checkpointing only of the first repeated layers
  int mesh_q;             // ... with mesh_tp 1 and mesh_q > 1: of dp x a mesh_q x mesh_q grid
                          // (SvProblem.ckpt_first);
                          // 0: any layout, offload share and checkpointing per block
  int mesh_sub;           // ... with mesh_tp > mesh_sub > 1: where a block may also be tensor
                          // parallel over mesh_sub of the tp ranks (SvLayout.sub)
  int mesh_grid;          // ... with mesh_grid^2 = mesh_tp: or Optimus 2D on a grid of the tp
                          // ranks (a layout of tp 1 and q mesh_grid, the same dp)
  double cutoff;          // > 0: a plan no faster than this step (s) is of no use (another
                          // mesh's): GLPK stops once its bound shows none is
  // mtc compile on several groups (mesh_tp > 0), Cephalo's batch shares: > 0, the sequences
  // of each group's micro-batches where they differ, and the micro-batches each group runs
  // (group_batch: whole per replica); the step's sequences are sum group_rows x group_batch
  int64_t group_rows[SV_MAXGROUPS];
  int64_t group_batch[SV_MAXGROUPS];
} SvConfig;

SvConfig sv_default_config(void);   // 1 x H100-80GB, bf16, sharing on, no sequence parallelism

// Sets the model's batch and sequence dims from cfg (micro_batch, seq) before
// the passes run. The batch dim is the first dim of the first input; the
// sequence dim its second dim when that input holds tokens.
int sv_bind_dims(IrGraph *g, const SvConfig *cfg, IrDiag *d);

// ---- the symbolic cost model (solver/cost.c) -------------------------------------------

// One block (an IR block id; 0 holds everything outside repeated blocks).
// Element counts are formulas in the model's symbols, for one micro-batch.
typedef struct SvBlock {
  int id;                   // the IR's node->block
  const char *name;         // "h.0", or "rest" for block 0
  int unit;                 // the unit (set of variables) it belongs to
  // Sizes are bytes, of the element types the IR gives the values.
  const Sym *params;        // parameter elements
  // The parameters one by one, as the program's bucket of the block holds them: each padded
  // to PASS_ALIGN_ELEMS elements, split over tp or whole (ir/shard.c's layout). A split
  // member's dim: its size (NULL: whole), and whether it is a vocabulary, which the lowering
  // pads to a multiple of tp (passes/tp.c); a dim tp does not divide otherwise stays whole.
  int nmembers;
  const Sym **member;
  const Sym **member_dim;
  bool *member_vocab;
  const Sym *param_bytes;   // the weights forward and backward read (bf16: the working copies)
  const Sym *grad_bytes;    // the parameters' gradients, as the update reads them
  const Sym *master_bytes;  // float32 masters apart from the weights read (bf16 programs)
  const Sym *state_bytes;   // optimizer state (AdamW: 2 values per parameter)
  const Sym *act;           // float bytes kept from forward for backward
  const Sym *act_int;       // integer bytes kept (token ids, targets)
  int nact;                 // the float values in act (a swapped block copies each twice)
  const Sym *act_rep;       // part of act whole on every rank under 1D TP without sequence
                            // parallelism (read unsplit by backward in ir/shard.c's layout)
  const Sym *ckpt;          // float bytes of the block's inputs (all it keeps when checkpointed)
  const Sym *ckpt_int;
  const Sym *work;          // bytes of backward temporaries at the block's peak
  const Sym *flops_fwd, *flops_bwd;
  // The collectives ir/shard.c's propagation implies under 1D TP, as bytes all-reduced
  // (an all-gather or reduce-scatter counts half its buffer):
  const Sym *tp_fwd;        // in forward (Megatron's g, vocabulary-parallel embedding and loss)
  const Sym *tp_bwd;        // in backward and update (Megatron's f)
  // ... in a block data parallel over its tp ranks (ShardSpec.batch_tp: the batch split over
  // tp, the weights whole), per micro-batch: the weights' gradients reduced
  const Sym *bt_fwd, *bt_bwd;
  // ... of those, the all-reduces of partial sums over the batch's parts (a BatchNorm's
  // statistics), which data parallelism runs over dp too (SyncBatchNorm: passes/lower.c)
  const Sym *sync_fwd, *sync_bwd;
  // ... each of tp_*, bt_* and grid_* as a sum of the squares of its collectives' bytes: over
  // the sum, the size of the collective the mean byte moves in (whose bandwidth it moves at)
  const Sym *tp_fwd_sq, *tp_bwd_sq, *bt_fwd_sq, *bt_bwd_sq, *grid_fwd_sq[3], *grid_bwd_sq[3];
  // Optimus 2D as ir/shard.c lays it out (the grid's side left open): the collectives along
  // the grid's rows and columns as bytes all-reduced, and the activations kept, by the number
  // k of grid axes the buffer is split over (a term of [k] is divided by q^k); how many grid
  // axes each member splits, and the sizes of the dims they split (NULL: none; a vocabulary
  // among them is padded to a multiple of q, another dim q does not divide is whole).
  const Sym *grid_fwd[3], *grid_bwd[3], *grid_act[3];
  // ... and of those collectives the weights' and their gradients' (which do not shrink with
  // the batch: grids on part of tp each take a part of it)
  const Sym *grid_wfwd[3], *grid_wbwd[3];
  unsigned char *member_grid;
  const Sym *(*member_gdim)[2];   // [k][0]: the dim over the grid's rows, [k][1]: its columns
  unsigned char *member_gvocab;   // bit a: member_gdim[k][a] is a vocabulary
  int nfwd, nbwd;           // kernels in forward and backward (nodes, less the views)
  IrNode **fwd, **bwd;      // those nodes, in schedule order
  bool bwd_params;          // backward reads some of its parameters (ZeRO-3 gathers them again
                            // unless it is checkpointed anyway; passes/lower.c's bwd_gather)
  // Dims that tp (must_tp) or a grid's side (must_grid) must divide for the lowering to lay
  // the block out: those ir/shard.c splits that are no parameter's (attention heads); a
  // parameter's dim the degree does not divide is kept whole instead (or padded).
#define SV_MAXMUST 8
  int nmust_tp, nmust_grid;
  const Sym *must_tp[SV_MAXMUST], *must_grid[SV_MAXMUST];
} SvBlock;

// An activation passed from one block to another in forward.
typedef struct SvFlow {
  int from, to;             // block ids
  const Sym *bytes;
} SvFlow;

typedef struct SvModel {
  IrGraph *g;
  int nblocks;              // block ids 0 .. nblocks-1
  SvBlock *block;
  int nflows;
  SvFlow *flow;
  int batch_sym, seq_sym;   // symbol indices, -1 when the model has none
  int nunits;               // distinct units after sharing
  bool bf16;                // bf16 mixed precision (the precision pass made working copies)
  bool grads_bf16;          // ... with bf16 gradients (--grad-precision bf16)
  bool grid_ok;             // ir/shard.c lays the model out on a 2D grid (else no layout has one)
  bool batch_ok;            // ... and each block data parallel over tp ranks (SvLayout.batch)
  const IrNode **epilogue;  // by node id: the node an add, GELU, bias gradient or loss joins
                            // (pass_epilogues; NULL: none): no kernel of its own
} SvModel;

// A block's formulas evaluated under the graph's bindings (one micro-batch),
// and its roofline time on each group's device (one device, unsharded).
// A block's model state in bytes per parameter, by the ZeRO stage that
// shards each part first (sv_model_build reads them from the IR's types):
typedef struct SvStateBytes {
  double param;    // the weights forward and backward read (float32 parameters, or bf16
                   // working copies): ZeRO-3, and what ZeRO's parameter all-gathers move
  double grad;     // the gradients the update reads: ZeRO-2
  double master;   // float32 masters apart from those weights (bf16 programs): ZeRO-1
  double state;    // the optimizer's state (AdamW's moments): ZeRO-1; offload moves it
} SvStateBytes;

#define SV_MAXTP 64  // the most 1D tensor-parallel ranks a layout has
#define SV_MAXQ 16   // the largest 2D grid side whose buckets are counted padded

typedef struct SvNum {   // one unit's representative block
  double params;
  // elements of the block's bucket on one rank of tp ranks (before the padding to
  // PASS_ALIGN_ELEMS x dp): bucket[tp], tp in 1..SV_MAXTP
  double bucket[SV_MAXTP + 1];
  // ... on one rank of a q x q grid: bucket_grid[q], q in 2..SV_MAXQ (larger: without padding)
  double bucket_grid[SV_MAXQ + 1];
  // A unit of several blocks: the buckets of its other blocks (the unit's first block may lay
  // out a parameter otherwise: a norm that reads the embedding's sum whole on a 2D grid), and
  // how many blocks it has; each block's bucket is padded on its own.
  int blocks;
  double bucket_rest[SV_MAXTP + 1], bucket_grid_rest[SV_MAXQ + 1];
  SvStateBytes per;      // model-state bytes per parameter
  double act, act_int, act_rep, ckpt, ckpt_int, work;
  double tp_fwd, tp_bwd, bt_fwd, bt_bwd, sync_fwd, sync_bwd;
  double tp_fwd_sq, tp_bwd_sq, bt_fwd_sq, bt_bwd_sq, grid_fwd_sq[3], grid_bwd_sq[3];
  // on a 2D grid, by the number of grid axes that split them: bytes all-reduced, activation
  // bytes kept, parameter elements
  double grid_fwd[3], grid_bwd[3], grid_act[3], grid_members[3], grid_wfwd[3], grid_wbwd[3];
  double flops_fwd, flops_bwd;
  double roof_fwd[SV_MAXGROUPS], roof_bwd[SV_MAXGROUPS];
  int nfwd, nbwd, nact;
  bool bwd_params;
  int nmust_tp, nmust_grid;   // SvBlock.must_tp, must_grid, evaluated, and their formulas
  double must_tp[SV_MAXMUST], must_grid[SV_MAXMUST];
  const char *must_tp_name[SV_MAXMUST], *must_grid_name[SV_MAXMUST];
} SvNum;

// Builds the formulas (run the passes through "precision" first), the
// tensor-parallel collectives and replicated activations as ir/shard.c lays
// them out with Megatron's sequence parallelism or without.
SvModel *sv_model_build(IrGraph *g, bool share_blocks, bool seq_parallel, IrDiag *d);
void sv_model_free(SvModel *m);
// Per-block memory and FLOPs as formulas (mtc plan --formulas).
void sv_print_formulas(FILE *f, const SvModel *m);

// Formulas of REFERENCES.md, used by the cost model and checked by the tests,
// with b a block's bytes per parameter (fp32 AdamW: 4 + 4 + 0 + 8; bf16 with
// float32 masters and gradients: 2 + 4 + 4 + 8).
// Model-state bytes per GPU for psi parameters over data-parallel ranks at a ZeRO stage (0-3),
// of which a rank's shard holds the share `own` (1/n over n ranks; a mixed cluster's uneven
// state shares give each its own).
double sv_zero_state_bytes(double psi, double own, int stage, SvStateBytes b);
// Offload (ZeRO-Offload, REFERENCES.md section 3): the optimizer state of
// psi_host of the parameters a rank updates lives in host memory, with a
// float32 master copy of those parameters (the one the host's AdamW updates)
// and a copy of their gradient: 4 + 4 + 8 bytes each in host memory for AdamW
// (DeepSpeed's 16), and their optimizer state leaves the device. In float32
// the device keeps its weights, which the host's update is copied back into;
// in bf16 the float32 masters leave the device too and the host sends back
// the bf16 copies it rounds (2 more bytes on the host: 18; 12 fewer on the
// device). The planner's memory rows and the compiled program's report (mtc
// compile --offload) both use these. With gradient offload (staged: and
// micro-batches), each micro-batch's gradient is copied to a second host
// buffer before the host sums it into the first: b.grad more per parameter.
// With parameter offload (params; ZeRO-3's shard, psi_host of them) the device's
// weights (bf16: its working copies) leave it too: the host holds no more,
// since its master (bf16: and its copies) was already there.
double sv_offload_host_bytes(double psi_host, SvStateBytes b, bool staged);
double sv_offload_device_bytes(double psi_host, SvStateBytes b, bool params);
// Bytes one rank sends per step for data parallelism over n ranks at a ZeRO
// stage, with ring collectives (the volumes the cost model prices), the rank's shard the share
// `own` of them (1/n; a reduce-scatter or all-gather sends all but the rank's own part): psi
// parameters, their gradients reduced at b.grad bytes each and the weights
// gathered at b.param (bf16: the working copies), micro micro-batches per step.
// ZeRO 2 and 3 reduce the gradients every micro-batch; so does gradient offload
// (every_micro) at stages 0 and 1.
double sv_dp_comm_bytes(double psi, int n, double own, int stage, int micro, bool every_micro,
                        SvStateBytes b);
// Bytes a rank sends per step when allreduce_bytes are ring all-reduced over n ranks every
// micro-batch (tensor parallelism's tp_fwd + tp_bwd; the batch's statistics over dp).
double sv_allreduce_sent(double allreduce_bytes, int n, int micro);
// Ring collectives: alpha + beta * volume (bytes per rank S, n ranks, bandwidth bw).
double sv_allreduce_time(double bytes, int n, double bw, double alpha);
double sv_allgather_time(double bytes, int n, double bw, double alpha);  // also reduce-scatter

// ---- the numeric problem (solver/problem.c) ----------------------------------------------

// A layout of one block on the devices: dp replicas of an inner group of
// tp (Megatron 1D) or q x q (Optimus 2D) devices.
typedef struct SvLayout {
  int dp, tp, q;
  bool batch;   // with tp > 1: the block data parallel over those tp ranks too (its batch split
                // over them, its weights whole), in a program whose other blocks are dp x tp
                // (PlanBlock.batch_tp)
  int sub;      // > 1, with tp > sub: the block tensor parallel over sub of the tp ranks and
                // data parallel over the tp / sub groups of them (its batch split over those),
                // in a program whose other blocks are dp x tp (PlanBlock.sub); 0: not. With
                // q > 1 too (sub = q x q): Optimus 2D on the grid of each group of sub (PlanBlock
                // .grid in a mesh whose grids are on part of tp), each a part of the batch
} SvLayout;

// Layout l's ranks that split a block's tensors (1 for a block data parallel over tp, sub, or
// tp), and the parts its mesh cuts a replica's batch into for the block (tp, tp / sub, or 1).
int sv_layout_split(SvLayout l);
int sv_layout_parts(SvLayout l);
// The ranks of one replica of layout l's mesh: tp, or q x q (a grid's; on part of tp: tp).
int sv_layout_ranks(SvLayout l);

// Can the block of n be laid out on layout l (every dim it must split divides the degree)?
// When it cannot and why is not NULL: why, as "NH = 25 does not divide by tp = 8".
bool sv_layout_divides(const SvNum *n, SvLayout l, char *why, size_t size);

// Time categories (seconds) and memory categories (bytes) of the report.
enum { SV_T_COMPUTE, SV_T_RECOMPUTE, SV_T_TP, SV_T_DP, SV_T_OFFLOAD, SV_T_UPDATE, SV_NT };
// Their names in plan.json's time_s, and [SV_NT] resharding's ("reshard").
extern const char *const sv_time_names[SV_NT + 1];
enum { SV_M_PARAMS, SV_M_GRADS, SV_M_OPT, SV_M_ACT, SV_NM };

// What one block with one choice costs one device of a group.
typedef struct SvCost {
  double t_micro[SV_NT];    // per micro-batch that the group runs
  double t_step[SV_NT];     // once per step
  double t_ghost[SV_NT];    // per ghost micro-batch a replica runs (mtc compile: uneven batch
                            // shares under ZeRO 2, 3 or gradient offload: sv_ghosts)
  double mem[SV_NM];        // held all step, independent of the state share
  double mem_shard[SV_NM];  // held all step if the group's state share were 1
  double peak;              // transient while it runs (recompute, gathered params, temporaries)
  double host, host_shard;  // CPU memory for offloaded state
} SvCost;

// One joint choice of a unit, with its totals per group (one block).
typedef struct SvChoice {
  int layout;               // index into SvProblem.layout
  bool ckpt;                // recompute the block in backward
  bool swap;                // or swap its activations to host memory and back (ProTrain)
  int zero;                 // ZeRO stage 0-3
  int offload;              // percent of the optimizer state on the CPU: 0, 50, 100
  bool grads;               // and the gradients (offload 100 only: ZeRO-Offload)
  bool params;              // and the parameters (with the gradients, ZeRO-3 only:
                            // ZeRO-Infinity's offload_param)
  double t_micro[SV_MAXGROUPS], t_step[SV_MAXGROUPS], t_ghost[SV_MAXGROUPS];
  double mem[SV_MAXGROUPS], mem_shard[SV_MAXGROUPS], peak[SV_MAXGROUPS];
  double host[SV_MAXGROUPS], host_shard[SV_MAXGROUPS];
  // A checkpointing (or swapping) choice of a unit of several blocks may leave some of them
  // (the last ones) without: SvSolution.nplain. Such a block costs what it costs under the
  // same choice without checkpointing, which differs only in these four (no recompute or
  // copies, all activations kept on the device); the unit's peak stays `peak` (a
  // checkpointed block's).
  double t_micro_plain[SV_MAXGROUPS], mem_plain[SV_MAXGROUPS], host_plain[SV_MAXGROUPS];
  double t_ghost_plain[SV_MAXGROUPS];   // (ZeRO-3 gathers again where it recomputes)
} SvChoice;

// A set of blocks deciding together: one block, or identical blocks.
typedef struct SvUnit {
  const char *name;         // "h.0 .. h.11"
  int count;                // blocks
  int block;                // a representative block id (-1 in synthetic problems)
  int nchoices;
  SvChoice *choice;
} SvUnit;

// A pair of units whose blocks pass activations: r[g][a*nlayouts + b] is
// the resharding time per step (all count pairs) when u has layout a and v b.
typedef struct SvEdge {
  int u, v;
  int count;
  double *r[SV_MAXGROUPS];
} SvEdge;

#define SV_MAXLAYOUTS 24

typedef struct SvProblem {
  int ngroups;
  int gpus[SV_MAXGROUPS];
  double cap[SV_MAXGROUPS];       // usable bytes per GPU
  double host_cap[SV_MAXGROUPS];  // CPU bytes per GPU
  int64_t micro_total;            // micro-batches per step (M)
  int nlayouts;
  SvLayout layout[SV_MAXLAYOUTS];
  int nunits;
  SvUnit *unit;
  int nedges;
  SvEdge *edge;
  bool ckpt_first;                // only the first K repeated layers checkpoint (what mtc
                                  // compile lowers): of two consecutive layers that decide
                                  // alone (--no-share), the later one only if the earlier does
  int replica_ranks;              // > 0: mtc compile's one mesh, replicas of this many ranks, on
                                  // several groups: at least 1 micro-batch per replica, the
                                  // state sharded evenly (share = the group's GPUs / all) or,
                                  // where that does not fit, in whole parts (sv_share_units),
                                  // ghost micro-batches where replicas run fewer than the most
                                  // (sv_ghosts)
  int64_t fixed_batch[SV_MAXGROUPS];   // > 0: group g runs that many micro-batches (sv_solve
                                       // tries each split of mtc compile's apart)
  int64_t rows[SV_MAXGROUPS];     // sequences per micro-batch of each group (SvConfig's
                                  // micro_batch, or its group_rows: then fixed_batch is set)
  double micro_flops[SV_MAXGROUPS];   // model FLOPs of one of group g's micro-batches
  bool lockstep;                  // with fixed_batch: price the micro-steps in lockstep
                                  // (sv_lockstep_time), as a plan with a block that collects
                                  // every micro-batch runs them
} SvProblem;

// A solution: a choice per unit, micro-batches and state share per group.
typedef struct SvSolution {
  int *pick;                      // nunits choice indices
  int *nplain;                    // per unit whose pick checkpoints: its blocks left without
                                  // checkpointing, 0 to count - 1 (the integer program decides
                                  // it on one group of GPUs; it stays 0 on several)
  int64_t batch[SV_MAXGROUPS];    // micro-batches each group runs (sum = micro_total)
  double share[SV_MAXGROUPS];     // each group's share of the sharded state (sum = 1)
  bool feasible;
  double time;                    // step time: the slowest group
  double group_time[SV_MAXGROUPS];
  double mem[SV_MAXGROUPS];       // peak bytes per GPU
  double host[SV_MAXGROUPS];
} SvSolution;

void sv_problem_free(SvProblem *p);
// The blocks of unit u that s checkpoints (or swaps): the first K of the unit's count.
int sv_ckpt_blocks(const SvProblem *p, const SvSolution *s, int u);
int sv_swap_blocks(const SvProblem *p, const SvSolution *s, int u);
SvSolution sv_solution_new(const SvProblem *p);
void sv_solution_free(SvSolution *s);
void sv_solution_copy(SvSolution *dst, const SvSolution *src, int nunits);
// Evaluates pick and batch: on several groups, feasible only when each group's
// micro-batches are whole per replica of every layout its blocks take (what a
// program runs). With set_share, picks the state shares itself (proportional to
// each group's free memory; with replica_ranks, even) and reports whether any
// shares fit; otherwise uses s->share.
void sv_evaluate(const SvProblem *p, SvSolution *s, bool set_share);
// The ghost micro-batches each replica of group g runs in s (mtc compile on several groups:
// the most any replica runs, less its own; a program's replicas join every micro-batch's
// collectives of ZeRO 2 and 3 and gradient offload, runtime rt_model.ghost); 0 elsewhere.
double sv_ghosts(const SvProblem *p, const SvSolution *s, int g);
// Whether choice c's blocks collect every micro-batch (ZeRO 2 and 3, gradient offload: some
// group pays for ghosts, SvCost.t_ghost).
bool sv_pays_ghosts(const SvProblem *p, const SvChoice *c);
// Whether s runs its micro-batches in lockstep: mtc compile on several groups with a block that
// collects every micro-batch. Each micro-step's collectives wait for every replica's, its own
// micro-batch's or a ghost's, so with k[g] micro-batches a replica of group g runs (each `real`
// seconds, a ghost `ghost`), the micro-steps take sv_lockstep_time.
bool sv_lockstep(const SvProblem *p, const SvSolution *s);
double sv_lockstep_time(const SvProblem *p, const double *k, const double *real,
                        const double *ghost);
// The seconds a replica of group g waits a step for the others' micro-steps in s (lockstep;
// 0 elsewhere): the group's step time is its own (micro-batches, ghosts, once a step) and this.
double sv_wait(const SvProblem *p, const SvSolution *s, int g);
// The GPUs of all groups.
int sv_problem_gpus(const SvProblem *p);
// mtc compile (replica_ranks) on several groups: the units its replicas' parts of the sharded
// state are whole numbers of (Plan.replica_parts): a multiple of the replicas, at most 64; 0 on
// one group, outside compile, or past 64 replicas (the state then sharded evenly).
int sv_share_units(const SvProblem *p);
// The replicas of layout l in group g (its GPUs / the ranks of a replica).
int sv_replicas(const SvProblem *p, int g, int l);
// Tries every combination (tests; tiny problems only). -1 when too large.
int sv_brute_force(const SvProblem *p, SvSolution *best);

// ---- the integer program (solver/plan.c) --------------------------------------------------

typedef struct SvSolveStats {
  int vars, binaries, ints, rows, nonzeros;
  int choices, choices_kept;      // joint choices before and after pruning
  double seconds;
  double gap;                     // relative, proven
  const char *status;             // "optimal", "optimal within the gap", "time limit ..."
  bool timed_out;                 // stopped by the time limit
  bool cut_off;                   // stopped: no plan faster than SvSolveOptions.cutoff
  bool seeded;                    // GLPK took the incumbent offered
  const char *seed;               // what it was: "the best baseline", ...
} SvSolveStats;

typedef struct SvSolveOptions {
  double mip_gap, time_limit;
  bool verbose;
  const SvSolution *incumbent;    // a feasible solution to seed (NULL: none)
  bool min_memory;                // minimize the extra memory every GPU would need instead
  double cutoff;                  // > 0: stop once no plan can be faster than this (s)
} SvSolveOptions;

// Solves p. Returns 0 with best set (best->feasible false when nothing fits),
// -1 with d on a solver failure. With min_memory, best->time holds the extra
// bytes per GPU needed.
int sv_solve(const SvProblem *p, const SvSolveOptions *o, SvSolution *best, SvSolveStats *st,
             IrDiag *d);

// ---- planning a model (solver/plan.c) --------------------------------------------------------

// bytes as GiB to a tenth, or in MiB or KiB below a tenth of the unit above
// (a small model's plan would read "0.0 GiB"), into buf (32 bytes); returns buf
const char *sv_bytes_str(char *buf, double bytes);
// The unit bytes are printed in: of GiB, MiB and KiB the largest that `ref`
// (a value, or a line's or a table's largest) reaches a tenth of, so that small
// models do not print 0.0 GiB. sv_bytes_str and mtc plan's report use it.
typedef struct SvByteUnit {
  double bytes;
  const char *name;
} SvByteUnit;
SvByteUnit sv_unit(double ref);

typedef struct SvBaseline {
  char name[48];                  // "DP", "ZeRO-3", "Megatron TP=8", ...
  SvSolution sol;
  bool ckpt;                      // needed checkpointing to fit
  double need;                    // when it does not fit: bytes per GPU over capacity
  double host_need;               // bytes of CPU memory per GPU over capacity (0: fits)
  char why[96];                   // not "": the layout does not apply to the model, and why
                                  // ("NH = 25 heads do not divide by tp = 8")
} SvBaseline;

#define SV_MAXBASELINES 6

typedef struct SvPlan {
  SvConfig cfg;
  SvModel *model;
  SvProblem *prob;
  SvNum *nums;                    // per unit: its block's numbers (where the groups' micro-
                                  // batches differ in size, group 0's; then each group's:
                                  // sv_plan_num)
  SvSolution sol;
  SvSolveStats stats;
  int nbaselines;
  SvBaseline baseline[SV_MAXBASELINES];
  int64_t micro_batch, seq, global_batch;
  char why[1024];                 // when nothing fits: what binds and what would fit
  double need;                    // ... and the extra bytes per GPU the leanest plan needs
                                  // (HUGE_VAL: none fits with any)
  double seconds;                 // the whole plan: cost model, baselines, solve
  double one_size;                // each group's micro-batches its own size (mtc compile's
                                  // plans): the fastest plan's step with one size for every
                                  // group (INFINITY: none fits; 0: not planned)
} SvPlan;

// Moves from's baselines into to's: each kind (DP, ZeRO-3, Megatron, 2D, ZeRO-3 + offload)
// to lacks, or has a worse one of; frees the rest. to keeps baselines' order. Plans of
// the same model and cluster (the meshes of sv_plan_compiled, each of which has the
// baselines its layouts allow).
void sv_plan_merge_baselines(SvPlan *to, SvPlan *from);

// Plans g (after the passes through "optimizer") on cfg. Returns 0 with *out
// set; out->sol.feasible false and out->why filled when no plan fits. -1 with
// d on bad input (a cluster that cannot hold the batch, a solver failure).
int sv_plan(IrGraph *g, const SvConfig *cfg, SvPlan **out, IrDiag *d);
void sv_plan_free(SvPlan *p);

// The cost of one block of unit u with choice c on group g, by category.
void sv_plan_cost(const SvPlan *p, int u, int c, int g, SvCost *out);
// Unit u's numbers at group g's micro-batch.
const SvNum *sv_plan_num(const SvPlan *p, int u, int g);
// The cost of all of unit u's blocks under solution s on group g, by category (its
// checkpointed blocks and those left without); peak: the largest block's.
void sv_plan_unit_cost(const SvPlan *p, const SvSolution *s, int u, int g, SvCost *out);

// ---- applying a plan (solver/apply.c) -----------------------------------------------------------

// A plan as mtc compile lowers it: one mesh of dp x tp ranks, or of dp x a
// q x q grid, for every block (in a dp x tp mesh a block may be data parallel over all of
// its ranks).
// The fastest feasible plan that mtc compile lowers (a solve per tp that divides
// each group's GPUs, and per 2D grid: SvConfig.mesh_tp, mesh_q), into *kept (free it with
// sv_plan_free); where none fits, the mesh's that comes nearest (infeasible: its why says
// what binds and what would fit). mtc plan reports it. -1 with d when no mesh could be solved.
int sv_plan_compiled(IrGraph *g, const SvConfig *cfg, SvPlan **kept, IrDiag *d);
// That plan as the program runs it. -1 with d when none fits (what binds, from the solver).
int sv_apply_best(IrGraph *g, const SvConfig *cfg, Plan *out, SvPlan **kept, IrDiag *d);
// The plan in a plan.json text (path names it in errors), checked against g's
// blocks. -1 with d naming the block and field that does not fit.
int sv_apply_read(IrGraph *g, const char *path, const char *text, Plan *out, IrDiag *d);
// Would mtc compile --plan run the (mtc plan --any-mesh) plan p as written: the blocks' meshes
// one program's, their checkpointing and swap in the order it does them? When not, why says
// why (the first refusal that mtc compile --plan would give).
bool sv_plan_runs(const SvPlan *p, char *why, size_t n);

// What the planner's formulas say a lowered program holds and sends per rank,
// from its buckets' element types: model state on the device and (offload) in
// host memory, bytes sent per step; and its layout in words ("dp 2 x tp 2,
// ZeRO-1, swap 1 and recompute 2 of 4 layers"). The program prints them beside what it
// measures.
typedef struct SvPredicted {
  int64_t state_bytes, host_bytes, comm_bytes;  // comm: of a replica running the plan's
  int64_t comm_micro_bytes;                     // micro_batches, of which each sends this many
  int64_t comm_ghost_bytes;                     // (a ghost micro-batch: those over buckets)
  char layout[160];
} SvPredicted;
void sv_predict(const PassLowered *lw, int nswapped, int ncheckpointed, int nlayers,
                SvPredicted *out);

// The planner's price of the layout a program runs: plan (before lowering) on
// cfg's cluster, as many GPUs as the plan's mesh has ranks (numbered group by
// group, each group's replicas running their micro-batches of the plan), each
// block's choice the plan's. The step time and its split are the planner's
// (mtc plan's report and plan.json), for the slowest group.
typedef struct SvPriced {
  double step_s;             // the step (the slowest group's)
  double t[SV_NT + 1];       // by category, seconds per step (the slowest group's); [SV_NT]:
                             // resharding
  char device[96];           // the GPUs it is priced for ("H100-80GB", "H100-80GB+L4-24GB")
  bool fits;                 // whether the layout fits that GPU's memory
  double mem_bytes;          // peak bytes per GPU (the slowest group's GPUs)
  double usable_bytes;       // what the planner lets them use
  double swap_bytes;         // activations a GPU swaps to host memory (the slowest group's)
  double state_bytes;        // model state a GPU holds on the device (the slowest group's)
} SvPriced;
// On one group of GPUs a plan whose replicas run unequal numbers of micro-batches, or hold
// unequal parts of the state, is priced on that group split as its replicas differ (runs of
// alike replicas, on one node where the group fits one).
// 0 with out filled; 1 when the planner has no choice for the plan (another
// cluster, an offload share other than 0, 0.5 and 1, a checkpointing it does
// not model), with d saying why; -1 with d when planning fails.
int sv_price(IrGraph *g, const SvConfig *cfg, const Plan *plan, SvPriced *out, IrDiag *d);
// The price the planner's roofline gives each node of a lowered program g (each rank's shapes)
// on cfg's first group, summed by op (arrays of OP_COUNT): seconds per micro-batch of forward
// and backward nodes, and per step of the update's; -1 for ops it does not price per node
// (communication, copies to and from the host); outside_s: the scans the program runs each
// step outside them (the gradients' norm, the weights' finite check), as the planner prices
// them in the update. train --profile prints them beside the clock.
void sv_price_nodes(IrGraph *g, const SvConfig *cfg, double *micro_s, double *step_s,
                    double *outside_s);

// ---- output (solver/report.c) ------------------------------------------------------------------

void sv_report(FILE *f, const SvPlan *p);
// The plan as a Graphviz graph (mtc plan --dot): a box per unit with its layout,
// checkpointing, ZeRO stage, offload, time and memory; an edge per flow of
// activations between units, in MiB per micro-batch.
void sv_report_dot(FILE *f, const SvPlan *p);
// The plan as an SVG picture: its blocks by layout, per-GPU memory bars against the usable
// memory, the step time by category, and the baselines' time and memory beside it.
void sv_report_svg(FILE *f, const SvPlan *p);
int sv_write_svg(const SvPlan *p, const char *path, IrDiag *d);   // "-": stdout
// Solution s's step on group g by category, seconds ([SV_NT]: resharding), as the report splits it.
void sv_step_times(const SvPlan *pl, const SvSolution *s, int g, double t[SV_NT + 1]);
// The model state (parameters, gradients, optimizer state) a GPU of group g holds, in bytes.
double sv_state_bytes(const SvPlan *pl, const SvSolution *s, int g);
int sv_write_json(const SvPlan *p, const char *path, IrDiag *d);   // "-": stdout
// "8 x DP", "2 x TP4", "2 x 2D 2x2"
const char *sv_layout_str(char *buf, size_t n, SvLayout l);

#endif
