// Attributes (ir/attrs.def): the table, defaults read through the accessors
// and the internal error on a read the table does not declare, the
// verifier's checks, the IR parser's errors, and a default that is the same
// wherever the attribute is read (a slice without axis= is shaped, lowered
// and run along the same axis).
#define _POSIX_C_SOURCE 200809L // fork, dup2, setrlimit
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "codegen.h"
#include "passes.h"

static IrNode *first_node(IrGraph *g, IrOp op) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == op)
      return g->nodes[i];
  return NULL;
}

static int64_t eval_arg(IrGraph *g, const CgCall *c, int i) {
  int64_t x = -1;
  if (i >= c->nargs || c->args[i].kind != CG_INT || sym_eval(c->args[i].i, &g->syms, &x))
    return -1;
  return x;
}

static IrGraph *parse_ok(const char *text, const char *what) {
  IrDiag d = {0};
  IrGraph *g = ir_parse(text, what, &d);
  if (!check(g != NULL, "%s parses: %s", what, d.msg))
    return NULL;
  return g;
}

// ---- the table -------------------------------------------------------------------------------

// Every declaration names an op, once; only INT and FLOAT attributes have a default.
static void check_table(void) {
  int decls = 0, dups = 0, bad = 0;
  for (int op = 0; op < OP_COUNT; op++) {
    const IrAttrDecl *a;
    for (int i = 0; (a = ir_op_attr_at((IrOp)op, i)); i++) {
      decls++;
      dups += ir_op_attr((IrOp)op, a->name) != a;
      bad += (int)a->op != op || !a->name[0] ||
             (a->kind != ATTR_INT && a->kind != ATTR_FLOAT && a->dflt != 0) ||
             (a->required && a->dflt != 0);
    }
  }
  check(decls > 30 && dups == 0 && bad == 0, "attrs.def: %d declarations, %d repeated, %d odd",
        decls, dups, bad);
  char list[256];
  check(!strcmp(ir_op_attr_list(OP_SLICE, list, sizeof list), "its attributes: axis, start, step"),
        "slice's attribute list: '%s'", list);
  check(!strcmp(ir_op_attr_list(OP_GELU, list, sizeof list), "it has none"),
        "gelu's attribute list: '%s'", list);
}

// A node that sets nothing reads the table's defaults.
static void check_defaults(void) {
  IrGraph *g = parse_ok("sym N = 4\nsym C = 6\nparam %x : f32[N,C]\nparam %w : f32[C]\n"
                        "param %q : f32[2,N,C]\ninput %t : i32[N] classes(C)\nforward\n"
                        "%m : f32[N,N] = matmul(%x, %x) tb=1\n"
                        "%l : f32[N,C] = layernorm(%x, %w, %w)\n"
                        "%a : f32[2,N,C], %e : f32[2,N] = attention(%q, %q, %q)\n"
                        "%p : f32[N,2], %r : f32[N,4] = split(%x) sizes=[2,4]\n"
                        "%s : f32[1,C] = slice(%x)\n"
                        "%n : f32[] = nll_loss(%x, %t)\n"
                        "%u : f32[N] = sum(%x) axes=[1]\n"
                        "%v : f32[] = mean(%x)\n",
                        "defaults.ir");
  if (!g)
    return;
  const IrNode *mm = g->nodes[0], *ln = g->nodes[1], *at = g->nodes[2], *sp = g->nodes[3],
               *sl = g->nodes[4], *nl = g->nodes[5], *su = g->nodes[6], *me = g->nodes[7];
  check(ir_attr_i(mm, "ta") == 0 && ir_attr_i(mm, "tb") == 1 && ir_attr_i(mm, "sum_batch") == 0,
        "matmul: ta 0 by default, tb as set");
  check(ir_attr_f(ln, "eps") == 1e-5, "layernorm: eps %g by default", ir_attr_f(ln, "eps"));
  check(ir_attr_i(at, "causal") == 1, "attention: causal by default");
  int n;
  const Sym *const *sizes = ir_attr_syms(sp, "sizes", &n);
  check(ir_attr_i(sp, "axis") == -1 && sizes && n == 2 && ir_eval(g, sizes[1]) == 4,
        "split: axis -1 by default; sizes=[2,4] read as formulas");
  check(ir_attr_i(sl, "axis") == 0 && ir_attr_i(sl, "start") == 0 && ir_attr_i(sl, "step") == 1,
        "slice: axis 0, start 0, step 1 by default");
  check(ir_attr_i(nl, "sum") == 0 && ir_attr_i(nl, "ignore_index") == -100,
        "nll_loss: mean, ignore_index -100 by default");
  const int64_t *axes = ir_attr_ints(su, "axes", &n);
  check(axes && n == 1 && axes[0] == 1 && ir_attr_ints(me, "axes", &n) == NULL && n == 0,
        "sum: axes as set; mean without axes reads none (every dim)");
  check(me->out[0]->rank == 0, "mean without axes reduces every dim");
  ir_graph_free(g);
}

// Reading an attribute the op does not declare, or as another kind, stops
// with an internal error that names the op and the attribute.
static void expect_bad_read(void (*read)(const IrNode *), const IrNode *n, const char *want) {
  FILE *err = tmpfile();
  IR_ASSERT(err);
  fflush(stdout);
  pid_t pid = fork();
  IR_ASSERT(pid >= 0);
  if (pid == 0) {
    setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0}); // no core file for the expected abort
    dup2(fileno(err), 2);
    read(n);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  char msg[512] = "";
  rewind(err);
  if (!fgets(msg, sizeof msg, err))
    msg[0] = '\0';
  fclose(err);
  check(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(msg, want),
        "bad read: want an abort with '%s', got status %d '%s'", want, status, msg);
}

static void read_eps(const IrNode *n) { (void)ir_attr_f(n, "eps"); }
static void read_axis_as_float(const IrNode *n) { (void)ir_attr_f(n, "axis"); }

static void check_bad_reads(void) {
  IrGraph *g = parse_ok("sym N = 4\nparam %x : f32[N]\nforward\n%y : f32[N] = gelu(%x)\n"
                        "%z : f32[2] = slice(%x)\n",
                        "reads.ir");
  if (!g)
    return;
  expect_bad_read(read_eps, g->nodes[0],
                  "attribute 'eps' of gelu read as a float, but ir/attrs.def does not declare it");
  expect_bad_read(read_axis_as_float, g->nodes[1],
                  "attribute 'axis' of slice read as a float, but ir/attrs.def declares an integer");
  ir_graph_free(g);
}

// ---- the verifier ------------------------------------------------------------------------------

static const char verify_ir[] = "sym N = 4\nsym C = 3\nparam %x : f32[N,C]\nforward\n"
                                "%y : f32[2,C] = slice(%x) start=1\n"
                                "%t : f32[C,N] = transpose(%x) perm=[1,0]\n"
                                "%g : f32[N,C] = gelu(%x)\n";

// Set up by `spoil` on one node of verify_ir, then the verifier must fail
// with `want`; the node is restored afterwards.
static void expect_verify_error(int node, void (*spoil)(IrGraph *, IrNode *), const char *want) {
  IrGraph *g = parse_ok(verify_ir, "verify.ir");
  if (!g)
    return;
  IrNode *n = g->nodes[node];
  spoil(g, n);
  IrDiag d = {0};
  int rc = ir_verify(g, "spoil", &d);
  check(rc != 0 && strstr(d.msg, want) && strstr(d.msg, "(after pass 'spoil')"),
        "verifier on a spoiled %s: want '%s', got '%s'", ir_op_name(n->op), want, d.msg);
  ir_graph_free(g);
}

static void undeclared(IrGraph *g, IrNode *n) { ir_set_int(g, n, "axes", 1); }
static void undeclared_none(IrGraph *g, IrNode *n) { ir_set_float(g, n, "approximate", 1.0); }
static void wrong_kind(IrGraph *g, IrNode *n) { ir_set_float(g, n, "axis", 0.0); }
static void wrong_list(IrGraph *g, IrNode *n) {
  const Sym *s[2] = {sym_const(&g->arena, 1), sym_const(&g->arena, 0)};
  ir_set_syms(g, n, "perm", s, 2);
}
static void missing(IrGraph *g, IrNode *n) {
  (void)g;
  n->nattr = 0;
}

static void check_verifier(void) {
  IrGraph *g = parse_ok(verify_ir, "verify.ir");
  IrDiag d = {0};
  check(g && ir_verify(g, "spoil", &d) == 0, "the unspoiled graph verifies: %s", d.msg);
  ir_graph_free(g);
  expect_verify_error(0, undeclared,
                      "slice has no attribute 'axes' (its attributes: axis, start, step)");
  expect_verify_error(2, undeclared_none, "gelu has no attribute 'approximate' (it has none)");
  expect_verify_error(0, wrong_kind, "slice: attribute 'axis' must be an integer, not a float");
  expect_verify_error(1, wrong_list, "transpose: attribute 'perm' must be a list of integers, "
                                     "not a list of formulas");
  expect_verify_error(1, missing, "transpose: attribute 'perm' is required");
}

// ---- the parser --------------------------------------------------------------------------------

// `line` (the 5th line of a small graph) must fail at the column of `at` in
// it (0: any column) with a message containing `want`.
static void expect_parse_error(const char *line, const char *at, const char *want) {
  char text[1024];
  snprintf(text, sizeof text,
           "sym N = 4\nsym C = 3\nparam %%x : f32[N,C]\nforward\n%s\n", line);
  IrDiag d = {0};
  IrGraph *g = ir_parse(text, "attrs.ir", &d);
  int col = at ? (int)(strstr(line, at) - line) + 1 : 0;
  check(!g && d.loc.line == 5 && (!at || d.loc.col == col) && strstr(d.msg, want),
        "'%s': want 5:%d '%s', got %d:%d '%s'", line, col, want, d.loc.line, d.loc.col, d.msg);
  ir_graph_free(g);
}

static void check_parser(void) {
  expect_parse_error("%y : f32[2,C] = slice(%x) axes=1 start=1", "axes=",
                     "slice has no attribute 'axes' (its attributes: axis, start, step)");
  expect_parse_error("%y : f32[N,C] = gelu(%x) approximate=\"tanh\"", "approximate",
                     "gelu has no attribute 'approximate' (it has none)");
  expect_parse_error("%y : f32[2,C] = slice(%x) axis=0.0", "0.0",
                     "slice: attribute 'axis' must be an integer, not a float");
  expect_parse_error("%t : f32[C,N] = transpose(%x) perm=1", "1",
                     "transpose: attribute 'perm' must be a list of integers, not an integer");
  expect_parse_error("%t : f32[C,N] = transpose(%x) perm=[N,0]", "[N",
                     "must be a list of integers, not a list of formulas");
  expect_parse_error("%y : f32[N,C] = scale(%x) s=\"2\"", "\"2",
                     "scale: attribute 's' must be a float, not a string");
  expect_parse_error("%t : f32[C,N] = transpose(%x)", NULL,
                     "transpose: attribute 'perm' is required");
  // ir_diag_print shows where.
  IrDiag d = {0};
  IrGraph *g = ir_parse("param %x : f32[2]\nforward\n%y : f32[2] = relu(%x) alpha=0.1\n",
                        "where.ir", &d);
  FILE *f = tmpfile();
  char buf[512] = "";
  if (f) {
    ir_diag_print(f, &d);
    rewind(f);
    if (!fgets(buf, sizeof buf, f))
      buf[0] = '\0';
    fclose(f);
  }
  check(!g && !strcmp(buf, "where.ir:3:24: error: relu has no attribute 'alpha' (it has none)\n"),
        "diagnostic: '%s'", buf);
  ir_graph_free(g);
}

// An integer written for a FLOAT attribute is read as a float (and printed
// as one), so print(parse(print(g))) == print(g) holds.
static void check_int_for_float(void) {
  IrGraph *g = parse_ok("sym N = 4\nparam %x : f32[N]\nparam %w : f32[N]\nforward\n"
                        "%s : f32[N] = scale(%x) s=2 b=-1\n"
                        "%l : f32[N] = layernorm(%s, %w, %w) eps=0\n",
                        "int_for_float.ir");
  if (!g)
    return;
  check(ir_attr_f(g->nodes[0], "s") == 2.0 && ir_attr_f(g->nodes[0], "b") == -1.0 &&
            ir_attr_f(g->nodes[1], "eps") == 0.0,
        "s=2 b=-1 eps=0 read as floats");
  char *a = ir_print_str(g);
  check(strstr(a, "scale(%x) s=2.0 b=-1.0") && strstr(a, "eps=0.0"), "printed as floats:\n%s", a);
  IrDiag d = {0};
  IrGraph *h = ir_parse(a, "printed.ir", &d);
  char *b = h ? ir_print_str(h) : NULL;
  check(b && !strcmp(a, b), "round trip: %s", h ? "differs" : d.msg);
  free(a);
  free(b);
  ir_graph_free(h);
  ir_graph_free(g);
}

// ---- slice without axis= ---------------------------------------------------------------------

// x[1:3, :] of a 4x3 x: axis 0, ONNX Slice's default. The shape rule used to
// take axis -1 and the lowering axis 0, so a slice the shape rule accepted
// could be lowered to write past its buffer.
static const char slice_ir[] = "graph \"slice\"\n"
                               "sym N = 4\nsym C = 3\n"
                               "param %x : f32[N,C] normal(1.0)\n"
                               "forward\n"
                               "  %y : f32[2,C] = slice(%x) start=1\n"
                               "  %loss : f32[] = sum(%y)\n"
                               "loss %loss\n";

static void check_slice_default_axis(void) {
  IrDiag d = {0};
  IrGraph *g = ir_parse(slice_ir, "slice.ir", &d);
  PassCtx ctx = {.opt = pass_default_options(), .diag = &d};
  if (!check(g && pass_run_all(g, &ctx) == 0, "slice without axis=: %s", d.msg)) {
    pass_memplan_free(ctx.mem);
    ir_graph_free(g);
    return;
  }
  IrNode *sl = first_node(g, OP_SLICE), *bwd = first_node(g, OP_SLICE_BWD);
  IR_ASSERT(sl && bwd);
  // rt_slice_axis(out, x, outer, xdim, inner, start, step, len), the same for the backward
  const IrNode *nodes[2] = {sl, bwd};
  for (int k = 0; k < 2; k++) {
    CgCall call;
    int nc = cg_lower(g, ctx.mem, nodes[k], &call, 1, &d);
    check(nc == 1 && eval_arg(g, &call, 2) == 1 && eval_arg(g, &call, 3) == 4 &&
              eval_arg(g, &call, 4) == 3 && eval_arg(g, &call, 5) == 1 &&
              eval_arg(g, &call, 6) == 1 && eval_arg(g, &call, 7) == 2,
          "%s without axis= lowers along axis 0: outer %lld, dim %lld, inner %lld, start %lld, "
          "step %lld, len %lld",
          ir_op_name(nodes[k]->op), (long long)eval_arg(g, &call, 2),
          (long long)eval_arg(g, &call, 3), (long long)eval_arg(g, &call, 4),
          (long long)eval_arg(g, &call, 5), (long long)eval_arg(g, &call, 6),
          (long long)eval_arg(g, &call, 7));
  }
  // Run it: y = x[1:3] and dx = 1 on rows 1 and 2, 0 elsewhere.
  CgInterp *it = cg_interp_new(g, ctx.mem, &d);
  IR_ASSERT(it);
  cg_interp_init_params(it, 42);
  cg_interp_run(it, PHASE_FORWARD, NULL);
  IrValue *x = ir_value_find(g, "x"), *y = sl->out[0];
  const float *xv = cg_interp_f32(it, x), *yv = cg_interp_f32(it, y);
  int bad = 0;
  for (int i = 0; i < 2 * 3; i++)
    bad += yv[i] != xv[3 + i];
  check(bad == 0, "slice without axis= gives x[1:3] (%d elements differ)", bad);
  cg_interp_run(it, PHASE_BACKWARD, NULL);
  const float *dx = cg_interp_f32(it, x->grad);
  bad = 0;
  for (int i = 0; i < 4 * 3; i++)
    bad += dx[i] != (i >= 3 && i < 9 ? 1.0f : 0.0f);
  check(bad == 0, "slice_bwd without axis= fills rows 1 and 2 (%d elements differ)", bad);
  cg_interp_free(it);
  pass_memplan_free(ctx.mem);
  ir_graph_free(g);

  // A slice of the last dim is not a slice along axis 0: the shape rule says so.
  const char *last = "sym N = 4\nsym C = 3\nparam %x : f32[N,C]\nforward\n"
                     "%y : f32[N,2] = slice(%x) start=1\n";
  memset(&d, 0, sizeof d);
  g = ir_parse(last, "slice_last.ir", &d);
  check(!g && d.loc.line == 5 && strstr(d.msg, "may differ only along axis 0"),
        "slice without axis= of the last dim: line %d '%s'", d.loc.line, d.msg);
  ir_graph_free(g);
}

int main(void) {
  check_table();
  check_defaults();
  check_bad_reads();
  check_verifier();
  check_parser();
  check_int_for_float();
  check_slice_default_axis();
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail ? 1 : 0;
}
