// What the planner says: the text report of `mtc plan` and plan.json.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "internal.h"

const char *const sv_time_names[SV_NT + 1] = {"compute",       "recompute", "tensor_parallel",
                                              "data_parallel", "offload",   "optimizer",
                                              "reshard"};
static const char *mem_names[SV_NM] = {"params", "grads", "optimizer", "activations"};

const char *sv_layout_str(char *buf, size_t n, SvLayout l) {
  if (l.q > 1 && l.sub > 1)
    snprintf(buf, n, "%d x 2D %dx%d (of %d x TP%d)", l.dp * l.tp / l.sub, l.q, l.q, l.dp, l.tp);
  else if (l.q > 1)
    snprintf(buf, n, "%d x 2D %dx%d", l.dp, l.q, l.q);
  else if (l.batch)
    snprintf(buf, n, "%d x DP (of %d x TP%d)", l.dp * l.tp, l.dp, l.tp);
  else if (l.sub > 1)
    snprintf(buf, n, "%d x TP%d (of %d x TP%d)", l.dp * l.tp / l.sub, l.sub, l.dp, l.tp);
  else if (l.tp > 1)
    snprintf(buf, n, "%d x TP%d", l.dp, l.tp);
  else
    snprintf(buf, n, "%d x DP", l.dp);
  return buf;
}

// ---- breakdowns of the chosen plan --------------------------------------------------------------

typedef struct Breakdown {
  double t[SV_NT + 1];     // seconds per step by category; [SV_NT]: resharding
  double m[SV_NM + 1];     // bytes per GPU by category; [SV_NM]: buffers (the peak block)
  double total_t, total_m;
} Breakdown;

static void breakdown(const SvPlan *pl, const SvSolution *s, int g, Breakdown *b) {
  const SvProblem *p = pl->prob;
  memset(b, 0, sizeof *b);
  double ghosts = sv_ghosts(p, s, g);
  for (int u = 0; u < p->nunits; u++) {
    SvCost k;
    sv_plan_unit_cost(pl, s, u, g, &k);
    for (int i = 0; i < SV_NT; i++)
      b->t[i] += k.t_micro[i] * (double)s->batch[g] + k.t_step[i] + k.t_ghost[i] * ghosts;
    for (int i = 0; i < SV_NM; i++)
      b->m[i] += k.mem[i] + s->share[g] * k.mem_shard[i];
    b->m[SV_NM] = fmax(b->m[SV_NM], k.peak);
  }
  for (int e = 0; e < p->nedges; e++) {
    const SvEdge *ed = &p->edge[e];
    int la = p->unit[ed->u].choice[s->pick[ed->u]].layout;
    int lb = p->unit[ed->v].choice[s->pick[ed->v]].layout;
    b->t[SV_NT] += ed->r[g][la * p->nlayouts + lb];
  }
  b->t[SV_T_DP] += sv_wait(p, s, g);   // (inside the collectives, for the other replicas)
  for (int i = 0; i <= SV_NT; i++)
    b->total_t += b->t[i];
  for (int i = 0; i <= SV_NM; i++)
    b->total_m += b->m[i];
}

void sv_step_times(const SvPlan *pl, const SvSolution *s, int g, double t[SV_NT + 1]) {
  Breakdown b;
  breakdown(pl, s, g, &b);
  memcpy(t, b.t, sizeof b.t);
}

double sv_state_bytes(const SvPlan *pl, const SvSolution *s, int g) {
  Breakdown b;
  breakdown(pl, s, g, &b);
  return b.m[SV_M_PARAMS] + b.m[SV_M_GRADS] + b.m[SV_M_OPT];
}

// "5 per replica of 2 GPUs": each replica size the blocks' layouts take in group g, and the
// micro-batches each such replica runs (a replica: a layout's tp x q x q ranks).
static void per_replica(FILE *f, const SvProblem *p, const SvSolution *s, int g) {
  int seen[SV_MAXLAYOUTS], n = 0;
  for (int u = 0; u < p->nunits; u++) {
    const SvLayout *l = &p->layout[p->unit[u].choice[s->pick[u]].layout];
    int size = sv_layout_ranks(*l), k = 0;
    while (k < n && seen[k] != size)
      k++;
    if (k < n)
      continue;
    seen[n++] = size;
    int replicas = p->gpus[g] / size;
    fprintf(f, "%s%g per replica of %d GPU%s", n > 1 ? ", " : "",
            (double)s->batch[g] / replicas, size, size > 1 ? "s" : "");
  }
}

static int slowest(const SvProblem *p, const SvSolution *s) {
  int w = 0;
  for (int g = 1; g < p->ngroups; g++)
    if (s->group_time[g] > s->group_time[w])
      w = g;
  return w;
}

// Model FLOPs per step over what the GPUs could do in the step time.
static double mfu(const SvPlan *pl, const SvSolution *s) {
  const SvProblem *p = pl->prob;
  double flops = 0, peak = 0;
  for (int g = 0; g < p->ngroups; g++)
    flops += p->micro_flops[g] * (double)s->batch[g];
  for (int g = 0; g < p->ngroups; g++) {
    const SvDevice *d = &pl->cfg.cluster.group[g].dev;
    peak += p->gpus[g] * (pl->model->bf16 ? d->flops_bf16 : d->flops_fp32);
  }
  return flops / (s->time * peak);
}

static double gb(double bytes) { return bytes / GiB; }

static const char *precision_name(const SvModel *m) {
  return !m->bf16 ? "fp32" : m->grads_bf16 ? "bf16 with fp32 master weights, bf16 gradients"
                                           : "bf16 with fp32 master weights";
}


// ---- the text report ----------------------------------------------------------------------------

static void print_cluster(FILE *f, const SvPlan *pl) {
  const SvCluster *c = &pl->cfg.cluster;
  fprintf(f, "cluster:");
  for (int g = 0; g < c->ngroups; g++) {
    const SvGroup *gr = &c->group[g];
    char mem[32];
    fprintf(f, "%s %d x %s (%s, %d per node, %.0f GB/s in a node, %.1f GB/s between)",
            g ? " +" : "", gr->count, gr->dev.name, sv_bytes_str(mem, gr->dev.mem), gr->per_node,
            gr->dev.intra_bw / 1e9, gr->dev.inter_bw / 1e9);
  }
  fputc('\n', f);
  fprintf(f, "batch: %lld %s", (long long)pl->global_batch, pl->seq ? "sequences" : "samples");
  if (pl->seq)
    fprintf(f, " of %lld tokens", (long long)pl->seq);
  if (pl->cfg.group_rows[0])
    fprintf(f, " per step, in %lld micro-batches, each group's its own size; %s\n",
            (long long)pl->prob->micro_total,
            precision_name(pl->model));
  else
    fprintf(f, " per step, in %lld micro-batch%s of %lld; %s\n", (long long)pl->prob->micro_total,
            pl->prob->micro_total == 1 ? "" : "es", (long long)pl->micro_batch,
            precision_name(pl->model));
  if (pl->cfg.seq_parallel)
    fprintf(f, "sequence parallelism: on under tensor parallelism (--seq-parallel): the "
               "activations between its regions split on the sequence\n");
  else
    fprintf(f, "sequence parallelism: off (--seq-parallel turns it on)\n");
}

// Unit u of the solution as its row of the report: its name (identical
// blocks: "h.0 .. h.47 (48)"), layout and checkpointing, seconds per step and
// bytes per GPU of group g.
typedef struct UnitRow {
  char name[300], layout[32], ckpt[32];
  char offload[24];   // "50%", "100% +grads" (the gradients offloaded too), "100% +grads+params",
                      // "50% +params" (that share's parameters)
  int zero;
  double t, m;
} UnitRow;

static void unit_row(const SvPlan *pl, int u, int g, UnitRow *r) {
  const SvProblem *p = pl->prob;
  const SvSolution *s = &pl->sol;
  const SvUnit *un = &p->unit[u];
  const SvChoice *c = &un->choice[s->pick[u]];
  SvCost k;
  sv_plan_unit_cost(pl, s, u, g, &k);
  r->t = r->m = 0;
  for (int i = 0; i < SV_NT; i++)
    r->t += k.t_micro[i] * (double)s->batch[g] + k.t_step[i];
  for (int i = 0; i < SV_NM; i++)
    r->m += k.mem[i] + s->share[g] * k.mem_shard[i];
  // ckpt: yes or no for one block; for identical blocks, how many of them (the first
  // ones); "swap" where their activations go to host memory instead
  const char *swap = c->swap ? "swap " : "";
  if (un->count > 1) {
    snprintf(r->name, sizeof r->name, "%s (%d)", un->name, un->count);
    snprintf(r->ckpt, sizeof r->ckpt, "%s%d of %d", swap,
             sv_ckpt_blocks(p, s, u) + sv_swap_blocks(p, s, u), un->count);
  } else {
    snprintf(r->name, sizeof r->name, "%s", un->name);
    snprintf(r->ckpt, sizeof r->ckpt, "%s", c->swap ? "swap" : c->ckpt ? "yes" : "no");
  }
  sv_layout_str(r->layout, sizeof r->layout, p->layout[c->layout]);
  r->zero = c->zero;
  snprintf(r->offload, sizeof r->offload, "%d%%%s", c->offload,
           c->params ? (c->grads ? " +grads+params" : " +params") : c->grads ? " +grads" : "");
}

static void print_blocks(FILE *f, const SvPlan *pl) {
  const SvProblem *p = pl->prob;
  int g = slowest(p, &pl->sol);
  int w = 6;
  for (int u = 0; u < p->nunits; u++) {
    int n = (int)strlen(p->unit[u].name) + (p->unit[u].count > 1 ? 6 : 0);
    w = n > w ? n : w;
  }
  UnitRow *rows = malloc((size_t)p->nunits * sizeof *rows);
  IR_ASSERT(rows);
  double most = 0;
  int cw = 9, ow = 11;   // the ckpt and offload columns
  for (int u = 0; u < p->nunits; u++) {
    unit_row(pl, u, g, &rows[u]);
    most = fmax(most, rows[u].m);
    cw = (int)strlen(rows[u].ckpt) > cw ? (int)strlen(rows[u].ckpt) : cw;
    ow = (int)strlen(rows[u].offload) > ow ? (int)strlen(rows[u].offload) : ow;
  }
  SvByteUnit un = sv_unit(most);
  char head[16];
  snprintf(head, sizeof head, "%s/GPU", un.name);
  fprintf(f, "\n%-*s  %-14s %-*s %-5s %*s %10s %9s\n", w, "blocks", "layout", cw, "ckpt",
          "ZeRO", ow, "offload", "ms/step", head);
  for (int u = 0; u < p->nunits; u++) {
    const UnitRow *r = &rows[u];
    fprintf(f, "%-*s  %-14s %-*s %-5d %*s %10.2f %9.2f\n", w, r->name, r->layout, cw, r->ckpt,
            r->zero, ow, r->offload, r->t * 1e3, r->m / un.bytes);
  }
  free(rows);
}

static void print_groups(FILE *f, const SvPlan *pl) {
  const SvProblem *p = pl->prob;
  const SvSolution *s = &pl->sol;
  for (int g = 0; g < p->ngroups; g++) {
    const SvGroup *gr = &pl->cfg.cluster.group[g];
    Breakdown b;
    breakdown(pl, s, g, &b);
    // the parts in the unit of their sum (a small model's read 0.00 GiB in the device's), the
    // device's sizes each in its own
    SvByteUnit u = sv_unit(b.total_m);
    char cap[32], mem[32], reserve[32];
    fprintf(f, "\nmemory per GPU (%s%s%s): params %.2f + grads %.2f + optimizer %.2f + "
               "activations %.2f + buffers %.2f = %.2f %s of %s usable (%s minus %s reserve)",
            gr->name, strcmp(gr->name, gr->dev.name) ? ", " : "",
            strcmp(gr->name, gr->dev.name) ? gr->dev.name : "", b.m[SV_M_PARAMS] / u.bytes,
            b.m[SV_M_GRADS] / u.bytes, b.m[SV_M_OPT] / u.bytes, b.m[SV_M_ACT] / u.bytes,
            b.m[SV_NM] / u.bytes, b.total_m / u.bytes, u.name, sv_bytes_str(cap, p->cap[g]),
            sv_bytes_str(mem, gr->dev.mem), sv_bytes_str(reserve, gr->reserve));
    if (s->host[g] > 0) {
      SvByteUnit h = sv_unit(s->host[g]);
      fprintf(f, "; %.2f %s offloaded to CPU memory", s->host[g] / h.bytes, h.name);
    }
    fputc('\n', f);
    if (p->ngroups > 1) {
      fprintf(f, "  %s runs %lld of %lld micro-batches", gr->name, (long long)s->batch[g],
              (long long)p->micro_total);
      if (pl->cfg.group_rows[0])
        fprintf(f, " of %lld sequences", (long long)p->rows[g]);
      fputs(" (", f);
      per_replica(f, p, s, g);
      if (sv_lockstep(p, s) && sv_ghosts(p, s, g) > 0)   // ghosts that cost (lockstep)
        fprintf(f, ", and %g ghosts a replica: the others' collectives", sv_ghosts(p, s, g));
      fprintf(f, ") and holds %.1f%% of the sharded state\n", 100 * s->share[g]);
    }
    fprintf(f, "step time %.2f ms%s: compute %.2f, recompute %.2f, tensor-parallel comm %.2f, "
               "data-parallel comm %.2f, offload %.2f, optimizer %.2f, resharding %.2f\n",
            b.total_t * 1e3, p->ngroups > 1 ? (g == slowest(p, s) ? " (slowest group)" : "") : "",
            b.t[SV_T_COMPUTE] * 1e3, b.t[SV_T_RECOMPUTE] * 1e3, b.t[SV_T_TP] * 1e3,
            b.t[SV_T_DP] * 1e3, b.t[SV_T_OFFLOAD] * 1e3, b.t[SV_T_UPDATE] * 1e3,
            b.t[SV_NT] * 1e3);
  }
}

static void print_baselines(FILE *f, const SvPlan *pl) {
  fprintf(f, "\n%-32s %12s %12s %10s\n", "strategy (same cost model)", "step time", "memory/GPU",
          "speedup");
  double best = pl->sol.feasible ? pl->sol.time : NAN;
  double mem = 0, most = 0;
  for (int g = 0; g < pl->prob->ngroups; g++)
    mem = fmax(mem, pl->sol.mem[g]);
  for (int i = 0; i < pl->nbaselines; i++)
    for (int g = 0; g < pl->prob->ngroups; g++)
      most = fmax(most, pl->baseline[i].sol.mem[g]);
  SvByteUnit u = sv_unit(fmax(most, mem));   // one unit for the column
  if (pl->sol.feasible)
    fprintf(f, "%-32s %9.2f ms %8.2f %s %10s\n", "mtc plan", best * 1e3, mem / u.bytes, u.name,
            "1.00x");
  for (int i = 0; i < pl->nbaselines; i++) {
    const SvBaseline *b = &pl->baseline[i];
    char name[64];
    snprintf(name, sizeof name, "%s%s", b->name, b->ckpt ? " + checkpointing" : "");
    double m = 0;
    for (int g = 0; g < pl->prob->ngroups; g++)
      m = fmax(m, b->sol.mem[g]);
    if (b->why[0])
      fprintf(f, "%-32s %12s %12s   does not apply (%s)\n", b->name, "-", "-", b->why);
    else if (b->sol.feasible)
      fprintf(f, "%-32s %9.2f ms %8.2f %s %9.2fx\n", name, b->sol.time * 1e3, m / u.bytes, u.name,
              b->sol.time / best);
    else {
      char over[32], host[32];
      fprintf(f, "%-32s %12s %8.2f %s   does not fit (%s over", name, "-", m / u.bytes, u.name,
              sv_bytes_str(over, b->need));
      if (b->host_need > 0)
        fprintf(f, "; CPU memory %s over", sv_bytes_str(host, b->host_need));
      fputs(")\n", f);
    }
  }
}

void sv_report(FILE *f, const SvPlan *pl) {
  const SvProblem *p = pl->prob;
  const SvSolveStats *st = &pl->stats;
  fprintf(f, "mtc plan: %s\n", pl->model->g->name ? pl->model->g->name : "model");
  print_cluster(f, pl);
  if (pl->sol.feasible) {
    print_blocks(f, pl);
    print_groups(f, pl);
    double tokens = (double)pl->global_batch * (double)(pl->seq ? pl->seq : 1);
    fprintf(f, "throughput %.0f %s/s, estimated MFU %.1f%%\n", tokens / pl->sol.time,
            pl->seq ? "tokens" : "samples", 100 * mfu(pl, &pl->sol));
    if (pl->one_size > 0 && isfinite(pl->one_size))
      fprintf(f, "with micro-batches of one size for every group (--micro-batch): %.2f ms a "
                 "step at best\n", pl->one_size * 1e3);
    else if (pl->one_size > 0)
      fprintf(f, "with micro-batches of one size for every group (--micro-batch): no plan "
                 "fits\n");
  }   // else: the caller says why nothing fits, once
  print_baselines(f, pl);
  fprintf(f, "\nsolver: GLPK, %d variables (%d binary, %d integer), %d rows, %d nonzeros; "
             "%d unit%s, %d joint choices, %d kept after pruning\n",
          st->vars, st->binaries, st->ints, st->rows, st->nonzeros, p->nunits,
          p->nunits == 1 ? "" : "s", st->choices, st->choices_kept);
  fprintf(f, "        %s, gap %.3f%%, %.3f s%s%s; planning took %.3f s in all\n", st->status,
          100 * (isfinite(st->gap) ? st->gap : 1), st->seconds,
          st->seeded ? ", seeded with " : "", st->seeded ? st->seed : "", pl->seconds);
}

// ---- the plan as a graph (mtc plan --dot) --------------------------------------------------------

// s as a DOT string's contents: quotes and backslashes escaped, so that no
// name a model gives can break the graph.
static void dot_string(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fputc('\\', f);
    fputc(*s == '\n' ? ' ' : *s, f);
  }
}

void sv_report_dot(FILE *f, const SvPlan *pl) {
  const SvProblem *p = pl->prob;
  const SvModel *m = pl->model;
  fprintf(f, "digraph plan {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n");
  fputs("  label=\"", f);
  dot_string(f, m->g->name ? m->g->name : "model");
  if (!pl->sol.feasible) {
    fputs(": no plan fits\";\n}\n", f);
    return;
  }
  int g = slowest(p, &pl->sol);
  fprintf(f, ": %.2f ms per step\";\n", pl->sol.time * 1e3);
  for (int u = 0; u < p->nunits; u++) {
    UnitRow r;
    unit_row(pl, u, g, &r);
    fprintf(f, "  u%d [label=\"", u);
    dot_string(f, r.name);
    char mem[32];
    fprintf(f, "\\n%s, checkpoint %s\\nZeRO-%d, offload %s\\n%.2f ms/step, %s/GPU\"];\n",
            r.layout, r.ckpt, r.zero, r.offload, r.t * 1e3, sv_bytes_str(mem, r.m));
  }
  // activations flowing between units (forward; their gradients flow back), per micro-batch
  int nu = p->nunits;
  double *bytes = calloc((size_t)nu * (size_t)nu + 1, sizeof *bytes);
  IR_ASSERT(bytes);
  for (int i = 0; i < m->nflows; i++) {
    int a = m->block[m->flow[i].from].unit, b = m->block[m->flow[i].to].unit;
    if (a >= 0 && b >= 0 && a != b)
      bytes[a * nu + b] += sym_evalf(m->flow[i].bytes, &m->g->syms);
  }
  char flow[32];
  for (int a = 0; a < nu; a++)
    for (int b = 0; b < nu; b++)
      if (bytes[a * nu + b] > 0)
        fprintf(f, "  u%d -> u%d [label=\"%s\"];\n", a, b, sv_bytes_str(flow, bytes[a * nu + b]));
  free(bytes);
  fputs("}\n", f);
}

// ---- the plan as a picture (mtc plan --svg) --------------------------------------------------------

// s as SVG text: the XML specials escaped, so that no name a model gives can break the picture.
static void svg_text(FILE *f, const char *s) {
  for (; *s; s++)
    switch (*s) {
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '&': fputs("&amp;", f); break;
    case '"': fputs("&quot;", f); break;
    default:
      if ((unsigned char)*s >= 0x20)
        fputc(*s, f);
    }
}

static void svg_label(FILE *f, double x, double y, const char *anchor, const char *fill,
                      const char *text) {
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" fill=\"%s\">", x, y, anchor, fill);
  svg_text(f, text);
  fputs("</text>\n", f);
}

#define SVG_W 1000.0      // the picture's width
#define SVG_BAR_X 330.0   // where bars start
#define SVG_BAR_W 540.0   // the longest bar

static const char *const svg_colors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                         "#59a14f", "#edc948", "#b07aa1", "#9c755f"};

// A bar at row y of parts[n] (values) stacked from SVG_BAR_X, scale px per unit, each in its
// color and named where it is wide enough; under it, a legend of the parts that are there.
static void svg_stack(FILE *f, double y, const double *parts, const char *const *names, int n,
                      double scale) {
  double x = SVG_BAR_X, lx = SVG_BAR_X;
  for (int i = 0; i < n; i++) {
    double w = parts[i] * scale;
    if (parts[i] <= 0)
      continue;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"16\" fill=\"%s\"><title>",
            x, y, w, svg_colors[i]);
    svg_text(f, names[i]);
    fputs("</title></rect>\n", f);
    if (w > 7.5 * strlen(names[i]))
      svg_label(f, x + w / 2, y + 12, "middle", "#fff", names[i]);
    x += w;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"9\" height=\"9\" fill=\"%s\"/>\n", lx,
            y + 21, svg_colors[i]);
    svg_label(f, lx + 12, y + 30, "start", "#444", names[i]);
    lx += 12 + 7.5 * strlen(names[i]) + 12;
  }
}

// The usable memory cap (bytes) as a dashed line from y0 to y1 at its place on the memory scale;
// returns its x.
static double svg_usable(FILE *f, double cap, double mscale, double y0, double y1) {
  double x = SVG_BAR_X + cap * mscale;
  fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" "
             "stroke-dasharray=\"3,2\"/>\n", x, y0, x, y1);
  return x;
}

// One row of the comparison: a time bar (or "does not fit") and a memory bar under it.
static void svg_compare(FILE *f, double y, const char *name, bool fits, double t, double m,
                        double cap, double tscale, double mscale, const char *why) {
  char buf[160];
  svg_label(f, 10, y + 12, "start", "#000", name);
  if (why && why[0]) {   // a layout the model cannot take: no bars
    snprintf(buf, sizeof buf, "does not apply (%s)", why);
    svg_label(f, SVG_BAR_X, y + 11, "start", "#c00", buf);
    return;
  }
  if (fits) {
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"10\" fill=\"%s\"/>\n",
            SVG_BAR_X, y + 2, t * tscale, svg_colors[0]);
    snprintf(buf, sizeof buf, "%.2f ms", t * 1e3);
    svg_label(f, SVG_BAR_X + t * tscale + 4, y + 11, "start", "#000", buf);
  } else {
    svg_label(f, SVG_BAR_X, y + 11, "start", "#c00", "does not fit");
  }
  fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"10\" fill=\"%s\"/>\n",
          SVG_BAR_X, y + 18, m * mscale, fits ? svg_colors[3] : "#c00");
  snprintf(buf, sizeof buf, "%.2f GiB", gb(m));
  svg_label(f, SVG_BAR_X + m * mscale + 4, y + 27, "start", "#000", buf);
  svg_usable(f, cap, mscale, y + 16, y + 30);
}

void sv_report_svg(FILE *f, const SvPlan *pl) {
  const SvProblem *p = pl->prob;
  const SvSolution *s = &pl->sol;
  const char *name = pl->model->g->name ? pl->model->g->name : "model";
  char buf[512];
  double h = 58 + (s->feasible ? 22 + 22.0 * p->nunits + 96.0 * p->ngroups : 0) + 30 +
             40.0 * (pl->nbaselines + s->feasible) + 10;
  double y = 28;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
             "font-family=\"monospace\" font-size=\"12\">\n"
             "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n", SVG_W, h);
  const SvGroup *g0 = &pl->cfg.cluster.group[0];
  if (s->feasible)
    snprintf(buf, sizeof buf, "mtc plan: %s, %.2f ms per step on %d GPU%s (%s%s)", name,
             s->time * 1e3, sv_cluster_gpus(&pl->cfg.cluster),
             sv_cluster_gpus(&pl->cfg.cluster) > 1 ? "s" : "", g0->dev.name,
             p->ngroups > 1 ? " and others" : "");
  else
    snprintf(buf, sizeof buf, "mtc plan: %s: no plan fits", name);
  svg_label(f, 10, y, "start", "#000", buf);
  y += 30;
  double tmax = s->feasible ? s->time : 0, mmax = 0, smem = 0;
  for (int g = 0; g < p->ngroups; g++) {
    smem = fmax(smem, s->feasible ? s->mem[g] : 0);
    mmax = fmax(mmax, fmax(p->cap[g], smem));
  }
  for (int i = 0; i < pl->nbaselines; i++) {
    const SvBaseline *b = &pl->baseline[i];
    if (b->sol.feasible)
      tmax = fmax(tmax, b->sol.time);
    for (int g = 0; g < p->ngroups; g++)
      mmax = fmax(mmax, b->sol.mem[g]);
  }
  double tscale = tmax > 0 ? SVG_BAR_W / tmax : 0, mscale = mmax > 0 ? SVG_BAR_W / mmax : 0;
  if (s->feasible) {
    svg_label(f, 10, y, "start", "#000", "blocks (the color: their layout): layout, "
              "checkpointing, ZeRO, offload, time and memory per GPU");
    y += 22;
    int g = slowest(p, s);
    for (int u = 0; u < p->nunits; u++) {
      UnitRow r;
      unit_row(pl, u, g, &r);
      const char *color = svg_colors[p->unit[u].choice[s->pick[u]].layout % 8];
      fprintf(f, "<rect x=\"10\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", y - 11,
              color);
      snprintf(buf, sizeof buf, "%s: %s, ckpt %s, ZeRO-%d, offload %s, %.2f ms, %.2f GiB",
               r.name, r.layout, r.ckpt, r.zero, r.offload, r.t * 1e3, gb(r.m));
      svg_label(f, 28, y, "start", "#000", buf);
      y += 22;
    }
    static const char *const mem_parts[] = {"params", "grads", "optimizer", "activations",
                                            "buffers"};
    static const char *const time_parts[] = {"compute", "recompute", "tp comm", "dp comm",
                                             "offload", "optimizer", "reshard"};
    for (int gi = 0; gi < p->ngroups; gi++) {
      const SvGroup *gr = &pl->cfg.cluster.group[gi];
      Breakdown b;
      breakdown(pl, s, gi, &b);
      y += 8;
      snprintf(buf, sizeof buf, "memory per GPU (%s): %.2f GiB", gr->name, gb(b.total_m));
      svg_label(f, 10, y + 12, "start", "#000", buf);
      svg_stack(f, y, b.m, mem_parts, SV_NM + 1, mscale);
      double cx = svg_usable(f, p->cap[gi], mscale, y - 4, y + 20);
      snprintf(buf, sizeof buf, "usable %.2f GiB", gb(p->cap[gi]));
      svg_label(f, cx, y - 6, "end", "#444", buf);
      y += 44;
      snprintf(buf, sizeof buf, "step time (%s): %.2f ms", gr->name, b.total_t * 1e3);
      svg_label(f, 10, y + 12, "start", "#000", buf);
      svg_stack(f, y, b.t, time_parts, SV_NT + 1, tscale);
      y += 44;
    }
  }
  y += 8;
  svg_label(f, 10, y, "start", "#000", "against the baselines, priced alike: step time, and "
            "memory per GPU (dashed: usable)");
  y += 22;
  if (s->feasible) {
    svg_compare(f, y, "mtc plan", true, s->time, smem, p->cap[0], tscale, mscale, NULL);
    y += 40;
  }
  for (int i = 0; i < pl->nbaselines; i++) {
    const SvBaseline *b = &pl->baseline[i];
    double m = 0;
    for (int g = 0; g < p->ngroups; g++)
      m = fmax(m, b->sol.mem[g]);
    snprintf(buf, sizeof buf, "%s%s", b->name, b->ckpt ? " + checkpointing" : "");
    svg_compare(f, y, buf, b->sol.feasible, b->sol.time, m, p->cap[0], tscale, mscale, b->why);
    y += 40;
  }
  fputs("</svg>\n", f);
}

int sv_write_svg(const SvPlan *p, const char *path, IrDiag *d) {
  bool out = !strcmp(path, "-");
  FILE *f = out ? stdout : fopen(path, "w");
  if (!f)
    return ir_error(d, (IrLoc){0}, "cannot write %s: %s", path, strerror(errno));
  sv_report_svg(f, p);
  if (out ? fflush(f) : fclose(f))
    return ir_error(d, (IrLoc){0}, "cannot write %s: %s", path, strerror(errno));
  return 0;
}

// ---- plan.json ----------------------------------------------------------------------------------

static cJSON *memory_json(const Breakdown *b, double cap) {
  cJSON *m = cJSON_CreateObject();
  for (int i = 0; i < SV_NM; i++)
    cJSON_AddNumberToObject(m, mem_names[i], b->m[i]);
  cJSON_AddNumberToObject(m, "buffers", b->m[SV_NM]);
  cJSON_AddNumberToObject(m, "total", b->total_m);
  cJSON_AddNumberToObject(m, "capacity", cap);
  return m;
}

static cJSON *plan_json(const SvPlan *pl) {
  const SvProblem *p = pl->prob;
  const SvSolution *s = &pl->sol;
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "version", 1);
  cJSON_AddStringToObject(root, "model", pl->model->g->name ? pl->model->g->name : "model");
  cJSON_AddBoolToObject(root, "feasible", s->feasible);
  if (!s->feasible)
    cJSON_AddStringToObject(root, "why", pl->why);
  cJSON_AddStringToObject(root, "precision", pl->model->bf16 ? "bf16" : "fp32");
  cJSON_AddStringToObject(root, "grad_precision", pl->model->grads_bf16 ? "bf16" : "fp32");
  cJSON_AddBoolToObject(root, "seq_parallel", pl->cfg.seq_parallel);
  cJSON *batch = cJSON_AddObjectToObject(root, "batch");
  cJSON_AddNumberToObject(batch, "global", (double)pl->global_batch);
  cJSON_AddNumberToObject(batch, "micro", (double)pl->micro_batch);
  cJSON_AddNumberToObject(batch, "micro_batches", (double)p->micro_total);
  cJSON_AddNumberToObject(batch, "seq", (double)pl->seq);
  // the model's dims as planned: a plan applies to this model at these sizes only
  const IrGraph *mg = pl->model->g;
  cJSON *dims = cJSON_AddObjectToObject(root, "dims");
  for (int i = 0; i < mg->syms.n; i++)   // (the batch dim: the first group's micro-batch)
    if (mg->syms.bound[i])
      cJSON_AddNumberToObject(dims, mg->syms.name[i], i == pl->model->batch_sym
                                                          ? (double)pl->micro_batch
                                                          : (double)mg->syms.value[i]);

  cJSON *groups = cJSON_AddArrayToObject(root, "groups");
  for (int g = 0; g < p->ngroups; g++) {
    const SvGroup *gr = &pl->cfg.cluster.group[g];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", gr->name);
    cJSON_AddStringToObject(o, "gpu", gr->dev.name);
    cJSON_AddNumberToObject(o, "count", gr->count);
    cJSON_AddNumberToObject(o, "gpus_per_node", gr->per_node);
    cJSON_AddNumberToObject(o, "mem_bytes", gr->dev.mem);
    cJSON_AddNumberToObject(o, "usable_bytes", p->cap[g]);
    if (s->feasible) {
      Breakdown b;
      breakdown(pl, s, g, &b);
      cJSON_AddNumberToObject(o, "micro_batches", (double)s->batch[g]);
      if (pl->cfg.group_rows[0])
        cJSON_AddNumberToObject(o, "micro", (double)p->rows[g]);
      cJSON_AddNumberToObject(o, "state_share", s->share[g]);
      cJSON_AddNumberToObject(o, "step_time_s", s->group_time[g]);
      cJSON_AddItemToObject(o, "memory", memory_json(&b, p->cap[g]));
      cJSON_AddNumberToObject(o, "host_bytes", s->host[g]);
      cJSON *t = cJSON_AddObjectToObject(o, "time_s");
      for (int i = 0; i <= SV_NT; i++)
        cJSON_AddNumberToObject(t, sv_time_names[i], b.t[i]);
    }
    cJSON_AddItemToArray(groups, o);
  }

  if (s->feasible) {
    cJSON_AddNumberToObject(root, "step_time_s", s->time);
    if (pl->one_size > 0 && isfinite(pl->one_size))   // (each group's micro-batches its size)
      cJSON_AddNumberToObject(root, "one_size_step_time_s", pl->one_size);
    cJSON *blocks = cJSON_AddArrayToObject(root, "blocks");
    const SvModel *m = pl->model;
    int *seen = calloc((size_t)p->nunits + 1, sizeof *seen);   // blocks of each unit so far
    IR_ASSERT(seen);
    for (int bi = 0; bi < m->nblocks; bi++) {
      int u = m->block[bi].unit;
      if (u < 0)
        continue;
      const SvChoice *c = &p->unit[u].choice[s->pick[u]];
      // the unit's first K blocks checkpoint or swap
      bool moved = seen[u]++ < sv_ckpt_blocks(p, s, u) + sv_swap_blocks(p, s, u);
      SvLayout l = p->layout[c->layout];
      cJSON *o = cJSON_CreateObject();
      cJSON_AddNumberToObject(o, "id", bi);
      cJSON_AddStringToObject(o, "name", m->block[bi].name);
      cJSON_AddNumberToObject(o, "unit", u);
      // data parallel over the tp ranks too: dp x tp replicas of tp 1, in a mesh of tp
      // batch_tp (sv_apply_read; which it needs where no block is tensor parallel)
      // tensor parallel over sub of the tp ranks: dp x tp / sub replicas of tp sub
      cJSON_AddNumberToObject(o, "dp", l.dp * sv_layout_parts(l));
      cJSON_AddNumberToObject(o, "tp", sv_layout_split(l));
      if (l.batch)
        cJSON_AddNumberToObject(o, "batch_tp", l.tp);
      cJSON_AddNumberToObject(o, "q", l.q);
      cJSON_AddBoolToObject(o, "checkpoint", moved && c->ckpt);
      cJSON_AddBoolToObject(o, "swap", moved && c->swap);
      cJSON_AddNumberToObject(o, "zero", c->zero);
      cJSON_AddNumberToObject(o, "offload", c->offload / 100.0);
      cJSON_AddBoolToObject(o, "offload_grads", c->grads);
      cJSON_AddBoolToObject(o, "offload_params", c->params);
      cJSON_AddItemToArray(blocks, o);
    }
    free(seen);
  }

  const SvSolveStats *st = &pl->stats;
  cJSON *so = cJSON_AddObjectToObject(root, "solver");
  cJSON_AddNumberToObject(so, "variables", st->vars);
  cJSON_AddNumberToObject(so, "binaries", st->binaries);
  cJSON_AddNumberToObject(so, "integers", st->ints);
  cJSON_AddNumberToObject(so, "rows", st->rows);
  cJSON_AddNumberToObject(so, "nonzeros", st->nonzeros);
  cJSON_AddNumberToObject(so, "units", p->nunits);
  cJSON_AddNumberToObject(so, "choices", st->choices);
  cJSON_AddNumberToObject(so, "choices_kept", st->choices_kept);
  cJSON_AddNumberToObject(so, "seconds", st->seconds);
  cJSON_AddNumberToObject(so, "gap", isfinite(st->gap) ? st->gap : 1);
  cJSON_AddStringToObject(so, "status", st->status ? st->status : "");
  cJSON_AddBoolToObject(so, "seeded", st->seeded);
  cJSON_AddNumberToObject(so, "plan_seconds", pl->seconds);

  cJSON *bl = cJSON_AddArrayToObject(root, "baselines");
  for (int i = 0; i < pl->nbaselines; i++) {
    const SvBaseline *b = &pl->baseline[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", b->name);
    if (b->why[0]) {   // the model cannot take the layout
      cJSON_AddBoolToObject(o, "applies", false);
      cJSON_AddStringToObject(o, "why", b->why);
      cJSON_AddItemToArray(bl, o);
      continue;
    }
    cJSON_AddBoolToObject(o, "fits", b->sol.feasible);
    cJSON_AddBoolToObject(o, "checkpoint", b->ckpt);
    double m = 0;
    for (int g = 0; g < p->ngroups; g++)
      m = fmax(m, b->sol.mem[g]);
    cJSON_AddNumberToObject(o, "memory_bytes", m);
    if (b->sol.feasible) {
      cJSON_AddNumberToObject(o, "step_time_s", b->sol.time);
      if (s->feasible)
        cJSON_AddNumberToObject(o, "speedup", b->sol.time / s->time);
    } else {
      cJSON_AddNumberToObject(o, "over_bytes", b->need);
      cJSON_AddNumberToObject(o, "host_over_bytes", b->host_need);
    }
    cJSON_AddItemToArray(bl, o);
  }
  return root;
}

int sv_write_json(const SvPlan *pl, const char *path, IrDiag *d) {
  cJSON *root = plan_json(pl);
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  if (!text)
    return ir_error(d, (IrLoc){0}, "plan.json: out of memory");
  FILE *f = strcmp(path, "-") ? fopen(path, "w") : stdout;
  int rc = 0;
  if (!f)
    rc = ir_error(d, (IrLoc){0}, "cannot write %s", path);
  else {
    fputs(text, f);
    fputc('\n', f);
    if (f != stdout && fclose(f))
      rc = ir_error(d, (IrLoc){0}, "cannot write %s", path);
  }
  cJSON_free(text);
  return rc;
}
