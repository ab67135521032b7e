// The cluster model: a built-in table of devices, clusters of one device
// type from command-line flags, and heterogeneous clusters (groups of
// devices) from a JSON file.
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "internal.h"

#define GB 1e9
#define TF 1e12
#define MiB (1024.0 * 1024.0)

// Datasheet numbers (REFERENCES.md section 6; dense, no sparsity). Links are
// per GPU and per direction: NVLink 3 = 600 GB/s bidirectional -> 300; PCIe
// Gen3/4/5 x16 = 16/32/64 GB/s. Inter-node: the GPU's NIC (EDR 100, HDR 200,
// NDR 400 Gb/s; consumer and L4 servers: a 25 Gb/s share of Ethernet). Host
// memory is a typical server's CPU memory divided by its GPUs; CPU AdamW runs
// at about 4e9 parameters/s per 8-GPU server (ZeRO-Offload's CPU-Adam). The
// cost model applies the efficiency factors below to all of these (cost.c).
//
// The factors: REFERENCES.md section 6 has the evidence: an H200 runs bf16
// GEMMs at 790 of 989 TFLOP/s and copies at 4.3 of 4.8 TB/s, and whole
// training steps reach 45-56% of peak. A calibrated profile (mtc calibrate)
// replaces them with measured rates.
// A GPU's efficiencies. gemm is large GEMMs' sustained share of the tensor
// cores' peak (an H200 measured 790 TFLOP/s of bf16 on large random GEMMs,
// REFERENCES.md section 6: 0.80 of 989, 0.83 before the shape's own losses,
// gemm_shape); smaller and skinnier GEMMs lose more by their shape.
// A collective's latency grows with its ring: each of its steps waits for the one before
// (NCCL's tuning model, src/graph/tuning.cc, its Simple protocol's ring: 3.4 us a step over
// NVLink, 5.7 over PCIe, 9.6 between nodes), so an all-gather over 1536 GPUs of 8 a node starts
// 6.4 ms after it is called.
#define EFF_GPU(hop)                                                                               \
  .eff = {.gemm = 0.83, .attn = 0.45, .simt = 0.50, .mem = 0.80, .update = 0.80, .link = 0.80,  \
   .gather = 1, .scatter = 1, .host = 0.80, .launch = 4e-6, .alpha_intra = 10e-6,                 \
   .alpha_inter = 25e-6, .hop_intra = hop, .hop_inter = 9.6e-6, .overlap = 0.8}
#define HOP_NVLINK 3.4e-6
#define HOP_PCIE 5.7e-6
static const SvDevice devices[] = {
    // name          bf16 (fp16)  fp32       memory        HBM         intra     inter
    //                                          host      host mem   CPU AdamW
    //                                          efficiencies (a ring's step), SMs
    {"V100-32GB",    125 * TF,  15.7 * TF, 32 * GiB,      900 * GB,   150 * GB, 12.5 * GB,
                                             16 * GB,  128 * GiB, 5e8,
                                             EFF_GPU(HOP_NVLINK), 80},
    {"A100-40GB",    312 * TF,  19.5 * TF, 40 * GiB,      1555 * GB,  300 * GB, 25 * GB,
                                             32 * GB,  128 * GiB, 5e8,
                                             EFF_GPU(HOP_NVLINK), 108},
    {"A100-80GB",    312 * TF,  19.5 * TF, 80 * GiB,      2039 * GB,  300 * GB, 25 * GB,
                                             32 * GB,  256 * GiB, 5e8,
                                             EFF_GPU(HOP_NVLINK), 108},
    {"H100-80GB",    989 * TF,  67 * TF,   80 * GiB,      3350 * GB,  450 * GB, 50 * GB,
                                             64 * GB,  256 * GiB, 5e8,
                                             EFF_GPU(HOP_NVLINK), 132},
    {"H200-141GB",   989 * TF,  67 * TF,   143771 * MiB,  4800 * GB,  450 * GB, 50 * GB,
                                             64 * GB,  256 * GiB, 5e8,
                                             EFF_GPU(HOP_NVLINK), 132},
    {"L4-24GB",      121 * TF,  30.3 * TF, 23034 * MiB,   300 * GB,   32 * GB,  3.125 * GB,
                                             32 * GB,  64 * GiB,  5e8,
                                             EFF_GPU(HOP_PCIE), 58},
    {"RTX4090-24GB", 165 * TF,  82.6 * TF, 24564 * MiB,   1008 * GB,  32 * GB,  3.125 * GB,
                                             32 * GB,  64 * GiB,  3e8,
                                             EFF_GPU(HOP_PCIE), 128},
};
#define NDEVICES ((int)(sizeof devices / sizeof devices[0]))

// A GPU as CUDA names it ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA GeForce
// RTX 4090", "Tesla V100-SXM2-32GB"): the one entry whose model ("H100", "RTX4090": its name
// before the last '-') is a word of it, or two words run together; of several, the one whose
// memory ("80GB") is the name's. NULL when none or several are.
static const SvDevice *cuda_named(const char *name) {
  char word[16][32];
  int nw = 0;
  for (const char *p = name; *p && nw < 16;) {
    size_t len = strcspn(p, " -_");
    if (len > 0 && len < sizeof word[0])  // a longer word names no model or memory: left out
      snprintf(word[nw++], sizeof word[0], "%.*s", (int)len, p);
    p += len + (p[len] != '\0');
  }
  const char *mem = NULL;   // a word like "80GB"
  for (int w = 0; w < nw; w++) {
    size_t len = strlen(word[w]);
    if (len > 2 && isdigit((unsigned char)word[w][0]) && !strcasecmp(word[w] + len - 2, "GB"))
      mem = word[w];
  }
  const SvDevice *one = NULL, *hit = NULL;
  int nmodel = 0, nmem = 0;
  for (int i = 0; i < NDEVICES; i++) {
    const char *dash = strrchr(devices[i].name, '-');
    int mlen = (int)(dash - devices[i].name);
    bool model = false;
    for (int w = 0; w < nw && !model; w++) {
      char two[64];
      snprintf(two, sizeof two, "%.31s%.31s", word[w], w + 1 < nw ? word[w + 1] : "");
      model = ((int)strlen(word[w]) == mlen && !strncasecmp(word[w], devices[i].name, mlen)) ||
              ((int)strlen(two) == mlen && !strncasecmp(two, devices[i].name, mlen));
    }
    if (model) {
      nmodel++;
      one = &devices[i];
    }
    if (model && mem && !strcasecmp(mem, dash + 1)) {
      nmem++;
      hit = &devices[i];
    }
  }
  return nmodel == 1 ? one : nmem == 1 ? hit : NULL;
}

const SvDevice *sv_device_find(const char *name) {
  for (int i = 0; i < NDEVICES; i++)
    if (!strcasecmp(devices[i].name, name))
      return &devices[i];
  // "H100" alone names the only H100 entry
  const SvDevice *hit = NULL;
  size_t n = strlen(name);
  for (int i = 0; i < NDEVICES; i++)
    if (n > 0 && !strncasecmp(devices[i].name, name, n) && devices[i].name[n] == '-') {
      if (hit)
        return NULL;
      hit = &devices[i];
    }
  return hit ? hit : cuda_named(name);
}

const char *sv_device_names(void) {
  static char buf[256];
  if (!buf[0])
    for (int i = 0; i < NDEVICES; i++) {
      strcat(buf, devices[i].name);
      if (i + 1 < NDEVICES)
        strcat(buf, ", ");
    }
  return buf;
}

int sv_parse_size(const char *s, double *bytes) {
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (end == s || errno || !(x >= 0) || !isfinite(x))
    return -1;
  while (*end == ' ')
    end++;
  double unit = 1;
  static const struct { const char *suffix; double unit; } units[] = {
      {"", 1},          {"B", 1},          {"K", 1e3},        {"KB", 1e3},       {"KiB", 1024.0},
      {"M", 1e6},       {"MB", 1e6},       {"MiB", MiB},      {"G", 1e9},        {"GB", 1e9},
      {"GiB", GiB},     {"T", 1e12},       {"TB", 1e12},      {"TiB", GiB * 1024.0},
  };
  bool found = false;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (!strcasecmp(end, units[i].suffix)) {
      unit = units[i].unit;
      found = true;
      break;
    }
  if (!found)
    return -1;
  *bytes = x * unit;
  return 0;
}

int sv_cluster_gpus(const SvCluster *c) {
  int n = 0;
  for (int i = 0; i < c->ngroups; i++)
    n += c->group[i].count;
  return n;
}

static void group_init(SvGroup *gr, const SvDevice *dev, int count) {
  memset(gr, 0, sizeof *gr);
  snprintf(gr->name, sizeof gr->name, "%s", dev->name);
  gr->dev = *dev;
  gr->count = count;
  gr->per_node = count < 8 || dev->cores > 0 ? count : 8;   // a CPU's ranks: one machine
  gr->reserve = 2 * GiB;   // Elixir's rule: the GPU's memory minus 2 GiB holds the training state
}

int sv_cluster_simple(SvCluster *c, const char *gpu, int count, int per_node, double mem,
                      double intra_bw, double inter_bw, IrDiag *d) {
  const SvDevice *dev = sv_device_find(gpu);
  if (!dev)
    return ir_error(d, (IrLoc){0}, "unknown GPU '%s' (known: %s)", gpu, sv_device_names());
  return sv_cluster_of(c, dev, count, per_node, mem, intra_bw, inter_bw, d);
}

int sv_cluster_of(SvCluster *c, const SvDevice *dev, int count, int per_node, double mem,
                  double intra_bw, double inter_bw, IrDiag *d) {
  if (count < 1 || count > SV_MAX_GPUS)
    return ir_error(d, (IrLoc){0}, "--gpus %d: give from 1 to %d GPUs", count, SV_MAX_GPUS);
  memset(c, 0, sizeof *c);
  c->ngroups = 1;
  SvGroup *gr = &c->group[0];
  group_init(gr, dev, count);
  if (per_node > 0)
    gr->per_node = per_node < count ? per_node : count;
  if (mem > 0)
    gr->dev.mem = mem;
  if (intra_bw > 0)
    gr->dev.intra_bw = intra_bw;
  if (inter_bw > 0)
    gr->dev.inter_bw = inter_bw;
  if (gr->dev.mem <= gr->reserve)
    gr->reserve = gr->dev.mem / 8;
  return 0;
}

double sv_group_load(const SvGroup *gr) {
  const SvDevice *v = &gr->dev;
  if (v->cores <= 0)
    return 1;
  double now = (double)gr->per_node * v->threads / v->cores;
  double then = (double)v->ranks * v->threads / v->cores;
  return fmax(1, now) / fmax(1, then);
}

// Where x falls among n sorted values: the index i of the pair (v[i], v[i+1])
// around it and the share w of the way from the first to the second, in
// log space (clamped to the ends).
static void bracket(const double *v, int n, double x, int *i, double *w) {
  *i = 0, *w = 0;
  if (n < 2 || x <= v[0])
    return;
  if (x >= v[n - 1]) {
    *i = n - 2, *w = 1;
    return;
  }
  while (*i < n - 2 && x > v[*i + 1])
    (*i)++;
  *w = log(x / v[*i]) / log(v[*i + 1] / v[*i]);
}

// A measured curve (n points y[i] at increasing x[i]) at x: log-log between its points, the
// nearest end's value outside them.
static double curve_at(const double *xs, const double *ys, int n, double x) {
  int at;
  double w;
  bracket(xs, n, x, &at, &w);
  return exp((1 - w) * log(ys[at]) + w * log(ys[n > 1 ? at + 1 : at]));
}

double sv_op_seconds(const SvDevice *dev, IrOp op, double numel, bool bf16) {
  for (int i = 0; i < dev->nops; i++)
    if (dev->ops[i].op == op) {
      const SvOpRate *r = &dev->ops[i];
      return numel * curve_at(r->numel, bf16 ? r->sec_bf16 : r->sec, r->n, numel);
    }
  return -1;
}

double sv_coll_bw(const SvDevice *dev, SvColl kind, double bytes) {
  const SvCollRate *r = &dev->coll[kind];
  return r->n > 0 ? curve_at(r->bytes, r->bw, r->n, bytes) : -1;
}

// x inserted into the n sorted distinct values of v, unless it is among them; their new count.
static int add_value(double *v, int n, double x) {
  int at = 0;
  while (at < n && v[at] < x)
    at++;
  if (at < n && v[at] == x)
    return n;
  memmove(v + at + 1, v + at, sizeof *v * (size_t)(n - at));
  v[at] = x;
  return n + 1;
}

// The profile's attention grid: its distinct sequence lengths and head sizes, sorted.
static void attn_axes(const SvDevice *dev, double *t, int *nt, double *hs, int *nhs) {
  *nt = *nhs = 0;
  for (int e = 0; e < dev->nattn; e++) {
    *nt = add_value(t, *nt, dev->attn[e].t);
    *nhs = add_value(hs, *nhs, dev->attn[e].hs);
  }
}

static double attn_at(const SvDevice *dev, double t, double hs, bool bwd, bool bf16) {
  for (int e = 0; e < dev->nattn; e++)
    if (dev->attn[e].t == t && dev->attn[e].hs == hs)
      return bwd ? dev->attn[e].bwd[bf16] : dev->attn[e].fwd[bf16];
  return NAN;   // not a grid: parse_attention refuses it
}

// A measured grid's rate at x (dims coordinates, at most 3): multilinear in the logs of the
// coordinates and of the rate between the corners around x, each corner's rate rate(ctx, pt);
// outside the grid the nearest edge's. axis[c]: the grid's len[c] values of coordinate c, sorted.
static double log_grid(int dims, const double *const *axis, const int *len, const double *x,
                       double (*rate)(const void *ctx, const double *pt), const void *ctx) {
  int at[3];
  double w[3], logr = 0;
  for (int c = 0; c < dims; c++)
    bracket(axis[c], len[c], x[c], &at[c], &w[c]);
  for (int corner = 0; corner < 1 << dims; corner++) {
    double weight = 1, pt[3];
    for (int c = 0; c < dims; c++) {
      int hi = corner >> c & 1;
      if (len[c] < 2 && hi)
        weight = 0;
      pt[c] = axis[c][at[c] + (len[c] < 2 ? 0 : hi)];
      weight *= hi ? w[c] : 1 - w[c];
    }
    if (weight > 0)
      logr += weight * log(rate(ctx, pt));
  }
  return exp(logr);
}

typedef struct GridOf {
  const SvDevice *dev;
  bool bf16, bwd;   // (bwd: attention's)
} GridOf;

static double attn_corner(const void *ctx, const double *pt) {
  const GridOf *g = ctx;
  return attn_at(g->dev, pt[0], pt[1], g->bwd, g->bf16);
}

double sv_attn_rate(const SvDevice *dev, double t, double hs, bool bwd, bool bf16) {
  if (dev->nattn == 0)
    return -1;
  double axis[2][SV_MAXATT], x[2] = {t, hs};
  int len[2];
  attn_axes(dev, axis[0], &len[0], axis[1], &len[1]);
  const double *axes[2] = {axis[0], axis[1]};
  return log_grid(2, axes, len, x, attn_corner, &(GridOf){dev, bf16, bwd});
}

// The distinct values of one coordinate of the profile's GEMMs, sorted.
static int axis_values(const SvDevice *dev, int c, double *out) {
  int n = 0;
  for (int e = 0; e < dev->ngemm; e++)
    n = add_value(out, n, c == 0 ? dev->gemm[e].m : c == 1 ? dev->gemm[e].n : dev->gemm[e].k);
  return n;
}

static double grid_rate(const SvDevice *dev, double m, double n, double k, bool bf16) {
  for (int e = 0; e < dev->ngemm; e++) {
    const SvGemmRate *r = &dev->gemm[e];
    if (r->m == m && r->n == n && r->k == k)
      return bf16 ? r->bf16 : r->fp32;
  }
  return NAN;   // not a grid: parse_gemm refuses it
}

static double gemm_corner(const void *ctx, const double *pt) {
  const GridOf *g = ctx;
  return grid_rate(g->dev, pt[0], pt[1], pt[2], g->bf16);
}

// The share of eff.gemm's rate a GEMM of this shape keeps on a GPU of `sms`
// multiprocessors, as cuBLAS runs it: tiles of the output, one per
// multiprocessor at a time (the last wave partly idle, edge tiles partly
// empty), each tile's loop over k with a fixed start (filling the pipeline,
// writing the tile) worth GEMM_K0 of its k. Of two tilings the better:
// 128 x 128 at the full rate, or 64 x 64 (four times the tiles, for small
// GEMMs) at GEMM_SMALL_TILE of it (each operand element reused half as often).
#define GEMM_K0 64.0
#define GEMM_SMALL_TILE 0.6
static double gemm_shape(int sms, double batch, double m, double n, double k) {
  static const struct { double side, rate; } tiling[] = {{128, 1}, {64, GEMM_SMALL_TILE}};
  double best = 0;
  for (int i = 0; i < 2; i++) {
    double t = tiling[i].side, tiles = batch * ceil(m / t) * ceil(n / t);
    double used = batch * m * n / (ceil(tiles / sms) * sms * t * t);
    best = fmax(best, tiling[i].rate * used);
  }
  return best * k / (k + GEMM_K0);
}

// A profile's grid of shapes: trilinear in the logs (log_grid); without one, a GPU's
// efficiency less what the shape loses on its multiprocessors.
double sv_gemm_rate(const SvDevice *dev, double batch, double m, double n, double k, bool bf16) {
  if (dev->ngemm == 0) {
    double rate = (bf16 ? dev->flops_bf16 : dev->flops_fp32) * dev->eff.gemm;
    return dev->sms > 0 ? rate * gemm_shape(dev->sms, batch, m, n, k) : rate;
  }
  double axis[3][SV_MAXGEMM], x[3] = {m, n, k};
  int len[3];
  for (int c = 0; c < 3; c++)
    len[c] = axis_values(dev, c, axis[c]);
  const double *axes[3] = {axis[0], axis[1], axis[2]};
  return log_grid(3, axes, len, x, gemm_corner, &(GridOf){dev, bf16, false});
}

// ---- JSON cluster files -------------------------------------------------------------------------

// What a size, bandwidth or rate in a cluster file may be: its unit, the range a real device's
// value lies in (a number below it is most likely in another unit: 80 meant as 80 GiB, 300 as
// 300 GB/s), and an example.
typedef struct Amount {
  const char *unit;
  double lo, hi;
  const char *example;
} Amount;

static const Amount BYTES = {"bytes", MiB, 0x1p60, "\"80GiB\""};
static const Amount BYTES_PER_S = {"bytes/s", 1e6, 1e15, "\"450GB\" or 450e9"};
static const Amount FLOPS = {"FLOP/s", 1e9, 1e18, "989e12"};
static const Amount PARAMS_PER_S = {"parameters/s", 1e3, 1e15, "5e8"};

// A number, or a string like "40GiB" / "25GB", in a's range; with zero_ok also 0.
static int json_amount(const cJSON *o, const char *key, const Amount *a, bool zero_ok, double *out,
                       const char *where, IrDiag *d) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v)
    return 0;
  double x = NAN;
  if (cJSON_IsNumber(v))
    x = v->valuedouble;
  else if (cJSON_IsString(v) && sv_parse_size(v->valuestring, &x))
    x = NAN;
  if ((zero_ok && x == 0) || (x >= a->lo && x <= a->hi)) {
    *out = x;
    return 0;
  }
  if (isnan(x))
    return ir_error(d, (IrLoc){0}, "%s: \"%s\" must be a number of %s or a string like %s",
                    where, key, a->unit, a->example);
  return ir_error(d, (IrLoc){0}, "%s: \"%s\" is %g %s; it must be %sfrom %g to %g %s (like %s)",
                  where, key, x, a->unit, zero_ok ? "0 or " : "", a->lo, a->hi, a->unit,
                  a->example);
}

// The keys of object o: each one of known, none twice.
static int json_keys(const cJSON *o, const char *const *known, const char *where, IrDiag *d) {
  for (const cJSON *it = o->child; it; it = it->next) {
    bool ok = false;
    for (int i = 0; known[i]; i++)
      ok |= !strcmp(it->string, known[i]);
    if (!ok)
      return ir_error(d, (IrLoc){0}, "%s: unknown key \"%s\"", where, it->string);
    for (const cJSON *before = o->child; before != it; before = before->next)
      if (!strcmp(before->string, it->string))
        return ir_error(d, (IrLoc){0}, "%s: the key \"%s\" is given twice", where, it->string);
  }
  return 0;
}

int sv_json_number(const cJSON *o, const char *key, double lo, double hi, bool whole,
                   bool required, double *out, const char *where, IrDiag *d) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v && !required)
    return 0;
  double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
  if (x >= lo && x <= hi && (!whole || x == floor(x))) {
    *out = x;
    return 0;
  }
  return ir_error(d, (IrLoc){0}, "%s: \"%s\" must be a %s from %g to %g", where, key,
                  whole ? "whole number" : "number", lo, hi);
}

static int json_int(const cJSON *o, const char *key, int *out, const char *where, IrDiag *d) {
  double x = *out;
  if (sv_json_number(o, key, 1, SV_MAX_GPUS, true, false, &x, where, d))
    return -1;
  *out = (int)x;
  return 0;
}

// A CPU has no datasheet entry: its rates are measured (mtc calibrate), the
// efficiencies those of measured rates unless the profile says otherwise.
static const SvDevice cpu_base = {
    .name = "CPU",
    .eff = {.gemm = 1, .attn = 1, .simt = 1, .mem = 1, .update = 1, .link = 1, .gather = 1,
            .scatter = 1, .host = 1},
    .threads = 1,
    .ranks = 1,
};

// "efficiency": {"gemm": 1, "launch": 2e-6, ...}: SvEff's fields.
static int parse_eff(SvEff *e, const cJSON *o, const char *where, IrDiag *d) {
  static const char *const known[] = {"gemm",   "attn",        "simt",        "mem",
                                      "update", "link",        "gather",      "scatter",
                                      "host",   "launch",      "alpha_intra", "alpha_inter",
                                      "hop_intra", "hop_inter", "overlap", NULL};
  if (!o)
    return 0;
  char at[600];
  snprintf(at, sizeof at, "%s: \"efficiency\"", where);
  if (!cJSON_IsObject(o))
    return ir_error(d, (IrLoc){0}, "%s must be an object", at);
  if (json_keys(o, known, at, d))
    return -1;
  // shares of a rate: above 0, and above 1 only where the rate they scale was measured on
  // another kernel (a profile's AdamW beside its adds); times and overlap may be 0
  struct { const char *key; double *at, lo, hi; } f[] = {
      {"gemm", &e->gemm, 1e-6, 100},         {"attn", &e->attn, 1e-6, 100},
      {"simt", &e->simt, 1e-6, 100},         {"mem", &e->mem, 1e-6, 100},
      {"update", &e->update, 1e-6, 100},     {"link", &e->link, 1e-6, 100},
      {"gather", &e->gather, 1e-6, 100},     {"scatter", &e->scatter, 1e-6, 100},
      {"host", &e->host, 1e-6, 100},
      {"launch", &e->launch, 0, 1},          {"alpha_intra", &e->alpha_intra, 0, 1},
      {"alpha_inter", &e->alpha_inter, 0, 1}, {"hop_intra", &e->hop_intra, 0, 1},
      {"hop_inter", &e->hop_inter, 0, 1},     {"overlap", &e->overlap, 0, 1}};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if (sv_json_number(o, f[i].key, f[i].lo, f[i].hi, false, false, f[i].at, at, d))
      return -1;
  if (!cJSON_GetObjectItemCaseSensitive(o, "scatter"))   // (one figure for both, before)
    e->scatter = e->gather;
  return 0;
}

// "key": a list of at most `most` rows, each `row` (for messages): `width` numbers (or, all of
// them alike, `fewer`), the first `sizes` of them sizes from 1 to 1e9 and the others rates from
// 1 to FLOPS.hi; into x, row by row, `width` apart (the numbers a row leaves out: 0). Their
// count, or -1 with d.
static int json_rows(const cJSON *o, const char *key, const char *row, int most, int width,
                     int fewer, int sizes, double *x, const char *where, IrDiag *d) {
  int n = cJSON_GetArraySize(o);
  if (!cJSON_IsArray(o) || n > most)
    return ir_error(d, (IrLoc){0}, "%s: \"%s\" must be a list of at most %d %s", where, key,
                    most, row);
  int have = n > 0 ? cJSON_GetArraySize(cJSON_GetArrayItem(o, 0)) : width;
  have = have == fewer ? fewer : width;
  for (int e = 0; e < n; e++) {
    const cJSON *r = cJSON_GetArrayItem(o, e);
    for (int i = 0; i < width; i++) {
      const cJSON *c = cJSON_GetArrayItem(r, i);
      double v = x[e * width + i] = i >= have ? 0 : cJSON_IsNumber(c) ? c->valuedouble : NAN;
      if (!cJSON_IsArray(r) || cJSON_GetArraySize(r) != have ||
          !(i >= have || (v >= 1 && v <= (i < sizes ? 1e9 : FLOPS.hi))))
        return ir_error(d, (IrLoc){0}, "%s: \"%s\"[%d] must be %s, sizes from 1 to 1e9 and "
                        "rates from 1 to %g", where, key, e, row, FLOPS.hi);
    }
  }
  return n;
}

// "gemm": [[m, n, k, fp32 FLOP/s, bf16 FLOP/s], ...], a grid of shapes.
static int parse_gemm(SvDevice *v, const cJSON *o, const char *where, IrDiag *d) {
  if (!o)
    return 0;
  double x[SV_MAXGEMM][5];
  int n = json_rows(o, "gemm", "[m, n, k, fp32 FLOP/s, bf16 FLOP/s]", SV_MAXGEMM, 5, 5, 3,
                    &x[0][0], where, d);
  if (n < 0)
    return -1;
  for (int e = 0; e < n; e++)
    v->gemm[e] = (SvGemmRate){x[e][0], x[e][1], x[e][2], x[e][3], x[e][4]};
  v->ngemm = n;
  double axis[3][SV_MAXGEMM];
  int cells = 1;
  for (int c = 0; c < 3; c++)
    cells *= axis_values(v, c, axis[c]);
  if (cells != n)
    return ir_error(d, (IrLoc){0}, "%s: \"gemm\"'s shapes must form a grid (every m with every "
                    "n and every k, once each): %d shapes span %d", where, n, cells);
  return 0;
}

// "attention": [[t, hs, forward FLOP/s, backward FLOP/s, bf16 forward, bf16 backward], ...], a
// grid of shapes (the bf16 rates may be left out, every row alike: the float32 ones'), as
// mtc calibrate measures them.
static int parse_attention(SvDevice *v, const cJSON *o, const char *where, IrDiag *d) {
  if (!o)
    return 0;
  double x[SV_MAXATT][6];
  int n = json_rows(o, "attention", "[tokens, head size, forward FLOP/s, backward FLOP/s, "
                    "bf16 forward, bf16 backward] (the bf16 rates may be left out)", SV_MAXATT, 6,
                    4, 2, &x[0][0], where, d);
  if (n < 0)
    return -1;
  for (int e = 0; e < n; e++) {
    bool bf16 = x[e][4] > 0;
    v->attn[e] = (SvAttnRate){x[e][0], x[e][1], {x[e][2], bf16 ? x[e][4] : x[e][2]},
                              {x[e][3], bf16 ? x[e][5] : x[e][3]}};
  }
  v->nattn = n;
  double t[SV_MAXATT], hs[SV_MAXATT];
  int nt, nhs;
  attn_axes(v, t, &nt, hs, &nhs);
  bool grid = nt * nhs == n;
  for (int i = 0; grid && i < nt; i++)
    for (int j = 0; grid && j < nhs; j++)
      grid = !isnan(attn_at(v, t[i], hs[j], false, false));
  if (!grid)
    return ir_error(d, (IrLoc){0}, "%s: \"attention\"'s shapes must form a grid (every token "
                    "count with every head size, once each): %d shapes span %d", where, n,
                    nt * nhs);
  return 0;
}

// A measured curve, 1 to SV_MAXPTS pairs [x, y] into x[] and y[] (*n of them): x from 1 to
// xmax, increasing, y from ymin to ymax. With y2, the points may be triples [x, y, y2], all
// alike (y2: y where they are pairs). False when it is not one.
static bool read_curve(const cJSON *it, double xmax, double ymin, double ymax, double *x,
                       double *y, double *y2, int *n) {
  *n = cJSON_GetArraySize(it);
  bool ok = cJSON_IsArray(it) && *n >= 1 && *n <= SV_MAXPTS;
  int width = ok ? cJSON_GetArraySize(cJSON_GetArrayItem(it, 0)) : 2;
  ok = ok && (width == 2 || (y2 && width == 3));
  for (int i = 0; ok && i < *n; i++) {
    const cJSON *pt = cJSON_GetArrayItem(it, i);
    const cJSON *a = cJSON_GetArrayItem(pt, 0), *b = cJSON_GetArrayItem(pt, 1);
    const cJSON *c = cJSON_GetArrayItem(pt, width - 1);
    ok = cJSON_IsArray(pt) && cJSON_GetArraySize(pt) == width && cJSON_IsNumber(a) &&
         cJSON_IsNumber(b) && cJSON_IsNumber(c) && a->valuedouble >= 1 &&
         a->valuedouble <= xmax && b->valuedouble >= ymin && b->valuedouble <= ymax &&
         c->valuedouble >= ymin && c->valuedouble <= ymax && (i == 0 || a->valuedouble > x[i - 1]);
    if (ok)
      x[i] = a->valuedouble, y[i] = b->valuedouble;
    if (ok && y2)
      y2[i] = c->valuedouble;
  }
  return ok;
}

// "ops": {"gelu": [[numel, seconds per element, bf16's], ...], ...}: IR ops (ir/ops.def), sizes
// increasing (the bf16 variant's seconds may be left out: the float32 one's).
static int parse_ops(SvDevice *v, const cJSON *o, const char *where, IrDiag *d) {
  if (!o)
    return 0;
  if (!cJSON_IsObject(o))
    return ir_error(d, (IrLoc){0}, "%s: \"ops\" must be an object of IR ops", where);
  v->nops = 0;
  for (const cJSON *it = o->child; it; it = it->next) {
    IrOp op = ir_op_lookup(it->string);
    if (op == OP_COUNT)
      return ir_error(d, (IrLoc){0}, "%s: \"ops\": no IR op is named '%s'", where, it->string);
    if (v->nops == SV_MAXOPS)
      return ir_error(d, (IrLoc){0}, "%s: \"ops\": at most %d ops", where, SV_MAXOPS);
    for (int i = 0; i < v->nops; i++)
      if (v->ops[i].op == op)
        return ir_error(d, (IrLoc){0}, "%s: \"ops\": '%s' is given twice", where, it->string);
    SvOpRate *r = &v->ops[v->nops++];
    r->op = op;
    if (!read_curve(it, 1e300, DBL_MIN, 1 - DBL_EPSILON, r->numel, r->sec, r->sec_bf16, &r->n))
      return ir_error(d, (IrLoc){0}, "%s: \"ops\": '%s' must be 1 to %d pairs [elements, "
                      "seconds per element] (or triples, the bf16 variant's seconds last), "
                      "elements increasing", where, it->string, SV_MAXPTS);
  }
  return 0;
}

// "collectives": {"all_reduce": [[bytes, bus bytes/s], ...], "all_gather": ...,
// "reduce_scatter": ...}: each optional (by SvColl), sizes increasing.
static int parse_collectives(SvDevice *v, const cJSON *o, const char *where, IrDiag *d) {
  static const char *const names[SV_NCOLL + 1] = {"all_reduce", "all_gather", "reduce_scatter",
                                                  NULL};
  if (!o)
    return 0;
  char at[600];
  snprintf(at, sizeof at, "%s: \"collectives\"", where);
  if (!cJSON_IsObject(o))
    return ir_error(d, (IrLoc){0}, "%s must be an object of all_reduce, all_gather and "
                    "reduce_scatter", at);
  if (json_keys(o, names, at, d))
    return -1;
  for (int k = 0; k < SV_NCOLL; k++) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, names[k]);
    SvCollRate *r = &v->coll[k];
    if (it && !read_curve(it, 1e15, BYTES_PER_S.lo, BYTES_PER_S.hi, r->bytes, r->bw, NULL,
                          &r->n)) {
      r->n = 0;
      return ir_error(d, (IrLoc){0}, "%s: '%s' must be 1 to %d pairs [bytes, bus bytes/s], "
                      "bytes increasing, bandwidths from %g to %g bytes/s", at, names[k],
                      SV_MAXPTS, BYTES_PER_S.lo, BYTES_PER_S.hi);
    }
  }
  return 0;
}

static int parse_group(SvGroup *gr, const cJSON *o, const char *where, IrDiag *d) {
  static const char *const known[] = {"name", "gpu", "count", "gpus_per_node", "mem", "reserve",
                                "flops_bf16", "flops_fp32", "hbm_bw", "intra_bw", "inter_bw",
                                "host_bw", "host_mem", "cpu_adam", "cores", "threads", "ranks",
                                "sms", "efficiency", "gemm", "attention", "ops", "collectives",
                                NULL};
  if (!cJSON_IsObject(o))
    return ir_error(d, (IrLoc){0}, "%s: a group must be an object", where);
  if (json_keys(o, known, where, d))
    return -1;
  const cJSON *gpu = cJSON_GetObjectItemCaseSensitive(o, "gpu");
  if (!cJSON_IsString(gpu))
    return ir_error(d, (IrLoc){0}, "%s: \"gpu\" must name a device (%s, or CPU in a profile "
                    "that mtc calibrate wrote)", where, sv_device_names());
  bool cpu = !strcasecmp(gpu->valuestring, "CPU");
  const SvDevice *dev = cpu ? &cpu_base : sv_device_find(gpu->valuestring);
  if (!dev)
    return ir_error(d, (IrLoc){0}, "%s: unknown gpu '%s' (known: %s)", where, gpu->valuestring,
                    sv_device_names());
  int count = 0;
  if (json_int(o, "count", &count, where, d))
    return -1;
  if (count < 1)
    return ir_error(d, (IrLoc){0}, "%s: \"count\" (the number of GPUs) is required", where);
  group_init(gr, dev, count);
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
  if (name && !cJSON_IsString(name))
    return ir_error(d, (IrLoc){0}, "%s: \"name\" must be a string", where);
  SvDevice *v = &gr->dev;
  if (name)
    snprintf(gr->name, sizeof gr->name, "%s", name->valuestring);
  if (name && cpu)   // a measured CPU is known by its name (the profile's: its model)
    snprintf(v->name, sizeof v->name, "%s", name->valuestring);
  if (json_int(o, "gpus_per_node", &gr->per_node, where, d) ||
      json_amount(o, "mem", &BYTES, false, &v->mem, where, d) ||
      json_amount(o, "reserve", &BYTES, true, &gr->reserve, where, d) ||
      json_amount(o, "flops_bf16", &FLOPS, false, &v->flops_bf16, where, d) ||
      json_amount(o, "flops_fp32", &FLOPS, false, &v->flops_fp32, where, d) ||
      json_amount(o, "hbm_bw", &BYTES_PER_S, false, &v->hbm_bw, where, d) ||
      json_amount(o, "intra_bw", &BYTES_PER_S, false, &v->intra_bw, where, d) ||
      json_amount(o, "inter_bw", &BYTES_PER_S, false, &v->inter_bw, where, d) ||
      json_amount(o, "host_bw", &BYTES_PER_S, false, &v->host_bw, where, d) ||
      json_amount(o, "host_mem", &BYTES, true, &v->host_mem, where, d) ||   // 0: no offload
      json_amount(o, "cpu_adam", &PARAMS_PER_S, false, &v->cpu_adam, where, d) ||
      json_int(o, "cores", &v->cores, where, d) || json_int(o, "threads", &v->threads, where, d) ||
      json_int(o, "ranks", &v->ranks, where, d) || json_int(o, "sms", &v->sms, where, d) ||
      parse_eff(&v->eff, cJSON_GetObjectItemCaseSensitive(o, "efficiency"), where, d) ||
      parse_gemm(v, cJSON_GetObjectItemCaseSensitive(o, "gemm"), where, d) ||
      parse_attention(v, cJSON_GetObjectItemCaseSensitive(o, "attention"), where, d) ||
      parse_ops(v, cJSON_GetObjectItemCaseSensitive(o, "ops"), where, d) ||
      parse_collectives(v, cJSON_GetObjectItemCaseSensitive(o, "collectives"), where, d))
    return -1;
  if (cpu) {   // measured, not looked up: every rate given
    static const char *const need[] = {"mem", "flops_fp32", "flops_bf16", "hbm_bw", "intra_bw",
                                       "cores", NULL};
    for (int i = 0; need[i]; i++)
      if (!cJSON_GetObjectItemCaseSensitive(o, need[i]))
        return ir_error(d, (IrLoc){0}, "%s: a CPU has no datasheet entry, so \"%s\" is "
                        "required: measure this machine with mtc calibrate -o FILE", where,
                        need[i]);
    if (!cJSON_GetObjectItemCaseSensitive(o, "gpus_per_node"))
      gr->per_node = count;   // ranks on one machine
    v->inter_bw = v->inter_bw > 0 ? v->inter_bw : v->intra_bw;
    v->host_bw = v->host_bw > 0 ? v->host_bw : v->hbm_bw;
    v->cpu_adam = v->cpu_adam > 0 ? v->cpu_adam : v->hbm_bw / 28;
  }
  if (gr->per_node > count)
    gr->per_node = count;
  if (gr->reserve >= v->mem)
    return ir_error(d, (IrLoc){0}, "%s: the reserve (%.1f GiB) leaves nothing of %.1f GiB", where,
                    gr->reserve / GiB, v->mem / GiB);
  return 0;
}

// The top level: {"groups": [...], "cross_bw": ...}, its groups into c.
static int parse_groups(SvCluster *c, const cJSON *root, const char *path, IrDiag *d) {
  // "calibrated": mtc calibrate's note of how it measured (read by people)
  static const char *const known[] = {"groups", "cross_bw", "calibrated", NULL};
  if (!cJSON_IsObject(root))
    return ir_error(d, (IrLoc){0}, "%s: a cluster is a JSON object", path);
  if (json_keys(root, known, path, d))
    return -1;
  const cJSON *groups = cJSON_GetObjectItemCaseSensitive(root, "groups");
  int n = cJSON_GetArraySize(groups);
  if (!cJSON_IsArray(groups) || n < 1)
    return ir_error(d, (IrLoc){0},
                    "%s: needs \"groups\": [{\"gpu\": \"H100-80GB\", \"count\": 8}, ...]", path);
  if (n > SV_MAXGROUPS)
    return ir_error(d, (IrLoc){0}, "%s: %d groups; at most %d", path, n, SV_MAXGROUPS);
  for (int i = 0; i < n; i++) {
    char where[512];
    snprintf(where, sizeof where, "%s: groups[%d]", path, i);
    if (parse_group(&c->group[i], cJSON_GetArrayItem(groups, i), where, d))
      return -1;
  }
  c->ngroups = n;
  return 0;
}

int sv_cluster_parse(SvCluster *c, const char *json, const char *path, IrDiag *d) {
  memset(c, 0, sizeof *c);
  cJSON *root = cJSON_Parse(json);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    int line = 1;
    for (const char *s = json; at && s < at; s++)
      line += *s == '\n';
    return ir_error(d, (IrLoc){0}, "%s:%d: not valid JSON", path, line);
  }
  int rc = parse_groups(c, root, path, d);
  if (!rc)
    rc = json_amount(root, "cross_bw", &BYTES_PER_S, false, &c->cross_bw, path, d);
  cJSON_Delete(root);
  return rc;
}

int sv_device_load(SvDevice *dev, const char *path, IrDiag *d) {
  SvCluster c;
  if (sv_cluster_load(&c, path, d))
    return -1;
  if (c.ngroups != 1)
    return ir_error(d, (IrLoc){0}, "%s: a device profile has one group, not %d (give a cluster "
                    "of several with --cluster)", path, c.ngroups);
  *dev = c.group[0].dev;
  return 0;
}

int sv_cluster_load(SvCluster *c, const char *path, IrDiag *d) {
  FILE *f = ir_open_file(path, (IrLoc){0}, d);
  if (!f)
    return -1;
  char *buf = malloc(1 << 20);
  size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
  bool big = !feof(f), bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return ir_error(d, (IrLoc){0}, "cannot read %s: %s", path, strerror(errno ? errno : EIO));
  }
  if (!buf || big) {
    free(buf);
    return ir_error(d, (IrLoc){0}, "%s: a cluster file is at most 1 MiB", path);
  }
  buf[n] = '\0';
  int rc = sv_cluster_parse(c, buf, path, d);
  free(buf);
  return rc;
}
