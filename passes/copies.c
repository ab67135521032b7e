// Copies between device and host memory beside the compute. Offload's to_host and to_device
// (passes/lower.c) and swap's to_host and from_host (passes/swap.c) each get a slot: the copy
// starts where it stands and returns (on a GPU it runs on a copy stream of its own once the
// kernels before it are done), and a copy_wait of its slot finishes it, as late as the program
// allows, so that the copy runs while the kernels between them do:
//
//   - the wait comes before the first later node that touches what the copy writes or reads
//     (the value, a reshape of it, the bucket it is placed in or a value placed in it), and no
//     later than the end of the copy's stretch (a stretch: the consecutive nodes of one block
//     and use in one phase, passes/repeat.c), or for a bucket's copy (offload's) of the next
//     stretch of its phase. So a swapped activation leaves while the rest of its layer's
//     forward runs and is back by the end of it, as the planner prices swap (time hidden by the
//     block's own compute, its memory the block's), and an offloaded gradient bucket leaves
//     while the next block's backward runs (the planner holds two blocks' buckets, as it holds
//     ZeRO-3's gathered parameters). Every wait is in its copy's phase, which the program runs
//     as one function (train.c checks that none is left).
//   - a node on the host alone that is the first to read what a to_host brought (the host's
//     sum of a micro-batch's offloaded gradients) moves to just after the wait, where nothing
//     between touches its values, so the host adds while the device computes.
//   - swap's from_host starts with its reader's stretch (a layer's swapped activations all
//     come back as its backward starts, those read last while it runs), its wait right before
//     the first read.
//
// ZeRO-3's gathers start a block ahead: a block's unshard and all-gather (from host memory too,
// with parameter offload) move to the start of the stretch of their phase before their own, so
// that the all-gather runs while the block before computes; its comm_wait stays before the
// first read. Two blocks' gathered parameters are then on the device at once, as the planner
// prices ZeRO-3 (double-buffered).
//
// A wait of a to_host whose output the host reads (not swap's, which only comes back) makes a
// GPU's host wait for the copy; any other wait, only the kernels after it.
//
// A wait is in the stretch it ends (the node before it), a moved node in the one it joins, so
// runs of identical blocks stay runs: block l's stretch finishes block l - 1's bucket copies.
// ZeRO-3's gathers from host memory (parameter offload) copy inside their unshard, done on
// return: the all-gather after them reads what they bring at once.
//
// The CPU build makes each copy at its wait (runtime/kernels_cpu.c): a read of what a copy
// writes before its wait, or a write of what it reads, changes the numbers, so every test that
// compares a program with offload or swap against one rank checks these places.
#include "passes.h"

#include <stdlib.h>
#include <string.h>

static bool is_copy(const IrNode *n) {
  return n->op == OP_TO_HOST || n->op == OP_TO_DEVICE || n->op == OP_FROM_HOST;
}

// What copy n writes, and what it reads.
static IrValue *written(const IrNode *n) { return n->op == OP_TO_DEVICE ? n->in[0] : n->out[0]; }
static IrValue *read(const IrNode *n) { return n->op == OP_TO_DEVICE ? n->in[1] : n->in[0]; }

// The value whose memory v is: through reshapes (the memory plan's views).
static const IrValue *root(const IrValue *v) {
  while (v->producer && v->producer->op == OP_RESHAPE)
    v = v->producer->in[0];
  return v;
}

// Whether a and b share memory: one value, reshapes of one, or a bucket and a value placed in it.
static bool overlap(const IrValue *a, const IrValue *b) {
  a = root(a), b = root(b);
  return a == b || a->bucket == b || b->bucket == a || (a->bucket && a->bucket == b->bucket);
}

static bool touches(const IrNode *n, IrValue *x) {
  for (int k = 0; k < n->nin + n->nout; k++)
    if (overlap(ir_node_value(n, k), x))
      return true;
  return false;
}

static bool same_stretch(const IrNode *a, const IrNode *b) {
  return a->phase == b->phase && a->block == b->block && a->use == b->use;
}

// The schedule as it came (the waits the pass makes go in at the end).
typedef struct Sched {
  IrNode **node;
  int n;
} Sched;

// The first position after p's stretch (the schedule's end: n).
static int stretch_end(const Sched *s, int p) {
  int q = p + 1;
  while (q < s->n && same_stretch(s->node[q], s->node[p]))
    q++;
  return q;
}

static int stretch_start(const Sched *s, int p) {
  while (p > 0 && same_stretch(s->node[p - 1], s->node[p]))
    p--;
  return p;
}

// The first node in [from, to) that touches the copy's values (to: none), skipping `skip`.
static int conflict(const Sched *s, const IrNode *c, int from, int to, int skip) {
  for (int j = from; j < to; j++)
    if (j != skip && (touches(s->node[j], written(c)) || touches(s->node[j], read(c))))
      return j;
  return to;
}

static bool on_host_alone(const IrNode *n) {
  for (int k = 0; k < n->nin + n->nout; k++)
    if (!ir_node_value(n, k)->host)
      return false;
  return n->nin + n->nout > 0;
}

// The first node in (from, to) that touches any value of n (to: none).
static int next_touch(const Sched *s, const IrNode *n, int from, int to) {
  for (int j = from + 1; j < to; j++)
    for (int k = 0; k < n->nin + n->nout; k++)
      if (touches(s->node[j], ir_node_value(n, k)))
        return j;
  return to;
}

// Whether the host reads what to_host c brings (then a GPU's host waits for it too): an offloaded
// bucket (the host's update and sums, train.c's scans), or a value some node other than swap's
// from_host reads.
static bool host_reads(const Sched *s, const IrNode *c) {
  const IrValue *h = written(c);
  if (c->op != OP_TO_HOST || h->role == ROLE_BUCKET)
    return c->op == OP_TO_HOST;
  for (int j = 0; j < s->n; j++)
    for (int k = 0; k < s->node[j]->nin; k++)
      if (s->node[j]->in[k] == h && s->node[j]->op != OP_FROM_HOST)
        return true;
  return false;
}

// Where each node goes: before position `at` of the schedule as it came, in the order of
// `rank` (waits, then moved host nodes, then moved starts, then the node that is there).
typedef struct Place {
  IrNode *n;
  int at, rank, seq;
} Place;

static int by_place(const void *a, const void *b) {
  const Place *x = a, *y = b;
  if (x->at != y->at)
    return x->at < y->at ? -1 : 1;
  if (x->rank != y->rank)
    return x->rank < y->rank ? -1 : 1;
  return x->seq - y->seq;
}

// ZeRO-3's gather at i: an unshard into a gathered bucket and the all-gather of it right after.
static bool is_gather(const Sched *s, int i) {
  const IrNode *u = s->node[i];
  return u->op == OP_UNSHARD && i + 1 < s->n && s->node[i + 1]->op == OP_ALL_GATHER &&
         s->node[i + 1]->in[0] == u->out[0];
}

// Where the gather at i can start: with the stretch of its phase before its own (nothing
// there touching what it reads or makes), or where it is.
static int gather_start(const Sched *s, int i) {
  int own = stretch_start(s, i);
  if (own == 0 || s->node[own - 1]->phase != s->node[i]->phase)
    return i;
  int at = stretch_start(s, own - 1);
  return next_touch(s, s->node[i], at - 1, i) < i ? i : at;
}

int pass_copies(IrGraph *g, PassCtx *ctx, bool *changed) {
  (void)ctx;
  int n = g->nnodes, ncopies = 0, ngathers = 0;
  for (int i = 0; i < n; i++)
    ncopies += is_copy(g->nodes[i]), ngathers += g->nodes[i]->op == OP_UNSHARD;
  *changed = false;
  if (!ncopies && !ngathers)
    return 0;
  Place *place = malloc(((size_t)n + (size_t)ncopies + 1) * sizeof *place);
  Sched S = {malloc(((size_t)n + 1) * sizeof *S.node), n};
  IR_ASSERT(place && S.node);
  memcpy(S.node, g->nodes, (size_t)n * sizeof *S.node);
  int np = 0, slot = 0;
  for (int i = 0; i < n; i++)
    place[np++] = (Place){S.node[i], i, 3, i};
  for (int i = 0; i < n; i++) {
    IrNode *c = S.node[i];
    if (is_gather(&S, i)) {   // a block ahead: the unshard and the all-gather
      int at = gather_start(&S, i);
      place[i] = (Place){c, at, 2, i};
      place[i + 1] = (Place){S.node[i + 1], at, 2, i + 1};
      *changed |= at < i;
    }
    if (!is_copy(c))
      continue;
    ir_set_int(g, c, "slot", slot);
    int end = stretch_end(&S, i);
    bool bucket = written(c)->role == ROLE_BUCKET || read(c)->role == ROLE_BUCKET;
    int bound = bucket && end < n && S.node[end]->phase == c->phase ? stretch_end(&S, end) : end;
    int w = conflict(&S, c, i + 1, bound, -1);
    if (c->op == OP_TO_HOST && w < bound && on_host_alone(S.node[w]) &&
        S.node[w]->phase == c->phase) {   // the host's reader moves along with the wait
      int later = conflict(&S, c, w + 1, bound, w), touch = next_touch(&S, S.node[w], w, bound);
      int to = later < touch ? later : touch;
      if (to > w + 1) {
        place[w] = (Place){S.node[w], to, 1, w};
        w = to;
      }
    }
    if (c->op == OP_FROM_HOST)   // starts with its reader's stretch
      place[i] = (Place){c, stretch_start(&S, i), 2, i};
    // the wait ends the stretch of the node before it
    const IrNode *before = S.node[w - 1];
    g->cur_phase = c->phase;
    ir_set_block(g, before);
    IrValue *in[2] = {written(c), read(c)};
    IrNode *wait = ir_node_new(g, OP_COPY_WAIT, in, 2, 0);
    ir_set_int(g, wait, "slot", slot++);
    if (host_reads(&S, c))
      ir_set_int(g, wait, "host", 1);
    wait->loc = c->loc;
    place[np] = (Place){wait, w, 0, np};
    np++;
  }
  qsort(place, (size_t)np, sizeof *place, by_place);
  for (int i = 0; i < np; i++) {
    g->nodes[i] = place[i].n;
    g->nodes[i]->id = i;
  }
  g->nnodes = np;
  // a moved host node joins the stretch its wait ends (its own is right before it), a moved
  // start the one it starts
  for (int i = 0; i < np; i++)
    if (place[i].rank == 1) {
      place[i].n->block = place[i - 1].n->block, place[i].n->use = place[i - 1].n->use;
    } else if (place[i].rank == 2) {
      int next = i + 1;
      while (next < np && place[next].rank == 2)
        next++;
      if (next < np && place[next].n->phase == place[i].n->phase)
        place[i].n->block = place[next].n->block, place[i].n->use = place[next].n->use;
    }
  free(place), free(S.node);
  g->cur_phase = PHASE_FORWARD;
  ir_set_block(g, NULL);
  *changed |= ncopies > 0;
  return 0;
}
