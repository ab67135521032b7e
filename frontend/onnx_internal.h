// Shared by the ONNX frontend's files (onnx.c: loading and the graph walk;
// onnx_fold.c: compile-time evaluation; onnx_ops.c: IR construction). The
// only header that sees protobuf-c's Onnx__* types; nothing outside
// frontend/ includes it.
//
// Every ONNX tensor name maps to an FeTensor: a run-time IR value, a tensor
// known at compile time (FeConst), or both. Shape subgraphs (Shape, Gather,
// Concat, ...) are evaluated here against the symbolic dims, so their
// results are formulas (B, T, C/NH) rather than numbers. A float
// initializer is "tainted": it becomes a trainable parameter when something
// reads it at run time, so ops on it are evaluated lazily, either folded
// (a causal-mask buffer sliced and compared) or run (a weight transposed for
// a MatMul), whichever the consumer needs.
#ifndef MTC_FE_ONNX_INTERNAL_H
#define MTC_FE_ONNX_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "frontend.h"
#include "ir.h"
#include "onnx.pb-c.h"

// ONNX element types (TensorProto.DataType) mtc reads.
enum {
  FE_FLOAT = 1, FE_UINT8 = 2, FE_INT8 = 3, FE_UINT16 = 4, FE_INT16 = 5, FE_INT32 = 6,
  FE_INT64 = 7, FE_BOOL = 9, FE_DOUBLE = 11, FE_UINT32 = 12, FE_UINT64 = 13,
};

// Integer tensors with at most this many elements keep their elements as
// formulas (shape arithmetic); larger ones only as numbers.
#define FE_SYM_MAX 64

// A tensor known at compile time. Integer and bool elements are in i (their
// values under the -D bindings) and, for small tensors, in s as formulas;
// float and double elements are in f (as float32).
typedef struct FeConst {
  int type;                       // FE_FLOAT, FE_INT64, FE_BOOL, ...
  int rank;
  const Sym *shape[IR_MAXRANK];   // symbolic
  int64_t n;                      // element count under the bindings
  float *f;                       // float types
  int64_t *i;                     // integer types and bool
  const Sym **s;                  // integer types: formulas, or NULL
} FeConst;

// A selection by a run-time mask, x[mask] as torch exports it (NonZero, then GatherND with
// the indices transposed): what a tensor of one holds.
typedef enum FeSel {
  FE_SEL_NONE,
  FE_SEL_INDICES,    // NonZero(mask): the indices [rank, K] of mask's nonzero elements
  FE_SEL_INDICES_T,  // ... transposed, [K, rank], as GatherND reads them
  FE_SEL_ELEMENTS,   // the K elements of v where mask is nonzero, in row-major order: v keeps
                     // its whole shape, and a reduction leaves out the elements mask drops
} FeSel;

// What an ONNX tensor name stands for.
typedef struct FeTensor {
  const char *name;
  IrValue *v;                     // the run-time value, once there is one
  FeConst *k;                     // the compile-time value, once there is one
  bool root;                      // a float initializer: run time makes it a parameter
  bool tainted;                   // root, or computed from one
  const Onnx__NodeProto *lazy;    // producer still to fold or run on demand
  int lazy_index;
  const char *unsupported;        // an output mtc cannot compute: why
  FeSel sel;                      // a selection by the run-time mask sel_mask, or none
  IrValue *sel_mask;
  struct FeTensor *next;          // hash chain
} FeTensor;

// The range an integer graph input is found to have from its uses.
typedef enum FeUse {
  FE_USE_NONE,
  FE_USE_INDICES,  // embedding rows: tokens
  FE_USE_LABELS,   // a loss's classes
  FE_USE_MASK,     // cast to float at run time: a 0/1 padding mask
} FeUse;

typedef struct FeOnnx {
  IrGraph *g;
  IrDiag *d;
  const FeOnnxOptions *opt;
  const char *dir;                // the model file's folder (external data)
  int opset;
  FeTensor **table;               // hash table of names
  int table_size;
  const Onnx__GraphProto *graph;
  const Onnx__NodeProto *node;    // the node being converted (errors, locations)
  int node_index;
  int first_new_node;             // g->nnodes when the node's conversion began
  const char **names;             // names[i]: node i's name in the graph's arena, once needed
  int nnames;
  IrStrSet scopes;                // every component but the last of every node's name
  bool failed;                    // an error is in cx->d (fe_err)
} FeOnnx;

// ---- onnx.c ----------------------------------------------------------------------------

// An error at the current node: "OpType: message" at the node's name.
int fe_err(FeOnnx *cx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
FeTensor *fe_lookup(FeOnnx *cx, const char *name);    // NULL when undefined
// Input i of the current node (NULL when absent: optional, empty name, or past the end).
FeTensor *fe_in(FeOnnx *cx, int i);
int fe_nin(FeOnnx *cx);
int fe_nout(FeOnnx *cx);
bool fe_out_wanted(FeOnnx *cx, int i);                 // output i has a name
// Define output i of the current node as a run-time value (renamed after the
// ONNX tensor when the node made it) or as a known tensor.
int fe_set_value(FeOnnx *cx, int i, IrValue *v);
int fe_set_const(FeOnnx *cx, int i, FeConst *k);
FeTensor *fe_out(FeOnnx *cx, int i);  // output i's tensor (defined now if it is new); it is wanted
void fe_set_unsupported(FeOnnx *cx, int i, const char *why);
// The tensor's compile-time value (folding a lazy producer), or NULL when it
// is only known at run time.
FeConst *fe_known(FeOnnx *cx, FeTensor *t);
// The tensor's run-time value: a parameter for a float initializer, a
// constant for a known tensor, the lazy producer run. NULL on error.
IrValue *fe_value(FeOnnx *cx, FeTensor *t);
// A known tensor as an IR constant (f32, or i32 for integers and bools).
IrValue *fe_const_value(FeOnnx *cx, const FeConst *k, const char *name);
// Shape of a tensor, run-time or known.
int fe_shape(FeOnnx *cx, FeTensor *t, int *rank, const Sym **shape);
// Attributes of the current node: the raw one (NULL when absent), or typed
// with a default; a wrong type is an error (-1).
const Onnx__AttributeProto *fe_attr(FeOnnx *cx, const char *name);
int fe_attr_int(FeOnnx *cx, const char *name, int64_t dflt, int64_t *out);
int fe_attr_float(FeOnnx *cx, const char *name, double dflt, double *out);
int fe_attr_ints(FeOnnx *cx, const char *name, const int64_t **v, int *n);  // n = -1: absent
int fe_attr_str(FeOnnx *cx, const char *name, const char *dflt, const char **out);
const Onnx__TensorProto *fe_attr_tensor(FeOnnx *cx, const char *name);
// A TensorProto (initializer or Constant value) as a known tensor.
FeConst *fe_tensor_proto(FeOnnx *cx, const Onnx__TensorProto *t, const char *what);
// Note how an integer graph input is used (embedding indices, labels) and
// the range that implies.
void fe_note_use(IrValue *v, FeUse use, const Sym *range);

// ---- onnx_ops.c: IR construction -------------------------------------------------------

// op(a) or op(a, b), shape inferred; NULL with an error naming the ONNX op.
IrValue *fe_op(FeOnnx *cx, IrOp op, IrValue *a, IrValue *b);
IrValue *fe_transpose(FeOnnx *cx, IrValue *x, const int64_t *perm);
// A node that reads a selection (an input's sel): conv runs it when it is elementwise; a
// ReduceMean or ReduceSum of every selected element is a masked mean or sum.
int fe_convert_selected(FeOnnx *cx, const char *op, int (*conv)(FeOnnx *cx));

// ---- onnx_fold.c: known tensors --------------------------------------------------------

FeConst *fe_const_new(FeOnnx *cx, int type, int rank, const Sym *const *shape);
FeConst *fe_const_scalar_int(FeOnnx *cx, int type, const Sym *s);
FeConst *fe_const_ints(FeOnnx *cx, int n, const Sym *const *s);  // int64 [n]
bool fe_is_float_type(int type);
bool fe_is_int_type(int type);                     // integers and bool
const char *fe_type_name(int type);
// Element i as a formula (integers) or a number.
const Sym *fe_const_sym(FeOnnx *cx, const FeConst *k, int64_t i);
double fe_const_num(const FeConst *k, int64_t i);
// Element i as an integer: an integer tensor's own, a float tensor's converted as a saturating
// cast does (NaN is 0; beyond int64, its ends).
int64_t fe_const_int(const FeConst *k, int64_t i);
// Integer values of a known 1-D (or scalar) tensor into v[*n], at most max.
int fe_const_int_list(FeOnnx *cx, const FeConst *k, const char *what, int64_t *v, int *n, int max);
// The node's attribute `axes` (absent: none) into axes[*n], at most IR_MAXRANK of them.
int fe_attr_axes(FeOnnx *cx, int64_t *axes, int *n);
// Split's n pieces of dim `a` (of size `dim`): the sizes that k (input `split`) lists, or (k
// NULL) n equal parts; each as a formula into parts[] and as a number into sizes[] (n <= 64).
// -1 with the node's error when they do not make the dim (a listed total is checked where
// the dim is known).
int fe_split_sizes(FeOnnx *cx, const FeConst *k, const Sym *dim, int a, int n,
                   const Sym **parts, int64_t *sizes);
// Scalar value (numel 1) of a known tensor; -1 when it has more elements.
int fe_const_scalar(FeOnnx *cx, const FeConst *k, const char *what, double *out);
// Largest tensor the frontend makes (elements): keeps every size formula
// far from overflow.
#define FE_MAX_NUMEL ((int64_t)1 << 36)
// Error unless the shape has at most FE_MAX_NUMEL elements.
int fe_check_size(FeOnnx *cx, int rank, const Sym *const *shape);
// Evaluate a formula under the bindings (error when it does not evaluate).
int fe_eval(FeOnnx *cx, const Sym *s, int64_t *out);
// numpy broadcasting of two symbolic shapes; -1 with an error when incompatible.
int fe_broadcast(FeOnnx *cx, int ra, const Sym *const *a, int rb, const Sym *const *b, int *r,
                 const Sym **out);
// Output shapes of the shape ops, shared by fold and run: Reshape's target,
// Unsqueeze/Squeeze axes, Expand's broadcast, normalized axes.
int fe_reshape_target(FeOnnx *cx, int xrank, const Sym *const *xshape, const FeConst *target,
                      bool allowzero, int *rank, const Sym **shape);
int fe_unsqueeze_shape(FeOnnx *cx, int xrank, const Sym *const *xs, const int64_t *axes, int naxes,
                       int *rank, const Sym **shape);
int fe_squeeze_shape(FeOnnx *cx, int xrank, const Sym *const *xs, const int64_t *axes, int naxes,
                     int *rank, const Sym **shape);
int fe_axis(FeOnnx *cx, int64_t axis, int rank, int *out);
int fe_gather_shape(FeOnnx *cx, int xrank, const Sym *const *xs, int axis, int irank,
                    const Sym *const *is, int *rank, const Sym **shape);
// Slice parameters along one axis, resolved against the dim: the output
// length (a formula when possible) and start/step as numbers.
typedef struct FeSliceAxis {
  int axis;
  int64_t start, step;
  const Sym *len;
} FeSliceAxis;
// in[0..3]: starts, ends, axes, steps (axes and steps may be NULL).
int fe_slice_axes(FeOnnx *cx, int rank, const Sym *const *shape, FeConst *const *in,
                  FeSliceAxis *out, int *n);
// ScatterND's indices against data and updates of these shapes (reduction 'none'): map[i] (of n,
// data's element count) is the element of updates that output element i takes, -1 for data's.
int fe_scatter_map(FeOnnx *cx, int xrank, const Sym *const *xshape, const FeConst *idx, int urank,
                   const Sym *const *ushape, int64_t **map, int64_t *n);
// The 0/1 mask of Trilu for a [.., R, C] shape (1 = kept).
bool fe_trilu_keep(int64_t r, int64_t c, int64_t k, bool upper);

#define FE_OP(N, fold, conv) FE_DECL_FOLD_##fold(N) FE_DECL_CONV_##conv(N)
#define FE_DECL_FOLD_1(N) int fe_fold_##N(FeOnnx *cx, FeConst **in, int nin, FeConst **out);
#define FE_DECL_FOLD_0(N)
#define FE_DECL_CONV_1(N) int fe_conv_##N(FeOnnx *cx);
#define FE_DECL_CONV_0(N)
#include "onnx_ops.def"

#endif
