// The planner (solver/): the integer program against brute force, the
// regimes it must get right, and its formulas against REFERENCES.md.
//
//   test_solver EXAMPLES_DIR TESTS_SOLVER_DIR
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "frontend.h"
#include "internal.h"
#include "passes.h"
#include "solver.h"

static int failures;
static const char *examples, *datadir;

#define CHECK(cond, ...)                                                        \
  do {                                                                          \
    if (!(cond)) {                                                              \
      failures++;                                                               \
      fprintf(stderr, "%s:%d: FAIL: %s: ", __FILE__, __LINE__, #cond);          \
      fprintf(stderr, __VA_ARGS__);                                             \
      fputc('\n', stderr);                                                      \
    }                                                                           \
  } while (0)

static bool near(double a, double b, double rel) {
  return fabs(a - b) <= rel * fmax(fabs(a), fabs(b)) + 1e-12;
}

#define GiB (1024.0 * 1024.0 * 1024.0)

// ---- random problems vs brute force -------------------------------------------------------------

static uint64_t rng = 88172645463325252ull;
static double urand(void) {   // xorshift64
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}
static int irand(int n) { return (int)(urand() * n) % n; }

// A random problem: 2-4 units of 1-3 blocks with 2-5 choices over 2-3 layouts
// (some checkpointing: faster and bigger for the blocks they leave without), a
// chain of edges, one or two groups.
static SvProblem *random_problem(int groups) {
  SvProblem *p = calloc(1, sizeof *p);
  p->ngroups = groups;
  p->micro_total = groups == 1 ? 8 : 2 + irand(4);
  p->nlayouts = 2 + irand(2);
  for (int l = 0; l < p->nlayouts; l++)
    p->layout[l] = (SvLayout){8 >> l, 1 << l, 1, false, 0};
  for (int g = 0; g < groups; g++) {
    p->gpus[g] = 8;
    p->cap[g] = 1e12;
    p->host_cap[g] = 1e12;
  }
  p->nunits = 2 + irand(3);
  p->unit = calloc((size_t)p->nunits, sizeof *p->unit);
  for (int u = 0; u < p->nunits; u++) {
    SvUnit *un = &p->unit[u];
    un->name = "u";
    un->count = 1 + irand(3);
    un->block = -1;
    un->nchoices = 2 + irand(4);
    un->choice = calloc((size_t)un->nchoices, sizeof *un->choice);
    for (int s = 0; s < un->nchoices; s++) {
      SvChoice *c = &un->choice[s];
      c->layout = irand(p->nlayouts);
      for (int g = 0; g < groups; g++) {
        double speed = g == 0 ? 1 : 0.5 + urand();   // the second group: faster or slower
        c->t_micro[g] = (0.001 + 0.01 * urand()) * speed;
        c->t_step[g] = 0.005 * urand();
        c->mem[g] = (1 + 9 * urand()) * GiB;
        c->mem_shard[g] = 4 * urand() * GiB;
        c->peak[g] = 3 * urand() * GiB;
        c->host_shard[g] = urand() < 0.3 ? 2 * urand() * GiB : 0;
        c->t_micro_plain[g] = c->t_micro[g];
        c->mem_plain[g] = c->mem[g];
      }
      c->ckpt = urand() < 0.4;
      c->swap = !c->ckpt && urand() < 0.2;   // activations to host memory: host bytes too
      for (int g = 0; g < groups && (c->ckpt || c->swap); g++) {
        c->t_micro_plain[g] = c->t_micro[g] * (0.5 + 0.4 * urand());
        c->mem_plain[g] = c->mem[g] + 3 * urand() * GiB;
        c->host[g] = c->swap ? 3 * urand() * GiB : 0;
      }
    }
  }
  p->nedges = p->nunits - 1;
  p->edge = calloc((size_t)p->nedges, sizeof *p->edge);
  for (int e = 0; e < p->nedges; e++) {
    p->edge[e].u = e, p->edge[e].v = e + 1, p->edge[e].count = 1;
    for (int g = 0; g < groups; g++) {
      p->edge[e].r[g] = calloc((size_t)(p->nlayouts * p->nlayouts), sizeof(double));
      for (int a = 0; a < p->nlayouts; a++)
        for (int b = 0; b < p->nlayouts; b++)
          p->edge[e].r[g][a * p->nlayouts + b] = a == b ? 0 : 0.02 * urand();
    }
  }
  return p;
}

// The integer program and brute force agree on p: both infeasible, or the
// same step time.
static void agree(SvProblem *p, const char *what, int i) {
  SvSolution brute = sv_solution_new(p), ilp = sv_solution_new(p);
  SvSolveStats st;
  IrDiag d = {0};
  SvSolveOptions o = {.mip_gap = 0, .time_limit = 30};
  CHECK(!sv_brute_force(p, &brute), "%s %d: too large to enumerate", what, i);
  CHECK(!sv_solve(p, &o, &ilp, &st, &d), "%s %d: %s", what, i, d.msg);
  CHECK(ilp.feasible == brute.feasible, "%s %d: ILP feasible %d, brute force %d", what, i,
        ilp.feasible, brute.feasible);
  if (ilp.feasible && brute.feasible)
    CHECK(near(ilp.time, brute.time, 1e-6), "%s %d: ILP %.9g s, brute force %.9g s", what, i,
          ilp.time, brute.time);
  sv_solution_free(&brute);
  sv_solution_free(&ilp);
}

static void test_brute_force(void) {
  int binding = 0, partial = 0;
  for (int i = 0; i < 24; i++) {
    SvProblem *p = random_problem(i % 3 == 2 ? 2 : 1);
    agree(p, p->ngroups > 1 ? "heterogeneous, loose memory" : "loose memory", i);
    // Squeeze every GPU below what the unconstrained optimum uses.
    SvSolution best = sv_solution_new(p);
    sv_brute_force(p, &best);
    for (int g = 0; g < p->ngroups; g++) {
      p->cap[g] = best.mem[g] * (0.6 + 0.3 * urand());
      p->host_cap[g] = 1.5 * GiB;
    }
    SvSolution squeezed = sv_solution_new(p);
    sv_brute_force(p, &squeezed);
    binding += squeezed.feasible && squeezed.time > best.time;
    for (int u = 0; u < p->nunits && squeezed.feasible; u++)
      partial += squeezed.nplain[u] > 0;
    agree(p, p->ngroups > 1 ? "heterogeneous, binding memory" : "binding memory", i);
    sv_solution_free(&best);
    sv_solution_free(&squeezed);
    sv_problem_free(p);
  }
  CHECK(binding >= 5, "only %d instances had binding but satisfiable memory", binding);
  CHECK(partial >= 2, "only %d units checkpoint some of their blocks and not others", partial);

  // GLPK's errors come back as a status and a message (its error hook), and
  // GLPK works again afterwards.
  SvProblem *p = random_problem(1);
  SvSolution s = sv_solution_new(p);
  SvSolveStats st;
  IrDiag d = {0};
  SvSolveOptions bad = {.mip_gap = -1, .time_limit = 5};
  CHECK(sv_solve(p, &bad, &s, &st, &d) && strstr(d.msg, "mip_gap"), "GLPK error: '%s'", d.msg);
  agree(p, "after an error", 0);
  sv_solution_free(&s);
  sv_problem_free(p);

  // Layers deciding alone, in order, of which only the first K may checkpoint (what mtc
  // compile lowers): the rows that say so against brute force that skips the rest.
  int ordered = 0;
  for (int i = 0; i < 16; i++) {
    p = random_problem(1);
    for (int u = 0; u < p->nunits; u++)
      p->unit[u].count = 1, p->unit[u].block = u + 1;
    SvSolution any = sv_solution_new(p), first = sv_solution_new(p);
    for (int g = 0; g < p->ngroups; g++)
      p->cap[g] = 12 * GiB * p->nunits * (0.5 + 0.5 * urand());
    sv_brute_force(p, &any);
    p->ckpt_first = true;
    sv_brute_force(p, &first);
    ordered += first.feasible && (!any.feasible || first.time > any.time);
    agree(p, "the first K layers checkpoint", i);
    sv_solution_free(&any);
    sv_solution_free(&first);
    sv_problem_free(p);
  }
  CHECK(ordered >= 2, "only %d instances where the order of layers binds", ordered);

  // mtc compile on two groups (replicas of one rank, whole micro-batches, at least one each):
  // a replica that runs fewer micro-batches than the most runs ghosts, and the choices that
  // collect every micro-batch (ZeRO 2 here, the others ZeRO-1) pay for each and run the
  // micro-steps in lockstep. sv_solve first solves without those, and without memory limits;
  // with memory squeezed that plan no longer fits and the whole program is solved, split by
  // split.
  int ghosts = 0, squeezed = 0;
  for (int i = 0; i < 16; i++) {
    p = random_problem(2);
    p->replica_ranks = 1;
    p->gpus[0] = 1 + irand(2);
    p->gpus[1] = 1;
    p->micro_total = p->gpus[0] + 1 + irand(4);
    for (int l = 0; l < p->nlayouts; l++)
      p->layout[l] = (SvLayout){p->gpus[0] + 1, 1, 1, false, 0};
    for (int u = 0; u < p->nunits; u++)
      for (int c = 0; c < p->unit[u].nchoices; c++) {
        SvChoice *ch = &p->unit[u].choice[c];
        bool pays = urand() < 0.5;
        ch->zero = pays ? 2 : 1;
        for (int g = 0; g < 2; g++) {
          // (in every other instance a ghost outlasts most real micro-steps: in lockstep the
          // others then wait for it)
          ch->t_ghost[g] = ch->t_ghost_plain[g] = pays ? (i % 2 ? 0.03 : 0.004) * urand() : 0;
          // (no sharded bytes: brute force shards evenly, compile's program may not)
          ch->mem_shard[g] = ch->host_shard[g] = 0;
        }
      }
    SvSolution best = sv_solution_new(p);
    sv_brute_force(p, &best);
    bool paid = false;
    for (int u = 0; u < p->nunits && best.feasible; u++)
      for (int g = 0; g < 2; g++)
        paid |= sv_ghosts(p, &best, g) > 0 && p->unit[u].choice[best.pick[u]].t_ghost[g] > 0;
    ghosts += paid;
    agree(p, "ghost micro-batches", i);
    for (int g = 0; g < p->ngroups; g++)
      p->cap[g] = best.mem[g] * (0.7 + 0.2 * urand());
    SvSolution tight = sv_solution_new(p);
    sv_brute_force(p, &tight);
    squeezed += tight.feasible && tight.time > best.time;
    agree(p, "ghost micro-batches, binding memory", i);
    sv_solution_free(&tight);
    sv_solution_free(&best);
    sv_problem_free(p);
  }
  CHECK(ghosts >= 2 && squeezed >= 2, "only %d instances run ghost micro-batches that cost, %d "
        "with binding memory", ghosts, squeezed);
  printf("brute force: %d instances agree (%d with binding memory, slower; %d units "
         "checkpoint some of their blocks; %d where the order of checkpointed layers binds; %d "
         "that pay for ghost micro-batches, %d of 16 again slower with memory binding)\n",
         48 + 16 + 32, binding, partial, ordered, ghosts, squeezed);
}

// ---- models -------------------------------------------------------------------------------------

// examples/FILE with defines "L=48,C=1600", through the optimizer pass.
// The training graph of an example as the planner reads it, in a precision.
static IrGraph *model_in(const char *file, const char *defs, PassPrecision precision) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", examples, file);
  FeDefine d[16];
  int n = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", defs);
  for (char *tok = strtok(buf, ","); tok && n < 16; tok = strtok(NULL, ",")) {
    char *eq = strchr(tok, '=');
    *eq = '\0';
    d[n].name = strdup(tok);
    d[n++].value = atoll(eq + 1);
  }
  IrDiag diag = {0};
  IrGraph *g = fe_dsl_load(path, d, n, 0, &diag);
  for (int i = 0; i < n; i++)
    free((char *)d[i].name);
  if (!g) {
    ir_diag_print(stderr, &diag);
    exit(1);
  }
  PassCtx ctx = {.opt = pass_default_options(), .diag = &diag};
  ctx.opt.stop_after = "precision";
  ctx.opt.precision = precision;
  if (pass_run_all(g, &ctx)) {
    ir_diag_print(stderr, &diag);
    exit(1);
  }
  return g;
}

// ... in bf16 mixed precision (mtc plan's default).
static IrGraph *model(const char *file, const char *defs) {
  return model_in(file, defs, PASS_PRECISION_BF16);
}

#define GPT2_15B "L=48,C=1600,NH=25,V=50257,T=1024"
#define GPT2_350M "L=24,C=1024,NH=16,V=50257,T=1024"

static SvConfig cluster(const char *gpu, int gpus, double mem) {
  SvConfig c = sv_default_config();
  IrDiag d = {0};
  if (sv_cluster_simple(&c.cluster, gpu, gpus, 0, mem, 0, 0, &d))
    fprintf(stderr, "%s\n", d.msg), exit(1);
  c.mip_gap = 0;
  return c;
}

static SvPlan *plan(IrGraph *g, const SvConfig *c) {
  SvPlan *p;
  IrDiag d = {0};
  if (sv_plan(g, c, &p, &d))
    fprintf(stderr, "sv_plan: %s\n", d.msg), exit(1);
  return p;
}

static const SvChoice *chosen(const SvPlan *p, int u) {
  return &p->prob->unit[u].choice[p->sol.pick[u]];
}

// ZeRO-Offload's headline case (Ren et al. 2021): a 10B
// GPT-2-like model (50 layers, hidden 4096, 32 heads, a batch of 10 x 1024
// tokens, checkpointing) trains on one V100-32GB of a DGX-2 (1.5 TB of CPU
// memory). It fits only with the layers' gradients offloaded beside their
// optimizer state: the bf16 weights, 2 bytes a parameter, 19 GiB, stay; with
// the float32 gradients (4 more) it would need about 60 GiB.
static void test_zero_offload_10b(void) {
  IrGraph *g = model("gpt2.mtc", "L=50,C=4096,NH=32,V=50257,T=1024,B=10");
  SvConfig c = cluster("V100-32GB", 1, 0);
  c.cluster.group[0].dev.host_mem = 1.5e12;
  SvPlan *p = plan(g, &c);
  CHECK(p->sol.feasible, "10B does not fit on a V100-32GB with 1.5 TB of CPU memory: %s", p->why);
  for (int u = 0; u < p->prob->nunits && p->sol.feasible; u++) {
    const SvChoice *ch = chosen(p, u);
    if (p->prob->unit[u].count > 1)
      CHECK(ch->offload == 100 && ch->grads && ch->ckpt, "%s: offload %d%%, gradients %s, ckpt %d",
            p->prob->unit[u].name, ch->offload, ch->grads ? "offloaded" : "kept", ch->ckpt);
  }
  sv_plan_free(p);
  ir_graph_free(g);
}

static void test_small_model_gets_dp(void) {
  IrGraph *g = model("gpt2.mtc", "");
  SvConfig c = cluster("H100-80GB", 8, 0);
  SvPlan *p = plan(g, &c);
  CHECK(p->sol.feasible, "the small GPT-2 does not fit on 8 x H100");
  for (int u = 0; u < p->prob->nunits && p->sol.feasible; u++) {
    const SvChoice *ch = chosen(p, u);
    SvLayout l = p->prob->layout[ch->layout];
    CHECK(l.dp == 8 && l.tp == 1 && l.q == 1 && !ch->ckpt && ch->zero == 0 && ch->offload == 0,
          "%s: %d x tp %d x q %d, ckpt %d, ZeRO-%d, offload %d%%; want plain DP",
          p->prob->unit[u].name, l.dp, l.tp, l.q, ch->ckpt, ch->zero, ch->offload);
  }
  sv_plan_free(p);
  ir_graph_free(g);
}

// mtc plan's and compile's plan (sv_plan_compiled): the fastest of the meshes' plans, each
// mesh's solve stopped once its bound cannot beat the best so far (SvConfig.cutoff), with the
// baselines of all of them. GPT-2 1.5B on 8 L4s: the plan is compile's, and as fast as any
// mesh's own full solve; a cutoff below a solve's optimum stops it with nothing, one above
// leaves its plan as it was.
static void test_plan_compiled(void) {
  IrGraph *g = model("gpt2.mtc", GPT2_15B);
  SvConfig c = cluster("L4-24GB", 8, 0);
  SvPlan *best;
  IrDiag d = {0};
  int rc = sv_plan_compiled(g, &c, &best, &d);
  CHECK(!rc && best->sol.feasible, "compiled: %s", rc ? d.msg : best->why);
  if (rc) {
    ir_graph_free(g);
    return;
  }
  double fastest = INFINITY;
  for (int tp = 1; tp <= 8; tp *= 2) {
    SvConfig m = c;
    m.mesh_tp = tp;
    SvPlan *p = plan(g, &m);
    if (p->sol.feasible)
      fastest = fmin(fastest, p->sol.time);
    if (p->sol.feasible && tp == 2) {
      m.cutoff = 0.99 * p->sol.time;
      SvPlan *cut = plan(g, &m);
      CHECK(!cut->sol.feasible && cut->stats.cut_off, "tp 2, cutoff below its %.6g s: %s",
            p->sol.time, cut->stats.status);
      sv_plan_free(cut);
      m.cutoff = 1.01 * p->sol.time;
      cut = plan(g, &m);
      CHECK(cut->sol.feasible && fabs(cut->sol.time - p->sol.time) <= 1e-3 * p->sol.time,
            "tp 2, cutoff above its %.6g s: %.6g s (%s)", p->sol.time, cut->sol.time,
            cut->stats.status);
      sv_plan_free(cut);
    }
    sv_plan_free(p);
  }
  CHECK(best->sol.time <= fastest * (1 + 1e-3), "compiled %.6g s, the fastest mesh %.6g s",
        best->sol.time, fastest);
  int kinds = 0;
  for (int i = 0; i < best->nbaselines; i++)
    kinds += !strncmp(best->baseline[i].name, "Megatron", 8) ||
             !strncmp(best->baseline[i].name, "2D", 2) || !strcmp(best->baseline[i].name, "DP");
  CHECK(kinds == 3, "compiled: %d of DP, Megatron and 2D among its %d baselines", kinds,
        best->nbaselines);
  sv_plan_free(best);
  ir_graph_free(g);
}

static void test_big_model_shards(void) {
  IrGraph *g = model("gpt2.mtc", GPT2_15B);
  SvConfig c = cluster("L4-24GB", 8, 0);
  SvPlan *p = plan(g, &c);
  const SvProblem *q = p->prob;
  // Its model states alone (18 bytes per parameter) exceed one GPU.
  double psi = 0;
  for (int u = 0; u < q->nunits; u++)
    psi += q->unit[u].count * p->nums[u].params;
  CHECK(18 * psi > q->cap[0], "1.5B states %.1f GiB fit in one L4 (%.1f GiB)", 18 * psi / GiB,
        q->cap[0] / GiB);
  CHECK(!p->baseline[0].sol.feasible, "plain DP fits: %.1f GiB", p->baseline[0].sol.mem[0] / GiB);
  CHECK(p->sol.feasible, "GPT-2 1.5B does not fit on 8 x L4: %s", p->why);
  CHECK(p->sol.mem[0] <= q->cap[0], "the plan uses %.1f of %.1f GiB", p->sol.mem[0] / GiB,
        q->cap[0] / GiB);
  for (int u = 0; u < q->nunits && p->sol.feasible; u++) {
    const SvChoice *ch = chosen(p, u);
    SvLayout l = q->layout[ch->layout];
    if (p->nums[u].params * q->unit[u].count > 0.5 * psi)
      CHECK(ch->zero == 3 || l.tp > 1 || l.q > 1 || ch->offload > 0,
            "%s: %d x tp %d x q %d ZeRO-%d offload %d%%: not sharded", q->unit[u].name, l.dp,
            l.tp, l.q, ch->zero, ch->offload);
  }
  sv_plan_free(p);

  // One L4 with 6 GiB: the bf16 weights alone are 2.9 GiB, which fit beside the activations
  // of a batch of 4 only when the layers' parameters leave the device too (ZeRO-Infinity's
  // offload_param: ZeRO-3's shard in host memory, copied up before each gather; without it
  // this was infeasible).
  SvConfig one = cluster("L4-24GB", 1, 6 * GiB);
  p = plan(g, &one);
  CHECK(p->sol.feasible, "1.5B does not fit on 6 GiB: %s", p->why);
  for (int u = 0; u < p->prob->nunits && p->sol.feasible; u++)
    if (p->prob->unit[u].count > 1)
      CHECK(chosen(p, u)->params && chosen(p, u)->zero == 3,
            "%s keeps its parameters on the device", p->prob->unit[u].name);
  sv_plan_free(p);
  // Too little memory: one message with what would fit. (3.2 GiB, less the L4's 2 GiB reserve:
  // every state offloaded and every layer's activations swapped, the buffers of a batch of 4
  // do not fit, nor of 2; the logits' gradient written over the logits, a batch of 1's do.)
  one = cluster("L4-24GB", 1, 3.2 * GiB);
  p = plan(g, &one);
  CHECK(!p->sol.feasible, "1.5B fits on 3 GiB");
  CHECK(strstr(p->why, "GPU memory binds") && strstr(p->why, "GPUs with") &&
            strstr(p->why, "the largest micro-batch that fits is 1"),
        "message: %s", p->why);
  sv_plan_free(p);
  ir_graph_free(g);
}

static void test_less_memory_never_faster(void) {
  IrGraph *g = model("gpt2.mtc", GPT2_350M);
  double last = 0;
  const double mems[] = {80, 40, 24, 16, 12, 9, 7};
  int fits = 0;
  for (int i = 0; i < 7; i++) {
    SvConfig c = cluster("A100-80GB", 8, mems[i] * GiB);
    SvPlan *p = plan(g, &c);
    if (p->sol.feasible) {
      fits++;
      CHECK(p->sol.time >= last * (1 - 1e-9), "%.0f GiB: %.6f s, faster than %.6f s with more",
            mems[i], p->sol.time, last);
      last = p->sol.time;
    }
    sv_plan_free(p);
  }
  CHECK(fits >= 5, "only %d of 7 memory sizes fit", fits);
  ir_graph_free(g);
}

static SvPlan *hetero(IrGraph *g, const char *json) {
  SvConfig c = sv_default_config();
  IrDiag d = {0};
  if (sv_cluster_parse(&c.cluster, json, "test", &d))
    fprintf(stderr, "%s\n", d.msg), exit(1);
  c.mip_gap = 1e-4;
  return plan(g, &c);
}

// Does every replica of every block's layout run a whole number of micro-batches?
static bool whole_per_replica(const SvPlan *pl) {
  const SvProblem *p = pl->prob;
  bool ok = true;
  for (int g = 0; g < p->ngroups; g++)
    for (int u = 0; u < p->nunits; u++)
      ok &= pl->sol.batch[g] % sv_replicas(p, g, p->unit[u].choice[pl->sol.pick[u]].layout) == 0;
  return ok;
}

static void test_heterogeneous(void) {
  IrGraph *g = model("gpt2.mtc", GPT2_350M);
  // Same memory, H100s about three times faster: they take more of the batch, whole
  // micro-batches per replica of each block's layout (the free solve could give 8 x tp 2
  // layers 10 and 6 of 16, 1.25 and 0.75 per replica: priced, not run).
  SvPlan *p = hetero(g, "{\"groups\": [{\"gpu\": \"A100-80GB\", \"count\": 8},"
                        " {\"gpu\": \"H100-80GB\", \"count\": 8}]}");
  CHECK(p->sol.feasible, "350M does not fit on A100s and H100s");
  CHECK(p->sol.batch[1] > p->sol.batch[0], "H100s run %lld micro-batches, A100s %lld",
        (long long)p->sol.batch[1], (long long)p->sol.batch[0]);
  CHECK(whole_per_replica(p), "350M: a replica runs a fraction of a micro-batch");
  sv_plan_free(p);
  ir_graph_free(g);

  // About the same speed, twice the memory: the 80 GB GPUs hold more of the state.
  g = model("gpt2.mtc", GPT2_15B);
  p = hetero(g, "{\"groups\": [{\"gpu\": \"A100-40GB\", \"count\": 4},"
                " {\"gpu\": \"A100-80GB\", \"count\": 4}]}");
  CHECK(p->sol.feasible, "1.5B does not fit on 4 + 4 A100s: %s", p->why);
  CHECK(p->sol.share[1] > p->sol.share[0], "80 GB share %.3f, 40 GB share %.3f", p->sol.share[1],
        p->sol.share[0]);
  CHECK(p->sol.mem[0] <= p->prob->cap[0] && p->sol.mem[1] <= p->prob->cap[1],
        "over capacity: %.1f, %.1f GiB", p->sol.mem[0] / GiB, p->sol.mem[1] / GiB);
  CHECK(whole_per_replica(p), "1.5B: a replica runs a fraction of a micro-batch");
  sv_plan_free(p);
  ir_graph_free(g);
}

// ---- formulas against REFERENCES.md -------------------------------------------------------------

static void test_zero_formulas(void) {
  // REFERENCES.md section 3: mixed-precision AdamW with bf16 gradients, K = 12 ...
  const double psi = 1e9;
  const int n = 64;
  SvStateBytes zero = {2, 2, 4, 8};
  CHECK(near(sv_zero_state_bytes(psi, 1.0 / n, 0, zero), 16 * psi, 1e-12), "DP");
  CHECK(near(sv_zero_state_bytes(psi, 1.0 / n, 1, zero), 4 * psi + 12 * psi / n, 1e-12), "ZeRO-1");
  CHECK(near(sv_zero_state_bytes(psi, 1.0 / n, 2, zero), 2 * psi + 14 * psi / n, 1e-12), "ZeRO-2");
  CHECK(near(sv_zero_state_bytes(psi, 1.0 / n, 3, zero), 16 * psi / n, 1e-12), "ZeRO-3");
  // ... and as mtc's programs keep it: float32 gradients, 18 bytes a parameter
  SvStateBytes mtc = {2, 4, 4, 8};
  CHECK(near(sv_zero_state_bytes(psi, 1.0 / n, 0, mtc), 18 * psi, 1e-12), "DP");
  CHECK(near(sv_zero_state_bytes(psi, 1.0 / n, 2, mtc), 2 * psi + 16 * psi / n, 1e-12), "ZeRO-2");

  // The cost model's memory per GPU, by stage, for every unit of GPT-2 under pure DP: the
  // bytes per parameter are what the IR's types say (bf16 weights read, float32 rest).
  IrGraph *g = model("gpt2.mtc", "L=2");
  SvConfig c = cluster("H100-80GB", 8, 0);
  SvPlan *p = plan(g, &c);
  int checked = 0;
  for (int u = 0; u < p->prob->nunits; u++)
    for (int s = 0; s < p->prob->unit[u].nchoices; s++) {
      const SvChoice *ch = &p->prob->unit[u].choice[s];
      if (p->prob->layout[ch->layout].dp != 8 || ch->offload)
        continue;
      SvCost k;
      sv_plan_cost(p, u, s, 0, &k);
      double states = 0;
      for (int i = SV_M_PARAMS; i <= SV_M_OPT; i++)
        states += k.mem[i] + k.mem_shard[i];
      double want = sv_zero_state_bytes(p->nums[u].params, 1.0 / 8, ch->zero, mtc);
      CHECK(near(states, want, 1e-9), "%s ZeRO-%d: %.0f bytes, want %.0f", p->prob->unit[u].name,
            ch->zero, states, want);
      checked++;
    }
  CHECK(checked >= 8, "checked %d choices", checked);
  sv_plan_free(p);
  ir_graph_free(g);
}

// Korthikanti et al. 2022, bytes per layer at 2-byte activations: sbh(34 +
// 5as/h) without parallelism, sbh(10 + 24/t + 5as/(ht)) with tensor
// parallelism, sbh/t (34 + 5as/h) with sequence parallelism, 2sbh with full
// recompute. mtc's GPT-2 layer has no dropout (its two sbh masks and the
// as^2b mask and output go) and a fused attention that keeps no softmax
// (2as^2b goes) but its output and each query's float32 log-sum-exp (2sbh +
// 4as b, which its backward reads rather than run the forward again, as
// FlashAttention's does): sbh * 34 + 4asb, sbh(8 + 26/t) + 4asb/t, (34 sbh +
// 4asb)/t and 2sbh.
static void test_megatron_activations(void) {
  const int64_t b = 4, s = 1024, h = 768;
  IrGraph *g = model("gpt2.mtc", "L=2,C=768,NH=12,V=50257,T=1024");
  SvConfig c = cluster("H100-80GB", 8, 0);
  for (int sp = 0; sp <= 1; sp++) {
    c.seq_parallel = sp;
    SvPlan *p = plan(g, &c);
    int u = p->model->block[1].unit;
    double sbh = (double)(s * b * h), lse = 4.0 * 12 * s * b;  // a = 12 heads
    CHECK(near(p->nums[u].act, 34 * sbh + lse, 1e-12), "kept %.0f bytes, want 34 sbh + 4asb = %.0f",
          p->nums[u].act, 34 * sbh + lse);
    int checked = 0;
    for (int k = 0; k < p->prob->unit[u].nchoices; k++) {
      const SvChoice *ch = &p->prob->unit[u].choice[k];
      SvLayout l = p->prob->layout[ch->layout];
      if (l.q > 1 || ch->zero || ch->offload)
        continue;
      SvCost cost;
      sv_plan_cost(p, u, k, 0, &cost);
      double t = l.tp;
      double want = ch->swap ? 0   // every activation a float: all of them in host memory
                    : ch->ckpt ? (sp ? 2 * sbh / t : 2 * sbh)
                               : (sp ? (34 * sbh + lse) / t : sbh * (8 + 26 / t) + lse / t);
      CHECK(near(cost.mem[SV_M_ACT], want, 1e-12), "tp %d ckpt %d sp %d: %.0f bytes, want %.0f",
            l.tp, ch->ckpt, sp, cost.mem[SV_M_ACT], want);
      checked++;
    }
    CHECK(checked >= 8, "checked %d choices", checked);
    sv_plan_free(p);
  }
  ir_graph_free(g);
}

static void test_collectives(void) {
  // nccl-tests: all-reduce moves 2(n-1)/n S per rank, all-gather (n-1)/n S.
  CHECK(near(sv_allreduce_time(1e9, 8, 100e9, 0), 2.0 * 7 / 8 * 1e9 / 100e9, 1e-12), "ring AR");
  CHECK(near(sv_allreduce_time(1e9, 8, 100e9, 1e-5), 1e-5 + 0.0175, 1e-12), "AR latency");
  CHECK(near(sv_allgather_time(1e9, 4, 50e9, 0), 0.75 * 1e9 / 50e9, 1e-12), "ring AG");
  CHECK(sv_allreduce_time(1e9, 1, 100e9, 1e-5) == 0, "one rank moves nothing");
}

// ---- clusters -----------------------------------------------------------------------------------

static void test_clusters(void) {
  double x;
  CHECK(!sv_parse_size("24GiB", &x) && x == 24 * GiB, "24GiB");
  CHECK(!sv_parse_size("80GB", &x) && x == 80e9, "80GB");
  CHECK(!sv_parse_size("1.5T", &x) && x == 1.5e12, "1.5T");
  CHECK(sv_parse_size("12 parsecs", &x), "parsecs");
  CHECK(sv_device_find("h100") && sv_device_find("A100-40GB") && !sv_device_find("A100"),
        "device names");
  // GPUs as CUDA names them (a profile of mtc calibrate --gpu): the entry of the model, of
  // several the one of the name's memory; a model not in the table is none of its neighbours'
  const struct { const char *cuda, *entry; } named[] = {
      {"NVIDIA H100 80GB HBM3", "H100-80GB"},   {"NVIDIA H100 PCIe", "H100-80GB"},
      {"NVIDIA H200", "H200-141GB"},            {"NVIDIA A100-SXM4-40GB", "A100-40GB"},
      {"NVIDIA A100 80GB PCIe", "A100-80GB"},   {"NVIDIA GeForce RTX 4090", "RTX4090-24GB"},
      {"Tesla V100-SXM2-16GB", "V100-32GB"},    {"NVIDIA L4", "L4-24GB"},
      {"NVIDIA A100-PCIE", NULL},               {"NVIDIA L40S", NULL},
      {"NVIDIA GH200 480GB", NULL},             {"NVIDIA RTX 6000 Ada Generation", NULL},
  };
  for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
    const SvDevice *dev = sv_device_find(named[i].cuda);
    CHECK(named[i].entry ? dev && !strcmp(dev->name, named[i].entry) : !dev, "'%s': %s, want %s",
          named[i].cuda, dev ? dev->name : "none", named[i].entry ? named[i].entry : "none");
  }
  SvCluster c;
  IrDiag d = {0};
  char path[1024];
  snprintf(path, sizeof path, "%s/mixed.json", datadir);
  CHECK(!sv_cluster_load(&c, path, &d), "%s", d.msg);
  CHECK(c.ngroups == 2 && c.group[0].count == 8 && c.group[1].dev.mem == 80 * GiB &&
            c.cross_bw == 25e9,
        "mixed.json");
  const struct { const char *json, *want; } bad[] = {
      {"{", "not valid JSON"},
      {"{\"groups\": []}", "needs \"groups\""},
      {"{\"groups\": [{\"gpu\": \"TPU\", \"count\": 8}]}", "unknown gpu 'TPU'"},
      {"{\"groups\": [{\"gpu\": \"L4\"}]}", "\"count\""},
      {"{\"groups\": [{\"gpu\": \"L4\", \"count\": 2, \"mem\": \"lots\"}]}", "\"mem\""},
      {"{\"groups\": [{\"gpu\": \"L4\", \"count\": 2, \"colour\": 1}]}", "unknown key \"colour\""},
      // numbers in other units than the file's (GB/s, GiB, TFLOP/s), infinities, typos, repeats
      {"{\"groups\": [{\"gpu\": \"L4\", \"count\": 2, \"intra_bw\": 300}]}",
       "\"intra_bw\" is 300 bytes/s; it must be from 1e+06 to 1e+15 bytes/s"},
      {"{\"groups\": [{\"gpu\": \"L4\", \"count\": 2, \"mem\": 80}]}", "\"mem\" is 80 bytes"},
      {"{\"groups\": [{\"gpu\": \"L4\", \"count\": 2, \"flops_bf16\": 989}]}", "\"flops_bf16\" is 989 FLOP/s"},
      {"{\"groups\": [{\"gpu\": \"L4\", \"count\": 2, \"mem\": 1e999}]}", "\"mem\" is inf bytes"},
      {"{\"groups\": [{\"gpu\": \"L4\", \"count\": 2, \"mem\": \"1e308TiB\"}]}", "\"mem\" is inf bytes"},
      {"{\"groups\": [{\"gpu\": \"L4\", \"count\": 2}], \"cross_bw\": 25}", "\"cross_bw\" is 25 bytes/s"},
      {"{\"groups\": [{\"gpu\": \"L4\", \"count\": 2}], \"crossbw\": 25e9}", "unknown key \"crossbw\""},
      {"{\"groups\": [{\"gpu\": \"L4\", \"count\": 2, \"count\": 4}]}", "the key \"count\" is given twice"},
      {"{\"groups\": [{\"gpu\": \"L4\", \"count\": 2}], \"groups\": []}", "the key \"groups\" is given twice"},
      {"[1, 2]", "a cluster is a JSON object"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    d.msg[0] = '\0';
    CHECK(sv_cluster_parse(&c, bad[i].json, "c.json", &d) && strstr(d.msg, bad[i].want),
          "%s: got '%s', want '%s'", bad[i].json, d.msg, bad[i].want);
  }
  // No CPU memory for offloaded state is a cluster of its own; less than none is not.
  const char *none = "{\"groups\": [{\"gpu\": \"L4\", \"count\": 2, \"host_mem\": 0}]}";
  const char *less = "{\"groups\": [{\"gpu\": \"L4\", \"count\": 2, \"host_mem\": -1}]}";
  CHECK(!sv_cluster_parse(&c, none, "c.json", &d) && c.group[0].dev.host_mem == 0,
        "host_mem 0: %s", d.msg);
  CHECK(sv_cluster_parse(&c, less, "c.json", &d) &&
            strstr(d.msg, "\"host_mem\" is -1 bytes; it must be 0 or from"),
        "host_mem -1: '%s'", d.msg);
}

// A measured profile (mtc calibrate's): a CPU, GEMM rates on a grid of shapes
// and per-element kernel times, interpolated in log space between them.
#define PROFILE_HEAD                                                                               \
  "{\"calibrated\": \"test\", \"groups\": [{\"name\": \"box\", \"gpu\": \"CPU\", \"count\": 2, " \
  "\"cores\": 2, \"threads\": 1, \"ranks\": 2, \"mem\": \"8GiB\", \"flops_fp32\": 1e11, "        \
  "\"flops_bf16\": 1e11, \"hbm_bw\": 2e10, \"intra_bw\": 2e9"
#define PROFILE_GEMM                                                                               \
  "\"gemm\": [[32, 32, 32, 1e10, 5e9], [32, 32, 512, 4e10, 2e10], [32, 512, 32, 4e10, 2e10], "   \
  "[32, 512, 512, 8e10, 4e10], [512, 32, 32, 4e10, 2e10], [512, 32, 512, 8e10, 4e10], "          \
  "[512, 512, 32, 8e10, 4e10], [512, 512, 512, 1e11, 5e10]]"

static void test_profiles(void) {
  const char *ok = PROFILE_HEAD ", \"efficiency\": {\"attn\": 0.25, \"launch\": 1e-6, "
                   "\"overlap\": 0}, " PROFILE_GEMM ", \"ops\": {\"gelu\": [[1000, 4e-9], "
                   "[1000000, 1e-8]], \"add\": [[65536, 1e-9]]}, \"attention\": [[64, 32, 1e10, "
                   "2e10], [64, 128, 4e10, 4e10], [1024, 32, 4e10, 8e10], [1024, 128, 9e10, "
                   "9e10]]}]}";
  SvCluster c;
  IrDiag d = {0};
  CHECK(!sv_cluster_parse(&c, ok, "p.json", &d), "%s", d.msg);
  const SvGroup *gr = &c.group[0];
  const SvDevice *v = &gr->dev;
  CHECK(gr->per_node == 2 && v->cores == 2 && v->ngemm == 8 && v->nops == 2 &&
            v->eff.attn == 0.25 && v->eff.gemm == 1 && v->eff.overlap == 0 &&
            v->inter_bw == v->intra_bw && v->host_bw == v->hbm_bw && !strcmp(gr->name, "box"),
        "a CPU profile: per node %d, cores %d, %d GEMMs, %d ops, attn %g", gr->per_node,
        v->cores, v->ngemm, v->nops, v->eff.attn);
  // GEMMs: the grid's rates at its points; between, the geometric mean; outside, the edge
  CHECK(near(sv_gemm_rate(v, 1, 32, 512, 512, false), 8e10, 1e-12) &&
            near(sv_gemm_rate(v, 1, 512, 512, 512, true), 5e10, 1e-12),
        "at the grid's points");
  CHECK(near(sv_gemm_rate(v, 1, 128, 512, 512, false), sqrt(8e10 * 1e11), 1e-12),
        "halfway in log space: %g", sv_gemm_rate(v, 1, 128, 512, 512, false));
  CHECK(near(sv_gemm_rate(v, 1, 4096, 8192, 1e6, false), 1e11, 1e-12) &&
            near(sv_gemm_rate(v, 1, 1, 2, 3, false), 1e10, 1e-12),
        "beyond the grid: %g, %g", sv_gemm_rate(v, 1, 4096, 8192, 1e6, false),
        sv_gemm_rate(v, 1, 1, 2, 3, false));
  // kernels: seconds per element by size; an op not measured has none
  CHECK(near(sv_op_seconds(v, OP_GELU, 1000, false), 4e-6, 1e-12) &&
            near(sv_op_seconds(v, OP_GELU, sqrt(1e9), false), sqrt(1e9) * sqrt(4e-9 * 1e-8),
                 1e-12) &&
            near(sv_op_seconds(v, OP_ADD, 10, false), 1e-8, 1e-12) &&
            sv_op_seconds(v, OP_MUL, 10, false) < 0,
        "per-element times");
  // a profile without bf16 figures: the float32 kernels' for bf16 too
  CHECK(sv_op_seconds(v, OP_GELU, 1000, true) == sv_op_seconds(v, OP_GELU, 1000, false) &&
            sv_attn_rate(v, 256, 64, true, true) == sv_attn_rate(v, 256, 64, true, false),
        "no bf16 figures");
  // attention: the grid's forward and backward rates by tokens and head size, between them the
  // geometric mean (the corners' product to the quarter in the middle), outside the edge
  CHECK(v->nattn == 4 && near(sv_attn_rate(v, 64, 32, false, false), 1e10, 1e-12) &&
            near(sv_attn_rate(v, 1024, 128, true, false), 9e10, 1e-12) &&
            near(sv_attn_rate(v, 256, 64, false, false), pow(1e10 * 4e10 * 4e10 * 9e10, 0.25),
                 1e-12) &&
            near(sv_attn_rate(v, 16, 2048, true, false), 4e10, 1e-12),
        "attention rates: %g %g %g %g", sv_attn_rate(v, 64, 32, false, false),
        sv_attn_rate(v, 1024, 128, true, false), sv_attn_rate(v, 256, 64, false, false),
        sv_attn_rate(v, 16, 2048, true, false));
  CHECK(sv_attn_rate(sv_device_find("H100-80GB"), 256, 64, false, false) < 0,
        "a device without a grid: its efficiency");
  // bf16 kernels measured apart (a GPU's bf16 kernels move half the bytes, and its attention
  // runs on tensor cores): the ops' third figure, the attention rows' last two
  const char *bf = PROFILE_HEAD ", \"ops\": {\"gelu\": [[1000, 4e-9, 2e-9], [1000000, 1e-8, "
                   "5e-9]]}, \"attention\": [[64, 32, 1e10, 2e10, 3e10, 5e10], [64, 128, 4e10, "
                   "4e10, 8e10, 9e10]]}]}";
  SvCluster cb;
  CHECK(!sv_cluster_parse(&cb, bf, "p.json", &d), "%s", d.msg);
  const SvDevice *vb = &cb.group[0].dev;
  CHECK(near(sv_op_seconds(vb, OP_GELU, 1000, true), 2e-6, 1e-12) &&
            near(sv_op_seconds(vb, OP_GELU, 1e6, false), 1e-2, 1e-12) &&
            near(sv_attn_rate(vb, 64, 32, false, true), 3e10, 1e-12) &&
            near(sv_attn_rate(vb, 64, 128, true, true), 9e10, 1e-12) &&
            near(sv_attn_rate(vb, 64, 128, true, false), 4e10, 1e-12),
        "bf16 figures: %g, %g", sv_op_seconds(vb, OP_GELU, 1000, true),
        sv_attn_rate(vb, 64, 32, false, true));
  const struct { const char *tail, *want; } mixed[] = {
      {"\"ops\": {\"gelu\": [[1000, 4e-9, 2e-9], [1000000, 1e-8]]}}]}", "or triples"},
      {"\"attention\": [[64, 32, 1e10, 2e10, 3e10, 5e10], [64, 128, 4e10, 4e10]]}]}",
       "\"attention\"[1] must be [tokens, head size"},
      {"\"attention\": [[64, 32, 1e10, 2e10, 3e10]]}]}", "\"attention\"[0] must be"},
  };
  for (size_t i = 0; i < sizeof mixed / sizeof mixed[0]; i++) {
    char json[1024];
    snprintf(json, sizeof json, PROFILE_HEAD ", %s", mixed[i].tail);
    d.msg[0] = '\0';
    CHECK(sv_cluster_parse(&cb, json, "p.json", &d) && strstr(d.msg, mixed[i].want),
          "%s: got '%s', want '%s'", mixed[i].tail, d.msg, mixed[i].want);
  }
  // a CPU's ranks share its cores: twice the ranks of its measurement, half the speed each
  SvGroup four = *gr;
  four.per_node = 4;
  CHECK(sv_group_load(gr) == 1 && sv_group_load(&four) == 2, "load %g, %g", sv_group_load(gr),
        sv_group_load(&four));
  // a GPU without a profile's GEMMs: its peak times the table's efficiency, less what the
  // shape loses on its 132 multiprocessors
  const SvDevice *h100 = sv_device_find("H100-80GB");
  double top = h100->flops_bf16 * h100->eff.gemm;
  // 8192^3: 4096 tiles of 128 in 32 waves of 132 (31.03 full), k 8192 of 8256
  CHECK(near(sv_gemm_rate(h100, 1, 8192, 8192, 8192, true), top * 4096 / (32 * 132.0) * 8192 / 8256,
             1e-12) && near(top / h100->flops_bf16 * 4096 / (32 * 132.0) * 8192 / 8256, 0.80, 0.01),
        "a large GEMM at 0.80 of peak (an H200's measured 790 TFLOP/s): %g",
        sv_gemm_rate(h100, 1, 8192, 8192, 8192, true) / h100->flops_bf16);
  // 64^3: one tile of 64 on one multiprocessor at 0.6 of the rate, k at half
  CHECK(near(sv_gemm_rate(h100, 1, 64, 64, 64, true), top * 0.6 / 132 * 0.5, 1e-12),
        "a small GEMM: %g", sv_gemm_rate(h100, 1, 64, 64, 64, true) / top);
  // a batch fills the waves as its GEMMs' tiles together
  CHECK(near(sv_gemm_rate(h100, 132, 128, 128, 64, true), top * 0.5, 1e-12),
        "132 GEMMs of one tile each: %g", sv_gemm_rate(h100, 132, 128, 128, 64, true) / top);
  SvDevice unshaped = *h100;
  unshaped.sms = 0;
  CHECK(sv_gemm_rate(&unshaped, 1, 64, 64, 64, true) == top, "without sms: the flat efficiency");

  // train --profile's column: the planner's price of each node of a one-rank program, the
  // profile's kernels, attention and update rates among them, adds up to its price of the step
  IrGraph *g1 = model_in("gpt2.mtc", "L=2,C=64,NH=4,T=16,V=256,B=2", PASS_PRECISION_FP32);
  SvConfig one = sv_default_config();
  one.cluster = c;
  one.cluster.group[0].count = one.cluster.group[0].per_node = 1;
  SvPlan *p1 = plan(g1, &one);
  double micro[OP_COUNT], step[OP_COUNT], sum;
  sv_price_nodes(g1, &one, micro, step, &sum);   // (the scans first)
  for (int op = 0; op < OP_COUNT; op++)
    sum += fmax(micro[op], 0) + fmax(step[op], 0);
  CHECK(near(sum, p1->sol.time, 1e-3) && micro[OP_ATTENTION] > 0 && step[OP_ADAMW] > 0 &&
            micro[OP_ALL_REDUCE] < 0,
        "the nodes' prices add up to %g s, the step's is %g s", sum, p1->sol.time);
  sv_plan_free(p1);
  ir_graph_free(g1);

  const struct { const char *json, *want; } bad[] = {
      {"{\"groups\": [{\"gpu\": \"CPU\", \"count\": 1, \"mem\": \"8GiB\"}]}",
       "a CPU has no datasheet entry, so \"flops_fp32\" is required: measure this machine with "
       "mtc calibrate"},
      {PROFILE_HEAD ", \"gemm\": [[32, 32, 32, 1e10, 1e10], [64, 64, 64, 1e10, 1e10]]}]}",
       "\"gemm\"'s shapes must form a grid"},
      {PROFILE_HEAD ", \"gemm\": [[32, 32, 32, 1e10]]}]}", "\"gemm\"[0] must be [m, n, k"},
      {PROFILE_HEAD ", \"attention\": [[64, 32, 1e10, 1e10], [64, 64, 1e10, 1e10], [128, 32, "
       "1e10, 1e10], [128, 32, 1e10, 1e10]]}]}", "\"attention\"'s shapes must form a grid"},
      {PROFILE_HEAD ", \"attention\": [[64, 32, 1e10]]}]}",
       "\"attention\"[0] must be [tokens, head size"},
      {PROFILE_HEAD ", \"ops\": {\"gelo\": [[1, 1e-9]]}}]}", "no IR op is named 'gelo'"},
      {PROFILE_HEAD ", \"ops\": {\"gelu\": [[100, 1e-9], [10, 1e-9]]}}]}", "elements increasing"},
      {PROFILE_HEAD ", \"ops\": {\"gelu\": [[1, 1e-9]], \"gelu\": [[1, 1e-9]]}}]}",
       "'gelu' is given twice"},
      {PROFILE_HEAD ", \"efficiency\": {\"gemm\": 0}}]}", "\"gemm\" must be a number from 1e-06 to 100"},
      {PROFILE_HEAD ", \"efficiency\": {\"speed\": 1}}]}", "unknown key \"speed\""},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    d.msg[0] = '\0';
    CHECK(sv_cluster_parse(&c, bad[i].json, "p.json", &d) && strstr(d.msg, bad[i].want),
          "%s: got '%s', want '%s'", bad[i].json, d.msg, bad[i].want);
  }

  // The same rates as a GEMM table or as the peak's efficiency price a plan alike.
  IrGraph *g = model_in("gpt2.mtc", "L=2,C=64,NH=4,T=16,V=256,B=2", PASS_PRECISION_FP32);
  SvConfig a = cluster("H100-80GB", 2, 0), b = a;
  a.cluster.group[0].dev.sms = 0;   // no shape's losses beside the table's flat rates
  SvDevice *flat = &b.cluster.group[0].dev;
  double dims[2] = {16, 4096};
  for (int e = 0; e < 8; e++)
    flat->gemm[e] = (SvGemmRate){dims[e >> 2 & 1], dims[e >> 1 & 1], dims[e & 1],
                                 flat->flops_fp32 * flat->eff.gemm, flat->flops_bf16 * flat->eff.gemm};
  flat->ngemm = 8;
  SvPlan *pa = plan(g, &a), *pb = plan(g, &b);
  CHECK(near(pa->sol.time, pb->sol.time, 1e-12), "a flat GEMM table: %g s against %g s",
        pb->sol.time, pa->sol.time);
  sv_plan_free(pa);
  sv_plan_free(pb);
  ir_graph_free(g);
  // a GPU's profile (mtc calibrate --gpu): its CUDA name read as the built-in entry, the measured
  // rates in place of the datasheet's, what was not measured (its links) the entry's
  const char *gpu = "{\"groups\": [{\"name\": \"NVIDIA H100 80GB HBM3\", \"gpu\": \"NVIDIA H100 "
                    "80GB HBM3\", \"count\": 1, \"gpus_per_node\": 1, \"sms\": 132, \"mem\": "
                    "85e9, \"flops_fp32\": 5e13, \"flops_bf16\": 7e14, \"hbm_bw\": 3e12, "
                    "\"host_bw\": 2.5e10, \"cpu_adam\": 1e9, \"efficiency\": {\"gemm\": 1, "
                    "\"attn\": 0.1, \"launch\": 3e-6}, " PROFILE_GEMM "}]}";
  CHECK(!sv_cluster_parse(&c, gpu, "gpu.json", &d), "%s", d.msg);
  v = &c.group[0].dev;
  CHECK(!strcmp(v->name, "H100-80GB") && !strcmp(c.group[0].name, "NVIDIA H100 80GB HBM3") &&
            v->cores == 0 && v->mem == 85e9 && v->flops_bf16 == 7e14 && v->host_bw == 2.5e10 &&
            v->ngemm == 8 && v->eff.gemm == 1 && v->eff.launch == 3e-6 &&
            v->intra_bw == h100->intra_bw && v->inter_bw == h100->inter_bw &&
            v->eff.link == h100->eff.link && v->eff.hop_intra == h100->eff.hop_intra,
        "a GPU profile: %s, cores %d, mem %g, intra %g", v->name, v->cores, v->mem, v->intra_bw);
}

// A profile's collectives by size: parsed, interpolated in log space, and a block's tensor-
// parallel collectives priced at the bandwidth of one's size (GPT-2's layer: Megatron's two
// all-reduces of B x T x C floats, 8 KiB, each way; with sequence parallelism pairs of a
// reduce-scatter and an all-gather of that buffer, each at its own rate).
static void test_collectives_by_size(void) {
  const char *json = PROFILE_HEAD ", \"efficiency\": {\"alpha_intra\": 1e-5}, \"collectives\": "
                     "{\"all_reduce\": [[4096, 1e9], [16384, 4e9]], \"all_gather\": [[8192, 8e9]], "
                     "\"reduce_scatter\": [[8192, 2e9]]}}]}";
  SvCluster c;
  IrDiag d = {0};
  CHECK(!sv_cluster_parse(&c, json, "p.json", &d), "%s", d.msg);
  const SvDevice *v = &c.group[0].dev;
  CHECK(near(sv_coll_bw(v, SV_ALL_REDUCE, 4096), 1e9, 1e-12) &&
            near(sv_coll_bw(v, SV_ALL_REDUCE, 8192), 2e9, 1e-12) &&
            near(sv_coll_bw(v, SV_ALL_REDUCE, 1), 1e9, 1e-12) &&
            near(sv_coll_bw(v, SV_ALL_REDUCE, 1e9), 4e9, 1e-12) &&
            near(sv_coll_bw(v, SV_ALL_GATHER, 1e9), 8e9, 1e-12) &&
            sv_coll_bw(sv_device_find("H100-80GB"), SV_ALL_REDUCE, 8192) < 0,
        "all-reduce at 4, 8 KiB, 1 byte, 1 GB: %g %g %g %g", sv_coll_bw(v, SV_ALL_REDUCE, 4096),
        sv_coll_bw(v, SV_ALL_REDUCE, 8192), sv_coll_bw(v, SV_ALL_REDUCE, 1),
        sv_coll_bw(v, SV_ALL_REDUCE, 1e9));
  const struct { const char *json, *want; } bad[] = {
      {PROFILE_HEAD ", \"collectives\": {\"all_to_all\": [[1, 1e9]]}}]}",
       "\"collectives\": unknown key \"all_to_all\""},
      {PROFILE_HEAD ", \"collectives\": {\"all_gather\": [[1, 1e9]], \"all_gather\": [[1, 2e9]]}}]}",
       "\"collectives\": the key \"all_gather\" is given twice"},
      {PROFILE_HEAD ", \"collectives\": {\"all_reduce\": [[100, 1e9], [10, 1e9]]}}]}",
       "'all_reduce' must be 1 to 8 pairs [bytes, bus bytes/s], bytes increasing"},
      {PROFILE_HEAD ", \"collectives\": {\"all_gather\": [[100, 300]]}}]}",
       "bandwidths from 1e+06 to 1e+15 bytes/s"},
      {PROFILE_HEAD ", \"collectives\": [1]}]}", "\"collectives\" must be an object"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    d.msg[0] = '\0';
    CHECK(sv_cluster_parse(&c, bad[i].json, "p.json", &d) && strstr(d.msg, bad[i].want),
          "%s: got '%s', want '%s'", bad[i].json, d.msg, bad[i].want);
  }
  CHECK(!sv_cluster_parse(&c, json, "p.json", &d), "%s", d.msg);
  IrGraph *g = model_in("gpt2.mtc", "L=2,C=64,NH=4,T=16,V=256,B=2", PASS_PRECISION_FP32);
  for (int sp = 0; sp < 2; sp++) {
    SvModel *m = sv_model_build(g, false, sp, &d);
    CHECK(m, "%s", d.msg);
    if (!m)
      break;
    SvConfig cfg = sv_default_config();
    cfg.cluster = c;
    cfg.seq_parallel = sp;
    SvCtx x = {.cfg = &cfg, .gpus = 2, .micro_total = 1};
    SvNum n;
    sv_num_eval(m, &cfg, 1, &n);   // the first layer
    // forward: two all-reduces of 8 KiB, or two pairs (all-reduce volumes 16 KiB either way);
    // backward as much again, and with sequence parallelism the gathers again for the weights'
    // gradients and the norms' and biases' gradients all-reduced (256 bytes each)
    CHECK(near(n.tp_fwd, 2 * 8192.0, 1e-12) && near(n.tp_fwd_sq, sp ? 4 * 4096.0 * 4096 :
                                                      2 * 8192.0 * 8192, 1e-12) &&
              near(n.tp_bwd, sp ? 6 * 4096 + 6 * 256 : 2 * 8192.0, 1e-12),
          "sp %d: %g bytes (squares %g) and %g", sp, n.tp_fwd, n.tp_fwd_sq, n.tp_bwd);
    SvCost o;
    sv_cost(&x, &n, (SvLayout){.dp = 1, .tp = 2, .q = 1}, false, false, 0, 0, false, false, 0,
            &o);
    // all-reduces at 2e9 (8 KiB between the table's points); pairs at the harmonic mean of
    // 8e9 and 2e9 (each measured at one size); one latency a phase
    double bw = sp ? 2 / (1 / 8e9 + 1 / 2e9) : 2e9;
    double want = 2 * 1e-5 + (n.tp_fwd + n.tp_bwd) / bw;
    CHECK(near(o.t_micro[SV_T_TP], want, 1e-9), "sp %d: tensor parallel %g s, want %g", sp,
          o.t_micro[SV_T_TP], want);
    sv_model_free(m);
  }
  ir_graph_free(g);
}

static void test_formulas_print(void) {
  IrGraph *g = model("gpt2.mtc", "");
  IrDiag d = {0};
  SvModel *m = sv_model_build(g, true, false, &d);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  sv_print_formulas(f, m);
  fclose(f);
  CHECK(strstr(buf, "12*C*C + 13*C"), "layer parameters formula missing:\n%s", buf);
  CHECK(strstr(buf, "activation bytes kept      34*B*T*C + 4*B*T*NH "), "layer activations (bf16) "
        "missing:\n%s", buf);
  CHECK(strstr(buf, "model-state bytes          216*C*C + 234*C "), "layer model state "
        "(18 bytes a parameter) missing:\n%s", buf);
  CHECK(m->nunits == 2, "%d units; identical layers must share one", m->nunits);
  free(buf);
  sv_model_free(m);
  m = sv_model_build(g, false, false, &d);
  CHECK(m->nunits == 5, "%d units without sharing, want 5", m->nunits);
  sv_model_free(m);
  ir_graph_free(g);
}

// ---- sequence parallelism: a choice, reported -----------------------------------------------

// The plan's text report and plan.json (read back) under c.
static void plan_outputs(IrGraph *g, const SvConfig *c, char **report, char **json) {
  SvPlan *p = plan(g, c);
  size_t len = 0;
  FILE *f = open_memstream(report, &len);
  sv_report(f, p);
  fclose(f);
  char path[] = "/tmp/mtc_test_plan_XXXXXX";
  int fd = mkstemp(path);
  IrDiag d = {0};
  CHECK(fd >= 0 && !sv_write_json(p, path, &d), "plan.json: %s", d.msg);
  f = fopen(path, "rb");
  *json = calloc(1, 1 << 20);
  if (f) {
    fread(*json, 1, (1 << 20) - 1, f);
    fclose(f);
  }
  unlink(path);
  if (fd >= 0)
    close(fd);
  sv_plan_free(p);
}

static void test_seq_parallel(void) {
  CHECK(!sv_default_config().seq_parallel, "the default plan assumes sequence parallelism");
  IrGraph *g = model("gpt2.mtc", "L=2");
  SvConfig c = cluster("H100-80GB", 8, 0);
  char *report, *json;
  plan_outputs(g, &c, &report, &json);
  CHECK(strstr(report, "sequence parallelism: off"), "report:\n%s", report);
  CHECK(strstr(json, "\"seq_parallel\":\tfalse"), "plan.json:\n%.300s", json);
  Plan a;
  IrDiag d = {0};
  CHECK(!sv_apply_read(g, "off.json", json, &a, &d), "a plan without SP: %s", d.msg);
  plan_free(&a);
  free(report), free(json);

  c.seq_parallel = true;
  plan_outputs(g, &c, &report, &json);
  CHECK(strstr(report, "sequence parallelism: on"), "report:\n%s", report);
  CHECK(strstr(json, "\"seq_parallel\":\ttrue"), "plan.json:\n%.300s", json);
  CHECK(!sv_apply_read(g, "sp.json", json, &a, &d) && a.seq_parallel,
        "applying a plan with SP: '%s'", d.msg);
  plan_free(&a);
  free(report), free(json);
  ir_graph_free(g);
}

// ---- checkpointing K of L identical blocks ----------------------------------------------------

// GPT-2 with 4 layers on one GPU of 22 MB (measured with mtc plan -D L=4 --gpu-mem: 24 MB
// holds every layer's activations, 20 MB and less offload too): the optimum checkpoints
// some layers and not others, with one set of variables for the 4.
static void test_checkpoint_k_of_l(void) {
  IrGraph *g = model("gpt2.mtc", "L=4");
  SvConfig c = cluster("H100-80GB", 1, 22e6);
  c.cluster.group[0].dev.host_mem = 0;   // no swap, which would beat recompute here
  SvPlan *p = plan(g, &c);
  int u = p->model->block[1].unit;
  CHECK(p->sol.feasible && p->prob->unit[u].count == 4, "%s", p->why);
  int k = p->sol.feasible ? sv_ckpt_blocks(p->prob, &p->sol, u) : -1;
  CHECK(k > 0 && k < 4, "checkpoints %d of 4 layers, want some but not all", k);
  CHECK(p->stats.ints > 0, "no integer variable counts checkpointed layers");

  // The report says K of 4; plan.json checkpoints the first K layers.
  char *report, *json;
  plan_outputs(g, &c, &report, &json);
  char want[64];
  snprintf(want, sizeof want, "%d of 4", k);
  CHECK(strstr(report, want), "report without '%s':\n%s", want, report);
  cJSON *root = cJSON_Parse(json);
  const cJSON *b;
  int i = 0, first = 0, marked = 0;
  cJSON_ArrayForEach(b, cJSON_GetObjectItem(root, "blocks")) {
    const char *name = cJSON_GetObjectItem(b, "name")->valuestring;
    bool ck = cJSON_IsTrue(cJSON_GetObjectItem(b, "checkpoint"));
    if (strncmp(name, "h.", 2))
      continue;
    marked += ck;
    first += ck && atoi(name + 2) < k;
    i++;
  }
  CHECK(i == 4 && marked == k && first == k, "plan.json checkpoints %d of %d layers, %d of the "
        "first %d", marked, i, first, k);
  cJSON_Delete(root);
  free(report), free(json);

  // Every layer deciding alone finds nothing faster, and checkpoints as many.
  c.share_blocks = false;
  SvPlan *q = plan(g, &c);
  int alone = 0;
  for (int l = 1; l <= 4 && q->sol.feasible; l++) {
    int v = q->model->block[l].unit;
    alone += q->prob->unit[v].choice[q->sol.pick[v]].ckpt;
  }
  CHECK(q->sol.feasible && near(q->sol.time, p->sol.time, 1e-6) && alone == k,
        "--no-share: %.6f ms with %d checkpointed, shared %.6f ms with %d", q->sol.time * 1e3,
        alone, p->sol.time * 1e3, k);
  sv_plan_free(q);
  sv_plan_free(p);
  ir_graph_free(g);
}

// ---- the plans mtc compile lowers ---------------------------------------------------------------

// sv_apply_best (mtc compile --gpus) returns only what the lowering runs: one mesh for
// every block (each with its own ZeRO stage and offload share) and checkpointing of the
// first K repeated layers, never of block 0. GPT-2 with 4 small layers on 2 GPUs, from
// memory where nothing binds to memory where offload, ZeRO, tensor parallelism and
// checkpointing all come in (below 1.4 MB nothing fits). Without the restriction block 0
// is checkpointed at 2 and 1.4 MB; with every layer deciding alone (--no-share), the
// layers checkpointed must also be the first ones (without the rows that say so, at
// 1.4 MB: h.0, h.1 and h.3). The blocks' offload shares differ in some of these plans
// (the layers' state offloaded and block 0's not), which the lowering runs; from 2 MB down the
// layers' parameters leave the device too (below 1.6 MB, block 0's as well), which took the
// place of most of the checkpointing these memories once needed. The
// program prints the planner's step for its layout (sv_price, from the Plan
// alone): the solver's own price of its plan, to the bit.
static void test_apply_lowerable(void) {
  IrGraph *g = model_in("gpt2.mtc", "L=4,C=64,NH=4,T=16,V=256,B=2", PASS_PRECISION_FP32);
  const double mbs[] = {100, 3, 2.5, 2.2, 2, 1.8, 1.6, 1.4};
  int partial = 0, mixed = 0, swapped = 0, params = 0;
  for (size_t i = 0; i < 2 * sizeof mbs / sizeof mbs[0]; i++) {
    SvConfig c = cluster("H100-80GB", 2, mbs[i / 2] * 1e6);
    c.share_blocks = i % 2 == 0;   // and with every layer deciding alone (--no-share)
    Plan a;
    SvPlan *kept;
    IrDiag d = {0};
    // a plan that checkpoints other blocks than the first K layers is an error
    int rc = sv_apply_best(g, &c, &a, &kept, &d);
    CHECK(!rc, "%.1f MB, sharing %d: %s", mbs[i / 2], c.share_blocks, d.msg);
    if (rc) {
      plan_free(&a);
      sv_plan_free(kept);
      continue;
    }
    // the layers swapped, then checkpointed: activations off the device in either way
    int s = a.swap == PLAN_CHECKPOINT_ALL ? 4 : a.swap;
    int k = s + (a.checkpoint == PLAN_CHECKPOINT_ALL ? 4 - s : a.checkpoint);
    swapped += s > 0;
    SvPriced pr;
    double t[SV_NT + 1];
    sv_step_times(kept, &kept->sol, 0, t);
    rc = sv_price(g, &c, &a, &pr, &d);
    CHECK(!rc && pr.step_s == kept->sol.time && !memcmp(pr.t, t, sizeof t) && pr.fits,
          "%.1f MB, sharing %d: priced %.9g s (rc %d: %s), the plan %.9g s", mbs[i / 2],
          c.share_blocks, pr.step_s, rc, d.msg, kept->sol.time);
    bool one_share = true;
    for (int b = 1; b < a.nblocks; b++)
      one_share &= a.block[b].offload == a.block[0].offload;
    mixed += !one_share;
    partial += k > 0 && k < 4;
    params += a.block[1].offload_params;
    plan_free(&a);
    sv_plan_free(kept);
  }
  CHECK(partial >= 2, "only %d plans checkpoint some layers and not others", partial);
  CHECK(params >= 4, "only %d plans offload the layers' parameters", params);
  CHECK(mixed >= 2, "only %d plans give blocks different offload shares", mixed);
  ir_graph_free(g);
  // Swapping: since the GEMM epilogues made the recomputed forward cheaper, these small layers
  // recompute rather than swap at every memory above; wider ones (C=128, T=64) swap at 5 and
  // 12 MB (mtc plan with --gpu-mem from 1 to 16 MB: only there), lowerable and priced alike.
  g = model_in("gpt2.mtc", "L=4,C=128,NH=4,T=64,V=256,B=2", PASS_PRECISION_FP32);
  const double swap_mbs[] = {5, 12};
  for (size_t i = 0; i < sizeof swap_mbs / sizeof swap_mbs[0]; i++) {
    SvConfig c = cluster("H100-80GB", 2, swap_mbs[i] * 1e6);
    Plan a;
    SvPlan *kept;
    IrDiag d = {0};
    int rc = sv_apply_best(g, &c, &a, &kept, &d);
    CHECK(!rc, "%.1f MB (C=128): %s", swap_mbs[i], d.msg);
    if (rc) {
      plan_free(&a);
      sv_plan_free(kept);
      continue;
    }
    swapped += a.swap != 0;
    SvPriced pr;
    rc = sv_price(g, &c, &a, &pr, &d);
    CHECK(!rc && pr.step_s == kept->sol.time && pr.fits, "%.1f MB (C=128): priced %.9g s, the "
          "plan %.9g s", swap_mbs[i], pr.step_s, kept->sol.time);
    plan_free(&a);
    sv_plan_free(kept);
  }
  CHECK(swapped >= 2, "only %d plans swap activations", swapped);
  ir_graph_free(g);
}

// sv_apply_best's plan for c, CHECKed to exist (what names the case): 0, or -1.
static int apply_best(IrGraph *g, const SvConfig *c, Plan *a, SvPlan **kept, const char *what) {
  IrDiag d = {0};
  int rc = sv_apply_best(g, c, a, kept, &d);
  CHECK(!rc, "%s: %s", what, d.msg);
  return rc;
}

// The cluster file dir/name (tests/solver/) as a planner's configuration.
static SvConfig cluster_file(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  char *text = fe_read_text(path, NULL);
  IR_ASSERT(text);
  SvConfig c = sv_default_config();
  IrDiag d = {0};
  if (sv_cluster_parse(&c.cluster, text, path, &d))
    fprintf(stderr, "%s\n", d.msg), exit(1);
  free(text);
  return c;
}

// The program's price of plan a (sv_price) is the solver's for it, and it fits.
static void check_priced(IrGraph *g, const SvConfig *c, const Plan *a, const SvPlan *kept,
                         const char *what) {
  SvPriced pr;
  IrDiag d = {0};
  int rc = sv_price(g, c, a, &pr, &d);
  CHECK(!rc && pr.fits && pr.step_s == kept->sol.time,
        "%s: priced %.9g s%s (rc %d: %s), the plan %.9g s", what, pr.step_s,
        pr.fits ? "" : ", not fitting", rc, d.msg, kept->sol.time);
}

// Per-block meshes, the solver's own choice: GPT-2 with a large vocabulary, long sequences and 8
// layers on 4 GPUs of 56 MB and no host memory takes dp 2 x tp 2 for its embedding and head and
// keeps its layers data parallel over those 4 ranks (their batch split over tp), and the price
// of that plan is the plan's. (With V=8192 on 48 MB it did so until each layer's second norm
// joined its residual's add: tp 2 is faster there now.) (With 4 layers on 4 GPUs of 32 MB it took tp 4 and the layers
// data parallel over it until a 2D grid held the vocabulary as [V/Q, C/Q]; a 2 x 2 grid for
// every block is faster there now.)
static void test_apply_batch_tp(void) {
  IrGraph *g = model_in("gpt2.mtc", "L=8,C=64,NH=4,T=128,V=16384,B=8", PASS_PRECISION_FP32);
  SvConfig c = cluster("H100-80GB", 4, 56e6);
  c.cluster.group[0].dev.host_mem = 0;
  Plan a;
  SvPlan *kept;
  if (!apply_best(g, &c, &a, &kept, "batch_tp")) {
    int batch = 0;
    for (int b = 1; b < a.nblocks; b++)
      batch += a.block[b].batch_tp;
    CHECK(a.mesh.size[IR_MESH_TP] == 2 && !a.block[0].batch_tp && batch == 8,
          "batch_tp: tp %d, block 0 %s, %d of 8 layers data parallel over tp",
          a.mesh.size[IR_MESH_TP], a.block[0].batch_tp ? "data parallel" : "tp", batch);
    check_priced(g, &c, &a, kept, "batch_tp");
  }
  plan_free(&a);
  sv_plan_free(kept);
  ir_graph_free(g);
}

// Blocks tensor parallel over part of the mesh's tp, the solver's own choice: GPT-2 774M on 16
// L4s with 5 GiB each and no host memory runs its embeddings and head at tp 8 and its layers
// at tp 4 of the same 8 ranks, each layer's micro-batch split over the 2 groups of 4, which
// beats the best plan without such blocks (4 x TP4: 1313.58 ms against 1132.36), and the price
// of that plan is the plan's. With sequence parallelism too (Megatron's collectives
// reduce-scatters and all-gathers over 4 ranks), every block takes tp 4 of 8, each micro-batch
// split over the 2 groups of 4: 1227.15 ms against 1260.74 (4 x TP4, a quarter of its layers
// checkpointed).
static void test_apply_sub(bool seq_parallel, double margin) {
  IrGraph *g = model("gpt2.mtc", "L=36,C=1280,NH=20,V=50257,T=1024");
  SvConfig c = cluster("L4-24GB", 16, 5 * GiB);
  c.cluster.group[0].dev.host_mem = 0;
  c.seq_parallel = seq_parallel;
  Plan a;
  SvPlan *kept;
  if (!apply_best(g, &c, &a, &kept, "sub")) {
    int sub = 0;
    for (int b = 1; b < a.nblocks; b++)
      sub += a.block[b].sub;
    CHECK(a.mesh.size[IR_MESH_TP] == 8 && a.mesh.size[IR_MESH_SUB] == 4 &&
              a.block[0].sub == seq_parallel && sub == a.nblocks - 1,
          "sub: tp %d, sub %d, block 0 %s, %d of %d layers over sub", a.mesh.size[IR_MESH_TP],
          a.mesh.size[IR_MESH_SUB], a.block[0].sub ? "over sub" : "tp", sub, a.nblocks - 1);
    check_priced(g, &c, &a, kept, "sub");
    double best = INFINITY;   // the meshes without such blocks
    for (int tp = 1; tp <= 16; tp *= 2) {
      SvConfig m = c;
      m.mesh_tp = tp;
      SvPlan *p = plan(g, &m);
      if (p->sol.feasible)
        best = fmin(best, p->sol.time);
      sv_plan_free(p);
    }
    CHECK(kept->sol.time < margin * best, "sub%s: %.4g s, without blocks over sub %.4g s",
          seq_parallel ? " (seq_parallel)" : "", kept->sol.time, best);
  }
  plan_free(&a);
  sv_plan_free(kept);
  ir_graph_free(g);
}

// A block data parallel over the tp ranks splits its micro-batch among them, over tp / sub
// ranks for a block over sub of them: the planner offers each only where the parts divide the
// micro-batch (ir/shard.c would keep the batch whole, and the lowering refuses the plan).
static void test_batch_layouts_divide(void) {
  IrGraph *g = model("gpt2.mtc", "L=2,C=64,NH=4,T=16,V=256");
  for (int mb = 1; mb <= 4; mb++) {
    SvConfig c = cluster("H100-80GB", 4, 0);
    c.mesh_tp = 4;
    c.mesh_sub = 2;
    c.micro_batch = mb;
    c.global_batch = 4 * mb;
    SvPlan *p = plan(g, &c);
    bool batch = false, sub = false;
    for (int l = 0; p->prob && l < p->prob->nlayouts; l++)
      batch |= p->prob->layout[l].batch, sub |= p->prob->layout[l].sub > 1;
    CHECK(batch == (mb % 4 == 0) && sub == (mb % 2 == 0),
          "micro-batch %d over tp 4 (sub 2): batch layout %d, sub layout %d", mb, batch, sub);
    sv_plan_free(p);
  }
  ir_graph_free(g);
}

// 2D on part of tp: GPT-2 1.5B with 32 heads on 16 H100s of 4 GiB, no host memory. Every mesh
// of one kind of block costs over 1.16 s a step; the mesh of tp 8 whose layers are on the grids
// of its groups of 4 ranks, each on half of every micro-batch, 715.20 ms (734.73 before the
// GEMM epilogues, 717.40 before the fused classifier, 717.21 before the fused norm; mtc plan
// examples/gpt2.mtc -D L=48 -D C=1600 -D NH=32 -D V=50257 -D T=1024 --gpus 16 --gpu-mem 4GiB
// --host-mem 0). Its prices are the plan mtc compile --plan prices.
static void test_apply_subgrid(void) {
  IrGraph *g = model("gpt2.mtc", "L=48,C=1600,NH=32,V=50257,T=1024");
  SvConfig c = cluster("H100-80GB", 16, 4 * GiB);
  c.cluster.group[0].dev.host_mem = 0;
  Plan a;
  SvPlan *kept;
  if (!apply_best(g, &c, &a, &kept, "subgrid")) {
    int grid = 0;
    for (int b = 1; b < a.nblocks; b++)
      grid += a.block[b].grid;
    CHECK(a.mesh.size[IR_MESH_TP] == 8 && a.mesh.size[IR_MESH_ROW] == 2 &&
              a.mesh.size[IR_MESH_SUB] == 4 && a.mesh.size[IR_MESH_SUBROW] == 4 &&
              grid == a.nblocks - 1,
          "subgrid: tp %d, q %d, sub %d, %d of %d layers on the grids", a.mesh.size[IR_MESH_TP],
          a.mesh.size[IR_MESH_ROW], a.mesh.size[IR_MESH_SUB], grid, a.nblocks - 1);
    check_priced(g, &c, &a, kept, "subgrid");
    CHECK(fabs(kept->sol.time - 0.71520) < 1e-4, "subgrid: %.5f s a step, not 0.71520",
          kept->sol.time);
  }
  plan_free(&a);
  sv_plan_free(kept);
  ir_graph_free(g);
}

// Attention heads the degree must divide: GPT-2 1.5B's 25 heads on 16 L4s with 6 GiB each and
// no host memory. The solver offered tp 4 and 2 x 2 grids for its layers, which the lowering
// refuses ("NH = 25 does not divide by tp = 4"); it now keeps every layer's tp and grid to
// divisors of 25 (here: data parallel), and the baselines it cannot run say why.
static void test_heads_divide(void) {
  IrGraph *g = model("gpt2.mtc", GPT2_15B);
  SvConfig c = cluster("L4-24GB", 16, 6 * GiB);
  c.cluster.group[0].dev.host_mem = 0;
  Plan a;
  SvPlan *kept;
  int rc = apply_best(g, &c, &a, &kept, "heads");
  for (int b = 1; !rc && b < a.nblocks; b++) {
    const PlanBlock *pb = plan_block(&a, b);
    int deg = pb->batch_tp ? 1
              : pb->sub    ? a.mesh.size[IR_MESH_SUB]
              : pb->grid   ? a.mesh.size[IR_MESH_ROW]
                           : a.mesh.size[IR_MESH_TP] * a.mesh.size[IR_MESH_ROW];
    CHECK(25 % deg == 0, "heads: block %d splits 25 heads %d ways", b, deg);
  }
  int why = 0;
  for (int i = 0; !rc && i < kept->nbaselines; i++)
    why += !strncmp(kept->baseline[i].name, "Megatron", 8) &&
           strstr(kept->baseline[i].why, "NH = 25 does not divide by tp = 8") != NULL;
  CHECK(rc || why == 1, "heads: no Megatron TP=8 baseline that says NH = 25 does not divide");
  if (!rc)
    plan_free(&a), sv_plan_free(kept);
  ir_graph_free(g);
}

// A layout the flags force (--tp 2 --checkpoint 2 --zero 1 on 4 GPUs) is priced
// as the planner splits a step: recompute and both kinds of communication; a
// cluster of another size, replicas of unequal micro-batches on one group (a
// plan file's groups), or an offload share the planner does not consider, has
// no price.
static void test_price_forced(void) {
  IrGraph *g = model_in("gpt2.mtc", "L=4,C=64,NH=4,T=16,V=256,B=2", PASS_PRECISION_FP32);
  SvConfig c = cluster("H100-80GB", 1, 0);
  Plan a = plan_single();
  CHECK(!plan_alloc_blocks(&a, 5), "out of memory");
  a.lower = true;
  a.mesh = mesh_make(2, 2);
  a.micro_batches = 1;
  a.checkpoint = 2;
  for (int b = 0; b < 5; b++)
    a.block[b].zero = 1;
  SvPriced pr;
  IrDiag d = {0};
  int rc = sv_price(g, &c, &a, &pr, &d);  // one GPU for a mesh of four
  CHECK(rc == 1 && strstr(d.msg, "runs on 4 GPUs; the cluster has 1"),
        "rc %d: '%s'", rc, d.msg);
  c = cluster("H100-80GB", 4, 0);
  d = (IrDiag){0};
  rc = sv_price(g, &c, &a, &pr, &d);
  CHECK(!rc && pr.t[SV_T_RECOMPUTE] > 0 && pr.t[SV_T_TP] > 0 && pr.t[SV_T_DP] > 0 &&
            !strcmp(pr.device, "H100-80GB"),
        "rc %d (%s): recompute %g, tp %g, dp %g s, on %s", rc, d.msg, pr.t[SV_T_RECOMPUTE],
        pr.t[SV_T_TP], pr.t[SV_T_DP], pr.device);
  double sum = 0;
  for (int i = 0; i <= SV_NT; i++)
    sum += pr.t[i];
  CHECK(!rc && pr.step_s >= sum * (1 - 1e-12), "step %g s, its parts %g s", pr.step_s, sum);
  // a plan file's two groups, priced on the flags' one group split as its replicas differ: as
  // on two groups of the same GPUs on one node, under ZeRO-1 and under ZeRO-2 (the replica
  // that runs 1 micro-batch reduce-scatters with 2 ghosts)
  int uneven[2] = {1, 3};
  CHECK(!plan_set_replica_micro(&a, uneven), "out of memory");
  SvConfig two = c;
  two.cluster.ngroups = 2;
  two.cluster.group[0].count = two.cluster.group[1].count = 2;
  two.cluster.group[1] = two.cluster.group[0];
  two.cluster.one_node = true;
  for (int zero = 1; zero <= 2; zero++) {
    for (int b = 0; b < 5; b++)
      a.block[b].zero = zero;
    SvPriced split, groups;
    d = (IrDiag){0};
    rc = sv_price(g, &c, &a, &split, &d) || sv_price(g, &two, &a, &groups, &d);
    CHECK(!rc && split.step_s == groups.step_s && !memcmp(split.t, groups.t, sizeof split.t) &&
              !strcmp(split.device, "H100-80GB"),
          "uneven, ZeRO-%d: rc %d (%s), %.9g s on one group split, %.9g s on two", zero, rc,
          d.msg, split.step_s, groups.step_s);
  }
  for (int b = 0; b < 5; b++)
    a.block[b].zero = 1;
  int even[2] = {1, 1};
  CHECK(!plan_set_replica_micro(&a, even) && !a.replica_micro, "equal shares kept as uneven");
  a.block[3].offload = 0.3;
  d = (IrDiag){0};
  rc = sv_price(g, &c, &a, &pr, &d);
  CHECK(rc == 1 && strstr(d.msg, "no choice like the plan's"), "offload 0.3: rc %d, '%s'", rc,
        d.msg);
  plan_free(&a);
  ir_graph_free(g);
}

// mtc compile on a mixed cluster (Cephalo's uneven batch shares, as programs run them):
// each group's micro-batches whole per replica, at least one each; the state sharded
// evenly. GPT-2 (one layer of 256) on
// an H100 and an L4 at half its fp32 rate (a model this small fills so few of either's
// multiprocessors that a whole L4 runs it about as fast), 8 micro-batches: the H100 runs 5; the
// compiled plan runs 5 and 3 and shards evenly. On two GPUs of each kind (a replica per
// GPU, or per tp pair) the free solve may give a group a number its replicas cannot split
// evenly; compile's does not. The program's price of the layout is the plan's, to the bit.
static void test_apply_groups(void) {
  IrGraph *g = model_in("gpt2.mtc", "L=1,C=256,NH=4,T=32,V=256,B=1", PASS_PRECISION_FP32);
  const char *clusters[] = {
      "{\"groups\": [{\"gpu\": \"H100-80GB\", \"count\": 1}, {\"gpu\": \"L4-24GB\", \"count\": 1, "
      "\"flops_fp32\": 15e12}]}",
      "{\"groups\": [{\"gpu\": \"H100-80GB\", \"count\": 2}, {\"gpu\": \"L4-24GB\", \"count\": 2, "
      "\"flops_fp32\": 15e12}]}",
  };
  for (int i = 0; i < 2; i++) {
    SvConfig c = sv_default_config();
    IrDiag d = {0};
    if (sv_cluster_parse(&c.cluster, clusters[i], "test", &d))
      fprintf(stderr, "%s\n", d.msg), exit(1);
    c.global_batch = 8;
    c.micro_batch = 1;   // (every group's micro-batches of 1 sequence)
    c.mip_gap = 0;
    Plan a;
    SvPlan *kept;
    int rc = sv_apply_best(g, &c, &a, &kept, &d);
    CHECK(!rc, "cluster %d: %s", i, d.msg);
    if (rc) {
      plan_free(&a);
      sv_plan_free(kept);
      continue;
    }
    int dp = a.mesh.size[IR_MESH_DP], per = mesh_ranks(&a.mesh) / dp;
    CHECK(plan_micro_total(&a) == 8, "cluster %d: %lld micro-batches", i,
          (long long)plan_micro_total(&a));
    for (int k = 0, r = 0; k < 2; k++) {
      int64_t runs = 0;
      for (int j = 0; j < c.cluster.group[k].count / per; j++, r++) {
        CHECK(plan_replica_micro(&a, r) == plan_replica_micro(&a, r - j) &&
                  plan_replica_micro(&a, r) >= 1,
              "cluster %d: replica %d runs %d", i, r, plan_replica_micro(&a, r));
        runs += plan_replica_micro(&a, r);
      }
      CHECK(runs == kept->sol.batch[k] && kept->sol.share[k] == (double)c.cluster.group[k].count /
                                                                  sv_cluster_gpus(&c.cluster),
            "cluster %d, group %d: runs %lld of the plan's %lld, state share %g", i, k,
            (long long)runs, (long long)kept->sol.batch[k], kept->sol.share[k]);
    }
    if (i == 0)
      CHECK(a.replica_micro && a.replica_micro[0] == 5 && a.replica_micro[1] == 3,
            "one H100 and one L4: %d and %d micro-batches", plan_replica_micro(&a, 0),
            plan_replica_micro(&a, 1));
    SvPriced pr;
    int slowest = kept->sol.group_time[1] > kept->sol.group_time[0];
    double t[SV_NT + 1];
    sv_step_times(kept, &kept->sol, slowest, t);
    rc = sv_price(g, &c, &a, &pr, &d);
    CHECK(!rc && pr.step_s == kept->sol.time && !memcmp(pr.t, t, sizeof t) &&
              !strcmp(pr.device, "H100-80GB+L4-24GB"),
          "cluster %d: priced %.9g s on %s (rc %d: %s), the plan %.9g s", i, pr.step_s, pr.device,
          rc, d.msg, kept->sol.time);
    plan_free(&a);
    sv_plan_free(kept);
  }
  ir_graph_free(g);
}

// ZeRO 2 and 3 on uneven batch shares in mtc compile's plans: GPT-2 (2 layers of 256) on an
// H100 and an L4 at 2.5 TFLOP/s in fp32, 20 MB each and no host memory
// (tests/solver/h100_l4_zero2.json), fits only with the layers' gradients sharded (ZeRO-2: no
// plan fitted when compile's plans kept ZeRO 2 and 3 to even shares). The H100 runs 7 of the 8
// micro-batches and the L4 1 and 6 ghosts, which reduce-scatter the layers' gradients as its
// micro-batches do; the replicas run their micro-steps in lockstep, so the H100 waits for the
// L4's first micro-batch and its ghosts' collectives. The step is the planner's for that, and so
// is the program's price of it.
static void test_apply_ghosts(const char *dir) {
  IrGraph *g = model_in("gpt2.mtc", "L=2,C=256,NH=4,T=32,V=256,B=1", PASS_PRECISION_FP32);
  SvConfig c = cluster_file(dir, "h100_l4_zero2.json");
  c.global_batch = 8;
  c.micro_batch = 1;   // (--micro-batch 1: every group's micro-batches that size)
  c.mip_gap = 0;
  Plan a;
  SvPlan *kept;
  if (!apply_best(g, &c, &a, &kept, "ghosts")) {
    int zero2 = 0;
    for (int b = 1; b < a.nblocks; b++)
      zero2 += a.block[b].zero == 2;
    CHECK(zero2 == a.nblocks - 1 && a.replica_micro && plan_replica_micro(&a, 0) == 7 &&
              plan_replica_micro(&a, 1) == 1,
          "ghosts: %d of %d layers ZeRO-2, %d and %d micro-batches", zero2, a.nblocks - 1,
          plan_replica_micro(&a, 0), plan_replica_micro(&a, 1));
    const SvProblem *p = kept->prob;
    CHECK(sv_ghosts(p, &kept->sol, 0) == 0 && sv_ghosts(p, &kept->sol, 1) == 6,
          "ghosts: %g and %g ghost micro-batches", sv_ghosts(p, &kept->sol, 0),
          sv_ghosts(p, &kept->sol, 1));
    // in lockstep the H100 waits for the L4's micro-batch, and the L4's ghosts for the H100's
    // micro-batches: the two end together but for what runs once a step (the optimizer)
    const SvSolution *so = &kept->sol;
    CHECK(sv_lockstep(p, so) && sv_wait(p, so, 0) > 0.1 * so->time && sv_wait(p, so, 1) > 0 &&
              fabs(so->group_time[0] - so->group_time[1]) < 0.01 * so->time,
          "ghosts: the H100 waits %.4g s, the L4 %.4g, steps %.4g and %.4g s", sv_wait(p, so, 0),
          sv_wait(p, so, 1), so->group_time[0], so->group_time[1]);
    // the L4's ghosts are in its step: its reduce-scatters, 7 a step, as the H100's
    double t0[SV_NT + 1], t1[SV_NT + 1];
    sv_step_times(kept, &kept->sol, 0, t0);
    sv_step_times(kept, &kept->sol, 1, t1);
    CHECK(t1[SV_T_DP] > 0.9 * t0[SV_T_DP], "ghosts: data-parallel %.4g s on the L4, %.4g on the "
          "H100", t1[SV_T_DP], t0[SV_T_DP]);
    check_priced(g, &c, &a, kept, "ghosts");
    plan_free(&a);
    sv_plan_free(kept);
  }
  ir_graph_free(g);
}

// Cephalo's batch shares: the case above without --micro-batch, where each group's micro-batches
// may be their own size. The H100's replica runs 2 micro-batches of 3 sequences and the L4's 2
// of 1, no ghosts, the L4 holding more of the state than the H100 (whose activations are three
// times the L4's): 10.95 ms against the ghosts' 16.7. The price of the lowered plan is the
// plan's, each group's numbers at its own micro-batch.
static void test_apply_sizes(const char *dir) {
  IrGraph *g = model_in("gpt2.mtc", "L=2,C=256,NH=4,T=32,V=256,B=1", PASS_PRECISION_FP32);
  SvConfig c = cluster_file(dir, "h100_l4_zero2.json");
  c.global_batch = 8;
  c.mip_gap = 0;
  Plan a;
  SvPlan *kept;
  if (!apply_best(g, &c, &a, &kept, "sizes")) {
    const SvSolution *so = &kept->sol;
    CHECK(a.micro == 3 && plan_replica_rows(&a, 0) == 3 && plan_replica_rows(&a, 1) == 1 &&
              plan_replica_micro(&a, 0) == 2 && plan_replica_micro(&a, 1) == 2 &&
              kept->prob->rows[0] == 3 && kept->prob->rows[1] == 1,
          "sizes: micro-batches of %lld and %lld sequences, %d and %d of them",
          (long long)plan_replica_rows(&a, 0), (long long)plan_replica_rows(&a, 1),
          plan_replica_micro(&a, 0), plan_replica_micro(&a, 1));
    CHECK(sv_ghosts(kept->prob, so, 1) == 0 && so->share[1] > so->share[0] &&
              so->time < 0.7 * 16.7e-3,
          "sizes: %g ghosts, state shares %g and %g, step %.4g s", sv_ghosts(kept->prob, so, 1),
          so->share[0], so->share[1], so->time);
    // the activations per GPU follow the micro-batch: three times as many on the H100
    SvCost k0, k1;
    sv_plan_unit_cost(kept, so, 1, 0, &k0);
    sv_plan_unit_cost(kept, so, 1, 1, &k1);
    CHECK(k0.mem[SV_M_ACT] > 2.9 * k1.mem[SV_M_ACT] && k0.mem[SV_M_ACT] < 3.1 * k1.mem[SV_M_ACT],
          "sizes: the layers' activations %g bytes on the H100, %g on the L4", k0.mem[SV_M_ACT],
          k1.mem[SV_M_ACT]);
    check_priced(g, &c, &a, kept, "sizes");
    plan_free(&a);
    sv_plan_free(kept);
  }
  ir_graph_free(g);
}

// Uneven state shares in mtc compile's plans: GPT-2 on an H100 of 3 MB and an L4 of 1.5 MB
// (tests/solver/h100_l4_small.json, no host memory) fits only with the H100 holding more of
// the ZeRO-1 state (61 and 3 of 64 units, each GPU as full; no plan fitted before), which the
// plan's replicas' parts say and its price keeps; with an L4 of 3 MB even shares fit and stay.
static void test_apply_group_parts(const char *dir) {
  IrGraph *g = model_in("gpt2.mtc", "L=2,C=64,NH=4,T=16,V=256,B=2", PASS_PRECISION_FP32);
  for (int small = 1; small >= 0; small--) {
    SvConfig c = cluster_file(dir, "h100_l4_small.json");
    if (!small)
      c.cluster.group[1].dev.mem = c.cluster.group[0].dev.mem;
    c.global_batch = 8;
    c.micro_batch = 2;   // (every group's micro-batches of 2 sequences)
    Plan a;
    SvPlan *kept;
    if (apply_best(g, &c, &a, &kept, small ? "group parts (L4 small)" : "group parts"))
      continue;
    const int *parts = a.replica_parts, even[2] = {1, 1};
    if (!parts)
      parts = even;
    if (small)
      CHECK(parts[0] == 61 && parts[1] == 3 && kept->sol.feasible,
            "group parts: %d and %d of the state, the plan %s", parts[0], parts[1],
            kept->sol.feasible ? "fits" : "does not fit");
    else
      CHECK(!a.replica_parts && kept->sol.share[0] == 0.5,
            "group parts: uneven (%g) where even fit", kept->sol.share[0]);
    check_priced(g, &c, &a, kept, "group parts");
    plan_free(&a);
    sv_plan_free(kept);
  }
  ir_graph_free(g);
}

// Without CPU memory for offloaded state (mtc compile --host-mem 0), memory the solver
// met with offload takes tensor parallelism or ZeRO-3: GPT-2 small on 4 GPUs of 1.1 MB
// (measured with mtc compile --gpus 4: with the H100's host memory dp 4, ZeRO-2, offload 1
// and every layer checkpointed; with none, dp 2 x tp 2 from 0.9 to 1.25 MB).
// ZeRO-3 gathers a block's parameters again in backward only where backward reads them (or
// recomputes the block): a bias added to an input is not read by its backward (the gradient is
// a sum of dy), so under ZeRO-3 its block prices one all-gather, as passes/lower.c runs it
// (bwd_gather); a matmul's backward reads its weight, so it prices two. On 2 GPUs of a slow
// link, with compute too small to hide them.
static void test_zero3_backward_gather(void) {
  static const char text[] =
      "graph \"bias\"\n"
      "sym B = 2\nsym D = 65536\nsym K = 4\n"
      "input %x : f32[B,D]\n"
      "input %y : i32[B] classes(K)\n"
      "param %b : f32[D] zeros\n"
      "param %w : f32[D,K] normal(0.02)\n"
      "forward\n"
      "  %h : f32[B,D] = add(%x, %b) #1\n"
      "  %lo : f32[B,K] = matmul(%h, %w) #2\n"
      "  %loss : f32[] = cross_entropy(%lo, %y)\n"
      "loss %loss\n";
  IrDiag d = {0};
  IrGraph *g = ir_parse(text, "bias.ir", &d);
  PassCtx ctx = {.opt = pass_default_options(), .diag = &d};
  ctx.opt.stop_after = "precision";
  ctx.opt.precision = PASS_PRECISION_FP32;
  CHECK(g && !pass_run_all(g, &ctx), "bias.ir: %s", d.msg);
  SvModel *m = g ? sv_model_build(g, false, false, &d) : NULL;
  CHECK(m && m->nblocks == 3, "bias.ir: %s", d.msg);
  if (m && m->nblocks == 3) {
    CHECK(!m->block[1].bwd_params && m->block[2].bwd_params,
          "backward reads the parameters of block 1: %d, of block 2: %d", m->block[1].bwd_params,
          m->block[2].bwd_params);
    SvConfig c = cluster("H100-80GB", 2, 0);
    c.cluster.group[0].dev.intra_bw = 1e6;   // 1 MB/s: every gather exposed
    SvCtx x = {.cfg = &c, .gpus = 2, .micro_total = 1};
    SvLayout l = {.dp = 2, .tp = 1, .q = 1};
    double t[2][2];   // [block 1 or 2][checkpointed]
    for (int b = 1; b <= 2; b++)
      for (int ck = 0; ck < 2; ck++) {
        SvNum n;
        sv_num_eval(m, &c, b, &n);
        SvCost o;
        sv_cost(&x, &n, l, ck, false, 3, 0, false, false, 0, &o);
        t[b - 1][ck] = o.t_micro[SV_T_DP];
      }
    // each gather and reduce-scatter the same time A (the gradients are the parameters' size):
    // block 1 gathers in forward and reduce-scatters in backward (2 A), checkpointed it gathers
    // again for the recompute (3 A); block 2 gathers in backward either way
    CHECK(fabs(t[0][1] / t[0][0] - 1.5) < 0.01, "block 1: %g s, checkpointed %g s: want 2:3",
          t[0][0], t[0][1]);
    CHECK(t[1][0] > 0 && fabs(t[1][0] - t[1][1]) <= 1e-9 * t[1][0],
          "block 2: %g s, checkpointed %g s: want equal", t[1][0], t[1][1]);
    // With bandwidth to spare, what is left is the latency of each collective's ring: on 16
    // H100s, 8 a node, block 2's gather in forward, and in backward its gather and the
    // reduce-scatter, each 25 us between nodes, 14 steps of 3.4 us inside them and 1 of 9.6
    // between them (NCCL's model of its rings)
    c = cluster("H100-80GB", 16, 0);
    c.cluster.group[0].dev.intra_bw = c.cluster.group[0].dev.inter_bw = 1e15;
    x.gpus = 16;
    SvNum n;
    sv_num_eval(m, &c, 2, &n);
    SvCost o;
    sv_cost(&x, &n, (SvLayout){.dp = 16, .tp = 1, .q = 1}, false, false, 3, 0, false, false, 0,
            &o);
    double ring = 25e-6 + 14 * 3.4e-6 + 9.6e-6;
    CHECK(fabs(o.t_micro[SV_T_DP] - 3 * ring) < 1e-9, "ZeRO-3 over 2 nodes: %g s, want %g",
          o.t_micro[SV_T_DP], 3 * ring);
  }
  sv_model_free(m);
  ir_graph_free(g);
}

static void test_no_host_memory(void) {
  IrGraph *g = model_in("gpt2.mtc", "L=2,C=64,NH=4,T=16,V=256,B=2", PASS_PRECISION_FP32);
  for (int host = 1; host >= 0; host--) {
    SvConfig c = cluster("H100-80GB", 4, 1.1e6);
    if (!host)
      c.cluster.group[0].dev.host_mem = 0;
    Plan a;
    SvPlan *kept;
    IrDiag d = {0};
    int rc = sv_apply_best(g, &c, &a, &kept, &d);
    CHECK(!rc, "host memory %d: %s", host, d.msg);
    if (rc)
      continue;
    bool zero3 = false, offload = false;
    for (int b = 0; b < a.nblocks; b++)
      zero3 |= a.block[b].zero == 3, offload |= a.block[b].offload > 0;
    int dp = a.mesh.size[IR_MESH_DP], tp = a.mesh.size[IR_MESH_TP];
    if (host)
      CHECK(offload, "with host memory: dp %d x tp %d without offload", dp, tp);
    else
      CHECK(!offload && (tp > 1 || zero3), "without host memory: dp %d x tp %d, ZeRO-3 %d, "
            "offload %d; want tp > 1 or ZeRO-3 and no offload", dp, tp, zero3, offload);
    plan_free(&a);
    sv_plan_free(kept);
  }
  ir_graph_free(g);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: test_solver EXAMPLES_DIR TESTS_SOLVER_DIR\n");
    return 2;
  }
  examples = argv[1];
  datadir = argv[2];
  test_collectives();
  test_zero_formulas();
  test_megatron_activations();
  test_clusters();
  test_profiles();
  test_collectives_by_size();
  test_batch_layouts_divide();
  test_formulas_print();
  test_seq_parallel();
  test_checkpoint_k_of_l();
  test_apply_lowerable();
  test_apply_batch_tp();
  test_apply_sub(false, 0.9);
  test_apply_sub(true, 0.99);
  test_apply_subgrid();
  test_heads_divide();
  test_no_host_memory();
  test_zero3_backward_gather();
  test_price_forced();
  test_apply_groups();
  test_apply_group_parts(datadir);
  test_apply_ghosts(datadir);
  test_apply_sizes(datadir);
  test_brute_force();
  test_small_model_gets_dp();
  test_zero_offload_10b();
  test_big_model_shards();
  test_plan_compiled();
  test_less_memory_never_faster();
  test_heterogeneous();
  if (failures) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("ok: solver\n");
  return 0;
}
