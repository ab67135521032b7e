// The graph, its builder and diagnostics.
#include "ir.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

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
  return a == IR_MESH_DP ? "dp" : a == IR_MESH_TP ? "tp" : "-";
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

// Print line `line` of `path` and a caret under column `col`, when readable.
static void print_source_line(FILE *f, const char *path, int line, int col) {
  FILE *src = fopen(path, "r");
  if (!src)
    return;
  char buf[4096];
  int ln = 1;
  while (fgets(buf, sizeof buf, src)) {
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
  return g;
}

void ir_graph_free(IrGraph *g) {
  if (!g)
    return;
  free(g->values);
  free(g->nodes);
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

IrValue *ir_value_find(const IrGraph *g, const char *name) {
  for (int i = 0; i < g->nvalues; i++)
    if (strcmp(g->values[i]->name, name) == 0)
      return g->values[i];
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
  v->offset = -1;
  push((void ***)&g->values, &g->nvalues, &g->capvalues, v);
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
  n->loc = g->cur_loc;
  IrRole role = g->cur_phase == PHASE_FORWARD ? ROLE_ACT : ROLE_GRAD;
  for (int i = 0; i < nout; i++) {
    n->out[i] = ir_value_new(g, NULL, DT_F32, role);
    n->out[i]->producer = n;
  }
  push((void ***)&g->nodes, &g->nnodes, &g->capnodes, n);
  return n;
}

// ---- attributes -----------------------------------------------------------------

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

const IrAttr *ir_attr(const IrNode *n, const char *name) {
  for (int i = 0; i < n->nattr; i++)
    if (strcmp(n->attr[i].name, name) == 0)
      return &n->attr[i];
  return NULL;
}

int64_t ir_attr_int(const IrNode *n, const char *name, int64_t dflt) {
  const IrAttr *a = ir_attr(n, name);
  if (!a)
    return dflt;
  return a->kind == ATTR_FLOAT ? (int64_t)a->f : a->i;
}

double ir_attr_float(const IrNode *n, const char *name, double dflt) {
  const IrAttr *a = ir_attr(n, name);
  if (!a)
    return dflt;
  return a->kind == ATTR_INT ? (double)a->i : a->f;
}

void ir_set_syms(IrGraph *g, IrNode *n, const char *name, const Sym *const *v, int count) {
  IrAttr *a = attr_slot(g, n, name);
  a->kind = ATTR_SYMS;
  a->n = count;
  a->syms = ir_alloc(&g->arena, (size_t)(count + 1) * sizeof *a->syms);
  for (int i = 0; i < count; i++)
    a->syms[i] = v[i];
}

const Sym *ir_attr_sym(IrGraph *g, const IrNode *n, const char *name, int i) {
  const IrAttr *a = ir_attr(n, name);
  if (!a || i < 0 || i >= a->n)
    return NULL;
  if (a->kind == ATTR_SYMS)
    return a->syms[i];
  if (a->kind == ATTR_INTS)
    return sym_const(&g->arena, a->ints[i]);
  return NULL;
}

void ir_value_rename(IrGraph *g, IrValue *v, const char *name) {
  v->name = ""; // so the old name does not count as taken
  v->name = unique_name(g, name);
}
