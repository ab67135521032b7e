// Attributes: a default is the same wherever the attribute is read. A slice
// without axis= is shaped, lowered and run along the same axis.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    ir_graph_free(g);
    return;
  }
  IrNode *sl = first_node(g, OP_SLICE), *bwd = first_node(g, OP_SLICE_BWD);
  IR_ASSERT(sl && bwd);
  // rt_slice_axis(out, x, outer, xdim, inner, start, step, len), the same for the backward
  const IrNode *nodes[2] = {sl, bwd};
  for (int k = 0; k < 2; k++) {
    CgCall call;
    int nc = cg_lower(g, nodes[k], &call, 1, &d);
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
  CgInterp *it = cg_interp_new(g, &d);
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
  check_slice_default_axis();
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail ? 1 : 0;
}
