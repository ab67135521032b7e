// The ONNX frontend: reads a ModelProto with protobuf-c (the schema is the
// system's onnx.proto, compiled by protoc-c at build time) and converts it
// to mtc's IR at once; the protobuf is freed before fe_onnx_load returns.
//
//   fe_onnx_load = read the file -> unpack -> check the opset -> graph -> free
//   graph        = inputs (dim_param -> symbols bound by -D)
//                  -> initializers (known tensors; floats become parameters
//                     when read at run time, integers constants)
//                  -> nodes in order: fold (onnx_fold.c) or build IR (onnx_ops.c)
//                  -> outputs: a scalar output is the loss, else --loss adds one
//                  -> integer inputs get their kind and range from their uses
//
// Every error names the ONNX node (its name, or OpType#index) and op type.
// Nothing is trusted: sizes, types, names and edges are checked, so a
// truncated or corrupted file gives a message, never a crash.
#define _XOPEN_SOURCE 700

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

#define FE_MIN_OPSET 13
#define FE_MAX_OPSET 17                   // the newest in the installed onnx.proto (ONNX 1.12)
#define FE_MAX_FILE ((size_t)2 << 30)      // protobuf's own limit: 2 GiB

// ---- the op table (onnx_ops.def) ---------------------------------------------------------

typedef int FoldFn(FeOnnx *cx, FeConst **in, int nin, FeConst **out);
typedef int ConvFn(FeOnnx *cx);

typedef struct OpInfo {
  const char *name;
  FoldFn *fold;   // NULL: not evaluated at compile time
  ConvFn *conv;   // NULL: only evaluated at compile time
} OpInfo;

#define FE_FOLD_PTR_1(N) fe_fold_##N
#define FE_FOLD_PTR_0(N) NULL
#define FE_CONV_PTR_1(N) fe_conv_##N
#define FE_CONV_PTR_0(N) NULL
static const OpInfo op_table[] = {
#define FE_OP(N, fold, conv) {#N, FE_FOLD_PTR_##fold(N), FE_CONV_PTR_##conv(N)},
#include "onnx_ops.def"
};
#define N_OPS ((int)(sizeof op_table / sizeof op_table[0]))

static const OpInfo *find_op(const char *name) {
  for (int i = 0; i < N_OPS; i++)
    if (!strcmp(op_table[i].name, name))
      return &op_table[i];
  return NULL;
}

// "Add, And, Cast, ..." for the unsupported-op message.
static const char *supported_ops(FeOnnx *cx) {
  size_t len = 0;
  for (int i = 0; i < N_OPS; i++)
    len += strlen(op_table[i].name) + 2;
  char *s = ir_alloc(&cx->g->arena, len + 1);
  for (int i = 0; i < N_OPS; i++) {
    strcat(s, op_table[i].name);
    if (i + 1 < N_OPS)
      strcat(s, ", ");
  }
  return s;
}

// ---- diagnostics ----------------------------------------------------------------------

static const char *str(const char *s) { return s ? s : ""; }

// The node's name for messages and locations (in the graph's arena, which
// outlives the protobuf): its name, or OpType#index.
static const char *node_name(FeOnnx *cx, const Onnx__NodeProto *n, int index) {
  if (index >= 0 && index < cx->nnames && cx->names[index])
    return cx->names[index];
  char buf[160];
  snprintf(buf, sizeof buf, "%.100s#%d", str(n->op_type), index);
  const char *s = ir_strdup(&cx->g->arena, n->name && n->name[0] ? n->name : buf);
  if (index >= 0 && index < cx->nnames)
    cx->names[index] = s;
  return s;
}

int fe_err(FeOnnx *cx, const char *fmt, ...) {
  cx->failed = true;
  char msg[1800];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!cx->node)
    return ir_error(cx->d, (IrLoc){0}, "%s", msg);
  IrLoc loc = {node_name(cx, cx->node, cx->node_index), 0, 0};
  return ir_error(cx->d, loc, "%.100s: %s", str(cx->node->op_type), msg);
}

// ---- names -----------------------------------------------------------------------------

static unsigned hash(const char *s) {
  unsigned h = 2166136261u;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

FeTensor *fe_lookup(FeOnnx *cx, const char *name) {
  if (!name || !name[0])
    return NULL;
  for (FeTensor *t = cx->table[hash(name) % (unsigned)cx->table_size]; t; t = t->next)
    if (!strcmp(t->name, name))
      return t;
  return NULL;
}

// A new tensor name (the caller has checked it is not defined yet).
static FeTensor *define(FeOnnx *cx, const char *name) {
  FeTensor *t = ir_alloc(&cx->g->arena, sizeof *t);
  t->name = ir_strdup(&cx->g->arena, name);
  unsigned h = hash(name) % (unsigned)cx->table_size;
  t->next = cx->table[h];
  cx->table[h] = t;
  return t;
}

static FeTensor *find_or_define(FeOnnx *cx, const char *name) {
  FeTensor *t = fe_lookup(cx, name);
  return t ? t : define(cx, name);
}

// ---- the current node -------------------------------------------------------------------

int fe_nin(FeOnnx *cx) { return (int)cx->node->n_input; }
int fe_nout(FeOnnx *cx) { return (int)cx->node->n_output; }

FeTensor *fe_in(FeOnnx *cx, int i) {
  if (i < 0 || i >= fe_nin(cx))
    return NULL;
  return fe_lookup(cx, cx->node->input[i]);
}

bool fe_out_wanted(FeOnnx *cx, int i) {
  return i < fe_nout(cx) && cx->node->output[i] && cx->node->output[i][0];
}

// Names made by IR construction ("%17") are replaced by the ONNX tensor's.
static bool auto_name(const char *s) {
  for (; *s; s++)
    if (*s < '0' || *s > '9')
      return false;
  return true;
}

// An IR name for an ONNX tensor: torch.onnx's "/h.0/attn/MatMul_output_0"
// reads "h.0/attn/MatMul", like its node.
static const char *ir_name(FeOnnx *cx, const char *onnx) {
  size_t n = strlen(onnx);
  const char *suffix = "_output_0";
  if (onnx[0] == '/' && n > 1)
    onnx++, n--;
  if (n > strlen(suffix) && !strcmp(onnx + n - strlen(suffix), suffix))
    n -= strlen(suffix);
  return ir_strndup(&cx->g->arena, onnx, n);
}

int fe_set_value(FeOnnx *cx, int i, IrValue *v) {
  if (!v)
    return -1;
  if (!fe_out_wanted(cx, i))
    return 0;
  FeTensor *t = find_or_define(cx, cx->node->output[i]);
  t->v = v;
  if (v->producer && v->producer->id >= cx->first_new_node && auto_name(v->name))
    ir_value_rename(cx->g, v, ir_name(cx, t->name));
  return 0;
}

FeTensor *fe_out(FeOnnx *cx, int i) { return find_or_define(cx, cx->node->output[i]); }

int fe_set_const(FeOnnx *cx, int i, FeConst *k) {
  if (!k)
    return -1;
  if (fe_out_wanted(cx, i))
    find_or_define(cx, cx->node->output[i])->k = k;
  return 0;
}

void fe_set_unsupported(FeOnnx *cx, int i, const char *why) {
  if (fe_out_wanted(cx, i))
    find_or_define(cx, cx->node->output[i])->unsupported = why;
}

// ---- attributes --------------------------------------------------------------------------

const Onnx__AttributeProto *fe_attr(FeOnnx *cx, const char *name) {
  for (size_t i = 0; i < cx->node->n_attribute; i++) {
    const Onnx__AttributeProto *a = cx->node->attribute[i];
    if (a && a->name && !strcmp(a->name, name))
      return a;
  }
  return NULL;
}

// The attribute `name` of the current node when it has type `want` (*a =
// NULL when absent); -1 when it has another type.
static int typed_attr(FeOnnx *cx, const char *name, int want, const char *what,
                      const Onnx__AttributeProto **a) {
  *a = fe_attr(cx, name);
  if (*a && (*a)->has_type && (int)(*a)->type != want)
    return fe_err(cx, "attribute '%s' must be %s", name, what);
  return 0;
}

int fe_attr_int(FeOnnx *cx, const char *name, int64_t dflt, int64_t *out) {
  const Onnx__AttributeProto *a;
  if (typed_attr(cx, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, "an integer", &a))
    return -1;
  *out = a ? a->i : dflt;
  return 0;
}

int fe_attr_float(FeOnnx *cx, const char *name, double dflt, double *out) {
  const Onnx__AttributeProto *a;
  if (typed_attr(cx, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, "a float", &a))
    return -1;
  *out = a ? a->f : dflt;
  return 0;
}

int fe_attr_ints(FeOnnx *cx, const char *name, const int64_t **v, int *n) {
  const Onnx__AttributeProto *a;
  *v = NULL;
  *n = -1;
  if (typed_attr(cx, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, "a list of integers", &a))
    return -1;
  if (a && a->n_ints > 64)
    return fe_err(cx, "attribute '%s' has %zu elements (at most 64)", name, a->n_ints);
  if (a) {
    *v = a->ints;
    *n = (int)a->n_ints;
  }
  return 0;
}

int fe_attr_str(FeOnnx *cx, const char *name, const char *dflt, const char **out) {
  const Onnx__AttributeProto *a;
  if (typed_attr(cx, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string", &a))
    return -1;
  *out = a ? ir_strndup(&cx->g->arena, (const char *)a->s.data, a->s.len) : dflt;
  return 0;
}

const Onnx__TensorProto *fe_attr_tensor(FeOnnx *cx, const char *name) {
  const Onnx__AttributeProto *a = fe_attr(cx, name);
  return a && (!a->has_type || a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR) ? a->t
                                                                                          : NULL;
}

// ---- tensors from the file -------------------------------------------------------------------

static int elem_size(int type) {
  switch (type) {
  case FE_FLOAT: case FE_INT32: case FE_UINT32: return 4;
  case FE_INT64: case FE_DOUBLE: case FE_UINT64: return 8;
  case FE_INT16: case FE_UINT16: return 2;
  case FE_INT8: case FE_UINT8: case FE_BOOL: return 1;
  default: return 0;
  }
}

// Element i of little-endian raw bytes of the type, into k.
static void store_raw(FeConst *k, const uint8_t *p, int64_t i) {
  uint64_t u = 0;
  int sz = elem_size(k->type);
  for (int b = sz - 1; b >= 0; b--)
    u = u << 8 | p[i * sz + b];
  switch (k->type) {
  case FE_FLOAT: {
    uint32_t w = (uint32_t)u;
    memcpy(&k->f[i], &w, 4);
    break;
  }
  case FE_DOUBLE: {
    double x;
    memcpy(&x, &u, 8);
    k->f[i] = (float)x;
    break;
  }
  case FE_INT64: k->i[i] = (int64_t)u; break;
  case FE_INT32: k->i[i] = (int32_t)(uint32_t)u; break;
  case FE_INT16: k->i[i] = (int16_t)(uint16_t)u; break;
  case FE_INT8: k->i[i] = (int8_t)(uint8_t)u; break;
  case FE_UINT64: k->i[i] = (int64_t)(u & INT64_MAX); break;
  default: k->i[i] = (int64_t)u; break; // uint32, uint16, uint8, bool
  }
}

// The bytes of an external tensor: `location` relative to the model's
// folder (no absolute paths, no ".."), `offset`, `length`; the file must
// hold them before anything is allocated.
static uint8_t *read_external(FeOnnx *cx, const Onnx__TensorProto *t, const char *what,
                              size_t want) {
  const char *loc = NULL;
  int64_t off = 0, len = -1;
  for (size_t i = 0; i < t->n_external_data; i++) {
    const Onnx__StringStringEntryProto *e = t->external_data[i];
    if (!e || !e->key || !e->value)
      continue;
    if (!strcmp(e->key, "location")) {
      loc = e->value;
    } else if (!strcmp(e->key, "offset") || !strcmp(e->key, "length")) {
      char *end;
      errno = 0;
      long long x = strtoll(e->value, &end, 10);
      if (errno || end == e->value || *end || x < 0)
        return fe_err(cx, "%s: external data's %s '%s' is not a non-negative integer", what,
                      e->key, e->value), NULL;
      *(e->key[0] == 'o' ? &off : &len) = x;
    }
  }
  if (!loc || !loc[0] || loc[0] == '/' || strstr(loc, ".."))
    return fe_err(cx, "%s: external data needs a relative 'location' inside the model's folder",
                  what), NULL;
  if (off < 0 || (len >= 0 && (size_t)len != want))
    return fe_err(cx, "%s: external data has offset %lld and length %lld; the tensor needs %zu bytes",
                  what, (long long)off, (long long)len, want), NULL;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", cx->dir, loc);
  // inside the folder after symbolic links are followed too (CVE-2024-27318):
  // a link in an unpacked archive must not read the user's other files
  char dir_real[PATH_MAX], path_real[PATH_MAX];
  IrDiag why = {0};
  if (!realpath(cx->dir, dir_real) || !realpath(path, path_real)) {
    FILE *f = ir_open_file(path, (IrLoc){0}, &why);  // says why it cannot be read
    if (f)
      fclose(f);
    return fe_err(cx, "%s: external data: %s", what, f ? strerror(errno) : why.msg), NULL;
  }
  size_t dn = strlen(dir_real);
  if (strncmp(path_real, dir_real, dn) != 0 || (path_real[dn] != '/' && dn > 1))
    return fe_err(cx, "%s: external data '%s' resolves to %s, outside the model's folder %s "
                  "(through a symbolic link): copy the data into the folder", what, loc, path_real,
                  dir_real), NULL;
  FILE *f = ir_open_file(path_real, (IrLoc){0}, &why);
  if (!f)
    return fe_err(cx, "%s: external data: %s", what, why.msg), NULL;
  off_t size = fseeko(f, 0, SEEK_END) == 0 ? ftello(f) : -1;
  uint8_t *buf = size >= 0 && (uint64_t)off + want <= (uint64_t)size ? malloc(want + 1) : NULL;
  bool ok = buf && fseeko(f, (off_t)off, SEEK_SET) == 0 && fread(buf, 1, want, f) == want;
  fclose(f);
  if (!ok) {
    free(buf);
    return fe_err(cx, "%s: external data %s has fewer than %zu bytes at offset %lld", what, path,
                  want, (long long)off), NULL;
  }
  return buf;
}

// How many values the typed field of the tensor's type holds.
static size_t typed_count(const Onnx__TensorProto *t, int type) {
  switch (type) {
  case FE_FLOAT: return t->n_float_data;
  case FE_DOUBLE: return t->n_double_data;
  case FE_INT64: return t->n_int64_data;
  case FE_UINT32: case FE_UINT64: return t->n_uint64_data;
  default: return t->n_int32_data;
  }
}

// Copy the typed field (float_data, int32_data, ...) into k.
static void store_typed(const Onnx__TensorProto *t, FeConst *k) {
  for (int64_t i = 0; i < k->n; i++) {
    switch (k->type) {
    case FE_FLOAT: k->f[i] = t->float_data[i]; break;
    case FE_DOUBLE: k->f[i] = (float)t->double_data[i]; break;
    case FE_INT64: k->i[i] = t->int64_data[i]; break;
    case FE_UINT32: case FE_UINT64: k->i[i] = (int64_t)(t->uint64_data[i] & INT64_MAX); break;
    default: k->i[i] = t->int32_data[i]; break;
    }
  }
}

// The data's size is checked against the dims before anything is allocated.
FeConst *fe_tensor_proto(FeOnnx *cx, const Onnx__TensorProto *t, const char *what) {
  if (!t)
    return fe_err(cx, "%s: no tensor", what), NULL;
  int type = t->has_data_type ? t->data_type : 0;
  if (!elem_size(type))
    return fe_err(cx, "%s: element type %d (%s) is not supported (float, double, integers, bool)",
                  what, type, fe_type_name(type)), NULL;
  if (t->n_dims > IR_MAXRANK)
    return fe_err(cx, "%s: %zu dims (at most %d)", what, t->n_dims, IR_MAXRANK), NULL;
  if (t->segment)
    return fe_err(cx, "%s: segmented tensors are not supported", what), NULL;
  const Sym *shape[IR_MAXRANK];
  int64_t n = 1;
  for (size_t i = 0; i < t->n_dims; i++) {
    if (t->dims[i] < 0 || t->dims[i] > FE_MAX_NUMEL || (n *= t->dims[i]) > FE_MAX_NUMEL)
      return fe_err(cx, "%s: bad dims (dim %zu is %lld)", what, i, (long long)t->dims[i]), NULL;
    shape[i] = sym_const(&cx->g->arena, t->dims[i]);
  }
  size_t bytes = (size_t)n * (size_t)elem_size(type);
  bool external =
      t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  uint8_t *ext = external ? read_external(cx, t, what, bytes) : NULL;
  if (external && !ext)
    return NULL;
  if (!external && t->has_raw_data && t->raw_data.len != bytes)
    return fe_err(cx, "%s: raw data has %zu bytes; %lld %s elements need %zu", what,
                  t->raw_data.len, (long long)n, fe_type_name(type), bytes), NULL;
  if (!external && !t->has_raw_data && typed_count(t, type) != (size_t)n)
    return fe_err(cx, "%s: the %s data has %zu values; its dims say %lld", what,
                  fe_type_name(type), typed_count(t, type), (long long)n), NULL;
  FeConst *k = fe_const_new(cx, type, (int)t->n_dims, shape);
  if (k && (external || t->has_raw_data))
    for (int64_t i = 0; i < n; i++)
      store_raw(k, external ? ext : t->raw_data.data, i);
  else if (k)
    store_typed(t, k);
  free(ext);
  if (k && k->i && k->n <= FE_SYM_MAX) { // small integer tensors carry formulas
    k->s = ir_alloc(&cx->g->arena, (size_t)(k->n + 1) * sizeof *k->s);
    for (int64_t i = 0; i < k->n; i++)
      k->s[i] = sym_const(&cx->g->arena, k->i[i]);
  }
  return k;
}

// ---- known and run-time values ------------------------------------------------------------

// The converter state saved around a lazy producer's evaluation.
typedef struct Saved {
  const Onnx__NodeProto *node;
  int index, first_new_node, block, use;
  IrLoc loc;
} Saved;

static int block_of(const char *name);
static int use_of(const FeOnnx *cx, const char *name);

static Saved enter(FeOnnx *cx, const Onnx__NodeProto *n, int index) {
  Saved s = {cx->node,          cx->node_index,   cx->first_new_node,
             cx->g->cur_block,  cx->g->cur_use,   cx->g->cur_loc};
  cx->node = n;
  cx->node_index = index;
  cx->first_new_node = cx->g->nnodes;
  cx->g->cur_loc = (IrLoc){node_name(cx, n, index), 0, 0};
  cx->g->cur_block = block_of(str(n->name));
  cx->g->cur_use = use_of(cx, str(n->name));
  return s;
}

static void leave(FeOnnx *cx, Saved s) {
  cx->node = s.node;
  cx->node_index = s.index;
  cx->first_new_node = s.first_new_node;
  cx->g->cur_block = s.block;
  cx->g->cur_use = s.use;
  cx->g->cur_loc = s.loc;
}

// Fold the current node from its inputs' known values: 0 done, 1 when an
// input is not known or the op cannot fold this case, -1 on error.
static int fold_now(FeOnnx *cx, const OpInfo *op) {
  int nin = fe_nin(cx), nout = fe_nout(cx);
  FeConst **in = calloc((size_t)nin + 1, sizeof *in), **out = calloc((size_t)nout + 1, sizeof *out);
  IR_ASSERT(in && out);
  int rc = 0;
  for (int i = 0; i < nin && !rc; i++) {
    FeTensor *t = fe_in(cx, i);
    if (t && !(in[i] = fe_known(cx, t)))
      rc = cx->failed ? -1 : 1;
  }
  if (!rc)
    rc = op->fold(cx, in, nin, out);
  for (int i = 0; i < nout && !rc; i++)
    if (out[i])
      fe_set_const(cx, i, out[i]);
  free(in);
  free(out);
  return rc;
}

FeConst *fe_known(FeOnnx *cx, FeTensor *t) {
  if (t->k || !t->lazy)
    return t->k;
  const OpInfo *op = find_op(str(t->lazy->op_type));
  Saved s = enter(cx, t->lazy, t->lazy_index);
  int rc = op && op->fold ? fold_now(cx, op) : 1;
  leave(cx, s);
  return rc == 0 ? t->k : NULL;
}

// Does every element of the float tensor have a finite value?
static bool all_finite(const FeConst *k) {
  for (int64_t i = 0; i < k->n; i++)
    if (!isfinite(k->f[i]))
      return false;
  return true;
}

// Is b (C x R) the transpose of a (R x C), exactly?
static bool is_transpose_of(const FeConst *a, const FeConst *b, int64_t r, int64_t c) {
  for (int64_t i = 0; i < r; i++)
    for (int64_t j = 0; j < c; j++)
      if (memcmp(&a->f[i * c + j], &b->f[j * r + i], sizeof(float)))
        return false;
  return true;
}

static bool exporter_name(const char *s) { return !strncmp(s, "onnx::", 6); }

// A float initializer that is exactly the transpose of another one is a
// weight tied to it (torch.onnx folds Transpose(lm_head.weight) into a new
// initializer). Returns the other, or NULL.
static FeTensor *tied_partner(FeOnnx *cx, FeTensor *t) {
  const FeConst *k = t->k;
  int64_t r, c;
  if (k->rank != 2 || !sym_is_const(k->shape[0], &r) || !sym_is_const(k->shape[1], &c))
    return NULL;
  for (size_t i = 0; i < cx->graph->n_initializer; i++) {
    const Onnx__TensorProto *p = cx->graph->initializer[i];
    FeTensor *o = p ? fe_lookup(cx, p->name) : NULL;
    int64_t r2, c2;
    if (!o || o == t || !o->root || o->k->rank != 2 || !sym_is_const(o->k->shape[0], &r2) ||
        !sym_is_const(o->k->shape[1], &c2) || r2 != c || c2 != r)
      continue;
    if (is_transpose_of(k, o->k, r, c))
      return o;
  }
  return NULL;
}

static IrValue *new_param(FeOnnx *cx, FeTensor *t) {
  IrValue *v = ir_param(cx->g, t->name, t->k->rank, t->k->shape, (IrInit){INIT_DATA, 0});
  v->data = t->k->f;
  v->loc = (IrLoc){0};
  return v;
}

// A float initializer read at run time: a trainable parameter (a mask with
// infinities is a constant; a transposed copy of another weight is tied to it).
static IrValue *materialize_root(FeOnnx *cx, FeTensor *t) {
  if (!all_finite(t->k)) {
    IrValue *v = ir_value_new(cx->g, t->name, DT_F32, ROLE_CONST);
    ir_value_set_shape(v, t->k->rank, t->k->shape);
    v->init.kind = INIT_DATA;
    v->data = t->k->f;
    return t->v = v;
  }
  FeTensor *o = tied_partner(cx, t);
  if (o && !o->v && exporter_name(t->name) && !exporter_name(o->name))
    o->v = new_param(cx, o);
  if (o && o->v && o->v->role == ROLE_PARAM)
    return t->v = fe_transpose(cx, o->v, (const int64_t[]){1, 0});
  return t->v = new_param(cx, t);
}

IrValue *fe_const_value(FeOnnx *cx, const FeConst *k, const char *name) {
  bool fl = fe_is_float_type(k->type);
  IrValue *v = ir_value_new(cx->g, name, fl ? DT_F32 : DT_I32, ROLE_CONST);
  ir_value_set_shape(v, k->rank, k->shape);
  v->init.kind = INIT_DATA;
  if (fl) {
    v->data = k->f;
  } else {
    int32_t *d = ir_alloc(&cx->g->arena, (size_t)(k->n + 1) * sizeof *d);
    for (int64_t i = 0; i < k->n; i++) {
      if (k->i[i] < INT32_MIN || k->i[i] > INT32_MAX)
        return fe_err(cx, "constant '%s' has the value %lld, which does not fit in i32", name,
                      (long long)k->i[i]), NULL;
      d[i] = (int32_t)k->i[i];
    }
    v->data = d;
  }
  v->loc = (IrLoc){0};
  return v;
}

// The element type a lazy producer gives, without evaluating it: bool for
// comparisons, `to` for Cast, int64 for Shape, else its data input's type.
static int lazy_type(FeOnnx *cx, const FeTensor *t, int depth) {
  if (t->k)
    return t->k->type;
  if (t->v || !t->lazy || depth > 64)
    return t->v && t->v->dtype == DT_I32 ? FE_INT64 : FE_FLOAT;
  static const char *const bools[] = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
                                      "Not", "And", "Or", NULL};
  const Onnx__NodeProto *n = t->lazy;
  for (int i = 0; bools[i]; i++)
    if (!strcmp(str(n->op_type), bools[i]))
      return FE_BOOL;
  if (!strcmp(str(n->op_type), "Shape") || !strcmp(str(n->op_type), "Size"))
    return FE_INT64;
  if (!strcmp(str(n->op_type), "Cast"))
    for (size_t i = 0; i < n->n_attribute; i++)
      if (n->attribute[i] && n->attribute[i]->name && !strcmp(n->attribute[i]->name, "to"))
        return (int)n->attribute[i]->i;
  int data = !strcmp(str(n->op_type), "Where") ? 1 : 0;
  const FeTensor *in = (size_t)data < n->n_input ? fe_lookup(cx, n->input[data]) : NULL;
  return in ? lazy_type(cx, in, depth + 1) : FE_FLOAT;
}

IrValue *fe_value(FeOnnx *cx, FeTensor *t) {
  if (t->v)
    return t->v;
  if (t->unsupported)
    return fe_err(cx, "reads '%s', %s, which mtc does not compute", t->name, t->unsupported), NULL;
  if (t->root)
    return materialize_root(cx, t);
  if (t->lazy && !fe_is_float_type(lazy_type(cx, t, 0)) && fe_known(cx, t))
    return t->v = fe_const_value(cx, t->k, ir_name(cx, t->name)); // no gradient in integers
  if (t->lazy) { // run the producer now, in this node's place in the schedule
    const OpInfo *op = find_op(str(t->lazy->op_type));
    Saved s = enter(cx, t->lazy, t->lazy_index);
    int rc = op && op->conv ? op->conv(cx)
                            : fe_err(cx, "'%s' must be known at compile time", t->name);
    leave(cx, s);
    if (rc)
      return NULL;
    if (t->v)
      return t->v;
  }
  if (t->k)
    return t->v = fe_const_value(cx, t->k, ir_name(cx, t->name));
  return fe_err(cx, "'%s' has no value", t->name), NULL;
}

int fe_shape(FeOnnx *cx, FeTensor *t, int *rank, const Sym **shape) {
  const FeConst *k = t->v ? NULL : fe_known(cx, t);
  if (!t->v && !k && !fe_value(cx, t))
    return -1;
  *rank = t->v ? t->v->rank : k->rank;
  memcpy(shape, t->v ? t->v->shape : k->shape, (size_t)*rank * sizeof *shape);
  return 0;
}

// ---- integer inputs ------------------------------------------------------------------------

void fe_note_use(IrValue *v, FeUse use, const Sym *range) {
  IrValue *in = v ? ir_view_root(v) : NULL;
  if (in && in->role != ROLE_INPUT)
    in = NULL;
  if (!in || in->dtype != DT_I32 || in->range)
    return;
  in->input_kind = use == FE_USE_INDICES ? INPUT_TOKENS
                  : use == FE_USE_MASK  ? INPUT_MASK
                                        : INPUT_CLASSES;
  in->range = range;
}

// A token input of v's size and range, or NULL.
static const IrValue *tokens_like(IrGraph *g, const IrValue *v) {
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *t = g->values[i];
    if (t->role == ROLE_INPUT && t->input_kind == INPUT_TOKENS && sym_eq(v->range, t->range) &&
        sym_eq(ir_numel(g, v), ir_numel(g, t)))
      return t;
  }
  return NULL;
}

// Does the model shift labels v itself? Hugging Face's causal LMs compare
// labels[..., 1:] with logits[..., :-1, :]: a slice that drops the first
// position on the way from v to the loss (through integer values only).
static bool shifted_inside(IrGraph *g, const IrValue *v) {
  bool *from = calloc((size_t)g->nvalues + 1, sizeof *from), shifted = false;
  IR_ASSERT(from);
  from[v->id] = true;
  for (int i = 0; i < g->nnodes && !shifted; i++) {
    const IrNode *n = g->nodes[i];
    bool reads = false;
    for (int k = 0; k < n->nin; k++)
      reads |= n->in[k] && from[n->in[k]->id];
    if (!reads)
      continue;
    if (n->op == OP_SLICE && from[n->in[0]->id] && ir_attr_i(n, "start") >= 1)
      shifted = true;
    for (int k = 0; k < n->nout; k++)
      if (n->out[k] && n->out[k]->dtype == DT_I32)
        from[n->out[k]->id] = true;
  }
  free(from);
  return shifted;
}

// Labels of the size and range of a token input (of any: an encoder-decoder
// has two) are next-token targets, or the tokens themselves where the model
// shifts them (shifted_inside).
static int finish_inputs(FeOnnx *cx) {
  IrGraph *g = cx->g;
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *v = g->values[i];
    if (v->role != ROLE_INPUT || v->dtype != DT_I32)
      continue;
    if (!v->range)
      return ir_error(cx->d, (IrLoc){0},
                      "integer input '%s' is not used as embedding indices, class labels or a mask "
                      "in float arithmetic, so mtc cannot tell which values to feed it", v->name);
    if (v->input_kind == INPUT_CLASSES && tokens_like(g, v))
      v->input_kind = shifted_inside(g, v) ? INPUT_LABELS : INPUT_TARGETS;
  }
  return 0;
}

// ---- graph inputs and initializers ------------------------------------------------------------

// A dim_param as a symbol name: [A-Za-z0-9_], not starting with a digit.
static int symbol_for(FeOnnx *cx, const char *param, const char *input, int dim) {
  char name[SYM_NAMELEN];
  size_t n = strlen(param);
  if (n == 0 || n >= SYM_NAMELEN - 1)
    return ir_error(cx->d, (IrLoc){0}, "input '%s' dim %d: the symbol '%.40s' must have 1 to %d "
                    "characters", input, dim, param, SYM_NAMELEN - 2);
  size_t j = 0;
  if (param[0] >= '0' && param[0] <= '9')
    name[j++] = 'D';
  for (size_t i = 0; i < n; i++)
    name[j++] = (char)((param[i] >= 'a' && param[i] <= 'z') || (param[i] >= 'A' && param[i] <= 'Z') ||
                               (param[i] >= '0' && param[i] <= '9')
                           ? param[i]
                           : '_');
  name[j] = '\0';
  int var = symtab_find(&cx->g->syms, name);
  if (var >= 0)
    return var;
  var = symtab_add(&cx->g->syms, name);
  if (var < 0)
    return ir_error(cx->d, (IrLoc){0}, "input '%s': too many symbolic dims (at most %d)", input,
                    SYM_MAXVARS);
  for (int i = 0; i < cx->opt->ndefines; i++)
    if (!strcmp(cx->opt->defines[i].name, name))
      symtab_bind(&cx->g->syms, var, cx->opt->defines[i].value);
  if (!cx->g->syms.bound[var])
    return ir_error(cx->d, (IrLoc){0},
                    "input '%s' dim %d is the symbol '%s', which has no value: pass -D %s=VALUE",
                    input, dim, name, name);
  return var;
}

static int declare_input(FeOnnx *cx, const Onnx__ValueInfoProto *vi) {
  const char *name = str(vi->name);
  const Onnx__TypeProto *tp = vi->type;
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type ||
      !tp->tensor_type->has_elem_type)
    return ir_error(cx->d, (IrLoc){0}, "input '%s' is not a tensor with an element type", name);
  int type = tp->tensor_type->elem_type;
  if (type != FE_FLOAT && type != FE_INT64 && type != FE_INT32)
    return ir_error(cx->d, (IrLoc){0}, "input '%s' is %s; mtc reads float, int64 and int32 inputs",
                    name, fe_type_name(type));
  const Onnx__TensorShapeProto *sp = tp->tensor_type->shape;
  if (!sp || sp->n_dim > IR_MAXRANK)
    return ir_error(cx->d, (IrLoc){0}, "input '%s' needs a shape of at most %d dims", name,
                    IR_MAXRANK);
  const Sym *shape[IR_MAXRANK];
  for (size_t i = 0; i < sp->n_dim; i++) {
    const Onnx__TensorShapeProto__Dimension *dm = sp->dim[i];
    if (dm && dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
        dm->dim_value > 0 && dm->dim_value <= (1 << 30)) {
      shape[i] = sym_const(&cx->g->arena, dm->dim_value);
    } else if (dm && dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
               dm->dim_param) {
      int var = symbol_for(cx, dm->dim_param, name, (int)i);
      if (var < 0)
        return -1;
      if (cx->g->syms.value[var] > (1 << 30))
        return ir_error(cx->d, (IrLoc){0}, "-D %s: at most %d", cx->g->syms.name[var], 1 << 30);
      shape[i] = sym_var(&cx->g->arena, var);
    } else {
      return ir_error(cx->d, (IrLoc){0}, "input '%s' dim %zu has neither a size nor a name",
                      name, i);
    }
  }
  if (fe_check_size(cx, (int)sp->n_dim, shape))
    return -1;
  FeTensor *t = define(cx, name);
  bool fl = type == FE_FLOAT;
  t->v = ir_input(cx->g, name, fl ? DT_F32 : DT_I32, (int)sp->n_dim, shape,
                  fl ? INPUT_RANDN : INPUT_CLASSES, NULL);
  t->v->loc = (IrLoc){0};
  return 0;
}

static bool is_initializer(const Onnx__GraphProto *gp, const char *name) {
  for (size_t i = 0; i < gp->n_initializer; i++)
    if (gp->initializer[i] && gp->initializer[i]->name && !strcmp(gp->initializer[i]->name, name))
      return true;
  return false;
}

static int declare_inputs(FeOnnx *cx) {
  const Onnx__GraphProto *gp = cx->graph;
  for (size_t i = 0; i < gp->n_input; i++) {
    const Onnx__ValueInfoProto *vi = gp->input[i];
    if (!vi || !vi->name || !vi->name[0])
      return ir_error(cx->d, (IrLoc){0}, "graph input %zu has no name", i);
    if (is_initializer(gp, vi->name)) // older exporters list initializers as inputs
      continue;
    if (fe_lookup(cx, vi->name))
      return ir_error(cx->d, (IrLoc){0}, "graph input '%s' is declared twice", vi->name);
    if (declare_input(cx, vi))
      return -1;
  }
  return 0;
}

static int declare_initializers(FeOnnx *cx) {
  const Onnx__GraphProto *gp = cx->graph;
  for (size_t i = 0; i < gp->n_initializer; i++) {
    const Onnx__TensorProto *tp = gp->initializer[i];
    if (!tp || !tp->name || !tp->name[0])
      return ir_error(cx->d, (IrLoc){0}, "initializer %zu has no name", i);
    if (fe_lookup(cx, tp->name))
      return ir_error(cx->d, (IrLoc){0}, "initializer '%s' is defined twice", tp->name);
    char what[300];
    snprintf(what, sizeof what, "initializer '%.256s'", tp->name);
    FeConst *k = fe_tensor_proto(cx, tp, what);
    if (!k)
      return -1;
    FeTensor *t = define(cx, tp->name);
    t->k = k;
    t->root = t->tainted = fe_is_float_type(k->type);
  }
  return 0;
}

// ---- nodes ---------------------------------------------------------------------------------------

// The block of a node: k+1 for the first path component "name.k" of its
// name ("/h.3/attn/MatMul" is in block 4), 0 when there is none.
static int block_of(const char *name) {
  for (const char *p = name; *p;) {
    const char *end = strchr(p, '/');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *dot = NULL; // the last '.' of the component: "layers.11"
    for (const char *q = p; q < p + len; q++)
      dot = *q == '.' ? q : dot;
    if (dot && dot > p && dot + 1 < p + len) {
      const char *q = dot + 1;
      while (q < p + len && *q >= '0' && *q <= '9')
        q++;
      if (q == p + len && len - (size_t)(dot + 1 - p) < 7)
        return atoi(dot + 1) + 1;
    }
    p += len;
    if (*p == '/')
      p++;
  }
  return 0;
}

// The path components of a name but the last (the node's own): "/a/b_1/MatMul" gives "a" and
// "b_1". Returns the one at or after *p (its length in *len, *p moved past it), or NULL.
static const char *next_scope(const char **p, size_t *len) {
  for (const char *end; (end = strchr(*p, '/'));) {
    const char *c = *p;
    *p = end + 1;
    if (end > c) {
      *len = (size_t)(end - c);
      return c;
    }
  }
  return NULL;
}

// Adds the name's scopes to cx->scopes (those shorter than 256 bytes: use_of's stems).
static void add_scopes(FeOnnx *cx, const char *name) {
  size_t len;
  char buf[256];
  for (const char *c; (c = next_scope(&name, &len));) {
    if (len >= sizeof buf)
      continue;
    memcpy(buf, c, len);
    buf[len] = 0;
    if (!ir_strset_has(&cx->scopes, buf))
      ir_strset_add(&cx->scopes, ir_strndup(&cx->g->arena, c, len));
  }
}

// The use of a node's layers: the largest k of its name's components "name_k" (k >= 1) whose
// "name" is a scope of the graph too: torch names the k-th call of a module that runs more
// than once (ALBERT's shared layer) after its first so ("/layers.0/attention/query_2/MatMul":
// 2). 0 when there is none. passes/repeat.c confirms that the uses it loops over are the same,
// so a wrong guess costs a loop, not a result.
static int use_of(const FeOnnx *cx, const char *name) {
  int use = 0;
  size_t len;
  for (const char *c; (c = next_scope(&name, &len));) {
    size_t i = len;
    while (i > 0 && c[i - 1] >= '0' && c[i - 1] <= '9')
      i--;
    char stem[256];
    if (i == len || i < 2 || c[i - 1] != '_' || c[i] == '0' || len - i > 6 || i > sizeof stem)
      continue;
    memcpy(stem, c, i - 1);
    stem[i - 1] = 0;
    int k = atoi(c + i);
    if (k > use && ir_strset_has(&cx->scopes, stem))
      use = k;
  }
  return use;
}

// Inputs all defined, outputs all new.
static int check_edges(FeOnnx *cx, const Onnx__NodeProto *n) {
  for (size_t i = 0; i < n->n_input; i++)
    if (n->input[i] && n->input[i][0] && !fe_lookup(cx, n->input[i]))
      return fe_err(cx, "input %zu '%.200s' is not defined by any node, graph input or "
                        "initializer before this node", i, n->input[i]);
  for (size_t i = 0; i < n->n_output; i++)
    if (n->output[i] && n->output[i][0] && fe_lookup(cx, n->output[i]))
      return fe_err(cx, "output '%.200s' is already defined", n->output[i]);
  return 0;
}

// Fold when every input is known (lazily when one comes from a float
// initializer: the consumer decides), else build IR ops.
static int convert_node(FeOnnx *cx, const OpInfo *op, const Onnx__NodeProto *n, int index) {
  bool known = true, tainted = false;
  for (int i = 0; i < fe_nin(cx); i++) {
    FeTensor *t = fe_in(cx, i);
    if (t && !t->k && !t->lazy && !t->root)
      known = false;
    tainted |= t && t->tainted;
  }
  if (!strcmp(op->name, "Identity") && fe_in(cx, 0) && fe_in(cx, 0)->root && fe_out_wanted(cx, 0)) {
    // torch.onnx shares equal initializers through Identity: each output is
    // its own parameter again (named as in the model).
    FeTensor *t = define(cx, n->output[0]);
    t->k = fe_in(cx, 0)->k;
    t->root = t->tainted = true;
    return 0;
  }
  for (int i = 0; i < fe_nin(cx); i++)
    if (fe_in(cx, i) && fe_in(cx, i)->sel)
      return fe_convert_selected(cx, op->name, op->conv);
  if (op->fold && known && tainted) {
    for (size_t i = 0; i < n->n_output; i++)
      if (n->output[i] && n->output[i][0]) {
        FeTensor *t = define(cx, n->output[i]);
        t->lazy = n;
        t->lazy_index = index;
        t->tainted = true;
      }
    return 0;
  }
  if (op->fold && known) {
    int rc = fold_now(cx, op);
    if (rc <= 0)
      return rc;
  }
  if (op->conv)
    return op->conv(cx);
  for (int i = 0; i < fe_nin(cx); i++) {
    FeTensor *t = fe_in(cx, i);
    if (t && t->v && !t->k)
      return fe_err(cx, "input '%s' is only known at run time; mtc evaluates %s at compile time",
                    t->name, op->name);
  }
  return fe_err(cx, "cannot evaluate this case at compile time");
}

// What to do about an op mtc does not read, where there is more to say than the list.
static const char *unsupported_hint(const char *op) {
  static const char *const control[] = {"Loop", "If", "Scan", "SplitToSequence",
                                        "SequenceEmpty", "SequenceAt", "SequenceInsert",
                                        "SequenceConstruct", "ConcatFromSequence"};
  for (size_t i = 0; i < sizeof control / sizeof *control; i++)
    if (!strcmp(op, control[i]))
      return ". Control flow and sequences are not read: torch.onnx.export writes them for "
             "data-dependent Python (with dynamic_axes, repeat_interleave becomes a Loop over "
             "sequences); export with fixed shapes (no dynamic_axes), or make that code "
             "shape-independent";
  return "";
}

static int convert_nodes(FeOnnx *cx) {
  const Onnx__GraphProto *gp = cx->graph;
  for (size_t i = 0; i < gp->n_node; i++)
    if (gp->node[i])
      add_scopes(cx, str(gp->node[i]->name));
  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *n = gp->node[i];
    if (!n || !n->op_type)
      return ir_error(cx->d, (IrLoc){0}, "node %zu has no op type", i);
    Saved s = enter(cx, n, (int)i);
    const char *domain = n->domain && n->domain[0] ? n->domain : "ai.onnx";
    const OpInfo *op = strcmp(domain, "ai.onnx") ? NULL : find_op(n->op_type);
    int rc = !op ? ir_error(cx->d, cx->g->cur_loc, "unsupported ONNX op '%.100s' (domain "
                            "'%.100s', opset %d) at node '%s'; mtc supports (domain ai.onnx, "
                            "opsets %d to %d): %s%s", n->op_type, domain, cx->opset,
                            node_name(cx, n, (int)i), FE_MIN_OPSET, FE_MAX_OPSET, supported_ops(cx),
                            unsupported_hint(n->op_type))
                 : check_edges(cx, n) || convert_node(cx, op, n, (int)i);
    leave(cx, s);
    if (rc)
      return -1;
  }
  return 0;
}

// ---- outputs and the loss ---------------------------------------------------------------------------

// A token input whose element count is numel, or NULL.
static IrValue *token_input(FeOnnx *cx, const Sym *numel) {
  for (int i = 0; i < cx->g->nvalues; i++) {
    IrValue *v = cx->g->values[i];
    if (v->role == ROLE_INPUT && v->input_kind == INPUT_TOKENS && sym_eq(ir_numel(cx->g, v), numel))
      return v;
  }
  return NULL;
}

// --loss cross-entropy: labels i32 [..] in [0, C) for logits [.., C];
// --loss mse: labels f32 like the output, loss = mean((y - labels)^2).
static IrValue *add_loss(FeOnnx *cx, IrValue *y) {
  IrGraph *g = cx->g;
  g->cur_loc = (IrLoc){0};
  ir_set_block(g, NULL);
  if (y->dtype != DT_F32)
    return ir_error(cx->d, (IrLoc){0}, "--loss: output '%s' is not float", y->name), NULL;
  if (!strcmp(cx->opt->loss, "mse")) {
    IrValue *labels = ir_input(g, "labels", DT_F32, y->rank, y->shape, INPUT_RANDN, NULL);
    IrValue *d = fe_op(cx, OP_SUB, y, labels);
    IrValue *sq = d ? fe_op(cx, OP_MUL, d, d) : NULL;
    return sq ? fe_op(cx, OP_MEAN, sq, NULL) : NULL;
  }
  if (y->rank < 1)
    return ir_error(cx->d, (IrLoc){0}, "--loss cross-entropy: output '%s' is a scalar; it must be "
                    "logits [..., classes]", y->name), NULL;
  IrValue *labels = ir_input(g, "labels", DT_I32, y->rank - 1, y->shape, INPUT_CLASSES,
                             y->shape[y->rank - 1]);
  if (token_input(cx, ir_numel(g, labels)))
    labels->input_kind = INPUT_TARGETS;
  return fe_op(cx, OP_CROSS_ENTROPY, y, labels);
}

// "'a', 'b'": the graph's output names, for messages.
static const char *output_names(FeOnnx *cx) {
  char names[1024] = "";
  for (size_t i = 0; i < cx->graph->n_output; i++) {
    const char *name = cx->graph->output[i] ? str(cx->graph->output[i]->name) : "";
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%.100s'", i ? ", " : "", name);
  }
  return ir_strdup(&cx->g->arena, names);
}

// The output --loss applies to: --labels NAME, or the only output.
static FeTensor *loss_output(FeOnnx *cx) {
  const Onnx__GraphProto *gp = cx->graph;
  for (size_t i = 0; i < gp->n_output; i++) {
    const char *name = gp->output[i] ? str(gp->output[i]->name) : "";
    if (cx->opt->labels ? !strcmp(cx->opt->labels, name) : gp->n_output == 1)
      return fe_lookup(cx, name);
  }
  ir_error(cx->d, (IrLoc){0}, "--loss: %s (outputs: %s)",
           cx->opt->labels ? "--labels names no graph output"
                           : "the model has several outputs; name one with --labels OUTPUT",
           output_names(cx));
  return NULL;
}

// The loss: a scalar float output, or --loss over an output.
static int choose_loss(FeOnnx *cx) {
  const Onnx__GraphProto *gp = cx->graph;
  cx->node = NULL;
  for (size_t i = 0; i < gp->n_output; i++) {
    const char *name = gp->output[i] ? str(gp->output[i]->name) : "";
    if (!fe_lookup(cx, name))
      return ir_error(cx->d, (IrLoc){0}, "graph output '%.200s' is not computed by any node", name);
    if (fe_lookup(cx, name)->sel)
      return ir_error(cx->d, (IrLoc){0}, "graph output '%.200s' is a selection by a run-time "
                      "mask (x[mask], NonZero and GatherND), which mtc computes only reduced whole "
                      "(a ReduceMean or ReduceSum) into the loss", name);
  }
  IrValue *loss = NULL;
  if (cx->opt->loss) {
    FeTensor *t = loss_output(cx);
    IrValue *y = t ? fe_value(cx, t) : NULL;
    if (!y || !(loss = add_loss(cx, y)))
      return -1;
  } else {
    const char *first = NULL;
    for (size_t i = 0; i < gp->n_output; i++) {
      IrValue *v = fe_lookup(cx, str(gp->output[i]->name))->v;
      if (!v || v->rank != 0 || v->dtype != DT_F32)
        continue;
      if (loss)  // a second one: training on either alone would ignore the other
        return ir_error(cx->d, (IrLoc){0}, "the model has several scalar float outputs ('%.100s' "
                        "and '%.100s' at least); mtc trains on one loss: export the model with "
                        "the loss (or the sum of the losses) as its only scalar output", first,
                        str(gp->output[i]->name));
      loss = v;
      first = str(gp->output[i]->name);
    }
    if (!loss)
      return ir_error(cx->d, (IrLoc){0}, "the model has no scalar float output to train on "
                      "(outputs: %s); add a loss with --loss cross-entropy|mse [--labels OUTPUT]",
                      output_names(cx));
  }
  cx->g->loss = loss;
  if (!ir_value_find(cx->g, "loss"))
    ir_value_rename(cx->g, loss, "loss");
  return 0;
}

// ---- the model -------------------------------------------------------------------------------------

static int check_defines(FeOnnx *cx) {
  for (int i = 0; i < cx->opt->ndefines; i++)
    if (symtab_find(&cx->g->syms, cx->opt->defines[i].name) < 0) {
      char dims[600] = "";
      for (int k = 0; k < cx->g->syms.n; k++)
        snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%s", k ? ", " : "",
                 cx->g->syms.name[k]);
      return ir_error(cx->d, (IrLoc){0}, "-D %s: the model has no dim %s (its dims: %s)",
                      cx->opt->defines[i].name, cx->opt->defines[i].name, dims[0] ? dims : "none");
    }
  return 0;
}

static int check_opset(FeOnnx *cx, const Onnx__ModelProto *m) {
  cx->opset = -1;
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = m->opset_import[i];
    if (o && (!o->domain || !o->domain[0] || !strcmp(o->domain, "ai.onnx")))
      cx->opset = o->has_version ? (int)o->version : -1;
  }
  if (cx->opset < FE_MIN_OPSET || cx->opset > FE_MAX_OPSET)
    return ir_error(cx->d, (IrLoc){0}, "the model uses ONNX opset %d; mtc reads opsets %d to %d "
                    "(export with opset_version=%d, or convert the model)", cx->opset,
                    FE_MIN_OPSET, FE_MAX_OPSET, FE_MAX_OPSET);
  if (!m->graph)
    return ir_error(cx->d, (IrLoc){0}, "the model has no graph");
  return 0;
}

// Is s valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF)?
static bool utf8(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    int n = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 ? 1 : (*p & 0xf0) == 0xe0 ? 2 : (*p & 0xf8) == 0xf0 ? 3 : -1;
    if (n < 0 || (n == 1 && *p < 0xc2) || (n == 3 && *p > 0xf4))
      return false;
    uint32_t c = *p++ & (0x7f >> n);
    for (int k = 0; k < n; k++, p++) {
      if ((*p & 0xc0) != 0x80)
        return false;
      c = c << 6 | (*p & 0x3f);
    }
    if ((n == 2 && (c < 0x800 || (c >= 0xd800 && c <= 0xdfff))) || (n == 3 && (c < 0x10000 || c > 0x10ffff)))
      return false;
  }
  return true;
}

static int check_name(FeOnnx *cx, const char *name, const char *what, size_t index) {
  if (utf8(str(name)))
    return 0;
  return ir_error(cx->d, (IrLoc){0}, "%s %zu has a name that is not UTF-8 (ONNX strings are); "
                  "re-export the model", what, index);
}

// Every name in the graph is UTF-8, as ONNX requires: names travel into the
// program's strings and its safetensors files, whose headers are JSON.
static int check_names(FeOnnx *cx) {
  const Onnx__GraphProto *g = cx->graph;
  int rc = check_name(cx, g->name, "the graph", 0);
  Onnx__ValueInfoProto **lists[] = {g->input, g->output, g->value_info};
  size_t counts[] = {g->n_input, g->n_output, g->n_value_info};
  const char *whats[] = {"graph input", "graph output", "value_info"};
  for (int l = 0; l < 3 && !rc; l++)
    for (size_t i = 0; i < counts[l] && !rc; i++) {
      const Onnx__ValueInfoProto *v = lists[l][i];
      rc = check_name(cx, v ? v->name : NULL, whats[l], i);
      const Onnx__TypeProto *t = v ? v->type : NULL;
      if (!t || t->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !t->tensor_type ||
          !t->tensor_type->shape)
        continue;
      const Onnx__TensorShapeProto *sh = t->tensor_type->shape;
      for (size_t k = 0; k < sh->n_dim && !rc; k++)
        if (sh->dim[k] && sh->dim[k]->value_case ==
                              ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM)
          rc = check_name(cx, sh->dim[k]->dim_param, "a dim_param of", i);
    }
  for (size_t i = 0; i < g->n_initializer && !rc; i++)
    rc = check_name(cx, g->initializer[i] ? g->initializer[i]->name : NULL, "initializer", i);
  for (size_t i = 0; i < g->n_node && !rc; i++) {
    const Onnx__NodeProto *n = g->node[i];
    if (!n)
      continue;
    rc = check_name(cx, n->name, "node", i);
    for (size_t k = 0; k < n->n_input && !rc; k++)
      rc = check_name(cx, n->input[k], "an input of node", i);
    for (size_t k = 0; k < n->n_output && !rc; k++)
      rc = check_name(cx, n->output[k], "an output of node", i);
  }
  return rc;
}

static int convert_graph(FeOnnx *cx) {
  return check_names(cx) || declare_inputs(cx) || check_defines(cx) || declare_initializers(cx) ||
         convert_nodes(cx) || choose_loss(cx) || finish_inputs(cx);
}

static uint8_t *read_all(const char *path, size_t *len, IrDiag *d) {
  FILE *f = ir_open_file(path, (IrLoc){0}, d);
  if (!f)
    return NULL;
  uint8_t *buf = NULL;
  size_t cap = 0;
  *len = 0;
  for (;;) {
    if (*len == cap) {
      cap = cap ? cap * 2 : 1 << 16;
      uint8_t *nb = cap <= FE_MAX_FILE ? realloc(buf, cap) : NULL;
      if (!nb) {
        free(buf);
        fclose(f);
        return ir_error(d, (IrLoc){0}, "%s is larger than 2 GiB (use external data)", path), NULL;
      }
      buf = nb;
    }
    size_t n = fread(buf + *len, 1, cap - *len, f);
    if (n == 0)
      break;
    *len += n;
  }
  bool bad = ferror(f);
  fclose(f);
  if (bad || *len == 0) {
    free(buf);
    return ir_error(d, (IrLoc){0}, "cannot read %s: %s", path, bad ? "read error" : "it is empty"),
           NULL;
  }
  return buf;
}

// "dir/model.onnx" -> "model"; and its folder ("dir", or ".")
static const char *stem(IrArena *a, const char *path, const char **dir) {
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  *dir = slash ? ir_strndup(a, path, (size_t)(slash - path)) : ".";
  if (slash == path)
    *dir = "/";
  const char *dot = strrchr(base, '.');
  return ir_strndup(a, base, dot && dot > base ? (size_t)(dot - base) : strlen(base));
}

// Messages nested deeper than this (graphs in attributes of nodes of graphs ...) are refused
// before protobuf-c unpacks them, which recurses once per level.
#define NESTING_MAX 64

// A base-128 varint at buf[*i], *i moved past it (at most 10 bytes; stops at len).
static uint64_t varint(const uint8_t *buf, size_t len, size_t *i) {
  uint64_t x = 0;
  for (int shift = 0; *i < len && shift < 64; shift += 7) {
    x |= (uint64_t)(buf[*i] & 0x7f) << shift;
    if (!(buf[(*i)++] & 0x80))
      break;
  }
  return x;
}

// The depth of nested messages in buf, read as `desc` on the wire, up to NESTING_MAX + 1 (the
// recursion stops there). A malformed buffer counts as shallow: unpack then refuses it.
static int nesting(const uint8_t *buf, size_t len, const ProtobufCMessageDescriptor *desc,
                   int depth) {
  int deepest = depth;
  size_t i = 0;
  while (i < len && deepest <= NESTING_MAX) {
    uint64_t key = varint(buf, len, &i);
    switch (key & 7) {
    case 0: varint(buf, len, &i); break;
    case 1: i += 8; break;
    case 5: i += 4; break;
    case 2: {
      uint64_t n = varint(buf, len, &i);
      if (n > len - i)
        return deepest;
      const ProtobufCFieldDescriptor *f =
          key >> 3 <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(desc, (unsigned)(key >> 3))
                                 : NULL;
      if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
        int k = nesting(buf + i, (size_t)n, f->descriptor, depth + 1);
        if (k > deepest)
          deepest = k;
      }
      i += (size_t)n;
      break;
    }
    default: return deepest; // groups (3, 4) and bad wire types: unpack decides
    }
  }
  return deepest;
}

IrGraph *fe_onnx_load(const char *path, const FeOnnxOptions *opt, IrDiag *d) {
  FeOnnxOptions none = {0};
  if (!opt)
    opt = &none;
  if (opt->loss && strcmp(opt->loss, "cross-entropy") && strcmp(opt->loss, "mse")) {
    ir_error(d, (IrLoc){0}, "--loss takes cross-entropy or mse, not '%s'", opt->loss);
    return NULL;
  }
  size_t len;
  uint8_t *buf = read_all(path, &len, d);
  if (!buf)
    return NULL;
  if (nesting(buf, len, &onnx__model_proto__descriptor, 0) > NESTING_MAX) {
    free(buf);
    ir_error(d, (IrLoc){0}, "%s: messages nested more than %d deep (graphs inside attributes "
             "inside graphs ...); mtc reads no such model", path, NESTING_MAX);
    return NULL;
  }
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
  free(buf);
  if (!m) {
    ir_error(d, (IrLoc){0}, "%s is not a valid ONNX model: the protobuf does not parse "
             "(truncated or corrupted file?)", path);
    return NULL;
  }
  FeOnnx cx = {.d = d, .opt = opt, .graph = m->graph, .table_size = 4099};
  const char *dir;
  cx.g = ir_graph_new(NULL);
  cx.g->name = stem(&cx.g->arena, path, &dir);
  cx.dir = dir;
  cx.table = calloc((size_t)cx.table_size, sizeof *cx.table);
  cx.nnames = m->graph ? (int)m->graph->n_node : 0;
  cx.names = calloc((size_t)cx.nnames + 1, sizeof *cx.names);
  IR_ASSERT(cx.table && cx.names);
  int rc = check_opset(&cx, m) || convert_graph(&cx);
  cx.g->cur_loc = (IrLoc){0};
  ir_set_block(cx.g, NULL);
  ir_strset_free(&cx.scopes);
  free(cx.table);
  free(cx.names);
  onnx__model_proto__free_unpacked(m, NULL);
  if (rc) {
    if (d && d->loc.file) { // it points into the graph's arena: keep a copy
      snprintf(d->loc_text, sizeof d->loc_text, "%s", d->loc.file);
      d->loc.file = d->loc_text;
    }
    ir_graph_free(cx.g);
    return NULL;
  }
  ir_mark_batch_dims(cx.g);
  return cx.g;
}
