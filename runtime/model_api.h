// The interface between a generated model (model.c) and the training main
// (train.c). mtc writes model.c; train.c is the same for every model.
#ifndef MTC_RT_MODEL_API_H
#define MTC_RT_MODEL_API_H

#include "bf16.h"  // rt_bf16 (runtime/dtypes.def's bf16)

// The element types (RT_F32, RT_I32, RT_BF16, ...), in runtime/dtypes.def's order.
enum {
#define DT(name, text, bytes, ctype) RT_##name,
#include "dtypes.def"
  RT_NDTYPES
};

// Bytes per element of an RT_ type.
static inline int rt_dtype_size(int dtype) {
  static const int bytes[] = {
#define DT(name, text, bytes, ctype) bytes,
#include "dtypes.def"
  };
  return dtype >= 0 && dtype < RT_NDTYPES ? bytes[dtype] : 0;
}

#define RT_MAXRANK 8

// The GPU build's GEMM workspace (cuBLAS's on Hopper: 32 MiB), a part of the
// device memory the program plans (rt_model.workspace_bytes).
#define RT_GEMM_WORKSPACE_BYTES (32L << 20)

// Where an input's values come from when the program trains.
enum {
  RT_IN_RANDN,    // synthetic: normal(0, 1) floats
  RT_IN_CLASSES,  // synthetic: integers uniform in [0, range)
  RT_IN_TOKENS,   // token stream positions [0, n) of the batch (range = vocab)
  RT_IN_TARGETS,  // token stream positions [1, n+1): next-token targets
  RT_IN_MASK,     // synthetic: a padding mask, each row of the last dim 1 for a random
                  // length in [1, row], then 0 (range = 2)
  RT_IN_LABELS,   // token stream positions [0, n) again: labels the model shifts itself
};

// What an entry of the params table is (its kind).
enum {
  RT_PARAM_TRAINED,  // a trainable parameter; its gradient is at grad_offsets[i]
  RT_PARAM_CONST,    // a constant of the model (an ONNX initializer that is not trained)
};

// How a parameter's initial values come (the program draws them unless the
// model has given values: rt_model.weights_file).
enum { RT_INIT_DATA, RT_INIT_ZEROS, RT_INIT_ONES, RT_INIT_NORMAL };

// A dim of a parameter split over the ranks of a mesh axis (runtime/dist.h).
typedef struct rt_split {
  int dim;            // -1: none
  int axis;           // RT_AXIS_TP, RT_AXIS_ROW or RT_AXIS_COL; RT_AXIS_NONE: the dim is only
                      // padded (bf16's vocabulary), whole on every rank
  int pieces;         // the dim is made of this many equal pieces, each split
  long pad;           // ... padded by this many (zero) entries to a multiple of the axis's
                      // ranks (a vocabulary): each rank holds (sizes[dim] + pad) / ranks
} rt_split;

typedef struct rt_tensor {
  const char *name;   // as in the model (parameter or input name)
  long offset;        // byte offset in the arena
  long numel;         // element count
  int dtype;          // RT_F32, RT_I32, ... (dtypes.def)
  int kind;           // inputs: RT_IN_*; params: RT_PARAM_*
  long range;         // inputs only: number of classes / vocabulary size
  const char *shape;  // human-readable, e.g. "(B, T, C) = (4, 64, 128)"
  int rank;
  long sizes[RT_MAXRANK];  // the shape's values, e.g. {4, 64, 128}
  int batched;        // inputs: the first dim is the batch (each rank takes its slice);
                      // constants: shaped by the rank's batch (a mask over it), no weight
  int bucket;         // params: the bucket it lives in (-1: none, at offset)
  long bucket_elem;   // ... and its first element there
  rt_split split[2];  // params: the dims split over ranks (tp: one; a 2D grid: a row's and a
                      // column's); numel, rank and sizes are the whole tensor's. Inputs: their
                      // sizes are this rank's (a 2D grid splits the batch over its rows)
  int ignores;        // inputs: labels of a loss that skips rows labelled `ignore` (HF's -100),
  long ignore;        // which --inputs may hold besides [0, range)
  int init;           // params: RT_INIT_*; normal(0, init_std) from rt_rng_init_normal's
  float init_std;     // stream (rt_model.init_seed, the index in the params table)
} rt_tensor;

// A block's parameters and gradients as flat buckets (multi-rank programs;
// passes/lower.c in mtc has the layout). numel divides by the ranks along
// shard_axis, n (dp; every rank for a block data parallel over tp; dp x subdp for a
// block tensor parallel over sub ranks); the rank at place r along it holds elements
// [r*numel/n, (r+1)*numel/n).
typedef struct rt_bucket {
  const char *name;
  long numel;              // elements of the whole bucket
  int zero;                // ZeRO stage
  long params_offset;      // byte offset of the whole parameter bucket, or of this rank's shard
  int params_sharded;      // (ZeRO-3: only the shard is kept)
  long grads_offset;       // byte offset of the reduced gradient (after the step's collectives)
  int grads_sharded;       // only this rank's shard is reduced
  int grads_host;          // the reduced gradient is in the host region (gradient offload)
  long grads_numel;        // elements at grads_offset: numel (the shard at its slot) or numel/dp
  long host_numel;         // bf16 offload: the last host_numel elements of this rank's part of
  long host_offset;        // the parameters (the shard, or the whole bucket) are not in the
                           // arena but at this byte offset of the host region
  // AdamW's moments cover this rank's part of the bucket: its shard when
  // state_sharded, else the whole bucket; the first part - state_host_numel
  // elements at byte offsets m_offset and v_offset of the arena (-1: none), the
  // last state_host_numel (offload) at m_host_offset and v_host_offset of the
  // host region
  int state_sharded;
  long state_host_numel;
  long m_offset, v_offset, m_host_offset, v_host_offset;
  int shard_axis;          // the mesh axis it is reduced and sharded over (dist.h's RT_AXIS_DP,
                           // RT_AXIS_ALL or RT_AXIS_SUBREP)
} rt_bucket;

// Optimizer hyper-parameters: defaults compiled into the model, overridable
// by train's flags (--lr, --beta1, ...). PyTorch's AdamW and SGD semantics.
enum { RT_OPT_ADAMW, RT_OPT_SGD };

typedef struct rt_hparams {
  int optimizer;        // RT_OPT_ADAMW | RT_OPT_SGD
  float lr, beta1, beta2, eps, weight_decay;
  int step;             // 1-based step number (AdamW bias correction)
  float grad_scale;     // the update reads the gradients times this (clipping; 1: none)
} rt_hparams;

typedef struct rt_dim {
  const char *name;   // B, T, C, ...
  long value;
} rt_dim;

#define RT_PLANNER_NTIMES 7  // rt_model.planner_time_s: the planner's categories of a step

// train --profile (profile.h): the model's code marks each node's op kind (an index into
// rt_model.op_kinds) before its kernels, and the end of each of its functions.
extern int rt_prof_on;
void rt_prof_op(int kind);
#define RT_OP(kind)                  \
  do {                               \
    if (rt_prof_on) rt_prof_op(kind); \
  } while (0)
#define RT_OP_END() RT_OP(-1)

typedef struct rt_model {
  const char *name;
  int n_dims;
  const rt_dim *dims;      // the model's dims and the values it was compiled for
  long arena_bytes;        // planned arena size (persistent + transient)
  long persistent_bytes;   // parameters, optimizer state, inputs
  long peak_live_bytes;    // max over the schedule of bytes live at once
  long workspace_bytes;    // GPU build: device memory beside the arena, for the GEMM library
                           // and the kernels' scratch (the CPU build needs none)
  int n_inputs;
  const rt_tensor *inputs;
  int n_params;
  const rt_tensor *params;    // parameters, then constants; in weights-file order
  int weights_file;           // 1: the initial values are in weights.bin (the model gives
                              // some: an ONNX model's); 0: the program draws them
  unsigned long long init_seed;  // mtc compile --seed: the drawn values' streams
  long loss_offset;           // byte offset of the scalar loss
  long tokens_per_step;       // rows of the batch that count as tokens (B*T), for tok/s
  double flops_per_step;      // forward + backward + update, from the cost rules
  // Sampling (train --sample): the logits the loss reads, intact after forward:
  // per sequence of this rank's batch logits_rows rows of logits_vocab values,
  // row t scoring the token after position t (logits_rows is T, or T - 1 for a
  // model that shifts its labels itself); logits_offset -1: none (no token
  // loss, or logits split over tensor-parallel ranks).
  long logits_offset;
  int logits_dtype;
  long logits_rows, logits_vocab;
  void (*forward)(char *arena, char *host);
  // host: the host region (gradient offload, swapped activations; NULL when host_bytes is 0)
  void (*backward)(char *arena, char *host);
  rt_hparams defaults;         // as compiled (mtc compile --optimizer, --beta1, ...)
  int has_adam_state;         // AdamW moments are in the arena (else only SGD can run)
  // host: the host region (offload; NULL when host_bytes is 0)
  void (*update)(char *arena, char *host, const rt_hparams *h);
  // A replica that runs fewer micro-batches than the most (replica_micro) joins the others'
  // collectives of each micro-batch it does not run, after its own: forward's and (train)
  // backward's over buckets, no compute (passes/lower.c); NULL: none every micro-batch.
  void (*ghost)(char *arena, char *host, int train);
  long planner_comm_ghost_bytes;  // bytes a ghost micro-batch sends (the planner's)
  long host_bytes;            // the host region: offloaded model state, swapped activations
                              // (0: none)
  // Fills the host's copies of device values (the parameters the host
  // updates) from the arena, once the weights are loaded; NULL: nothing to fill.
  void (*init_host)(char *arena, char *host);
  // Writes the parameters' bf16 working copies from the float32 parameters
  // (--precision bf16; offloaded ones from the host region), once the weights
  // are loaded; NULL: the program has none.
  void (*init_copies)(char *arena, char *host);
  // Byte offset of params[i]'s gradient (for constants: their own buffer).
  // Gradients are transient buffers, but each stays intact from the end of
  // backward() until its update.
  const long *grad_offsets;
  int grad_dtype;             // RT_F32, or RT_BF16 (--grad-precision bf16): the elements of every
                              // trained parameter's gradient, at grad_offsets and in the buckets
  // Byte offsets of params[i]'s AdamW moments at [2i] (m) and [2i + 1] (v);
  // -1: none (SGD, a constant, or in a bucket: rt_bucket has them).
  const long *adam_offsets;
  long dropout_step_offset;   // the dropout masks' step counter (int32), -1: no dropout
  // The parallel plan (1, 1, 1 and no buckets for a one-rank program).
  int dp, tp;                 // mesh: dp x tp ranks, or (tp 1) dp x a grid of
  int grid_side;              // grid_side x grid_side ranks (Optimus 2D; 1: none)
  int tp_sub;                 // the degree of blocks tensor parallel over part of tp (1: none)
  int tp_grid;                // the side of 2D blocks' grids inside tp (1: none)
  int micro_batches;          // forward/backward passes per step of each replica (with
                              // replica_micro: the most any runs); the global batch is batch x
                              // dp x micro_batches, or batch x the sum of replica_micro
  const int *replica_micro;   // NULL, or dp entries: the micro-batches replica d runs (a mixed
                              // cluster's uneven batch shares)
  long batch_rows;            // the sequences of a micro-batch of this model's replicas (its
                              // batch dim; 1 for a model without one)
  const int *replica_rows;    // NULL, or dp entries: the sequences of replica d's micro-batches
                              // (a mixed cluster's groups' sizes; each size is a model of its
                              // own, whose batch_rows it is)
  const int *dp_parts;        // NULL, or dp entries: the ratio of the replicas' parts of each
                              // bucket sharded over dp (parts.h; a mixed cluster's uneven state
                              // shares); this model's sizes are its own replicas' parts
  int rank_end;               // the world ranks this model runs: from the previous model's
                              // rank_end (0 for the first) to below this
  const char *layout;         // "dp 4 x tp 1, ZeRO-3" for messages
  int n_buckets;
  const rt_bucket *buckets;
  int n_slots;                // collective request slots
  long model_state_bytes;     // per rank, on the device: parameters, reduced gradients,
                              // optimizer state
  long model_host_bytes;      // per rank, in host memory (offload): the host's copies of
                              // parameters and gradients, optimizer state
  long swap_host_bytes;       // per rank, in host memory: swapped activations (--swap)
  long planner_state_bytes;   // what the planner predicts for model_state_bytes (0: not given)
  long planner_host_bytes;    // ... and for model_host_bytes
  long planner_swap_bytes;    // ... and for swap_host_bytes (0: not given)
  long planner_comm_bytes;    // bytes the planner predicts each rank sends per step (with
                              // replica_micro: a rank of a replica running micro_batches), of
  long planner_comm_micro_bytes;  // which each micro-batch sends this many
  const char *planner_device; // the GPU the planner priced the step for (NULL: not priced)
  double planner_step_s;      // ... its step time, and that split (seconds): compute,
  double planner_time_s[RT_PLANNER_NTIMES];  // recompute, tensor-parallel and data-parallel
                              // communication, offload, optimizer, resharding
  int n_op_kinds;             // the IR ops the model's nodes run (RT_OP's kinds), by name
  const char *const *op_kinds;
  const double *op_micro_s;   // NULL, or per op kind: the planner's price on planner_device of
  const double *op_step_s;    // its nodes, seconds per micro-batch (forward, backward) and per
                              // step (the update); -1: not priced per node (communication)
  double op_outside_s;        // ... and of the scans train.c runs each step (the gradients'
                              // norm, the weights' finite check), seconds per step
  int loss_partial_axes;      // bits (1 << RT_AXIS_*): the axes over which each rank's loss is
                              // its term of a sum (a vocabulary-parallel loss; a 2D grid's rows)
} rt_model;

// The program's models: one, or (uneven state shares) one per group of ranks whose static plans
// differ, in rank order (rt_model.rank_end).
extern const int mtc_nmodels;
extern const rt_model *const mtc_models[];

#endif
