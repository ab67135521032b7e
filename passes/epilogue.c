// Epilogues: a GEMM adds a linear layer's bias, and applies the GELU after it, as it writes its
// product (cuBLASLt's epilogues on a GPU; the CPU's GEMM does the same to each block of the
// product it finishes), so that neither is a pass of its own over the product:
//
//   y = add(matmul(a, b), bias)               ->  y = matmul_bias(a, b, bias)
//   z = gelu(y), y as above                   ->  z, y = matmul_bias(a, b, bias) act=1
//
// and, backward, adds the bias's gradient up as its weight's gradient reads dy (cuBLASLt's
// BGRADA and BGRADB):
//
//   db = sum_to(dy), dw = matmul(x, dy) ta=1  ->  dw, db = matmul_bgrad(x, dy) ta=1 of=1
//
// It runs after the passes that lay the program out (autodiff, precision, recompute, the
// parallel lowering), so each of them sees plain matmuls, adds and GELUs, and the fused node
// is what the memory plan places and the program runs. A product fuses when
//   - the add alone reads it (a row-parallel layer's partial product, all-reduced before its
//     bias is added, does not; nor a product the backward reads), in its phase and block,
//   - the other side of the add is a bias [N], N the product's last dim, made before the
//     matmul (a parameter, or its working copy), and not summed over a batch (sum_batch),
//   - the operands, the bias and the outputs have one float type (the kernel's T).
// The GELU (tanh) joins when it reads the add's output in the same phase and block; the add's
// output stays, as the fused node's second output, for the GELU's backward. A sum_to into a
// vector of dy's last dim joins the first matmul after it in its block that reads dy with
// that dim not contracted and every other summed, in one GEMM, into a gradient of its type,
// before anything reads the sums. The fused node takes the matmul's place in the schedule and
// the outputs of the nodes it takes in, so every reader is unchanged; their nodes go.
//
// The classifier (llm.c's): the loss and its gradient from one reading of each row of logits,
//
//   loss = cross_entropy(lg, t), dlg = cross_entropy_bwd(d.loss, lg, t)
//                                      ->  loss, dlg = cross_entropy_fused(lg, t) dloss=v
//
// in forward, where d.loss is backward's seed (autodiff's fill marked loss_seed, of value v)
// and the two alone read the logits (not recomputed in backward; not vocabulary-parallel).
// The kernel writes the gradient over the logits (passes/memplan.c) but in eval mode
// (validation and sampling read the loss and the logits alone).
//
// A residual's add and the layernorm after it (llm.c's fused residual + layernorm):
//
//   r = add(a, b), y = layernorm(r, w, bias)  ->  r, y = add_layernorm(a, b, w, bias)
//
// where a, b and r have one shape and type (no broadcast), the add and the norm are in one phase
// and block, the norm's rows are whole (no split_axis) and its weights are made before the add,
// at whose place the fused node runs (r stays: the next residual and the norm's backward read
// it). The kernel keeps each row of r in registers for the norm, one pass over it the fewer.
//
// The planner prices the graph before this pass by the same rule (pass_epilogues,
// solver/cost.c).
#include "passes.h"

#include <stdlib.h>

// The matmul whose product `add` (an add) adds a bias to as an epilogue, or NULL; `reads`
// counts each value's readers.
static IrNode *bias_product(const IrNode *add, const int *reads) {
  for (int side = 0; side < 2; side++) {
    IrValue *p = add->in[side], *b = add->in[1 - side];
    IrNode *mm = p->producer;
    if (!mm || mm->op != OP_MATMUL || ir_attr_i(mm, "sum_batch") || reads[p->id] != 1 ||
        mm->phase != add->phase || mm->block != add->block)
      continue;
    const IrValue *y = add->out[0];
    if (b->rank != 1 || p->rank < 2 || !ir_same_shape(p, y) ||
        !sym_eq(b->shape[0], p->shape[p->rank - 1]))
      continue;
    IrDType t = mm->in[0]->dtype;
    if (!ir_is_float(t) || mm->in[1]->dtype != t || b->dtype != t || p->dtype != t ||
        y->dtype != t)
      continue;
    if (b->producer && (b->producer->id < 0 || b->producer->id > mm->id))
      continue;
    return mm;
  }
  return NULL;
}

// Whether matmul mm is one GEMM whose product sums over every dim of its operands but their
// last two: both operands matrices, or batches summed as A^T B (ir_matmul_gemm's folds).
static bool one_gemm(const IrNode *mm) {
  const IrValue *a = mm->in[0], *b = mm->in[1];
  if (a->rank == 2 && b->rank == 2)
    return true;
  return ir_attr_i(mm, "sum_batch") && ir_attr_i(mm, "ta") && !ir_attr_i(mm, "tb") &&
         a->rank > 2 && b->rank > 2;
}

// The weight-gradient matmul that node `s`, a sum_to of its operand into a bias's gradient,
// joins as an epilogue (matmul_bgrad), or NULL: a matmul after s in its phase and block (and
// before s's sums are first read), into a product of s's type, that reads the same value as
// operand *of with its last dim not contracted and every other dim summed, in one GEMM.
static IrNode *bgrad_product(IrGraph *g, const IrNode *s, const int *first_read, int *of) {
  const IrValue *v = s->in[0], *db = s->out[0];
  if (db->rank != 1 || v->rank < 2 ||
      !sym_eq(db->shape[0], v->shape[v->rank - 1]))
    return NULL;
  for (int i = s->id + 1; i < first_read[db->id]; i++) {
    IrNode *mm = g->nodes[i];
    if (mm->phase != s->phase || mm->block != s->block)
      return NULL;
    if (mm->op != OP_MATMUL || mm->out[0]->dtype != db->dtype)
      continue;
    for (int k = 0; k < 2; k++) {
      if (mm->in[k] == v && ir_attr_i(mm, k ? "tb" : "ta") == !k && one_gemm(mm)) {
        *of = k;
        return mm;
      }
    }
  }
  return NULL;
}

// The cross_entropy_bwd that cross_entropy node f joins (cross_entropy_fused), or NULL.
static IrNode *classifier_bwd(IrGraph *g, const IrNode *f, const int *reads) {
  IrValue *lg = f->in[0], *t = f->in[1];
  if (f->phase != PHASE_FORWARD || reads[lg->id] != 2)
    return NULL;
  for (int i = f->id + 1; i < g->nnodes; i++) {
    IrNode *b = g->nodes[i];
    if (b->op != OP_CROSS_ENTROPY_BWD || b->in[1] != lg)
      continue;
    const IrNode *seed = b->in[0]->producer;
    bool ok = b->in[2] == t && seed && seed->op == OP_FILL && ir_attr_i(seed, "loss_seed") &&
              ir_attr_i(b, "ignore_index") == ir_attr_i(f, "ignore_index") &&
              ir_attr_i(b, "vocab") == ir_attr_i(f, "vocab") && b->out[0]->dtype == lg->dtype;
    return ok ? b : NULL;
  }
  return NULL;
}

// The add whose output layernorm node ln normalizes, with it one add_layernorm, or NULL.
static IrNode *residual_add(const IrNode *ln) {
  IrNode *add = ln->in[0]->producer;
  if (!add || add->op != OP_ADD || add->phase != ln->phase || add->block != ln->block ||
      ir_attr_i(ln, "split_axis"))
    return NULL;
  const IrValue *a = add->in[0], *b = add->in[1], *r = add->out[0];
  if (!ir_same_shape(a, r) || !ir_same_shape(b, r) || a->dtype != r->dtype ||
      b->dtype != r->dtype || !ir_is_float(r->dtype) || ln->out[0]->dtype != r->dtype)
    return NULL;
  for (int k = 1; k < 3; k++) {
    const IrValue *p = ln->in[k];
    if (p->dtype != r->dtype || (p->producer && p->producer->id > add->id))
      return NULL;
  }
  return add;
}

PassEpilogue *pass_epilogues(IrGraph *g) {
  int *reads = calloc((size_t)g->nvalues + 1, sizeof *reads);
  PassEpilogue *into = calloc((size_t)g->nnodes + 1, sizeof *into);
  bool *taken = calloc((size_t)g->nnodes + 1, sizeof *taken);   // an add that has its GELU,
  IR_ASSERT(reads && into && taken);                             // a matmul its bias gradient
  int *first_read = malloc(((size_t)g->nvalues + 1) * sizeof *first_read);
  IR_ASSERT(first_read);
  for (int v = 0; v < g->nvalues; v++)
    first_read[v] = g->nnodes;
  for (int i = g->nnodes - 1; i >= 0; i--)
    for (int k = 0; k < g->nodes[i]->nin; k++)
      reads[g->nodes[i]->in[k]->id]++, first_read[g->nodes[i]->in[k]->id] = i;
  if (g->loss)
    reads[g->loss->id]++;
  for (int i = 0; i < g->nnodes && !g->no_epilogue; i++) {
    IrNode *n = g->nodes[i], *add = n->op == OP_GELU ? n->in[0]->producer : NULL;
    int of;
    IrNode *mm;
    if (n->op == OP_ADD) {
      into[i].into = bias_product(n, reads);
    } else if (n->op == OP_CROSS_ENTROPY) {
      into[i].into = classifier_bwd(g, n, reads);
    } else if (n->op == OP_LAYERNORM && (mm = residual_add(n)) && !into[mm->id].into) {
      into[i].into = mm;
    } else if (n->op == OP_SUM_TO && (mm = bgrad_product(g, n, first_read, &of)) &&
               !taken[mm->id]) {
      into[i] = (PassEpilogue){mm, of}, taken[mm->id] = true;
    } else if (add && into[add->id].into && !taken[add->id] && add->phase == n->phase &&
               add->block == n->block && n->out[0]->dtype == add->out[0]->dtype) {
      into[i].into = into[add->id].into, taken[add->id] = true;
    }
  }
  free(reads);
  free(first_read);
  free(taken);
  return into;
}

// ---- the pass -----------------------------------------------------------------------------

// A fused node's outputs, first before second in the value table, as IR text read back numbers
// a node's outputs (the memory plan breaks ties by id).
static void swap_ids(IrGraph *g, IrValue *first, IrValue *second) {
  if (first->id < second->id)
    return;
  int a = first->id, b = second->id;
  g->values[a] = second, g->values[b] = first;
  first->id = b, second->id = a;
}

// Weight-gradient matmul mm, and sum_to s of its operand `of`: mm becomes matmul_bgrad, making
// s's sums too (at mm's place, before their first reader: bgrad_product), and s goes.
static void fuse_bgrad(IrGraph *g, IrNode *s, IrNode *mm, int of) {
  IrValue **out = ir_alloc(&g->arena, 3 * sizeof *out);
  out[0] = mm->out[0], out[1] = s->out[0];
  mm->op = OP_MATMUL_BGRAD;
  mm->out = out, mm->nout = 2;
  out[1]->producer = mm;
  ir_set_int(g, mm, "of", of);
  ir_node_remove(g, s);
  swap_ids(g, out[0], out[1]);
}

// Matmul mm, the add of a bias to its product, and the GELU after it (NULL: none): mm becomes
// matmul_bias, making the add's output (and the GELU's, first), and they go.
static void fuse_bias(IrGraph *g, IrNode *add, IrNode *mm, IrNode *gelu) {
  IrValue **in = ir_alloc(&g->arena, 4 * sizeof *in), **out = ir_alloc(&g->arena, 3 * sizeof *out);
  in[0] = mm->in[0], in[1] = mm->in[1], in[2] = add->in[add->in[0]->producer == mm ? 1 : 0];
  mm->out[0]->producer = NULL;   // the product: no buffer of its own any more
  out[0] = gelu ? gelu->out[0] : add->out[0];
  out[1] = gelu ? add->out[0] : NULL;
  mm->op = OP_MATMUL_BIAS;
  mm->in = in, mm->nin = 3;
  mm->out = out, mm->nout = gelu ? 2 : 1;
  for (int k = 0; k < mm->nout; k++)
    mm->out[k]->producer = mm;
  if (gelu) {
    ir_set_int(g, mm, "act", 1);
    ir_node_remove(g, gelu);
    swap_ids(g, out[0], out[1]);
  }
  ir_node_remove(g, add);
}

// Cross_entropy f and the cross_entropy_bwd b it joins: f becomes cross_entropy_fused, making
// b's gradient too, for its seed's value, and b goes (its seed with it, unread).
static void fuse_classifier(IrGraph *g, IrNode *f, IrNode *b) {
  IrValue **out = ir_alloc(&g->arena, 3 * sizeof *out);
  out[0] = f->out[0], out[1] = b->out[0];
  ir_set_float(g, f, "dloss", ir_attr_f(b->in[0]->producer, "value"));
  f->op = OP_CROSS_ENTROPY_FUSED;
  f->out = out, f->nout = 2;
  out[1]->producer = f;
  ir_node_remove(g, b);
  swap_ids(g, out[0], out[1]);
}

// Add `add` and layernorm ln of its sum: the add becomes add_layernorm, making ln's output too,
// and ln goes.
static void fuse_norm(IrGraph *g, IrNode *ln, IrNode *add) {
  IrValue **in = ir_alloc(&g->arena, 5 * sizeof *in), **out = ir_alloc(&g->arena, 3 * sizeof *out);
  in[0] = add->in[0], in[1] = add->in[1], in[2] = ln->in[1], in[3] = ln->in[2];
  out[0] = add->out[0], out[1] = ln->out[0];
  ir_set_float(g, add, "eps", ir_attr_f(ln, "eps"));
  add->op = OP_ADD_LAYERNORM;
  add->in = in, add->nin = 4;
  add->out = out, add->nout = 2;
  out[1]->producer = add;
  ir_node_remove(g, ln);
  swap_ids(g, out[0], out[1]);
}

int pass_epilogue(IrGraph *g, PassCtx *ctx, bool *changed) {
  (void)ctx;
  PassEpilogue *into = pass_epilogues(g);
  IrNode **gelu_of = calloc((size_t)g->nnodes + 1, sizeof *gelu_of);   // by matmul id
  IR_ASSERT(gelu_of);
  for (int i = 0; i < g->nnodes; i++)
    if (into[i].into && g->nodes[i]->op == OP_GELU)
      gelu_of[into[i].into->id] = g->nodes[i];
  int fused = 0;
  ir_batch_begin(g);
  for (int i = 0; i < g->nnodes; i++) {   // (a GELU goes with its add)
    IrNode *n = g->nodes[i], *mm = into[i].into;
    if (mm && n->op == OP_SUM_TO)
      fuse_bgrad(g, n, mm, into[i].of), fused++;
    else if (mm && n->op == OP_CROSS_ENTROPY)
      fuse_classifier(g, n, mm), fused++;
    else if (mm && n->op == OP_LAYERNORM)
      fuse_norm(g, n, mm), fused++;
    else if (mm && n->op == OP_ADD)
      fuse_bias(g, n, mm, gelu_of[mm->id]), fused++;
  }
  ir_batch_end(g);
  free(into);
  free(gelu_of);
  if (fused) {
    ir_remove_unused(g, ROLE_ACT);
    ir_remove_unused(g, ROLE_GRAD);
  }
  *changed = fused > 0;
  return 0;
}
