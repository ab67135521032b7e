// The numeric problem: what the integer program decides over.
//
// A unit is a block, or a set of identical blocks deciding together. Each
// unit has joint choices (layout x checkpoint x ZeRO stage x offload share),
// each priced per device group by the cost model. Edges join units whose
// blocks pass activations, with a resharding time per pair of layouts.
//
// sv_evaluate prices a complete solution the same way the integer program
// does, so that baselines, brute force (tests) and the solver agree.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

// ---- layouts ------------------------------------------------------------------------------------

static bool divides_groups(const SvCluster *c, int s) {
  for (int i = 0; i < c->ngroups; i++)
    if (c->group[i].count % s)
      return false;
  return true;
}

// 1D tensor parallelism up to 64 ways and 2D grids up to 8 x 8, with data
// parallelism over the rest; an inner group never straddles two device
// groups, and no replica is left without a micro-batch.
int sv_layouts(const SvCluster *c, int64_t micro_total, SvLayout *out, int max) {
  int gpus = sv_cluster_gpus(c), n = 0;
  for (int t = 1; t <= 64 && t <= gpus && n < max; t++)
    if (gpus % t == 0 && divides_groups(c, t) && gpus / t <= micro_total)
      out[n++] = (SvLayout){gpus / t, t, 1, false, 0};
  for (int q = 2; q <= 8 && q * q <= gpus && n < max; q++)
    if (gpus % (q * q) == 0 && divides_groups(c, q * q) && gpus / (q * q) <= micro_total)
      out[n++] = (SvLayout){gpus / (q * q), 1, q, false, 0};
  return n;
}

// ---- building -----------------------------------------------------------------------------------

void sv_choice_fill(SvChoice *c, int g, const SvCost *k) {
  c->t_micro[g] = c->t_step[g] = c->t_ghost[g] = c->mem[g] = c->mem_shard[g] = 0;
  for (int i = 0; i < SV_NT; i++) {
    c->t_micro[g] += k->t_micro[i];
    c->t_step[g] += k->t_step[i];
    c->t_ghost[g] += k->t_ghost[i];
  }
  for (int i = 0; i < SV_NM; i++) {
    c->mem[g] += k->mem[i];
    c->mem_shard[g] += k->mem_shard[i];
  }
  c->peak[g] = k->peak;
  c->host[g] = k->host;
  c->host_shard[g] = k->host_shard;
}

static void add_choice(SvUnit *u, int *cap, const SvChoice *c) {
  if (u->nchoices == *cap) {
    *cap = *cap ? 2 * *cap : 64;
    u->choice = realloc(u->choice, (size_t)*cap * sizeof *u->choice);
    IR_ASSERT(u->choice);
  }
  u->choice[u->nchoices++] = *c;
}

// The offload choices: percent of the optimizer state, whether the gradients go too (only
// with all of it), and whether the parameters of that share go too (under ZeRO-3: then only
// in host memory, the host's update writing them).
static const struct { int share; bool grads, params; } offloads[] = {
    {0, false, false},  {50, false, false},  {100, false, false}, {100, true, false},
    {50, false, true}, {100, false, true}, {100, true, true}};
#define NOFFLOADS ((int)(sizeof offloads / sizeof *offloads))

// The replicas of a block's parameters under layout l (those its ZeRO stage shards over).
static int replicas(SvLayout l) { return l.dp * sv_layout_parts(l); }

// The unit's choices. Checkpointing and activation swap only in the repeated layers
// (passes/recompute.c, passes/swap.c), in every mode: block 0 (everything outside them) ends
// forward with the head, whose backward runs first, so recomputing it would hold what keeping
// it holds at the step's peak (and so would swapping it).
static void build_choices(SvProblem *p, SvUnit *u, const SvNum *const *ng, const SvCtx *x) {
  int cap = 0;
  const SvNum *n = ng[0];   // (what is alike at every group's micro-batch)
  bool has_state = n->params > 0;
  bool can_ckpt = n->act + n->act_int > n->ckpt + n->ckpt_int && u->block >= 1;
  bool can_swap = n->act > 0 && u->block >= 1;
  bool has_opt = n->per.state > 0;   // offload moves the optimizer state
  for (int l = 0; l < p->nlayouts; l++)
    for (int ck = 0; ck <= 2; ck++)   // keep, checkpoint, swap
      for (int z = 0; z <= 3; z++)
        for (int o = 0; o < NOFFLOADS; o++) {
          // ZeRO on one replica changes nothing but where parameter offload keeps its shard
          if (z > 0 && (!has_state || (replicas(p->layout[l]) == 1 && !offloads[o].params)))
            continue;
          if (offloads[o].params && z != 3)
            continue;
          if (offloads[o].share > 0 && (!has_state || !has_opt))
            continue;
          if ((ck == 1 && !can_ckpt) || (ck == 2 && !can_swap))
            continue;
          if (!sv_layout_divides(n, p->layout[l], NULL, 0))   // (attention heads, say)
            continue;
          SvChoice c = {.layout = l, .ckpt = ck == 1, .swap = ck == 2, .zero = z,
                        .offload = offloads[o].share, .grads = offloads[o].grads,
                        .params = offloads[o].params};
          for (int g = 0; g < p->ngroups; g++) {
            SvCost k;
            SvChoice plain = c;
            sv_cost(x, ng[g], p->layout[l], false, false, z, c.offload, c.grads, c.params, g,
                    &k);
            sv_choice_fill(&plain, g, &k);
            sv_cost(x, ng[g], p->layout[l], c.ckpt, c.swap, z, c.offload, c.grads, c.params, g,
                    &k);
            sv_choice_fill(&c, g, &k);
            // Checkpointing and swap change a block's time per micro-batch, the activations
            // it holds and (swap) its host memory, nothing else: what a block left without
            // them costs (SvChoice).
            IR_ASSERT(plain.t_step[g] == c.t_step[g] && plain.mem_shard[g] == c.mem_shard[g] &&
                      plain.host[g] <= c.host[g] && plain.host_shard[g] == c.host_shard[g] &&
                      plain.peak[g] <= c.peak[g]);
            c.t_micro_plain[g] = plain.t_micro[g];
            c.t_ghost_plain[g] = plain.t_ghost[g];
            c.mem_plain[g] = plain.mem[g];
            c.host_plain[g] = plain.host[g];
          }
          add_choice(u, &cap, &c);
        }
}

static SvEdge *find_edge(SvProblem *p, int u, int v) {
  for (int i = 0; i < p->nedges; i++)
    if (p->edge[i].u == u && p->edge[i].v == v)
      return &p->edge[i];
  p->edge = realloc(p->edge, (size_t)(p->nedges + 1) * sizeof *p->edge);
  IR_ASSERT(p->edge);
  SvEdge *e = &p->edge[p->nedges++];
  memset(e, 0, sizeof *e);
  e->u = u, e->v = v;
  for (int g = 0; g < p->ngroups; g++) {
    e->r[g] = calloc((size_t)(p->nlayouts * p->nlayouts), sizeof(double));
    IR_ASSERT(e->r[g]);
  }
  return e;
}

// The buckets of a unit's other blocks (SvNum.bucket_rest: its last block's): identical blocks
// may still lay out a parameter differently (the first layer's norm reads the embedding's sum
// whole on a 2D grid, the others split).
static void unit_buckets(const SvModel *m, const SvConfig *cfg, const SvUnit *un, int u,
                         SvNum *n) {
  int last = un->block;
  for (int b = 0; b < m->nblocks; b++)
    if (m->block[b].unit == u)
      last = b;
  SvNum o;
  sv_num_eval(m, cfg, last, &o);
  n->blocks = un->count;
  memcpy(n->bucket_rest, o.bucket, sizeof o.bucket);
  memcpy(n->bucket_grid_rest, o.bucket_grid, sizeof o.bucket_grid);
}

// The model's batch dim bound to `rows` sequences, where rows > 0 and the dim is bound.
static void at_rows(const SvModel *m, int64_t rows) {
  if (rows > 0 && m->batch_sym >= 0 && m->g->syms.bound[m->batch_sym])
    symtab_bind(&m->g->syms, m->batch_sym, rows);
}

SvProblem *sv_problem_build(const SvModel *m, const SvConfig *cfg, SvNum **nums_out, IrDiag *d) {
  const SvCluster *cl = &cfg->cluster;
  SvProblem *p = calloc(1, sizeof *p);
  IR_ASSERT(p);
  p->ngroups = cl->ngroups;
  for (int g = 0; g < cl->ngroups; g++) {
    p->gpus[g] = cl->group[g].count;
    p->cap[g] = cl->group[g].dev.mem - cl->group[g].reserve;
    p->host_cap[g] = cl->group[g].dev.host_mem;
  }
  // each group's micro-batches: all of micro_batch, or (group_rows) each group's own size, the
  // split fixed
  bool sizes = cfg->group_rows[0] > 0;
  int64_t rows = 0;
  p->micro_total = sizes ? 0 : cfg->global_batch / cfg->micro_batch;
  for (int g = 0; g < cl->ngroups; g++) {
    p->rows[g] = sizes ? cfg->group_rows[g] : cfg->micro_batch;
    p->fixed_batch[g] = sizes ? cfg->group_batch[g] : 0;
    p->micro_total += p->fixed_batch[g];
    rows += p->rows[g] * p->fixed_batch[g];
  }
  IR_ASSERT(!sizes || (cfg->mesh_tp > 0 && cl->ngroups > 1));
  if (sizes && rows != cfg->global_batch) {
    ir_error(d, (IrLoc){0}, "the groups' micro-batches hold %lld sequences, the step %lld",
             (long long)rows, (long long)cfg->global_batch);
    sv_problem_free(p);
    return NULL;
  }
  p->nlayouts = sv_layouts(cl, p->micro_total, p->layout, SV_MAXLAYOUTS);
  if (!m->grid_ok) {   // a model ir/shard.c cannot lay out on a 2D grid: none
    int n = 0;
    for (int l = 0; l < p->nlayouts; l++)
      if (p->layout[l].q == 1)
        p->layout[n++] = p->layout[l];
    p->nlayouts = n;
  }
  if (cfg->mesh_tp > 0) { // one mesh for every block: dp x mesh_tp, or dp x a mesh_q grid
    int n = 0, q = cfg->mesh_q > 1 ? cfg->mesh_q : 1;
    SvLayout grid = {0};   // ... or on a grid of the tp ranks (mesh_grid)
    for (int l = 0; l < p->nlayouts; l++) {
      if (cfg->mesh_grid > 1 && p->layout[l].tp == 1 && p->layout[l].q == cfg->mesh_grid &&
          cfg->mesh_grid * cfg->mesh_grid == cfg->mesh_tp)
        grid = p->layout[l];   // (grids on part of tp: below)
      if (p->layout[l].tp == cfg->mesh_tp && p->layout[l].q == q)
        p->layout[n++] = p->layout[l];
    }
    // ... where, on one group, a block may be data parallel over the tp ranks too, tensor
    // parallel over mesh_sub of them, or on a grid of them (mesh_grid), or on the grid of each
    // group of mesh_grid^2 of them (mesh_sub, with mesh_grid^2 below mesh_tp), each where the
    // micro-batch divides over the parts it is split into (ir/shard.c splits it only then)
    SvLayout mesh = p->layout[0];
    int64_t mb = cfg->micro_batch;
    if (n == 1 && cfg->mesh_tp > 1 && q == 1 && cl->ngroups == 1 && m->batch_ok) {
      if (mb % cfg->mesh_tp == 0 && mb >= cfg->mesh_tp) {
        p->layout[n] = mesh;
        p->layout[n++].batch = true;
      }
      int sub = cfg->mesh_sub, parts = sub > 1 ? cfg->mesh_tp / sub : 0;
      if (sub > 1 && sub < cfg->mesh_tp && cfg->mesh_tp % sub == 0 && mb % parts == 0 &&
          mb >= parts) {
        p->layout[n] = mesh;
        p->layout[n++].sub = cfg->mesh_sub;
      }
      int side = cfg->mesh_grid, rows = side > 1 ? mesh_grid_rows(cfg->mesh_tp, side) : 0;
      if (side > 1 && m->grid_ok && side * side == cfg->mesh_sub &&
          cfg->micro_batch % rows == 0 && cfg->micro_batch >= rows) {
        p->layout[n] = mesh;
        p->layout[n].q = side;
        p->layout[n++].sub = cfg->mesh_sub;
      }
    }
    if (n >= 1 && mesh.tp > 1 && grid.q > 1 && grid.dp == mesh.dp)
      p->layout[n++] = grid;
    p->nlayouts = n;
  }
  if (p->nlayouts == 0) {
    ir_error(d, (IrLoc){0}, "no layout fits %d micro-batches per step on these groups of GPUs",
             (int)p->micro_total);
    sv_problem_free(p);
    return NULL;
  }
  SvCtx x = {cfg, sv_cluster_gpus(cl), p->micro_total};
  p->ckpt_first = cfg->mesh_tp > 0;
  if (cfg->mesh_tp > 0 && cl->ngroups > 1)
    p->replica_ranks = cfg->mesh_tp * (cfg->mesh_q > 1 ? cfg->mesh_q * cfg->mesh_q : 1);
  p->nunits = m->nunits;
  p->unit = calloc((size_t)m->nunits, sizeof *p->unit);
  int nsizes = sizes ? cl->ngroups : 1;   // each group's numbers at its micro-batch
  int64_t bound = m->batch_sym >= 0 ? m->g->syms.value[m->batch_sym] : 0;   // (kept)
  SvNum *nums = calloc((size_t)(m->nunits * nsizes), sizeof *nums);
  const char **last = calloc((size_t)m->nunits, sizeof *last);
  IR_ASSERT(p->unit && nums && last);
  for (int b = 0; b < m->nblocks; b++) {
    int u = m->block[b].unit;
    if (u < 0)
      continue;
    if (p->unit[u].count++ == 0)
      p->unit[u].block = b;
    last[u] = m->block[b].name;
  }
  for (int u = 0; u < p->nunits; u++) {
    SvUnit *un = &p->unit[u];
    const char *first = m->block[un->block].name;
    if (un->count == 1) {
      un->name = first;
    } else {
      char buf[256];
      snprintf(buf, sizeof buf, "%s .. %s", first, last[u]);
      un->name = ir_strdup(&m->g->arena, buf);
    }
    const SvNum *ng[SV_MAXGROUPS];
    for (int k = 0; k < nsizes; k++) {
      SvNum *n = &nums[k * m->nunits + u];
      at_rows(m, sizes ? p->rows[k] : 0);
      sv_num_eval(m, cfg, un->block, n);
      unit_buckets(m, cfg, un, u, n);
    }
    at_rows(m, sizes ? bound : 0);
    for (int g = 0; g < p->ngroups; g++) {
      ng[g] = &nums[(sizes ? g : 0) * m->nunits + u];
      p->micro_flops[g] += un->count * (ng[g]->flops_fwd + ng[g]->flops_bwd);
    }
    build_choices(p, un, ng, &x);
  }
  free(last);
  for (int i = 0; i < m->nflows; i++) {
    int u = m->block[m->flow[i].from].unit, v = m->block[m->flow[i].to].unit;
    if (u < 0 || v < 0 || u == v)
      continue;   // identical blocks share a layout: nothing to reshard
    SvEdge *e = find_edge(p, u < v ? u : v, u < v ? v : u);
    e->count++;
    for (int g = 0; g < p->ngroups; g++) {
      at_rows(m, sizes ? p->rows[g] : 0);
      double bytes = sym_evalf(m->flow[i].bytes, &m->g->syms);
      for (int a = 0; a < p->nlayouts; a++)
        for (int b = 0; b < p->nlayouts; b++)
          e->r[g][a * p->nlayouts + b] += sv_reshard_time(&x, bytes, p->layout[a], p->layout[b], g);
    }
    at_rows(m, sizes ? bound : 0);
  }
  *nums_out = nums;   // (the first nunits: group 0's)
  return p;
}

void sv_problem_free(SvProblem *p) {
  if (!p)
    return;
  for (int u = 0; u < p->nunits; u++)
    free(p->unit[u].choice);
  for (int e = 0; e < p->nedges; e++)
    for (int g = 0; g < p->ngroups; g++)
      free(p->edge[e].r[g]);
  free(p->unit);
  free(p->edge);
  free(p);
}

// ---- solutions ----------------------------------------------------------------------------------

bool sv_moves_acts(const SvChoice *c) { return c->ckpt || c->swap; }

bool sv_partial_ckpt(const SvProblem *p, int u, const SvChoice *c) {
  return sv_moves_acts(c) && p->unit[u].count > 1 && p->ngroups == 1;
}

int sv_choice_plain(const SvUnit *u, int s) {
  const SvChoice *c = &u->choice[s];
  for (int t = 0; t < u->nchoices; t++) {
    const SvChoice *d = &u->choice[t];
    if (!sv_moves_acts(d) && d->layout == c->layout && d->zero == c->zero &&
        d->offload == c->offload && d->grads == c->grads && d->params == c->params)
      return t;
  }
  return -1;
}

int sv_next_layer(const SvProblem *p, int u) {
  const SvUnit *a = &p->unit[u];
  if (!p->ckpt_first || a->count != 1 || a->block < 1)
    return -1;
  for (int v = 0; v < p->nunits; v++)
    if (p->unit[v].count == 1 && p->unit[v].block == a->block + 1)
      return v;
  return -1;
}

bool sv_ckpt_ordered(const SvProblem *p, const SvSolution *s) {
  for (int u = 0; u < p->nunits; u++) {
    int v = sv_next_layer(p, u);
    if (v >= 0 && (sv_swap_blocks(p, s, v) > sv_swap_blocks(p, s, u) ||
                   sv_ckpt_blocks(p, s, v) + sv_swap_blocks(p, s, v) >
                       sv_ckpt_blocks(p, s, u) + sv_swap_blocks(p, s, u)))
      return false;
  }
  return true;
}

int sv_ckpt_blocks(const SvProblem *p, const SvSolution *s, int u) {
  return p->unit[u].choice[s->pick[u]].ckpt ? p->unit[u].count - s->nplain[u] : 0;
}

int sv_swap_blocks(const SvProblem *p, const SvSolution *s, int u) {
  return p->unit[u].choice[s->pick[u]].swap ? p->unit[u].count - s->nplain[u] : 0;
}

SvSolution sv_solution_new(const SvProblem *p) {
  SvSolution s = {.pick = calloc((size_t)p->nunits + 1, sizeof(int)),
                  .nplain = calloc((size_t)p->nunits + 1, sizeof(int))};
  IR_ASSERT(s.pick && s.nplain);
  s.time = INFINITY;
  s.batch[0] = p->micro_total;
  s.share[0] = 1;
  return s;
}

void sv_solution_free(SvSolution *s) {
  free(s->pick);
  free(s->nplain);
  s->pick = s->nplain = NULL;
}

void sv_solution_copy(SvSolution *dst, const SvSolution *src, int nunits) {
  int *pick = dst->pick, *nplain = dst->nplain;
  *dst = *src;
  dst->pick = pick;
  dst->nplain = nplain;
  memcpy(pick, src->pick, (size_t)nunits * sizeof *pick);
  memcpy(nplain, src->nplain, (size_t)nunits * sizeof *nplain);
}

// Per group: time (micro: its micro-batches' and ghosts', rest: once a step), memory held,
// sharded memory at share 1, peak, host.
typedef struct Totals {
  double micro, rest, fixed, shard, peak, host, host_shard;
} Totals;

static void totals(const SvProblem *p, const SvSolution *s, Totals *t) {
  for (int g = 0; g < p->ngroups; g++) {
    Totals *x = &t[g];
    memset(x, 0, sizeof *x);
    double ghosts = sv_ghosts(p, s, g);
    for (int u = 0; u < p->nunits; u++) {
      const SvChoice *c = &p->unit[u].choice[s->pick[u]];
      double n = p->unit[u].count, r = s->nplain[u];   // r blocks without checkpointing
      IR_ASSERT(r == 0 || (sv_partial_ckpt(p, u, c) && r < n));
      double b = (double)s->batch[g];
      x->micro += ((n - r) * c->t_micro[g] + r * c->t_micro_plain[g]) * b +
                  ((n - r) * c->t_ghost[g] + r * c->t_ghost_plain[g]) * ghosts;
      x->rest += n * c->t_step[g];
      x->fixed += (n - r) * c->mem[g] + r * c->mem_plain[g];
      x->shard += n * c->mem_shard[g];
      x->host += (n - r) * c->host[g] + r * c->host_plain[g];
      x->host_shard += n * c->host_shard[g];
      x->peak = fmax(x->peak, c->peak[g]);
    }
    for (int e = 0; e < p->nedges; e++) {
      const SvEdge *ed = &p->edge[e];
      int a = p->unit[ed->u].choice[s->pick[ed->u]].layout;
      int b = p->unit[ed->v].choice[s->pick[ed->v]].layout;
      x->rest += ed->r[g][a * p->nlayouts + b];
    }
  }
}

#define SLACK 1e-9   // relative tolerance on capacities

int sv_replicas(const SvProblem *p, int g, int l) {
  const SvLayout *x = &p->layout[l];
  return p->gpus[g] / sv_layout_ranks(*x);
}

int sv_problem_gpus(const SvProblem *p) {
  int n = 0;
  for (int g = 0; g < p->ngroups; g++)
    n += p->gpus[g];
  return n;
}

int sv_share_units(const SvProblem *p) {
  if (!p->replica_ranks || p->ngroups < 2)
    return 0;
  int replicas = sv_problem_gpus(p) / p->replica_ranks;
  return replicas <= 64 ? replicas * (64 / replicas) : 0;
}

double sv_ghosts(const SvProblem *p, const SvSolution *s, int g) {
  if (!p->replica_ranks || p->ngroups < 2)
    return 0;
  double most = 0;
  for (int h = 0; h < p->ngroups; h++)
    most = fmax(most, (double)s->batch[h] * p->replica_ranks / p->gpus[h]);
  return most - (double)s->batch[g] * p->replica_ranks / p->gpus[g];
}

bool sv_pays_ghosts(const SvProblem *p, const SvChoice *c) {
  for (int g = 0; g < p->ngroups; g++)
    if (c->t_ghost[g] > 0)
      return true;
  return false;
}

bool sv_lockstep(const SvProblem *p, const SvSolution *s) {
  bool pays = false;
  for (int u = 0; u < p->nunits && p->replica_ranks && p->ngroups > 1; u++)
    pays |= sv_pays_ghosts(p, &p->unit[u].choice[s->pick[u]]);
  return pays;
}

// The micro-steps of a plan in lockstep: where fewer than k replicas still run micro-batches of
// their own, the k-th micro-step takes the longest of the others' real ones and its ghosts.
double sv_lockstep_time(const SvProblem *p, const double *k, const double *real,
                        const double *ghost) {
  double t = 0, done = 0;
  for (;;) {   // the distinct numbers of micro-batches a replica runs, ascending
    double next = INFINITY, step = 0;
    for (int g = 0; g < p->ngroups; g++)
      if (k[g] > done)
        next = fmin(next, k[g]);
    if (next == INFINITY)
      return t;
    for (int g = 0; g < p->ngroups; g++)
      step = fmax(step, k[g] >= next ? real[g] : ghost[g]);
    t += (next - done) * step;
    done = next;
  }
}

// Each group's micro-batches a replica runs in s (k), and a replica's seconds for one of them
// (real) and for a ghost (ghost).
static void replica_steps(const SvProblem *p, const SvSolution *s, double *k, double *real,
                          double *ghost) {
  for (int g = 0; g < p->ngroups; g++) {
    double R = (double)(p->gpus[g] / p->replica_ranks);
    k[g] = (double)s->batch[g] / R;
    real[g] = ghost[g] = 0;
    for (int u = 0; u < p->nunits; u++) {
      const SvChoice *c = &p->unit[u].choice[s->pick[u]];
      double n = p->unit[u].count, r = s->nplain[u];
      real[g] += R * ((n - r) * c->t_micro[g] + r * c->t_micro_plain[g]);
      ghost[g] += (n - r) * c->t_ghost[g] + r * c->t_ghost_plain[g];
    }
  }
}

// The micro-steps of s in lockstep (0 where s is not): every group's are as long.
static double lockstep_micro(const SvProblem *p, const SvSolution *s) {
  if (!sv_lockstep(p, s))
    return 0;
  double k[SV_MAXGROUPS], real[SV_MAXGROUPS], ghost[SV_MAXGROUPS];
  replica_steps(p, s, k, real, ghost);
  return sv_lockstep_time(p, k, real, ghost);
}

double sv_wait(const SvProblem *p, const SvSolution *s, int g) {
  double lock = lockstep_micro(p, s);
  if (lock <= 0)
    return 0;
  double k[SV_MAXGROUPS], real[SV_MAXGROUPS], ghost[SV_MAXGROUPS];
  replica_steps(p, s, k, real, ghost);
  return fmax(0, lock - (k[g] * real[g] + sv_ghosts(p, s, g) * ghost[g]));
}

void sv_evaluate(const SvProblem *p, SvSolution *s, bool set_share) {
  Totals t[SV_MAXGROUPS];
  totals(p, s, t);
  bool ok = true;
  if (set_share && p->ngroups == 1) {
    s->share[0] = 1;
  } else if (set_share && p->replica_ranks) {
    for (int g = 0; g < p->ngroups; g++)
      s->share[g] = (double)p->gpus[g] / sv_problem_gpus(p);
  } else if (set_share) {
    // Each group can take at most (free memory) / (its bytes at share 1) of
    // the sharded state; shares proportional to those bounds fit when the
    // bounds add up to 1 or more, and fill every group equally.
    double ub[SV_MAXGROUPS], sum = 0;
    bool any = false;
    for (int g = 0; g < p->ngroups; g++) {
      double free_gpu = p->cap[g] * (1 + SLACK) - t[g].fixed - t[g].peak;
      double free_host = p->host_cap[g] * (1 + SLACK) - t[g].host;
      ub[g] = INFINITY;
      if (t[g].shard > 0)
        ub[g] = free_gpu / t[g].shard;
      if (t[g].host_shard > 0)
        ub[g] = fmin(ub[g], free_host / t[g].host_shard);
      any |= t[g].shard > 0 || t[g].host_shard > 0;
      ok &= free_gpu >= 0 && free_host >= 0;
      ub[g] = fmax(0, ub[g]);
      sum += ub[g];
    }
    int gpus = sv_problem_gpus(p);
    for (int g = 0; g < p->ngroups; g++)
      s->share[g] = !any || !isfinite(sum) || sum < 1 - SLACK ? (double)p->gpus[g] / gpus
                                                                : ub[g] / sum;
    if (any && isfinite(sum) && sum < 1 - SLACK)
      ok = false;
  }
  s->time = 0;
  double lock = lockstep_micro(p, s);   // (a group's own micro-steps, or the others' it waits for)
  for (int g = 0; g < p->ngroups; g++) {
    s->group_time[g] = fmax(t[g].micro, lock) + t[g].rest;
    s->time = fmax(s->time, s->group_time[g]);
    s->mem[g] = t[g].fixed + s->share[g] * t[g].shard + t[g].peak;
    s->host[g] = t[g].host + s->share[g] * t[g].host_shard;
    ok &= s->mem[g] <= p->cap[g] * (1 + SLACK) + 1;
    ok &= s->host[g] <= p->host_cap[g] * (1 + SLACK) + 1;
  }
  for (int g = 0; p->ngroups > 1 && g < p->ngroups; g++)   // whole per replica
    for (int u = 0; u < p->nunits; u++) {
      int replicas = sv_replicas(p, g, p->unit[u].choice[s->pick[u]].layout);
      ok &= s->batch[g] % replicas == 0 && (!p->replica_ranks || s->batch[g] >= replicas);
    }
  s->feasible = ok;
}

// ---- brute force (tests) ------------------------------------------------------------------------

// The next split of total into n parts (lexicographic); false after the last.
static bool next_split(int64_t *part, int n, int64_t total) {
  if (n == 1)
    return false;
  for (int i = n - 2; i >= 0; i--) {
    int64_t used = 0;
    for (int k = 0; k < i; k++)
      used += part[k];
    if (used + part[i] < total) {
      part[i]++;
      for (int k = i + 1; k < n - 1; k++)
        part[k] = 0;
      used += part[i];
      part[n - 1] = total - used;
      return true;
    }
  }
  return false;
}

int sv_brute_force(const SvProblem *p, SvSolution *best) {
  double combos = 1;
  for (int u = 0; u < p->nunits; u++)
    combos *= p->unit[u].nchoices * p->unit[u].count;
  for (int g = 1; g < p->ngroups; g++)
    combos *= (double)(p->micro_total + 1);
  if (combos > 2e7)
    return -1;
  SvSolution cur = sv_solution_new(p);
  best->feasible = false;
  best->time = INFINITY;
  for (;;) {
    memset(cur.batch, 0, sizeof cur.batch);
    cur.batch[p->ngroups - 1] = p->micro_total;
    do {
      sv_evaluate(p, &cur, true);
      if (cur.feasible && cur.time < best->time && sv_ckpt_ordered(p, &cur))
        sv_solution_copy(best, &cur, p->nunits);
    } while (next_split(cur.batch, p->ngroups, p->micro_total));
    // The next (choice, blocks left without checkpointing) of the first unit that has one.
    int u = 0;
    for (; u < p->nunits; u++) {
      const SvChoice *c = &p->unit[u].choice[cur.pick[u]];
      if (sv_partial_ckpt(p, u, c) && cur.nplain[u] + 1 < p->unit[u].count) {
        cur.nplain[u]++;
        break;
      }
      cur.nplain[u] = 0;
      if (++cur.pick[u] < p->unit[u].nchoices)
        break;
      cur.pick[u] = 0;
    }
    if (u == p->nunits)
      break;
  }
  sv_solution_free(&cur);
  return 0;
}

// ---- pruning ------------------------------------------------------------------------------------

// A choice's coefficients on group g, for its checkpointed blocks or (plain) those left
// without. On one group the state share is 1: held and sharded bytes simply add.
static void coefs(const SvProblem *p, const SvChoice *c, int g, bool plain, double out[8]) {
  double k = p->ngroups == 1 ? 1 : 0;
  double tm = plain ? c->t_micro_plain[g] : c->t_micro[g];
  double mem = plain ? c->mem_plain[g] : c->mem[g];
  double host = plain ? c->host_plain[g] : c->host[g];
  const double x[] = {tm, c->t_step[g], mem + k * c->mem_shard[g], (1 - k) * c->mem_shard[g],
                      c->peak[g], host + k * c->host_shard[g], (1 - k) * c->host_shard[g],
                      plain ? c->t_ghost_plain[g] : c->t_ghost[g]};
  memcpy(out, x, sizeof x);
}

// a (all its blocks alike) is at least as good as b on every coefficient, for every number
// of blocks b leaves without checkpointing: the costs are linear in that number, so the
// two ends suffice.
static bool no_worse(const SvProblem *p, int u, const SvChoice *a, const SvChoice *b) {
  if (a->layout != b->layout)
    return false;
  // the order of layers may need b's checkpointing or swap
  if (p->ckpt_first && (a->ckpt != b->ckpt || a->swap != b->swap))
    return false;
  for (int g = 0; g < p->ngroups; g++)
    for (int end = 0; end <= sv_partial_ckpt(p, u, b); end++) {
      double x[8], y[8];
      coefs(p, a, g, false, x);
      coefs(p, b, g, end, y);
      for (int k = 0; k < 8; k++)
        if (x[k] > y[k] * (1 + 1e-12) + 1e-300)
          return false;
    }
  return true;
}

static bool alone_too_big(const SvProblem *p, const SvUnit *u, const SvChoice *c, bool gpu) {
  for (int g = 0; g < p->ngroups; g++) {
    double shard = p->ngroups == 1 ? 1 : 0;   // other groups may take all the shards
    double mem = fmin(c->mem[g], c->mem_plain[g]);   // the least of its blocks, either way
    double held = u->count * (mem + shard * c->mem_shard[g]) + c->peak[g];
    if (gpu && held > p->cap[g] * (1 + SLACK) + 1)
      return true;
    double host = fmin(c->host[g], c->host_plain[g]);
    if (u->count * (host + shard * c->host_shard[g]) > p->host_cap[g] * (1 + SLACK) + 1)
      return true;
  }
  return false;
}

// A copy of p with its edges and no units' choices yet.
static SvProblem *problem_shell(const SvProblem *p) {
  SvProblem *q = calloc(1, sizeof *q);
  IR_ASSERT(q);
  *q = *p;
  q->unit = calloc((size_t)p->nunits, sizeof *q->unit);
  q->edge = calloc((size_t)p->nedges + 1, sizeof *q->edge);
  IR_ASSERT(q->unit && q->edge);
  for (int e = 0; e < p->nedges; e++) {
    q->edge[e] = p->edge[e];
    for (int g = 0; g < p->ngroups; g++) {
      size_t n = (size_t)(p->nlayouts * p->nlayouts);
      q->edge[e].r[g] = malloc(n * sizeof(double));
      IR_ASSERT(q->edge[e].r[g]);
      memcpy(q->edge[e].r[g], p->edge[e].r[g], n * sizeof(double));
    }
  }
  return q;
}

// Unit u of q (a shell of p) as p's without its choices yet, with room for them and keep[u].
static SvUnit *unit_shell(SvProblem *q, const SvProblem *p, int u, int **keep) {
  const SvUnit *pu = &p->unit[u];
  SvUnit *qu = &q->unit[u];
  *qu = *pu;
  qu->nchoices = 0;
  qu->choice = malloc(((size_t)pu->nchoices + 1) * sizeof *qu->choice);
  keep[u] = malloc(((size_t)pu->nchoices + 1) * sizeof **keep);
  IR_ASSERT(qu->choice && keep[u]);
  return qu;
}

SvProblem *sv_problem_subset(const SvProblem *p, bool (*take)(const SvProblem *, int, int),
                             int **keep) {
  SvProblem *q = problem_shell(p);
  for (int u = 0; u < p->nunits; u++) {
    const SvUnit *pu = &p->unit[u];
    SvUnit *qu = unit_shell(q, p, u, keep);
    for (int s = 0; s < pu->nchoices; s++)
      if (take(p, u, s)) {
        keep[u][qu->nchoices] = s;
        qu->choice[qu->nchoices++] = pu->choice[s];
      }
  }
  return q;
}

SvProblem *sv_problem_prune(const SvProblem *p, bool gpu_caps, int **map, int **keep) {
  SvProblem *q = problem_shell(p);
  for (int u = 0; u < p->nunits; u++) {
    const SvUnit *pu = &p->unit[u];
    SvUnit *qu = unit_shell(q, p, u, keep);
    int *by = malloc(((size_t)pu->nchoices + 1) * sizeof *by);   // a choice no worse, or -1
    map[u] = malloc(((size_t)pu->nchoices + 1) * sizeof **map);
    IR_ASSERT(by && map[u]);
    for (int s = 0; s < pu->nchoices; s++) {
      by[s] = -1;
      const SvChoice *c = &pu->choice[s];
      if (alone_too_big(p, pu, c, gpu_caps)) {
        by[s] = -2;
        continue;
      }
      for (int t = 0; t < pu->nchoices && by[s] == -1; t++) {
        if (t == s || !no_worse(p, u, &pu->choice[t], c))
          continue;
        // Ties go to the lower index, so that exactly one of equals stays.
        if (t < s || !no_worse(p, u, c, &pu->choice[t]))
          by[s] = t;
      }
    }
    for (int s = 0; s < pu->nchoices; s++) {
      map[u][s] = -1;
      if (by[s] == -1) {
        keep[u][qu->nchoices] = s;
        map[u][s] = qu->nchoices;
        qu->choice[qu->nchoices++] = pu->choice[s];
      }
    }
    // A dominated choice maps to what dominates it, followed to a kept one.
    for (int s = 0; s < pu->nchoices; s++) {
      int t = s, steps = 0;
      while (t >= 0 && by[t] >= 0 && steps++ < pu->nchoices)
        t = by[t];
      if (t >= 0 && by[t] == -1)
        map[u][s] = map[u][t];
    }
    free(by);
  }
  return q;
}
