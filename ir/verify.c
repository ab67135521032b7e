// The IR verifier: structural invariants every pass must keep.
#include "ir.h"

#include <stdlib.h>
#include <string.h>

// Re-run the shape rule on a copy of the node's outputs and compare.
static int check_shapes(IrGraph *g, IrNode *n, IrDiag *d) {
  for (int i = 0; i < n->nout; i++)
    if (n->out[i]->rank < 0)
      return ir_error(d, n->loc, "%s: output '%s' has no shape", ir_op_name(n->op),
                      n->out[i]->name);
  return ir_infer(g, n, d); // with outputs known, the rule checks them
}

int ir_verify_attrs(const IrNode *n, IrDiag *d) {
  const char *op = ir_op_name(n->op);
  for (int i = 0; i < n->nattr; i++) {
    const IrAttr *a = &n->attr[i];
    const IrAttrDecl *decl = ir_op_attr(n->op, a->name);
    if (!decl) {
      char list[256];
      return ir_error(d, n->loc, "%s has no attribute '%s' (%s)", op, a->name,
                      ir_op_attr_list(n->op, list, sizeof list));
    }
    if (a->kind != decl->kind)
      return ir_error(d, n->loc, "%s: attribute '%s' must be %s, not %s", op, a->name,
                      ir_attr_kind_name(decl->kind), ir_attr_kind_name(a->kind));
    int count = a->kind == ATTR_INTS ? a->n : a->kind == ATTR_INT || a->kind == ATTR_FLOAT;
    for (int k = 0; k < count; k++) {
      double x = a->kind == ATTR_FLOAT ? a->f : (double)(a->kind == ATTR_INT ? a->i : a->ints[k]);
      if (!(x >= decl->lo && x <= decl->hi))
        return ir_error(d, n->loc, "%s: attribute %s=%.9g is out of its range [%.9g, %.9g]", op,
                        a->name, x, decl->lo, decl->hi);
    }
  }
  const IrAttrDecl *decl;
  for (int i = 0; (decl = ir_op_attr_at(n->op, i)); i++) {
    bool set = false;
    for (int k = 0; k < n->nattr && !set; k++)
      set = !strcmp(n->attr[k].name, decl->name);
    if (decl->required && !set)
      return ir_error(d, n->loc, "%s: attribute '%s' is required (%s)", op, decl->name,
                      ir_attr_kind_name(decl->kind));
  }
  return 0;
}

int ir_verify(IrGraph *g, const char *after, IrDiag *d) {
  const char *when = after ? after : "construction";
  if (ir_check_sizes(g, d))
    return -1;
  // defined[v] = 1 once v is available in the schedule
  char *defined = calloc((size_t)g->nvalues + 1, 1);
  IR_ASSERT(defined);
  IrStrSet names = {0};
  int rc = 0;
  for (int i = 0; i < g->nvalues && !rc; i++) {
    IrValue *v = g->values[i];
    if (v->id != i)
      rc = ir_error(d, v->loc, "value '%s' has id %d at position %d (after pass '%s')", v->name,
                    v->id, i, when);
    if (!v->producer && (v->role == ROLE_INPUT || v->role == ROLE_PARAM ||
                         v->role == ROLE_STATE || v->role == ROLE_CONST || v->role == ROLE_BUCKET ||
                         v->role == ROLE_COPY))
      defined[i] = 1;
    if (!rc && !ir_strset_add(&names, v->name))
      rc = ir_error(d, v->loc, "two values are named '%s' (after pass '%s')", v->name, when);
  }
  for (int i = 0; i < g->nnodes && !rc; i++) {
    IrNode *n = g->nodes[i];
    if (i > 0 && n->phase < g->nodes[i - 1]->phase)
      rc = ir_error(d, n->loc, "%s node #%d is out of phase order (after pass '%s')",
                    ir_op_name(n->op), i, when);
    for (int k = 0; k < n->nin && !rc; k++) {
      const IrValue *x = n->in[k]; // a value placed in a bucket is there once the bucket is
      if (!x->producer && x->bucket && defined[x->bucket->id])
        defined[x->id] = 1;
      if (!defined[x->id])
        rc = ir_error(d, n->loc, "%s reads '%s' before it is defined (after pass '%s')",
                      ir_op_name(n->op), n->in[k]->name, when);
      else if (x->host && n->op != OP_TO_DEVICE && n->op != OP_FROM_HOST &&
               n->op != OP_COPY_WAIT && n->op != OP_UNSHARD && ir_op_kind(n->op) != KIND_OPT &&
               !(n->op == OP_CAST && n->out[0]->host) &&
               !((n->op == OP_ACCUMULATE || n->op == OP_ASSIGN) && n->in[0]->host &&
                 n->in[1]->host))
        rc = ir_error(d, n->loc, "%s reads '%s', which is in host memory: only to_device, "
                      "from_host, copy_wait, unshard, updates, and casts, assigns and sums into "
                      "host memory do (after pass '%s')",
                      ir_op_name(n->op), x->name, when);
      else if (x->host && x->bucket)
        rc = ir_error(d, n->loc, "'%s' is in host memory and placed in the device bucket '%s' "
                      "(after pass '%s')", x->name, x->bucket->name, when);
    }
    for (int k = 0; k < n->nout && !rc; k++) {
      if (n->out[k]->producer != n || defined[n->out[k]->id])
        rc = ir_error(d, n->loc, "'%s' has more than one producer (after pass '%s')",
                      n->out[k]->name, when);
      defined[n->out[k]->id] = 1;
    }
    if (!rc && (ir_verify_attrs(n, d) || check_shapes(g, n, d))) {
      size_t len = strlen(d->msg);
      snprintf(d->msg + len, sizeof d->msg - len, " (after pass '%s')", when);
      rc = -1;
    }
  }
  if (!rc && g->loss && (g->loss->rank != 0 || g->loss->dtype != DT_F32))
    rc = ir_error(d, g->loss->loc, "the loss '%s' must be a scalar f32, not %s%s", g->loss->name,
                  ir_dtype_name(g->loss->dtype), ir_shape_str(g, g->loss));
  free(defined);
  ir_strset_free(&names);
  return rc;
}
