// The IR as text (read back by ir/parse.c) and as Graphviz.
//
//   graph gpt2
//   after optimizer                      (the last pass that changed the graph)
//   sym B = 4
//   input %idx : i32[B,T] tokens(V)
//   param %wte : f32[V,C] normal(0.02)
//   state %adamw.m.wte : f32[V,C] zeros
//   state %adamw.m.b1.host : host f32[2048] zeros   (offload: in host memory)
//   const %mask : f32[2,2] data[0.0, -inf, 0.0*2]   (ONNX constants: the values, v*n for n
//                                                    in a row; parameters' data is not printed)
//   forward
//     %x : f32[B,T,C] = embedding(%wte, %idx) @"gpt2.mtc":20:9
//     %q : f32[B,T,C], %k : f32[B,T,C] = split(%h) axis=2 sizes=[C,C] #1 @"gpt2.mtc":31:3
//   backward
//     ...
//   update
//     adamw(%wte, %grad.wte, %adamw.m.wte, %adamw.v.wte) beta1=0.9 ...
//   loss %loss
//   grad %wte %grad.wte
//
// `#N` is the block instance (`#N.U`: its U-th use of layers that run more
// than once), `@"file":line:col` the source location
// (`@"name"` alone: an ONNX node name).
#define _GNU_SOURCE
#include "ir.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static void print_quoted(FILE *f, const char *s) {
  fputc('"', f);
  for (const char *p = s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fputc('\\', f);
    fputc(*p, f);
  }
  fputc('"', f);
}

// Names made only of [A-Za-z0-9_.] print bare, others quoted.
static void print_name(FILE *f, const char *s) {
  bool bare = *s != '\0';
  for (const char *p = s; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '_' && *p != '.')
      bare = false;
  fputc('%', f);
  if (bare)
    fputs(s, f);
  else
    print_quoted(f, s);
}

static void print_sym(FILE *f, const Sym *s, const SymTab *tab) {
  char buf[1024];
  sym_print(buf, sizeof buf, s, tab);
  fputs(buf, f);
}

// Floats always carry a '.' or an exponent so they read back as floats.
static void print_float(FILE *f, double x) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.9g", x);
  if (!strpbrk(buf, ".eEni"))
    strcat(buf, ".0");
  fputs(buf, f);
}

static void print_type(FILE *f, const IrGraph *g, const IrValue *v) {
  fprintf(f, "%s%s[", v->host ? "host " : "", ir_dtype_name(v->dtype));
  for (int i = 0; i < v->rank; i++) {
    if (i)
      fputc(',', f);
    print_sym(f, v->shape[i], &g->syms);
  }
  fputc(']', f);
}

// A constant's values, runs of one value as v*n: a causal mask of T x T takes 2T runs.
static void print_data(FILE *f, const IrGraph *g, const IrValue *v) {
  int64_t n = 0;
  if (!v->data || sym_eval(ir_numel((IrGraph *)g, v), &g->syms, &n))
    return;
  const int32_t *iv = v->data;
  const float *fv = v->data;
  bool is_int = v->dtype == DT_I32;
  fputc('[', f);
  for (int64_t i = 0, run; i < n; i += run) {
    for (run = 1; i + run < n; run++)
      if (is_int ? iv[i + run] != iv[i] : memcmp(&fv[i + run], &fv[i], sizeof(float)))
        break;
    if (i)
      fputs(", ", f);
    if (is_int)
      fprintf(f, "%d", (int)iv[i]);
    else
      print_float(f, fv[i]);
    if (run > 1)
      fprintf(f, "*%lld", (long long)run);
  }
  fputc(']', f);
}

static void print_init(FILE *f, const IrGraph *g, const IrValue *v) {
  IrInit init = v->init;
  switch (init.kind) {
  case INIT_NONE: break;
  case INIT_ZEROS: fputs(" zeros", f); break;
  case INIT_ONES: fputs(" ones", f); break;
  case INIT_NORMAL:
    fputs(" normal(", f);
    print_float(f, init.std);
    fputc(')', f);
    break;
  case INIT_DATA:
    fputs(" data", f);
    if (v->role == ROLE_CONST) // parameters' values (the weights) are not printed
      print_data(f, g, v);
    break;
  }
}

static void print_attr(FILE *f, const IrGraph *g, const IrAttr *a) {
  fprintf(f, " %s=", a->name);
  switch (a->kind) {
  case ATTR_INT: fprintf(f, "%lld", (long long)a->i); break;
  case ATTR_FLOAT: print_float(f, a->f); break;
  case ATTR_STR: print_quoted(f, a->s); break;
  case ATTR_INTS:
  case ATTR_SYMS:
    fputc('[', f);
    for (int i = 0; i < a->n; i++) {
      if (i)
        fputc(',', f);
      if (a->kind == ATTR_INTS)
        fprintf(f, "%lld", (long long)a->ints[i]);
      else
        print_sym(f, a->syms[i], &g->syms);
    }
    fputc(']', f);
    break;
  }
}

static void print_loc(FILE *f, IrLoc loc) {
  if (!loc.file)
    return;
  fputs(" @", f);
  print_quoted(f, loc.file);
  if (loc.line > 0)
    fprintf(f, ":%d:%d", loc.line, loc.col);
}

static void print_node(FILE *f, const IrGraph *g, const IrNode *n) {
  fputs("  ", f);
  for (int i = 0; i < n->nout; i++) {
    if (i)
      fputs(", ", f);
    print_name(f, n->out[i]->name);
    fputs(" : ", f);
    print_type(f, g, n->out[i]);
  }
  if (n->nout)
    fputs(" = ", f);
  fprintf(f, "%s(", ir_op_name(n->op));
  for (int i = 0; i < n->nin; i++) {
    if (i)
      fputs(", ", f);
    print_name(f, n->in[i]->name);
  }
  fputc(')', f);
  for (int i = 0; i < n->nattr; i++)
    print_attr(f, g, &n->attr[i]);
  if (n->block)
    fprintf(f, " #%d", n->block);
  if (n->block && n->use)
    fprintf(f, ".%d", n->use);
  print_loc(f, n->loc);
  fputc('\n', f);
}

static const char *input_kind_name(IrInputKind k) {
  switch (k) {
  case INPUT_TOKENS: return "tokens";
  case INPUT_TARGETS: return "targets";
  case INPUT_CLASSES: return "classes";
  case INPUT_MASK: return "mask";
  case INPUT_LABELS: return "labels";
  case INPUT_RANDN: break;
  }
  return NULL;
}

void ir_print(FILE *f, const IrGraph *g) {
  fputs("graph ", f);
  print_quoted(f, g->name);
  fputc('\n', f);
  if (g->after)
    fprintf(f, "after %s\n", g->after);
  for (int i = 0; i < g->syms.n; i++) {
    fprintf(f, "sym %s", g->syms.name[i]);
    if (g->syms.bound[i])
      fprintf(f, " = %lld", (long long)g->syms.value[i]);
    fputc('\n', f);
  }
  static const char *const decl[] = {[ROLE_INPUT] = "input", [ROLE_PARAM] = "param",
                                     [ROLE_STATE] = "state", [ROLE_CONST] = "const",
                                     [ROLE_BUCKET] = "bucket", [ROLE_COPY] = "copy"};
  IrRole order[] = {ROLE_INPUT, ROLE_PARAM, ROLE_STATE, ROLE_CONST, ROLE_BUCKET, ROLE_COPY};
  for (int r = 0; r < 6; r++)
    for (int i = 0; i < g->nvalues; i++) {
      const IrValue *v = g->values[i];
      if (v->role != order[r] || v->producer)
        continue;
      fprintf(f, "%s ", decl[v->role]);
      print_name(f, v->name);
      fputs(" : ", f);
      print_type(f, g, v);
      const char *kind = v->role == ROLE_INPUT ? input_kind_name(v->input_kind) : NULL;
      if (kind) {
        fprintf(f, " %s(", kind);
        print_sym(f, v->range, &g->syms);
        fputc(')', f);
      }
      if (v->role != ROLE_INPUT)
        print_init(f, g, v);
      print_loc(f, v->loc);
      fputc('\n', f);
    }
  static const char *const phase[] = {"forward", "backward", "update"};
  int cur = -1;
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    if ((int)n->phase != cur) {
      cur = (int)n->phase;
      fprintf(f, "%s\n", phase[cur]);
    }
    print_node(f, g, n);
  }
  if (g->loss) {
    fputs("loss ", f);
    print_name(f, g->loss->name);
    fputc('\n', f);
  }
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if (v->role == ROLE_PARAM && v->grad) {
      fputs("grad ", f);
      print_name(f, v->name);
      fputc(' ', f);
      print_name(f, v->grad->name);
      fputc('\n', f);
    }
  }
}

char *ir_print_str(const IrGraph *g) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  IR_ASSERT(f);
  ir_print(f, g);
  fclose(f);
  return buf;
}

// ---- Graphviz ------------------------------------------------------------------

void ir_print_dot(FILE *f, const IrGraph *g) {
  static const char *const color[] = {"lightblue", "lightpink", "khaki"};
  fprintf(f, "digraph \"%s\" {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n",
          g->name);
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if (v->producer)
      continue;
    fprintf(f, "  v%d [shape=ellipse, label=\"%s\\n", v->id, v->name);
    print_type(f, g, v);
    fputs("\"];\n", f);
  }
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    fprintf(f, "  n%d [shape=box, style=filled, fillcolor=%s, label=\"%s", n->id,
            color[n->phase], ir_op_name(n->op));
    if (n->block)
      fprintf(f, " #%d", n->block);
    fputs("\"];\n", f);
    for (int k = 0; k < n->nin; k++) {
      const IrValue *v = n->in[k];
      if (v->producer)
        fprintf(f, "  n%d -> n%d [label=\"%s\"];\n", v->producer->id, n->id,
                ir_shape_str((IrGraph *)g, v));
      else
        fprintf(f, "  v%d -> n%d;\n", v->id, n->id);
    }
  }
  fputs("}\n", f);
}
