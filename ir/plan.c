// The plan's small helpers (ir/plan.h).
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Mesh mesh_make(int dp, int tp) {
  Mesh m;
  for (int a = 0; a < IR_MESH_NAXES; a++)
    m.size[a] = 1;
  m.size[IR_MESH_DP] = dp;
  m.size[IR_MESH_TP] = tp;
  return m;
}

Mesh mesh_grid(int dp, int q) {
  Mesh m = mesh_make(dp, 1);
  m.size[IR_MESH_ROW] = m.size[IR_MESH_COL] = m.size[IR_MESH_SUBROW] = q;
  return m;
}

Mesh mesh_with_sub(Mesh m, int s) {
  m.size[IR_MESH_SUB] = s;
  m.size[IR_MESH_SUBDP] = m.size[IR_MESH_TP] / s;
  return m;
}

int mesh_grid_rows(int tp, int q) { return tp > q * q ? tp / (q * q) * q : q; }

Mesh mesh_with_grid(Mesh m, int q) {
  int tp = m.size[IR_MESH_TP];
  if (q * q < tp)
    m = mesh_with_sub(m, q * q);
  m.size[IR_MESH_ROW] = m.size[IR_MESH_COL] = q;
  m.size[IR_MESH_SUBROW] = mesh_grid_rows(tp, q);
  return m;
}

int mesh_ranks(const Mesh *m) {
  bool grid_in_tp = m->size[IR_MESH_TP] > 1;
  int n = 1;
  for (int a = 0; a < IR_MESH_NAXES; a++)
    if (a != IR_MESH_SUB && a != IR_MESH_SUBDP && a != IR_MESH_SUBROW &&
        !(grid_in_tp && (a == IR_MESH_ROW || a == IR_MESH_COL)))
      n *= m->size[a];
  return n;
}

int mesh_str(char *buf, size_t n, const Mesh *m) {
  if (m->size[IR_MESH_ROW] > 1 && m->size[IR_MESH_SUB] > 1)
    return snprintf(buf, n, "dp %d x tp %d (and %d x 2D %dx%d)", m->size[IR_MESH_DP],
                    m->size[IR_MESH_TP], m->size[IR_MESH_SUBDP], m->size[IR_MESH_ROW],
                    m->size[IR_MESH_COL]);
  if (m->size[IR_MESH_ROW] > 1 && m->size[IR_MESH_TP] > 1)
    return snprintf(buf, n, "dp %d x tp %d (and 2D %dx%d)", m->size[IR_MESH_DP],
                    m->size[IR_MESH_TP], m->size[IR_MESH_ROW], m->size[IR_MESH_COL]);
  if (m->size[IR_MESH_ROW] > 1)
    return snprintf(buf, n, "dp %d x 2D %dx%d", m->size[IR_MESH_DP], m->size[IR_MESH_ROW],
                    m->size[IR_MESH_COL]);
  if (m->size[IR_MESH_SUB] > 1)
    return snprintf(buf, n, "dp %d x tp %d (and tp %d)", m->size[IR_MESH_DP],
                    m->size[IR_MESH_TP], m->size[IR_MESH_SUB]);
  return snprintf(buf, n, "dp %d x tp %d", m->size[IR_MESH_DP], m->size[IR_MESH_TP]);
}

Plan plan_single(void) { return (Plan){.mesh = mesh_make(1, 1), .micro_batches = 1}; }

int plan_alloc_blocks(Plan *p, int n) {
  free(p->block);
  p->nblocks = 0;
  p->block = malloc(((size_t)n + 1) * sizeof *p->block);
  if (!p->block)
    return -1;
  for (int b = 0; b < n; b++)
    p->block[b] = p->rest;
  p->nblocks = n;
  return 0;
}

void plan_free(Plan *p) {
  free(p->block);
  free(p->replica_micro);
  free(p->replica_parts);
  free(p->replica_rows);
  p->block = NULL;
  p->replica_micro = NULL;
  p->replica_parts = NULL;
  p->replica_rows = NULL;
  p->nblocks = 0;
}

const PlanBlock *plan_block(const Plan *p, int b) {
  return b >= 0 && b < p->nblocks ? &p->block[b] : &p->rest;
}

bool plan_shards_state(const Plan *p) {
  bool sharded = p->rest.zero > 0;
  for (int b = 0; b < p->nblocks; b++)
    sharded |= p->block[b].zero > 0;
  return sharded;
}

int plan_replica_micro(const Plan *p, int d) {
  return p->replica_micro ? p->replica_micro[d] : p->micro_batches;
}

int64_t plan_micro_total(const Plan *p) {
  int64_t n = 0;
  for (int d = 0; d < p->mesh.size[IR_MESH_DP]; d++)
    n += plan_replica_micro(p, d);
  return n;
}

int64_t plan_replica_rows(const Plan *p, int d) {
  return p->replica_rows ? p->replica_rows[d] : p->micro;
}

int64_t plan_rows_total(const Plan *p) {
  int64_t n = 0;
  for (int d = 0; d < p->mesh.size[IR_MESH_DP]; d++)
    n += plan_replica_micro(p, d) * plan_replica_rows(p, d);
  return n;
}

// *field: dp entries of values where they differ, else NULL. -1 when out of memory.
static int set_uneven(int **field, int dp, const int *values) {
  bool even = true;
  for (int d = 0; d < dp; d++)
    even &= values[d] == values[0];
  free(*field);
  *field = NULL;
  if (even)
    return 0;
  if (!(*field = malloc((size_t)dp * sizeof **field)))
    return -1;
  memcpy(*field, values, (size_t)dp * sizeof *values);
  return 0;
}

// Each replica's value from its group's (ranks numbered group by group; group i's gpus[i] GPUs
// hold gpus[i] / the replica's ranks replicas): value[i], or with `share` value[i] split evenly
// over them. NULL when out of memory (the caller frees the rest).
static int *replica_values(const Plan *p, int ngroups, const int64_t *gpus,
                           const int64_t *value, bool share) {
  int dp = p->mesh.size[IR_MESH_DP], per = mesh_ranks(&p->mesh) / dp, r = 0;
  int *out = malloc(((size_t)dp + 1) * sizeof *out);
  for (int i = 0; out && i < ngroups; i++) {
    int64_t replicas = gpus[i] / per;
    for (int64_t k = 0; k < replicas && r < dp; k++)
      out[r++] = (int)(share ? value[i] / replicas : value[i]);
  }
  return out;
}

int plan_set_group_rows(Plan *p, int ngroups, const int64_t *gpus, const int64_t *rows) {
  int *values = replica_values(p, ngroups, gpus, rows, false);
  int rc = values ? set_uneven(&p->replica_rows, p->mesh.size[IR_MESH_DP], values) : -1;
  free(values);
  p->micro = rows[0];
  if (!rc)
    plan_programs(p, 0, &p->part_first, &p->part_end);
  return rc;
}

int plan_set_group_micro(Plan *p, int ngroups, const int64_t *gpus, const int64_t *runs) {
  int *counts = replica_values(p, ngroups, gpus, runs, true);
  int rc = counts ? plan_set_replica_micro(p, counts) : -1;
  free(counts);
  return rc;
}

int plan_set_replica_micro(Plan *p, const int *counts) {
  int dp = p->mesh.size[IR_MESH_DP], most = 0;
  for (int d = 0; d < dp; d++)
    most = counts[d] > most ? counts[d] : most;
  p->micro_batches = most;
  return set_uneven(&p->replica_micro, dp, counts);
}

int plan_set_replica_parts(Plan *p, const int *parts) {
  if (set_uneven(&p->replica_parts, p->mesh.size[IR_MESH_DP], parts))
    return -1;
  plan_programs(p, 0, &p->part_first, &p->part_end);
  return 0;
}

int plan_programs(const Plan *p, int k, int *first, int *end) {
  int dp = p->mesh.size[IR_MESH_DP], n = 0;
  *first = 0, *end = dp;
  for (int d = 0; d < dp;) {
    int e = d + 1;
    while (e < dp && (!p->replica_parts || p->replica_parts[e] == p->replica_parts[d]) &&
           (!p->replica_rows || p->replica_rows[e] == p->replica_rows[d]))
      e++;
    if (n++ == k)
      *first = d, *end = e;
    d = e;
  }
  return n;
}
