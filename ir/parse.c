// Reads the IR text that ir/print.c writes (see the grammar there).
//
//   file    = line*
//   line    = "graph" STRING | "after" NAME | "sym" NAME ("=" INT)?
//           | ("input" | "param" | "state" | "const" | "bucket" | "copy") value ":" type extra* loc?
//           | "forward" | "backward" | "update"
//           | (value ":" type ("," value ":" type)* "=")? OP "(" values? ")" attr* ("#" INT)? loc?
//           | "loss" value | "grad" value value
//   value   = "%" (NAME | STRING)
//   type    = ("f32" | "bf16" | "i32") "[" (formula ("," formula)*)? "]"
//   attr    = NAME "=" (INT | FLOAT | STRING | "[" (formula ("," formula)*)? "]")
//             (a name the op declares in ir/attrs.def, a value of its kind)
//   loc     = "@" STRING (":" INT ":" INT)?
#include "ir.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct Parser {
  IrGraph *g;
  const char *p;        // cursor
  const char *line;     // start of the current line
  int lineno;
  const char *file;
  IrDiag *d;
} Parser;

// An error at the cursor.
static int fail(Parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Parser *ps, const char *fmt, ...) {
  IrLoc loc = {ps->file, ps->lineno, (int)(ps->p - ps->line) + 1};
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return ir_error(ps->d, loc, "%s", msg);
}

static void skip_space(Parser *ps) {
  while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\r')
    ps->p++;
}

static bool at_eol(Parser *ps) {
  skip_space(ps);
  return *ps->p == '\n' || *ps->p == '\0';
}

static bool eat(Parser *ps, char c) {
  skip_space(ps);
  if (*ps->p != c)
    return false;
  ps->p++;
  return true;
}

static int expect(Parser *ps, char c) {
  if (eat(ps, c))
    return 0;
  char what[2] = {c, 0};
  return fail(ps, "expected '%s'", what);
}

// NAME = [A-Za-z_][A-Za-z0-9_.]*  (dots allowed after the first char)
static const char *word(Parser *ps) {
  skip_space(ps);
  const char *s = ps->p;
  if (!isalpha((unsigned char)*s) && *s != '_')
    return NULL;
  while (isalnum((unsigned char)*ps->p) || *ps->p == '_' || *ps->p == '.')
    ps->p++;
  return ir_strndup(&ps->g->arena, s, (size_t)(ps->p - s));
}

static bool keyword(Parser *ps, const char *kw) {
  skip_space(ps);
  size_t n = strlen(kw);
  if (strncmp(ps->p, kw, n) != 0 || isalnum((unsigned char)ps->p[n]) || ps->p[n] == '_')
    return false;
  ps->p += n;
  return true;
}

// A double-quoted string with \" and \\ escapes.
static const char *string(Parser *ps) {
  skip_space(ps);
  if (*ps->p != '"')
    return NULL;
  ps->p++;
  size_t cap = 64, len = 0;
  char *buf = malloc(cap);
  IR_ASSERT(buf);
  while (*ps->p != '"') {
    if (*ps->p == '\0' || *ps->p == '\n') {
      free(buf);
      return NULL;
    }
    if (*ps->p == '\\' && ps->p[1] && ps->p[1] != '\n')
      ps->p++;
    if (len + 1 >= cap) {
      cap *= 2;
      buf = realloc(buf, cap);
      IR_ASSERT(buf);
    }
    buf[len++] = *ps->p++;
  }
  ps->p++;
  const char *s = ir_strndup(&ps->g->arena, buf, len);
  free(buf);
  return s;
}

static int integer(Parser *ps, int64_t *out) {
  skip_space(ps);
  char *end;
  errno = 0;
  long long v = strtoll(ps->p, &end, 10);
  if (end == ps->p || errno)
    return fail(ps, "expected an integer");
  ps->p = end;
  *out = v;
  return 0;
}

// "%name" or "%\"quoted name\""
static const char *value_name(Parser *ps) {
  if (!eat(ps, '%'))
    return NULL;
  if (*ps->p == '"')
    return string(ps);
  const char *s = ps->p;
  while (isalnum((unsigned char)*ps->p) || *ps->p == '_' || *ps->p == '.')
    ps->p++;
  return ps->p > s ? ir_strndup(&ps->g->arena, s, (size_t)(ps->p - s)) : NULL;
}

static IrValue *value_ref(Parser *ps) {
  const char *at = ps->p;
  const char *name = value_name(ps);
  if (!name) {
    fail(ps, "expected a value name like %s", "%x");
    return NULL;
  }
  IrValue *v = ir_value_find(ps->g, name);
  if (!v) {
    ps->p = at;
    skip_space(ps);
    fail(ps, "unknown value '%%%s'", name);
  }
  return v;
}

static const Sym *formula(Parser *ps) {
  skip_space(ps);
  const char *end;
  const Sym *s = sym_parse(&ps->g->arena, &ps->g->syms, ps->p, &end);
  if (!s) {
    ps->p = end;
    fail(ps, "bad formula");
    return NULL;
  }
  ps->p = end;
  return s;
}

// ("f32" | "bf16" | "i32") "[" formulas "]" (runtime/dtypes.def's names)
static int type(Parser *ps, IrValue *v) {
  const char *w = word(ps);
  if (w && !strcmp(w, "host")) { // placed in host memory (offload)
    v->host = true;
    w = word(ps);
  }
  v->dtype = w ? ir_dtype_lookup(w) : DT_COUNT;
  if (v->dtype == DT_COUNT)
    return fail(ps, "expected a type (f32[...], bf16[...] or i32[...])");
  if (expect(ps, '['))
    return -1;
  const Sym *shape[IR_MAXRANK];
  int rank = 0;
  if (!eat(ps, ']')) {
    do {
      if (rank == IR_MAXRANK)
        return fail(ps, "more than %d dims", IR_MAXRANK);
      if (!(shape[rank++] = formula(ps)))
        return -1;
    } while (eat(ps, ','));
    if (expect(ps, ']'))
      return -1;
  }
  ir_value_set_shape(v, rank, shape);
  return 0;
}

static double number(Parser *ps, bool *is_float) {
  skip_space(ps);
  char *end;
  double x = strtod(ps->p, &end);
  const char *s = ps->p;
  *is_float = false;
  for (const char *q = s; q < end; q++)
    if (*q == '.' || *q == 'e' || *q == 'E' || *q == 'n' || *q == 'i')
      *is_float = true;
  ps->p = end;
  return end == s ? NAN : x;
}

static int loc(Parser *ps, IrLoc *l) {
  if (!eat(ps, '@'))
    return 0;
  const char *f = string(ps);
  if (!f)
    return fail(ps, "expected a quoted location");
  l->file = f;
  l->line = l->col = 0;
  if (eat(ps, ':')) {
    int64_t a, b;
    if (integer(ps, &a) || expect(ps, ':') || integer(ps, &b))
      return -1;
    if (a < 0 || a > INT_MAX || b < 0 || b > INT_MAX)
      return fail(ps, "a line and column are at most %d", INT_MAX);
    l->line = (int)a;
    l->col = (int)b;
  }
  return 0;
}

// A constant's values after `data`: [v, v*n, ...] (print.c), as many as its shape holds.
static int data(Parser *ps, IrValue *v) {
  int64_t n = 0;
  if (sym_eval(ir_numel(ps->g, v), &ps->g->syms, &n) || n > IR_DATA_MAX)
    return fail(ps, "a constant's data needs a shape of known size (every dim bound), at most %lld "
                "elements", (long long)IR_DATA_MAX);
  size_t es = (size_t)ir_dtype_size(v->dtype);
  char *out = ir_alloc(&ps->g->arena, (size_t)n * es);
  int64_t k = 0;
  eat(ps, '[');
  while (!eat(ps, ']')) {
    if (k > 0 && expect(ps, ','))
      return -1;
    skip_space(ps);
    const char *at = ps->p;
    bool fl;
    double x = number(ps, &fl);
    if (ps->p == at)
      return fail(ps, "expected a number");
    int64_t run = 1;
    if (eat(ps, '*') && integer(ps, &run))
      return -1;
    if (run < 1 || run > n - k)
      return fail(ps, "the data has more values than the shape %s holds (%lld)",
                  ir_shape_str(ps->g, v), (long long)n);
    if (v->dtype == DT_I32 && (fl || !(x >= INT32_MIN && x <= INT32_MAX)))
      return fail(ps, "i32 data holds integers, not %g", x);
    for (int64_t i = 0; i < run; i++, k++) {
      if (v->dtype == DT_I32)
        ((int32_t *)out)[k] = (int32_t)x;
      else
        ((float *)out)[k] = (float)x;
    }
  }
  if (k != n)
    return fail(ps, "the data has %lld values; the shape %s holds %lld", (long long)k,
                ir_shape_str(ps->g, v), (long long)n);
  v->data = out;
  return 0;
}

// A value declaration: input / param / state.
static int declaration(Parser *ps, IrRole role) {
  const char *name = value_name(ps);
  if (!name)
    return fail(ps, "expected a value name like %s", "%x");
  if (ir_value_find(ps->g, name))
    return fail(ps, "'%%%s' is defined twice", name);
  IrValue *v = ir_value_new(ps->g, name, DT_F32, role);
  v->loc = (IrLoc){0};
  if (expect(ps, ':') || type(ps, v))
    return -1;
  const char *w = (*(skip_space(ps), ps->p) == '@') ? NULL : word(ps);
  if (w && role == ROLE_INPUT) {
    if (!strcmp(w, "tokens"))
      v->input_kind = INPUT_TOKENS;
    else if (!strcmp(w, "targets"))
      v->input_kind = INPUT_TARGETS;
    else if (!strcmp(w, "classes"))
      v->input_kind = INPUT_CLASSES;
    else if (!strcmp(w, "mask"))
      v->input_kind = INPUT_MASK;
    else if (!strcmp(w, "labels"))
      v->input_kind = INPUT_LABELS;
    else
      return fail(ps, "unknown input kind '%s' (tokens, targets, labels, classes, mask)", w);
    if (expect(ps, '(') || !(v->range = formula(ps)) || expect(ps, ')'))
      return -1;
  } else if (w) {
    if (!strcmp(w, "zeros"))
      v->init.kind = INIT_ZEROS;
    else if (!strcmp(w, "ones"))
      v->init.kind = INIT_ONES;
    else if (!strcmp(w, "normal")) {
      bool fl;
      v->init.kind = INIT_NORMAL;
      if (expect(ps, '('))
        return -1;
      v->init.std = number(ps, &fl);
      if (expect(ps, ')'))
        return -1;
    } else if (!strcmp(w, "data")) {
      v->init.kind = INIT_DATA; // without values (a parameter's): they read as zeros
      if (*ps->p == '[' && data(ps, v))
        return -1;
    } else
      return fail(ps, "unknown initializer '%s' (zeros, ones, normal(std), data)", w);
  }
  return loc(ps, &v->loc);
}

// One attribute of n: its name must be one n's op declares (ir/attrs.def)
// and its value of the declared kind. An integer reads as a float where a
// float is declared (eps=0), and a list of integers as formulas where
// formulas are (sizes=[2,4]).
static int attribute(Parser *ps, IrNode *n) {
  skip_space(ps);
  const char *at = ps->p;
  const char *name = word(ps);
  if (!name)
    return fail(ps, "expected an attribute");
  const IrAttrDecl *decl = ir_op_attr(n->op, name);
  if (!decl) {
    char list[256];
    ps->p = at;
    return fail(ps, "%s has no attribute '%s' (%s)", ir_op_name(n->op), name,
                ir_op_attr_list(n->op, list, sizeof list));
  }
  if (expect(ps, '='))
    return -1;
  skip_space(ps);
  const char *value = ps->p;
  IrAttrKind kind;
  const char *s = NULL;
  const Sym *items[64];
  int count = 0;
  double x = 0;
  int64_t i = 0;
  if (*ps->p == '"') {
    if (!(s = string(ps)))
      return fail(ps, "unterminated string");
    kind = ATTR_STR;
  } else if (*ps->p == '[') {
    ps->p++;
    kind = ATTR_INTS;
    if (!eat(ps, ']')) {
      do {
        if (count == 64)
          return fail(ps, "too many list items");
        if (!(items[count] = formula(ps)))
          return -1;
        if (!sym_is_const(items[count++], NULL))
          kind = ATTR_SYMS;
      } while (eat(ps, ','));
      if (expect(ps, ']'))
        return -1;
    }
  } else {
    bool fl;
    x = number(ps, &fl);
    if (ps->p == value)
      return fail(ps, "expected a value for attribute '%s'", name);
    kind = fl ? ATTR_FLOAT : ATTR_INT;
    if (kind == ATTR_INT) { // exactly, as an int64 (a double holds 2^53 exactly)
      char *end;
      errno = 0;
      long long v = strtoll(value, &end, 10);
      if (errno || end != ps->p) {
        ps->p = value;
        return fail(ps, "attribute '%s': %.*s is not an integer from %lld to %lld", name,
                    (int)(end - value), value, LLONG_MIN, LLONG_MAX);
      }
      i = v;
    }
  }
  bool ok = kind == decl->kind || (kind == ATTR_INT && decl->kind == ATTR_FLOAT) ||
            (kind == ATTR_INTS && decl->kind == ATTR_SYMS);
  if (!ok) {
    ps->p = value;
    return fail(ps, "%s: attribute '%s' must be %s, not %s", ir_op_name(n->op), name,
                ir_attr_kind_name(decl->kind), ir_attr_kind_name(kind));
  }
  switch (decl->kind) {
  case ATTR_INT: ir_set_int(ps->g, n, name, i); break;
  case ATTR_FLOAT: ir_set_float(ps->g, n, name, kind == ATTR_INT ? (double)i : x); break;
  case ATTR_STR: ir_set_str(ps->g, n, name, s); break;
  case ATTR_SYMS: ir_set_syms(ps->g, n, name, items, count); break;
  case ATTR_INTS: {
    int64_t ints[64];
    for (int i = 0; i < count; i++)
      sym_is_const(items[i], &ints[i]);
    ir_set_ints(ps->g, n, name, ints, count);
    break;
  }
  }
  return 0;
}

// outputs "=" op "(" inputs ")" attrs block loc
static int node_line(Parser *ps) {
  IrGraph *g = ps->g;
  const char *names[64];
  IrValue types[64];
  int nout = 0;
  skip_space(ps);
  if (*ps->p == '%') {
    do {
      if (nout == 64)
        return fail(ps, "too many outputs");
      if (!(names[nout] = value_name(ps)))
        return fail(ps, "expected a value name like %s", "%x");
      if (ir_value_find(g, names[nout]))
        return fail(ps, "'%%%s' is defined twice", names[nout]);
      for (int k = 0; k < nout; k++)
        if (!strcmp(names[k], names[nout]))
          return fail(ps, "'%%%s' is defined twice", names[nout]);
      memset(&types[nout], 0, sizeof types[nout]);
      if (expect(ps, ':') || type(ps, &types[nout]))
        return -1;
      nout++;
    } while (eat(ps, ','));
    if (expect(ps, '='))
      return -1;
  }
  const char *opname = word(ps);
  IrOp op = opname ? ir_op_lookup(opname) : OP_COUNT;
  if (op == OP_COUNT)
    return fail(ps, "unknown op '%s'", opname ? opname : "");
  IrValue *in[64];
  int nin = 0;
  if (expect(ps, '('))
    return -1;
  if (!eat(ps, ')')) {
    do {
      if (nin == 64)
        return fail(ps, "too many inputs");
      if (!(in[nin++] = value_ref(ps)))
        return -1;
    } while (eat(ps, ','));
    if (expect(ps, ')'))
      return -1;
  }
  int want_in = ir_op_nin(op), want_out = ir_op_nout(op);
  if ((want_in >= 0 && nin != want_in) || (want_out >= 0 && nout != want_out))
    return fail(ps, "wrong number of inputs or outputs for '%s'", opname);
  IrNode *n = ir_node_new(g, op, in, nin, nout);
  for (int i = 0; i < nout; i++) {
    ir_value_set_name(g, n->out[i], names[i]);
    n->out[i]->dtype = types[i].dtype;
    n->out[i]->host = types[i].host;
    ir_value_set_shape(n->out[i], types[i].rank, types[i].shape);
  }
  n->loc = (IrLoc){0};
  while (!at_eol(ps) && *ps->p != '#' && *ps->p != '@')
    if (attribute(ps, n))
      return -1;
  if (eat(ps, '#')) {
    int64_t b;
    if (integer(ps, &b))
      return -1;
    n->block = (int)b;
    if (eat(ps, '.')) {
      if (integer(ps, &b))
        return -1;
      n->use = (int)b;
    }
  }
  if (loc(ps, &n->loc))
    return -1;
  for (int i = 0; i < nout; i++)
    n->out[i]->loc = n->loc;
  // Check the declared shapes now, so that an error names this line.
  if (ir_infer(g, n, ps->d)) {
    if (ps->d) // the error is in this text, whatever @location the node carries
      ps->d->loc = (IrLoc){ps->file, ps->lineno, 1};
    return -1;
  }
  return 0;
}

static int line(Parser *ps) {
  IrGraph *g = ps->g;
  if (at_eol(ps) || *ps->p == ';')
    return 0;
  if (keyword(ps, "graph")) {
    const char *s = string(ps);
    if (!s)
      return fail(ps, "expected a quoted graph name");
    g->name = s;
  } else if (keyword(ps, "after")) {
    const char *name = word(ps);
    if (!name)
      return fail(ps, "expected the name of a pass");
    g->after = name;
  } else if (keyword(ps, "sym")) {
    const char *name = word(ps);
    if (!name)
      return fail(ps, "expected a symbol name");
    int var = symtab_add(&g->syms, name);
    if (var < 0)
      return fail(ps, "too many symbols (at most 16) at '%s'", name);
    if (eat(ps, '=')) {
      int64_t v;
      const char *at = ps->p;
      if (integer(ps, &v))
        return -1;
      if (v < 1) {
        ps->p = at;
        return fail(ps, "dim %s is %lld; a dim is at least 1", name, (long long)v);
      }
      symtab_bind(&g->syms, var, v);
    }
  } else if (keyword(ps, "input")) {
    return declaration(ps, ROLE_INPUT);
  } else if (keyword(ps, "param")) {
    return declaration(ps, ROLE_PARAM);
  } else if (keyword(ps, "state")) {
    return declaration(ps, ROLE_STATE);
  } else if (keyword(ps, "const")) {
    return declaration(ps, ROLE_CONST);
  } else if (keyword(ps, "bucket")) {
    return declaration(ps, ROLE_BUCKET);
  } else if (keyword(ps, "copy")) {
    return declaration(ps, ROLE_COPY);
  } else if (keyword(ps, "forward")) {
    g->cur_phase = PHASE_FORWARD;
  } else if (keyword(ps, "backward")) {
    g->cur_phase = PHASE_BACKWARD;
  } else if (keyword(ps, "update")) {
    g->cur_phase = PHASE_UPDATE;
  } else if (keyword(ps, "loss")) {
    return (g->loss = value_ref(ps)) ? 0 : -1;
  } else if (keyword(ps, "grad")) {
    IrValue *p = value_ref(ps), *gr = p ? value_ref(ps) : NULL;
    if (!gr)
      return -1;
    p->grad = gr;
  } else {
    return node_line(ps);
  }
  return 0;
}

IrGraph *ir_parse(const char *text, const char *filename, IrDiag *d) {
  Parser ps = {.g = ir_graph_new("model"), .p = text, .line = text, .lineno = 1,
               .file = filename ? filename : "<ir>", .d = d};
  ps.file = ir_strdup(&ps.g->arena, ps.file);
  while (*ps.p) {
    skip_space(&ps);
    if (*ps.p == '#' && ps.p == ps.line) // comment line
      while (*ps.p && *ps.p != '\n')
        ps.p++;
    bool bad = *ps.p != '#' && line(&ps);
    if (!bad && !at_eol(&ps))
      bad = fail(&ps, "unexpected text at the end of the line");
    if (bad) {
      // The message may name strings of the graph; keep the caller's file name.
      if (d && d->loc.file)
        d->loc.file = filename ? filename : "<ir>";
      ir_graph_free(ps.g);
      return NULL;
    }
    if (*ps.p == '\n')
      ps.p++;
    ps.line = ps.p;
    ps.lineno++;
  }
  ir_mark_batch_dims(ps.g);
  return ps.g;
}
