// The DSL's evaluator: walks the tree that dsl.y built and builds the
// forward graph with the IR's builder (ir_input, ir_param, ir_node_new,
// ir_infer).
//
// Evaluation is a straight walk over the top-level statements in order:
//
//   dim      makes a symbol bound to its value (a -D define wins), or, for a
//            formula over earlier dims, an alias for that formula;
//   input    an input value; param a parameter value;
//   let/=    binds names to what an expression gives;
//   loss     sets g->loss.
//
// Expressions give tensors (IR values), numbers (doubles; a dim used in an
// expression is its value) or, from split, a tuple of tensors. Shapes are
// written as dim formulas, kept symbolic in the IR (`[B, T, 3*C]`).
//
// A block is a function that is instantiated at every call: its statements
// run again with fresh parameters named `<prefix>.<i>.<name>` (prefix: the
// `as` name of a repeat, else the block's name; i counts instances of that
// prefix). Every node made inside an outermost block instance gets that
// instance's number in node->block (1, 2, ...; 0 outside blocks). A block
// called from inside another block belongs to the outer instance: its nodes
// get the outer block number and its params are named under the outer
// prefix (`h.0.attn.0.w`), because the outermost repeated unit is what the
// planner treats as one block.
//
// Errors stop at the first one and point at the offending token.
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl_ast.h"
#include "frontend.h"

#define MAX_REPEAT 1024          // largest repeat count
#define MAX_INSTANCES 16384      // block instances in one model, nested ones too
#define MAX_VALUES 100000        // values (tensors) in one model
#define MAX_CALL_DEPTH 64        // blocks calling blocks
#define MAX_LIST 64              // elements of a list argument, tensors of concat
#define MAX_SYM (1 << 30)        // largest coefficient in a dim formula, largest dim
#define MAX_NUMEL 1099511627776.0 // 2^40: largest tensor, in elements

// ---- values ------------------------------------------------------------------

typedef enum ValKind {
  V_TENSOR, // an IR value
  V_NUM,    // a number
  V_TUPLE,  // the outputs of split
} ValKind;

typedef struct Val {
  ValKind kind;
  IrValue *t;      // V_TENSOR
  double num;      // V_NUM
  IrValue **ts;    // V_TUPLE
  int n;           // V_TUPLE
} Val;

// A name bound in a scope.
typedef struct Binding Binding;
struct Binding {
  Binding *next;
  const char *name;
  Val val;
  Node *decl;      // where it was defined
};

// A dim: a symbol (a plain `dim B = 4`) or an alias for a formula.
typedef struct Dim Dim;
struct Dim {
  Dim *next;
  const char *name;
  const Sym *sym;       // sym_var of the symbol, or the formula
};

// A block definition and whether an instance of it is running.
typedef struct BlockDef BlockDef;
struct BlockDef {
  BlockDef *next;
  Node *def;
  int nparams;
  bool active;
};

// How many instances a parameter prefix ("h", "h.0.attn") has had.
typedef struct Counter Counter;
struct Counter {
  Counter *next;
  const char *prefix;
  int n;
};

typedef struct Eval {
  Parser *ps;
  IrGraph *g;
  IrArena *tmp;            // the tree's arena: scratch that dies with it
  const FeDefine *defs;
  int ndefs;
  Dim *dims;
  BlockDef *blocks;
  Counter *counters;
  Binding *globals;        // the top-level scope
  Binding *scope;          // the innermost scope (globals at the top level)
  bool in_block;
  const char *path;        // parameter prefix of the running instance ("h.0")
  int call_depth;
  int ninstances;          // outermost block instances so far
  int ncalls;              // all block instances so far
  int ndropouts;           // dropouts so far: each one's key
  uint64_t seed;           // the dropouts' seed (--seed)
  const char *gfile;       // the file name, in the graph's arena
  Val ret;                 // what the running block returned
  Node *loss;              // the loss statement
  Node *model;             // the model statement
} Eval;

// Keeps the first error only.
static int vfail(Parser *ps, int line, int col, const char *fmt, va_list ap) {
  if (ps->failed)
    return -1;
  ps->failed = true;
  vsnprintf(ps->diag->msg, sizeof ps->diag->msg, fmt, ap);
  ps->diag->loc = (IrLoc){ps->file, line, col};
  return -1;
}

// An error at node at (at its operator for a binary op; NULL: line 1,
// column 1); returns -1.
static int fail(Eval *e, const Node *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(Eval *e, const Node *at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(e->ps, at ? at->line : 1, at ? at->col : 1, fmt, ap);
  va_end(ap);
  return -1;
}

// An error about the value of the whole expression n: at its first token.
static int fail_expr(Eval *e, const Node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail_expr(Eval *e, const Node *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(e->ps, n->sline, n->scol, fmt, ap);
  va_end(ap);
  return -1;
}

int dsl_fail(Parser *ps, int line, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(ps, line, col, fmt, ap);
  va_end(ap);
  return -1;
}

// printf into the scratch arena.
static const char *fmt(Eval *e, const char *f, ...) __attribute__((format(printf, 2, 3)));

static const char *fmt(Eval *e, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  int n = vsnprintf(NULL, 0, f, ap);
  va_end(ap);
  char *s = ir_alloc(e->tmp, (size_t)n + 1);
  va_start(ap, f);
  vsnprintf(s, (size_t)n + 1, f, ap);
  va_end(ap);
  return s;
}

static const char *sym_text(Eval *e, const Sym *s) {
  return sym_str(e->tmp, s, &e->g->syms);
}

// "f32[B,T,C] 'x'" for messages; "f32[B,T,C] (from matmul)" for a value
// that has no name yet.
static const char *describe(Eval *e, const IrValue *v) {
  bool numbered = true;
  for (const char *p = v->name; *p; p++)
    numbered &= *p >= '0' && *p <= '9';
  if (numbered && v->producer)
    return fmt(e, "%s%s (from %s)", ir_dtype_name(v->dtype), ir_shape_str(e->g, v),
               ir_op_name(v->producer->op));
  return fmt(e, "%s%s '%s'", ir_dtype_name(v->dtype), ir_shape_str(e->g, v), v->name);
}

// "[B,T,3*C]" for messages.
static const char *shape_text(Eval *e, int rank, const Sym *const *shape) {
  const char *s = "[";
  for (int i = 0; i < rank; i++)
    s = fmt(e, "%s%s%s", s, i ? "," : "", sym_text(e, shape[i]));
  return fmt(e, "%s]", s);
}

static const char *kind_name(const Val *v) {
  switch (v->kind) {
  case V_TENSOR: return "a tensor";
  case V_NUM: return "a number";
  case V_TUPLE: return "several values (from split)";
  }
  return "?";
}

// ---- scopes --------------------------------------------------------------------

static Binding *lookup_in(Binding *b, const char *name) {
  for (; b; b = b->next)
    if (strcmp(b->name, name) == 0)
      return b;
  return NULL;
}

static Dim *find_dim(Eval *e, const char *name) {
  for (Dim *d = e->dims; d; d = d->next)
    if (strcmp(d->name, name) == 0)
      return d;
  return NULL;
}

static BlockDef *find_block(Eval *e, const char *name) {
  for (BlockDef *b = e->blocks; b; b = b->next)
    if (strcmp(b->def->name, name) == 0)
      return b;
  return NULL;
}

// Binds name in the current scope (a new binding shadows an old one).
static void bind(Eval *e, const char *name, Val val, Node *decl) {
  Binding *b = ir_alloc(e->tmp, sizeof(Binding));
  b->name = name;
  b->val = val;
  b->decl = decl;
  b->next = e->scope;
  e->scope = b;
  if (!e->in_block)
    e->globals = e->scope;
}

// "B, T, C" (the dims defined so far, in order), for messages.
static const char *dim_list(Eval *e) {
  const char *names[SYM_MAXVARS * 4];
  int n = 0;
  for (Dim *d = e->dims; d && n < SYM_MAXVARS * 4; d = d->next)
    names[n++] = d->name;
  if (n == 0)
    return "none";
  const char *s = "";
  for (int i = n - 1; i >= 0; i--)
    s = fmt(e, "%s%s%s", s, i == n - 1 ? "" : ", ", names[i]);
  return s;
}

// ---- dim formulas ----------------------------------------------------------------

// ir/sym.c stops the compiler when a coefficient overflows int64, so the
// formulas made here are kept far from that. A formula written over a common
// denominator is P / den, P with integer coefficients; its size is
// (sum of |P's coefficients|, den). An operation's result has at most the size
// computed by bound_op, and every coefficient of it, reduced, is at most that.
typedef struct Size {
  double num, den;
} Size;

static Size size_of(const Sym *s) {
  Size z = {0, 1};
  for (int k = 0; k < s->n; k++)
    z.den *= (double)s->t[k].den;
  for (int k = 0; k < s->n; k++)
    z.num += fabs((double)s->t[k].num) * (z.den / (double)s->t[k].den);
  return z;
}

static bool size_ok(Size z, double limit) {
  return z.num <= limit && z.den <= limit;
}

// The largest power of a dim in s.
static int max_power(const Sym *s) {
  int p = 0;
  for (int k = 0; k < s->n; k++)
    for (int v = 0; v < SYM_MAXVARS; v++)
      if (abs(s->t[k].exp[v]) > p)
        p = abs(s->t[k].exp[v]);
  return p;
}

// The size of x op y (op: ND_ADD, ND_SUB, ND_MUL or ND_DIV).
static Size bound_op(NodeKind op, const Sym *x, const Sym *y) {
  Size a = size_of(x), b = size_of(y);
  if (op == ND_ADD || op == ND_SUB)
    return (Size){a.num * b.den + b.num * a.den, a.den * b.den};
  if (op == ND_MUL)
    return (Size){a.num * b.num, a.den * b.den};
  return (Size){a.num * b.den, a.den * b.num};  // by a single term
}

// The invariant of every dim formula: small coefficients and powers, few terms.
static int check_sym(Eval *e, Node *at, const Sym *s) {
  if (s->n > 8)
    return fail_expr(e, at, "dim formula too long (more than 8 terms)");
  if (!size_ok(size_of(s), MAX_SYM))
    return fail_expr(e, at, "dim formula has too large numbers (at most %d)", MAX_SYM);
  if (max_power(s) > 8)
    return fail_expr(e, at, "dim formula has too high a power (at most 8)");
  return 0;
}

// dim = integer | dim-name | dim ("+" | "-" | "*" | "/") dim | "-" dim | "(" dim ")"
static int eval_dim(Eval *e, Node *n, const Sym **out) {
  IrArena *a = &e->g->arena;
  const Sym *x, *y;
  switch (n->kind) {
  case ND_NUM:
    if (!n->is_int)
      return fail(e, n, "a dim must be an integer, not %g", n->num);
    if (n->ival > MAX_SYM)
      return fail(e, n, "dim value %lld is too large (at most %d)", (long long)n->ival, MAX_SYM);
    *out = sym_const(a, n->ival);
    return 0;
  case ND_NAME: {
    Dim *d = find_dim(e, n->name);
    if (d) {
      *out = d->sym;
      return 0;
    }
    Binding *b = lookup_in(e->scope, n->name);
    if (b && b->val.kind == V_NUM)
      return fail(e, n, "'%s' is a number, not a dim (make it a dim: 'dim %s = ...')", n->name,
                  n->name);
    if (b)
      return fail(e, n, "'%s' is a tensor, not a dim (a shape is written with dims: [B, T, C])",
                  n->name);
    return fail(e, n, "unknown dim '%s' (dims: %s)", n->name, dim_list(e));
  }
  case ND_ADD:
  case ND_SUB:
  case ND_MUL:
  case ND_DIV:
    if (eval_dim(e, n->lhs, &x) < 0 || eval_dim(e, n->rhs, &y) < 0)
      return -1;
    if (n->kind == ND_DIV && y->n > 1)
      return fail_expr(e, n->rhs,
                       "cannot divide by '%s': a dim can only be divided by a single term "
                       "(like NH, 2*C or C*NH)",
                       sym_text(e, y));
    if (n->kind == ND_DIV && sym_is_zero(y))
      return fail(e, n, "division by zero in a dim formula");
    if (!size_ok(bound_op(n->kind, x, y), 1e18))
      return fail_expr(e, n, "dim formula has too large numbers");
    if (n->kind == ND_ADD)
      *out = sym_add(a, x, y);
    else if (n->kind == ND_SUB)
      *out = sym_sub(a, x, y);
    else if (n->kind == ND_MUL)
      *out = sym_mul(a, x, y);
    else
      *out = sym_div(a, x, y);
    return check_sym(e, n, *out);
  case ND_NEG:
    if (eval_dim(e, n->lhs, &x) < 0)
      return -1;
    *out = sym_scale(a, x, -1, 1);
    return 0;
  default:
    return fail(e, n,
                "expected a dim formula here (integers and dims with + - * / and parentheses)");
  }
}

// A formula without dims (a number)?
static bool all_const(const Sym *s) {
  for (int k = 0; k < s->n; k++)
    for (int v = 0; v < SYM_MAXVARS; v++)
      if (s->t[k].exp[v])
        return false;
  return true;
}

// The value of a dim formula, which must be a positive integer; what names
// the formula in messages.
static int dim_value(Eval *e, Node *at, const Sym *s, const char *what, int64_t *out) {
  int64_t v;
  int rc = sym_eval(s, &e->g->syms, &v);
  double f = sym_evalf(s, &e->g->syms);
  if (rc == -3)
    return fail_expr(e, at, "%s '%s' is too large (it overflows int64)%s", what, sym_text(e, s),
                     ir_bindings_text(e->g, s));
  if (rc == -1)
    return fail_expr(e, at, "%s '%s' uses a dim without a value", what, sym_text(e, s));
  if ((f < 1 || f != floor(f)) && s->n <= 1 && all_const(s))
    return fail_expr(e, at, "%s %s: it must be a positive integer", what, sym_text(e, s));
  if (f < 1 || f != floor(f))
    return fail_expr(e, at, "%s '%s' is %g%s; it must be a positive integer", what,
                     sym_text(e, s), f, ir_bindings_text(e->g, s));
  if (f > 1e15)
    return fail_expr(e, at, "%s '%s' is too large (%g)", what, sym_text(e, s), f);
  if (rc != 0)
    return fail_expr(e, at, "%s '%s' is %g; it must be an integer", what, sym_text(e, s), f);
  *out = v;
  return 0;
}

// A dim formula for a shape or a size: a positive integer under the bindings.
static int eval_size(Eval *e, Node *n, const char *what, const Sym **out, int64_t *value) {
  int64_t v;
  if (eval_dim(e, n, out) < 0 || dim_value(e, n, *out, what, &v) < 0)
    return -1;
  if (value)
    *value = v;
  return 0;
}

// ---- graph building ------------------------------------------------------------------

// Keeps every tensor far from the int64 limits of the formulas that later
// passes build from its shape (elements, bytes, FLOPs): the size of the
// product of its dims, their powers and its element count stay small.
static int check_shape(Eval *e, Node *at, int rank, const Sym *const *shape) {
  Size z = {1, 1};
  double numel = 1;
  int power = 0;
  for (int i = 0; i < rank; i++) {
    Size d = size_of(shape[i]);
    z.num *= d.num;
    z.den *= d.den;
    power += max_power(shape[i]);
    numel *= sym_evalf(shape[i], &e->g->syms);
  }
  if (!(numel <= MAX_NUMEL))
    return fail_expr(e, at, "a tensor of %g elements is too large (at most 2^40)", numel);
  if (!size_ok(z, MAX_NUMEL) || power > 32)
    return fail_expr(e, at, "shape %s is too complex to plan (its dims have large "
                     "coefficients or powers)", shape_text(e, rank, shape));
  return 0;
}

// The shape rules of split and concat add dims up: keep the sum small too.
static int check_sum(Eval *e, Node *at, const Sym *const *dims, int n) {
  Size z = {0, 1};
  for (int i = 0; i < n; i++) {
    Size d = size_of(dims[i]);
    z = (Size){z.num * d.den + d.num * z.den, z.den * d.den};
  }
  if (!size_ok(z, MAX_NUMEL))
    return fail_expr(e, at, "the sizes add up to a formula with too large numbers");
  return 0;
}

static int check_value(Eval *e, Node *at, IrValue *v) {
  return check_shape(e, at, v->rank, v->shape);
}

// A new node of op made by the expression at; its location is at's.
static IrNode *new_node(Eval *e, Node *at, IrOp op, IrValue *const *in, int nin, int nout) {
  e->g->cur_loc = (IrLoc){e->gfile, at->line, at->col};
  return ir_node_new(e->g, op, in, nin, nout);
}

// Runs the node's shape rule; its diagnostic becomes the first error.
static int infer(Eval *e, Node *at, IrNode *n) {
  IrDiag *d = e->ps->diag;
  if (ir_infer(e->g, n, d) < 0) {
    if (!e->ps->failed) {
      e->ps->failed = true;
      if (!d->msg[0])
        snprintf(d->msg, sizeof d->msg, "%s: shapes do not fit", ir_op_name(n->op));
    }
    return -1;
  }
  if (e->g->nvalues > MAX_VALUES)
    return fail(e, at, "the model is too large (more than %d tensors)", MAX_VALUES);
  for (int i = 0; i < n->nout; i++)
    if (check_value(e, at, n->out[i]) < 0)
      return -1;
  return 0;
}

// s * x + b
static int scale(Eval *e, Node *at, IrValue *x, double s, double b, Val *out) {
  IrNode *n = new_node(e, at, OP_SCALE, &x, 1, 1);
  ir_set_float(e->g, n, "s", s);
  ir_set_float(e->g, n, "b", b);
  if (infer(e, at, n) < 0)
    return -1;
  *out = (Val){.kind = V_TENSOR, .t = n->out[0]};
  return 0;
}

// ---- expressions ---------------------------------------------------------------------

static int eval(Eval *e, Node *n, Val *out);

// An expression that must give a tensor; what names its role in messages.
static int eval_tensor(Eval *e, Node *n, const char *what, IrValue **out) {
  Val v;
  *out = NULL;
  if (eval(e, n, &v) < 0)
    return -1;
  if (v.kind != V_TENSOR)
    return fail_expr(e, n, "%s must be a tensor, not %s", what, kind_name(&v));
  *out = v.t;
  return 0;
}

static int need_f32(Eval *e, Node *at, const char *what, IrValue *v) {
  if (v->dtype != DT_F32)
    return fail_expr(e, at, "%s must be an f32 tensor, got %s (i32 tensors are indices: use them "
                "in embedding or cross_entropy)", what, describe(e, v));
  return 0;
}

// An expression that must give a number.
static int eval_num(Eval *e, Node *n, const char *what, double *out) {
  Val v;
  *out = 0;
  if (eval(e, n, &v) < 0)
    return -1;
  if (v.kind != V_NUM)
    return fail_expr(e, n, "%s must be a number, not %s", what, kind_name(&v));
  *out = v.num;
  return 0;
}

// An integer-valued number in [lo, hi].
static int eval_int(Eval *e, Node *n, const char *what, int64_t lo, int64_t hi, int64_t *out) {
  double f = 0;
  if (eval_num(e, n, what, &f) < 0)
    return -1;
  if (f != floor(f) || f < (double)lo || f > (double)hi)
    return fail_expr(e, n, "%s must be an integer in [%lld, %lld], got %g", what, (long long)lo,
                (long long)hi, f);
  *out = (int64_t)f;
  return 0;
}

// Normalizes a possibly negative axis for a tensor of rank `rank`.
static int norm_axis(Eval *e, Node *at, int64_t axis, IrValue *x, int64_t *out) {
  int rank = x->rank;
  if (axis < -rank || axis >= rank)
    return fail(e, at, "axis %lld is out of range for %s (rank %d: axes %d..%d)",
                (long long)axis, describe(e, x), rank, -rank, rank - 1);
  *out = axis < 0 ? axis + rank : axis;
  return 0;
}

// lhs op rhs for + - * / between tensors and numbers.
static int arith(Eval *e, Node *n, Val *out) {
  static const char opch[] = {[ND_ADD] = '+', [ND_SUB] = '-', [ND_MUL] = '*', [ND_DIV] = '/'};
  char op = opch[n->kind];
  Val a, b;
  if (eval(e, n->lhs, &a) < 0 || eval(e, n->rhs, &b) < 0)
    return -1;
  if (a.kind == V_TUPLE || b.kind == V_TUPLE)
    return fail_expr(e, a.kind == V_TUPLE ? n->lhs : n->rhs,
                "'%c' needs tensors or numbers, not several values (bind split's results with "
                "'let a, b = split(...)')", op);

  // number op number: folded
  if (a.kind == V_NUM && b.kind == V_NUM) {
    double r;
    switch (n->kind) {
    case ND_ADD: r = a.num + b.num; break;
    case ND_SUB: r = a.num - b.num; break;
    case ND_MUL: r = a.num * b.num; break;
    default:
      if (b.num == 0)
        return fail(e, n, "division by zero");
      r = a.num / b.num;
    }
    if (!isfinite(r))
      return fail(e, n, "number out of range (%g %c %g)", a.num, op, b.num);
    *out = (Val){.kind = V_NUM, .num = r};
    return 0;
  }

  // tensor op tensor: an elementwise node (numpy broadcasting)
  if (a.kind == V_TENSOR && b.kind == V_TENSOR) {
    const char *what = fmt(e, "an operand of '%c'", op);
    if (need_f32(e, n->lhs, what, a.t) < 0 || need_f32(e, n->rhs, what, b.t) < 0)
      return -1;
    static const IrOp ops[] = {[ND_ADD] = OP_ADD, [ND_SUB] = OP_SUB, [ND_MUL] = OP_MUL,
                               [ND_DIV] = OP_DIV};
    IrValue *in[2] = {a.t, b.t};
    IrNode *node = new_node(e, n, ops[n->kind], in, 2, 1);
    if (infer(e, n, node) < 0)
      return -1;
    *out = (Val){.kind = V_TENSOR, .t = node->out[0]};
    return 0;
  }

  // tensor and number: a scale node s * x + b
  bool left = a.kind == V_TENSOR;
  IrValue *x = left ? a.t : b.t;
  double c = left ? b.num : a.num;
  if (need_f32(e, left ? n->lhs : n->rhs, fmt(e, "an operand of '%c'", op), x) < 0)
    return -1;
  switch (n->kind) {
  case ND_ADD: return scale(e, n, x, 1, c, out);
  case ND_SUB: return left ? scale(e, n, x, 1, -c, out) : scale(e, n, x, -1, c, out);
  case ND_MUL: return scale(e, n, x, c, 0, out);
  default:
    if (!left)
      return fail(e, n, "cannot divide a number by a tensor (only tensor / number and "
                  "tensor / tensor)");
    if (c == 0)
      return fail(e, n, "division by zero");
    return scale(e, n, x, 1 / c, 0, out);
  }
}

// ---- built-in functions ------------------------------------------------------------------

typedef enum ArgKind {
  ARG_F32,   // an f32 tensor
  ARG_I32,   // an i32 tensor (indices)
  ARG_ANY,   // a tensor of either dtype
  ARG_NUM,   // a number
  ARG_LIST,  // a list [a, b, ...]
} ArgKind;

typedef struct ArgSpec {
  const char *name;
  ArgKind kind;
  bool optional;
} ArgSpec;

#define MAX_ARGS 5

typedef struct Builtin {
  const char *name;
  IrOp op;                // OP_COUNT: computes a number (sqrt)
  bool variadic;          // concat: any number of leading tensors
  const char *usage;
  ArgSpec arg[MAX_ARGS];  // name NULL ends
} Builtin;

static const Builtin builtins[] = {
  {"matmul", OP_MATMUL, false, "matmul(a, b, ta=0, tb=0)",
   {{"a", ARG_F32, false}, {"b", ARG_F32, false}, {"ta", ARG_NUM, true}, {"tb", ARG_NUM, true}}},
  {"layernorm", OP_LAYERNORM, false, "layernorm(x, w, b, eps=1e-5)",
   {{"x", ARG_F32, false}, {"w", ARG_F32, false}, {"b", ARG_F32, false},
    {"eps", ARG_NUM, true}}},
  {"rmsnorm", OP_RMSNORM, false, "rmsnorm(x, w, eps=1e-6)",
   {{"x", ARG_F32, false}, {"w", ARG_F32, false}, {"eps", ARG_NUM, true}}},
  {"gelu", OP_GELU, false, "gelu(x)", {{"x", ARG_F32, false}}},
  {"silu", OP_SILU, false, "silu(x)", {{"x", ARG_F32, false}}},
  {"relu", OP_RELU, false, "relu(x)", {{"x", ARG_F32, false}}},
  {"sigmoid", OP_SIGMOID, false, "sigmoid(x)", {{"x", ARG_F32, false}}},
  {"tanh", OP_TANH, false, "tanh(x)", {{"x", ARG_F32, false}}},
  {"exp", OP_EXP, false, "exp(x)", {{"x", ARG_F32, false}}},
  {"log", OP_LOG, false, "log(x)", {{"x", ARG_F32, false}}},
  {"sin", OP_SIN, false, "sin(x)", {{"x", ARG_F32, false}}},
  {"cos", OP_COS, false, "cos(x)", {{"x", ARG_F32, false}}},
  {"abs", OP_ABS, false, "abs(x)", {{"x", ARG_F32, false}}},
  {"softmax", OP_SOFTMAX, false, "softmax(x, axis=-1, causal=0)",
   {{"x", ARG_F32, false}, {"axis", ARG_NUM, true}, {"causal", ARG_NUM, true}}},
  {"dropout", OP_DROPOUT, false, "dropout(x, p)", {{"x", ARG_F32, false}, {"p", ARG_NUM, false}}},
  {"attention", OP_ATTENTION, false, "attention(q, k, v, causal=1)",
   {{"q", ARG_F32, false}, {"k", ARG_F32, false}, {"v", ARG_F32, false},
    {"causal", ARG_NUM, true}}},
  {"rope", OP_ROPE, false, "rope(x, theta=10000)",
   {{"x", ARG_F32, false}, {"theta", ARG_NUM, true}}},
  {"embedding", OP_EMBEDDING, false, "embedding(w, idx)",
   {{"w", ARG_F32, false}, {"idx", ARG_I32, false}}},
  {"reshape", OP_RESHAPE, false, "reshape(x, [dims])",
   {{"x", ARG_ANY, false}, {"shape", ARG_LIST, false}}},
  {"expand", OP_BROADCAST, false, "expand(x, [dims])",
   {{"x", ARG_ANY, false}, {"shape", ARG_LIST, false}}},
  {"transpose", OP_TRANSPOSE, false, "transpose(x, [perm])",
   {{"x", ARG_ANY, false}, {"perm", ARG_LIST, false}}},
  {"split", OP_SPLIT, false, "split(x, axis=-1, sizes=[dims])",
   {{"x", ARG_ANY, false}, {"axis", ARG_NUM, true}, {"sizes", ARG_LIST, false}}},
  {"concat", OP_CONCAT, true, "concat(a, b, ..., axis=-1)", {{"axis", ARG_NUM, true}}},
  {"sum", OP_SUM, false, "sum(x, axes=[all], keepdims=0)",
   {{"x", ARG_F32, false}, {"axes", ARG_LIST, true}, {"keepdims", ARG_NUM, true}}},
  {"mean", OP_MEAN, false, "mean(x, axes=[all], keepdims=0)",
   {{"x", ARG_F32, false}, {"axes", ARG_LIST, true}, {"keepdims", ARG_NUM, true}}},
  {"cross_entropy", OP_CROSS_ENTROPY, false, "cross_entropy(logits, targets)",
   {{"logits", ARG_F32, false}, {"targets", ARG_I32, false}}},
  {"sqrt", OP_COUNT, false, "sqrt(number)", {{"x", ARG_NUM, false}}},
};

#define NBUILTINS ((int)(sizeof builtins / sizeof builtins[0]))

// Names that mean something only in declarations.
static const char *const decl_words[] = {"normal", "zeros", "ones", "tokens", "targets",
                                         "labels", "classes", "f32", "i32"};

static const Builtin *find_builtin(const char *name) {
  for (int i = 0; i < NBUILTINS; i++)
    if (strcmp(builtins[i].name, name) == 0)
      return &builtins[i];
  return NULL;
}

static bool is_decl_word(const char *name) {
  for (size_t i = 0; i < sizeof decl_words / sizeof decl_words[0]; i++)
    if (strcmp(decl_words[i], name) == 0)
      return true;
  return false;
}

// "matmul, layernorm, ..." and the blocks.
static const char *function_list(Eval *e) {
  const char *s = "";
  for (int i = 0; i < NBUILTINS; i++)
    s = fmt(e, "%s%s%s", s, i ? ", " : "", builtins[i].name);
  if (e->blocks) {
    const char *bl = "";
    for (BlockDef *b = e->blocks; b; b = b->next)
      bl = fmt(e, "%s%s%s", bl, b == e->blocks ? "" : ", ", b->def->name);
    s = fmt(e, "%s; blocks: %s", s, bl);
  }
  return s;
}

static int nspecs(const Builtin *b) {
  int n = 0;
  while (n < MAX_ARGS && b->arg[n].name)
    n++;
  return n;
}

// Matches the call's arguments to b's parameters: slot[i] is the expression
// for parameter i (NULL: not given). Variadic built-ins collect their
// positional arguments in var[0..*nvar).
static int bind_args(Eval *e, Node *call, const Builtin *b, Node **slot, Node **var, int *nvar) {
  int n = nspecs(b);
  int npos = 0;
  bool named_seen = false;
  *nvar = 0;
  for (int i = 0; i < n; i++)
    slot[i] = NULL;
  for (Node *a = call->args; a; a = a->next) {
    if (!a->name) {
      if (named_seen)
        return fail(e, a, "positional argument after a named one (usage: %s)", b->usage);
      if (b->variadic) {
        if (*nvar >= MAX_LIST)
          return fail(e, a, "%s takes at most %d tensors", b->name, MAX_LIST);
        var[(*nvar)++] = a->lhs;
        continue;
      }
      if (npos >= n) {
        int given = npos;
        for (Node *r = a; r; r = r->next)
          given += !r->name;
        int nreq = 0;
        while (nreq < n && !b->arg[nreq].optional)
          nreq++;
        return fail(e, a, "%s takes %s%d argument%s, got %d (usage: %s)", b->name,
                    nreq == n ? "" : "at most ", n, n == 1 ? "" : "s", given, b->usage);
      }
      slot[npos++] = a->lhs;
      continue;
    }
    named_seen = true;
    int i = 0;
    while (i < n && strcmp(b->arg[i].name, a->name) != 0)
      i++;
    if (i == n)
      return fail(e, a, "%s has no argument '%s' (usage: %s)", b->name, a->name, b->usage);
    if (slot[i])
      return fail(e, a, "argument '%s' of %s is given twice", a->name, b->name);
    slot[i] = a->lhs;
  }
  for (int i = 0; i < n; i++)
    if (!slot[i] && !b->arg[i].optional)
      return fail(e, call, "%s needs argument '%s' (usage: %s)", b->name, b->arg[i].name,
                  b->usage);
  if (b->variadic && *nvar == 0)
    return fail(e, call, "%s needs at least one tensor (usage: %s)", b->name, b->usage);
  return 0;
}

// Argument i of b as a tensor of the kind its spec says.
static int arg_tensor(Eval *e, const Builtin *b, int i, Node *x, IrValue **out) {
  const ArgSpec *s = &b->arg[i];
  const char *what = fmt(e, "%s: argument '%s'", b->name, s->name);
  if (eval_tensor(e, x, what, out) < 0)
    return -1;
  if (s->kind == ARG_F32)
    return need_f32(e, x, what, *out);
  if (s->kind == ARG_I32 && (*out)->dtype != DT_I32)
    return fail_expr(e, x, "%s must be an i32 tensor of indices, got %s", what,
                     describe(e, *out));
  return 0;
}

// An optional integer argument in [lo, hi].
static int arg_int(Eval *e, const Builtin *b, int i, Node *x, int64_t dflt, int64_t lo,
                   int64_t hi, int64_t *out) {
  *out = dflt;
  if (!x)
    return 0;
  return eval_int(e, x, fmt(e, "%s: argument '%s'", b->name, b->arg[i].name), lo, hi, out);
}

// A list argument: its elements.
static int arg_list(Eval *e, const Builtin *b, int i, Node *x, Node **elem, int *n) {
  if (x->kind != ND_LIST)
    return fail(e, x, "%s: argument '%s' must be a list like [a, b] (usage: %s)", b->name,
                b->arg[i].name, b->usage);
  *n = 0;
  for (Node *el = x->args; el; el = el->next) {
    if (*n >= MAX_LIST)
      return fail(e, el, "list too long (at most %d elements)", MAX_LIST);
    elem[(*n)++] = el;
  }
  return 0;
}

// A list of integers, e.g. a permutation or axes.
static int arg_ints(Eval *e, const Builtin *b, int i, Node *x, int64_t *v, int *n) {
  Node *elem[MAX_LIST];
  if (arg_list(e, b, i, x, elem, n) < 0)
    return -1;
  for (int k = 0; k < *n; k++)
    if (eval_int(e, elem[k], fmt(e, "an element of '%s'", b->arg[i].name), -IR_MAXRANK,
                 IR_MAXRANK, &v[k]) < 0)
      return -1;
  return 0;
}

// Axes for sum/mean/transpose: normalized and distinct.
static int norm_axes(Eval *e, const char *f, Node *at, IrValue *x, int64_t *v, int n) {
  for (int k = 0; k < n; k++) {
    if (norm_axis(e, at, v[k], x, &v[k]) < 0)
      return -1;
    for (int j = 0; j < k; j++)
      if (v[j] == v[k])
        return fail(e, at, "%s: axis %lld is listed twice", f, (long long)v[k]);
  }
  return 0;
}

// The dropout masks' step counter, its tick the graph's first node (outside every block):
// ticked once a forward, before every dropout.
static IrValue *dropout_step(Eval *e) {
  IrGraph *g = e->g;
  int block = g->cur_block, at = g->insert_at;
  g->cur_block = 0, g->insert_at = 0;
  IrValue *v = ir_dropout_step(g, e->ps->diag);
  g->cur_block = block, g->insert_at = at;
  if (!v)
    e->ps->failed = true;
  return v;
}

static int call_builtin(Eval *e, Node *call, const Builtin *b, Val *out) {
  Node *slot[MAX_ARGS], *var[MAX_LIST];
  int nvar;
  if (bind_args(e, call, b, slot, var, &nvar) < 0)
    return -1;

  // sqrt works on numbers
  if (b->op == OP_COUNT) {
    double x;
    if (eval_num(e, slot[0], "sqrt: argument 'x'", &x) < 0)
      return -1;
    if (x < 0)
      return fail_expr(e, slot[0], "sqrt of a negative number (%g)", x);
    *out = (Val){.kind = V_NUM, .num = sqrt(x)};
    return 0;
  }

  // The tensor arguments, left to right.
  IrValue *in[MAX_LIST];
  int nin = 0;
  if (b->variadic) {
    for (int k = 0; k < nvar; k++) {
      if (eval_tensor(e, var[k], fmt(e, "%s: argument %d", b->name, k + 1), &in[nin]) < 0)
        return -1;
      nin++;
    }
  } else {
    for (int i = 0; i < nspecs(b); i++) {
      ArgKind k = b->arg[i].kind;
      if (k == ARG_F32 || k == ARG_I32 || k == ARG_ANY) {
        if (arg_tensor(e, b, i, slot[i], &in[nin]) < 0)
          return -1;
        nin++;
      }
    }
  }
  IrValue *x = in[0];
  IrGraph *g = e->g;
  IrNode *n;
  int64_t v, ints[MAX_LIST];
  int count;

  switch (b->op) {
  case OP_MATMUL: {
    int64_t ta, tb;
    if (arg_int(e, b, 2, slot[2], 0, 0, 1, &ta) < 0 || arg_int(e, b, 3, slot[3], 0, 0, 1, &tb) < 0)
      return -1;
    n = new_node(e, call, OP_MATMUL, in, 2, 1);
    if (ta)
      ir_set_int(g, n, "ta", 1);
    if (tb)
      ir_set_int(g, n, "tb", 1);
    break;
  }
  case OP_LAYERNORM:
  case OP_RMSNORM: {
    int at = b->op == OP_LAYERNORM ? 3 : 2; // the eps argument
    double eps = b->op == OP_LAYERNORM ? 1e-5 : 1e-6;
    if (slot[at] && eval_num(e, slot[at], fmt(e, "%s: argument 'eps'", b->name), &eps) < 0)
      return -1;
    if (!(eps > 0 && eps < 1))
      return fail(e, slot[at], "%s: eps must be in (0, 1), got %g", b->name, eps);
    n = new_node(e, call, b->op, in, at, 1);
    ir_set_float(g, n, "eps", eps);
    break;
  }
  case OP_ROPE: {
    double theta = 10000;
    if (slot[1] && eval_num(e, slot[1], "rope: argument 'theta'", &theta) < 0)
      return -1;
    if (!(theta >= 1 && theta <= 1e30))
      return fail(e, slot[1], "rope: theta must be in [1, 1e30], got %g", theta);
    n = new_node(e, call, OP_ROPE, in, 1, 1);
    ir_set_float(g, n, "theta", theta);
    break;
  }
  case OP_SOFTMAX:
    if (arg_int(e, b, 1, slot[1], -1, -IR_MAXRANK, IR_MAXRANK, &v) < 0 ||
        norm_axis(e, slot[1] ? slot[1] : call, v, x, &v) < 0)
      return -1;
    if (v != x->rank - 1)
      return fail(e, slot[1], "softmax works over the last axis only (axis=-1); transpose "
                  "the tensor first");
    if (arg_int(e, b, 2, slot[2], 0, 0, 1, &v) < 0)
      return -1;
    n = new_node(e, call, OP_SOFTMAX, in, 1, 1);
    if (v)
      ir_set_int(g, n, "causal", 1);
    break;
  case OP_DROPOUT: {
    double p;
    if (eval_num(e, slot[1], "dropout: argument 'p'", &p) < 0)
      return -1;
    if (!(p >= 0 && p <= 0.999))
      return fail_expr(e, slot[1], "dropout: p must be in [0, 0.999], got %g", p);
    if (p == 0) {  // keeps every element
      *out = (Val){.kind = V_TENSOR, .t = x};
      return 0;
    }
    if (!(in[1] = dropout_step(e)))
      return -1;
    n = new_node(e, call, OP_DROPOUT, in, 2, 1);
    ir_set_dropout(g, n, p, e->seed, ++e->ndropouts);
    break;
  }
  case OP_ATTENTION:
    if (arg_int(e, b, 3, slot[3], 1, 0, 1, &v) < 0)
      return -1;
    n = new_node(e, call, OP_ATTENTION, in, 3, 2);
    ir_set_int(g, n, "causal", v);
    break;
  case OP_RESHAPE:
  case OP_BROADCAST: { // expand: x numpy-broadcast to the shape
    Node *elem[MAX_LIST];
    const Sym *shape[IR_MAXRANK];
    if (arg_list(e, b, 1, slot[1], elem, &count) < 0)
      return -1;
    if (count > IR_MAXRANK)
      return fail(e, slot[1], "%s: at most %d dims, got %d", b->name, IR_MAXRANK, count);
    for (int k = 0; k < count; k++)
      if (eval_size(e, elem[k], fmt(e, "%s dim", b->name), &shape[k], NULL) < 0)
        return -1;
    if (check_shape(e, slot[1], count, shape) < 0)
      return -1;
    n = new_node(e, call, b->op, in, 1, 1);
    ir_value_set_shape(n->out[0], count, shape);
    n->out[0]->dtype = x->dtype;
    break;
  }
  case OP_TRANSPOSE:
    if (arg_ints(e, b, 1, slot[1], ints, &count) < 0)
      return -1;
    if (count != x->rank)
      return fail(e, slot[1], "transpose: the permutation has %d entries but %s has rank %d",
                  count, describe(e, x), x->rank);
    if (norm_axes(e, b->name, slot[1], x, ints, count) < 0)
      return -1;
    n = new_node(e, call, OP_TRANSPOSE, in, 1, 1);
    ir_set_ints(g, n, "perm", ints, count);
    break;
  case OP_SPLIT: {
    Node *elem[MAX_LIST];
    const Sym *sizes[MAX_LIST];
    if (arg_int(e, b, 1, slot[1], -1, -IR_MAXRANK, IR_MAXRANK, &v) < 0 ||
        norm_axis(e, slot[1] ? slot[1] : call, v, x, &v) < 0 ||
        arg_list(e, b, 2, slot[2], elem, &count) < 0)
      return -1;
    if (count == 0)
      return fail(e, slot[2], "split: sizes must list at least one size");
    for (int k = 0; k < count; k++)
      if (eval_size(e, elem[k], "split size", &sizes[k], NULL) < 0)
        return -1;
    if (check_sum(e, slot[2], sizes, count) < 0)
      return -1;
    // The sizes stay formulas, so the outputs keep symbolic shapes.
    n = new_node(e, call, OP_SPLIT, in, 1, count);
    ir_set_int(g, n, "axis", v);
    ir_set_syms(g, n, "sizes", sizes, count);
    if (infer(e, call, n) < 0)
      return -1;
    IrValue **ts = ir_alloc(e->tmp, sizeof(IrValue *) * (size_t)count);
    for (int k = 0; k < count; k++)
      ts[k] = n->out[k];
    *out = (Val){.kind = V_TUPLE, .ts = ts, .n = count};
    return 0;
  }
  case OP_CONCAT: {
    const Sym *dims[MAX_LIST];
    if (arg_int(e, b, 0, slot[0], -1, -IR_MAXRANK, IR_MAXRANK, &v) < 0 ||
        norm_axis(e, slot[0] ? slot[0] : call, v, x, &v) < 0)
      return -1;
    for (int k = 0; k < nin; k++)
      dims[k] = in[k]->rank > v ? in[k]->shape[v] : in[0]->shape[v];
    if (check_sum(e, call, dims, nin) < 0)
      return -1;
    n = new_node(e, call, OP_CONCAT, in, nin, 1);
    ir_set_int(g, n, "axis", v);
    break;
  }
  case OP_SUM:
  case OP_MEAN: {
    int64_t keep;
    if (slot[1]) {
      if (arg_ints(e, b, 1, slot[1], ints, &count) < 0 ||
          norm_axes(e, b->name, slot[1], x, ints, count) < 0)
        return -1;
    } else {
      count = x->rank;
      for (int k = 0; k < count; k++)
        ints[k] = k;
    }
    if (arg_int(e, b, 2, slot[2], 0, 0, 1, &keep) < 0)
      return -1;
    n = new_node(e, call, b->op, in, 1, 1);
    ir_set_ints(g, n, "axes", ints, count);
    ir_set_int(g, n, "keepdims", keep);
    break;
  }
  default: // gelu, relu, embedding, cross_entropy: tensors only
    n = new_node(e, call, b->op, in, nin, 1);
    break;
  }
  if (infer(e, call, n) < 0)
    return -1;
  *out = (Val){.kind = V_TENSOR, .t = n->out[0]};
  return 0;
}

// ---- blocks ------------------------------------------------------------------------------

static int exec(Eval *e, Node *s);

// The next instance number of prefix (counted from 0).
static int next_instance(Eval *e, const char *prefix) {
  for (Counter *c = e->counters; c; c = c->next)
    if (strcmp(c->prefix, prefix) == 0)
      return c->n++;
  Counter *c = ir_alloc(e->tmp, sizeof(Counter));
  c->prefix = prefix;
  c->n = 1;
  c->next = e->counters;
  e->counters = c;
  return 0;
}

// Runs one instance of block b on args; site is the call (or repeat).
static int instantiate(Eval *e, BlockDef *b, const char *prefix, Val *args, Node *site,
                       Val *out) {
  if (b->active)
    return fail(e, site, "block '%s' calls itself; recursion is not allowed", b->def->name);
  if (e->call_depth >= MAX_CALL_DEPTH)
    return fail(e, site, "blocks nested too deeply (more than %d levels)", MAX_CALL_DEPTH);

  const char *full = e->path ? fmt(e, "%s.%s", e->path, prefix) : prefix;
  int index = next_instance(e, full);

  // Save the caller's state.
  Binding *scope = e->scope;
  bool in_block = e->in_block;
  const char *path = e->path;
  int block = e->g->cur_block;

  if (++e->ncalls > MAX_INSTANCES)
    return fail(e, site, "too many block instances (more than %d)", MAX_INSTANCES);
  if (!in_block)
    e->g->cur_block = ++e->ninstances;
  e->in_block = true;
  e->path = fmt(e, "%s.%d", full, index);
  e->scope = NULL;
  e->call_depth++;
  b->active = true;
  int i = 0;
  for (Node *p = b->def->names; p; p = p->next)
    bind(e, p->name, args[i++], p);

  int rc = 0;
  for (Node *s = b->def->body; s && rc == 0; s = s->next)
    rc = exec(e, s);

  b->active = false;
  e->call_depth--;
  e->scope = scope;
  e->in_block = in_block;
  e->path = path;
  e->g->cur_block = block;
  if (rc < 0)
    return -1;
  *out = e->ret;
  return 0;
}

// name(args) for a block: positional arguments only.
static int call_block(Eval *e, Node *call, BlockDef *b, const char *prefix, Val *out) {
  Val args[MAX_LIST];
  int n = 0;
  for (Node *a = call->args; a; a = a->next) {
    if (a->name)
      return fail(e, a, "block '%s' takes positional arguments only", b->def->name);
    if (n >= MAX_LIST || n >= b->nparams)
      return fail(e, a, "block '%s' takes %d argument%s, got more", b->def->name, b->nparams,
                  b->nparams == 1 ? "" : "s");
    if (eval(e, a->lhs, &args[n]) < 0)
      return -1;
    if (args[n].kind == V_TUPLE)
      return fail(e, a, "an argument must be one value, not several (from split)");
    n++;
  }
  if (n != b->nparams)
    return fail(e, call, "block '%s' takes %d argument%s, got %d", b->def->name, b->nparams,
                b->nparams == 1 ? "" : "s", n);
  return instantiate(e, b, prefix, args, call, out);
}

// repeat N f(x) as prefix: x = f(x), N times.
static int eval_repeat(Eval *e, Node *n, Val *out) {
  Node *call = n->rhs;
  const Sym *count;
  int64_t times;
  if (eval_size(e, n->lhs, "repeat count", &count, &times) < 0)
    return -1;
  if (times > MAX_REPEAT)
    return fail(e, n->lhs, "repeat count %lld is too large (at most %d)", (long long)times,
                MAX_REPEAT);
  BlockDef *b = find_block(e, call->name);
  if (!b) {
    if (find_builtin(call->name))
      return fail(e, call, "repeat needs a block, and '%s' is a built-in function", call->name);
    return fail(e, call, "unknown block '%s' (%s)", call->name, function_list(e));
  }
  if (b->nparams != 1)
    return fail(e, call, "repeat needs a block of one argument, and '%s' takes %d", call->name,
                b->nparams);
  if (!call->args || call->args->next || call->args->name)
    return fail(e, call, "repeat passes one tensor to '%s': write repeat N %s(x)", call->name,
                call->name);
  Val x;
  if (eval(e, call->args->lhs, &x) < 0)
    return -1;
  if (x.kind != V_TENSOR)
    return fail_expr(e, call->args->lhs, "repeat needs a tensor to pass along, not %s",
                     kind_name(&x));
  const char *prefix = n->as ? n->as : b->def->name;
  for (int64_t i = 0; i < times; i++) {
    if (instantiate(e, b, prefix, &x, n, &x) < 0)
      return -1;
    if (x.kind != V_TENSOR)
      return fail(e, n, "block '%s' must return a tensor to repeat it", b->def->name);
  }
  *out = x;
  return 0;
}

// ---- expressions ------------------------------------------------------------------------

static int eval_name(Eval *e, Node *n, Val *out) {
  Binding *b = lookup_in(e->scope, n->name);
  if (b) {
    *out = b->val;
    return 0;
  }
  Dim *d = find_dim(e, n->name);
  if (d) {
    *out = (Val){.kind = V_NUM, .num = sym_evalf(d->sym, &e->g->syms)};
    return 0;
  }
  if (e->in_block && lookup_in(e->globals, n->name))
    return fail(e, n, "'%s' is defined outside the block: a block sees only its arguments, "
                "its own names and the dims (pass '%s' as an argument)", n->name, n->name);
  if (find_builtin(n->name) || find_block(e, n->name))
    return fail(e, n, "'%s' is a function: call it as %s(...)", n->name, n->name);
  if (is_decl_word(n->name))
    return fail(e, n, "'%s' is only meaningful in an input or param declaration", n->name);
  return fail(e, n, "unknown name '%s'", n->name);
}

static int eval_call(Eval *e, Node *n, Val *out) {
  BlockDef *b = find_block(e, n->name);
  if (b)
    return call_block(e, n, b, b->def->name, out);
  const Builtin *f = find_builtin(n->name);
  if (f)
    return call_builtin(e, n, f, out);
  if (strcmp(n->name, "normal") == 0 || strcmp(n->name, "zeros") == 0 ||
      strcmp(n->name, "ones") == 0)
    return fail(e, n, "%s() is an initializer: use it as 'param w: [C] = %s'", n->name,
                strcmp(n->name, "normal") == 0 ? "normal(0.02)" : n->name);
  if (strcmp(n->name, "tokens") == 0 || strcmp(n->name, "targets") == 0 ||
      strcmp(n->name, "labels") == 0 || strcmp(n->name, "classes") == 0)
    return fail(e, n, "%s() is a data kind: use it as 'input idx: i32[B, T] %s(V)'", n->name,
                n->name);
  return fail(e, n, "unknown function '%s' (built-ins: %s)", n->name, function_list(e));
}

static int eval(Eval *e, Node *n, Val *out) {
  *out = (Val){.kind = V_NUM};
  switch (n->kind) {
  case ND_NUM:
    *out = (Val){.kind = V_NUM, .num = n->num};
    return 0;
  case ND_NAME:
    return eval_name(e, n, out);
  case ND_ADD:
  case ND_SUB:
  case ND_MUL:
  case ND_DIV:
    return arith(e, n, out);
  case ND_MATMUL: {
    IrValue *in[2];
    if (eval_tensor(e, n->lhs, "the left side of '@'", &in[0]) < 0 ||
        eval_tensor(e, n->rhs, "the right side of '@'", &in[1]) < 0 ||
        need_f32(e, n->lhs, "the left side of '@'", in[0]) < 0 ||
        need_f32(e, n->rhs, "the right side of '@'", in[1]) < 0)
      return -1;
    IrNode *node = new_node(e, n, OP_MATMUL, in, 2, 1);
    if (infer(e, n, node) < 0)
      return -1;
    *out = (Val){.kind = V_TENSOR, .t = node->out[0]};
    return 0;
  }
  case ND_NEG: {
    Val x;
    if (eval(e, n->lhs, &x) < 0)
      return -1;
    if (x.kind == V_NUM) {
      *out = (Val){.kind = V_NUM, .num = -x.num};
      return 0;
    }
    if (x.kind != V_TENSOR)
      return fail_expr(e, n->lhs, "unary '-' needs a tensor or a number, not %s",
                       kind_name(&x));
    if (need_f32(e, n->lhs, "the operand of unary '-'", x.t) < 0)
      return -1;
    return scale(e, n, x.t, -1, 0, out);
  }
  case ND_T: {
    IrValue *x;
    if (strcmp(n->name, "T") != 0)
      return fail(e, n, "unknown attribute '.%s' (only .T, the transpose of the last two dims)",
                  n->name);
    if (eval_tensor(e, n->lhs, "the operand of '.T'", &x) < 0)
      return -1;
    if (x->rank < 2)
      return fail(e, n, ".T needs a tensor of rank 2 or more, got %s", describe(e, x));
    int64_t perm[IR_MAXRANK];
    for (int i = 0; i < x->rank; i++)
      perm[i] = i;
    perm[x->rank - 2] = x->rank - 1;
    perm[x->rank - 1] = x->rank - 2;
    IrNode *node = new_node(e, n, OP_TRANSPOSE, &x, 1, 1);
    ir_set_ints(e->g, node, "perm", perm, x->rank);
    if (infer(e, n, node) < 0)
      return -1;
    *out = (Val){.kind = V_TENSOR, .t = node->out[0]};
    return 0;
  }
  case ND_CALL:
    return eval_call(e, n, out);
  case ND_REPEAT:
    return eval_repeat(e, n, out);
  case ND_LIST:
    return fail(e, n, "a list [...] can only be an argument of a function, like "
                "reshape(x, [B, T, C])");
  default:
    return fail(e, n, "expected an expression");
  }
}

// ---- declarations and statements -----------------------------------------------------

// Gives a fresh activation (one still named by its number) the name it is
// bound to, under the block instance's prefix: `logits`, `h.0.q`. A name
// taken already gets ".1", ".2", ... from the IR.
static void name_value(Eval *e, Val v, const char *name) {
  if (v.kind != V_TENSOR || !v.t->producer || v.t->role != ROLE_ACT)
    return;
  for (const char *p = v.t->name; *p; p++)
    if (*p < '0' || *p > '9')
      return;
  ir_value_rename(e->g, v.t, e->path ? fmt(e, "%s.%s", e->path, name) : name);
}

// Names of things in the scope must not hide dims, blocks or built-ins.
static int check_new_name(Eval *e, Node *at, const char *name) {
  if (find_dim(e, name))
    return fail(e, at, "'%s' is a dim; pick another name", name);
  if (find_block(e, name))
    return fail(e, at, "'%s' is a block; pick another name", name);
  if (find_builtin(name))
    return fail(e, at, "'%s' is a built-in function; pick another name", name);
  return 0;
}

// type = ("f32" | "i32")? "[" dims "]"
static int eval_type(Eval *e, Node *t, IrDType *dt, int *rank, const Sym **shape) {
  *dt = DT_F32;
  if (t->name) {
    if (strcmp(t->name, "i32") == 0)
      *dt = DT_I32;
    else if (strcmp(t->name, "f32") != 0)
      return fail(e, t, "unknown dtype '%s' (dtypes: f32, i32)", t->name);
  }
  *rank = 0;
  for (Node *d = t->args; d; d = d->next) {
    if (*rank >= IR_MAXRANK)
      return fail(e, d, "too many dims (at most %d)", IR_MAXRANK);
    if (eval_size(e, d, "dim", &shape[*rank], NULL) < 0)
      return -1;
    (*rank)++;
  }
  return 0;
}

static int top_level_only(Eval *e, Node *s, const char *what) {
  if (e->in_block)
    return fail(e, s, "'%s' is only allowed at the top level, not inside a block", what);
  return 0;
}

// dim NAME = INT | dim NAME = formula
static int exec_dim(Eval *e, Node *s) {
  if (top_level_only(e, s, "dim") < 0)
    return -1;
  if (find_dim(e, s->name))
    return fail(e, s, "dim '%s' is defined twice", s->name);
  if (lookup_in(e->globals, s->name) || find_block(e, s->name))
    return fail(e, s, "'%s' is already a tensor or block name", s->name);
  if (strlen(s->name) >= SYM_NAMELEN)
    return fail(e, s, "dim name '%s' is too long (at most %d characters)", s->name,
                SYM_NAMELEN - 1);
  Dim *d = ir_alloc(e->tmp, sizeof(Dim));
  d->name = s->name;
  IrArena *a = &e->g->arena;

  if (s->lhs->kind == ND_NUM && s->lhs->is_int) {
    // A symbol with a default value, unless -D overrides it.
    int64_t value = s->lhs->ival;
    for (int i = 0; i < e->ndefs; i++)
      if (strcmp(e->defs[i].name, s->name) == 0)
        value = e->defs[i].value;
    if (value < 1 || value > MAX_SYM)
      return fail(e, s->lhs, "dim %s = %lld: a dim must be an integer in [1, %d]", s->name,
                  (long long)value, MAX_SYM);
    int var = symtab_add(&e->g->syms, s->name);
    if (var < 0)
      return fail(e, s, "too many dims (at most %d)", SYM_MAXVARS);
    symtab_bind(&e->g->syms, var, value);
    d->sym = sym_var(a, var);
  } else {
    // An alias for a formula over earlier dims; it must be a positive integer.
    int64_t v;
    if (eval_dim(e, s->lhs, &d->sym) < 0 ||
        dim_value(e, s, d->sym, fmt(e, "dim %s", s->name), &v) < 0)
      return -1;
  }
  d->next = e->dims;
  e->dims = d;
  return 0;
}

// input NAME: type kind
static int exec_input(Eval *e, Node *s) {
  IrDType dt;
  int rank;
  const Sym *shape[IR_MAXRANK];
  if (top_level_only(e, s, "input") < 0 || check_new_name(e, s, s->name) < 0)
    return -1;
  Binding *old = lookup_in(e->scope, s->name);
  if (old)
    return fail(e, s, "'%s' is already defined (line %d)", s->name, old->decl->line);
  if (eval_type(e, s->type, &dt, &rank, shape) < 0)
    return -1;

  IrInputKind kind = INPUT_RANDN;
  const Sym *range = NULL;
  Node *k = s->init;
  if (k) {
    if (strcmp(k->name, "tokens") == 0)
      kind = INPUT_TOKENS;
    else if (strcmp(k->name, "targets") == 0)
      kind = INPUT_TARGETS;
    else if (strcmp(k->name, "labels") == 0)
      kind = INPUT_LABELS;
    else if (strcmp(k->name, "classes") == 0)
      kind = INPUT_CLASSES;
    else
      return fail(e, k, "unknown data kind '%s' (kinds: tokens(R), targets(R), labels(R), "
                  "classes(R))",
                  k->name);
    if (dt != DT_I32)
      return fail(e, k, "%s(...) is for i32 inputs; a float input takes no kind (its data is "
                  "normal(0, 1))", k->name);
    if (!k->args || k->args->next || k->args->name)
      return fail(e, k, "%s takes one argument, the range: %s(V)", k->name, k->name);
    if (eval_size(e, k->args->lhs, "range", &range, NULL) < 0)
      return -1;
  } else if (dt == DT_I32) {
    return fail(e, s, "i32 input '%s' needs a data kind: tokens(V), targets(V) or classes(K)",
                s->name);
  }
  e->g->cur_loc = (IrLoc){e->gfile, s->line, s->col};
  IrValue *v = ir_input(e->g, s->name, dt, rank, shape, kind, range);
  v->loc = e->g->cur_loc;
  if (check_value(e, s, v) < 0)
    return -1;
  bind(e, s->name, (Val){.kind = V_TENSOR, .t = v}, s);
  return 0;
}

// param NAME: type = init
static int exec_param(Eval *e, Node *s) {
  IrDType dt;
  int rank;
  const Sym *shape[IR_MAXRANK];
  if (check_new_name(e, s, s->name) < 0)
    return -1;
  Binding *old = lookup_in(e->scope, s->name);
  if (old)
    return fail(e, s, "'%s' is already defined (line %d)", s->name, old->decl->line);
  if (eval_type(e, s->type, &dt, &rank, shape) < 0)
    return -1;
  if (dt != DT_F32)
    return fail(e, s->type, "a param must be f32");

  Node *in = s->init;
  if (!in)
    return fail(e, s, "param '%s' needs an initializer: '= normal(0.02)', '= zeros' or '= ones'",
                s->name);
  IrInit init = {INIT_NONE, 0};
  const char *f = in->kind == ND_NAME || in->kind == ND_CALL ? in->name : "";
  if (strcmp(f, "zeros") == 0 || strcmp(f, "ones") == 0) {
    if (in->kind == ND_CALL && in->args)
      return fail(e, in, "%s takes no arguments", f);
    init.kind = f[0] == 'z' ? INIT_ZEROS : INIT_ONES;
  } else if (strcmp(f, "normal") == 0 && in->kind == ND_CALL) {
    if (!in->args || in->args->next || in->args->name)
      return fail(e, in, "normal takes one argument, the standard deviation: normal(0.02)");
    if (eval_num(e, in->args->lhs, "normal: the standard deviation", &init.std) < 0)
      return -1;
    if (!(init.std > 0 && init.std < 1e6))
      return fail(e, in->args->lhs, "normal: the standard deviation must be positive, got %g",
                  init.std);
    init.kind = INIT_NORMAL;
  } else {
    return fail(e, in, "unknown initializer (initializers: normal(std), zeros, ones)");
  }

  if (e->g->nvalues >= MAX_VALUES)
    return fail(e, s, "the model is too large (more than %d tensors)", MAX_VALUES);
  const char *name = e->path ? fmt(e, "%s.%s", e->path, s->name) : s->name;
  e->g->cur_loc = (IrLoc){e->gfile, s->line, s->col};
  IrValue *v = ir_param(e->g, name, rank, shape, init);
  v->loc = e->g->cur_loc;
  if (check_value(e, s, v) < 0)
    return -1;
  bind(e, s->name, (Val){.kind = V_TENSOR, .t = v}, s);
  return 0;
}

// let a, b = expr
static int exec_let(Eval *e, Node *s) {
  Val v;
  int nnames = 0;
  for (Node *a = s->names; a; a = a->next) {
    if (check_new_name(e, a, a->name) < 0)
      return -1;
    for (Node *b = s->names; b != a; b = b->next)
      if (strcmp(a->name, b->name) == 0)
        return fail(e, a, "'%s' is bound twice", a->name);
    nnames++;
  }
  if (eval(e, s->lhs, &v) < 0)
    return -1;
  if (v.kind == V_TUPLE) {
    if (v.n != nnames)
      return fail(e, s->names, "split gives %d value%s but %d name%s bound", v.n,
                  v.n == 1 ? "" : "s", nnames, nnames == 1 ? " is" : "s are");
    int i = 0;
    for (Node *a = s->names; a; a = a->next) {
      Val t = {.kind = V_TENSOR, .t = v.ts[i++]};
      name_value(e, t, a->name);
      bind(e, a->name, t, a);
    }
    return 0;
  }
  if (nnames != 1)
    return fail(e, s->names, "%d names are bound to one value (only split gives several)",
                nnames);
  name_value(e, v, s->names->name);
  bind(e, s->names->name, v, s->names);
  return 0;
}

// name = expr: rebinds an existing name of this scope.
static int exec_assign(Eval *e, Node *s) {
  Binding *b = lookup_in(e->scope, s->name);
  if (!b) {
    if (find_dim(e, s->name))
      return fail(e, s, "'%s' is a dim and cannot be assigned", s->name);
    return fail(e, s, "unknown name '%s' (use 'let %s = ...' to define it)", s->name, s->name);
  }
  Val v;
  if (eval(e, s->lhs, &v) < 0)
    return -1;
  if (v.kind == V_TUPLE)
    return fail(e, s, "split gives %d values but 1 name is bound", v.n);
  name_value(e, v, s->name);
  bind(e, s->name, v, b->decl);
  return 0;
}

static int exec_loss(Eval *e, Node *s) {
  if (e->in_block)
    return fail(e, s, "'loss' is only allowed at the top level; return the value from the "
                "block instead");
  if (e->loss)
    return fail(e, s, "a second 'loss' statement (the first is at line %d); a model has one",
                e->loss->line);
  IrValue *v;
  if (eval_tensor(e, s->lhs, "the loss", &v) < 0)
    return -1;
  if (v->dtype != DT_F32 || v->rank != 0)
    return fail_expr(e, s->lhs, "the loss must be a scalar f32 tensor, got %s (reduce it with "
                "mean(...) or use cross_entropy)", describe(e, v));
  if (!v->producer)
    return fail_expr(e, s->lhs, "the loss must be computed by the model, not be the %s '%s'",
                     v->role == ROLE_INPUT ? "input" : "param", v->name);
  e->loss = s;
  e->g->loss = v;
  name_value(e, (Val){.kind = V_TENSOR, .t = v}, "loss");
  return 0;
}

static int exec(Eval *e, Node *s) {
  switch (s->kind) {
  case ND_MODEL:
    return top_level_only(e, s, "model");  // read by the first pass
  case ND_BLOCK:
    return 0;                              // registered by the first pass
  case ND_DIM:
    return exec_dim(e, s);
  case ND_INPUT:
    return exec_input(e, s);
  case ND_PARAM:
    return exec_param(e, s);
  case ND_LET:
    return exec_let(e, s);
  case ND_ASSIGN:
    return exec_assign(e, s);
  case ND_LOSS:
    return exec_loss(e, s);
  case ND_RETURN: {
    if (!e->in_block)
      return fail(e, s, "'return' outside a block");
    Val v;
    if (eval(e, s->lhs, &v) < 0)
      return -1;
    if (v.kind == V_TUPLE)
      return fail_expr(e, s->lhs, "a block returns one value, not %d", v.n);
    name_value(e, v, "out");
    e->ret = v;
    return 0;
  }
  default:
    return fail(e, s, "expected a statement");
  }
}

// ---- the first pass: blocks, the model name, defines ---------------------------------

static int check_block(Eval *e, Node *def) {
  if (find_block(e, def->name))
    return fail(e, def, "block '%s' is defined twice", def->name);
  if (find_builtin(def->name) || is_decl_word(def->name))
    return fail(e, def, "'%s' is a built-in name; pick another block name", def->name);
  BlockDef *b = ir_alloc(e->tmp, sizeof(BlockDef));
  b->def = def;
  for (Node *p = def->names; p; p = p->next) {
    for (Node *q = def->names; q != p; q = q->next)
      if (strcmp(p->name, q->name) == 0)
        return fail(e, p, "parameter '%s' is listed twice", p->name);
    b->nparams++;
  }
  if (b->nparams > MAX_LIST)
    return fail(e, def, "block '%s' has too many parameters (at most %d)", def->name, MAX_LIST);
  Node *last = NULL;
  for (Node *s = def->body; s; s = s->next) {
    if (s->kind == ND_RETURN && s->next)
      return fail(e, s, "'return' must be the last statement of block '%s'", def->name);
    last = s;
  }
  if (!last || last->kind != ND_RETURN) {
    Node at = {.line = def->end_line, .col = def->end_col};
    return fail(e, &at, "block '%s' must end with 'return <value>;'", def->name);
  }
  b->next = e->blocks;
  e->blocks = b;
  return 0;
}

// Every -D names a plain `dim NAME = INT` of the file.
static int check_defines(Eval *e, Node *prog) {
  for (int i = 0; i < e->ndefs; i++) {
    const FeDefine *d = &e->defs[i];
    Node *found = NULL;
    const char *names = "";
    for (Node *s = prog; s; s = s->next) {
      if (s->kind != ND_DIM)
        continue;
      if (s->lhs->kind == ND_NUM && s->lhs->is_int)
        names = fmt(e, "%s%s%s", names, names[0] ? ", " : "", s->name);
      if (d->name && strcmp(s->name, d->name) == 0 && !found)
        found = s;
    }
    if (!found)
      return fail(e, NULL, "-D %s: the model has no dim %s (dims: %s)", d->name ? d->name : "?",
                  d->name ? d->name : "?", names[0] ? names : "none");
    if (!(found->lhs->kind == ND_NUM && found->lhs->is_int))
      return fail(e, found, "-D %s: %s is a derived dim (a formula of other dims); set the dims "
                  "it is made from instead", d->name, d->name);
    if (d->value < 1 || d->value > MAX_SYM)
      return fail(e, NULL, "-D %s=%lld: a dim must be an integer in [1, %d]", d->name,
                  (long long)d->value, MAX_SYM);
  }
  return 0;
}

// The model name: `model NAME;`, else the file's stem.
static const char *model_name(Eval *e, Node *prog, const char *file) {
  for (Node *s = prog; s; s = s->next)
    if (s->kind == ND_MODEL)
      return s->name;
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  const char *dot = strrchr(base, '.');
  size_t len = dot && dot != base ? (size_t)(dot - base) : strlen(base);
  if (len == 0)
    return "model";
  return ir_strndup(e->tmp, base, len);
}

static int evaluate(Eval *e, Node *prog) {
  if (!prog)
    return fail(e, NULL, "empty model: declare inputs and params and end with "
                "'loss <scalar>;'");
  for (Node *s = prog; s; s = s->next) {
    if (s->kind == ND_BLOCK && check_block(e, s) < 0)
      return -1;
    if (s->kind == ND_MODEL) {
      if (e->model)
        return fail(e, s, "a second 'model' statement (the first is at line %d)",
                    e->model->line);
      e->model = s;
    }
  }
  if (check_defines(e, prog) < 0)
    return -1;
  for (Node *s = prog; s; s = s->next)
    if (exec(e, s) < 0)
      return -1;
  if (!e->loss) {
    Node at = {.line = e->ps->line, .col = e->ps->col};
    return fail(e, &at, "the model has no 'loss' statement: add one, e.g. "
                "'loss cross_entropy(logits, targets);'");
  }
  return 0;
}

// ---- entry points ------------------------------------------------------------------------

IrGraph *fe_dsl_parse(const char *text, const char *filename, const FeDefine *defs, int ndefs,
                      uint64_t seed, IrDiag *d) {
  IrDiag local;
  if (!d)
    d = &local;
  memset(d, 0, sizeof *d);
  if (!filename)
    filename = "<string>";
  IrArena arena = {0};
  Parser ps = {.arena = &arena, .diag = d, .file = filename};
  IrGraph *g = NULL;

  if (!text) {
    dsl_fail(&ps, 1, 1, "no text to parse");
  } else if (dsl_run(&ps, text) == 0) {
    Eval e = {.ps = &ps, .tmp = &arena, .defs = defs, .ndefs = defs && ndefs > 0 ? ndefs : 0,
              .seed = seed};
    g = ir_graph_new(model_name(&e, ps.prog, filename));
    g->cur_phase = PHASE_FORWARD;
    g->cur_block = 0;
    e.g = g;
    e.gfile = ir_strdup(&g->arena, filename);
    if (evaluate(&e, ps.prog) < 0 || ps.failed) {
      ir_graph_free(g);
      g = NULL;
    } else {
      g->cur_loc = (IrLoc){0};
      g->cur_block = 0;
    }
  }
  ir_arena_free(&arena);
  if (!g) {
    d->loc.file = filename;  // the graph's copy is gone
    if (!d->msg[0])
      snprintf(d->msg, sizeof d->msg, "cannot read the model");
  } else {
    ir_mark_batch_dims(g);
  }
  return g;
}

IrGraph *fe_dsl_load(const char *path, const FeDefine *defs, int ndefs, uint64_t seed, IrDiag *d) {
  IrDiag local;
  if (!d)
    d = &local;
  memset(d, 0, sizeof *d);
  char *text = fe_read_text(path, d);
  if (!text)
    return NULL;
  IrGraph *g = fe_dsl_parse(text, path, defs, ndefs, seed, d);
  free(text);
  return g;
}
