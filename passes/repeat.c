// Repeated blocks in the schedule.
//
// The frontends number each instance of a repeated block (IR block ids 1, 2,
// ...; the DSL's `repeat`, ONNX name prefixes like "/h.3/"), and every pass
// keeps the id on the nodes it adds for a block. Here the schedule is cut
// into stretches, each all the consecutive nodes of one block in one phase,
// and consecutive stretches of consecutive blocks (forward: 1, 2, 3 ...;
// backward: ... 3, 2, 1) that are the same as the first, node by node, make
// a run. "The same" is confirmed structurally, not trusted from the ids: the
// same ops with the same attributes (integers aside: a collective's request
// slot is the block's own), values of the same shapes, dtypes and
// roles, and the same pattern of values: numbering each stretch's values in
// order of first appearance (inputs, then outputs, node by node) gives the
// same sequence. So a value one stretch reads from an earlier stretch, or
// from outside the run, is at the same place in each.
//
// A block that is in no run may itself run layers more than once on the same
// weights (ALBERT applies one layer L times): the frontend numbers each use
// (IrNode.use), and consecutive uses' stretches that are the same make a run
// too (forward: use 0, 1, 2 ...; backward: ... 2, 1, 0). Their values at a
// place that are one value (the shared weights) stay one buffer.
//
// The memory plan places the values at one place of a run at a constant
// stride, and the emitter writes a run as one loop over the blocks (uses).
#include "passes.h"

#include <stdlib.h>
#include <string.h>

int pass_run_places(const IrGraph *g, const PassRun *r) {
  int n = 0;
  for (int i = 0; i < r->len; i++)
    n += g->nodes[r->first + i]->nin + g->nodes[r->first + i]->nout;
  return n;
}

IrValue *pass_run_value(const IrGraph *g, const PassRun *r, int stretch, int place) {
  for (int i = 0; i < r->len; i++) {
    const IrNode *n = g->nodes[r->first + stretch * r->len + i];
    if (place < n->nin)
      return n->in[place];
    place -= n->nin;
    if (place < n->nout)
      return n->out[place];
    place -= n->nout;
  }
  IR_ASSERT(!"pass_run_value: no such place");
  return NULL;
}

int pass_run_index(const PassRun *r, int j) { return (r->by_use ? r->use : r->block) + j * r->step; }

// The length of the stretch at schedule position p: the nodes from p on of
// p's block and phase (by_use: and use), 0 when p is outside any block.
static int stretch_len(const IrGraph *g, int p, bool by_use) {
  const IrNode *a = g->nodes[p];
  if (a->block <= 0)
    return 0;
  int q = p;
  while (q < g->nnodes && g->nodes[q]->block == a->block && g->nodes[q]->phase == a->phase &&
         (!by_use || g->nodes[q]->use == a->use))
    q++;
  return q - p;
}

// Split over the same axes on the same dims, in as many pieces.
static bool same_layout(const IrValue *a, const IrValue *b) {
  for (int d = 0; d < a->rank && d < b->rank; d++)
    if (a->layout[d].axis != b->layout[d].axis)
      return false;
  return a->pieces == b->pieces;
}

static bool same_value_kind(const IrValue *a, const IrValue *b) {
  return a->dtype == b->dtype && a->role == b->role && a->host == b->host &&
         ir_same_shape(a, b) && !a->bucket == !b->bucket &&
         (!a->bucket || a->bucket_off == b->bucket_off) && same_layout(a, b) &&
         !a->producer == !b->producer;
}

// Numbers each value of the stretch at p (len nodes) by first appearance
// into seq (one entry per place); num is scratch, all -1, left all -1.
static void number_values(const IrGraph *g, int p, int len, int *seq, int *num) {
  int next = 0, k = 0;
  for (int i = 0; i < len; i++) {
    const IrNode *n = g->nodes[p + i];
    for (int j = 0; j < n->nin + n->nout; j++) {
      const IrValue *v = j < n->nin ? n->in[j] : n->out[j - n->nin];
      if (num[v->id] < 0)
        num[v->id] = next++;
      seq[k++] = num[v->id];
    }
  }
  for (int i = 0; i < len; i++) {
    const IrNode *n = g->nodes[p + i];
    for (int j = 0; j < n->nin + n->nout; j++)
      num[(j < n->nin ? n->in[j] : n->out[j - n->nin])->id] = -1;
  }
}

// Is the stretch at q (len nodes) the same as the one at p?
static bool same_stretch(const IrGraph *g, int p, int q, int len, int *seq_p, int *seq_q,
                         int *num) {
  for (int i = 0; i < len; i++) {
    const IrNode *a = g->nodes[p + i], *b = g->nodes[q + i];
    if (a->op != b->op || a->nin != b->nin || a->nout != b->nout || a->phase != b->phase ||
        !ir_attrs_equal(a, b, true))
      return false;
    for (int j = 0; j < a->nin + a->nout; j++) {
      const IrValue *x = j < a->nin ? a->in[j] : a->out[j - a->nin];
      const IrValue *y = j < b->nin ? b->in[j] : b->out[j - b->nin];
      if (!same_value_kind(x, y))
        return false;
    }
  }
  number_values(g, q, len, seq_q, num);
  int places = 0;
  for (int i = 0; i < len; i++)
    places += g->nodes[p + i]->nin + g->nodes[p + i]->nout;
  return !memcmp(seq_p, seq_q, (size_t)places * sizeof *seq_p);
}

typedef struct Finder {
  const IrGraph *g;
  int *num, *seq_p, *seq_q;   // number_values' scratch
  PassRun *runs;
  int n, cap;
} Finder;

// The stretch's index: its block id, or (by_use) its use.
static int stretch_index(const IrNode *a, bool by_use) { return by_use ? a->use : a->block; }

// The run that starts with the stretch at p (len nodes): the stretches after it, up to
// position end (by_use: the end of p's block's stretch), whose indices step by one from p's
// and that are the same. Returns its stretches (1: none is).
static int find_run(Finder *F, int p, int len, int end, bool by_use) {
  const IrGraph *g = F->g;
  number_values(g, p, len, F->seq_p, F->num);
  int index = stretch_index(g->nodes[p], by_use), step = 0, count = 1;
  for (int q = p + len; q + len <= end; q += len) {
    int b = stretch_index(g->nodes[q], by_use);
    if (count == 1 && (b == index + 1 || b == index - 1))
      step = b - index;
    if (step == 0 || b != index + count * step || stretch_len(g, q, by_use) != len ||
        !same_stretch(g, p, q, len, F->seq_p, F->seq_q, F->num))
      break;
    count++;
  }
  if (count < 2)
    return 1;
  if (F->n == F->cap) {
    F->cap = F->cap ? 2 * F->cap : 8;
    F->runs = realloc(F->runs, (size_t)F->cap * sizeof *F->runs);
    IR_ASSERT(F->runs);
  }
  const IrNode *a = g->nodes[p];
  F->runs[F->n++] = (PassRun){.first = p, .len = len, .count = count, .block = a->block,
                              .by_use = by_use, .use = a->use, .step = step};
  return count;
}

PassRun *pass_find_runs(const IrGraph *g, int *nruns) {
  int places = 0;
  for (int i = 0; i < g->nnodes; i++)
    places += g->nodes[i]->nin + g->nodes[i]->nout;
  Finder F = {.g = g};
  F.num = malloc(((size_t)g->nvalues + 1) * sizeof *F.num);
  F.seq_p = malloc(((size_t)places + 1) * sizeof *F.seq_p);
  F.seq_q = malloc(((size_t)places + 1) * sizeof *F.seq_q);
  IR_ASSERT(F.num && F.seq_p && F.seq_q);
  for (int i = 0; i < g->nvalues; i++)
    F.num[i] = -1;
  for (int p = 0; p < g->nnodes;) {
    int len = stretch_len(g, p, false);
    if (len == 0) {
      p++;
      continue;
    }
    int count = find_run(&F, p, len, g->nnodes, false);
    if (count == 1) // the block's own uses of its shared layers
      for (int q = p; q < p + len;) {
        int ulen = stretch_len(g, q, true);
        q += ulen * find_run(&F, q, ulen, p + len, true);
      }
    p += len * count;
  }
  free(F.num), free(F.seq_p), free(F.seq_q);
  *nruns = F.n;
  return F.runs;
}
