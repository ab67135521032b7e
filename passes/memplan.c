// Liveness and the static memory plan.
//
// The schedule is the node order. A value produced at position p and last
// read at position q is live on [p, q] (closed: a kernel never writes an
// output over one of its own inputs). Inputs, parameters, optimizer state
// and the loss are persistent: they live for the whole program, at the start
// of the arena. Every other buffer gets an offset in the transient region
// after them, chosen greedily (largest first, lowest offset that overlaps no
// placed buffer whose live range intersects). Buffers are 64-byte aligned.
//
// A reshape does not move data, so its output is a view: it gets its input's
// offset and no bytes of its own, and the buffer it views (its root, the
// first value up the chain of reshapes that is not a view) stays live until
// the view's last use. Values are written once, by their producer (the
// optimizer's in-place updates come after every read), so a view never sees
// its bytes change while it is live. Persistent outputs are not made views.
//
// Buckets (passes/lower.c): a value placed in a bucket takes the bucket's
// offset plus its own, like a view; the bucket is live from its first
// member's write to its last member's read (a bucket without a producer is
// persistent).
//
// Host values (offload, passes/lower.c) are not in the arena: each has its
// own place in a host region of host_bytes, for the whole program (the host
// has room; the device is what the plan saves).
//
// Reported: arena_bytes (what the program allocates), peak_live_bytes (the
// maximum over positions of the exact bytes live at once: the lower bound
// any plan must meet) and peak_formula (those bytes as a formula).
#include "passes.h"

#include <stdlib.h>
#include <string.h>

#define ALIGN 64

static int64_t align_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

bool pass_is_persistent(const IrValue *v) {
  return !v->producer || v->role == ROLE_INPUT || v->role == ROLE_PARAM ||
         v->role == ROLE_STATE || v->role == ROLE_CONST;
}

// The loss is read by the training loop after the step, so it persists too.
static bool persistent(const IrGraph *g, const IrValue *v) {
  return pass_is_persistent(v) || v == g->loss;
}

const IrValue *pass_view_of(const IrValue *v) {
  if (v->bucket)
    return v->bucket;
  const IrNode *n = v->producer;
  if (!n || n->op != OP_RESHAPE || v->offset < 0 || n->in[0]->offset != v->offset)
    return NULL;
  return n->in[0];
}

int64_t pass_live_bytes_at(const IrGraph *g, int t) {
  int64_t total = 0;
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if (v->offset >= 0 && !v->host && !pass_view_of(v) && v->first_use <= t && t <= v->last_use)
      total += v->bytes;
  }
  return total;
}

static int by_size_desc(const void *a, const void *b) {
  const IrValue *x = *(IrValue *const *)a, *y = *(IrValue *const *)b;
  if (x->bytes != y->bytes)
    return x->bytes < y->bytes ? 1 : -1;
  return x->first_use - y->first_use;
}

static int by_offset(const void *a, const void *b) {
  const IrValue *x = *(IrValue *const *)a, *y = *(IrValue *const *)b;
  return (x->offset > y->offset) - (x->offset < y->offset);
}

// Lowest offset (>= base) where v fits between the placed buffers that are
// live at the same time as v.
static int64_t place(IrValue *v, IrValue **placed, int nplaced, IrValue **scratch, int64_t base) {
  int n = 0;
  for (int i = 0; i < nplaced; i++)
    if (placed[i]->first_use <= v->last_use && v->first_use <= placed[i]->last_use)
      scratch[n++] = placed[i];
  qsort(scratch, (size_t)n, sizeof *scratch, by_offset);
  int64_t at = base, need = align_up(v->bytes);
  for (int i = 0; i < n; i++) {
    if (scratch[i]->offset >= at + need)
      break;
    int64_t end = scratch[i]->offset + align_up(scratch[i]->bytes);
    if (end > at)
      at = end;
  }
  return at;
}

int pass_memplan(IrGraph *g, PassCtx *ctx, bool *changed) {
  (void)ctx;
  int last = g->nnodes > 0 ? g->nnodes - 1 : 0;
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *v = g->values[i];
    int64_t bytes = 0;
    if (v->rank >= 0 && sym_eval(ir_nbytes(g, v), &g->syms, &bytes))
      return ir_error(ctx->diag, v->loc,
                      "memplan: the size of '%s' %s is not known: bind every dim (-D NAME=VALUE)",
                      v->name, ir_shape_str(g, v));
    v->bytes = bytes;
    v->offset = -1;
    bool own = persistent(g, v) && !v->bucket; // members live as long as they are used
    v->first_use = own ? 0 : v->producer ? v->producer->id : last + 1;
    v->last_use = own ? last : v->producer ? v->first_use : -1;
  }
  for (int i = 0; i < g->nnodes; i++) {
    IrNode *n = g->nodes[i];
    IR_ASSERT(n->id == i);
    for (int k = 0; k < n->nin; k++) {
      if (n->in[k]->last_use < i)
        n->in[k]->last_use = i;
      if (n->in[k]->first_use > i)
        n->in[k]->first_use = i;
    }
  }
  // A bucket is live while any value placed in it is.
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *v = g->values[i], *b = v->bucket;
    if (!b)
      continue;
    IR_ASSERT(!b->bucket && v->bytes + v->bucket_off <= b->bytes);
    if (v->first_use < b->first_use)
      b->first_use = v->first_use;
    if (v->last_use > b->last_use)
      b->last_use = v->last_use;
  }
  // Views: root[v->id] is the buffer v shares, or NULL. In schedule order,
  // so the root of a reshape of a view is already known.
  // rootoff[v->id]: the byte offset of v in its root.
  IrValue **root = calloc((size_t)g->nvalues + 1, sizeof *root);
  int64_t *rootoff = calloc((size_t)g->nvalues + 1, sizeof *rootoff);
  IR_ASSERT(root && rootoff);
  for (int i = 0; i < g->nvalues; i++)
    if (g->values[i]->bucket) {
      root[i] = g->values[i]->bucket;
      rootoff[i] = g->values[i]->bucket_off;
    }
  for (int i = 0; i < g->nnodes; i++) {
    IrNode *n = g->nodes[i];
    IrValue *x = n->nin == 1 ? n->in[0] : NULL, *y = n->nout == 1 ? n->out[0] : NULL;
    if (n->op != OP_RESHAPE || !x || !y || persistent(g, y) || y->bucket || x->host ||
        x->bytes != y->bytes)
      continue;
    IrValue *r = root[x->id] ? root[x->id] : x;
    root[y->id] = r;
    rootoff[y->id] = rootoff[x->id];
    if (r->last_use < y->last_use)
      r->last_use = y->last_use;
  }
  // Host region, then the arena's persistent region: in value order.
  int64_t at = 0, host_at = 0;
  IrValue **transient = calloc((size_t)g->nvalues + 1, sizeof *transient);
  IrValue **placed = calloc((size_t)g->nvalues + 1, sizeof *placed);
  IrValue **scratch = calloc((size_t)g->nvalues + 1, sizeof *scratch);
  IR_ASSERT(transient && placed && scratch);
  int nt = 0;
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *v = g->values[i];
    if (root[v->id]) {
      continue;  // placed with its root
    } else if (v->host) {
      v->offset = host_at;
      host_at += align_up(v->bytes);
      v->first_use = 0;
      v->last_use = last;
    } else if (persistent(g, v)) {
      v->offset = at;
      at += align_up(v->bytes);
    } else {
      transient[nt++] = v;
    }
  }
  g->persistent_bytes = at;
  g->host_bytes = host_at;
  // Transient region: largest first.
  qsort(transient, (size_t)nt, sizeof *transient, by_size_desc);
  int64_t end = at;
  for (int i = 0; i < nt; i++) {
    IrValue *v = transient[i];
    v->offset = place(v, placed, i, scratch, g->persistent_bytes);
    placed[i] = v;
    if (v->offset + align_up(v->bytes) > end)
      end = v->offset + align_up(v->bytes);
  }
  g->arena_bytes = end;
  for (int i = 0; i < g->nvalues; i++)
    if (root[i])
      g->values[i]->offset = root[i]->offset + rootoff[i];
  // The peak of live bytes and its formula.
  g->peak_live_bytes = 0;
  g->peak_at = 0;
  for (int t = 0; t < g->nnodes; t++) {
    int64_t live = pass_live_bytes_at(g, t);
    if (live > g->peak_live_bytes) {
      g->peak_live_bytes = live;
      g->peak_at = t;
    }
  }
  const Sym *f = sym_const(&g->arena, 0);
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *v = g->values[i];
    if (v->first_use <= g->peak_at && g->peak_at <= v->last_use && v->rank >= 0 && !v->host &&
        !pass_view_of(v))
      f = sym_add(&g->arena, f, ir_nbytes(g, v));
  }
  g->peak_formula = f;
  free(transient), free(placed), free(scratch), free(root), free(rootoff);
  *changed = false; // annotations only; the graph is unchanged
  return 0;
}
