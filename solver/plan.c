// Planning: the integer program over a problem, the fixed-strategy
// baselines, and what to say when nothing fits.
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define TSCALE 1e3          // the program counts milliseconds
#define MSCALE (1.0 / GiB)  // and GiB, so that its coefficients are near 1

// ---- the integer program ------------------------------------------------------------------------
//
// Sets: units u (a block, or n_u identical blocks sharing variables), the
// choices s of u (layout l(s) = dp x tp x q x q, activations kept, checkpointed or
// swapped, ZeRO stage, offload share), device groups g, edges (u,v) between units whose blocks
// pass activations, M micro-batches per step.
//
// Variables:
//   x[u,s]    in {0,1}  unit u takes choice s
//   r[u,s]    in Z+     for a checkpointing (or swapping) choice s of n_u > 1 blocks (one
//                       group): the blocks of u it leaves without (the last r; the first
//                       n_u - r recompute, or swap), r <= (n_u - 1) x[u,s]
//   e[uv,a,b] in [0,1]  edge uv joins layout a of u to layout b of v
//   W[g]      >= 0      transient bytes of the block at the peak (recompute,
//                       gathered parameters, backward temporaries)
//   tau       >= 0      step time
// and on a heterogeneous cluster (Cephalo: batch decoupled from state):
//   beta[g]   in Z+     micro-batches group g runs per step
//   f[g]      in [0,1]  group g's share of the sharded model state
//   z[u,s,g] = beta[g] x[u,s],  y[u,s,g] = f[g] x[u,s]  (exact for binary x)
//
// Coefficients of one block (cost.c), per device of group g: tm (seconds
// per micro-batch the group runs), ts (seconds per step), mf (bytes held
// all step), ms (sharded bytes at share 1), mp (peak bytes), hf, hs (CPU
// bytes); r[uv,a,b,g] resharding seconds per step. A block that a checkpointing
// (swapping) choice leaves without costs tm', mf' and hf' (its time and bytes
// without recompute or copies); the rest is the same, and the peak stays mp.
// Below, the sums over s of n_u tm x[u,s], n_u mf x[u,s] and n_u hf x[u,s] each
// gain (tm' - tm) r[u,s], (mf' - mf) r[u,s] and (hf' - hf) r[u,s]: linear, so K of
// n_u checkpointed blocks is one integer.
//
//   minimize tau subject to
//   sum_s x[u,s] = 1                                                     for each u
//   r[u,s] <= (n_u - 1) x[u,s]                                           for each r
//   sum_ab e[uv,a,b] = 1,                                                for each edge
//     sum_b e[uv,a,b] <= sum_{s: l(s)=a} x[u,s],                         for each a
//     sum_a e[uv,a,b] <= sum_{s: l(s)=b} x[v,s]                          for each b  (Alpa)
//   tau >= sum_u n_u sum_s (tm z[u,s,g] + ts x[u,s])
//          + sum_uv sum_ab r[uv,a,b,g] e[uv,a,b]                         for each g
//   sum_u n_u sum_s (mf x[u,s] + ms y[u,s,g]) + W[g] <= capacity[g]      for each g
//   W[g] >= sum_s mp x[u,s]                                              for each u, g
//   sum_{s ckpt or swap} x[v,s] <= sum_{s ckpt or swap} x[u,s],
//   sum_{s swap} x[v,s] <= sum_{s swap} x[u,s]    for layers u, v deciding alone, v after u,
//                                                 when only the first S may swap and the K
//                                                 after them checkpoint (mtc compile)
//   sum_u n_u sum_s (hf x[u,s] + hs y[u,s,g]) <= host[g]                 for each g
//   sum_g beta[g] = M,  sum_g f[g] = 1,
//   z[u,s,g] <= M x[u,s],  sum_s z[u,s,g] = beta[g],   (for mtc compile, tighter:
//     R[g] x[u,s] <= z[u,s,g] <= (M - sum_{h != g} R[h]) x[u,s], every replica running one)
//   y[u,s,g] <= x[u,s],    sum_s y[u,s,g] = f[g]                         for each u, s, g
//
// and, as programs run them, whole micro-batches per replica: for each group g and
// replica size S (the ranks of a replica, tp q^2) with R = (g's GPUs) / S replicas,
//   k[g,S] in Z+,  |beta[g] - R k[g,S]| <= M (1 - sum_{s: S(l(s)) = S} x[u,s])  for each u
// (a unit on a layout of replica size S makes beta[g] = R k[g,S]). For mtc compile
// (q->replica_ranks) also k[g,S] >= 1: every replica runs a micro-batch; and the state is
// sharded in whole parts (Plan.replica_parts): with R[g] = (g's GPUs) / replica_ranks and
// units P a multiple of the replicas, at most 64 (sv_share_units),
//   u[g] in Z, 1 <= u[g] <= P,  f[g] = R[g] u[g] / P
// (each of g's replicas holds u[g] of P units; without such a P, f[g] = R[g] / replicas).
// There a replica that runs fewer micro-batches than the most, K, joins the others'
// collectives of ZeRO 2 and 3 and gradient offload with K - beta[g] / R[g] ghost micro-batches
// (sv_ghosts), tg seconds each for a choice's block (cost.c: SvCost.t_ghost; "pays" below:
// tg > 0 on some group), and every micro-step waits for every replica's: lockstep. With the
// split fixed (sv_solve tries each, SvProblem.lockstep), k[g] = beta[g] / R[g] is a constant;
// for each distinct one, ascending, level j of L[j] (L[0] = 0),
//   S[j] >= sum_u n_u sum_s (R[g] tm[g] if k[g] >= L[j], else tg[g]) x[u,s]   for each g,
// and the group's time rows hold sum_j (L[j] - L[j-1]) S[j] in place of the sum of tm z.
// With the split free (more splits than sv_solve tries), a plan that pays runs as many on every
// replica, K, so none runs ghosts:
//   K in Z+,  R[g] K >= beta[g],
//   beta[g] / R[g] >= K - M (1 - sum_{s pays} x[u,s])                   for each u, g,
// and each group's micro-steps are priced as its own (a faster group waits for the slowest's
// there, which sv_evaluate adds to the plan it prices).
//
// On one group beta = M and f = 1, so z = M x and y = x and those columns
// are left out. On several, r would multiply beta[g] (a product of integers),
// so there r is left out too: identical blocks checkpoint all or none. The
// edge variables may stay continuous: with x integral, the rows leave e one
// point. Identical blocks sharing a unit share a layout, so edges only join
// different units.
//
// To explain infeasibility the same rows minimize instead the extra bytes
// delta every GPU would need (capacity[g] + delta), with no time rows.

typedef struct Cols {
  int *x;            // per unit: the column of choice 0
  int **r;           // per unit and choice: the column of r (-1: none)
  int *z, *y;        // per unit and group: the column of choice 0 (heterogeneous only)
  int tau, delta, most;   // most: K, the micro-batches of every replica (-1: none)
  int nlevels;            // lockstep: the micro-step columns S[j] (level), each span[j] steps
  int level[SV_MAXGROUPS];
  double span[SV_MAXGROUPS];
  int w[SV_MAXGROUPS], beta[SV_MAXGROUPS], f[SV_MAXGROUPS];
  int units[SV_MAXGROUPS];   // mtc compile: each replica's units of the state (-1: none)
  // per group and layout: the column of k[g,S] for the layout's replica size S (shared by
  // the layouts of one size; -1: one group, or one replica and any number will do)
  int k[SV_MAXGROUPS][SV_MAXLAYOUTS];
  int *e;            // per edge: the column of its first layout pair (-1: left out)
  int *ea, *eb;      // per edge: which layouts of u and v appear (bit sets)
} Cols;

// The first layout whose replicas have as many ranks as layout l's.
static int first_of_size(const SvProblem *q, int l) {
  const SvLayout *a = &q->layout[l];
  for (int i = 0;; i++) {
    const SvLayout *b = &q->layout[i];
    if (sv_layout_ranks(*b) == sv_layout_ranks(*a))
      return i;
  }
}

// Does a choice of unit u take a layout whose replicas are as large as layout l's?
static bool takes_size(const SvProblem *q, int u, int l) {
  for (int s = 0; s < q->unit[u].nchoices; s++)
    if (first_of_size(q, q->unit[u].choice[s].layout) == first_of_size(q, l))
      return true;
  return false;
}

static unsigned layouts_of(const SvUnit *u) {
  unsigned set = 0;
  for (int s = 0; s < u->nchoices; s++)
    set |= 1u << u->choice[s].layout;
  return set;
}

// Edge i's pairs with one end (u when at_u, else v) at layout l, at most that
// end's choices with layout l.
static void edge_marginal(Ilp *ilp, const Cols *c, const SvProblem *q, int i, bool at_u, int l) {
  int L = q->nlayouts, w = at_u ? q->edge[i].u : q->edge[i].v;
  int r = ilp_row(ilp, -INFINITY, 0);
  for (int k = 0; k < L; k++)
    ilp_coef(ilp, r, c->e[i] + (at_u ? l * L + k : k * L + l), 1);
  for (int s = 0; s < q->unit[w].nchoices; s++)
    if (q->unit[w].choice[s].layout == l)
      ilp_coef(ilp, r, c->x[w] + s, -1);
}

// The micro-batches group g may run: all (0 to M), or in mtc compile, where every replica runs
// one, at least its replicas and at most M less the others'.
static void beta_range(const SvProblem *q, int g, double *lo, double *hi) {
  if (q->fixed_batch[g] > 0) {
    *lo = *hi = (double)q->fixed_batch[g];
    return;
  }
  *lo = 0, *hi = (double)q->micro_total;
  for (int h = 0; h < q->ngroups && q->replica_ranks; h++)
    *(h == g ? lo : hi) += (h == g ? 1 : -1) * (double)(q->gpus[h] / q->replica_ranks);
}

// The micro-batches a replica of group g runs where the batch is fixed, k[g] (a split of
// lockstep), and the distinct ones ascending in level; returns how many there are.
static int lockstep_levels(const SvProblem *q, double *k, double *level) {
  int n = 0;
  for (int g = 0; g < q->ngroups; g++) {
    k[g] = (double)q->fixed_batch[g] * q->replica_ranks / q->gpus[g];
    int i = 0;
    while (i < n && level[i] < k[g])
      i++;
    if (i < n && level[i] == k[g])
      continue;
    memmove(level + i + 1, level + i, (size_t)(n - i) * sizeof *level);
    level[i] = k[g];
    n++;
  }
  return n;
}

// mtc compile's replicas on several groups: a plan whose blocks collect every micro-batch runs
// its micro-steps in lockstep (sv_lockstep_time). Where the batch is fixed (q->lockstep) the
// step's micro-steps are priced so, in one column per level of the split; where it is free,
// such a plan runs as many micro-batches on every replica, K (no ghosts, nothing to wait for).
static void lockstep_cols(Ilp *ilp, const SvProblem *q, bool min_memory, Cols *c) {
  int G = q->ngroups, U = q->nunits;
  double M = (double)q->micro_total;
  c->most = -1;
  c->nlevels = 0;
  bool any = false;
  for (int u = 0; u < U; u++)
    for (int s = 0; s < q->unit[u].nchoices; s++)
      any |= sv_pays_ghosts(q, &q->unit[u].choice[s]);
  double lo, hi;
  beta_range(q, 0, &lo, &hi);
  if (min_memory || G < 2 || !q->replica_ranks || !any)
    return;
  if (lo == hi) {
    if (q->lockstep) {   // S[j] >= each group's micro-step at level j: its own, or a ghost
      // (and some block collects every micro-batch: the plans without are another program's)
      int some = ilp_row(ilp, 1, INFINITY);
      for (int u = 0; u < U; u++)
        for (int s = 0; s < q->unit[u].nchoices; s++)
          if (sv_pays_ghosts(q, &q->unit[u].choice[s]))
            ilp_coef(ilp, some, c->x[u] + s, 1);
      double k[SV_MAXGROUPS], level[SV_MAXGROUPS];
      c->nlevels = lockstep_levels(q, k, level);
      for (int j = 0; j < c->nlevels; j++) {
        c->level[j] = ilp_col(ilp, 0, INFINITY, 0, ILP_CONT);
        c->span[j] = level[j] - (j ? level[j - 1] : 0);
        for (int g = 0; g < G; g++) {
          int r = ilp_row(ilp, 0, INFINITY);
          double R = (double)(q->gpus[g] / q->replica_ranks);
          ilp_coef(ilp, r, c->level[j], 1);
          for (int u = 0; u < U; u++)
            for (int s = 0; s < q->unit[u].nchoices; s++) {
              const SvChoice *ch = &q->unit[u].choice[s];
              double t = k[g] >= level[j] ? R * ch->t_micro[g] : ch->t_ghost[g];
              ilp_coef(ilp, r, c->x[u] + s, -q->unit[u].count * t * TSCALE);
            }
        }
      }
    }
    return;
  }
  c->most = ilp_col(ilp, 1, M, 0, ILP_INT);
  for (int g = 0; g < G; g++) {   // R[g] K >= beta[g]
    int r = ilp_row(ilp, 0, INFINITY);
    ilp_coef(ilp, r, c->most, (double)(q->gpus[g] / q->replica_ranks));
    ilp_coef(ilp, r, c->beta[g], -1);
  }
  for (int u = 0; u < U; u++) {
    const SvUnit *un = &q->unit[u];
    bool pays = false;
    for (int s = 0; s < un->nchoices; s++)
      pays |= sv_pays_ghosts(q, &un->choice[s]);
    for (int g = 0; pays && g < G; g++) {   // beta[g] / R[g] - K + M sum x >= 0, over those
      int r = ilp_row(ilp, 0, INFINITY);
      ilp_coef(ilp, r, c->beta[g], (double)q->replica_ranks / q->gpus[g]);
      ilp_coef(ilp, r, c->most, -1);
      for (int s = 0; s < un->nchoices; s++)
        if (sv_pays_ghosts(q, &un->choice[s]))
          ilp_coef(ilp, r, c->x[u] + s, M);
    }
  }
}

static Ilp *build(const SvProblem *q, bool min_memory, Cols *c) {
  Ilp *ilp = ilp_new();
  int G = q->ngroups, U = q->nunits, L = q->nlayouts;
  bool het = G > 1;
  double M = (double)q->micro_total;
  c->x = calloc((size_t)U + 1, sizeof(int));
  c->z = calloc((size_t)(U * G) + 1, sizeof(int));
  c->y = calloc((size_t)(U * G) + 1, sizeof(int));
  c->e = calloc((size_t)q->nedges + 1, sizeof(int));
  c->ea = calloc((size_t)q->nedges + 1, sizeof(int));
  c->eb = calloc((size_t)q->nedges + 1, sizeof(int));
  IR_ASSERT(c->x && c->z && c->y && c->e && c->ea && c->eb);

  // Columns.
  c->tau = min_memory ? -1 : ilp_col(ilp, 0, INFINITY, 1, ILP_CONT);
  c->delta = min_memory ? ilp_col(ilp, 0, INFINITY, 1, ILP_CONT) : -1;
  for (int u = 0; u < U; u++) {
    c->x[u] = ilp_ncols(ilp);
    for (int s = 0; s < q->unit[u].nchoices; s++)
      ilp_col(ilp, 0, 1, 0, ILP_BIN);
  }
  c->r = calloc((size_t)U + 1, sizeof *c->r);
  IR_ASSERT(c->r);
  for (int u = 0; u < U; u++) {
    const SvUnit *un = &q->unit[u];
    c->r[u] = malloc(((size_t)un->nchoices + 1) * sizeof **c->r);
    IR_ASSERT(c->r[u]);
    for (int s = 0; s < un->nchoices; s++)
      c->r[u][s] = sv_partial_ckpt(q, u, &un->choice[s])
                       ? ilp_col(ilp, 0, un->count - 1, 0, ILP_INT) : -1;
  }
  for (int g = 0; g < G; g++) {
    c->w[g] = ilp_col(ilp, 0, INFINITY, 0, ILP_CONT);
    double lo, hi;
    beta_range(q, g, &lo, &hi);
    c->beta[g] = het ? ilp_col(ilp, lo, hi, 0, ILP_INT) : -1;
    double even = (double)q->gpus[g] / sv_problem_gpus(q);
    int P = sv_share_units(q);
    c->f[g] = !het ? -1 : q->replica_ranks && !P ? ilp_col(ilp, even, even, 0, ILP_CONT)
                                                 : ilp_col(ilp, 0, 1, 0, ILP_CONT);
    c->units[g] = -1;
    if (het && P) {   // f[g] = R[g] u[g] / P
      c->units[g] = ilp_col(ilp, 1, P, 0, ILP_INT);
      int r = ilp_row(ilp, 0, 0);
      ilp_coef(ilp, r, c->f[g], 1);
      ilp_coef(ilp, r, c->units[g], -(double)(q->gpus[g] / q->replica_ranks) / P);
    }
    for (int l = 0; l < L; l++) {
      int first = first_of_size(q, l), R = sv_replicas(q, g, l);
      c->k[g][l] = !het || (R == 1 && !q->replica_ranks) ? -1
                   : first < l ? c->k[g][first]
                               : ilp_col(ilp, q->replica_ranks ? 1 : 0, fmax(1, floor(M / R)), 0,
                                         ILP_INT);
    }
  }
  for (int g = 0; het && g < G; g++)   // whole micro-batches per replica
    for (int l = 0; l < L; l++) {
      if (c->k[g][l] < 0 || first_of_size(q, l) != l)
        continue;
      for (int u = 0; u < U; u++) {
        if (!takes_size(q, u, l))
          continue;
        int lo = ilp_row(ilp, -M, INFINITY), hi = ilp_row(ilp, -INFINITY, M);
        for (int s = 0; s < q->unit[u].nchoices; s++)
          if (first_of_size(q, q->unit[u].choice[s].layout) == l) {
            ilp_coef(ilp, lo, c->x[u] + s, -M);
            ilp_coef(ilp, hi, c->x[u] + s, M);
          }
        ilp_coef(ilp, lo, c->beta[g], 1);
        ilp_coef(ilp, hi, c->beta[g], 1);
        ilp_coef(ilp, lo, c->k[g][l], -(double)sv_replicas(q, g, l));
        ilp_coef(ilp, hi, c->k[g][l], -(double)sv_replicas(q, g, l));
      }
    }
  for (int u = 0; het && u < U; u++)
    for (int g = 0; g < G; g++) {
      c->z[u * G + g] = ilp_ncols(ilp);
      for (int s = 0; s < q->unit[u].nchoices; s++)
        ilp_col(ilp, 0, M, 0, ILP_CONT);
      c->y[u * G + g] = ilp_ncols(ilp);
      for (int s = 0; s < q->unit[u].nchoices; s++)
        ilp_col(ilp, 0, 1, 0, ILP_CONT);
    }
  lockstep_cols(ilp, q, min_memory, c);
  for (int i = 0; i < q->nedges; i++) {
    const SvEdge *ed = &q->edge[i];
    c->ea[i] = (int)layouts_of(&q->unit[ed->u]);
    c->eb[i] = (int)layouts_of(&q->unit[ed->v]);
    bool cost = false;
    for (int g = 0; g < G; g++)
      for (int a = 0; a < L; a++)
        for (int b = 0; b < L; b++)
          cost |= (c->ea[i] >> a & 1) && (c->eb[i] >> b & 1) && ed->r[g][a * L + b] > 0;
    c->e[i] = -1;
    if (!cost || min_memory)
      continue;
    c->e[i] = ilp_ncols(ilp);
    for (int a = 0; a < L; a++)
      for (int b = 0; b < L; b++)   // a pair of layouts that cannot occur is fixed at 0
        ilp_col(ilp, 0, (c->ea[i] >> a & 1) && (c->eb[i] >> b & 1), 0, ILP_CONT);
  }

  // One choice per unit; blocks left without checkpointing only under the choice.
  for (int u = 0; u < U; u++) {
    int r = ilp_row(ilp, 1, 1);
    for (int s = 0; s < q->unit[u].nchoices; s++) {
      ilp_coef(ilp, r, c->x[u] + s, 1);
      if (c->r[u][s] >= 0) {
        int rr = ilp_row(ilp, -INFINITY, 0);
        ilp_coef(ilp, rr, c->r[u][s], 1);
        ilp_coef(ilp, rr, c->x[u] + s, -(q->unit[u].count - 1));
      }
    }
  }
  // Only the first S layers swap and the K after them checkpoint: the next layer deciding
  // alone swaps only after a swapping one, and swaps or checkpoints only after one that does.
  for (int u = 0; u < U; u++) {
    int v = sv_next_layer(q, u);
    for (int swap_only = 0; v >= 0 && swap_only <= 1; swap_only++) {
      int r = ilp_row(ilp, -INFINITY, 0);
      for (int s = 0; s < q->unit[v].nchoices; s++)
        if (swap_only ? q->unit[v].choice[s].swap : sv_moves_acts(&q->unit[v].choice[s]))
          ilp_coef(ilp, r, c->x[v] + s, 1);
      for (int s = 0; s < q->unit[u].nchoices; s++)
        if (swap_only ? q->unit[u].choice[s].swap : sv_moves_acts(&q->unit[u].choice[s]))
          ilp_coef(ilp, r, c->x[u] + s, -1);
    }
  }
  // Edges (Alpa's linearization over layouts).
  for (int i = 0; i < q->nedges; i++) {
    if (c->e[i] < 0)
      continue;
    int one = ilp_row(ilp, 1, 1);
    for (int k = 0; k < L * L; k++)
      ilp_coef(ilp, one, c->e[i] + k, 1);
    for (int l = 0; l < L; l++) {
      if (c->ea[i] >> l & 1)
        edge_marginal(ilp, c, q, i, true, l);
      if (c->eb[i] >> l & 1)
        edge_marginal(ilp, c, q, i, false, l);
    }
  }
  for (int g = 0; g < G; g++) {
    // Step time: tau is at least every group's time.
    if (!min_memory) {
      int r = ilp_row(ilp, 0, INFINITY);
      ilp_coef(ilp, r, c->tau, 1);
      for (int j = 0; j < c->nlevels; j++)
        ilp_coef(ilp, r, c->level[j], -c->span[j]);
      for (int u = 0; u < U; u++) {
        double n = q->unit[u].count;
        for (int s = 0; s < q->unit[u].nchoices; s++) {
          const SvChoice *ch = &q->unit[u].choice[s];
          if (het) {
            if (!c->nlevels)
              ilp_coef(ilp, r, c->z[u * G + g] + s, -n * ch->t_micro[g] * TSCALE);
            ilp_coef(ilp, r, c->x[u] + s, -n * ch->t_step[g] * TSCALE);
          } else {
            ilp_coef(ilp, r, c->x[u] + s, -n * (ch->t_micro[g] * M + ch->t_step[g]) * TSCALE);
            if (c->r[u][s] >= 0)
              ilp_coef(ilp, r, c->r[u][s], -(ch->t_micro_plain[g] - ch->t_micro[g]) * M * TSCALE);
          }
        }
      }
      for (int i = 0; i < q->nedges; i++)
        for (int k = 0; c->e[i] >= 0 && k < L * L; k++)
          ilp_coef(ilp, r, c->e[i] + k, -q->edge[i].r[g][k] * TSCALE);
    }
    // Memory of one GPU.
    int r = ilp_row(ilp, -INFINITY, q->cap[g] * MSCALE);
    ilp_coef(ilp, r, c->w[g], 1);
    if (min_memory)
      ilp_coef(ilp, r, c->delta, -1);
    bool host = false;
    for (int u = 0; u < U; u++) {
      double n = q->unit[u].count;
      for (int s = 0; s < q->unit[u].nchoices; s++) {
        const SvChoice *ch = &q->unit[u].choice[s];
        ilp_coef(ilp, r, c->x[u] + s, n * ch->mem[g] * MSCALE);
        ilp_coef(ilp, r, het ? c->y[u * G + g] + s : c->x[u] + s, n * ch->mem_shard[g] * MSCALE);
        if (c->r[u][s] >= 0)
          ilp_coef(ilp, r, c->r[u][s], (ch->mem_plain[g] - ch->mem[g]) * MSCALE);
        host |= ch->host[g] > 0 || ch->host_shard[g] > 0;
      }
    }
    // The peak block.
    for (int u = 0; u < U; u++) {
      int rw = ilp_row(ilp, 0, INFINITY);
      ilp_coef(ilp, rw, c->w[g], 1);
      for (int s = 0; s < q->unit[u].nchoices; s++)
        ilp_coef(ilp, rw, c->x[u] + s, -q->unit[u].choice[s].peak[g] * MSCALE);
    }
    // CPU memory for offloaded state.
    if (host) {
      int rh = ilp_row(ilp, -INFINITY, q->host_cap[g] * MSCALE);
      for (int u = 0; u < U; u++) {
        double n = q->unit[u].count;
        for (int s = 0; s < q->unit[u].nchoices; s++) {
          const SvChoice *ch = &q->unit[u].choice[s];
          ilp_coef(ilp, rh, c->x[u] + s, n * ch->host[g] * MSCALE);
          if (c->r[u][s] >= 0)
            ilp_coef(ilp, rh, c->r[u][s], (ch->host_plain[g] - ch->host[g]) * MSCALE);
          int col = het ? c->y[u * G + g] + s : c->x[u] + s;
          ilp_coef(ilp, rh, col, n * ch->host_shard[g] * MSCALE);
        }
      }
    }
  }
  if (het) {
    int rb = ilp_row(ilp, M, M), rf = ilp_row(ilp, 1, 1);
    for (int g = 0; g < G; g++) {
      ilp_coef(ilp, rb, c->beta[g], 1);
      ilp_coef(ilp, rf, c->f[g], 1);
      double lo, hi;   // z between beta[g]'s least and most times x
      beta_range(q, g, &lo, &hi);
      for (int u = 0; u < U; u++) {
        int sz = ilp_row(ilp, 0, 0), sy = ilp_row(ilp, 0, 0);
        ilp_coef(ilp, sz, c->beta[g], -1);
        ilp_coef(ilp, sy, c->f[g], -1);
        for (int s = 0; s < q->unit[u].nchoices; s++) {
          int zc = c->z[u * G + g] + s, yc = c->y[u * G + g] + s;
          ilp_coef(ilp, sz, zc, 1);
          ilp_coef(ilp, sy, yc, 1);
          int r1 = ilp_row(ilp, -INFINITY, 0), r2 = ilp_row(ilp, -INFINITY, 0);
          ilp_coef(ilp, r1, zc, 1);
          ilp_coef(ilp, r1, c->x[u] + s, -hi);
          if (lo > 0) {
            int r0 = ilp_row(ilp, 0, INFINITY);
            ilp_coef(ilp, r0, zc, 1);
            ilp_coef(ilp, r0, c->x[u] + s, -lo);
          }
          ilp_coef(ilp, r2, yc, 1);
          ilp_coef(ilp, r2, c->x[u] + s, -1);
        }
      }
    }
  }
  return ilp;
}

static void cols_free(Cols *c, int nunits) {
  for (int u = 0; u < nunits; u++)
    free(c->r[u]);
  free(c->r);
  free(c->x), free(c->z), free(c->y), free(c->e), free(c->ea), free(c->eb);
}

// mtc compile's state shares where even ones do not fit (sv_share_units): mtc plan's (each
// group filled alike), rounded to whole parts per replica, the leftover units to the groups
// that lost the most; where those do not fit either, the integer program's (ilp: its f[g]).
static void whole_parts(const SvProblem *p, SvSolution *s, const double *ilp) {
  SvProblem free_shares = *p;
  free_shares.replica_ranks = 0;
  sv_evaluate(&free_shares, s, true);
  int P = sv_share_units(p), G = p->ngroups, left = P, units[SV_MAXGROUPS], R[SV_MAXGROUPS];
  for (int g = 0; g < G; g++) {
    R[g] = p->gpus[g] / p->replica_ranks;
    units[g] = (int)fmax(1, floor(s->share[g] * P / R[g]));
    left -= R[g] * units[g];
  }
  for (bool more = true; left > 0 && more;) {
    int best = -1;
    double most = -INFINITY;
    for (int g = 0; g < G; g++) {
      double lost = s->share[g] * P / R[g] - units[g];
      if (R[g] <= left && lost > most)
        best = g, most = lost;
    }
    more = best >= 0;
    if (more)
      units[best]++, left -= R[best];
  }
  for (int g = 0; g < G; g++)
    s->share[g] = left ? ilp[g] : (double)R[g] * units[g] / P;
  sv_evaluate(p, s, false);
  if (!s->feasible && !left) {
    memcpy(s->share, ilp, (size_t)G * sizeof *ilp);
    sv_evaluate(p, s, false);
  }
}

// The column values of a solution of q (picks in q's indices).
static double *point(const SvProblem *q, const Cols *c, const SvSolution *s, int ncols) {
  double *x = calloc((size_t)ncols + 1, sizeof *x);
  IR_ASSERT(x);
  int G = q->ngroups, L = q->nlayouts;
  x[c->tau] = s->time * TSCALE;
  for (int u = 0; u < q->nunits; u++) {
    x[c->x[u] + s->pick[u]] = 1;
    if (c->r[u][s->pick[u]] >= 0)
      x[c->r[u][s->pick[u]]] = s->nplain[u];
    for (int g = 0; g < G && G > 1; g++) {
      x[c->z[u * G + g] + s->pick[u]] = (double)s->batch[g];
      x[c->y[u * G + g] + s->pick[u]] = s->share[g];
    }
  }
  if (c->most >= 0)   // K: every replica's micro-batches
    x[c->most] = (double)s->batch[0] * q->replica_ranks / q->gpus[0] + sv_ghosts(q, s, 0);
  if (c->nlevels) {   // each level's longest micro-step
    double k[SV_MAXGROUPS], level[SV_MAXGROUPS];
    lockstep_levels(q, k, level);
    for (int j = 0; j < c->nlevels; j++)
      for (int g = 0; g < G; g++) {
        double t = 0, R = (double)(q->gpus[g] / q->replica_ranks);
        for (int u = 0; u < q->nunits; u++) {
          const SvChoice *ch = &q->unit[u].choice[s->pick[u]];
          t += q->unit[u].count * (k[g] >= level[j] ? R * ch->t_micro[g] : ch->t_ghost[g]);
        }
        x[c->level[j]] = fmax(x[c->level[j]], t * TSCALE);
      }
  }
  for (int g = 0; g < G; g++) {
    double w = 0;
    for (int u = 0; u < q->nunits; u++)
      w = fmax(w, q->unit[u].choice[s->pick[u]].peak[g] * MSCALE);
    x[c->w[g]] = w;
    if (G > 1) {
      x[c->beta[g]] = (double)s->batch[g];
      x[c->f[g]] = s->share[g];
      if (c->units[g] >= 0)
        x[c->units[g]] = round(s->share[g] * sv_share_units(q) / (q->gpus[g] / q->replica_ranks));
    }
    for (int l = 0; l < q->nlayouts; l++)
      if (c->k[g][l] >= 0 && first_of_size(q, l) == l)
        x[c->k[g][l]] = (double)(s->batch[g] / sv_replicas(q, g, l));
  }
  for (int i = 0; i < q->nedges; i++) {
    if (c->e[i] < 0)
      continue;
    int a = q->unit[q->edge[i].u].choice[s->pick[q->edge[i].u]].layout;
    int b = q->unit[q->edge[i].v].choice[s->pick[q->edge[i].v]].layout;
    x[c->e[i] + a * L + b] = 1;
  }
  return x;
}

static const char *status_name(IlpStatus s, double gap) {
  switch (s) {
  case ILP_OPTIMAL: return gap > 0 ? "optimal within the gap" : "optimal";
  case ILP_FEASIBLE: return "time limit (best found)";
  case ILP_INFEASIBLE: return "infeasible";
  case ILP_NOSOLUTION: return "time limit (nothing found)";
  case ILP_CUTOFF: return "stopped (no plan faster than another mesh's)";
  default: return "error";
  }
}

static int solve_one(const SvProblem *p, const SvSolveOptions *o, SvSolution *best,
                     SvSolveStats *st, IrDiag *d) {
  memset(st, 0, sizeof *st);
  int **map = calloc((size_t)p->nunits + 1, sizeof *map);
  int **keep = calloc((size_t)p->nunits + 1, sizeof *keep);
  IR_ASSERT(map && keep);
  SvProblem *q = sv_problem_prune(p, !o->min_memory, map, keep);
  best->feasible = false;
  best->time = INFINITY;
  bool empty = false;
  for (int u = 0; u < p->nunits; u++) {
    st->choices += p->unit[u].nchoices;
    st->choices_kept += q->unit[u].nchoices;
    empty |= q->unit[u].nchoices == 0;
  }
  int rc = 0;
  if (empty) {   // some block fits in no way at all
    st->status = "infeasible";
  } else {
    Cols c = {0};
    Ilp *ilp = build(q, o->min_memory, &c);
    st->vars = ilp_ncols(ilp);
    st->rows = ilp_nrows(ilp);
    st->binaries = ilp_count(ilp, ILP_BIN);
    st->ints = ilp_count(ilp, ILP_INT);
    double *inc = NULL;
    if (o->incumbent && o->incumbent->feasible && !o->min_memory) {
      SvSolution s = sv_solution_new(q);
      sv_solution_copy(&s, o->incumbent, p->nunits);
      bool ok = true;
      for (int u = 0; u < p->nunits; u++) {
        // a choice no worse replaces a pruned one with all its blocks alike
        s.pick[u] = map[u][o->incumbent->pick[u]];
        ok &= s.pick[u] >= 0;
        if (!ok || keep[u][s.pick[u]] != o->incumbent->pick[u])
          s.nplain[u] = 0;
      }
      if (ok) {
        sv_evaluate(q, &s, false);
        inc = s.feasible && sv_ckpt_ordered(q, &s) ? point(q, &c, &s, st->vars) : NULL;
      }
      sv_solution_free(&s);
    }
    IlpOptions io = {.mip_gap = o->mip_gap, .time_limit = o->time_limit, .presolve = true,
                     .cuts = true, .verbose = o->verbose, .incumbent = inc,
                     .cutoff = o->min_memory ? 0 : o->cutoff * TSCALE};
    IlpResult r;
    rc = ilp_solve(ilp, &io, &r);
    st->nonzeros = ilp_nnz(ilp);
    st->seconds = r.seconds;
    st->gap = r.gap;
    st->seeded = r.seeded;
    st->status = status_name(r.status, r.gap);
    st->timed_out = r.status == ILP_FEASIBLE || r.status == ILP_NOSOLUTION;
    st->cut_off = r.status == ILP_CUTOFF;
    if (rc)
      ir_error(d, (IrLoc){0}, "plan: the integer program failed: %s", r.msg);
    if (r.x) {
      int G = q->ngroups;
      for (int u = 0; u < p->nunits; u++) {
        int k = 0;
        for (int s = 1; s < q->unit[u].nchoices; s++)
          if (r.x[c.x[u] + s] > r.x[c.x[u] + k])
            k = s;
        best->pick[u] = keep[u][k];
        best->nplain[u] = c.r[u][k] >= 0 ? (int)llround(r.x[c.r[u][k]]) : 0;
      }
      best->batch[0] = p->micro_total;
      best->share[0] = 1;
      if (G > 1) {
        int64_t sum = 0;
        for (int g = 0; g < G; g++) {
          best->batch[g] = llround(r.x[c.beta[g]]);
          best->share[g] = fmax(0, r.x[c.f[g]]);
          sum += best->batch[g];
        }
        best->batch[G - 1] += p->micro_total - sum;
      }
      sv_evaluate(p, best, false);
      double units[SV_MAXGROUPS];   // mtc compile's whole parts, kept where even ones do not fit
      memcpy(units, best->share, sizeof units);
      if (!best->feasible || G > 1)   // rounding; and balanced shares read better
        sv_evaluate(p, best, true);
      if (!best->feasible && G > 1 && sv_share_units(p))
        whole_parts(p, best, units);
      if (o->min_memory) {
        best->time = r.x[c.delta] / MSCALE;
        best->feasible = true;
      }
    }
    ilp_result_free(&r);
    free(inc);
    ilp_free(ilp);
    cols_free(&c, q->nunits);
  }
  for (int u = 0; u < p->nunits; u++)
    free(map[u]), free(keep[u]);
  free(map), free(keep);
  sv_problem_free(q);
  return rc;
}

// ---- choices that collect every micro-batch -----------------------------------------------------
//
// mtc compile's program on several groups gains, with ZeRO 2 and 3 and gradient offload, choices
// whose collectives (or copies) run every micro-batch, ghosts included: about three times the
// choices, and a program that takes GLPK ten times as long to prove. A plan with one of them
// runs its micro-steps in lockstep (sv_lockstep_time), which is linear only where the split of
// the batch over the groups is fixed. Each such choice has a twin that collects once a step
// (ZeRO-1, or the optimizer state offloaded alone: the same layout, checkpointing and offload
// share). Most only trade time for memory: where the twin is no slower for any number of
// micro-batches a group may run (its time is linear in them, so the two ends decide), the
// choice can only win where memory binds, since lockstep only adds to a plan's time. So the
// program is first solved without them and without memory limits: if that plan fits (its state
// shared as compile shares it) and every such choice has a twin no slower, no plan is faster.
// Otherwise the whole program is solved once per split of the batch over the groups where
// there are few (solve_splits): without those choices, then with them in lockstep.

// The twin of a choice that collects every micro-batch, or -1.
static int twin(const SvUnit *u, const SvChoice *c) {
  for (int s = 0; s < u->nchoices; s++) {
    const SvChoice *t = &u->choice[s];
    if (t->layout == c->layout && t->ckpt == c->ckpt && t->swap == c->swap && t->zero == 1 &&
        t->offload == c->offload && !t->grads && !t->params)
      return s;
  }
  return -1;
}

// Is choice s of unit u one that collects every micro-batch and has no twin as fast on every
// group?
static bool faster_than_twin(const SvProblem *p, int u, int s) {
  const SvUnit *un = &p->unit[u];
  const SvChoice *c = &un->choice[s];
  if (!sv_pays_ghosts(p, c))
    return false;
  int k = twin(un, c);
  if (k < 0)
    return true;
  const SvChoice *t = &un->choice[k];
  for (int g = 0; g < p->ngroups; g++) {
    double lo, hi;
    beta_range(p, g, &lo, &hi);
    for (int end = 0; end < 2; end++) {
      double b = end ? hi : lo;
      if (t->t_micro[g] * b + t->t_step[g] > (c->t_micro[g] * b + c->t_step[g]) * (1 + 1e-12))
        return true;
    }
  }
  return false;
}

static bool once_a_step(const SvProblem *p, int u, int s) {
  return !sv_pays_ghosts(p, &p->unit[u].choice[s]);
}

// The splits of mtc compile's M micro-batches over the groups (each group's a multiple of its
// replicas, at least one each) into out, at most max; returns how many there are.
static int splits(const SvProblem *p, int g, int64_t left, int64_t *cur,
                  int64_t (*out)[SV_MAXGROUPS], int n, int max) {
  int64_t r = p->gpus[g] / p->replica_ranks;
  for (int64_t b = r; b <= left; b += r) {
    if (g == p->ngroups - 1 && b != left)
      continue;
    cur[g] = b;
    if (g < p->ngroups - 1)
      n = splits(p, g + 1, left - b, cur, out, n, max);
    else if (n++ < max)
      memcpy(out[n - 1], cur, SV_MAXGROUPS * sizeof *cur);
  }
  return n;
}

// Solves p once per split of its micro-batches (n of them, the first first), each with the
// fastest so far as its cutoff: with the batch fixed, the products of batch and choice are
// constants, and each program is as tight as one group's. Where p has choices that collect
// every micro-batch, each split is solved twice: without them (once, the subset `once` with
// keep its choices' indices in p), then with them and its micro-steps in lockstep, which
// prices a plan without them too high but never one with them too low. *best may come in
// feasible: a plan to beat.
static int solve_splits(const SvProblem *p, const SvProblem *once, int **keep,
                        const SvSolveOptions *o, SvSolution *best, SvSolveStats *st, IrDiag *d,
                        int64_t (*split)[SV_MAXGROUPS], int n) {
  SvSolution s = sv_solution_new(p);
  SvSolveStats si;
  double seconds = 0;
  bool timed_out = false, cut_off = false, found = false;
  memset(st, 0, sizeof *st);
  int rc = 0;
  for (int i = 0; i < n && !rc; i++)
    for (int pass = once ? 0 : 1; pass < 2 && !rc; pass++) {
      SvProblem q = pass ? *p : *once;
      memcpy(q.fixed_batch, split[i], sizeof q.fixed_batch);
      q.lockstep = once && pass;
      SvSolveOptions oi = *o;
      if (best->feasible && (oi.cutoff <= 0 || best->time < oi.cutoff))
        oi.cutoff = best->time * (1 - o->mip_gap);   // (to beat by more than the gap)
      if (oi.incumbent && (memcmp(oi.incumbent->batch, split[i], sizeof q.fixed_batch) ||
                           !pass))
        oi.incumbent = NULL;
      oi.time_limit = o->time_limit - seconds;
      if (oi.time_limit <= 0) {
        timed_out = true;
        break;
      }
      rc = solve_one(&q, &oi, &s, &si, d);
      seconds += si.seconds;
      timed_out |= si.timed_out;
      cut_off |= si.cut_off;   // (none faster than the cutoff there)
      if (!rc && s.feasible && !pass) {   // the same plan in p's indices, priced by p
        for (int u = 0; u < p->nunits; u++)
          s.pick[u] = keep[u][s.pick[u]];
        sv_evaluate(p, &s, false);
      }
      if (!rc && s.feasible && s.time < best->time) {
        sv_solution_copy(best, &s, p->nunits);
        *st = si;
        found = true;
      }
      if (i == 0 && !found)
        *st = si;
    }
  sv_solution_free(&s);
  st->seconds = seconds;
  st->timed_out = timed_out;
  // nothing fits faster than the caller's cutoff: some splits cut off, the others infeasible
  st->cut_off = !best->feasible && cut_off && o->cutoff > 0;
  if (st->timed_out && best->feasible)
    st->status = status_name(ILP_FEASIBLE, 0);
  else if (st->cut_off)
    st->status = status_name(ILP_CUTOFF, 0);
  else if (!best->feasible && !st->timed_out)
    st->status = status_name(ILP_INFEASIBLE, 0);
  else if (!found && best->feasible)
    st->status = status_name(ILP_OPTIMAL, 0);   // (the plan that came in)
  return rc;
}

// The first solve (above): p without the choices that collect every micro-batch (`once`, keep
// its choices' indices in p), and without memory limits. True when that settles p (*rc its
// result): p has no such choice (p solved itself), nothing beats the cutoff, or the plan fits
// and every such choice has a twin no slower; otherwise its split of the batch in first, and in
// *best the plan where it fits.
static bool solved_fast(const SvProblem *p, const SvProblem *once, int **keep,
                        const SvSolveOptions *o, SvSolution *best, SvSolveStats *st,
                        IrDiag *d, int *rc, int64_t *first) {
  bool dropped = false, twins = true;
  for (int u = 0; u < p->nunits; u++) {
    dropped |= once->unit[u].nchoices < p->unit[u].nchoices;
    for (int s = 0; s < p->unit[u].nchoices; s++)
      twins &= !faster_than_twin(p, u, s);
  }
  best->feasible = false;
  best->time = INFINITY;
  if (!dropped) {
    *rc = solve_one(p, o, best, st, d);
    return true;
  }
  SvProblem q = *once;   // (its units and edges shared)
  for (int g = 0; g < q.ngroups; g++)
    q.cap[g] = q.host_cap[g] = INFINITY;
  SvSolveOptions oq = *o;
  oq.incumbent = NULL;
  SvSolution s = sv_solution_new(&q);
  *rc = solve_one(&q, &oq, &s, st, d);
  st->choices = 0;   // the problem's, of which the first solve kept choices_kept
  for (int u = 0; u < p->nunits; u++)
    st->choices += p->unit[u].nchoices;
  bool done = *rc || st->cut_off;   // (nothing faster than the cutoff, even without limits)
  if (!done && s.feasible) {
    for (int u = 0; u < p->nunits; u++)
      best->pick[u] = keep[u][s.pick[u]], best->nplain[u] = s.nplain[u];
    memcpy(best->batch, s.batch, sizeof s.batch);
    memcpy(first, s.batch, sizeof s.batch);
    double ilp[SV_MAXGROUPS];
    memcpy(ilp, s.share, sizeof ilp);
    sv_evaluate(p, best, true);   // compile's shares: even, or whole parts where even do not fit
    if (!best->feasible && sv_share_units(p))
      whole_parts(p, best, ilp);
    done = best->feasible && twins;
    if (!best->feasible)
      best->time = INFINITY;
  }
  sv_solution_free(&s);
  return done;
}

int sv_solve(const SvProblem *p, const SvSolveOptions *o, SvSolution *best, SvSolveStats *st,
             IrDiag *d) {
  if (o->min_memory || p->ngroups < 2 || !p->replica_ranks)
    return solve_one(p, o, best, st, d);
  int rc;
  int64_t first[SV_MAXGROUPS] = {0}, cur[SV_MAXGROUPS] = {0};
  int **keep = calloc((size_t)p->nunits + 1, sizeof *keep);
  IR_ASSERT(keep);
  SvProblem *once = sv_problem_subset(p, once_a_step, keep);
  if (!solved_fast(p, once, keep, o, best, st, d, &rc, first)) {
    // The whole program, once per split of the batch where there are few, the first plan's
    // first; a plan that fit from the first solve is the one to beat.
    enum { MAXSPLITS = 64 };
    int64_t(*split)[SV_MAXGROUPS] = calloc(MAXSPLITS, sizeof *split);
    IR_ASSERT(split);
    int n = 1;   // (one split where the groups' micro-batch sizes fixed it)
    if (p->fixed_batch[0] > 0)
      memcpy(split[0], p->fixed_batch, sizeof cur);
    else
      n = splits(p, 0, p->micro_total, cur, split, 0, MAXSPLITS);
    for (int i = 1; i < n && n <= MAXSPLITS; i++)
      if (!memcmp(split[i], first, sizeof cur)) {
        memcpy(split[i], split[0], sizeof cur);
        memcpy(split[0], first, sizeof cur);
      }
    if (n <= MAXSPLITS) {
      rc = solve_splits(p, once, keep, o, best, st, d, split, n);
    } else {   // (the free split: such choices on as many micro-batches on every replica)
      SvSolution fit = sv_solution_new(p);
      sv_solution_copy(&fit, best, p->nunits);
      rc = solve_one(p, o, best, st, d);
      if (!rc && fit.feasible && fit.time < best->time)
        sv_solution_copy(best, &fit, p->nunits);
      sv_solution_free(&fit);
    }
    free(split);
  }
  for (int u = 0; u < p->nunits; u++)
    free(keep[u]);
  free(keep);
  sv_problem_free(once);
  return rc;
}

// ---- baselines ----------------------------------------------------------------------------------

typedef struct Fixed {
  char name[48];
  int tp, q, zero, offload;
  bool grads;   // the gradients offloaded too
} Fixed;

static int find_layout(const SvProblem *p, int tp, int q) {
  for (int l = 0; l < p->nlayouts; l++)
    if (p->layout[l].tp == tp && p->layout[l].q == q)
      return l;
  return -1;
}

// The choice of unit u closest to the fixed strategy: the stage and offload
// it asks for where the unit has them (no parameters: none; one replica:
// ZeRO changes nothing).
static int fixed_choice(const SvUnit *u, int layout, const Fixed *f, bool ckpt) {
  int best = -1, score = -1;
  for (int s = 0; s < u->nchoices; s++) {
    const SvChoice *c = &u->choice[s];
    if (c->layout != layout || c->swap || c->params)   // no baseline offloads parameters
      continue;
    int sc = (c->zero == f->zero) * 4 + (c->offload == f->offload && c->grads == f->grads) * 2 +
             (c->ckpt == ckpt);
    if (sc > score)
      best = s, score = sc;
  }
  return best;
}

// Micro-batches and state in proportion to the groups' GPUs, the micro-batches
// whole per replica of layout l: each replica the same number, then the rest a
// group's replicas at a time while it lasts (sv_evaluate finds a split that
// leaves some over infeasible).
static void even_split(const SvProblem *p, int l, SvSolution *s) {
  int gpus = sv_problem_gpus(p), replicas = 0;
  for (int g = 0; g < p->ngroups; g++)
    replicas += sv_replicas(p, g, l);
  int64_t sum = 0;
  for (int g = 0; g < p->ngroups; g++) {
    s->batch[g] = p->micro_total / replicas * sv_replicas(p, g, l);
    s->share[g] = (double)p->gpus[g] / gpus;
    sum += s->batch[g];
  }
  for (int g = 0; g < p->ngroups; g++)
    while (p->micro_total - sum >= sv_replicas(p, g, l)) {
      s->batch[g] += sv_replicas(p, g, l);
      sum += sv_replicas(p, g, l);
    }
  s->batch[p->ngroups - 1] += p->micro_total - sum;
}

// b = the fixed strategy f on layout l, with checkpointing everywhere when
// that is what fits (or fits better). b->need: bytes over capacity, if any.
// A unit that cannot take layout l (its attention heads do not divide the
// degree) makes b one that does not apply (b->why says why).
static void fixed_plan(const SvPlan *pl, const Fixed *f, int l, SvBaseline *b) {
  const SvProblem *p = pl->prob;
  memcpy(b->name, f->name, sizeof b->name);
  b->sol = sv_solution_new(p);
  b->ckpt = false;
  b->why[0] = 0;
  b->need = b->host_need = 0;
  for (int u = 0; u < p->nunits; u++) {
    char why[64] = "no choice on this layout";
    if (fixed_choice(&p->unit[u], l, f, false) < 0) {
      sv_layout_divides(&pl->nums[u], p->layout[l], why, sizeof why);
      snprintf(b->why, sizeof b->why, "%s: %s", p->unit[u].name, why);
      for (int k = 0; k < p->nunits; k++)
        b->sol.pick[k] = -1;
      return;
    }
  }
  SvSolution alt = sv_solution_new(p);
  for (int ck = 0; ck <= 1; ck++) {
    SvSolution *s = ck ? &alt : &b->sol;
    even_split(p, l, s);
    for (int u = 0; u < p->nunits; u++)
      s->pick[u] = fixed_choice(&p->unit[u], l, f, ck);
    sv_evaluate(p, s, false);
  }
  double m0 = 0, m1 = 0;
  for (int g = 0; g < p->ngroups; g++)
    m0 = fmax(m0, b->sol.mem[g] - p->cap[g]), m1 = fmax(m1, alt.mem[g] - p->cap[g]);
  if (!b->sol.feasible && (alt.feasible || m1 < m0)) {
    sv_solution_copy(&b->sol, &alt, p->nunits);
    b->ckpt = true;
    m0 = m1;
  }
  sv_solution_free(&alt);
  b->need = b->sol.feasible ? 0 : fmax(m0, 0);
  b->host_need = 0;
  for (int g = 0; g < p->ngroups; g++)
    b->host_need = fmax(b->host_need, b->sol.host[g] - p->host_cap[g]);
}

// a is a better baseline than b: it applies and b not, it fits and is faster, or neither fits
// and a is closer.
static bool better(const SvBaseline *a, const SvBaseline *b) {
  if (!a->why[0] != !b->why[0])
    return !a->why[0];
  if (a->sol.feasible != b->sol.feasible)
    return a->sol.feasible;
  return a->sol.feasible ? a->sol.time < b->sol.time : a->need < b->need;
}

// Pure DP, ZeRO-3, Megatron with TP over a node, the best 2D grid, ZeRO-3
// with offload: each the same for every block, priced by the same model. One
// that the cluster reduces to an earlier one (one GPU: ZeRO-3 is DP) is left out.
static void baselines(SvPlan *pl) {
  const SvProblem *p = pl->prob;
  const SvCluster *cl = &pl->cfg.cluster;
  int gpus = sv_cluster_gpus(cl);
  int tp = cl->group[0].per_node < gpus ? cl->group[0].per_node : gpus;
  Fixed defs[] = {
      {"DP", 1, 1, 0, 0, false},
      {"ZeRO-3", 1, 1, 3, 0, false},
      {"", tp, 1, 0, 0, false},
      {"", 1, 2, 0, 0, false},
      {"ZeRO-3 + offload", 1, 1, 3, 100, true},   // DeepSpeed's: optimizer state and gradients
  };
  snprintf(defs[2].name, sizeof defs[2].name, "Megatron TP=%d", tp);
  for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
    Fixed *f = &defs[i];
    SvBaseline *b = &pl->baseline[pl->nbaselines];
    if (f->q > 1) {   // 2D: the grid that does best
      b->sol.pick = NULL;
      for (int q = 2; q <= 8; q++) {
        int l = find_layout(p, 1, q);
        if (l < 0)
          continue;
        SvBaseline t;
        snprintf(f->name, sizeof f->name, "2D %dx%d", q, q);
        fixed_plan(pl, f, l, &t);
        if (!b->sol.pick || better(&t, b)) {
          sv_solution_free(&b->sol);
          *b = t;
        } else {
          sv_solution_free(&t.sol);
        }
      }
      if (!b->sol.pick)
        continue;
    } else {
      int l = find_layout(p, f->tp, f->q);
      if (l < 0)
        continue;
      fixed_plan(pl, f, l, b);
    }
    bool dup = false;
    for (int k = 0; k < pl->nbaselines && !dup && !b->why[0]; k++)
      dup = !memcmp(pl->baseline[k].sol.pick, b->sol.pick, (size_t)p->nunits * sizeof(int));
    if (dup)
      sv_solution_free(&b->sol);
    else
      pl->nbaselines++;
  }
}

// Baseline b's place in baselines()' list (2D grids of any side are one).
static int baseline_kind(const SvBaseline *b) {
  static const char *const prefix[] = {"DP", "ZeRO-3", "Megatron", "2D", "ZeRO-3 + offload"};
  for (int k = 4; k >= 0; k--)   // "ZeRO-3 + offload" before "ZeRO-3"
    if (!strncmp(b->name, prefix[k], strlen(prefix[k])))
      return k;
  return 5;
}

static int by_kind(const void *a, const void *b) {
  return baseline_kind(a) - baseline_kind(b);
}

void sv_plan_merge_baselines(SvPlan *to, SvPlan *from) {
  for (int i = 0; i < from->nbaselines; i++) {
    SvBaseline *b = &from->baseline[i];
    int k = 0;
    while (k < to->nbaselines && baseline_kind(&to->baseline[k]) != baseline_kind(b))
      k++;
    if (k == to->nbaselines && k < SV_MAXBASELINES) {
      to->baseline[to->nbaselines++] = *b;
    } else if (k < to->nbaselines && better(b, &to->baseline[k])) {
      sv_solution_free(&to->baseline[k].sol);
      to->baseline[k] = *b;
    } else {
      sv_solution_free(&b->sol);
    }
  }
  from->nbaselines = 0;
  qsort(to->baseline, (size_t)to->nbaselines, sizeof *to->baseline, by_kind);
}

// ---- when nothing fits --------------------------------------------------------------------------

SvByteUnit sv_unit(double ref) {
  if (fabs(ref) >= 0.1 * GiB)
    return (SvByteUnit){GiB, "GiB"};
  if (fabs(ref) >= 0.1 * 1024 * 1024)
    return (SvByteUnit){1024 * 1024, "MiB"};
  return (SvByteUnit){1024, "KiB"};
}

const char *sv_bytes_str(char *buf, double bytes) {
  SvByteUnit u = sv_unit(bytes);
  double v = bytes / u.bytes;
  // three significant digits below ten of the unit (0.166 MiB, 4.20 GiB), a decimal above: two
  // sizes a message compares (what fits, what is needed) read apart
  snprintf(buf, 32, fabs(v) >= 10 ? "%.1f %s" : fabs(v) >= 1 ? "%.2f %s" : "%.3f %s", v, u.name);
  return buf;
}

// The largest micro-batch that divides the global batch and fits (0: none),
// by bisection: memory grows with the micro-batch.
static int64_t largest_micro_batch(SvPlan *pl, IrDiag *d) {
  SvModel *m = pl->model;
  if (m->batch_sym < 0)
    return -1;
  IrGraph *g = m->g;
  int64_t saved = g->syms.value[m->batch_sym], global = pl->global_batch;
  // the divisors of the global batch below the micro-batch, ascending: pairs (b, global / b)
  // for b up to sqrt(global), so 10^12 takes 10^6 steps (no number below 2^40 has 8192 divisors)
  // (the small ones fill cand from the front, their cofactors from the back, both ascending)
  enum { MAXCAND = 8192 };
  int64_t *cand = malloc(MAXCAND * sizeof *cand);
  IR_ASSERT(cand);
  int n = 0, nhigh = 0;
  for (int64_t b = 1; b <= global / b && n + nhigh < MAXCAND - 1; b++) {
    if (global % b)
      continue;
    if (b < pl->micro_batch)
      cand[n++] = b;
    if (global / b != b && global / b < pl->micro_batch)
      cand[MAXCAND - 1 - nhigh++] = global / b;
  }
  memmove(cand + n, cand + MAXCAND - nhigh, (size_t)nhigh * sizeof *cand);
  n += nhigh;
  int lo = 0, hi = n - 1, found = -1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    SvConfig cfg = pl->cfg;
    cfg.micro_batch = cand[mid];
    symtab_bind(&g->syms, m->batch_sym, cand[mid]);
    SvNum *nums = NULL;
    SvProblem *p = sv_problem_build(m, &cfg, &nums, d);
    bool fits = false;
    if (p) {
      SvSolution s = sv_solution_new(p);
      SvSolveStats st;
      SvSolveOptions o = {.mip_gap = 1e-3, .time_limit = 5, .min_memory = true};
      fits = !sv_solve(p, &o, &s, &st, d) && s.feasible && s.time <= 1;
      sv_solution_free(&s);
    }
    sv_problem_free(p);
    free(nums);
    if (fits)
      found = mid, lo = mid + 1;
    else
      hi = mid - 1;
  }
  symtab_bind(&g->syms, m->batch_sym, saved);
  int64_t best = found < 0 ? 0 : cand[found];
  free(cand);
  return best;
}

// The bytes over capacity of the leanest plan (min_memory's objective) with
// unlimited CPU memory for offloaded state; INFINITY when none is found.
static double over_without_host_limit(SvPlan *pl, IrDiag *d) {
  SvConfig cfg = pl->cfg;
  for (int g = 0; g < cfg.cluster.ngroups; g++)
    cfg.cluster.group[g].dev.host_mem = 1e18;
  SvNum *nums = NULL;
  SvProblem *p = sv_problem_build(pl->model, &cfg, &nums, d);
  double over = INFINITY;
  if (p) {
    SvSolution s = sv_solution_new(p);
    SvSolveStats st;
    SvSolveOptions o = {.mip_gap = 1e-3, .time_limit = 10, .min_memory = true};
    if (!sv_solve(p, &o, &s, &st, d) && s.feasible)
      over = s.time;
    sv_solution_free(&s);
  }
  sv_problem_free(p);
  free(nums);
  return over;
}

static void explain(SvPlan *pl, IrDiag *d) {
  const SvProblem *p = pl->prob;
  char a[48], b[32], c[32], e[32], f[32], h[32], k[32], l[32];
  SvSolution s = sv_solution_new(p);
  SvSolveStats st;
  SvSolveOptions o = {.mip_gap = 1e-3, .time_limit = 10, .min_memory = true};
  int n = 0;
  size_t cap = sizeof pl->why;
  bool none = sv_solve(p, &o, &s, &st, d) || !s.feasible;
  pl->need = none ? HUGE_VAL : s.time;
  if (none) {
    n = snprintf(pl->why, cap, "no plan fits: not even with unlimited GPU memory (CPU memory "
                               "for offloaded state: %s per GPU)",
                 sv_bytes_str(a, p->host_cap[0]));
  } else {
    // The leanest plan's memory on the group that binds.
    int worst = 0;
    for (int g = 1; g < p->ngroups; g++)
      if (s.mem[g] - p->cap[g] > s.mem[worst] - p->cap[worst])
        worst = g;
    double cat[SV_NM + 1] = {0};
    for (int u = 0; u < p->nunits; u++) {
      SvCost x;
      sv_plan_unit_cost(pl, &s, u, worst, &x);
      for (int i = 0; i < SV_NM; i++)
        cat[i] += x.mem[i] + s.share[worst] * x.mem_shard[i];
      cat[SV_NM] = fmax(cat[SV_NM], x.peak);
    }
    const SvGroup *gr = &pl->cfg.cluster.group[worst];
    n = snprintf(pl->why, cap,
                 "no plan fits in the %s usable per GPU (%s of each %s minus a %s reserve): "
                 "GPU memory binds. The leanest plan needs %s per GPU (model states %s, "
                 "activations %s, buffers %s), so GPUs with %s would do",
                 sv_bytes_str(a, p->cap[worst]), sv_bytes_str(b, gr->dev.mem), gr->dev.name, sv_bytes_str(c, gr->reserve),
                 sv_bytes_str(e, p->cap[worst] + s.time),
                 sv_bytes_str(f, cat[SV_M_PARAMS] + cat[SV_M_GRADS] + cat[SV_M_OPT]),
                 sv_bytes_str(h, cat[SV_M_ACT]), sv_bytes_str(k, cat[SV_NM]),
                 sv_bytes_str(l, p->cap[worst] + s.time + gr->reserve));
    // CPU memory binds too when more of it would make the leanest plan leaner
    double over = over_without_host_limit(pl, d);
    if (n < (int)cap && over < s.time - 1e-3 * fabs(s.time) - 1) {
      if (p->host_cap[worst] > 0)
        snprintf(a, sizeof a, "%s per GPU", sv_bytes_str(c, p->host_cap[worst]));
      n += snprintf(pl->why + n, cap - (size_t)n,
                    "; CPU memory binds too (%s for offloaded state): with unlimited CPU memory "
                    "the leanest plan would need %s per GPU",
                    p->host_cap[worst] > 0 ? a : "none", sv_bytes_str(b, p->cap[worst] + over));
    }
  }
  sv_solution_free(&s);
  int64_t mb = largest_micro_batch(pl, d);
  if (n < (int)cap && mb > 0)
    snprintf(pl->why + n, cap - (size_t)n, "; the largest micro-batch that fits is %lld (now %lld)",
             (long long)mb, (long long)pl->micro_batch);
  else if (n < (int)cap && mb == 0)
    snprintf(pl->why + n, cap - (size_t)n, "; no smaller micro-batch fits either (now %lld)",
             (long long)pl->micro_batch);
}

// ---- sv_plan ------------------------------------------------------------------------------------

SvConfig sv_default_config(void) {
  SvConfig c = {.share_blocks = true, .seq_parallel = false,
                .mip_gap = 1e-3, .time_limit = 20};
  sv_cluster_simple(&c.cluster, "H100-80GB", 1, 0, 0, 0, 0, NULL);
  return c;
}

const SvNum *sv_plan_num(const SvPlan *p, int u, int g) {
  return &p->nums[(p->cfg.group_rows[0] ? g : 0) * p->prob->nunits + u];
}

void sv_plan_cost(const SvPlan *p, int u, int c, int g, SvCost *out) {
  SvCtx x = {&p->cfg, sv_cluster_gpus(&p->cfg.cluster), p->prob->micro_total};
  const SvChoice *ch = &p->prob->unit[u].choice[c];
  sv_cost(&x, sv_plan_num(p, u, g), p->prob->layout[ch->layout], ch->ckpt, ch->swap, ch->zero,
          ch->offload, ch->grads, ch->params, g, out);
}

void sv_plan_unit_cost(const SvPlan *p, const SvSolution *s, int u, int g, SvCost *out) {
  SvCtx x = {&p->cfg, sv_cluster_gpus(&p->cfg.cluster), p->prob->micro_total};
  const SvChoice *ch = &p->prob->unit[u].choice[s->pick[u]];
  SvLayout l = p->prob->layout[ch->layout];
  double k = sv_ckpt_blocks(p->prob, s, u) + sv_swap_blocks(p->prob, s, u);
  double n = p->prob->unit[u].count;
  SvCost a, b;   // a checkpointed (or swapped) block, one without
  const SvNum *num = sv_plan_num(p, u, g);
  sv_cost(&x, num, l, !ch->swap, ch->swap, ch->zero, ch->offload, ch->grads, ch->params, g, &a);
  sv_cost(&x, num, l, false, false, ch->zero, ch->offload, ch->grads, ch->params, g, &b);
  memset(out, 0, sizeof *out);
  for (int i = 0; i < SV_NT; i++) {
    out->t_micro[i] = k * a.t_micro[i] + (n - k) * b.t_micro[i];
    out->t_step[i] = k * a.t_step[i] + (n - k) * b.t_step[i];
    out->t_ghost[i] = k * a.t_ghost[i] + (n - k) * b.t_ghost[i];
  }
  for (int i = 0; i < SV_NM; i++) {
    out->mem[i] = k * a.mem[i] + (n - k) * b.mem[i];
    out->mem_shard[i] = k * a.mem_shard[i] + (n - k) * b.mem_shard[i];
  }
  out->peak = k > 0 ? fmax(a.peak, b.peak) : b.peak;
  out->host = k * a.host + (n - k) * b.host;
  out->host_shard = k * a.host_shard + (n - k) * b.host_shard;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t bound_value(const IrGraph *g, int var) {
  return var >= 0 && g->syms.bound[var] ? g->syms.value[var] : 0;
}

// With --no-share, identical blocks decide alone: a much larger program,
// whose best solution is seldom far from the shared one. So the shared
// program (small, fast) is solved first and its plan, block by block, seeds
// the large one. Identical blocks have identical choice lists, so a shared
// choice index means the same choice for each of its blocks.
static bool shared_seed(SvPlan *pl, SvSolution *out, IrDiag *d) {
  SvModel *m = pl->model, *ms = sv_model_build(m->g, true, pl->cfg.seq_parallel, d);
  SvNum *nums = NULL;
  SvProblem *ps = ms ? sv_problem_build(ms, &pl->cfg, &nums, d) : NULL;
  bool ok = false;
  if (ps) {
    SvSolution s = sv_solution_new(ps);
    SvSolveStats st;
    // (a shared plan no faster than the cutoff seeds nothing the solve would keep)
    SvSolveOptions o = {.mip_gap = pl->cfg.mip_gap, .time_limit = fmin(5, pl->cfg.time_limit),
                        .cutoff = pl->cfg.cutoff};
    ok = !sv_solve(ps, &o, &s, &st, d) && s.feasible;
    int *seen = calloc((size_t)ms->nunits + 1, sizeof *seen);   // blocks of each shared unit
    IR_ASSERT(seen);
    for (int b = 0; ok && b < m->nblocks; b++) {
      int u = m->block[b].unit, k = ms->block[b].unit;
      if (u < 0)
        continue;
      ok = pl->prob->unit[u].nchoices == ps->unit[k].nchoices;
      // the shared unit's first K blocks checkpoint (or swap), the rest take the choice
      // without
      bool plain = seen[k]++ >= sv_ckpt_blocks(ps, &s, k) + sv_swap_blocks(ps, &s, k);
      out->pick[u] = sv_moves_acts(&ps->unit[k].choice[s.pick[k]]) && plain
                         ? sv_choice_plain(&ps->unit[k], s.pick[k]) : s.pick[k];
      ok = ok && out->pick[u] >= 0;
    }
    free(seen);
    memcpy(out->batch, s.batch, sizeof s.batch);
    memcpy(out->share, s.share, sizeof s.share);
    if (ok)
      sv_evaluate(pl->prob, out, false);
    ok = ok && out->feasible;
    sv_solution_free(&s);
  }
  sv_problem_free(ps);
  free(nums);
  sv_model_free(ms);
  return ok;
}

int sv_plan(IrGraph *g, const SvConfig *cfg, SvPlan **out, IrDiag *d) {
  double t0 = now();
  *out = NULL;
  SvPlan *pl = calloc(1, sizeof *pl);
  IR_ASSERT(pl);
  pl->cfg = *cfg;
  pl->model = sv_model_build(g, cfg->share_blocks, cfg->seq_parallel, d);
  if (!pl->model) {
    sv_plan_free(pl);
    return -1;
  }
  SvModel *m = pl->model;
  if (cfg->micro_batch && m->batch_sym >= 0)
    symtab_bind(&g->syms, m->batch_sym, cfg->micro_batch);
  if (cfg->seq && m->seq_sym >= 0)
    symtab_bind(&g->syms, m->seq_sym, cfg->seq);
  pl->micro_batch = m->batch_sym >= 0 ? bound_value(g, m->batch_sym) : 1;
  pl->seq = bound_value(g, m->seq_sym);
  int gpus = sv_cluster_gpus(&cfg->cluster);
  pl->global_batch = cfg->global_batch ? cfg->global_batch : pl->micro_batch * gpus;
  bool sizes = cfg->group_rows[0] > 0;   // (the first group's micro-batches its own size)
  if (sizes)
    pl->micro_batch = cfg->group_rows[0];
  if (pl->micro_batch < 1 || (!sizes && pl->global_batch % pl->micro_batch)) {
    ir_error(d, (IrLoc){0}, "the global batch (%lld) must be a multiple of the micro-batch (%lld)",
             (long long)pl->global_batch, (long long)pl->micro_batch);
    sv_plan_free(pl);
    return -1;
  }
  pl->cfg.micro_batch = pl->micro_batch;
  pl->cfg.global_batch = pl->global_batch;
  pl->prob = sv_problem_build(m, &pl->cfg, &pl->nums, d);
  if (!pl->prob) {
    sv_plan_free(pl);
    return -1;
  }
  baselines(pl);
  const SvSolution *seed = NULL;
  for (int i = 0; i < pl->nbaselines; i++)
    if (pl->baseline[i].sol.feasible && (!seed || pl->baseline[i].sol.time < seed->time))
      seed = &pl->baseline[i].sol;
  SvSolution shared = sv_solution_new(pl->prob);
  if (!cfg->share_blocks && shared_seed(pl, &shared, d) && (!seed || shared.time < seed->time))
    seed = &shared;
  pl->sol = sv_solution_new(pl->prob);
  SvSolveOptions o = {.mip_gap = cfg->mip_gap, .time_limit = cfg->time_limit,
                      .verbose = cfg->verbose, .incumbent = seed, .cutoff = cfg->cutoff};
  int rc = sv_solve(pl->prob, &o, &pl->sol, &pl->stats, d);
  pl->stats.seed = seed == &shared ? "the plan with shared variables" : "the best baseline";
  sv_solution_free(&shared);
  if (rc) {
    sv_plan_free(pl);
    return -1;
  }
  pl->need = pl->sol.feasible ? 0 : HUGE_VAL;
  if (!pl->sol.feasible && pl->stats.cut_off)
    snprintf(pl->why, sizeof pl->why, "no plan faster than %g s a step", cfg->cutoff);
  else if (!pl->sol.feasible && pl->stats.timed_out)
    snprintf(pl->why, sizeof pl->why, "GLPK found no plan in %g s: allow it more (--time-limit)",
             cfg->time_limit);
  else if (!pl->sol.feasible && sizes)
    snprintf(pl->why, sizeof pl->why, "no plan fits the groups' micro-batch sizes");
  else if (!pl->sol.feasible)
    explain(pl, d);
  pl->seconds = now() - t0;
  *out = pl;
  return 0;
}

void sv_plan_free(SvPlan *p) {
  if (!p)
    return;
  for (int i = 0; i < p->nbaselines; i++)
    sv_solution_free(&p->baseline[i].sol);
  sv_solution_free(&p->sol);
  sv_problem_free(p->prob);
  free(p->nums);
  sv_model_free(p->model);
  free(p);
}
