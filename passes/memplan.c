// Liveness and the static memory plan: a MemPlan, a table by value id beside
// the graph (the graph itself is not changed), in ctx->mem.
//
// The schedule is the node order. A value produced at position p and last
// read at position q is live on [p, q] (closed: a kernel never writes an
// output over one of its own inputs). Inputs, parameters, optimizer state
// and the loss are persistent: they live for the whole program, at the start
// of the arena. Every other buffer gets an offset in the transient region
// after them, chosen greedily (largest first, lowest offset that overlaps no
// placed buffer whose live range intersects). Buffers are 64-byte aligned.
//
// Identical blocks (passes/repeat.c) run as one loop in the emitted code, so
// the buffers at one place of the blocks (layer l's attention output, its
// gradient, its AdamW moment) are laid out as a series: base + l * stride.
// Persistent ones follow each other (like llm.c's per-layer parameter
// arrays); a transient series takes the stride that places it lowest: 0 when
// its members live apart (a block's temporaries share one buffer), one
// member up or down, or the stride of a series placed before it (a block's
// temporary then goes where a later block's kept values will be).
//
// A reshape does not move data, so its output is a view: it gets its input's
// offset and no bytes of its own, and the buffer it views (its root, the
// first value up the chain of reshapes that is not a view) stays live until
// the view's last use. Values are written once, by their producer (the
// optimizer's in-place updates come after every read), so a view never sees
// its bytes change while it is live. Persistent outputs are not made views.
//
// A kernel that may write its output over an input (pass_in_place: the cross-entropy's
// gradient over the logits, as llm.c's classifier does) gets it where that input's buffer dies
// at the kernel: the output is then a view of the input's root, which stays live until the
// output's last use. The largest activation of a language model (B T V logits) and its
// gradient so take one buffer, not two, at the start of backward.
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
// Reported in the plan: arena_bytes (what the program allocates),
// peak_live_bytes (the maximum over positions of the exact bytes live at
// once: the lower bound any plan must meet) and peak_formula (those bytes as
// a formula).
#include "passes.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN 64
#define MAXSTRIDES 64  // strides tried for a series

static int64_t align_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

// v's entries in the plan m
#define OFF(v) (m->offset[(v)->id])
#define BYTES(v) (m->bytes[(v)->id])
#define FIRST(v) (m->first_use[(v)->id])
#define LAST(v) (m->last_use[(v)->id])

bool pass_is_persistent(const IrValue *v) {
  return !v->producer || v->role == ROLE_INPUT || v->role == ROLE_PARAM ||
         v->role == ROLE_STATE || v->role == ROLE_CONST || v->role == ROLE_COPY;
}

// The loss is read by the training loop after the step, so it persists too.
static bool persistent(const IrGraph *g, const IrValue *v) {
  return pass_is_persistent(v) || v == g->loss;
}

int pass_in_place(const IrNode *n, int *out) {
  *out = 0;
  switch (n->op) {
  case OP_CROSS_ENTROPY_BWD:      // rt_crossentropy_bwd: each element of a row read, then its
  case OP_VP_CROSS_ENTROPY_BWD:   // gradient written, after the row's max and sum
    return 1;
  case OP_CROSS_ENTROPY_FUSED:    // the same, the target's logit read first
    *out = 1;
    return 0;
  default:
    return -1;
  }
}

const IrValue *pass_view_of(const MemPlan *m, const IrValue *v) {
  if (v->bucket)
    return v->bucket;
  const IrNode *n = v->producer;
  if (!n || OFF(v) < 0)
    return NULL;
  int out = 0, k = n->op == OP_RESHAPE ? 0 : pass_in_place(n, &out);
  if (k < 0 || n->out[out] != v || OFF(n->in[k]) != OFF(v))
    return NULL;
  return n->in[k];
}

// v's bytes count as device memory of their own while v is live (placed, on the device, not a
// view of another buffer).
static bool occupies(const MemPlan *m, const IrValue *v) {
  return OFF(v) >= 0 && !v->host && !pass_view_of(m, v);
}

int64_t pass_live_bytes_at(const MemPlan *m, const IrGraph *g, int t) {
  int64_t total = 0;
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if (occupies(m, v) && FIRST(v) <= t && t <= LAST(v))
      total += BYTES(v);
  }
  return total;
}

// ---- series: the values at one place of a run (passes/repeat.c) -----------------------
//
// Each is laid out at base + index * stride, index its block id (or use), so that the
// emitted loop addresses it as base + l * stride. Placement works on roots
// (a view or a bucket member moves with the buffer it is in), so a place of
// a run gives a series of roots when its members are distinct roots at the
// same offset in them. Places shared by several runs (a block's output is the
// next block's input; backward reads what forward wrote) merge into one
// series when their indices agree up to a shift: the residual stream x_0, x_1,
// ... x_L is one series, read at index l and written at l + 1. A place whose
// values cannot be laid out so (a series would hold one value twice, or two
// at one index) is left out, and its run's loop unrolls (codegen checks).

typedef struct Series {
  int n, cap;
  int *id;        // member value ids
  bool bad;
  int lo, hi;     // index range (after series_close)
  int seen, d;    // series_tuple: the tuple that last met it, and its shift there
} Series;

typedef struct SeriesSet {
  int n, cap;
  Series *s;
  int *ser, *idx; // per value id: its series (-1: none) and index
  int tuples;     // series_tuple calls so far
} SeriesSet;

static void series_add(SeriesSet *ss, int s, int v, int index) {
  Series *x = &ss->s[s];
  if (x->n == x->cap) {
    x->cap = x->cap ? 2 * x->cap : 8;
    x->id = realloc(x->id, (size_t)x->cap * sizeof *x->id);
    IR_ASSERT(x->id);
  }
  x->id[x->n++] = v;
  ss->ser[v] = s;
  ss->idx[v] = index;
}

// A place of a run: its roots r[j] at indices key[j] (distinct roots). The
// series its members are in must agree on the shift from key to index; they
// merge into the largest of them (so that a member moves O(log n) times).
static void series_tuple(SeriesSet *ss, IrValue *const *r, const int *key, int n) {
  int target = -1, delta = 0, tuple = ++ss->tuples;
  for (int j = 0; j < n; j++) {
    int s = ss->ser[r[j]->id];
    if (s < 0)
      continue;
    int d = ss->idx[r[j]->id] - key[j];
    if (ss->s[s].seen == tuple && ss->s[s].d != d)
      return;   // an earlier member of s has another shift
    ss->s[s].seen = tuple, ss->s[s].d = d;
    if (target < 0 || ss->s[s].n > ss->s[target].n)
      target = s, delta = d;
  }
  if (target < 0) {
    if (ss->n == ss->cap) {
      ss->cap = ss->cap ? 2 * ss->cap : 16;
      ss->s = realloc(ss->s, (size_t)ss->cap * sizeof *ss->s);
      IR_ASSERT(ss->s);
    }
    ss->s[ss->n] = (Series){0};
    target = ss->n++;
  }
  for (int j = 0; j < n; j++) {
    int v = r[j]->id, s = ss->ser[v];
    if (s < 0) {
      series_add(ss, target, v, key[j] + delta);
    } else if (s != target) { // merge s into target, shifted
      int d = ss->idx[v] - key[j];
      Series *from = &ss->s[s];
      for (int k = 0; k < from->n; k++)
        series_add(ss, target, from->id[k], ss->idx[from->id[k]] - d + delta);
      from->n = 0;
      ss->s[target].bad |= from->bad;
    }
  }
}

static int int_order(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

// Index range; bad when two members share an index or differ in size or
// kind of memory (host, persistent, transient).
static void series_close(SeriesSet *ss, const IrGraph *g, const MemPlan *m) {
  int most = 0;
  for (int s = 0; s < ss->n; s++)
    most = ss->s[s].n > most ? ss->s[s].n : most;
  int *index = malloc(((size_t)most + 1) * sizeof *index);
  IR_ASSERT(index);
  for (int s = 0; s < ss->n; s++) {
    Series *x = &ss->s[s];
    if (x->n == 0)
      continue;
    const IrValue *a = g->values[x->id[0]];
    x->lo = x->hi = ss->idx[x->id[0]];
    for (int k = 0; k < x->n; k++) {
      const IrValue *v = g->values[x->id[k]];
      int i = index[k] = ss->idx[v->id];
      x->lo = i < x->lo ? i : x->lo;
      x->hi = i > x->hi ? i : x->hi;
      x->bad |= BYTES(v) != BYTES(a) || v->host != a->host || persistent(g, v) != persistent(g, a);
    }
    qsort(index, (size_t)x->n, sizeof *index, int_order);
    for (int k = 1; k < x->n; k++)
      x->bad |= index[k - 1] == index[k];
  }
  free(index);
}

static void series_build(SeriesSet *ss, const IrGraph *g, IrValue *const *root,
                         const int64_t *rootoff) {
  ss->ser = malloc(((size_t)g->nvalues + 1) * sizeof *ss->ser);
  ss->idx = malloc(((size_t)g->nvalues + 1) * sizeof *ss->idx);
  IR_ASSERT(ss->ser && ss->idx);
  for (int i = 0; i < g->nvalues; i++)
    ss->ser[i] = -1;
  int *mark = calloc((size_t)g->nvalues + 1, sizeof *mark), tuple = 0; // roots seen in a tuple
  IR_ASSERT(mark);
  int nruns;
  PassRun *runs = pass_find_runs(g, &nruns);
  for (int r = 0; r < nruns; r++) {
    const PassRun *run = &runs[r];
    int places = pass_run_places(g, run);
    IrValue **rt = malloc((size_t)run->count * sizeof *rt);
    int *key = malloc((size_t)run->count * sizeof *key);
    IR_ASSERT(rt && key);
    for (int p = 0; p < places; p++) {
      bool ok = true;
      tuple++;
      for (int j = 0; j < run->count && ok; j++) {
        IrValue *v = pass_run_value(g, run, j, p);
        rt[j] = root[v->id] ? root[v->id] : v;
        key[j] = pass_run_index(run, j);
        ok = rootoff[v->id] == rootoff[pass_run_value(g, run, 0, p)->id] &&
             mark[rt[j]->id] != tuple;  // distinct roots
        mark[rt[j]->id] = tuple;
      }
      if (ok)
        series_tuple(ss, rt, key, run->count);
    }
    free(rt), free(key);
  }
  free(runs), free(mark);
}

static void series_free(SeriesSet *ss) {
  for (int s = 0; s < ss->n; s++)
    free(ss->s[s].id);
  free(ss->s), free(ss->ser), free(ss->idx);
}

// ---- placement -------------------------------------------------------------------------

// What to place in the transient region: one root, or a series of them.
typedef struct Unit {
  IrValue **v;     // members
  int *rel;        // each one's index minus the series' lowest
  int n;
  int64_t bytes;   // each member's
  int first;       // the first use of any member
  bool apart;      // a series whose members' live ranges are pairwise apart
  bool halves;     // ... not apart, but those at even rel are, and those at odd rel
} Unit;

// Member k's place from the unit's base: rel[k] strides on, and alt further at an odd rel (a
// series in two buffers taken in turn: each of its members lives beside the next, as an
// offloaded gradient bucket leaves while the next block's is made, passes/copies.c).
static int64_t member_at(const Unit *u, int k, int64_t stride, int64_t alt) {
  return u->rel[k] * stride + (u->rel[k] & 1) * alt;
}

// Largest first; then by first use.
static int unit_order(const void *a, const void *b) {
  const Unit *x = a, *y = b;
  if (x->bytes != y->bytes)
    return x->bytes < y->bytes ? 1 : -1;
  return x->first - y->first;
}

// ---- the placed buffers, by time and address -----------------------------------------
//
// place() asks: the lowest base at which a buffer of `need` bytes, live over
// positions [f, l], overlaps no placed buffer live at some position of
// [f, l]. Scanning every placed buffer made placing n buffers O(n^2), so
// they are kept in a segment tree over the schedule's positions. A buffer
// live over [f, l] goes into `cover` of the O(log T) nodes whose ranges make
// up [f, l] (it is live over all of each one's range), and into `meet` of
// those nodes and of the nodes on the paths from f's and l's leaves to the
// root (it is live at some position of each one's range). The buffers live
// at some position of [f, l] are then exactly those in `meet` of [f, l]'s
// nodes and in `cover` of the nodes on its two paths: O(log T) sets.
//
// A set keeps only the bytes its buffers occupy, as sorted runs, joined
// where they touch, so that one step passes a whole stack of buffers. A base
// b collides with a run [lo, hi) when lo - need < b < hi; for need > 0 that
// is the union of what its buffers rule out, touching ones included. (A
// buffer of no bytes is ruled out only strictly inside one: those are placed
// by scanning, as before.)

typedef struct Run { int64_t lo, hi; } Run;      // bytes [lo, hi)

typedef struct Runs {   // sorted, apart (no two touch)
  Run *r;
  int n, cap;
} Runs;

typedef struct Placed {
  int leaves;           // a power of two above the last position
  Runs *cover, *meet;   // by node: 1 the root, 2i and 2i + 1 the children of i
} Placed;

#define MAXSETS 128     // sets a query reads: 4 log2(leaves) at most

// The first run that ends above a.
static int runs_above(const Runs *s, int64_t a) {
  int lo = 0, hi = s->n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (s->r[mid].hi > a)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

static void runs_add(Runs *s, int64_t lo, int64_t hi) {
  int i = runs_above(s, lo - 1), j = i;   // the first run that ends at lo or above
  for (; j < s->n && s->r[j].lo <= hi; j++) {
    lo = s->r[j].lo < lo ? s->r[j].lo : lo;
    hi = s->r[j].hi > hi ? s->r[j].hi : hi;
  }
  if (i == j) { // a run of its own
    if (s->n == s->cap) {
      s->cap = s->cap ? 2 * s->cap : 4;
      s->r = realloc(s->r, (size_t)s->cap * sizeof *s->r);
      IR_ASSERT(s->r);
    }
    memmove(&s->r[i + 1], &s->r[i], (size_t)(s->n - i) * sizeof *s->r);
    s->n++;
  } else if (j > i + 1) { // runs i..j-1 become one
    memmove(&s->r[i + 1], &s->r[j], (size_t)(s->n - j) * sizeof *s->r);
    s->n -= j - i - 1;
  }
  s->r[i] = (Run){lo, hi};
}

// The lowest base >= a that no run of s (which has runs) collides with (need > 0).
static int64_t runs_fit(const Runs *s, int64_t a, int64_t need) {
  if (s->r[s->n - 1].hi <= a || s->r[0].lo >= a + need)
    return a;   // all below a, or all above what a needs
  for (int i = runs_above(s, a); i < s->n && s->r[i].lo < a + need; i++)
    a = s->r[i].hi;
  return a;
}

static void placed_init(Placed *p, int positions) {
  p->leaves = 1;
  while (p->leaves < positions)
    p->leaves *= 2;
  p->cover = calloc(2 * (size_t)p->leaves, sizeof *p->cover);
  p->meet = calloc(2 * (size_t)p->leaves, sizeof *p->meet);
  IR_ASSERT(p->cover && p->meet);
}

static void placed_free(Placed *p) {
  for (int i = 0; i < 2 * p->leaves; i++)
    free(p->cover[i].r), free(p->meet[i].r);
  free(p->cover), free(p->meet);
}

// A buffer at bytes [lo, hi), live over positions [f, l].
static void placed_add(Placed *p, int f, int l, int64_t lo, int64_t hi) {
  IR_ASSERT(0 <= f && f <= l && l < p->leaves);
  for (int a = f + p->leaves, b = l + p->leaves + 1; a < b; a /= 2, b /= 2) {
    if (a & 1) {
      runs_add(&p->cover[a], lo, hi);
      runs_add(&p->meet[a], lo, hi);
      a++;
    }
    if (b & 1) {
      b--;
      runs_add(&p->cover[b], lo, hi);
      runs_add(&p->meet[b], lo, hi);
    }
  }
  for (int a = (f + p->leaves) / 2, b = (l + p->leaves) / 2; a >= 1; a /= 2, b /= 2) {
    runs_add(&p->meet[a], lo, hi);
    if (b != a)
      runs_add(&p->meet[b], lo, hi);
  }
}

// The sets that hold the buffers live at some position of [f, l] (those
// with runs), into set[]; returns how many.
static int placed_sets(const Placed *p, int f, int l, const Runs **set) {
  int n = 0;
  for (int a = f + p->leaves, b = l + p->leaves + 1; a < b; a /= 2, b /= 2) {
    if (a & 1) {
      if (p->meet[a].n)
        set[n++] = &p->meet[a];
      a++;
    }
    if (b & 1) {
      b--;
      if (p->meet[b].n)
        set[n++] = &p->meet[b];
    }
  }
  for (int a = (f + p->leaves) / 2, b = (l + p->leaves) / 2; a >= 1; a /= 2, b /= 2) {
    if (p->cover[a].n)
      set[n++] = &p->cover[a];
    if (b != a && p->cover[b].n)
      set[n++] = &p->cover[b];
  }
  IR_ASSERT(n <= MAXSETS);
  return n;
}

typedef struct Gap { int64_t lo, hi; } Gap;   // bases in (lo, hi) collide

typedef struct Gaps {   // place_scan's scratch, kept between calls
  Gap *gap;
  int cap;
} Gaps;

static int gap_by_lo(const void *a, const void *b) {
  const Gap *x = a, *y = b;
  return (x->lo > y->lo) - (x->lo < y->lo);
}

static bool live_together(const MemPlan *m, const IrValue *a, const IrValue *b) {
  return FIRST(a) <= LAST(b) && FIRST(b) <= LAST(a);
}

// place() for a unit of no bytes: scans every placed buffer.
static int64_t place_scan(const MemPlan *m, const Unit *u, int64_t stride, int64_t alt,
                          IrValue *const *placed, int nplaced, int64_t start, Gaps *gs) {
  int64_t need = align_up(u->bytes);
  int n = 0;
  for (int k = 0; k < u->n; k++)
    for (int i = 0; i < nplaced; i++) {
      if (!live_together(m, u->v[k], placed[i]))
        continue;
      if (n == gs->cap) {
        gs->cap = gs->cap ? 2 * gs->cap : 64;
        gs->gap = realloc(gs->gap, (size_t)gs->cap * sizeof *gs->gap);
        IR_ASSERT(gs->gap);
      }
      Gap *gap = gs->gap;
      int64_t shift = member_at(u, k, stride, alt);
      gap[n++] = (Gap){OFF(placed[i]) - shift - need,
                       OFF(placed[i]) + align_up(BYTES(placed[i])) - shift};
    }
  Gap *gap = gs->gap;
  if (n > 1)
    qsort(gap, (size_t)n, sizeof *gap, gap_by_lo);
  int64_t at = start;
  for (int i = 0; i < n && gap[i].lo < at; i++)
    if (at < gap[i].hi)
      at = gap[i].hi;
  return at;
}

// Lowest base (>= start) where each member k of u fits at base + member_at(u, k, stride, alt)
// beside the placed buffers live at the same time as it. Member k's
// sets are set[k * MAXSETS ...], nset[k] of them. A base where a member
// collides moves up to the lowest place that member fits, which passes no
// base where all fit; when no member moves the base, all fit.
static int64_t place(const Unit *u, int64_t stride, int64_t alt, const Runs *const *set,
                     const int *nset, int64_t start) {
  int64_t need = align_up(u->bytes), base = start;
  for (bool moved = true; moved;) {
    moved = false;
    for (int k = 0; k < u->n; k++) {
      const Runs *const *s = &set[(size_t)k * MAXSETS];
      int64_t at = base + member_at(u, k, stride, alt), a = at;
      for (bool again = true; again;) {
        again = false;
        for (int j = 0; j < nset[k]; j++) {
          int64_t b = runs_fit(s[j], a, need);
          again |= b != a;
          a = b;
        }
      }
      if (a != at)
        base += a - at, moved = true;
    }
  }
  return base;
}

typedef struct Span { int first, last; } Span;   // a live range

static int span_order(const void *a, const void *b) {
  const Span *x = a, *y = b;
  return (x->first > y->first) - (x->first < y->first);
}

// Members' live ranges pairwise apart: they can share one place. By first
// use, each range must start after every range before it ends. (parity 0 or 1: only the
// members at even or odd rel; -1: all.)
static bool apart(const MemPlan *m, const Unit *u, int parity) {
  Span *sp = malloc((size_t)u->n * sizeof *sp);
  IR_ASSERT(sp);
  int n = 0;
  for (int k = 0; k < u->n; k++) {
    if (parity >= 0 && (u->rel[k] & 1) != parity)
      continue;
    sp[n] = (Span){FIRST(u->v[k]), LAST(u->v[k])};
    IR_ASSERT(sp[n].first <= sp[n].last); // transient: made, then read
    n++;
  }
  qsort(sp, (size_t)n, sizeof *sp, span_order);
  bool ok = true;
  for (int k = 1, end = n ? sp[0].last : 0; k < n && ok; k++) {
    ok = sp[k].first > end;
    end = sp[k].last > end ? sp[k].last : end;
  }
  free(sp);
  return ok;
}

// Places the transient units in their order above the persistent region;
// returns the arena's end. A series takes the stride that puts its top
// lowest, the first on a tie, of: the strides of the series placed before it
// (a block's temporary can then go where another block's kept values will
// be), 0 when its members live apart (a block's temporaries share one
// buffer), two buffers in turn when its even and its odd members do (stride 0, the odd ones
// one member up or down), and one member up or down, first the way the members come to
// life (the first born at the lowest address, as first-fit stacks single
// buffers). Of the orders and tie rules tried, this one came closest to the
// peak of live bytes on GPT-2 with and without data and tensor parallelism.
static int64_t place_transient(MemPlan *m, Unit *units, int nu, IrValue **placed) {
  int64_t end = m->persistent_bytes, strides[MAXSTRIDES];
  int nplaced = 0, nstrides = 0, last = 0, most = 1;
  for (int i = 0; i < nu; i++) {
    most = units[i].n > most ? units[i].n : most;
    for (int k = 0; k < units[i].n; k++)
      last = LAST(units[i].v[k]) > last ? LAST(units[i].v[k]) : last;
  }
  Placed pl;
  placed_init(&pl, last + 1);
  const Runs **set = malloc((size_t)most * MAXSETS * sizeof *set);
  int *nset = malloc((size_t)most * sizeof *nset);
  IR_ASSERT(set && nset);
  Gaps gs = {0};
  for (int i = 0; i < nu; i++) {
    Unit *u = &units[i];
    for (int k = 0; k < u->n && u->bytes > 0; k++)
      nset[k] = placed_sets(&pl, FIRST(u->v[k]), LAST(u->v[k]), &set[(size_t)k * MAXSETS]);
    int64_t stride = 0, base = 0, top = INT64_MAX, size = align_up(u->bytes);
    int relmax = 0, born = 0;
    for (int k = 0; k < u->n; k++) {
      relmax = u->rel[k] > relmax ? u->rel[k] : relmax;
      if (FIRST(u->v[k]) < FIRST(u->v[born]))
        born = k;
    }
    int64_t dir = u->rel[born] != 0 ? -1 : 1;
    struct { int64_t stride, alt; } cand[MAXSTRIDES + 5];
    int ncand = 0;
    for (int c = 0; u->n > 1 && c < nstrides; c++)
      cand[ncand].stride = strides[c], cand[ncand++].alt = 0;
    cand[ncand].stride = 0, cand[ncand++].alt = 0;
    for (int way = 1; u->halves && way >= -1; way -= 2)
      cand[ncand].stride = 0, cand[ncand++].alt = way * dir * size;
    for (int way = 1; u->n > 1 && way >= -1; way -= 2)
      cand[ncand].stride = way * dir * size, cand[ncand++].alt = 0;
    int64_t alt = 0;
    for (int c = 0; c < ncand; c++) {
      int64_t sc = cand[c].stride, ac = cand[c].alt;
      if ((sc == 0 && ac == 0 && u->n > 1 && !u->apart) || (sc != 0 && llabs(sc) < size))
        continue;
      int64_t lo = (sc < 0 ? -relmax * sc : 0) + (ac < 0 ? -ac : 0);
      int64_t hi = (sc > 0 ? relmax * sc : 0) + (ac > 0 ? ac : 0);
      if (m->persistent_bytes + lo + hi + size >= top)
        continue;  // cannot beat the best so far even at the lowest base
      int64_t b = u->bytes > 0
                      ? place(u, sc, ac, set, nset, m->persistent_bytes + lo)
                      : place_scan(m, u, sc, ac, placed, nplaced, m->persistent_bytes + lo, &gs);
      if (b + hi + size < top)
        top = b + hi + size, base = b, stride = sc, alt = ac;
    }
    bool seen = false;
    for (int c = 0; c < nstrides; c++)
      seen |= strides[c] == stride;
    if (u->n > 1 && !seen && nstrides < MAXSTRIDES)
      strides[nstrides++] = stride;
    for (int k = 0; k < u->n; k++) {
      OFF(u->v[k]) = base + member_at(u, k, stride, alt);
      placed[nplaced++] = u->v[k];
      placed_add(&pl, FIRST(u->v[k]), LAST(u->v[k]), OFF(u->v[k]), OFF(u->v[k]) + size);
    }
    end = top > end ? top : end;
  }
  free(gs.gap), free(set), free(nset);
  placed_free(&pl);
  return end;
}

void pass_memplan_free(MemPlan *m) {
  if (!m)
    return;
  free(m->offset), free(m->bytes), free(m->first_use), free(m->last_use);
  free(m);
}

static MemPlan *memplan_new(int nvalues) {
  MemPlan *m = calloc(1, sizeof *m);
  IR_ASSERT(m);
  size_t n = (size_t)nvalues + 1;
  m->nvalues = nvalues;
  m->offset = malloc(n * sizeof *m->offset);
  m->bytes = malloc(n * sizeof *m->bytes);
  m->first_use = malloc(n * sizeof *m->first_use);
  m->last_use = malloc(n * sizeof *m->last_use);
  IR_ASSERT(m->offset && m->bytes && m->first_use && m->last_use);
  return m;
}

// Places every value (the host region, the persistent region, then the transient units) and
// returns the arena's end. A series with turns[s] set (series_turns) takes two buffers in turn,
// or with one_by_one, is placed member by member, as values of no series.
static int64_t place_all(const IrGraph *g, MemPlan *m, const SeriesSet *ss, IrValue *const *root,
                         int last, const bool *turns, bool one_by_one) {
  // Host region, then the arena's persistent region: in value order, a
  // series at its first member, all of it, at a stride of one member.
  int64_t at = 0, host_at = 0;
  Unit *units = calloc((size_t)g->nvalues + 1, sizeof *units);
  IrValue **placed = calloc((size_t)g->nvalues + 1, sizeof *placed);
  IrValue **single = calloc((size_t)g->nvalues + 1, sizeof *single);
  int *zero = calloc((size_t)g->nvalues + 1, sizeof *zero);
  bool *done = calloc((size_t)ss->n + 1, sizeof *done);
  IR_ASSERT(units && placed && single && zero && done);
  int nu = 0;
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *v = g->values[i];
    int s = ss->ser[i];
    Series *x = s >= 0 && !ss->s[s].bad && !(one_by_one && turns[s]) ? &ss->s[s] : NULL;
    if (root[v->id] || (x && done[s]))
      continue;  // placed with its root, or with its series
    if (x && (v->host || persistent(g, v))) {
      int64_t *next = v->host ? &host_at : &at, stride = align_up(BYTES(v));
      for (int k = 0; k < x->n; k++) {
        IrValue *w = g->values[x->id[k]];
        OFF(w) = *next + (ss->idx[w->id] - x->lo) * stride;
        FIRST(w) = v->host ? 0 : FIRST(w);
        LAST(w) = v->host ? last : LAST(w);
      }
      *next += (x->hi - x->lo + 1) * stride;
      done[s] = true;
    } else if (x) {
      Unit *u = &units[nu++];
      u->n = x->n;
      u->v = malloc((size_t)x->n * sizeof *u->v);
      u->rel = malloc((size_t)x->n * sizeof *u->rel);
      IR_ASSERT(u->v && u->rel);
      u->first = INT_MAX;
      for (int k = 0; k < x->n; k++) {
        u->v[k] = g->values[x->id[k]];
        u->rel[k] = ss->idx[x->id[k]] - x->lo;
        u->first = FIRST(u->v[k]) < u->first ? FIRST(u->v[k]) : u->first;
      }
      u->bytes = BYTES(v);
      u->halves = turns[s];
      done[s] = true;
    } else if (v->host) {
      OFF(v) = host_at;
      host_at += align_up(BYTES(v));
      FIRST(v) = 0;
      LAST(v) = last;
    } else if (persistent(g, v)) {
      OFF(v) = at;
      at += align_up(BYTES(v));
    } else {
      single[v->id] = v;
      units[nu++] = (Unit){.v = &single[v->id], .rel = zero, .n = 1, .bytes = BYTES(v),
                                 .first = FIRST(v)};
    }
  }
  m->persistent_bytes = at;
  m->host_bytes = host_at;
  // Transient region (place_transient): largest first.
  for (int i = 0; i < nu; i++)
    units[i].apart = units[i].n > 1 && apart(m, &units[i], -1);
  qsort(units, (size_t)nu, sizeof *units, unit_order);
  int64_t end = place_transient(m, units, nu, placed);
  for (int i = 0; i < nu; i++)
    if (units[i].n > 1)   // a series (at least two members) owns its arrays
      free(units[i].v), free(units[i].rel);
  free(units), free(placed), free(single), free(zero), free(done);
  return end;
}

// A series whose members are not apart but its even members are, and its odd ones (each lives
// beside the next): the members take two buffers in turn.
static bool series_turns(const IrGraph *g, const MemPlan *m, const SeriesSet *ss,
                         const Series *x) {
  if (x->bad || x->n < 3 || persistent(g, g->values[x->id[0]]) || g->values[x->id[0]]->host)
    return false;
  IrValue **v = malloc((size_t)x->n * sizeof *v);
  int *rel = malloc((size_t)x->n * sizeof *rel);
  IR_ASSERT(v && rel);
  for (int k = 0; k < x->n; k++)
    v[k] = g->values[x->id[k]], rel[k] = ss->idx[x->id[k]] - x->lo;
  Unit u = {.v = v, .rel = rel, .n = x->n};
  bool turns = !apart(m, &u, -1) && apart(m, &u, 0) && apart(m, &u, 1);
  free(v), free(rel);
  return turns;
}

int pass_memplan(IrGraph *g, PassCtx *ctx, bool *changed) {
  *changed = false; // the plan is a table beside the graph; the graph is unchanged
  pass_memplan_free(ctx->mem);
  MemPlan *m = ctx->mem = memplan_new(g->nvalues);
  int last = g->nnodes > 0 ? g->nnodes - 1 : 0;
  int64_t total = 0; // every offset the plan gives is below this sum: it must fit int64
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *v = g->values[i];
    int64_t bytes = 0;
    if (v->rank >= 0 && sym_eval(ir_nbytes(g, v), &g->syms, &bytes))
      return ir_error(ctx->diag, v->loc,
                      "memplan: the size of '%s' %s is not known: bind every dim (-D NAME=VALUE)",
                      v->name, ir_shape_str(g, v));
    if ((total += align_up(bytes)) > (INT64_C(1) << 60)) // bytes <= IR_BYTES_MAX: no overflow
      return ir_error(ctx->diag, v->loc, "memplan: the tensors up to '%s' take more than 1 EiB",
                      v->name);
    BYTES(v) = bytes;
    OFF(v) = -1;
    bool own = persistent(g, v) && !v->bucket; // members live as long as they are used
    FIRST(v) = own ? 0 : v->producer ? v->producer->id : last + 1;
    LAST(v) = own ? last : v->producer ? FIRST(v) : -1;
  }
  for (int i = 0; i < g->nnodes; i++) {
    IrNode *n = g->nodes[i];
    IR_ASSERT(n->id == i);
    for (int k = 0; k < n->nin; k++) {
      if (LAST(n->in[k]) < i)
        LAST(n->in[k]) = i;
      if (FIRST(n->in[k]) > i)
        FIRST(n->in[k]) = i;
    }
  }
  // A bucket is live while any value placed in it is.
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *v = g->values[i], *b = v->bucket;
    if (!b)
      continue;
    IR_ASSERT(!b->bucket && (v->in_shard || BYTES(v) + v->bucket_off <= BYTES(b)));
    if (FIRST(v) < FIRST(b))
      FIRST(b) = FIRST(v);
    if (LAST(v) > LAST(b))
      LAST(b) = LAST(v);
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
      rootoff[i] = g->values[i]->in_shard ? 0 : g->values[i]->bucket_off;
    }
  for (int i = 0; i < g->nnodes; i++) {
    IrNode *n = g->nodes[i];
    int out = 0, k = n->op == OP_RESHAPE && n->nin == 1 ? 0 : pass_in_place(n, &out);
    IrValue *x = k >= 0 ? n->in[k] : NULL;
    IrValue *y = n->op == OP_RESHAPE ? (n->nout == 1 ? n->out[0] : NULL) : n->out[out];
    if (!x || !y || persistent(g, y) || y->bucket || x->host || y->host ||
        BYTES(x) != BYTES(y))
      continue;
    IrValue *r = root[x->id] ? root[x->id] : x;
    // in place: over a buffer that dies here, of the program's transients (its last reader
    // after every view made of it before: a later view of it reads it later)
    if (n->op != OP_RESHAPE && (LAST(r) != i || persistent(g, r) || x->bucket || r->host))
      continue;
    root[y->id] = r;
    rootoff[y->id] = rootoff[x->id];
    if (LAST(r) < LAST(y))
      LAST(r) = LAST(y);
  }
  SeriesSet ss = {0};
  series_build(&ss, g, root, rootoff);
  series_close(&ss, g, m);
  // Series whose members take two buffers in turn keep their loops so; first-fit may pack
  // those members tighter one by one (their loops then unroll). Both are tried; the loops are
  // kept unless writing the blocks out saves more than 1/32 of the arena (a loop is a
  // fraction of the code to compile and read: GPT-2 124M's model.c at dp 2 with ZeRO-3 is
  // 1,459 lines with its loops and 3,608 without, for 1.6% more arena).
  bool *turns = calloc((size_t)ss.n + 1, sizeof *turns), any = false;
  IR_ASSERT(turns);
  for (int s = 0; s < ss.n; s++)
    any |= turns[s] = series_turns(g, m, &ss, &ss.s[s]);
  int64_t end = place_all(g, m, &ss, root, last, turns, false);
  if (any) {
    int64_t *off = malloc(((size_t)g->nvalues + 1) * sizeof *off);
    IR_ASSERT(off);
    memcpy(off, m->offset, (size_t)g->nvalues * sizeof *off);
    // the persistent and host regions come out the same (no series there takes turns): only
    // the offsets go back
    int64_t apart_end = place_all(g, m, &ss, root, last, turns, true);
    if (apart_end < end - end / 32)
      end = apart_end;
    else
      memcpy(m->offset, off, (size_t)g->nvalues * sizeof *off);
    free(off);
  }
  free(turns);
  m->arena_bytes = end;
  for (int i = 0; i < g->nvalues; i++)
    if (root[i])
      OFF(g->values[i]) = OFF(root[i]) + rootoff[i];
  // The peak of live bytes (pass_live_bytes_at at every position, in one
  // sweep: each buffer adds its bytes at its first use and takes them away
  // after its last) and its formula.
  int64_t *delta = calloc((size_t)g->nnodes + 2, sizeof *delta);
  IR_ASSERT(delta);
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    int a = FIRST(v) > 0 ? FIRST(v) : 0, b = LAST(v) < g->nnodes ? LAST(v) : g->nnodes - 1;
    if (occupies(m, v) && a <= b)
      delta[a] += BYTES(v), delta[b + 1] -= BYTES(v);
  }
  m->peak_live_bytes = 0;
  m->peak_at = 0;
  int64_t live = 0;
  for (int t = 0; t < g->nnodes; t++) {
    live += delta[t];
    if (live > m->peak_live_bytes) {
      m->peak_live_bytes = live;
      m->peak_at = t;
    }
  }
  free(delta);
  const Sym *f = sym_const(&g->arena, 0);
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *v = g->values[i];
    if (FIRST(v) <= m->peak_at && m->peak_at <= LAST(v) && v->rank >= 0 && !v->host &&
        !pass_view_of(m, v))
      f = sym_add(&g->arena, f, ir_nbytes(g, v));
  }
  m->peak_formula = f;
  free(root), free(rootoff);
  series_free(&ss);
  return 0;
}
