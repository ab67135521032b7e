// IR: text round trip, shape-rule errors, verifier, and the memory planner's
// invariants. With a DSL file list as arguments, also round-trips those
// models after the whole pipeline.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "passes.h"

static int passed, failed;

#define CHECK(cond, ...)                                                                         \
  do {                                                                                           \
    if (cond)                                                                                    \
      passed++;                                                                                  \
    else {                                                                                       \
      failed++;                                                                                  \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                               \
      printf(__VA_ARGS__);                                                                       \
      printf("\n");                                                                              \
    }                                                                                            \
  } while (0)

// A small MLP written as IR text, covering most ops.
static const char mlp_ir[] =
    "graph \"mlp\"\n"
    "sym B = 8\nsym D = 6\nsym H = 10\nsym K = 4\n"
    "input %x : f32[B,D]\n"
    "input %y : i32[B] classes(K)\n"
    "param %w1 : f32[D,H] normal(0.1)\n"
    "param %b1 : f32[H] zeros\n"
    "param %g : f32[H] ones\n"
    "param %w2 : f32[H,K] normal(0.1)\n"
    "forward\n"
    "  %h : f32[B,H] = matmul(%x, %w1) @\"mlp.mtc\":5:9\n"
    "  %hb : f32[B,H] = add(%h, %b1) #1 @\"mlp.mtc\":5:15\n"
    "  %a : f32[B,H] = gelu(%hb) #1\n"
    "  %n : f32[B,H] = layernorm(%a, %g, %b1) eps=1e-05 #1\n"
    "  %\"odd name/1\" : f32[B,H] = relu(%n) @\"node/7\"\n"
    "  %lo : f32[B,K] = matmul(%\"odd name/1\", %w2)\n"
    "  %loss : f32[] = cross_entropy(%lo, %y)\n"
    "loss %loss\n";

// The graph through every pass; its memory plan in *mem.
static IrGraph *compile(const char *text, IrDiag *d, MemPlan **mem) {
  IrGraph *g = ir_parse(text, "test.ir", d);
  PassCtx ctx = {.opt = pass_default_options(), .diag = d};
  if (g && pass_run_all(g, &ctx)) {
    pass_memplan_free(ctx.mem);
    ir_graph_free(g);
    return NULL;
  }
  *mem = ctx.mem;
  return g;
}

// print(parse(print(g))) == print(g)
static void check_round_trip(const IrGraph *g, const char *what) {
  char *a = ir_print_str(g);
  IrDiag d = {0};
  IrGraph *h = ir_parse(a, what, &d);
  CHECK(h != NULL, "%s: the printed IR does not parse: %s", what, d.msg);
  if (!h) {
    free(a);
    return;
  }
  char *b = ir_print_str(h);
  CHECK(!strcmp(a, b), "%s: round trip differs", what);
  if (strcmp(a, b)) {
    FILE *fa = fopen("/tmp/mtc_rt_a.ir", "w"), *fb = fopen("/tmp/mtc_rt_b.ir", "w");
    if (fa && fb)
      fputs(a, fa), fputs(b, fb), printf("  (see /tmp/mtc_rt_a.ir and /tmp/mtc_rt_b.ir)\n");
    if (fa)
      fclose(fa);
    if (fb)
      fclose(fb);
  }
  free(a);
  free(b);
  ir_graph_free(h);
}

// The repeated blocks: gpt2's 4 layers make a run in forward (blocks 1 to
// 4), backward (4 to 1) and update (1 to 4), unless checkpointing makes some
// blocks differ; and the memory plan puts the values at each place of a run
// at a constant stride per block, so the emitted loops can address them.
static void check_runs(const IrGraph *g, const MemPlan *m, const char *what, int want_runs) {
  int nruns = 0, uneven = 0, places = 0;
  PassRun *runs = pass_find_runs(g, &nruns);
  CHECK(nruns == want_runs, "%s: %d runs, not %d", what, nruns, want_runs);
  for (int r = 0; r < nruns; r++) {
    const PassRun *run = &runs[r];
    CHECK(run->count >= 2 && (run->step == 1 || run->step == -1), "%s: run %d: %d blocks, step %d",
          what, r, run->count, run->step);
    for (int p = 0, np = pass_run_places(g, run); p < np; p++, places++) {
      const IrValue *v0 = pass_run_value(g, run, 0, p), *v1 = pass_run_value(g, run, 1, p);
      int64_t stride = (m->offset[v1->id] - m->offset[v0->id]) * run->step;
      for (int j = 2; j < run->count; j++)
        uneven += m->offset[pass_run_value(g, run, j, p)->id] !=
                  m->offset[v0->id] + j * run->step * stride;
    }
  }
  CHECK(uneven == 0, "%s: %d of %d places of runs are not at a constant stride", what, uneven,
        places);
  // Constant strides cost little: the arena stays within 5%% of the peak of live bytes.
  CHECK(m->arena_bytes <= m->peak_live_bytes + m->peak_live_bytes / 20,
        "%s: arena %lld bytes for a peak of %lld", what, (long long)m->arena_bytes,
        (long long)m->peak_live_bytes);
  free(runs);
}

// The buffer a view shares (itself when v is not a view).
static const IrValue *view_root(const MemPlan *m, const IrValue *v) {
  while (pass_view_of(m, v))
    v = pass_view_of(m, v);
  return v;
}

// Whether u is v or a view of it (through views of views).
static bool seen_through(const MemPlan *m, const IrValue *u, const IrValue *v) {
  while (u != v && pass_view_of(m, u))
    u = pass_view_of(m, u);
  return u == v;
}

// Whether a node after n reads the buffer r other than through v (or a view of v).
static bool read_after(const IrGraph *g, const MemPlan *m, const IrNode *n, const IrValue *r,
                       const IrValue *v) {
  for (int i = n->id + 1; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i]->nin; k++) {
      const IrValue *u = g->nodes[i]->in[k];
      if (view_root(m, u) == r && !seen_through(m, u, v))
        return true;
    }
  return false;
}

// No two buffers that are live at the same time overlap, except a view and
// the buffer it views, which share bytes by design: a view is a reshape's
// output at its input's offset, or an in-place kernel's over an input (pass_in_place) that
// nothing reads after it but through the view, and its root stays live as long as it does;
// the reported peak is the maximum over positions of live bytes (views add
// none), recomputed here independently; the arena holds every buffer.
static void check_memplan(const IrGraph *g, const MemPlan *m, const char *what) {
  int overlaps = 0, views = 0;
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i], *r = view_root(m, v);
    if (r == v)
      continue;
    views++;
    const IrNode *n = v->producer;
    int out = 0, k = n ? pass_in_place(n, &out) : -1;
    bool in_place = k >= 0 && n->out[out] == v && view_root(m, n->in[k]) == r &&
                    !read_after(g, m, n, r, v);
    CHECK(n && (n->op == OP_RESHAPE || in_place) && m->bytes[v->id] == m->bytes[r->id] &&
              m->first_use[r->id] <= m->first_use[v->id] && m->last_use[v->id] <= m->last_use[r->id],
          "%s: view '%s' is not a reshape or an in-place output inside the live range of '%s'",
          what, v->name, r->name);
  }
  for (int i = 0; i < g->nvalues; i++)
    for (int j = i + 1; j < g->nvalues; j++) {
      const IrValue *a = g->values[i], *b = g->values[j];
      if (m->bytes[a->id] == 0 || m->bytes[b->id] == 0 || view_root(m, a) == view_root(m, b))
        continue;
      bool live_together = m->first_use[a->id] <= m->last_use[b->id] && m->first_use[b->id] <= m->last_use[a->id];
      bool share = m->offset[a->id] < m->offset[b->id] + m->bytes[b->id] && m->offset[b->id] < m->offset[a->id] + m->bytes[a->id];
      overlaps += live_together && share;
    }
  CHECK(overlaps == 0, "%s: %d pairs of live buffers overlap", what, overlaps);
  int64_t peak = 0;
  for (int t = 0; t < g->nnodes; t++) {
    int64_t live = 0;
    for (int i = 0; i < g->nvalues; i++) {
      const IrValue *v = g->values[i];
      bool on = m->first_use[v->id] <= t && t <= m->last_use[v->id] && view_root(m, v) == v;
      live += on ? m->bytes[v->id] : 0;
    }
    if (live > peak)
      peak = live;
  }
  CHECK(peak == m->peak_live_bytes, "%s: peak %lld, recomputed %lld", what,
        (long long)m->peak_live_bytes, (long long)peak);
  int64_t formula = 0;
  sym_eval(m->peak_formula, &g->syms, &formula);
  CHECK(formula == m->peak_live_bytes, "%s: peak formula gives %lld, not %lld", what,
        (long long)formula, (long long)m->peak_live_bytes);
  bool inside = true;
  for (int i = 0; i < g->nvalues; i++)
    inside &= m->offset[g->values[i]->id] >= 0 &&
              m->offset[g->values[i]->id] + m->bytes[g->values[i]->id] <= m->arena_bytes;
  CHECK(inside, "%s: a buffer lies outside the arena", what);
  CHECK(m->arena_bytes >= m->peak_live_bytes, "%s: arena smaller than the peak", what);
  printf("%s: arena %lld bytes, peak live %lld bytes (%.1f%% over), %d views\n", what,
         (long long)m->arena_bytes, (long long)m->peak_live_bytes,
         100.0 * (double)(m->arena_bytes - m->peak_live_bytes) / (double)m->peak_live_bytes,
         views);
}

// Shape errors: each graph must fail with a message containing `want` at the
// given line.
static const struct {
  const char *text;
  int line;
  const char *want;
} bad[] = {
    {"sym M = 2\nsym K = 3\nparam %a : f32[M,K]\nparam %b : f32[M,K]\nforward\n"
     "%c : f32[M,M] = matmul(%a, %b)\n",
     6, "matmul: inner dims differ: 'a' [M,K] and 'b' [M,K] (K vs M)"},
    {"sym M = 2\nsym K = 3\nparam %a : f32[M,K]\nparam %b : f32[K,M]\nforward\n"
     "%c : f32[M,K] = add(%a, %b)\n",
     6, "do not broadcast"},
    {"sym M = 2\nparam %a : f32[M]\nforward\n%c : f32[M,M] = gelu(%a)\n", 4,
     "declared f32[M,M] but the op gives f32[M]"},
    {"sym M = 2\nparam %a : f32[M,3]\nforward\n%c : f32[7] = reshape(%a)\n", 4,
     "cannot become [7]"},
    {"sym M = 2\nparam %a : f32[M,3]\nforward\n%c : f32[3,M] = transpose(%a) perm=[0,0]\n", 4,
     "perm must list each"},
    {"sym M = 2\nparam %a : f32[M,6]\nforward\n%c : f32[M,2], %d : f32[M,2] = split(%a) axis=1 "
     "sizes=[2,2]\n",
     4, "sizes add up to 4"},
    {"sym M = 2\nparam %a : f32[M,6]\nparam %w : f32[5]\nforward\n"
     "%c : f32[M,6] = layernorm(%a, %w, %w)\n",
     5, "it must be [6]"},
    {"sym N = 2\nsym V = 3\nparam %a : f32[N,V]\ninput %t : i32[V] classes(V)\nforward\n"
     "%l : f32[] = cross_entropy(%a, %t)\n",
     6, "without its last dim"},
    {"sym N = 2\nparam %a : f32[N]\nforward\n%l : f32[] = embedding(%a, %a)\n", 4, "must be i32"},
    {"sym N = 2\nparam %a : f32[N]\nforward\n%l : f32[N] = frobnicate(%a)\n", 4, "unknown op"},
    {"sym N = 2\nparam %a : f32[N]\nforward\n%l : f32[N] = gelu(%zz)\n", 4, "unknown value '%zz'"},
    {"sym N = 2\nparam %a : f32[N]\nforward\n%l : f32[N] = gelu(%a, %a)\n", 4,
     "wrong number of inputs"},
    {"sym N = 2\nparam %a : f32[N]\nforward\n%a : f32[N] = gelu(%a)\n", 4, "defined twice"},
    {"sym N = 2\nparam %a : f32[N\n", 2, "expected ']'"},
    {"sym N = 2\nparam %a : f32[N]\nforward\n%l : f32[N] = gelu(%a)\nloss %l\n", 0,
     "must be a scalar"},
    // attention's operands: a bias of the wrong shape, a mask over other keys, and causal
    // attention with queries and keys of two lengths
    {"sym B = 2\nsym T = 3\nsym D = 2\nparam %q : f32[B,T,D]\nparam %b : f32[B,T,D]\nforward\n"
     "%y : f32[B,T,D], %lse : f32[B,T] = attention(%q, %q, %q, %b)\n", 7,
     "the bias 'b' [B,T,D] must be f32 [.., T, TK]"},
    {"sym B = 2\nsym T = 3\nsym D = 2\nparam %q : f32[B,T,D]\ninput %m : i32[B,D] mask(2)\n"
     "forward\n"
     "%y : f32[B,T,D], %lse : f32[B,T] = attention(%q, %q, %q, %m)\n", 7,
     "the key-padding mask 'm' [B,D] must be [.., TK]"},
    {"sym B = 2\nsym T = 3\nsym S = 4\nsym D = 2\nparam %q : f32[B,T,D]\nparam %k : f32[B,S,D]\n"
     "forward\n%y : f32[B,T,D], %lse : f32[B,T] = attention(%q, %k, %k) causal=1\n", 8,
     "(and their length when causal)"},
    {"sym B = 2\nsym T = 3\nsym D = 2\nparam %q : f32[B,T,D]\nforward\n"
     "%y : f32[B,T,D] = attention(%q, %q, %q)\n", 6,
     "wrong number of inputs or outputs for 'attention'"},
    // a max pool whose padding could fill a window; a gradient of another shape
    {"param %x : f32[2,3,8,8]\nforward\n"
     "%y : f32[2,3,5,5] = maxpool2d(%x) kernel=[2,2] strides=[2,2] pads=[2,2,2,2]\n", 3,
     "maxpool2d: pads [2, 2, 2, 2] must each be less than the kernel [2, 2]"},
    {"param %x : f32[2,3,8,8]\nparam %g : f32[2,3,4,4]\nforward\n"
     "%y : f32[2,3,8,8] = maxpool2d_bwd(%g, %x) kernel=[3,3] strides=[2,2]\n", 4,
     "maxpool2d_bwd: the output's gradient 'g' is f32[2,3,4,4], but 'x' [2,3,8,8] pools to "
     "[2,3,3,3]"},
    // too few inputs for a rule that reads them (it crashed reading an absent q)
    {"sym B = 2\nsym T = 3\nsym D = 2\nparam %q : f32[B,T,D]\nforward\n"
     "%a : f32[B,T,D], %b : f32[B,T,D], %c : f32[B,T,D] = attention_bwd(%q)\n", 6,
     "attention_bwd takes 6 inputs, then a key-padding mask (i32) and a bias (f32) when there, "
     "in that order; it has 1"},
    {"sym B = 2\nsym T = 3\nsym D = 2\nparam %q : f32[B,T,D]\nforward\n"
     "%y : f32[B,T,D], %l : f32[B,T] = attention()\n", 6, "attention takes 3 inputs"},
};

// One layer applied three times on the same weights (`#1.k`: use k of block 1, as the ONNX
// frontend numbers ALBERT's): its uses run as loops, forward over uses 0 to 2 and backward over
// 1 to 0 (use 2, the first in backward, makes the gradients the others add to), each at a
// constant stride, and the weights stay one buffer.
static const char shared_ir[] =
    "graph \"shared\"\n"
    "sym B = 16\nsym D = 32\nsym K = 3\n"
    "input %x : f32[B,D]\n"
    "input %y : i32[B] classes(K)\n"
    "param %we : f32[D,D] normal(0.1)\n"
    "param %w : f32[D,D] normal(0.1)\n"
    "param %wk : f32[D,K] normal(0.1)\n"
    "forward\n"
    "  %e : f32[B,D] = matmul(%x, %we)\n"
    "  %h0 : f32[B,D] = matmul(%e, %w) #1\n"
    "  %a0 : f32[B,D] = tanh(%h0) #1\n"
    "  %h1 : f32[B,D] = matmul(%a0, %w) #1.1\n"
    "  %a1 : f32[B,D] = tanh(%h1) #1.1\n"
    "  %h2 : f32[B,D] = matmul(%a1, %w) #1.2\n"
    "  %a2 : f32[B,D] = tanh(%h2) #1.2\n"
    "  %lo : f32[B,K] = matmul(%a2, %wk)\n"
    "  %loss : f32[] = cross_entropy(%lo, %y)\n"
    "loss %loss\n";

static void check_shared_layer(void) {
  IrDiag d = {0};
  MemPlan *mem = NULL;
  IrGraph *g = compile(shared_ir, &d, &mem);
  CHECK(g != NULL, "shared: %s", d.msg);
  if (!g)
    return;
  check_round_trip(g, "shared.ir");
  check_runs(g, mem, "shared.ir", 2);
  int nruns = 0;
  PassRun *runs = pass_find_runs(g, &nruns);
  for (int r = 0; r < nruns; r++) {
    const PassRun *run = &runs[r];
    bool fwd = g->nodes[run->first]->phase == PHASE_FORWARD;
    CHECK(run->by_use && run->block == 1 && run->use == (fwd ? 0 : 1) &&
              run->count == (fwd ? 3 : 2) && run->step == (fwd ? 1 : -1),
          "shared: run %d: uses %d.. (%d, step %d, by use %d)", r, run->use, run->count,
          run->step, run->by_use);
  }
  free(runs);
  pass_memplan_free(mem);
  ir_graph_free(g);
}

static void check_errors(void) {
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    IrDiag d = {0};
    IrGraph *g = ir_parse(bad[i].text, "bad.ir", &d);
    int rc = g ? ir_verify(g, NULL, &d) : -1;
    if (!g && !d.msg[0])
      strcpy(d.msg, "(no message)");
    CHECK(rc != 0 && strstr(d.msg, bad[i].want) && (bad[i].line == 0 || d.loc.line == bad[i].line),
          "bad graph %zu: want line %d '%s', got line %d '%s'", i, bad[i].line, bad[i].want,
          d.loc.line, d.msg);
    ir_graph_free(g);
  }
}

// The graph's name index finds values after they are made, renamed and
// removed; the verifier finds two values named alike however far apart.
static void check_names(void) {
  IrGraph *g = ir_graph_new("names");
  IrValue *v[600];
  for (int i = 0; i < 600; i++)
    v[i] = ir_value_new(g, i % 2 ? "x" : NULL, DT_F32, ROLE_CONST);
  CHECK(ir_value_find(g, "x") == v[1] && ir_value_find(g, "x.5") == v[11] &&
            ir_value_find(g, "598") == v[598] && !ir_value_find(g, "x.300"),
        "names: made values are found");
  ir_value_rename(g, v[1], "y");
  IrValue *x = ir_value_new(g, "x", DT_F32, ROLE_CONST);
  CHECK(ir_value_find(g, "y") == v[1] && ir_value_find(g, "x") == x && !strcmp(x->name, "x"),
        "names: a renamed value is found by its new name only");
  ir_value_set_name(g, x, "z");
  CHECK(ir_value_find(g, "z") == x && !ir_value_find(g, "x"), "names: set_name");
  IrDiag d = {0};
  CHECK(ir_verify(g, "names", &d) == 0, "names: unique names verify: %s", d.msg);
  v[590]->name = v[3]->name; // behind the index's back, as a buggy pass would
  CHECK(ir_verify(g, "names", &d) != 0 && strstr(d.msg, "two values are named 'x.1'"),
        "names: a duplicate is found: '%s'", d.msg);
  ir_remove_unused(g, ROLE_CONST);
  CHECK(g->nvalues == 0 && !ir_value_find(g, "y") && !ir_value_find(g, "z"),
        "names: removed values are not found");
  ir_graph_free(g);
  // A set of strings, through several growths.
  IrStrSet set = {0};
  static char str[1000][8];
  bool added = true, again = false, has = true;
  for (int i = 0; i < 1000; i++) {
    snprintf(str[i], sizeof str[i], "s%d", i);
    added &= ir_strset_add(&set, str[i]);
  }
  for (int i = 0; i < 1000; i++) {
    char copy[8];
    snprintf(copy, sizeof copy, "s%d", i);
    again |= ir_strset_add(&set, copy);
    has &= ir_strset_has(&set, copy);
  }
  CHECK(added && !again && has && set.n == 1000 && !ir_strset_has(&set, "s1000"),
        "strset: 1000 strings added once each");
  ir_strset_free(&set);
}

// A long graph: an MLP of about n nodes as IR text (each layer h = h +
// gelu(h @ w)), through every pass, each verified, and planned. With the
// pairwise name checks and buffer placement of before, 40,000 nodes took
// minutes (the CTest test ir_large runs this under a timeout that catches
// that); they now take about a second. bench/compile_time.sh times them.
static void check_large(int n) {
  int layers = (n - 2) / 3;
  size_t cap = 256 + (size_t)layers * 200, len = 0;
  char *text = malloc(cap);
  IR_ASSERT(text);
  len += (size_t)snprintf(text + len, cap - len,
                          "graph \"chain\"\nsym B = 4\nsym C = 16\nsym K = 10\n"
                          "input %%x : f32[B,C]\ninput %%y : i32[B] classes(K)\n");
  for (int i = 1; i <= layers; i++)
    len += (size_t)snprintf(text + len, cap - len, "param %%w%d : f32[C,C] normal(0.02)\n", i);
  len += (size_t)snprintf(text + len, cap - len, "param %%head : f32[C,K] normal(0.02)\nforward\n");
  char h[32] = "x"; // the layer's input
  for (int i = 1; i <= layers; i++) {
    len += (size_t)snprintf(text + len, cap - len,
                            "%%a%d : f32[B,C] = matmul(%%%s, %%w%d)\n%%g%d : f32[B,C] = gelu(%%a%d)\n"
                            "%%h%d : f32[B,C] = add(%%%s, %%g%d)\n",
                            i, h, i, i, i, i, h, i);
    snprintf(h, sizeof h, "h%d", i);
  }
  snprintf(text + len, cap - len,
           "%%logits : f32[B,K] = matmul(%%%s, %%head)\n"
           "%%loss : f32[] = cross_entropy(%%logits, %%y)\nloss %%loss\n", h);
  IrDiag d = {0};
  MemPlan *mem = NULL;
  IrGraph *g = compile(text, &d, &mem);
  CHECK(g != NULL, "large: %d nodes: %s", n, d.msg);
  if (g) {
    const IrValue *v = ir_value_find(g, h);
    CHECK(g->nnodes > 2 * n && v && v->producer && v->producer->op == OP_ADD,
          "large: %d nodes in the training graph, '%s' found", g->nnodes, h);
    CHECK(mem->arena_bytes >= mem->peak_live_bytes &&
              mem->arena_bytes <= mem->peak_live_bytes + mem->peak_live_bytes / 20,
          "large: arena %lld bytes for a peak of %lld", (long long)mem->arena_bytes,
          (long long)mem->peak_live_bytes);
    printf("large: %d nodes of IR text, %d in training: arena %lld bytes, peak live %lld\n", n,
           g->nnodes, (long long)mem->arena_bytes, (long long)mem->peak_live_bytes);
  }
  pass_memplan_free(mem);
  ir_graph_free(g);
  free(text);
}

static void check_sizes_and_flops(void) {
  IrDiag d = {0};
  IrGraph *g = ir_parse(mlp_ir, "mlp.ir", &d);
  IR_ASSERT(g);
  IrNode *mm = g->nodes[0];
  CHECK(!strcmp(sym_str(&g->arena, ir_flops(g, mm), &g->syms), "2*B*D*H"), "matmul flops %s",
        sym_str(&g->arena, ir_flops(g, mm), &g->syms));
  CHECK(!strcmp(sym_str(&g->arena, ir_nbytes(g, mm->out[0]), &g->syms), "4*B*H"), "bytes %s",
        sym_str(&g->arena, ir_nbytes(g, mm->out[0]), &g->syms));
  CHECK(ir_eval(g, ir_flops(g, mm)) == 2 * 8 * 6 * 10, "matmul flops value");
  ir_graph_free(g);
  // a causal softmax computes half of its scores
  static const char sm[] = "graph \"sm\"\nsym B = 2\nsym T = 8\ninput %s : f32[B,T,T]\n"
                           "forward\n  %p : f32[B,T,T] = softmax(%s)\n"
                           "  %c : f32[B,T,T] = softmax(%s) causal=1\n";
  g = ir_parse(sm, "sm.ir", &d);
  CHECK(g != NULL, "softmax ir: %s", d.msg);
  if (g) {
    CHECK(ir_eval(g, ir_flops(g, g->nodes[0])) == 5 * 2 * 8 * 8 &&
              ir_eval(g, ir_flops(g, g->nodes[1])) == 5 * 2 * 8 * 8 / 2,
          "softmax flops %lld, causal %lld", (long long)ir_eval(g, ir_flops(g, g->nodes[0])),
          (long long)ir_eval(g, ir_flops(g, g->nodes[1])));
    ir_graph_free(g);
  }
}

// ir_clone_nodes: the clones go at the insertion point with the builder's
// phase and block, read the clones of earlier nodes of the list through the
// value map and the originals elsewhere, keep op, attributes, location,
// shape and role, and are named NAME.suffix (unique: a second clone of the
// same node is NAME.suffix.1).
static void check_clone(void) {
  IrDiag d = {0};
  IrGraph *g = ir_parse(mlp_ir, "mlp.ir", &d);
  IR_ASSERT(g);
  int nvalues = g->nvalues, nnodes = g->nnodes;
  IrValue **map = calloc((size_t)nvalues, sizeof *map);
  IR_ASSERT(map);
  IrValue *h = ir_value_find(g, "h"), *hb = ir_value_find(g, "hb"), *n = ir_value_find(g, "n");
  IrNode *orig[3] = {hb->producer, g->nodes[2], n->producer}; // add, gelu, layernorm
  g->cur_phase = PHASE_FORWARD;
  g->cur_block = 7;
  ir_insert_before(g, 5); // before the second matmul
  IrNode *c = ir_clone_nodes(g, orig, 3, map, "rc", &d);
  ir_insert_before(g, -1);
  CHECK(c && c->id == 5 && g->nnodes == nnodes + 3,
        "clone: 3 nodes at position 5 (first %d, %d nodes)", c ? c->id : -1, g->nnodes);
  if (!c) {
    free(map);
    ir_graph_free(g);
    return;
  }
  IrNode *add = g->nodes[5], *gelu = g->nodes[6], *ln = g->nodes[7];
  CHECK(add->op == OP_ADD && gelu->op == OP_GELU && ln->op == OP_LAYERNORM, "clone: ops in order");
  CHECK(add->in[0] == h && gelu->in[0] == map[hb->id] && ln->in[0] == gelu->out[0] &&
            ln->in[1] == orig[2]->in[1] && ln->in[2] == orig[2]->in[2],
        "clone: inputs through the map, others as they are");
  CHECK(map[hb->id] == add->out[0] && !strcmp(add->out[0]->name, "hb.rc") &&
            !strcmp(ln->out[0]->name, "n.rc") && ln->out[0]->producer == ln,
        "clone: outputs %s, %s", add->out[0]->name, ln->out[0]->name);
  CHECK(ln->block == 7 && ln->phase == PHASE_FORWARD && add->loc.line == 5 && add->loc.col == 15 &&
            ir_attr_f(ln, "eps") == 1e-5 && ln->out[0]->role == ROLE_ACT &&
            ir_same_shape(ln->out[0], n),
        "clone: block, phase, location, attributes, role and shape");
  CHECK(orig[1]->in[0] == hb && g->nodes[8]->in[0]->name[0] == 'o',
        "clone: the originals and later nodes are unchanged");
  CHECK(ir_verify(g, "clone", &d) == 0, "clone: the graph verifies: %s", d.msg);
  // Again, from scratch: the names stay unique.
  memset(map, 0, (size_t)nvalues * sizeof *map);
  c = ir_clone_nodes(g, orig, 1, map, "rc", &d);
  CHECK(c && !strcmp(c->out[0]->name, "hb.rc.1") && c->id == g->nnodes - 1,
        "clone: a second clone is hb.rc.1, appended (got %s)", c ? c->out[0]->name : "none");
  CHECK(ir_verify(g, "clone", &d) == 0, "clone: still verifies: %s", d.msg);
  check_round_trip(g, "clone");
  free(map);
  ir_graph_free(g);
}

// ir_node_set_op: a node specialized in place keeps its outputs (and their
// readers) and gains the new op's extra outputs; ir_node_set_output hands a
// node's output to another value.
static void check_set_op(void) {
  IrDiag d = {0};
  IrGraph *g = ir_parse(mlp_ir, "mlp.ir", &d);
  IR_ASSERT(g);
  IrNode *ln = ir_value_find(g, "n")->producer, *mm = g->nodes[5];
  IrValue *n = ln->out[0];
  IrValue *in[3] = {ln->in[0], ln->in[1], ln->in[2]};
  ir_node_set_op(g, mm, OP_MATMUL, mm->in, 2);   // same op, same outputs
  CHECK(mm->nout == 1 && mm->out[0]->producer == mm, "set_op: outputs kept");
  ir_node_set_op(g, ln, OP_LAYERNORM_BWD, in, 3);  // 1 output -> 3
  CHECK(ln->op == OP_LAYERNORM_BWD && ln->nin == 3 && ln->nout == 3 && ln->out[0] == n &&
            ln->out[1]->producer == ln && ln->out[2]->producer == ln && ln->out[1] != n,
        "set_op: the first output stays, two fresh ones follow");
  IrValue *v = ir_value_new(g, "moved", DT_F32, ROLE_ACT);
  ir_node_set_output(ln, 0, v);
  CHECK(ln->out[0] == v && v->producer == ln && n->producer == NULL,
        "set_output: the node makes the new value, the old one has no producer");
  ir_graph_free(g);
}

// Forward activations still live when backward starts, and the peak of
// live bytes (pass_live_bytes_at, recomputed over the schedule).
static void live_in_backward(const IrGraph *g, const MemPlan *m, int *acts, int64_t *peak) {
  int bwd = 0;
  while (bwd < g->nnodes && g->nodes[bwd]->phase == PHASE_FORWARD)
    bwd++;
  *acts = 0;
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    *acts += v->role == ROLE_ACT && v->producer && v->producer->phase == PHASE_FORWARD &&
             m->last_use[v->id] >= bwd;
  }
  *peak = 0;
  for (int t = 0; t < g->nnodes; t++)
    if (pass_live_bytes_at(m, g, t) > *peak)
      *peak = pass_live_bytes_at(m, g, t);
}

// Under ZeRO-3 (lowered after recompute), each checkpointed block's
// parameters are gathered for backward before the recompute: the wait of the
// block's backward all_gather comes before its first clone, and no clone
// reads a parameter itself (only its gathered copy, NAME.bwd).
static void check_recompute_zero3(const char *path) {
  IrDiag d = {0};
  IrGraph *g = fe_dsl_load(path, NULL, 0, 0, &d);
  Plan plan = plan_single();
  plan.lower = true;
  plan.mesh = mesh_make(2, 1);
  plan.rest.zero = 3;
  plan.checkpoint = PLAN_CHECKPOINT_ALL;
  PassCtx ctx = {.opt = pass_default_options(), .diag = &d, .plan = &plan};
  int rc = g ? pass_run_all(g, &ctx) : -1;
  CHECK(rc == 0, "recompute under ZeRO-3: %s", d.msg);
  int wait_at[5], clone_at[5], param_reads = 0;
  for (int b = 0; b < 5; b++)
    wait_at[b] = clone_at[b] = -1;
  for (int i = 0; !rc && i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    if (n->op == OP_COMM_WAIT && !strncmp(n->in[0]->name, "params.bwd.b", 12))
      wait_at[n->block] = i;
    if (n->nout == 0 || !strstr(n->out[0]->name, ".rc"))
      continue;
    if (clone_at[n->block] < 0)
      clone_at[n->block] = i;
    for (int k = 0; k < n->nin; k++)
      param_reads += n->in[k]->role == ROLE_PARAM;
  }
  for (int b = 1; !rc && b <= 4; b++)
    CHECK(wait_at[b] >= 0 && clone_at[b] > wait_at[b],
          "ZeRO-3 block %d: parameters gathered at %d, recomputed at %d", b, wait_at[b],
          clone_at[b]);
  CHECK(param_reads == 0, "ZeRO-3: clones read %d parameters instead of their copies",
        param_reads);
  pass_memplan_free(ctx.mem);
  ir_graph_free(g);
}

// passes/recompute.c on GPT-2 (4 layers): with none, the first K and all
// layers checkpointed, the graph verifies (pass_run_all) and round-trips;
// only checkpointed blocks get clones (NAME.rc, phase backward), placed
// before their block's first backward node, and that block's backward reads
// no original activation of its own; fewer forward activations are live in
// backward and the peak drops, more with more layers; K beyond the layers
// is an error that says how many there are.
static void check_recompute(const char *path) {
  int acts[3] = {0}, ks[3] = {0, 1, PLAN_CHECKPOINT_ALL};
  int64_t peak[3] = {0};
  for (int c = 0; c < 3; c++) {
    IrDiag d = {0};
    IrGraph *g = fe_dsl_load(path, NULL, 0, 0, &d);
    Plan plan = plan_single();
    plan.checkpoint = ks[c];
    PassCtx ctx = {.opt = pass_default_options(), .diag = &d, .plan = &plan};
    int rc = g ? pass_run_all(g, &ctx) : -1;
    CHECK(rc == 0, "recompute %d: %s", ks[c], d.msg);
    if (rc) {
      ir_graph_free(g);
      continue;
    }
    int want = ks[c] == PLAN_CHECKPOINT_ALL ? 4 : ks[c];
    CHECK(ctx.nlayers == 4 && ctx.ncheckpointed == want, "recompute %d: %d of %d layers", ks[c],
          ctx.ncheckpointed, ctx.nlayers);
    int clones[5] = {0}, stale = 0, misplaced = 0;
    for (int i = 0; i < g->nnodes; i++) {
      const IrNode *n = g->nodes[i];
      bool clone = n->nout > 0 && strstr(n->out[0]->name, ".rc");
      if (clone) {
        clones[n->block]++;
        misplaced += n->phase != PHASE_BACKWARD || n->out[0]->role != ROLE_ACT ||
                     (i > 0 && g->nodes[i - 1]->block == n->block &&
                      g->nodes[i - 1]->phase == PHASE_BACKWARD &&
                      !strstr(g->nodes[i - 1]->out[0]->name, ".rc"));
      }
      for (int k = 0; !clone && n->phase == PHASE_BACKWARD && n->block >= 1 &&
                      n->block <= want && k < n->nin; k++) {
        const IrNode *p = n->in[k]->producer;
        stale += p && p->phase == PHASE_FORWARD && p->block == n->block;
      }
    }
    bool per_block = clones[0] == 0;  // the same clones in each checkpointed layer, none elsewhere
    for (int b = 1; b <= 4; b++)
      per_block &= b <= want ? clones[b] == clones[1] && clones[b] > 5 : clones[b] == 0;
    CHECK(per_block, "recompute %d: clones per block %d %d %d %d %d", ks[c], clones[0], clones[1],
          clones[2], clones[3], clones[4]);
    CHECK(misplaced == 0, "recompute %d: %d clones out of place", ks[c], misplaced);
    CHECK(stale == 0, "recompute %d: a checkpointed block's backward reads %d originals", ks[c],
          stale);
    live_in_backward(g, ctx.mem, &acts[c], &peak[c]);
    CHECK(peak[c] == ctx.mem->peak_live_bytes, "recompute %d: peak %lld, memplan's %lld", ks[c],
          (long long)peak[c], (long long)ctx.mem->peak_live_bytes);
    char what[64];
    snprintf(what, sizeof what, "gpt2 --checkpoint %s", c == 0 ? "none" : c == 1 ? "1" : "all");
    check_round_trip(g, what);
    check_memplan(g, ctx.mem, what);
    // Checkpointing the first block alone makes its backward differ: blocks 4
    // to 2 stay one run there.
    check_runs(g, ctx.mem, what, 3);
    pass_memplan_free(ctx.mem);
    ir_graph_free(g);
  }
  printf("recompute: forward activations live in backward %d, %d, %d; peak %lld, %lld, %lld "
         "bytes (none, 1, all)\n", acts[0], acts[1], acts[2], (long long)peak[0],
         (long long)peak[1], (long long)peak[2]);
  CHECK(acts[1] < acts[0] && acts[2] < acts[1], "recompute: live activations %d, %d, %d", acts[0],
        acts[1], acts[2]);
  CHECK(peak[1] < peak[0] && peak[2] < peak[1], "recompute: peaks %lld, %lld, %lld",
        (long long)peak[0], (long long)peak[1], (long long)peak[2]);
  // More layers than the model has: an error naming the count.
  IrDiag d = {0};
  IrGraph *g = fe_dsl_load(path, NULL, 0, 0, &d);
  Plan five = plan_single();
  five.checkpoint = 5;
  PassCtx ctx = {.opt = pass_default_options(), .diag = &d, .plan = &five};
  CHECK(g && pass_run_all(g, &ctx) != 0 && strstr(d.msg, "has 4 repeated layers"),
        "recompute 5 of 4 layers: '%s'", d.msg);
  ir_graph_free(g);
  check_recompute_zero3(path);
}

static void check_dsl_model(const char *path) {
  IrDiag d = {0};
  IrGraph *g = fe_dsl_load(path, NULL, 0, 0, &d);
  PassCtx ctx = {.opt = pass_default_options(), .diag = &d};
  int rc = g ? pass_run_all(g, &ctx) : -1;
  CHECK(rc == 0, "%s: %s", path, d.msg);
  if (!rc) {
    check_round_trip(g, path);
    check_memplan(g, ctx.mem, path);
  }
  pass_memplan_free(ctx.mem);
  ir_graph_free(g);
}

// A batch of edits: nodes wait and go in, in the order made, before the node
// that was at their point when the batch began; removed nodes go at the end.
static void check_batch(void) {
  IrGraph *g = ir_graph_new("batch");
  const Sym *n4 = sym_const(&g->arena, 4);
  IrValue *x = ir_param(g, "x", 1, &n4, (IrInit){.kind = INIT_ZEROS});
  IrNode *orig[4];
  for (int i = 0; i < 4; i++)
    orig[i] = ir_node_new(g, OP_RELU, &x, 1, 1);
  ir_batch_begin(g);
  ir_insert_before(g, 2);
  IrNode *a = ir_node_new(g, OP_EXP, &x, 1, 1), *b = ir_node_new(g, OP_LOG, &x, 1, 1);
  ir_insert_before(g, 0);
  IrNode *c = ir_node_new(g, OP_TANH, &x, 1, 1);
  ir_insert_before(g, 2);   // the same point as a and b, made after them
  IrNode *e = ir_node_new(g, OP_SQRT, &x, 1, 1);
  ir_insert_before(g, -1);
  IrNode *f = ir_node_new(g, OP_ERF, &x, 1, 1);
  ir_node_remove(g, orig[1]);
  CHECK(g->nnodes == 4 && g->nodes[2] == orig[2] && orig[2]->id == 2 && a->id == 2 &&
            orig[1]->id == -1,
        "batch: the schedule stays as it was until the end");
  ir_batch_end(g);
  IrNode *want[] = {c, orig[0], a, b, e, orig[2], orig[3], f};
  int same = g->nnodes == 8;
  for (int i = 0; same && i < 8; i++)
    same = g->nodes[i] == want[i] && want[i]->id == i;
  CHECK(same, "batch: new nodes at their points in the order made, the removed node gone");
  ir_graph_free(g);
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--large")) { // test_ir --large N
    check_large(atoi(argv[2]));
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
  }
  IrDiag d = {0};
  MemPlan *mem = NULL;
  IrGraph *g = compile(mlp_ir, &d, &mem);
  CHECK(g != NULL, "mlp: %s", d.msg);
  if (g) {
    check_round_trip(g, "mlp.ir");
    check_memplan(g, mem, "mlp.ir");
    CHECK(g->nodes[4]->loc.line == 0 && !strcmp(g->nodes[4]->loc.file, "node/7"),
          "ONNX-style location kept");
    pass_memplan_free(mem);
    ir_graph_free(g);
  }
  // The SGD variant round-trips too.
  IrGraph *s = ir_parse(mlp_ir, "mlp.ir", &d);
  PassCtx ctx = {.opt = pass_default_options(), .diag = &d};
  ctx.opt.optimizer = OPTIM_SGD;
  CHECK(s && pass_run_all(s, &ctx) == 0, "mlp sgd: %s", d.msg);
  if (s)
    check_round_trip(s, "mlp-sgd.ir");
  pass_memplan_free(ctx.mem);
  ir_graph_free(s);
  check_errors();
  check_shared_layer();
  check_names();
  check_sizes_and_flops();
  check_clone();
  check_batch();
  check_set_op();
  for (int i = 1; i < argc; i++) {
    check_dsl_model(argv[i]);
    if (strstr(argv[i], "gpt2"))
      check_recompute(argv[i]);
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
