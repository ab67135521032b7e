// A plan as the lowering takes it: the mesh, the batch, and each block's
// choices, from the solver's solution or from a plan.json (saved by `mtc
// plan --json` or `mtc compile`, perhaps edited).
//
// What mtc lowers today: one mesh for every block (dp x tp ranks, or dp x a
// q x q grid), any ZeRO stage and offload share per block, activation swap of
// the first S repeated layers and checkpointing of the K after them; on
// several groups of GPUs each group's replicas run their own number of
// micro-batches (SvProblem.replica_ranks says what else that asks).
// sv_apply_best asks the solver for that (one solve per tp that divides each
// group's GPUs, the fastest feasible kept; in a model with layers of several
// kinds, each kind sharing variables, it may still checkpoint or swap a later
// kind and not an earlier one, which mtc compile refuses; with --no-share the
// order holds); sv_apply_read refuses a file that asks for anything else,
// naming the block and the field.
#include "internal.h"
#include "parts.h"   // runtime/: the replicas' parts of the state

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int group_parts(Plan *a, int n, const int64_t *count, const double *shares, int per,
                       const char *path, IrDiag *d);

// What each block does with its activations between forward and backward.
enum { KEEP, CKPT, SWAP };

// The plan's swap and checkpointing from each block's choice: the first S
// repeated layers (IR blocks 1..S) swapped, as passes/swap.c does them, the K
// after them checkpointed, as passes/recompute.c does them; or an error
// naming the first block outside them.
static int checkpoint_of(const char *act, int nblocks, Plan *p, IrDiag *d) {
  int s = 0, k = 0;
  while (s + 1 < nblocks && act[s + 1] == SWAP)
    s++;
  while (s + k + 1 < nblocks && act[s + k + 1] == CKPT)
    k++;
  for (int b = 0; b < nblocks; b++)
    if (act[b] != KEEP && (b == 0 || b > s + k))
      return ir_error(d, (IrLoc){0}, "the plan %s block %d, not as one of the first S layers "
                      "swapped and the K after them checkpointed, which compiled programs do "
                      "not do yet; choose the layout with --dp/--tp/--zero/--swap/--checkpoint",
                      act[b] == SWAP ? "swaps" : "checkpoints", b);
  p->swap = s == nblocks - 1 && s > 0 ? PLAN_CHECKPOINT_ALL : s;
  p->checkpoint = s + k == nblocks - 1 && k > 0 ? PLAN_CHECKPOINT_ALL : k;
  return 0;
}

// A lowered plan with room for n blocks, and what each does with its activations.
static char *begin_plan(Plan *p, int n) {
  *p = plan_single();
  p->lower = true;
  return plan_alloc_blocks(p, n) ? NULL : calloc((size_t)n + 1, 1);
}

// What each block of the solution does with its activations (act[b]: KEEP, CKPT, SWAP): the
// first K (or S) blocks of each unit that the unit's choice checkpoints (swaps).
static void solution_acts(const SvPlan *pl, char *act) {
  const SvProblem *p = pl->prob;
  const SvModel *m = pl->model;
  int *seen = calloc((size_t)p->nunits + 1, sizeof *seen);   // blocks of each unit so far
  IR_ASSERT(seen);
  for (int b = 0; b < m->nblocks; b++) {
    int u = m->block[b].unit;
    const SvChoice *c = &p->unit[u].choice[pl->sol.pick[u]];
    act[b] = seen[u]++ < sv_ckpt_blocks(p, &pl->sol, u) + sv_swap_blocks(p, &pl->sol, u)
                 ? (c->swap ? SWAP : CKPT)
                 : KEEP;
  }
  free(seen);
}

static int one_mesh(const Mesh *mesh, const bool *in, const SvModel *m, Plan *a,
                    const char *path, IrDiag *d);

bool sv_plan_runs(const SvPlan *pl, char *why, size_t n) {
  const SvProblem *p = pl->prob;
  const SvModel *m = pl->model;
  if (!pl->sol.feasible) {
    snprintf(why, n, "no plan fits");
    return false;
  }
  Plan a;
  char *act = begin_plan(&a, m->nblocks);
  Mesh *mesh = calloc((size_t)m->nblocks + 1, sizeof *mesh);
  bool *in = calloc((size_t)m->nblocks + 1, sizeof *in);
  IR_ASSERT(act && mesh && in);
  for (int b = 0; b < m->nblocks; b++) {   // each block's own mesh (SvConfig.mesh_tp 0)
    int u = m->block[b].unit;
    SvLayout l = p->layout[p->unit[u].choice[pl->sol.pick[u]].layout];
    mesh[b] = l.q > 1 && l.tp == 1 ? mesh_grid(l.dp, l.q) : mesh_make(l.dp, l.tp);
  }
  solution_acts(pl, act);
  IrDiag quiet = {0};
  bool runs = !one_mesh(mesh, in, m, &a, "the plan", &quiet) &&
              !checkpoint_of(act, m->nblocks, &a, &quiet);
  int rows = a.mesh.size[IR_MESH_SUBROW];   // grids on part of tp cut each micro-batch over
  if (runs && rows > a.mesh.size[IR_MESH_ROW] && pl->micro_batch % rows) {   // their rows
    ir_error(&quiet, (IrLoc){0}, "its 2D blocks on grids of part of tp split each micro-batch "
             "over %d rows, and its %lld sequences do not divide by %d", rows,
             (long long)pl->micro_batch, rows);
    runs = false;
  }
  snprintf(why, n, "%s", runs ? "" : quiet.msg);
  free(act), free(mesh), free(in);
  plan_free(&a);
  return runs;
}

// The solution's choice for each block.
static int from_plan(const SvPlan *pl, Plan *a, IrDiag *d) {
  const SvProblem *p = pl->prob;
  const SvModel *m = pl->model;
  char *act = begin_plan(a, m->nblocks);
  if (!act)
    return ir_error(d, (IrLoc){0}, "out of memory");
  a->micro = pl->micro_batch;
  a->seq = pl->seq;
  int sub = 1;   // the tp of blocks below the mesh's (SvConfig.mesh_sub)
  int tp = 1, q = 1;   // the largest tp and grid the blocks take (a grid inside tp: both)
  for (int u = 0; u < p->nunits; u++) {
    SvLayout l = p->layout[p->unit[u].choice[pl->sol.pick[u]].layout];
    tp = l.tp > tp ? l.tp : tp;
    q = l.q > q ? l.q : q;
  }
  bool grid_in_tp = tp > 1 && q > 1;   // (SvConfig.mesh_grid)
  solution_acts(pl, act);
  for (int b = 0; b < m->nblocks; b++) {
    int u = m->block[b].unit;
    const SvChoice *c = &p->unit[u].choice[pl->sol.pick[u]];
    SvLayout l = p->layout[c->layout];
    Mesh mesh = l.q > 1 && !grid_in_tp ? mesh_grid(l.dp, l.q)
                                       : mesh_make(l.dp, grid_in_tp ? tp : l.tp);
    if (b == 0)
      a->mesh = mesh;
    IR_ASSERT(!memcmp(&mesh, &a->mesh, sizeof mesh));   // mesh_tp asked for one mesh
    a->block[b].grid = grid_in_tp && l.q > 1;
    a->block[b].batch_tp = l.batch;
    a->block[b].sub = l.sub > 1 && l.q == 1;
    sub = l.sub > 1 ? l.sub : sub;   // (a grid's on part of tp: q x q)
    a->block[b].zero = c->zero;
    a->block[b].offload = c->offload / 100.0;
    a->block[b].offload_grads = c->grads;
    a->block[b].offload_params = c->params;
  }
  a->seq_parallel = pl->cfg.seq_parallel;
  if (sub > 1)
    a->mesh = mesh_with_sub(a->mesh, sub);
  if (grid_in_tp)
    a->mesh = mesh_with_grid(a->mesh, q);
  int rc = checkpoint_of(act, m->nblocks, a, d);
  free(act);
  if (rc)
    return rc;
  // each group's micro-batches over its replicas (ranks numbered group by group); the
  // solver's for mtc compile are whole per replica (SvConfig.mesh_tp)
  int per = mesh_ranks(&a->mesh) / a->mesh.size[IR_MESH_DP];
  int64_t gpus[SV_MAXGROUPS], runs[SV_MAXGROUPS];
  for (int g = 0; g < p->ngroups && !rc; g++) {
    int replicas = p->gpus[g] / per;
    gpus[g] = p->gpus[g];
    runs[g] = p->ngroups > 1 ? pl->sol.batch[g] : p->micro_total;
    if (runs[g] % replicas || runs[g] < replicas)
      rc = ir_error(d, (IrLoc){0}, "the plan runs %lld micro-batches on %d replicas%s; the "
                    "program needs a multiple of %d, at least 1 each (choose --batch)",
                    (long long)runs[g], replicas, p->ngroups > 1 ? " of a group" : "", replicas);
  }
  if (!rc && (plan_set_group_micro(a, p->ngroups, gpus, runs) ||
              (pl->cfg.group_rows[0] && plan_set_group_rows(a, p->ngroups, gpus, p->rows))))
    rc = ir_error(d, (IrLoc){0}, "out of memory");
  // each replica's part of the sharded state: even, or (where even parts did not fit) the
  // whole parts the solver chose (sv_share_units)
  if (!rc && p->ngroups > 1 && plan_shards_state(a))
    rc = group_parts(a, p->ngroups, gpus, pl->sol.share, per, "the solver's plan", d);
  return rc;
}

// A mesh compile lowers, and (ordering them) the step of its plan with shared variables.
typedef struct MeshOrder {
  int tp, q, sub, grid, order;
  double quick;
} MeshOrder;

static int by_quick(const void *a, const void *b) {
  const MeshOrder *x = a, *y = b;
  if (x->quick != y->quick)
    return x->quick < y->quick ? -1 : 1;
  return x->order - y->order;
}

// Cephalo's batch shares on several groups of GPUs: besides micro-batches of one size (their
// numbers per group the solver's), each replica may run as many micro-batches, k, each group's
// its own size, a faster group's larger. For each of (at most) the three k nearest the one size's
// whose step's sequences split into whole micro-batches, the sizes in proportion to the groups'
// speeds on the model (its blocks' roofline time per micro-batch in pl, the plan of one size),
// rounded to whole sequences that add up to the step. Returns how many vectors of sizes are in
// rows (and their micro-batches per group in batch).
static int size_splits(const SvPlan *pl, int rr, int64_t (*rows)[SV_MAXGROUPS],
                       int64_t (*batch)[SV_MAXGROUPS]) {
  const SvProblem *p = pl->prob;
  int G = p->ngroups, n = 0;
  double w[SV_MAXGROUPS], R[SV_MAXGROUPS], sum = 0;
  int64_t replicas = 0, global = pl->global_batch;
  for (int g = 0; g < G; g++) {
    double t = 0;
    for (int u = 0; u < p->nunits; u++)
      t += p->unit[u].count * (pl->nums[u].roof_fwd[g] + pl->nums[u].roof_bwd[g]);
    w[g] = t > 0 ? 1 / t : 1;
    R[g] = (double)(p->gpus[g] / rr);
    replicas += p->gpus[g] / rr;
    sum += R[g] * w[g];
  }
  double k0 = (double)global / ((double)pl->micro_batch * (double)replicas);
  int64_t ks[3] = {0, 0, 0};   // the divisors of the step nearest k0 (log scale)
  double dist[3] = {INFINITY, INFINITY, INFINITY};
  for (int64_t k = 1; k <= global / replicas; k++) {
    if (global % k)
      continue;
    double x = fabs(log((double)k / k0));
    for (int i = 0; i < 3; i++)
      if (x < dist[i]) {
        memmove(ks + i + 1, ks + i, (size_t)(2 - i) * sizeof *ks);
        memmove(dist + i + 1, dist + i, (size_t)(2 - i) * sizeof *dist);
        ks[i] = k, dist[i] = x;
        break;
      }
  }
  for (int i = 0; i < 3 && ks[i]; i++) {
    int64_t S = global / ks[i], left = S;   // sequences per micro-step of every replica
    double want[SV_MAXGROUPS];
    bool alike = true;
    for (int g = 0; g < G; g++) {
      want[g] = (double)S * w[g] / sum;
      rows[n][g] = (int64_t)fmax(1, floor(want[g]));
      left -= (int64_t)R[g] * rows[n][g];
    }
    while (left > 0) {   // a sequence more where the rounding took the most, as R allows
      int best = -1;
      for (int g = 0; g < G; g++)
        if ((int64_t)R[g] <= left &&
            (best < 0 || want[g] - (double)rows[n][g] > want[best] - (double)rows[n][best]))
          best = g;
      if (best < 0)
        break;
      rows[n][best]++;
      left -= (int64_t)R[best];
    }
    for (int g = 1; g < G; g++)
      alike &= rows[n][g] == rows[n][0];
    if (left || alike)
      continue;
    for (int g = 0; g < G; g++)
      batch[n][g] = ks[i] * (int64_t)R[g];
    n++;
  }
  return n;
}

int sv_plan_compiled(IrGraph *g, const SvConfig *cfg, SvPlan **kept, IrDiag *d) {
  *kept = NULL;
  SvPlan *plans[4 * 64 * 4];  // the meshes' plans, solved in order (each with its sizes)
  MeshOrder mesh[4 * 64];
  int n = 0, nmesh = 0, gpus = sv_cluster_gpus(&cfg->cluster);
  double seconds = 0;   // the time all of the solves took
  double one_size = INFINITY;   // the fastest plan with one micro-batch size for every group
  char why[1024] = "";
  // the meshes mtc compile lowers: dp x tp for each tp that divides the GPUs, then dp x a
  // q x q grid for each q * q that does
  for (int k = 0; k < 2 * 64; k++) {
    int tp = k < 64 ? k + 1 : 1, q = k < 64 ? 1 : k - 64 + 2;
    bool fits = tp * q * q <= gpus;   // each replica's ranks in one group
    for (int j = 0; j < cfg->cluster.ngroups; j++)
      fits &= cfg->cluster.group[j].count % (tp * q * q) == 0;
    // ... and on one group, for each sub that divides tp, with blocks tensor parallel over sub
    // of the tp ranks too (PlanBlock.sub), and where tp is a square, with blocks on a grid of
    // them too (PlanBlock.grid; sequence parallelism splits only the 1D blocks' sequence).
    // Where a square below tp divides it, blocks may also be on the grids of groups of q x q
    // of the tp ranks, each on its part of every micro-batch, or tensor parallel over such a
    // group (the mesh's sub is q x q).
    // Each of those meshes offers the plain one's layouts, which then needs no solve of its own.
    bool sub = fits && q == 1 && cfg->cluster.ngroups == 1;
    int before = nmesh;
    for (int s = 2; sub && s < tp; s++)
      if (tp % s == 0 && nmesh < 4 * 64)
        mesh[nmesh] = (MeshOrder){tp, 1, s, 1, nmesh, 0}, nmesh++;
    for (int side = 2; sub && side * side <= tp; side++)
      if (tp % (side * side) == 0 && nmesh < 4 * 64)
        mesh[nmesh] = (MeshOrder){tp, 1, side * side < tp ? side * side : 1, side, nmesh, 0},
        nmesh++;
    if (fits && nmesh == before)
      mesh[nmesh] = (MeshOrder){tp, q, 1, 1, nmesh, 0}, nmesh++;
  }
  // With --no-share each mesh's program is large and most of its time goes to proving that a
  // mesh cannot win. The plans with shared variables are quick and bound those without from
  // above, so the meshes are solved fastest-first by them: the first gives the cutoff that
  // stops the others' solves as soon as their bounds pass it (ties keep the meshes' order).
  for (int i = 0; i < nmesh && !cfg->share_blocks && nmesh > 1; i++) {
    SvConfig c = *cfg;
    c.mesh_tp = mesh[i].tp, c.mesh_q = mesh[i].q, c.mesh_sub = mesh[i].sub;
    c.mesh_grid = mesh[i].grid;
    c.share_blocks = true;
    SvPlan *p = NULL;
    IrDiag quiet = {0};
    mesh[i].quick = sv_plan(g, &c, &p, &quiet) || !p->sol.feasible ? INFINITY : p->sol.time;
    seconds += p ? p->seconds : 0;
    sv_plan_free(p);
  }
  qsort(mesh, (size_t)nmesh, sizeof *mesh, by_quick);
  for (int i = 0; i < nmesh; i++) {
    int tp = mesh[i].tp, q = mesh[i].q;
    SvConfig c = *cfg;
    c.mesh_tp = tp;
    c.mesh_q = q;
    c.mesh_sub = mesh[i].sub;
    c.mesh_grid = mesh[i].grid;
    c.cutoff = *kept && (*kept)->sol.feasible ? (*kept)->sol.time : 0;  // the one to beat
    IrDiag quiet = {0};
    if (sv_plan(g, &c, &plans[n], &quiet)) {
      if (!why[0])
        snprintf(why, sizeof why, "%.900s", quiet.msg);
      continue;
    }
    // ... and that mesh with each group's micro-batches its own size
    if (plans[n]->sol.feasible)
      one_size = fmin(one_size, plans[n]->sol.time);
    int64_t rows[3][SV_MAXGROUPS], batch[3][SV_MAXGROUPS];
    int nsizes = cfg->cluster.ngroups > 1 && plans[n]->model->batch_sym >= 0 &&
                         !cfg->group_rows[0] && !cfg->micro_batch   // (--micro-batch: that one)
                     ? size_splits(plans[n], tp * q * q, rows, batch) : 0;
    n++;
    for (int j = 0; j <= nsizes; j++) {
      if (j) {
        memcpy(c.group_rows, rows[j - 1], sizeof c.group_rows);
        memcpy(c.group_batch, batch[j - 1], sizeof c.group_batch);
        c.cutoff = *kept && (*kept)->sol.feasible ? (*kept)->sol.time : 0;
        // (with --no-share, the sizes' program with shared variables: each unit's blocks
        // alike; whole, it took seconds more for a plan 0.5% faster on tests/solver/mixed_8g)
        c.share_blocks = true;
        if (sv_plan(g, &c, &plans[n], &quiet))
          continue;
        n++;
      }
      SvPlan *p = plans[n - 1];
      SvPlan *k = *kept;
      if (!k || (p->sol.feasible && (!k->sol.feasible || p->sol.time < k->sol.time)) ||
          (!p->sol.feasible && !k->sol.feasible && p->need < k->need))
        *kept = p;   // the fastest that fits; until one does, the leanest (its why says what
                     // binds)
    }
  }
  if (!*kept)
    return ir_error(d, (IrLoc){0}, "no plan with one mesh for every block: %s", why);
  if ((*kept)->cfg.group_rows[0])
    (*kept)->one_size = one_size;
  // the report's baselines from every mesh (each plan has those of its own layouts)
  for (int i = 0; i < n; i++) {
    seconds += plans[i]->seconds;
    if (plans[i] != *kept) {
      sv_plan_merge_baselines(*kept, plans[i]);
      sv_plan_free(plans[i]);
    }
  }
  (*kept)->seconds = seconds;
  return 0;
}

int sv_apply_best(IrGraph *g, const SvConfig *cfg, Plan *out, SvPlan **kept, IrDiag *d) {
  *out = plan_single();
  if (sv_plan_compiled(g, cfg, kept, d))
    return -1;
  if (!(*kept)->sol.feasible)
    return ir_error(d, (IrLoc){0}, "no plan with one mesh for every block fits: %s",
                    (*kept)->why);
  return from_plan(*kept, out, d);
}

// ---- plan.json ------------------------------------------------------------------------------

static int number(const cJSON *o, const char *key, double lo, double hi, double *out,
                  const char *where, const char *path, IrDiag *d) {
  char at[4400];
  snprintf(at, sizeof at, "%.4096s: %.200s", path, where);
  return sv_json_number(o, key, lo, hi, false, true, out, at, d);
}

static int whole(const cJSON *o, const char *key, double lo, double hi, int64_t *out,
                 const char *where, const char *path, IrDiag *d) {
  char at[4400];
  snprintf(at, sizeof at, "%.4096s: %.200s", path, where);
  double x;
  if (sv_json_number(o, key, lo, hi, true, true, &x, at, d))
    return -1;
  *out = (int64_t)x;
  return 0;
}

// The program's mesh from each block's (mesh[b]): one for every block, except
// that in a tensor-parallel mesh a block may be data parallel over all its
// ranks (dp x tp replicas of its own, tp 1), which the program runs with its
// batch split over tp too (PlanBlock.batch_tp), and blocks may be tensor
// parallel over s of its tp ranks (dp x tp / s replicas of tp s, one s for
// the program), which it runs over the mesh's sub ranks with their batch
// split over tp / s (PlanBlock.sub), and blocks may be Optimus 2D on a q x q
// grid of its tp ranks (q x q = tp, the same dp), which it runs on the grid
// inside the mesh, or on each group of q x q of them (q x q dividing tp, dp x
// tp / (q x q) replicas; blocks over part of tp then over q x q ranks), which
// it runs on the grids of the mesh's sub ranks, their batch split over the
// grids too (PlanBlock.grid). The mesh is that of the block of the
// largest tp (or a grid's). in[b]: block b's mesh is that of a block data
// parallel over its tp ranks ("batch_tp": the mesh's tp, which says it where
// no block is tensor parallel).
static int one_mesh(const Mesh *mesh, const bool *in, const SvModel *m, Plan *a,
                    const char *path, IrDiag *d) {
  a->mesh = mesh[0];
  for (int b = 0; b < m->nblocks; b++)
    if ((mesh[b].size[IR_MESH_ROW] > 1 && a->mesh.size[IR_MESH_TP] == 1) ||
        mesh[b].size[IR_MESH_TP] > a->mesh.size[IR_MESH_TP])
      a->mesh = mesh[b];
  int ranks = mesh_ranks(&a->mesh), tp = a->mesh.size[IR_MESH_TP], sub = 1, q = 1;
  for (int b = 0; b < m->nblocks; b++) {
    int s = mesh[b].size[IR_MESH_TP];
    if (!memcmp(&mesh[b], &a->mesh, sizeof *mesh)) {
      a->block[b].batch_tp = in[b];
      continue;
    }
    if (tp > 1 && mesh[b].size[IR_MESH_DP] == ranks) {   // dp x tp replicas of tp 1
      a->block[b].batch_tp = true;
      continue;
    }
    if (s > 1 && s < tp && tp % s == 0 && mesh[b].size[IR_MESH_DP] * s == ranks &&
        mesh[b].size[IR_MESH_ROW] == 1 && (sub == 1 || sub == s) && (q == 1 || q * q == s)) {
      a->block[b].sub = true;   // over s of the tp ranks, its batch over tp / s
      sub = s;
      continue;
    }
    int side = mesh[b].size[IR_MESH_ROW];
    if (side > 1 && tp % (side * side) == 0 && mesh[b].size[IR_MESH_DP] * side * side == ranks &&
        (sub == 1 || sub == side * side) && (q == 1 || q == side)) {
      a->block[b].grid = true;   // on the grid of the tp ranks, or of each group of q x q
      q = side;
      continue;
    }
    char have[64], want[64];
    mesh_str(have, sizeof have, &mesh[b]);
    mesh_str(want, sizeof want, &a->mesh);
    return ir_error(d, (IrLoc){0}, "%s: block %d (%s) is %s, another block %s: a program has "
                    "one mesh for every block, where a block may also be data parallel over "
                    "all %d ranks of a tensor-parallel mesh (dp %d, tp 1), tensor parallel "
                    "over a part of its tp (one tp for those blocks, dividing %d, dp x tp = %d), "
                    "or on 2D grids of its tp ranks (q x q dividing %d, dp x tp / (q x q) "
                    "replicas of them; one q for those blocks, and q x q the tp of blocks over a "
                    "part of tp)", path, b, m->block[b].name, have, want, ranks, ranks, tp, ranks,
                    tp);
  }
  if (sub > 1)
    a->mesh = mesh_with_sub(a->mesh, sub);
  if (q > 1)
    a->mesh = mesh_with_grid(a->mesh, q);
  return 0;
}

static int read_blocks(const cJSON *blocks, const SvModel *m, Plan *a, const char *path,
                       IrDiag *d) {
  if (!cJSON_IsArray(blocks))
    return ir_error(d, (IrLoc){0}, "%s: \"blocks\" must be an array (the plan's choice per "
                    "block, as mtc plan --json writes it)", path);
  char *act = begin_plan(a, m->nblocks);
  if (!act)
    return ir_error(d, (IrLoc){0}, "out of memory");
  bool *seen = calloc((size_t)m->nblocks + 1, 1), *in = calloc((size_t)m->nblocks + 1, 1);
  Mesh *mesh = calloc((size_t)m->nblocks + 1, sizeof *mesh);
  IR_ASSERT(seen && in && mesh);
  int rc = 0, i = 0;
  const cJSON *b;
  cJSON_ArrayForEach(b, blocks) {
    char where[64];
    snprintf(where, sizeof where, "blocks[%d]", i++);
    int64_t id, dp, tp, q, zero;
    double off;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(b, "name");
    const cJSON *ck = cJSON_GetObjectItemCaseSensitive(b, "checkpoint");
    const cJSON *og = cJSON_GetObjectItemCaseSensitive(b, "offload_grads");  // optional
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(b, "offload_params"); // optional
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(b, "swap");           // optional
    const cJSON *bt = cJSON_GetObjectItemCaseSensitive(b, "batch_tp");       // optional
    if ((rc = whole(b, "id", 0, 1e9, &id, where, path, d)))
      break;
    if (id >= m->nblocks) {
      rc = ir_error(d, (IrLoc){0}, "%s: %s: block %lld does not exist: the model has blocks 0 "
                    "to %d", path, where, (long long)id, m->nblocks - 1);
      break;
    }
    if (!cJSON_IsString(name) || strcmp(name->valuestring, m->block[id].name)) {
      rc = ir_error(d, (IrLoc){0}, "%s: %s: block %lld of this model is \"%s\", not \"%s\": the "
                    "plan is for another model", path, where, (long long)id, m->block[id].name,
                    cJSON_IsString(name) ? name->valuestring : "(no name)");
      break;
    }
    if (seen[id]) {
      rc = ir_error(d, (IrLoc){0}, "%s: %s: block %lld (%s) is listed twice", path, where,
                    (long long)id, m->block[id].name);
      break;
    }
    seen[id] = true;
    if ((rc = whole(b, "dp", 1, SV_MAX_GPUS, &dp, where, path, d)) ||
        (rc = whole(b, "tp", 1, SV_MAX_GPUS, &tp, where, path, d)) ||
        (rc = whole(b, "q", 1, 256, &q, where, path, d)) ||
        (rc = whole(b, "zero", 0, 3, &zero, where, path, d)) ||
        (rc = number(b, "offload", 0, 1, &off, where, path, d)))
      break;
    if (!cJSON_IsBool(ck)) {
      rc = ir_error(d, (IrLoc){0}, "%s: %s: \"checkpoint\" must be true or false", path, where);
      break;
    }
    if (sw && !cJSON_IsBool(sw)) {
      rc = ir_error(d, (IrLoc){0}, "%s: %s: \"swap\" must be true or false", path, where);
      break;
    }
    if (cJSON_IsTrue(sw) && cJSON_IsTrue(ck)) {
      rc = ir_error(d, (IrLoc){0}, "%s: %s (%s): \"swap\" and \"checkpoint\": a block's "
                    "activations are swapped to host memory or recomputed, not both", path, where,
                    m->block[id].name);
      break;
    }
    if (og && !cJSON_IsBool(og)) {
      rc = ir_error(d, (IrLoc){0}, "%s: %s: \"offload_grads\" must be true or false", path,
                    where);
      break;
    }
    if (cJSON_IsTrue(og) && off != 1) {
      rc = ir_error(d, (IrLoc){0}, "%s: %s (%s): \"offload_grads\" with \"offload\" %g: the "
                    "gradients leave the device only with all of the optimizer state (offload "
                    "1)", path, where, m->block[id].name, off);
      break;
    }
    if (op && !cJSON_IsBool(op)) {
      rc = ir_error(d, (IrLoc){0}, "%s: %s: \"offload_params\" must be true or false", path,
                    where);
      break;
    }
    if (cJSON_IsTrue(op) && (zero != 3 || !(off > 0))) {
      rc = ir_error(d, (IrLoc){0}, "%s: %s (%s): \"offload_params\" with \"zero\" %lld and "
                    "\"offload\" %g: the offloaded share of the parameters lives in host memory "
                    "as part of ZeRO-3's shards, updated there (\"zero\" 3, \"offload\" above 0)",
                    path, where, m->block[id].name, (long long)zero, off);
      break;
    }
    if (q > 1 && tp > 1) {
      rc = ir_error(d, (IrLoc){0}, "%s: %s (%s): tp %lld and q %lld: a block is split over tp "
                    "ranks or over a q x q grid, not both", path, where, m->block[id].name,
                    (long long)tp, (long long)q);
      break;
    }
    int64_t of = 1;   // data parallel over the tp ranks of a mesh of tp `of`
    if (bt && (rc = whole(b, "batch_tp", 2, SV_MAX_GPUS, &of, where, path, d)))
      break;
    if (of > 1 && (tp > 1 || q > 1 || dp % of)) {
      rc = ir_error(d, (IrLoc){0}, "%s: %s (%s): \"batch_tp\" %lld: a block data parallel over "
                    "the tp ranks of its mesh has tp 1, q 1 and dp all of the ranks (dp x tp)",
                    path, where, m->block[id].name, (long long)of);
      break;
    }
    in[id] = of > 1;
    mesh[id] = q > 1 ? mesh_grid((int)dp, (int)q) : mesh_make((int)(dp / of), (int)(of * tp));
    a->block[id].zero = (int)zero;
    act[id] = cJSON_IsTrue(sw) ? SWAP : cJSON_IsTrue(ck) ? CKPT : KEEP;
    a->block[id].offload = off;
    a->block[id].offload_grads = cJSON_IsTrue(og);
    a->block[id].offload_params = cJSON_IsTrue(op);
  }
  for (int k = 0; k < m->nblocks && !rc; k++)
    if (!seen[k])
      rc = ir_error(d, (IrLoc){0}, "%s: block %d (%s) has no entry in \"blocks\"", path, k,
                    m->block[k].name);
  if (!rc)
    rc = one_mesh(mesh, in, m, a, path, d);
  if (!rc)
    rc = checkpoint_of(act, m->nblocks, a, d);
  free(seen), free(in);
  free(mesh);
  free(act);
  return rc;
}

// The plan names the model it was made for, at which dims: this one, at these.
static int check_model(const cJSON *root, const IrGraph *g, int64_t seq, const char *path,
                       IrDiag *d) {
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const char *name = g->name ? g->name : "model";
  if (!cJSON_IsString(model))
    return ir_error(d, (IrLoc){0}, "%s: \"model\" must name the model the plan is for", path);
  if (strcmp(model->valuestring, name))
    return ir_error(d, (IrLoc){0}, "%s is a plan for the model \"%s\", not \"%s\": plan this "
                    "model (mtc plan MODEL --json FILE)", path, model->valuestring, name);
  const cJSON *dims = cJSON_GetObjectItemCaseSensitive(root, "dims");
  if (!cJSON_IsObject(dims))
    return ir_error(d, (IrLoc){0}, "%s: \"dims\" must be an object of the model's dims as "
                    "planned (plans from before it: plan again with mtc plan --json)", path);
  for (int i = 0; i < g->syms.n; i++) {
    if (!g->syms.bound[i])
      continue;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(dims, g->syms.name[i]);
    if (!cJSON_IsNumber(v))
      return ir_error(d, (IrLoc){0}, "%s: \"dims\" has no %s: the plan is for another model",
                      path, g->syms.name[i]);
    if (v->valuedouble != (double)g->syms.value[i])
      return ir_error(d, (IrLoc){0}, "%s: the plan is for %s = %.0f, the model has %s = %lld: "
                      "compile with -D %s=%.0f, or plan again", path, g->syms.name[i],
                      v->valuedouble, g->syms.name[i], (long long)g->syms.value[i],
                      g->syms.name[i], v->valuedouble);
  }
  const cJSON *v;
  cJSON_ArrayForEach(v, dims) {
    // the lowering's names of its degrees (mtc compile writes plan.json after lowering)
    bool degree = !strcmp(v->string, IR_TP_DIM) || !strcmp(v->string, IR_Q_DIM);
    if (symtab_find(&g->syms, v->string) < 0 && !degree)
      return ir_error(d, (IrLoc){0}, "%s: \"dims\" has %s, which the model does not have: the "
                      "plan is for another model", path, v->string);
  }
  int64_t want = 0;
  if (g->seq_sym >= 0 && g->syms.bound[g->seq_sym])
    want = g->syms.value[g->seq_sym];
  if (seq != want)
    return ir_error(d, (IrLoc){0}, "%s: \"batch\": \"seq\" is %lld, the model's sequence "
                    "length is %lld", path, (long long)seq, (long long)want);
  return 0;
}

// The cluster's groups of GPUs, as many in all as the mesh has ranks, ranks
// numbered group by group, each replica's ranks in one group; each group's
// "micro_batches" spread evenly over its replicas (the replicas of different
// groups may run different numbers: Cephalo's uneven batch shares). A group's
// "state_share" (where a block shards state; its share of the ranks when not
// given) is spread evenly over its replicas: each replica's part of every sharded
// bucket is a whole number of units of at most 1/64 of the bucket
// (Plan.replica_parts), or the plan is refused, since the program would not run
// it as written.
// The replicas' parts of the sharded state (Plan.replica_parts) from the groups' state shares:
// the least whole numbers (of at most 64 units for the replicas together) that give each group
// its share, spread evenly over its replicas; -1 with d when there are none.
static int group_parts(Plan *a, int n, const int64_t *count, const double *shares, int per,
                       const char *path, IrDiag *d) {
  double sum = 0;
  for (int i = 0; i < n; i++)
    sum += shares[i];
  if (fabs(sum - 1) > 1e-6)
    return ir_error(d, (IrLoc){0}, "%s: the groups' state shares add up to %g: make them add "
                    "up to 1", path, sum);
  int *parts = malloc(((size_t)a->mesh.size[IR_MESH_DP] + 1) * sizeof *parts);
  if (!parts)
    return ir_error(d, (IrLoc){0}, "out of memory");
  for (int units = 1; units <= 64; units++) {
    bool whole = true;
    for (int i = 0, r = 0; i < n && whole; i++) {
      double each = shares[i] * units / (double)(count[i] / per);   // units per replica
      whole = each >= 1 - 1e-6 && fabs(each - round(each)) < 1e-6;
      for (int64_t k = 0; whole && k < count[i] / per; k++)
        parts[r++] = (int)round(each);
    }
    int rc = whole && plan_set_replica_parts(a, parts);
    if (whole || rc) {
      free(parts);
      return rc ? ir_error(d, (IrLoc){0}, "out of memory") : 0;
    }
  }
  free(parts);
  char list[256] = "";
  for (int i = 0, len = 0; i < n && len < (int)sizeof list; i++)
    len += snprintf(list + len, sizeof list - (size_t)len, "%s%g", i ? ", " : "", shares[i]);
  return ir_error(d, (IrLoc){0}, "%s: the groups' state shares (%s) do not split into whole "
                  "parts of at most 64 units for their replicas: give each replica a fraction "
                  "with a denominator of 64 or less (for two replicas 0.75 and 0.25, or 0.3 and "
                  "0.7)", path, list);
}

static int read_groups(const cJSON *groups, Plan *a, int64_t total, int64_t micro,
                       const char *path, IrDiag *d) {
  int n = cJSON_GetArraySize(groups);
  if (!cJSON_IsArray(groups) || n < 1)
    return ir_error(d, (IrLoc){0}, "%s: \"groups\" must be an array of the cluster's groups "
                    "of GPUs", path);
  if (n > SV_MAXGROUPS)
    return ir_error(d, (IrLoc){0}, "%s: \"groups\" has %d groups; mtc plans at most %d", path,
                    n, SV_MAXGROUPS);
  int ranks = mesh_ranks(&a->mesh), dp = a->mesh.size[IR_MESH_DP], per = ranks / dp;
  int64_t count[SV_MAXGROUPS], group_runs[SV_MAXGROUPS], rows[SV_MAXGROUPS], all = 0, runs = 0;
  double mb[SV_MAXGROUPS], shares[SV_MAXGROUPS];
  char mesh[64], where[64], at[4400];
  mesh_str(mesh, sizeof mesh, &a->mesh);
  for (int i = 0; i < n; i++) {
    const cJSON *gr = cJSON_GetArrayItem(groups, i);
    snprintf(where, sizeof where, "groups[%d]", i);
    if (whole(gr, "count", 1, SV_MAX_GPUS, &count[i], where, path, d))
      return -1;
    if (count[i] % per)
      return ir_error(d, (IrLoc){0}, "%s: %s has %lld GPUs; a replica of the mesh %s takes %d, "
                      "all in one group", path, where, (long long)count[i], mesh, per);
    all += count[i];
  }
  if (all != ranks)
    return ir_error(d, (IrLoc){0}, "%s: the groups have %lld GPUs, the blocks' mesh %s runs on %d",
                    path, (long long)all, mesh, ranks);
  for (int i = 0; i < n; i++) {
    const cJSON *gr = cJSON_GetArrayItem(groups, i);
    snprintf(where, sizeof where, "groups[%d]", i);
    snprintf(at, sizeof at, "%.4096s: %s", path, where);
    double share = -1, size = (double)micro;
    mb[i] = n == 1 ? (double)total : 0;
    if (sv_json_number(gr, "micro_batches", 0, 1e9, true, n > 1, &mb[i], at, d) ||
        sv_json_number(gr, "state_share", 0, 1, false, false, &share, at, d) ||
        sv_json_number(gr, "micro", 1, 1e9, true, false, &size, at, d))
      return -1;
    rows[i] = (int64_t)size;
    if (i == 0 && rows[0] != micro)
      return ir_error(d, (IrLoc){0}, "%s runs micro-batches of %lld sequences and \"batch\" says "
                      "%lld: \"batch\"'s \"micro\" is the first group's (the model's batch dim)",
                      at, (long long)rows[0], (long long)micro);
    int64_t replicas = count[i] / per;
    if ((int64_t)mb[i] % replicas || mb[i] < (double)replicas)
      return ir_error(d, (IrLoc){0}, "%s runs %g micro-batches on %lld replicas: each replica "
                      "of a group runs the same number, at least 1", at, mb[i],
                      (long long)replicas);
    shares[i] = share >= 0 ? share : (double)count[i] / (double)all;
    group_runs[i] = (int64_t)mb[i];
    runs += group_runs[i];
  }
  if (runs != total)
    return ir_error(d, (IrLoc){0}, "%s: the groups run %lld micro-batches and \"batch\" says "
                    "%lld: make them equal", path, (long long)runs, (long long)total);
  if (plan_set_group_micro(a, n, count, group_runs) || plan_set_group_rows(a, n, count, rows))
    return ir_error(d, (IrLoc){0}, "out of memory");
  if (plan_shards_state(a) && group_parts(a, n, count, shares, per, path, d))
    return -1;
  return 0;
}

int sv_apply_read(IrGraph *g, const char *path, const char *text, Plan *out, IrDiag *d) {
  *out = plan_single();
  cJSON *root = cJSON_Parse(text);
  if (!root)
    return ir_error(d, (IrLoc){0}, "%s is not JSON (near \"%.20s\")", path,
                    cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "");
  SvModel *m = sv_model_build(g, true, false, d);
  int rc = m ? 0 : -1;
  const cJSON *feasible = cJSON_GetObjectItemCaseSensitive(root, "feasible");
  const cJSON *batch = cJSON_GetObjectItemCaseSensitive(root, "batch");
  int64_t version = 0, micro = 0, total = 0, seq = 0;
  if (!rc)
    rc = whole(root, "version", 1, 1, &version, "the plan", path, d);
  if (!rc && !cJSON_IsTrue(feasible))
    rc = ir_error(d, (IrLoc){0}, "%s: the plan does not fit its cluster (\"feasible\": false); "
                  "there is nothing to apply", path);
  // Megatron sequence parallelism under tp. Files from before the field lack it: read as
  // false.
  const cJSON *sp = cJSON_GetObjectItemCaseSensitive(root, "seq_parallel");
  if (!rc && sp && !cJSON_IsBool(sp))
    rc = ir_error(d, (IrLoc){0}, "%s: \"seq_parallel\" must be true or false", path);
  // The plan priced the model in one precision; the program must be that one.
  const cJSON *prec = cJSON_GetObjectItemCaseSensitive(root, "precision");
  const char *want = m && m->bf16 ? "bf16" : "fp32";
  if (!rc && prec && !(cJSON_IsString(prec) && (!strcmp(prec->valuestring, "bf16") ||
                                                 !strcmp(prec->valuestring, "fp32"))))
    rc = ir_error(d, (IrLoc){0}, "%s: \"precision\" must be \"bf16\" or \"fp32\"", path);
  if (!rc && prec && strcmp(prec->valuestring, want))
    rc = ir_error(d, (IrLoc){0}, "%s: the plan is for %s and this program would be %s: compile "
                  "with --precision %s, or plan again with --precision %s", path,
                  prec->valuestring, want, prec->valuestring, want);
  // ... and its gradients in one (files from before the field: float32)
  const cJSON *gprec = cJSON_GetObjectItemCaseSensitive(root, "grad_precision");
  const char *gwant = m && m->grads_bf16 ? "bf16" : "fp32";
  if (!rc && gprec && !(cJSON_IsString(gprec) && (!strcmp(gprec->valuestring, "bf16") ||
                                                   !strcmp(gprec->valuestring, "fp32"))))
    rc = ir_error(d, (IrLoc){0}, "%s: \"grad_precision\" must be \"bf16\" or \"fp32\"", path);
  const char *ghave = gprec ? gprec->valuestring : "fp32";
  if (!rc && strcmp(ghave, gwant))
    rc = ir_error(d, (IrLoc){0}, "%s: the plan's gradients are %s and this program's would be "
                  "%s: compile with --grad-precision %s, or plan again with --grad-precision %s",
                  path, ghave, gwant, ghave, gwant);
  if (!rc && !cJSON_IsObject(batch))
    rc = ir_error(d, (IrLoc){0}, "%s: \"batch\" must be an object {global, micro, "
                  "micro_batches, seq}", path);
  if (!rc && !(rc = whole(batch, "micro", 1, 1e9, &micro, "batch", path, d)) &&
      !(rc = whole(batch, "micro_batches", 1, 1e9, &total, "batch", path, d)))
    rc = whole(batch, "seq", 0, 1e9, &seq, "batch", path, d);
  if (!rc)
    rc = check_model(root, g, seq, path, d);
  if (!rc)
    rc = read_blocks(cJSON_GetObjectItemCaseSensitive(root, "blocks"), m, out, path, d);
  if (!rc)
    rc = read_groups(cJSON_GetObjectItemCaseSensitive(root, "groups"), out, total, micro, path,
                     d);
  if (!rc) {
    out->micro = micro;
    out->seq = seq;
    out->seq_parallel = cJSON_IsTrue(sp);
  }
  sv_model_free(m);
  cJSON_Delete(root);
  return rc;
}

// ---- what a lowered program should measure --------------------------------------------------

void sv_predict(const PassLowered *lw, int nswapped, int ncheckpointed, int nlayers,
                SvPredicted *out) {
  const Plan *P = &lw->plan;
  int tp = P->mesh.size[IR_MESH_TP], micro = P->micro_batches;
  int zmin = 3, zmax = 0;
  double state = 0, host = 0, comm = 0, comm_micro = 0, comm_ghost = 0, omin = 1, omax = 0;
  int ngrads = 0, nparams = 0;  // buckets whose gradients (parameters) are offloaded
  for (int b = 0; b < lw->nbuckets; b++) {
    const PassBucket *k = &lw->bucket[b];
    double share = k->nstate ? plan_block(P, k->block)->offload : 0;
    zmin = k->zero < zmin ? k->zero : zmin;
    zmax = k->zero > zmax ? k->zero : zmax;
    omin = share < omin ? share : omin;
    omax = share > omax ? share : omax;
    // bytes per parameter: the weights forward reads (bf16: the working copies),
    // the reduced gradients, the float32 masters apart from them, the moments
    const IrValue *p = k->pshard ? k->pshard : k->params;
    SvStateBytes per = {ir_dtype_size(k->copies ? k->copies->dtype : p->dtype),
                        ir_dtype_size(k->reduced->dtype),
                        k->copies ? ir_dtype_size(p->dtype) : 0,
                        (double)k->nstate * ir_dtype_size(DT_F32)};
    bool grads = k->reduced->host;  // gradient offload: none kept on the device
    SvStateBytes kept = per;
    kept.grad = grads ? 0 : per.grad;
    ngrads += grads;
    nparams += k->params_host;
    // sharded and reduced over dp, or (a block data parallel over tp) over every rank
    // (this rank's shard: 1/n of the bucket, or its part of uneven ones)
    int n = k->shards;
    double psi = (double)k->numel, own = k->shard * n == k->numel ? 1.0 / n : k->shard / psi;
    state += sv_zero_state_bytes(psi, own, k->zero, kept) -
             sv_offload_device_bytes((double)k->host_numel, per, k->params_host);
    host += sv_offload_host_bytes((double)k->host_numel, per, grads && micro > 1);
    comm += sv_dp_comm_bytes(psi, n, own, k->zero, micro, grads, per);
    if (k->zero == 3 && !k->bwd_gather) {   // gathered in forward only: one all-gather less
      double gather = (1 - own) * psi * per.param;
      comm -= micro * gather;
      comm_micro -= gather;
    }
    double bucket_micro = sv_dp_comm_bytes(psi, n, own, k->zero, 1, grads, per) -
                          sv_dp_comm_bytes(psi, n, own, k->zero, 0, grads, per);
    comm_micro += bucket_micro;
    comm_ghost += bucket_micro - (k->zero == 3 && !k->bwd_gather ? (1 - own) * psi * per.param : 0);
  }
  // tp's collectives, the 2D grid's (each over q ranks, along its rows or columns), those of
  // blocks below the mesh's tp (over sub ranks, and over subdp: their batch's parts)
  for (int a = IR_MESH_TP; a < IR_MESH_NAXES; a++) {
    comm += sv_allreduce_sent(lw->tp_comm_bytes[a], P->mesh.size[a], micro);
    comm_micro += sv_allreduce_sent(lw->tp_comm_bytes[a], P->mesh.size[a], 1);
  }
  // the batch's statistics (SyncBatchNorm), all-reduced over dp the same way
  comm += sv_allreduce_sent(lw->dp_sync_bytes, P->mesh.size[IR_MESH_DP], micro);
  comm_micro += sv_allreduce_sent(lw->dp_sync_bytes, P->mesh.size[IR_MESH_DP], 1);
  out->state_bytes = llround(state);   // whole bytes, whatever the shares' roundoff
  out->host_bytes = llround(host);
  // rounded down as the runtime's count is (runtime/comm.h); a whole sum may land just below
  out->comm_bytes = (int64_t)(comm + 1e-3);
  out->comm_micro_bytes = (int64_t)(comm_micro + 1e-3);
  out->comm_ghost_bytes = (int64_t)(comm_ghost + 1e-3);
  char *s = out->layout;
  size_t n = sizeof out->layout, len = (size_t)mesh_str(s, n, &P->mesh);
  if (P->seq_parallel && tp > 1 && len < n)
    len += (size_t)snprintf(s + len, n - len, " (sequence parallel)");
  if (lw->nbuckets && zmin == zmax && len < n)
    len += (size_t)snprintf(s + len, n - len, ", ZeRO-%d", zmin);
  else if (lw->nbuckets && len < n)
    len += (size_t)snprintf(s + len, n - len, ", ZeRO-%d to %d", zmin, zmax);
  if (omax > 0 && omin == omax && len < n)
    len += (size_t)snprintf(s + len, n - len, ", offload %g", omax);
  else if (omax > 0 && len < n)
    len += (size_t)snprintf(s + len, n - len, ", offload %g to %g", omin, omax);
  if (nparams && nparams == ngrads && len < n)
    len += (size_t)snprintf(s + len, n - len, nparams == lw->nbuckets ?
                            " with the gradients and parameters" :
                            " (%d bucket%s with the gradients and parameters)", nparams,
                            nparams > 1 ? "s" : "");
  else if ((ngrads || nparams) && len < n) {   // (a share's parameters without the gradients)
    const char *what = !nparams ? "gradients" : !ngrads ? "parameters" : NULL;
    int k = ngrads ? ngrads : nparams;
    if (what && k == lw->nbuckets)
      len += (size_t)snprintf(s + len, n - len, " with the %s", what);
    else if (what)
      len += (size_t)snprintf(s + len, n - len, " (%d bucket%s with the %s)", k, k > 1 ? "s" : "",
                              what);
    else
      len += (size_t)snprintf(s + len, n - len, " (%d bucket%s with the gradients, %d with the "
                              "parameters)", ngrads, ngrads > 1 ? "s" : "", nparams);
  }
  if (nswapped && len < n)
    len += (size_t)snprintf(s + len, n - len, ", swap %d of %d layers", nswapped, nlayers);
  if (ncheckpointed && len < n)
    len += (size_t)snprintf(s + len, n - len, ", recompute %d of %d layers", ncheckpointed,
                            nlayers);
  int batch = 0;   // blocks data parallel over the tp ranks too
  for (int b = 0; b < P->nblocks; b++)
    batch += P->block[b].batch_tp;
  if (batch && len < n)
    len += (size_t)snprintf(s + len, n - len, ", %d block%s data parallel over tp too", batch,
                            batch > 1 ? "s" : "");
  if (lw->nreplicated && len < n)
    snprintf(s + len, n - len, ", %d weight%s whole under tp", lw->nreplicated,
             lw->nreplicated > 1 ? "s" : "");
}

// ---- what a program's layout costs, as the planner prices it -----------------------------------

// Does the plan swap block b (the first S repeated layers, IR blocks 1..S)?
static bool plan_swap(const Plan *P, int b) {
  return b >= 1 && (P->swap == PLAN_CHECKPOINT_ALL || b <= P->swap);
}

// Does the plan checkpoint block b (the K repeated layers after the swapped ones)?
static bool plan_ckpt(const Plan *P, int b) {
  int s = P->swap == PLAN_CHECKPOINT_ALL ? INT32_MAX : P->swap;
  return b > s && (P->checkpoint == PLAN_CHECKPOINT_ALL || b - s <= P->checkpoint);
}

// The choice of unit u that is the plan's, with *nplain its blocks left without
// checkpointing; -1 when the problem has none.
static int choice_of(const SvPlan *pl, const Plan *P, int u, int layout, int *nplain) {
  const SvProblem *p = pl->prob;
  const SvModel *m = pl->model;
  const SvUnit *un = &p->unit[u];
  const PlanBlock *pb = plan_block(P, un->block);
  int ckpt = 0, swap = 0, seen = 0;
  for (int b = 0; b < m->nblocks; b++) {
    if (m->block[b].unit != u)
      continue;
    const PlanBlock *o = plan_block(P, b);
    if ((plan_ckpt(P, b) && ckpt++ != seen) || (plan_swap(P, b) && swap++ != seen) ||
        o->zero != pb->zero || o->offload != pb->offload ||
        o->offload_grads != pb->offload_grads || o->offload_params != pb->offload_params ||
        o->batch_tp != pb->batch_tp || o->sub != pb->sub || o->grid != pb->grid)
      return -1;   // not the unit's first blocks, or a block unlike the others
    seen++;
  }
  if (ckpt && swap)
    return -1;   // one choice per unit: its first blocks swap or checkpoint
  const SvNum *n = &pl->nums[u];
  int zero = n->params > 0 ? pb->zero : 0;
  int offload = n->params > 0 && n->per.state > 0 ? (int)lround(pb->offload * 100) : 0;
  bool grads = offload > 0 && pb->offload_grads, params = offload > 0 && pb->offload_params;
  for (int c = 0; c < un->nchoices; c++) {
    const SvChoice *ch = &un->choice[c];
    if (ch->layout == layout && ch->ckpt == (ckpt > 0) && ch->swap == (swap > 0) &&
        ch->zero == zero && ch->offload == offload && ch->grads == grads &&
        ch->params == params) {
      *nplain = ckpt + swap > 0 ? un->count - ckpt - swap : 0;
      return c;
    }
  }
  return -1;
}

// One group of GPUs (c) split into the runs of a plan's alike replicas (micro-batches and parts
// of the state), ranks numbered replica by replica.
static int split_group(const Plan *P, SvCluster *c, IrDiag *d) {
  int dp = P->mesh.size[IR_MESH_DP], per = mesh_ranks(&P->mesh) / dp;
  SvGroup one = c->group[0];
  bool one_node = one.count <= one.per_node;
  c->ngroups = 0;
  for (int r = 0; r < dp; r++) {
    bool alike = r > 0 && plan_replica_micro(P, r) == plan_replica_micro(P, r - 1) &&
                 plan_replica_rows(P, r) == plan_replica_rows(P, r - 1) &&
                 (!P->replica_parts || P->replica_parts[r] == P->replica_parts[r - 1]);
    if (alike) {
      c->group[c->ngroups - 1].count += per;
      continue;
    }
    if (c->ngroups == SV_MAXGROUPS)
      return ir_error(d, (IrLoc){0}, "its replicas differ in more than %d runs, which the "
                      "planner does not price (at most %d groups of GPUs)", SV_MAXGROUPS,
                      SV_MAXGROUPS);
    SvGroup *gr = &c->group[c->ngroups++];
    *gr = one;
    gr->count = per;
    snprintf(gr->name, sizeof gr->name, "replicas %d-", r);
  }
  c->one_node = one_node;
  return 0;
}

int sv_price(IrGraph *g, const SvConfig *base, const Plan *P, SvPriced *out, IrDiag *d) {
  memset(out, 0, sizeof *out);
  const Mesh *mesh = &P->mesh;
  int dp = mesh->size[IR_MESH_DP], tp = mesh->size[IR_MESH_TP];
  int q = mesh->size[IR_MESH_ROW] > 1 ? mesh->size[IR_MESH_ROW] : 1;
  int grid = tp > 1 && q > 1 ? q : 1;   // a grid inside tp: the mesh is dp x tp
  if (grid > 1)
    q = 1;
  int64_t batch;
  if (sv_cluster_gpus(&base->cluster) != mesh_ranks(mesh)) {
    ir_error(d, (IrLoc){0}, "the layout runs on %d GPUs; the cluster has %d", mesh_ranks(mesh),
             sv_cluster_gpus(&base->cluster));
    return 1;
  }
  SvConfig cfg = *base;
  if (base->cluster.ngroups == 1 && (P->replica_micro || P->replica_parts || P->replica_rows) &&
      split_group(P, &cfg.cluster, d))
    return 1;
  // each group's micro-batches, their size and its part of the sharded state: its replicas'
  // (ranks numbered group by group); micro-batches of one size in a group
  int64_t group_micro[SV_MAXGROUPS] = {0};
  double group_share[SV_MAXGROUPS] = {0};
  long parts_total = P->replica_parts ? rt_parts_total(P->replica_parts, dp) : 1;
  for (int k = 0, r = 0, per = mesh_ranks(mesh) / dp; k < cfg.cluster.ngroups; k++) {
    int64_t rows = plan_replica_rows(P, r);
    for (int i = 0; i < cfg.cluster.group[k].count / per; i++, r++) {
      if (plan_replica_rows(P, r) != rows) {
        ir_error(d, (IrLoc){0}, "its replicas %d and %d run micro-batches of %lld and %lld "
                 "sequences in one group of GPUs (%s), which the planner prices as one size",
                 r - i, r, (long long)rows, (long long)plan_replica_rows(P, r),
                 cfg.cluster.group[k].name);
        return 1;
      }
      group_micro[k] += plan_replica_micro(P, r);
      if (P->replica_parts)
        group_share[k] += (double)P->replica_parts[r] / (double)parts_total;
    }
    if (P->replica_rows) {   // micro-batches of unequal sizes: each group's
      cfg.group_rows[k] = rows;
      cfg.group_batch[k] = group_micro[k];
    }
  }
  if (g->batch_sym < 0)
    batch = 0;   // a fixed batch: each micro-batch one whole set of the inputs, a sample
  else if (sym_eval(sym_var(&g->arena, g->batch_sym), &g->syms, &batch)) {
    ir_error(d, (IrLoc){0}, "the model's batch dim is not bound: no step to price");
    return 1;
  }
  cfg.mesh_tp = tp;
  cfg.mesh_q = q;
  cfg.mesh_sub = mesh->size[IR_MESH_SUB];
  cfg.mesh_grid = grid;
  cfg.seq_parallel = P->seq_parallel;
  // identical layers that swap and checkpoint are not one choice: each its own unit; nor, on
  // several groups (whose program has no count of a unit's blocks left without), those that
  // checkpoint or swap some of the layers
  cfg.share_blocks &= !(P->swap && P->checkpoint);
  bool some = (P->swap && P->swap != PLAN_CHECKPOINT_ALL) ||
              (P->checkpoint && P->checkpoint != PLAN_CHECKPOINT_ALL);
  cfg.share_blocks &= cfg.cluster.ngroups == 1 || !some;
  // ... nor layers of different kinds (data parallel over tp, tensor parallel over sub of it,
  // on a grid of it)
  bool kind[4] = {false, false, false, false};
  for (int b = 1; b < P->nblocks; b++)
    kind[P->block[b].batch_tp ? 1 : P->block[b].sub ? 2 : P->block[b].grid ? 3 : 0] = true;
  cfg.share_blocks &= kind[0] + kind[1] + kind[2] + kind[3] <= 1;
  cfg.micro_batch = batch;
  cfg.global_batch = 0;
  for (int r = 0; r < dp; r++)
    cfg.global_batch += plan_replica_rows(P, r) * plan_replica_micro(P, r);
  SvPlan *pl;
  if (sv_plan(g, &cfg, &pl, d))
    return -1;
  const SvProblem *p = pl->prob;
  int layout = -1;
  for (int l = 0; l < p->nlayouts; l++)
    if (p->layout[l].dp == dp && p->layout[l].tp == tp && p->layout[l].q == q &&
        !p->layout[l].batch && !p->layout[l].sub)
      layout = l;
  SvSolution s = sv_solution_new(p);
  int rc = 0;
  if (layout < 0) {
    ir_error(d, (IrLoc){0}, "the planner has no layout dp %d x tp %d x q %d", dp, tp, q);
    rc = 1;
  }
  for (int u = 0; !rc && u < p->nunits; u++) {
    int lu = layout;   // or its blocks data parallel over the tp ranks, over sub of them, or
                       // on a grid of them
    const PlanBlock *pb = plan_block(P, p->unit[u].block);
    bool other = pb->batch_tp || pb->sub || pb->grid;
    for (int l = 0; other && l < p->nlayouts; l++) {
      const SvLayout *pl = &p->layout[l];
      bool on_grid = grid * grid == tp ? pl->tp == 1 && pl->q == grid   // one grid, or on sub
                                       : pl->tp == tp && pl->q == grid && pl->sub > 1;
      if (pl->dp == dp && (pb->grid ? on_grid
                                    : pl->tp == tp && pl->q == 1 &&
                                          (pb->batch_tp ? pl->batch : pl->sub > 1)))
        lu = l;
    }
    if (other && lu == layout) {
      ir_error(d, (IrLoc){0}, "the planner has no layout of %s %s", p->unit[u].name,
               pb->batch_tp ? "data parallel over tp"
               : pb->sub    ? "tensor parallel over part of tp"
                            : "on a grid of the tp ranks");
      rc = 1;
      break;
    }
    s.pick[u] = choice_of(pl, P, u, lu, &s.nplain[u]);
    if (s.pick[u] < 0) {
      ir_error(d, (IrLoc){0}, "the planner has no choice like the plan's for %s (its "
               "checkpointing, ZeRO stage or offload share)", p->unit[u].name);
      rc = 1;
    }
  }
  for (int k = 0; !rc && k < p->ngroups; k++) {
    s.batch[k] = group_micro[k];
    if (P->replica_parts)   // uneven state shares
      s.share[k] = group_share[k];
  }
  if (!rc) {
    sv_evaluate(p, &s, !P->replica_parts);
    out->step_s = s.time;
    out->fits = s.feasible;
    int slowest = 0;
    for (int k = 0; k < p->ngroups; k++)
      slowest = s.group_time[k] > s.group_time[slowest] ? k : slowest;
    sv_step_times(pl, &s, slowest, out->t);
    out->state_bytes = sv_state_bytes(pl, &s, slowest);
    out->mem_bytes = s.mem[slowest];
    out->usable_bytes = p->cap[slowest];
    for (int u = 0; u < p->nunits; u++) {   // a swapped block's host bytes beyond a kept one's
      const SvChoice *ch = &p->unit[u].choice[s.pick[u]];
      if (ch->swap)
        out->swap_bytes += (p->unit[u].count - s.nplain[u]) *
                           (ch->host[slowest] - ch->host_plain[slowest]);
    }
    size_t len = 0;   // (one group split as the replicas differ: its GPU's name once)
    for (int k = 0; k < base->cluster.ngroups && len < sizeof out->device; k++)
      len += (size_t)snprintf(out->device + len, sizeof out->device - len, "%s%s", k ? "+" : "",
                              cfg.cluster.group[k].dev.name);
  }
  sv_solution_free(&s);
  sv_plan_free(pl);
  return rc;
}
