// The graph, its builder and diagnostics.
#define _POSIX_C_SOURCE 200809L
#include "ir.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// ---- op table ----------------------------------------------------------------

static const struct {
  const char *name;
  int nin, nout;
  IrOpKind kind;
} op_info[] = {
#define OP(E, name, nin, nout, kind) {#name, nin, nout, KIND_##kind},
#include "ops.def"
};

const char *ir_op_name(IrOp op) { return op < OP_COUNT ? op_info[op].name : "?"; }
int ir_op_nin(IrOp op) { return op_info[op].nin; }
int ir_op_nout(IrOp op) { return op_info[op].nout; }
IrOpKind ir_op_kind(IrOp op) { return op_info[op].kind; }

IrOp ir_op_lookup(const char *name) {
  for (int i = 0; i < OP_COUNT; i++)
    if (strcmp(op_info[i].name, name) == 0)
      return (IrOp)i;
  return OP_COUNT;
}

const char *ir_mesh_axis_name(IrMeshAxis a) {
  static const char *const names[] = {"-", "dp", "tp", "row", "col", "sub", "subdp", "subrow",
                                      "all", "subrep"};
  _Static_assert(sizeof names / sizeof *names == IR_MESH_SUBREP + 1, "one name per axis");
  return a >= 0 && a <= IR_MESH_SUBREP ? names[a] : "-";
}

// ---- diagnostics -----------------------------------------------------------------

int ir_error(IrDiag *d, IrLoc loc, const char *fmt, ...) {
  if (!d)
    return -1;
  d->loc = loc;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->msg, sizeof d->msg, fmt, ap);
  va_end(ap);
  return -1;
}

FILE *ir_open_file(const char *path, IrLoc loc, IrDiag *d) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer
  int fd = open(path, O_RDONLY | O_NONBLOCK);
  if (fd < 0) {
    ir_error(d, loc, "cannot read %s: %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  int flags = fcntl(fd, F_GETFL);
  FILE *f = NULL;
  if (fstat(fd, &st) != 0)
    ir_error(d, loc, "cannot read %s: %s", path, strerror(errno));
  else if (S_ISDIR(st.st_mode))
    ir_error(d, loc, "cannot read %s: it is a directory", path);
  else if (!S_ISREG(st.st_mode))
    ir_error(d, loc, "cannot read %s: it is not a regular file", path);
  else if (flags == -1 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == -1 || !(f = fdopen(fd, "rb")))
    ir_error(d, loc, "cannot read %s: %s", path, strerror(errno));
  if (!f)
    close(fd);
  return f;
}

// Print line `line` of `path` and a caret under column `col`, when it is a regular file whose
// first 10^6 lines hold that line.
static void print_source_line(FILE *f, const char *path, int line, int col) {
  FILE *src = ir_open_file(path, (IrLoc){0}, NULL);
  if (!src)
    return;
  char buf[4096];
  int ln = 1;
  for (long reads = 0; reads < 1000000 && ln <= line && fgets(buf, sizeof buf, src); reads++) {
    size_t len = strlen(buf);
    bool whole = len > 0 && buf[len - 1] == '\n';
    if (ln == line) {
      if (whole)
        buf[--len] = '\0';
      fprintf(f, "  %s\n  ", buf);
      for (int i = 1; i < col && (size_t)(i - 1) < len; i++)
        fputc(buf[i - 1] == '\t' ? '\t' : ' ', f);
      fputs("^\n", f);
      break;
    }
    if (whole)
      ln++;
  }
  fclose(src);
}

void ir_diag_print(FILE *f, const IrDiag *d) {
  const IrLoc *l = &d->loc;
  if (!l->file)
    fprintf(f, "error: %s\n", d->msg);
  else if (l->line == 0)
    fprintf(f, "node '%s': error: %s\n", l->file, d->msg);
  else {
    fprintf(f, "%s:%d:%d: error: %s\n", l->file, l->line, l->col, d->msg);
    print_source_line(f, l->file, l->line, l->col);
  }
}

_Noreturn void ir_assert_fail(const char *cond, const char *file, int line) {
  fprintf(stderr, "mtc: internal error: %s:%d: assertion '%s' failed\n", file, line, cond);
  abort();
}

// ---- graph -------------------------------------------------------------------

IrGraph *ir_graph_new(const char *name) {
  IrGraph *g = calloc(1, sizeof *g);
  IR_ASSERT(g);
  g->name = ir_strdup(&g->arena, name ? name : "model");
  g->insert_at = -1;
  g->batch_sym = g->seq_sym = -1;
  return g;
}

void ir_graph_free(IrGraph *g) {
  if (!g)
    return;
  free(g->name_slot);
  free(g->values);
  free(g->nodes);
  free(g->pending);
  ir_arena_free(&g->arena);
  free(g);
}

// Grow a pointer vector by one slot.
static void push(void ***vec, int *n, int *cap, void *item) {
  if (*n == *cap) {
    *cap = *cap ? 2 * *cap : 64;
    *vec = realloc(*vec, (size_t)*cap * sizeof **vec);
    IR_ASSERT(*vec);
  }
  (*vec)[(*n)++] = item;
}

// ---- the name index -----------------------------------------------------------------
//
// Every value is entered under the name it has when it is made or renamed.
// Entries are never taken out: a lookup skips one whose value has another
// name now or is no longer the graph's (ir_remove_unused, fusion), and the
// table is built again from the graph's values when half of it is used.

static uint64_t name_hash(const char *s) { // FNV-1a
  uint64_t h = 1469598103934665603u;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211u;
  return h;
}

static void index_put(IrGraph *g, IrValue *v) {
  size_t mask = (size_t)g->name_cap - 1, i = name_hash(v->name) & mask;
  while (g->name_slot[i])
    i = (i + 1) & mask;
  g->name_slot[i] = v;
  g->name_used++;
}

// Enter v (one of g's values) under its name.
static void index_add(IrGraph *g, IrValue *v) {
  if (2 * (g->name_used + 1) <= g->name_cap) {
    index_put(g, v);
    return;
  }
  int cap = 64;
  while (cap < 4 * g->nvalues)
    cap *= 2;
  free(g->name_slot);
  g->name_slot = calloc((size_t)cap, sizeof *g->name_slot);
  IR_ASSERT(g->name_slot);
  g->name_cap = cap;
  g->name_used = 0;
  for (int i = 0; i < g->nvalues; i++)
    index_put(g, g->values[i]);
}

// ---- a set of strings -------------------------------------------------------------------

bool ir_strset_has(const IrStrSet *set, const char *s) {
  if (!set->cap)
    return false;
  for (size_t i = name_hash(s) & (set->cap - 1); set->slot[i]; i = (i + 1) & (set->cap - 1))
    if (!strcmp(set->slot[i], s))
      return true;
  return false;
}

bool ir_strset_add(IrStrSet *set, const char *s) {
  if (ir_strset_has(set, s))
    return false;
  if (2 * (set->n + 1) > set->cap) {
    IrStrSet big = {.cap = set->cap ? 2 * set->cap : 64};
    big.slot = calloc(big.cap, sizeof *big.slot);
    IR_ASSERT(big.slot);
    for (size_t i = 0; i < set->cap; i++)
      if (set->slot[i])
        ir_strset_add(&big, set->slot[i]);
    free(set->slot);
    *set = big;
  }
  size_t i = name_hash(s) & (set->cap - 1);
  while (set->slot[i])
    i = (i + 1) & (set->cap - 1);
  set->slot[i] = s;
  set->n++;
  return true;
}

void ir_strset_free(IrStrSet *set) {
  free(set->slot);
  *set = (IrStrSet){0};
}

IrValue *ir_value_find(const IrGraph *g, const char *name) {
  if (!g->name_cap)
    return NULL;
  size_t mask = (size_t)g->name_cap - 1;
  for (size_t i = name_hash(name) & mask; g->name_slot[i]; i = (i + 1) & mask) {
    IrValue *v = g->name_slot[i];
    if (v->id >= 0 && v->id < g->nvalues && g->values[v->id] == v && !strcmp(v->name, name))
      return v;
  }
  return NULL;
}

// A name not yet used in g: `base`, or `base.1`, `base.2`, ...; "%N" style
// numbers when base is NULL.
static const char *unique_name(IrGraph *g, const char *base) {
  char buf[512];
  if (!base) {
    snprintf(buf, sizeof buf, "%d", g->nvalues);
    base = buf;
  }
  if (!ir_value_find(g, base))
    return ir_strdup(&g->arena, base);
  for (int k = 1;; k++) {
    char cand[600];
    snprintf(cand, sizeof cand, "%s.%d", base, k);
    if (!ir_value_find(g, cand))
      return ir_strdup(&g->arena, cand);
  }
}

IrValue *ir_value_new(IrGraph *g, const char *name, IrDType dt, IrRole role) {
  IrValue *v = ir_alloc(&g->arena, sizeof *v);
  v->id = g->nvalues;
  v->name = unique_name(g, name);
  v->dtype = dt;
  v->rank = -1;
  v->role = role;
  v->loc = g->cur_loc;
  v->pieces = 1;   // every dim whole (IR_MESH_NONE is 0)
  push((void ***)&g->values, &g->nvalues, &g->capvalues, v);
  index_add(g, v);
  return v;
}

void ir_value_set_shape(IrValue *v, int rank, const Sym *const *shape) {
  IR_ASSERT(rank >= 0 && rank <= IR_MAXRANK);
  v->rank = rank;
  for (int i = 0; i < rank; i++)
    v->shape[i] = shape[i];
}

IrValue *ir_input(IrGraph *g, const char *name, IrDType dt, int rank, const Sym *const *shape,
                  IrInputKind kind, const Sym *range) {
  IrValue *v = ir_value_new(g, name, dt, ROLE_INPUT);
  ir_value_set_shape(v, rank, shape);
  v->input_kind = kind;
  v->range = range;
  return v;
}

IrValue *ir_param(IrGraph *g, const char *name, int rank, const Sym *const *shape, IrInit init) {
  IrValue *v = ir_value_new(g, name, DT_F32, ROLE_PARAM);
  ir_value_set_shape(v, rank, shape);
  v->init = init;
  return v;
}

IrValue *ir_dropout_step(IrGraph *g, IrDiag *d) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_TICK)
      return g->nodes[i]->in[0];
  IrValue *v = ir_value_new(g, "dropout.step", DT_I32, ROLE_STATE);
  ir_value_set_shape(v, 0, NULL);
  v->init.kind = INIT_ZEROS;
  v->loc = (IrLoc){0};
  IrNode *n = ir_node_new(g, OP_TICK, &v, 1, 0);
  return ir_infer(g, n, d) ? NULL : v;
}

void ir_set_dropout(IrGraph *g, IrNode *n, double ratio, uint64_t seed, int64_t key) {
  ir_set_float(g, n, "ratio", ratio);
  ir_set_int(g, n, "seed", (int64_t)(seed & 0x7fffffff));
  ir_set_int(g, n, "key", key);
}

IrNode *ir_node_new(IrGraph *g, IrOp op, IrValue *const *in, int nin, int nout) {
  IR_ASSERT(op < OP_COUNT);
  IrNode *n = ir_alloc(&g->arena, sizeof *n);
  n->id = g->nnodes;
  n->op = op;
  n->nin = nin;
  n->nout = nout;
  n->in = ir_alloc(&g->arena, (size_t)(nin + 1) * sizeof *n->in);
  n->out = ir_alloc(&g->arena, (size_t)(nout + 1) * sizeof *n->out);
  for (int i = 0; i < nin; i++)
    n->in[i] = in[i];
  n->phase = g->cur_phase;
  n->block = g->cur_block;
  n->use = g->cur_use;
  n->loc = g->cur_loc;
  IrRole role = g->cur_phase == PHASE_FORWARD ? ROLE_ACT : ROLE_GRAD;
  for (int i = 0; i < nout; i++) {
    n->out[i] = ir_value_new(g, NULL, DT_F32, role);
    n->out[i]->producer = n;
  }
  if (g->batching) {
    n->id = g->insert_at >= 0 ? g->insert_at : g->nnodes;
    push((void ***)&g->pending, &g->npending, &g->cappending, n);
    return n;
  }
  push((void ***)&g->nodes, &g->nnodes, &g->capnodes, n);
  if (g->insert_at >= 0 && g->insert_at < g->nnodes - 1) {
    int at = g->insert_at++;
    memmove(&g->nodes[at + 1], &g->nodes[at], (size_t)(g->nnodes - 1 - at) * sizeof *g->nodes);
    g->nodes[at] = n;
    for (int i = at; i < g->nnodes; i++)
      g->nodes[i]->id = i;
  }
  return n;
}

void ir_insert_before(IrGraph *g, int pos) { g->insert_at = pos; }

int ir_nblocks(const IrGraph *g) {
  int nb = 1;
  for (int i = 0; i < g->nnodes; i++)
    nb = g->nodes[i]->block + 1 > nb ? g->nodes[i]->block + 1 : nb;
  return nb;
}

IrValue *ir_view_root(IrValue *v) {
  while (v->producer && (v->producer->op == OP_RESHAPE || v->producer->op == OP_TRANSPOSE ||
                         v->producer->op == OP_SLICE || v->producer->op == OP_BROADCAST))
    v = v->producer->in[0];
  return v;
}

void ir_batch_begin(IrGraph *g) {
  IR_ASSERT(!g->batching);
  g->batching = true;
  g->npending = 0;
}

void ir_batch_end(IrGraph *g) {
  IR_ASSERT(g->batching);
  g->batching = false;
  // the waiting nodes by insertion point, in the order made (a counting sort)
  int n = g->nnodes, *start = calloc((size_t)n + 2, sizeof *start);
  IrNode **sorted = malloc(((size_t)g->npending + 1) * sizeof *sorted);
  IR_ASSERT(start && sorted);
  for (int i = 0; i < g->npending; i++)
    start[g->pending[i]->id + 1]++;
  for (int i = 0; i <= n; i++)
    start[i + 1] += start[i];
  for (int i = 0; i < g->npending; i++)
    sorted[start[g->pending[i]->id]++] = g->pending[i];
  // start[i] is now the end of point i's run, and so the start of i + 1's
  int total = n + g->npending;
  IrNode **nodes = malloc(((size_t)total + 1) * sizeof *nodes);
  IR_ASSERT(nodes);
  int out = 0, next = 0;
  for (int i = 0; i <= n; i++) {
    for (; next < start[i]; next++)
      nodes[out++] = sorted[next];
    if (i < n && g->nodes[i]->id >= 0)
      nodes[out++] = g->nodes[i];
  }
  for (int i = 0; i < out; i++)
    nodes[i]->id = i;
  free(g->nodes);
  g->nodes = nodes;
  g->nnodes = out;
  g->capnodes = total + 1;
  g->npending = 0;
  free(start), free(sorted);
}

void ir_node_set_op(IrGraph *g, IrNode *n, IrOp op, IrValue *const *in, int nin) {
  int nout = ir_op_nout(op);
  IR_ASSERT(op < OP_COUNT && nout >= n->nout);
  IrValue **ins = ir_alloc(&g->arena, (size_t)(nin + 1) * sizeof *ins);
  for (int i = 0; i < nin; i++)
    ins[i] = in[i];
  IrValue **outs = ir_alloc(&g->arena, (size_t)(nout + 1) * sizeof *outs);
  for (int i = 0; i < nout; i++) {
    outs[i] = i < n->nout ? n->out[i]
                          : ir_value_new(g, NULL, DT_F32,
                                         n->phase == PHASE_FORWARD ? ROLE_ACT : ROLE_GRAD);
    outs[i]->producer = n;
  }
  n->op = op;
  n->in = ins, n->nin = nin;
  n->out = outs, n->nout = nout;
}

void ir_node_set_output(IrNode *n, int k, IrValue *v) {
  IR_ASSERT(k >= 0 && k < n->nout);
  if (n->out[k]->producer == n)
    n->out[k]->producer = NULL;
  n->out[k] = v;
  v->producer = n;
}

void ir_node_remove(IrGraph *g, IrNode *n) {
  IR_ASSERT(n->id >= 0 && n->id < g->nnodes && g->nodes[n->id] == n);
  if (g->batching) {
    n->id = -1; // taken out by ir_batch_end
    return;
  }
  for (int i = n->id; i + 1 < g->nnodes; i++) {
    g->nodes[i] = g->nodes[i + 1];
    g->nodes[i]->id = i;
  }
  g->nnodes--;
  if (g->insert_at > n->id)
    g->insert_at--;
  n->id = -1;
}

void ir_remove_unused(IrGraph *g, IrRole role) {
  char *read = calloc((size_t)g->nvalues + 1, 1);
  IR_ASSERT(read);
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i]->nin; k++)
      read[g->nodes[i]->in[k]->id] = 1;
  int kept = 0;
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *v = g->values[i];
    if (v->role == role && !v->producer && !read[i] && v != g->loss)
      continue;
    v->id = kept;
    g->values[kept++] = v;
  }
  g->nvalues = kept;
  free(read);
}

// The most inputs any of nodes[0..n) has.
static int max_nin(IrNode *const *nodes, int n) {
  int m = 0;
  for (int i = 0; i < n; i++)
    m = nodes[i]->nin > m ? nodes[i]->nin : m;
  return m;
}

void ir_replace_uses_in_phase(IrGraph *g, IrValue *const *from, IrValue *const *to, int count,
                              IrPhase phase) {
  IrValue **map = calloc((size_t)g->nvalues + 1, sizeof *map); // one sweep for all of them
  IR_ASSERT(map);
  for (int i = 0; i < count; i++)
    map[from[i]->id] = to[i];
  for (int i = 0; i < g->nnodes; i++) {
    IrNode *n = g->nodes[i];
    for (int k = 0; n->phase == phase && k < n->nin; k++)
      if (map[n->in[k]->id])
        n->in[k] = map[n->in[k]->id];
  }
  free(map);
}

void ir_set_block(IrGraph *g, const IrNode *n) {
  g->cur_block = n ? n->block : 0;
  g->cur_use = n ? n->use : 0;
}

IrNode *ir_clone_nodes(IrGraph *g, IrNode *const *nodes, int n, IrValue **map,
                       const char *suffix, IrDiag *d) {
  IrNode *first = NULL;
  IrValue **in = malloc(((size_t)max_nin(nodes, n) + 1) * sizeof *in);
  IR_ASSERT(in);
  for (int i = 0; i < n; i++) {
    const IrNode *o = nodes[i];
    for (int k = 0; k < o->nin; k++)
      in[k] = map[o->in[k]->id] ? map[o->in[k]->id] : o->in[k];
    IrLoc loc = g->cur_loc;
    g->cur_loc = o->loc;
    IrNode *c = ir_node_new(g, o->op, in, o->nin, o->nout);
    g->cur_loc = loc;
    c->use = c->block == o->block ? o->use : 0;
    ir_copy_attrs(g, c, o);
    for (int k = 0; k < o->nout; k++) {
      IrValue *x = o->out[k], *y = c->out[k];
      char name[600];
      snprintf(name, sizeof name, "%s.%s", x->name, suffix);
      ir_value_rename(g, y, name);
      y->dtype = x->dtype;
      y->role = x->role;
      y->loc = x->loc;
      if (x->rank >= 0)
        ir_value_set_shape(y, x->rank, x->shape);
      map[x->id] = y;
    }
    first = first ? first : c;
    if (ir_infer(g, c, d)) {
      free(in);
      return NULL;
    }
  }
  free(in);
  return first;
}

// ---- attributes -----------------------------------------------------------------

enum { IS_OPTIONAL, IS_REQUIRED };

static const IrAttrDecl attr_decls[] = {
#define ATTR(E, name, kind, req, dflt, lo, hi) {OP_##E, #name, ATTR_##kind, IS_##req, dflt, lo, hi},
#include "attrs.def"
};

const IrAttrDecl *ir_op_attr(IrOp op, const char *name) {
  for (size_t i = 0; i < sizeof attr_decls / sizeof attr_decls[0]; i++)
    if (attr_decls[i].op == op && strcmp(attr_decls[i].name, name) == 0)
      return &attr_decls[i];
  return NULL;
}

const IrAttrDecl *ir_op_attr_at(IrOp op, int i) {
  for (size_t k = 0; k < sizeof attr_decls / sizeof attr_decls[0]; k++)
    if (attr_decls[k].op == op && i-- == 0)
      return &attr_decls[k];
  return NULL;
}

const char *ir_op_attr_list(IrOp op, char *buf, size_t size) {
  const char *head = ir_op_attr_at(op, 0) ? "its attributes:" : "it has none";
  size_t len = (size_t)snprintf(buf, size, "%s", head);
  const IrAttrDecl *a;
  for (int i = 0; (a = ir_op_attr_at(op, i)) && len < size; i++)
    len += (size_t)snprintf(buf + len, size - len, "%s %s", i ? "," : "", a->name);
  return buf;
}

const char *ir_attr_kind_name(IrAttrKind kind) {
  switch (kind) {
  case ATTR_INT: return "an integer";
  case ATTR_FLOAT: return "a float";
  case ATTR_INTS: return "a list of integers";
  case ATTR_SYMS: return "a list of formulas";
  case ATTR_STR: return "a string";
  }
  return "?";
}

static IrAttr *attr_slot(IrGraph *g, IrNode *n, const char *name) {
  for (int i = 0; i < n->nattr; i++)
    if (strcmp(n->attr[i].name, name) == 0)
      return &n->attr[i];
  IrAttr *a = ir_alloc(&g->arena, (size_t)(n->nattr + 1) * sizeof *a);
  if (n->nattr)
    memcpy(a, n->attr, (size_t)n->nattr * sizeof *a);
  n->attr = a;
  IrAttr *s = &n->attr[n->nattr++];
  s->name = ir_strdup(&g->arena, name);
  return s;
}

void ir_copy_attrs(IrGraph *g, IrNode *to, const IrNode *from) {
  to->nattr = from->nattr;
  to->attr = ir_alloc(&g->arena, (size_t)(from->nattr + 1) * sizeof *to->attr);
  if (from->nattr)
    memcpy(to->attr, from->attr, (size_t)from->nattr * sizeof *to->attr);
}

void ir_set_int(IrGraph *g, IrNode *n, const char *name, int64_t v) {
  IrAttr *a = attr_slot(g, n, name);
  a->kind = ATTR_INT;
  a->i = v;
}

void ir_set_float(IrGraph *g, IrNode *n, const char *name, double v) {
  IrAttr *a = attr_slot(g, n, name);
  a->kind = ATTR_FLOAT;
  a->f = v;
}

void ir_set_ints(IrGraph *g, IrNode *n, const char *name, const int64_t *v, int count) {
  IrAttr *a = attr_slot(g, n, name);
  a->kind = ATTR_INTS;
  a->n = count;
  a->ints = ir_alloc(&g->arena, (size_t)(count + 1) * sizeof *a->ints);
  memcpy(a->ints, v, (size_t)count * sizeof *v);
}

void ir_set_str(IrGraph *g, IrNode *n, const char *name, const char *s) {
  IrAttr *a = attr_slot(g, n, name);
  a->kind = ATTR_STR;
  a->s = ir_strdup(&g->arena, s);
}

static bool attr_equal(const IrAttr *a, const IrAttr *b) {
  if (strcmp(a->name, b->name) || a->kind != b->kind)
    return false;
  switch (a->kind) {
  case ATTR_INT: return a->i == b->i;
  case ATTR_FLOAT: return a->f == b->f || (a->f != a->f && b->f != b->f);
  case ATTR_STR: return !strcmp(a->s, b->s);
  case ATTR_INTS:
    return a->n == b->n && !memcmp(a->ints, b->ints, (size_t)a->n * sizeof *a->ints);
  case ATTR_SYMS: return a->n == b->n && sym_list_eq(a->syms, b->syms, a->n);
  }
  return false;
}

bool ir_attrs_equal(const IrNode *a, const IrNode *b, bool but_ints) {
  if (a->nattr != b->nattr)
    return false;
  for (int i = 0; i < a->nattr; i++) {
    int j = 0;
    while (j < b->nattr && strcmp(a->attr[i].name, b->attr[j].name))
      j++;
    if (j == b->nattr || (!attr_equal(&a->attr[i], &b->attr[j]) &&
                          !(but_ints && a->attr[i].kind == ATTR_INT && b->attr[j].kind == ATTR_INT)))
      return false;
  }
  return true;
}

void ir_set_syms(IrGraph *g, IrNode *n, const char *name, const Sym *const *v, int count) {
  IrAttr *a = attr_slot(g, n, name);
  a->kind = ATTR_SYMS;
  a->n = count;
  a->syms = ir_alloc(&g->arena, (size_t)(count + 1) * sizeof *a->syms);
  for (int i = 0; i < count; i++)
    a->syms[i] = v[i];
}

// n's value of attribute `name` (NULL when not set) and, in *decl, the
// attribute as n's op declares it. Reading a name the op does not declare, or
// as another kind, is a bug in mtc: stop and say which.
static const IrAttr *read_attr(const IrNode *n, const char *name, IrAttrKind kind,
                               const IrAttrDecl **decl) {
  *decl = ir_op_attr(n->op, name);
  const IrAttr *a = NULL;
  for (int i = 0; i < n->nattr && !a; i++)
    if (strcmp(n->attr[i].name, name) == 0)
      a = &n->attr[i];
  char why[128] = "";
  if (!*decl)
    snprintf(why, sizeof why, "ir/attrs.def does not declare it");
  else if ((*decl)->kind != kind)
    snprintf(why, sizeof why, "ir/attrs.def declares %s", ir_attr_kind_name((*decl)->kind));
  else if (a && a->kind != kind)
    snprintf(why, sizeof why, "the node holds %s", ir_attr_kind_name(a->kind));
  if (why[0]) {
    fprintf(stderr, "mtc: internal error: attribute '%s' of %s read as %s, but %s\n", name,
            ir_op_name(n->op), ir_attr_kind_name(kind), why);
    ir_assert_fail("an attribute read as ir/attrs.def declares it", __FILE__, __LINE__);
  }
  return a;
}

int64_t ir_attr_i(const IrNode *n, const char *name) {
  const IrAttrDecl *decl;
  const IrAttr *a = read_attr(n, name, ATTR_INT, &decl);
  return a ? a->i : (int64_t)decl->dflt;
}

const char *ir_attr_s(const IrNode *n, const char *name) {
  const IrAttrDecl *decl;
  const IrAttr *a = read_attr(n, name, ATTR_STR, &decl);
  return a ? a->s : NULL;
}

double ir_attr_f(const IrNode *n, const char *name) {
  const IrAttrDecl *decl;
  const IrAttr *a = read_attr(n, name, ATTR_FLOAT, &decl);
  return a ? a->f : decl->dflt;
}

const int64_t *ir_attr_ints(const IrNode *n, const char *name, int *count) {
  const IrAttrDecl *decl;
  const IrAttr *a = read_attr(n, name, ATTR_INTS, &decl);
  *count = a ? a->n : 0;
  return a ? a->ints : NULL;
}

const Sym *const *ir_attr_syms(const IrNode *n, const char *name, int *count) {
  const IrAttrDecl *decl;
  const IrAttr *a = read_attr(n, name, ATTR_SYMS, &decl);
  *count = a ? a->n : 0;
  return a ? a->syms : NULL;
}

void ir_value_rename(IrGraph *g, IrValue *v, const char *name) {
  v->name = ""; // so the old name does not count as taken
  v->name = unique_name(g, name);
  index_add(g, v);
}

void ir_value_set_name(IrGraph *g, IrValue *v, const char *name) {
  v->name = name;
  index_add(g, v);
}

// The symbol a dim is, when it is exactly one symbol; else -1.
int ir_lone_symbol(const Sym *s) {
  int64_t c;
  if (!s || s->n != 1 || sym_is_const(s, &c) || s->t[0].num != 1 || s->t[0].den != 1)
    return -1;
  int var = -1;
  for (int k = 0; k < SYM_MAXVARS; k++) {
    if (s->t[0].exp[k] == 1 && var < 0)
      var = k;
    else if (s->t[0].exp[k])
      return -1;
  }
  return var;
}

bool ir_batched(IrGraph *g, const IrValue *v) {
  return v->rank > 0 && g->batch_sym >= 0 && sym_eq(v->shape[0], sym_var(&g->arena, g->batch_sym));
}

const IrValue *ir_fed_input(const IrGraph *g) {
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if (v->role == ROLE_INPUT && !v->producer && v->rank > 0 && v->layout[0].axis != IR_MESH_NONE)
      return v;
  }
  return NULL;
}

IrRows ir_batch_rows(IrGraph *g, const IrValue *v) {
  if (v->rank == 0)
    return IR_ROWS_NONE;
  const IrValue *in = ir_fed_input(g);
  IrMeshAxis fed = in ? in->layout[0].axis : IR_MESH_NONE, axis = v->layout[0].axis;
  if (g->batch_sym >= 0) {
    IrValue whole = ir_whole(v);
    const Sym *d = whole.shape[0];
    if (d->n != 1 || d->t[0].den != 1 || d->t[0].exp[g->batch_sym] != 1)
      return IR_ROWS_NONE;
    return v->role == ROLE_INPUT || fed == IR_MESH_NONE || axis == fed ? IR_ROWS_RANK
                                                                       : IR_ROWS_REPLICA;
  }
  if (fed == IR_MESH_NONE)
    return IR_ROWS_RANK;   // a sample is one whole set of the inputs: one row
  if (v->role == ROLE_INPUT)
    return axis != IR_MESH_NONE ? IR_ROWS_RANK : IR_ROWS_NONE;
  if (axis == fed)
    return IR_ROWS_RANK;
  IrValue whole = ir_whole(v), fed_whole = ir_whole(in);   // gathered: the replica's sample
  return sym_eq(whole.shape[0], fed_whole.shape[0]) ? IR_ROWS_REPLICA : IR_ROWS_NONE;
}

void ir_mark_batch_dims(IrGraph *g) {
  g->batch_sym = g->seq_sym = -1;
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if (v->role != ROLE_INPUT)
      continue;
    g->batch_sym = v->rank >= 1 ? ir_lone_symbol(v->shape[0]) : -1;
    g->seq_sym = v->rank >= 2 && v->dtype == DT_I32 ? ir_lone_symbol(v->shape[1]) : -1;
    return;
  }
}
