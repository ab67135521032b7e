// mtc's intermediate representation: a graph of ops over tensors with
// symbolic shapes.
//
// A graph owns its values (tensors) and nodes (ops). Nodes are kept in a
// valid execution order (every input is defined before use), so the node
// list is also the schedule. Everything is allocated in the graph's arena and
// freed at once by ir_graph_free.
#ifndef MTC_IR_H
#define MTC_IR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "arena.h"
#include "sym.h"

#define IR_MAXRANK 8
// The most elements one constant's data may hold (IR text, ONNX folding): 256 MiB of f32, a
// causal mask for T = 8192.
#define IR_DATA_MAX ((int64_t)1 << 26)
// The largest tensor mtc plans, in bytes (256 TiB): a memory plan of fewer than 2^15 of them
// cannot overflow int64.
#define IR_BYTES_MAX ((int64_t)1 << 48)

// ---- ops -------------------------------------------------------------------

typedef enum IrOp {
#define OP(E, name, nin, nout, kind) OP_##E,
#include "ops.def"
  OP_COUNT
} IrOp;

typedef enum IrOpKind {
  KIND_COMPUTE, KIND_ELEMWISE, KIND_REDUCE, KIND_MOVE, KIND_OPT, KIND_COMM, KIND_HOST
} IrOpKind;

const char *ir_op_name(IrOp op);
int ir_op_nin(IrOp op);            // -1: variadic
int ir_op_nout(IrOp op);           // -1: variadic
IrOpKind ir_op_kind(IrOp op);
IrOp ir_op_lookup(const char *name); // OP_COUNT when unknown

// ---- values ----------------------------------------------------------------

// The element types, from runtime/dtypes.def (the runtime's RT_<NAME> have the
// same values): DT_F32, DT_I32, DT_BF16, ...; printed by their text names.
typedef enum IrDType {
#define DT(name, text, bytes, ctype) DT_##name,
#include "dtypes.def"
  DT_COUNT
} IrDType;

typedef enum IrRole {
  ROLE_INPUT,   // fed by the data loader every step
  ROLE_PARAM,   // trainable parameter
  ROLE_ACT,     // forward intermediate
  ROLE_GRAD,    // gradient (of an activation or a parameter)
  ROLE_STATE,   // optimizer state (AdamW moments)
  ROLE_CONST,   // constant
  ROLE_BUCKET,  // a flat buffer that other values live in (passes/lower.c): the
                // parameters or gradients of one block, or a shard of them
  ROLE_COPY,    // a parameter's working copy in the compute dtype (bf16), written from
                // the parameter by the update (passes/precision.c): persistent
} IrRole;

// INIT_DATA: the value's elements are given (IrValue.data), e.g. an ONNX
// initializer or a folded constant.
typedef enum IrInitKind { INIT_NONE, INIT_ZEROS, INIT_ONES, INIT_NORMAL, INIT_DATA } IrInitKind;

typedef struct IrInit {
  IrInitKind kind;
  double std;           // INIT_NORMAL: normal(0, std)
} IrInit;

// Where an input's data comes from (mirrors runtime/model_api.h RT_IN_*).
typedef enum IrInputKind {
  INPUT_RANDN,    // normal(0, 1) floats
  INPUT_CLASSES,  // integers in [0, range)
  INPUT_TOKENS,   // token positions of the batch
  INPUT_TARGETS,  // the tokens that follow them
  INPUT_MASK,     // a padding mask: per row of the last dim, 1 up to a valid length, then 0
  INPUT_LABELS,   // the token positions again, as labels the model shifts itself (Hugging
                  // Face's causal LMs: labels[..., 1:] against logits[..., :-1, :])
} IrInputKind;

// A source location: DSL file:line:col, or (line == 0) an ONNX node name in
// `file`. file == NULL means none.
typedef struct IrLoc {
  const char *file;
  int line, col;
} IrLoc;

typedef struct IrNode IrNode;

// ---- the device mesh -----------------------------------------------------------

// The axes of the device mesh a value can be split over (ir/shard.c lays
// values out on them; collectives name the axis they run along).
typedef enum IrMeshAxis {
  IR_MESH_NONE,  // not split: replicated
  IR_MESH_DP,    // data parallel: replicas of the model, each on its share of the batch
  IR_MESH_TP,    // tensor parallel (Megatron 1D): the ranks that share one replica's ops
  // Optimus 2D: one replica's ranks as a q x q grid, rank (i, j) at i * q + j.
  // A dim split over ROW is cut by the grid row i (the batch, a weight's input
  // dim), over COL by the grid column j (features, a weight's output dim); a
  // collective over ROW runs among the q ranks of one grid column, over COL
  // among those of one grid row.
  IR_MESH_ROW,
  IR_MESH_COL,
  // A block whose tensor-parallel degree s is below the mesh's tp (PlanBlock.tp: TP2 beside
  // TP4) splits its ops over SUB, the s adjacent ranks of the replica whose tp rank / s is
  // the same, and its batch over SUBDP, the tp / s ranks whose tp rank % s is the same.
  IR_MESH_SUB,
  IR_MESH_SUBDP,
  // A 2D grid on the sub ranks (q x q = sub < tp: 2D beside 1D on part of tp): its blocks split
  // their batch over SUBROW, the grid's rows of all tp / sub grids, rank (t / sub) * q + i in
  // it. Its collectives are one replica's ranks with the same grid column (t % q); its partial
  // sums are over row and subdp (ir/shard.c decomposes them). With sub = tp it is row.
  IR_MESH_SUBROW,
  IR_MESH_NAXES,
  // Every rank of the mesh (dp x one replica's ranks): no dim is split over it; a block data
  // parallel over tp (PlanBlock.batch_tp) reduces and shards its bucket over it.
  IR_MESH_ALL = IR_MESH_NAXES,
  // The replicas of a block of degree s below the mesh's tp: dp x SUBDP, the ranks whose tp
  // rank % s is the same; no dim is split over it, the block's bucket is reduced and sharded
  // over it.
  IR_MESH_SUBREP,
} IrMeshAxis;

// "dp", "tp", "row", "col", "sub", "subdp", "subrow", "all", "subrep" ("-": none)
const char *ir_mesh_axis_name(IrMeshAxis a);
// The axes that split one replica's ops (tp, row, col, sub), and a sub block's batch (subdp,
// and a grid's on sub ranks, subrow), as bits (1 << axis).
#define IR_MESH_MODEL_AXES                                                                    \
  ((1u << IR_MESH_TP) | (1u << IR_MESH_ROW) | (1u << IR_MESH_COL) | (1u << IR_MESH_SUB) |      \
   (1u << IR_MESH_SUBDP) | (1u << IR_MESH_SUBROW))
// Can a dim split over axis a be made of equal pieces, each split (IrValue.pieces: a fused
// QKV output dim)? Over tp (or a sub block's) and the grid's columns, which split output dims;
// the grid's rows split a batch or a weight's input dim, never made of pieces.
static inline bool ir_mesh_pieces(IrMeshAxis a) {
  return a == IR_MESH_TP || a == IR_MESH_COL || a == IR_MESH_SUB;
}
// Can a vocabulary split over axis a (a vocabulary-parallel embedding and loss, the vocabulary
// padded where the degree does not divide it)? Over the same axes: the vocabulary is the LM
// head's output dim.
static inline bool ir_mesh_vocab(IrMeshAxis a) { return ir_mesh_pieces(a); }
// The runtime numbers the axes from dp (runtime/dist.h RT_AXIS_*: dp 0, tp 1, row 2, col 3,
// sub 4, subdp 5, subrow 6, all 7, subrep 8):
// the "axis" and "split_axis" attributes of the ops that run collectives hold that number.
static inline int ir_rt_axis(IrMeshAxis a) { return (int)a - IR_MESH_DP; }
static inline IrMeshAxis ir_mesh_axis_of_rt(int64_t rt) { return (IrMeshAxis)(rt + IR_MESH_DP); }

// How a dim of a value lies over the mesh once a plan is lowered
// (passes/tp.c): split over an axis, with shape[] holding this rank's part,
// or whole. A padded vocabulary (bf16 programs pad it to a multiple of 128,
// tp to a multiple of its degree: passes/tp.c) has `whole` the padded size
// and `valid` the model's, split or not (NULL: nothing padded).
typedef struct IrDimLayout {
  IrMeshAxis axis;          // IR_MESH_NONE: the dim is whole on every rank
  const Sym *whole;         // its size in the whole tensor (split dims)
  const Sym *valid;
} IrDimLayout;

typedef struct IrValue {
  int id;
  const char *name;         // unique in the graph
  IrDType dtype;
  int rank;                 // -1 while unknown (before shape inference)
  const Sym *shape[IR_MAXRANK];
  IrRole role;
  bool frozen;              // a parameter --freeze made a constant (passes/freeze.c)
  IrNode *producer;         // NULL for inputs, params, state, constants
  IrLoc loc;
  // ROLE_PARAM / ROLE_STATE
  IrInit init;
  struct IrValue *grad;     // ROLE_PARAM: its gradient, set by autodiff
  // ROLE_INPUT
  IrInputKind input_kind;
  const Sym *range;         // INPUT_CLASSES / TOKENS / TARGETS / MASK: values in [0, range)
  // Placement (passes/lower.c): v lives inside `bucket` at byte offset
  // bucket_off; the memory plan places it there and keeps the bucket live
  // while v is.
  struct IrValue *bucket;
  int64_t bucket_off;
  // in_shard: v's elements live only as parts of its bucket, which is this
  // rank's shard or range (a bf16 program's float32 masters under ZeRO-1-3,
  // or under offload, where the host holds the rest; only the update reads
  // them, bucket-wide): bucket_off is its place in the whole bucket, and v
  // has no buffer of its own (the memory plan places it at the bucket, and
  // nothing reads it there).
  bool in_shard;
  // Its layout over the device mesh (passes/tp.c), per dim; the dim split
  // over tp is made of `pieces` equal pieces, each split (a fused QKV output
  // holds this rank's q, k and v parts side by side; runtime/dist.h has the
  // layout).
  IrDimLayout layout[IR_MAXRANK];
  int pieces;
  // A parameter's gradient still a partial sum over the parts of its block's batch (over tp
  // in a block data parallel over tp, over subdp in a block below the mesh's tp), which the
  // data-parallel reduction of its bucket finishes (passes/tp.c); IR_MESH_NONE: none.
  IrMeshAxis partial_batch;
  // Placement (passes/lower.c, offload): v lives in host memory, not on the
  // device. The memory plan lays host values out in a host region of their
  // own; only to_device and updates on the host read them.
  bool host;
  // INIT_DATA (parameters and constants): numel elements of dtype, in the
  // graph's arena; NULL reads as zeros (the IR text does not carry data).
  const void *data;
} IrValue;

// ---- nodes -----------------------------------------------------------------

typedef enum IrAttrKind { ATTR_INT, ATTR_FLOAT, ATTR_INTS, ATTR_SYMS, ATTR_STR } IrAttrKind;

typedef struct IrAttr {
  const char *name;
  IrAttrKind kind;
  int64_t i;
  double f;
  int n;                    // ATTR_INTS, ATTR_SYMS
  int64_t *ints;
  const Sym **syms;         // ATTR_SYMS: a list of formulas (split sizes)
  const char *s;
} IrAttr;

// An attribute an op takes, as ir/attrs.def declares it.
typedef struct IrAttrDecl {
  IrOp op;
  const char *name;
  IrAttrKind kind;
  bool required;
  double dflt;              // INT, FLOAT: the value of an attribute a node does not set
  double lo, hi;            // INT, FLOAT, INTS: the range of a value (inclusive)
} IrAttrDecl;

const IrAttrDecl *ir_op_attr(IrOp op, const char *name); // NULL when op does not declare it
const IrAttrDecl *ir_op_attr_at(IrOp op, int i);         // op's i-th; NULL after the last
// For messages, into buf: "its attributes: axis, start, step" or "it has none".
const char *ir_op_attr_list(IrOp op, char *buf, size_t size);
const char *ir_attr_kind_name(IrAttrKind kind);          // "an integer", "a list of formulas" ...

typedef enum IrPhase { PHASE_FORWARD, PHASE_BACKWARD, PHASE_UPDATE } IrPhase;

struct IrNode {
  int id;
  IrOp op;
  int nin, nout;
  IrValue **in, **out;
  int nattr;
  IrAttr *attr;
  int block;                // 0: outside any repeated block; k >= 1: k-th block instance
  int use;                  // within its block, the k-th run (from 0) of layers that run more
                            // than once on the same weights (ALBERT's shared layer)
  IrPhase phase;
  IrLoc loc;
};

// ---- graph -----------------------------------------------------------------

typedef struct IrGraph {
  IrArena arena;
  SymTab syms;
  const char *name;
  IrValue **values;
  int nvalues, capvalues;
  IrNode **nodes;
  int nnodes, capnodes;
  // ir_value_find's index (ir.c): a hash table of values by name, open
  // addressing; an entry whose value was renamed or removed since is skipped
  // and dropped when the table is built again.
  IrValue **name_slot;
  int name_cap, name_used;
  IrValue *loss;            // the scalar trained on
  bool no_epilogue;         // --no-epilogue: biases and GELUs stay passes of their own
                            // (passes/epilogue.c; the planner prices them so)
  const char *after;        // the last pass that changed the graph (IR text: `after NAME`);
                            // NULL before any; the pipeline resumes after it
  int batch_sym, seq_sym;   // the batch and sequence dims (symbol indices; -1: none),
                            // marked by the frontend
  // builder state: new nodes get these, and go before node insert_at (at the
  // end when it is negative)
  IrPhase cur_phase;
  int cur_block, cur_use;
  IrLoc cur_loc;
  int insert_at;
  // a batch of edits (ir_batch_begin): the nodes waiting to go in (each one's
  // id is the position it goes before)
  bool batching;
  IrNode **pending;
  int npending, cappending;
} IrGraph;

IrGraph *ir_graph_new(const char *name);
void ir_graph_free(IrGraph *g);

// ---- a set of strings (ir/ir.c) ------------------------------------------------

// For making many names unique in one pass. The set keeps the caller's
// pointers: the strings must outlive it (in the graph's arena, say).
typedef struct IrStrSet {
  const char **slot;        // open addressing; NULL: empty
  size_t cap, n;
} IrStrSet;

bool ir_strset_has(const IrStrSet *set, const char *s);
// Adds s; false when the set has it already.
bool ir_strset_add(IrStrSet *set, const char *s);
void ir_strset_free(IrStrSet *set);

// ---- diagnostics -------------------------------------------------------------

// Library code never exits: it returns -1 and fills an IrDiag; the CLI prints.
typedef struct IrDiag {
  IrLoc loc;
  char msg[2048];
  char loc_text[256];  // holds loc.file when what it named is freed (an ONNX node name)
} IrDiag;

// Fill d (when non-NULL) with a printf-formatted message at loc; returns -1.
int ir_error(IrDiag *d, IrLoc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
// "file:line:col: error: msg", then the source line and a caret when the
// file can be read. ONNX locations print as "node 'name': error: msg".
void ir_diag_print(FILE *f, const IrDiag *d);
// fopen(path, "rb") for a regular file; NULL with an error at loc saying why (missing, a
// directory, a FIFO or device: never blocks on one).
FILE *ir_open_file(const char *path, IrLoc loc, IrDiag *d);
// Internal invariant: prints file, line and the condition, then aborts.
#define IR_ASSERT(c) ((c) ? (void)0 : ir_assert_fail(#c, __FILE__, __LINE__))
_Noreturn void ir_assert_fail(const char *cond, const char *file, int line);

// ---- building --------------------------------------------------------------

// A new value with a unique name (NULL: "%N"; an existing name gets ".1", ".2" ...).
IrValue *ir_value_new(IrGraph *g, const char *name, IrDType dt, IrRole role);
void ir_value_set_shape(IrValue *v, int rank, const Sym *const *shape);
IrValue *ir_value_find(const IrGraph *g, const char *name); // NULL when none has it
// Rename v to `name`, made unique like ir_value_new does.
void ir_value_rename(IrGraph *g, IrValue *v, const char *name);
// Name v exactly `name`; the caller sees to it that no other value keeps that
// name (the IR text's parser names a node's outputs as the text does).
void ir_value_set_name(IrGraph *g, IrValue *v, const char *name);

IrValue *ir_input(IrGraph *g, const char *name, IrDType dt, int rank, const Sym *const *shape,
                  IrInputKind kind, const Sym *range);
IrValue *ir_param(IrGraph *g, const char *name, int rank, const Sym *const *shape, IrInit init);

// A node of op over the inputs, with nout fresh outputs (shape unknown, f32,
// role ACT in the forward phase and GRAD in the backward phase). Phase, block
// and location come from the graph's builder state. Set attributes and any
// output shape the op cannot infer (reshape, broadcast, sum_to, fill,
// embedding_bwd), then call ir_infer.
IrNode *ir_node_new(IrGraph *g, IrOp op, IrValue *const *in, int nin, int nout);
// The dropout masks' step counter: the i32 state "dropout.step" that the graph's tick node
// advances, made with the tick (at the builder's place) by the first call. NULL and d on error.
IrValue *ir_dropout_step(IrGraph *g, IrDiag *d);
// A dropout node's attributes: drop with probability `ratio`, its mask a function of the seed's
// low 31 bits (the attribute's range), its key and the step.
void ir_set_dropout(IrGraph *g, IrNode *n, double ratio, uint64_t seed, int64_t key);
// Value k of n's inputs then outputs (k < n->nin + n->nout).
static inline IrValue *ir_node_value(const IrNode *n, int k) {
  return k < n->nin ? n->in[k] : n->out[k - n->nin];
}
// The number of blocks: the largest block id of a node, plus 1 (1 for no nodes).
int ir_nblocks(const IrGraph *g);
// The value v is a view of (through reshape, transpose, slice and broadcast), or v.
IrValue *ir_view_root(IrValue *v);
// An attention or attention_bwd node's optional inputs after (q, k, v): the
// i32 key-padding mask and the f32 additive bias of the scores, NULL when absent.
void ir_attention_extras(const IrNode *n, IrValue **keep, IrValue **bias);
// Whether b fits as attention's bias for q [..., T, HS] and tk keys (or for
// the scores [..., T, TK], whose leading dims are q's): f32 [.., T, TK] whose
// leading dims are 1 but for one run [*from, *to) of q's own (T5's heads
// [1, H], Llama's batch [B, 1], or all of them).
bool ir_attention_bias_fits(const IrValue *b, const IrValue *q, const Sym *tk, int *from,
                            int *to);
// Editing a scheduled graph. New nodes go before node `pos` (the nodes after
// move up; ids stay positions); -1 returns to appending.
void ir_insert_before(IrGraph *g, int pos);
// New nodes go in n's block and use (NULL: outside any block).
void ir_set_block(IrGraph *g, const IrNode *n);
// Many edits in one sweep. Between ir_batch_begin and ir_batch_end the
// schedule does not move: a new node waits, to go in (in the order made)
// before the node that is at its insertion point now, or at the end when
// appending; a removed node stays in g->nodes with id -1. So positions taken
// from ids stay valid for the whole batch, and each edit costs O(1) instead of
// O(nodes). A waiting node's id is its insertion point. ir_batch_end puts the
// new nodes in and takes the removed out.
void ir_batch_begin(IrGraph *g);
void ir_batch_end(IrGraph *g);
// Makes n an `op` node over in[0..nin): the outputs it has stay, and those the
// new op has beyond them are fresh values (as ir_node_new makes them). For
// lowerings that specialize an op in place (its outputs keep their readers).
void ir_node_set_op(IrGraph *g, IrNode *n, IrOp op, IrValue *const *in, int nin);
// Output k of n becomes v (now produced by n). The value it replaces loses
// its producer; ir_remove_unused drops it when nothing reads it.
void ir_node_set_output(IrNode *n, int k, IrValue *v);
// Takes n out of the schedule (its outputs must be unread).
void ir_node_remove(IrGraph *g, IrNode *n);
// Drops the values of `role` that no node makes or reads (ids stay positions).
void ir_remove_unused(IrGraph *g, IrRole role);
// Reads of from[i] in nodes of `phase` read to[i] instead (i < count; one sweep of the graph).
void ir_replace_uses_in_phase(IrGraph *g, IrValue *const *from, IrValue *const *to, int count,
                              IrPhase phase);
// Clones nodes[0..n), in that order, at the insertion point, with the
// builder's phase and block; each clone keeps its node's op, attributes,
// location and (in its node's block) use. An input v of a clone is map[v->id] where that is set, else v
// itself. Each output is a new value named after the original's name and
// `suffix` ("h.0.x" -> "h.0.x.rc", made unique) with the original's dtype,
// shape and role, and map[original->id] is set to it, so that later nodes of
// the list read the clones. map has an entry (NULL or a value) for every
// value of the graph before the call. Returns the first clone (NULL when n is
// 0), or NULL with d when a clone's shape rule disagrees with its original.
IrNode *ir_clone_nodes(IrGraph *g, IrNode *const *nodes, int n, IrValue **map,
                       const char *suffix, IrDiag *d);
// to's attributes become from's (the same values; to's own are dropped).
void ir_copy_attrs(IrGraph *g, IrNode *to, const IrNode *from);
void ir_set_int(IrGraph *g, IrNode *n, const char *name, int64_t v);
void ir_set_float(IrGraph *g, IrNode *n, const char *name, double v);
void ir_set_ints(IrGraph *g, IrNode *n, const char *name, const int64_t *v, int count);
void ir_set_syms(IrGraph *g, IrNode *n, const char *name, const Sym *const *v, int count);
void ir_set_str(IrGraph *g, IrNode *n, const char *name, const char *s);
// The same attributes with the same values (in any order); but_ints: the
// values of integer attributes may differ.
bool ir_attrs_equal(const IrNode *a, const IrNode *b, bool but_ints);
// Reading: the node's value, else the default ir/attrs.def declares. Reading a
// name the op does not declare, or as another kind, is an internal error
// that names the op and the attribute.
int64_t ir_attr_i(const IrNode *n, const char *name);   // INT
double ir_attr_f(const IrNode *n, const char *name);    // FLOAT
const char *ir_attr_s(const IrNode *n, const char *name); // STR; NULL when absent
// INTS / SYMS: the list, *count its length; NULL and 0 when the node does not
// set it (lists have no default; the op's rule says what absent means).
const int64_t *ir_attr_ints(const IrNode *n, const char *name, int *count);
const Sym *const *ir_attr_syms(const IrNode *n, const char *name, int *count);

// The window of conv2d and its backward ops, per spatial dim (0: height, 1:
// width), from the attributes strides [2], pads [4] (top, left, bottom,
// right, as ONNX) and dilations [2]; absent strides and dilations are 1,
// absent pads 0. Returns -1 when a list has another length (the shape rule
// says so; after ir_infer it cannot).
typedef struct IrConvWindow {
  int64_t stride[2], pad_begin[2], pad_end[2], dilation[2];
  int64_t group;   // channel groups: each convolves C/group input channels to OC/group outputs
} IrConvWindow;
int ir_conv_window(const IrNode *n, IrConvWindow *w);
// A pooling node's window (maxpool2d, maxpool2d_bwd): kernel [height, width],
// its strides and pads as a convolution's, dilation 1, one group. -1 as above.
int ir_pool_window(const IrNode *n, IrConvWindow *w, int64_t kernel[2]);

// The GEMMs a matmul runs (rt_matmul's arguments): for i < batch, C_i (m x n)
// = op(A_i) (m x k) @ op(B_i) (k x n), A_i at a + i*sa, and so on (sa or sb
// 0: shared; sc 0: the products summed into one C). Two flattenings turn a
// batch into one GEMM: a batched, untransposed A times a shared B is one
// (batch*m x k) GEMM; a batch-summed A^T dC one GEMM over batch*k rows.
typedef struct IrGemm {
  const Sym *batch, *m, *n, *k;
  const Sym *sa, *sb, *sc;
} IrGemm;
IrGemm ir_matmul_gemm(IrGraph *g, const IrNode *n);

// Check the node's arity and attributes (ir_verify_attrs), then run the op's
// shape rule: fills unknown output shapes and dtypes, checks known ones. On a
// mismatch returns -1 with a message naming both shapes and the node's
// location.
int ir_infer(IrGraph *g, IrNode *n, IrDiag *d);

// The frontends mark the batch and sequence dims with this one rule: the
// batch is the first input's first dim, the sequence its second when the
// input holds integers (tokens), each when it is a single symbol.
// Is v's first dim the model's batch (split over dp ranks under data parallelism)?
bool ir_batched(IrGraph *g, const IrValue *v);
// Does v run over the rows (samples) of the step's batch, row after row? IR_ROWS_RANK: the rows
// the program feeds the rank (runtime/train.c's take_slice); IR_ROWS_REPLICA: every grid row's
// rows, the replica's micro-batch (a value whole on the dim a 2D grid's rows cut the inputs on,
// gathered). With a dim B: v's first dim is B or B times more (B*T, B*NH), split as the inputs'
// B (RANK) or whole (REPLICA). Where the batch is fixed (no dim B) and a mesh axis splits the
// inputs' first dim (a 2D grid's rows): an input's first dim split, a value's split as the
// inputs' are (RANK) or whole and as long (REPLICA); fixed and not split, a row is one whole
// set of the inputs (the step's samples are data-parallel replicas' and micro-batches'), and
// every value is the row's. Inputs are RANK or none. v as laid out.
// The first input whose first dim a mesh axis splits (a 2D grid's rows cut the batch), or NULL.
const IrValue *ir_fed_input(const IrGraph *g);
typedef enum IrRows { IR_ROWS_NONE, IR_ROWS_RANK, IR_ROWS_REPLICA } IrRows;
IrRows ir_batch_rows(IrGraph *g, const IrValue *v);
// The symbol a dim is, when it is exactly one symbol (T, not 2*T or T*B); else -1.
int ir_lone_symbol(const Sym *s);
void ir_mark_batch_dims(IrGraph *g);

// ---- shapes, sizes, costs (ir/ops.c) -------------------------------------------

// Tensor parallelism names its degree as a dim (passes/tp.c), so per-rank
// shapes read C/TP.
#define IR_TP_DIM "TP"
// ... and Optimus 2D the side of its grid: C/Q.
#define IR_Q_DIM "Q"
// The degree of a tensor-parallel op with `shards` ranks as a formula: the
// dim TP (or Q) when the graph has it bound to that, else the number.
const Sym *ir_tp_degree(IrGraph *g, int64_t shards);
// The elements SUMMA (OP_SUMMA and its backward) keeps of an operand's (or a product's) panels
// of numel elements on a q x q grid: none for the rank's own, the others double-buffered
// (min(q - 1, 2) times numel).
const Sym *ir_summa_panels(IrGraph *g, const Sym *numel, int64_t q);
// The share of a whole bucket that this rank's part is, for a node that reads or writes it
// (its "shards"; over uneven parts its "parts_mine" of "parts_total", passes/lower.c):
// *num / *den.
void ir_part_ratio(const IrNode *n, int64_t *num, int64_t *den);

const Sym *ir_numel(IrGraph *g, const IrValue *v);     // product of dims
// v as the whole tensor its tp ranks hold parts of, in the model's shape (without a padded
// vocabulary's padding; a copy; v itself when not split).
IrValue ir_whole(const IrValue *v);
// The dim of v split over axis a (-1: none).
int ir_split_dim(const IrValue *v, IrMeshAxis a);
// Dim d's size in the whole tensor (padded): shape[d] when the dim is whole.
const Sym *ir_whole_dim(const IrValue *v, int d);
const Sym *ir_nbytes(IrGraph *g, const IrValue *v);    // numel * dtype size
int ir_dtype_size(IrDType dt);         // bytes per element
const char *ir_dtype_name(IrDType dt); // "f32", "bf16", "i32"
const char *ir_dtype_ctype(IrDType dt); // the C type of an element in model.c: "float", ...
IrDType ir_dtype_lookup(const char *name); // DT_COUNT when unknown
bool ir_is_float(IrDType dt);          // f32 or bf16
// The element type of the trained parameters' gradients (passes/precision.c makes them all
// one: f32, or bf16 under --grad-precision bf16); DT_F32 when nothing is trained.
IrDType ir_grad_dtype(const IrGraph *g);
bool ir_is_i32(double v);              // an integer in int32's range
bool ir_same_shape(const IrValue *a, const IrValue *b);
// "[B,T,C]" into the arena
const char *ir_shape_str(IrGraph *g, const IrValue *v);
// FLOPs of one execution of the node, as a formula.
const Sym *ir_flops(IrGraph *g, const IrNode *n);
// A causal softmax or attention computes 1 / 2 of its T x T scores (row t over its first
// t + 1; the softmax writes the rest 0): 2 for those, 1 for every other node.
int ir_causal_divisor(const IrNode *n);
// " with B = 8, T = 1024": the bound values of the dims s uses, for messages (in the arena;
// "" when it uses none).
const char *ir_bindings_text(IrGraph *g, const Sym *s);
// Every value's dims that evaluate are integers of at least 1 and its size in bytes at most
// IR_BYTES_MAX (dims bound to huge values overflow int64 otherwise); ir_verify checks this first.
int ir_check_sizes(IrGraph *g, IrDiag *d);
// Evaluate a formula under the graph's bindings; IR_ASSERTs it evaluates.
int64_t ir_eval(const IrGraph *g, const Sym *s);

// ---- text form (ir/print.c, ir/parse.c) ----------------------------------------

// The IR prints as text that ir_parse reads back: print(parse(print(g))) == print(g).
void ir_print(FILE *f, const IrGraph *g);
char *ir_print_str(const IrGraph *g);               // malloc'd
IrGraph *ir_parse(const char *text, const char *filename, IrDiag *d); // NULL on error
// Graphviz
void ir_print_dot(FILE *f, const IrGraph *g);

// ---- verifier (ir/verify.c) --------------------------------------------------

// Structural checks: arity, defined-before-use, unique names, attributes as
// ir_verify_attrs, shape rules agree with the stored shapes, one producer per
// value. `after` names the pass that ran last, for the message ("... (after
// pass 'autodiff')").
int ir_verify(IrGraph *g, const char *after, IrDiag *d);
// n's attributes against its op's declarations (ir/attrs.def): each one is
// declared and of the declared kind, and every required one is set. ir_infer
// checks this first, so shape rules and lowering can rely on it.
int ir_verify_attrs(const IrNode *n, IrDiag *d);

#endif
