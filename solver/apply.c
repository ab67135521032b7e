// A plan as the lowering takes it: the mesh, the batch, and each block's
// choices, from the solver's solution or from a plan.json (saved by `mtc
// plan --json` or `mtc compile`, perhaps edited).
//
// What mtc lowers today: one mesh of dp x tp ranks for every block (1D tensor
// parallelism; no 2D grid) on one group of identical GPUs, any ZeRO stage and
// offload share per block, and checkpointing of the first K repeated layers.
// sv_apply_best asks the solver for that (one solve per tp that divides the
// GPUs, the fastest feasible kept; in a model with layers of several kinds,
// each kind sharing variables, it may still checkpoint a later kind and not
// an earlier one, which mtc compile refuses; with --no-share the order
// holds); sv_apply_read refuses a file that asks for anything else, naming
// the block and the field.
#include "internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int alloc_blocks(SvApplied *a, int n) {
  a->nblocks = n;
  a->zero = calloc((size_t)n + 1, sizeof *a->zero);
  a->ckpt = calloc((size_t)n + 1, sizeof *a->ckpt);
  a->offload = calloc((size_t)n + 1, sizeof *a->offload);
  return a->zero && a->ckpt && a->offload ? 0 : -1;
}

void sv_applied_free(SvApplied *a) {
  free(a->zero), free(a->ckpt), free(a->offload);
  memset(a, 0, sizeof *a);
}

// The solution's choice for each block.
static int from_plan(const SvPlan *pl, SvApplied *a, IrDiag *d) {
  const SvProblem *p = pl->prob;
  const SvModel *m = pl->model;
  if (alloc_blocks(a, m->nblocks))
    return ir_error(d, (IrLoc){0}, "out of memory");
  a->micro = pl->micro_batch;
  a->seq = pl->seq;
  int *seen = calloc((size_t)p->nunits + 1, sizeof *seen);   // blocks of each unit so far
  IR_ASSERT(seen);
  for (int b = 0; b < m->nblocks; b++) {
    int u = m->block[b].unit;
    const SvChoice *c = &p->unit[u].choice[pl->sol.pick[u]];
    SvLayout l = p->layout[c->layout];
    if (b == 0)
      a->dp = l.dp, a->tp = l.tp;
    IR_ASSERT(l.dp == a->dp && l.tp == a->tp && l.q == 1);  // mesh_tp asked for one mesh
    a->zero[b] = c->zero;
    a->ckpt[b] = seen[u]++ < sv_ckpt_blocks(p, &pl->sol, u);   // the unit's first K blocks
    a->offload[b] = c->offload / 100.0;
  }
  free(seen);
  int64_t total = p->micro_total;
  if (total % a->dp)
    return ir_error(d, (IrLoc){0}, "the plan runs %lld micro-batches on %d replicas; the "
                    "program needs a multiple of %d (choose --batch)", (long long)total, a->dp,
                    a->dp);
  a->micro_batches = (int)(total / a->dp);
  return 0;
}

int sv_apply_best(IrGraph *g, const SvConfig *cfg, SvApplied *out, SvPlan **kept, IrDiag *d) {
  *kept = NULL;
  memset(out, 0, sizeof *out);
  if (cfg->cluster.ngroups != 1)
    return ir_error(d, (IrLoc){0}, "the cluster has %d groups of GPUs; a compiled program runs "
                    "on one group of identical GPUs for now (mtc plan explains mixed clusters)",
                    cfg->cluster.ngroups);
  int gpus = sv_cluster_gpus(&cfg->cluster);
  char why[1024] = "";
  for (int tp = 1; tp <= gpus && tp <= 64; tp++)
    if (gpus % tp == 0) {
      SvConfig c = *cfg;
      c.mesh_tp = tp;
      SvPlan *p;
      IrDiag quiet = {0};
      if (sv_plan(g, &c, &p, &quiet)) {
        if (!why[0])
          snprintf(why, sizeof why, "%.900s", quiet.msg);
        continue;
      }
      if (!p->sol.feasible) {
        snprintf(why, sizeof why, "%s", p->why);
        sv_plan_free(p);
        continue;
      }
      if (!*kept || p->sol.time < (*kept)->sol.time) {
        sv_plan_free(*kept);
        *kept = p;
      } else {
        sv_plan_free(p);
      }
    }
  if (!*kept)
    return ir_error(d, (IrLoc){0}, "no plan with one mesh for every block fits: %s", why);
  return from_plan(*kept, out, d);
}

// ---- plan.json ------------------------------------------------------------------------------

static int number(const cJSON *o, const char *key, double lo, double hi, double *out,
                  const char *where, const char *path, IrDiag *d) {
  char at[512];
  snprintf(at, sizeof at, "%s: %s", path, where);
  return sv_json_number(o, key, lo, hi, false, true, out, at, d);
}

static int whole(const cJSON *o, const char *key, double lo, double hi, int64_t *out,
                 const char *where, const char *path, IrDiag *d) {
  char at[512];
  snprintf(at, sizeof at, "%s: %s", path, where);
  double x;
  if (sv_json_number(o, key, lo, hi, true, true, &x, at, d))
    return -1;
  *out = (int64_t)x;
  return 0;
}

static int read_blocks(const cJSON *blocks, const SvModel *m, SvApplied *a, const char *path,
                       IrDiag *d) {
  if (!cJSON_IsArray(blocks))
    return ir_error(d, (IrLoc){0}, "%s: \"blocks\" must be an array (the plan's choice per "
                    "block, as mtc plan --json writes it)", path);
  if (alloc_blocks(a, m->nblocks))
    return ir_error(d, (IrLoc){0}, "out of memory");
  bool *seen = calloc((size_t)m->nblocks + 1, 1);
  IR_ASSERT(seen);
  int rc = 0, i = 0;
  const cJSON *b;
  cJSON_ArrayForEach(b, blocks) {
    char where[64];
    snprintf(where, sizeof where, "blocks[%d]", i++);
    int64_t id, dp, tp, q, zero;
    double off;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(b, "name");
    const cJSON *ck = cJSON_GetObjectItemCaseSensitive(b, "checkpoint");
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
    if (q != 1) {
      rc = ir_error(d, (IrLoc){0}, "%s: %s (%s): a 2D grid (q %lld) is not lowered yet; use "
                    "q 1", path, where, m->block[id].name, (long long)q);
      break;
    }
    if (!a->dp)
      a->dp = (int)dp, a->tp = (int)tp;
    if (dp != a->dp || tp != a->tp) {
      rc = ir_error(d, (IrLoc){0}, "%s: %s (%s) is dp %lld x tp %lld, the blocks before it dp %d "
                    "x tp %d: a program has one mesh for every block", path, where,
                    m->block[id].name, (long long)dp, (long long)tp, a->dp, a->tp);
      break;
    }
    a->zero[id] = (int)zero;
    a->ckpt[id] = cJSON_IsTrue(ck);
    a->offload[id] = off;
  }
  for (int k = 0; k < m->nblocks && !rc; k++)
    if (!seen[k])
      rc = ir_error(d, (IrLoc){0}, "%s: block %d (%s) has no entry in \"blocks\"", path, k,
                    m->block[k].name);
  free(seen);
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
    if (symtab_find(&g->syms, v->string) < 0)
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

// One group of identical GPUs, as many as the mesh has ranks.
static int check_groups(const cJSON *groups, const SvApplied *a, const char *path, IrDiag *d) {
  int n = cJSON_GetArraySize(groups);
  if (!cJSON_IsArray(groups) || n < 1)
    return ir_error(d, (IrLoc){0}, "%s: \"groups\" must be an array of the cluster's groups "
                    "of GPUs", path);
  if (n != 1)
    return ir_error(d, (IrLoc){0}, "%s: the plan is for a cluster of %d groups of GPUs; a "
                    "compiled program runs on one group of identical GPUs for now", path, n);
  int64_t count;
  if (whole(cJSON_GetArrayItem(groups, 0), "count", 1, SV_MAX_GPUS, &count, "groups[0]", path, d))
    return -1;
  if (count != (int64_t)a->dp * a->tp)
    return ir_error(d, (IrLoc){0}, "%s: groups[0] has %lld GPUs, the blocks' mesh dp %d x tp %d "
                    "runs on %d", path, (long long)count, a->dp, a->tp, a->dp * a->tp);
  return 0;
}

int sv_apply_read(IrGraph *g, const char *path, const char *text, SvApplied *out, IrDiag *d) {
  memset(out, 0, sizeof *out);
  cJSON *root = cJSON_Parse(text);
  if (!root)
    return ir_error(d, (IrLoc){0}, "%s is not JSON (near \"%.20s\")", path,
                    cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "");
  SvModel *m = sv_model_build(g, true, d);
  int rc = m ? 0 : -1;
  const cJSON *feasible = cJSON_GetObjectItemCaseSensitive(root, "feasible");
  const cJSON *batch = cJSON_GetObjectItemCaseSensitive(root, "batch");
  int64_t version = 0, micro = 0, total = 0, seq = 0;
  if (!rc)
    rc = whole(root, "version", 1, 1, &version, "the plan", path, d);
  if (!rc && !cJSON_IsTrue(feasible))
    rc = ir_error(d, (IrLoc){0}, "%s: the plan does not fit its cluster (\"feasible\": false); "
                  "there is nothing to apply", path);
  // Megatron sequence parallelism is a planner's assumption the lowering does not
  // execute. Files from before the field lack it: read as false (their layouts lower the
  // same; only their estimates assumed it).
  const cJSON *sp = cJSON_GetObjectItemCaseSensitive(root, "seq_parallel");
  if (!rc && sp && !cJSON_IsBool(sp))
    rc = ir_error(d, (IrLoc){0}, "%s: \"seq_parallel\" must be true or false", path);
  if (!rc && cJSON_IsTrue(sp))
    rc = ir_error(d, (IrLoc){0}, "%s: \"seq_parallel\": true: the plan assumes Megatron "
                  "sequence parallelism, which compiled programs do not run yet; plan again "
                  "without --seq-parallel (mtc plan ... --json FILE)", path);
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
    rc = check_groups(cJSON_GetObjectItemCaseSensitive(root, "groups"), out, path, d);
  if (!rc && total % out->dp)
    rc = ir_error(d, (IrLoc){0}, "%s: %lld micro-batches do not divide over dp %d replicas",
                  path, (long long)total, out->dp);
  if (!rc) {
    out->micro = micro;
    out->seq = seq;
    out->micro_batches = (int)(total / out->dp);
  }
  sv_model_free(m);
  cJSON_Delete(root);
  return rc;
}
