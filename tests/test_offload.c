// Offload of optimizer state (passes/lower.c, runtime rt_adamw_host).
//
// The host AdamW against the device AdamW: the same parameters, gradients
// and moments through three steps give bit-identical results for every
// thread count, on sizes with short tails and sizes that take many threads;
// the copies move exactly their range; the host's bf16 rounding is the device's;
// the host's scans (norm, finite check) give the device's bits.
//
// The lowering: GPT-2 (examples/gpt2.mtc, small dims) with offload shares 0.5
// and 1 under ZeRO 0-3 has, per bucket, the host's range in whole blocks of
// 16, the copies and the host update in the update phase, its host values in
// the host plan and not the arena; with the parameters offloaded too (ZeRO-3), the
// buckets hold nothing on the device and the gathers start from the host; and one rank
// running the lowered program
// in the interpreter for three AdamW steps ends with the same bits in every
// parameter as without offload.
#define _POSIX_C_SOURCE 200809L   // setenv
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codegen.h"
#include "dist.h"
#include "frontend.h"
#include "kernels.h"
#include "passes.h"
#include "rng.h"

static rt_rng rng;

static float *randoms(long n, float scale) {
  float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
  if (!x)
    abort();
  for (long i = 0; i < n; i++)
    x[i] = scale * rt_rng_normal(&rng);
  return x;
}

static float *copy_of(const float *x, long n) {
  float *y = malloc((size_t)(n > 0 ? n : 1) * sizeof *y);
  if (!y)
    abort();
  memcpy(y, x, (size_t)n * sizeof *y);
  return y;
}

// First differing index of a and b, or -1.
static long first_diff(const float *a, const float *b, long n) {
  for (long i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], sizeof *a))
      return i;
  return -1;
}

static void test_adamw_host(long n, int threads) {
  float *p = randoms(n, 1.0f), *m = randoms(n, 0.1f), *v = randoms(n, 0.1f);
  for (long i = 0; i < n; i++)
    v[i] = v[i] * v[i]; // a second moment is not negative
  float *hp = copy_of(p, n), *hm = copy_of(m, n), *hv = copy_of(v, n);
  for (int t = 1; t <= 3; t++) {
    float *g = randoms(n, 0.5f);
    long decay_n = n - n / 3;  // the last third undecayed (norms and biases)
    rt_adamw(p, g, m, v, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t, t == 2 ? 0.3f : 1.0f, decay_n);
    rt_adamw_host(hp, g, hm, hv, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t, t == 2 ? 0.3f : 1.0f,
                  decay_n, threads);
    free(g);
  }
  const char *what[3] = {"p", "m", "v"};
  float *dev[3] = {p, m, v}, *host[3] = {hp, hm, hv};
  for (int k = 0; k < 3; k++) {
    long at = first_diff(dev[k], host[k], n);
    check(at < 0, "adamw_host n=%ld threads=%d: %s[%ld] = %.9g, the device's %.9g", n, threads,
          what[k], at, at < 0 ? 0.0 : host[k][at], at < 0 ? 0.0 : dev[k][at]);
  }
  // and the update did something (a chunk that never ran would agree with an
  // unchanged input): nearly every parameter moves (a few steps fall below
  // the parameter's float spacing)
  long moved = 0;
  float *p0 = copy_of(hp, n);
  float *g = randoms(n, 0.5f);
  rt_adamw_host(hp, g, hm, hv, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 4, 1.0f, n, threads);
  for (long i = 0; i < n; i++)
    moved += hp[i] != p0[i];
  check(moved >= n - n / 1000, "adamw_host n=%ld threads=%d: step 4 moved only %ld of %ld parameters", n,
        threads, moved, n);
  free(p0), free(g);
  free(p), free(m), free(v), free(hp), free(hm), free(hv);
}

// The host's scans of offloaded state (the gradients' norm, the finite check) give the CPU
// build's device scans' bits and first index, whatever the number of host threads.
static void test_scans_host(long n, const char *threads) {
  setenv("MTC_HOST_THREADS", threads, 1);
  float *x = randoms(n, 2.0f), dev;
  rt_norm2(&dev, x, n);
  double host = rt_norm2sq_host(x, n);
  check((float)sqrt(host) == dev, "norm2sq_host n=%ld threads=%s: root %.9g, rt_norm2 %.9g", n,
        threads, sqrt(host), (double)dev);
  long at[] = {n - 1, n / 2, n / 3, 0};   // the first non-finite element found as it moves down
  const float bad[] = {NAN, INFINITY, -INFINITY, NAN};
  check(rt_find_nonfinite_host(x, n) == n, "find_nonfinite_host n=%ld: found one in %s", n,
        "finite floats");
  for (int k = 0; k < 4; k++) {
    x[at[k]] = bad[k];
    int want;
    rt_find_nonfinite(&want, x, n);
    long got = rt_find_nonfinite_host(x, n);
    check(got == at[k] && got == want, "find_nonfinite_host n=%ld threads=%s: %ld, the device's "
          "%d, placed at %ld", n, threads, got, want, at[k]);
  }
  unsetenv("MTC_HOST_THREADS");
  free(x);
}

// bf16 gradients offloaded (--grad-precision bf16): the host's AdamW, SGD, norm and finite
// check over a bf16 gradient give their float32 twins' bits over the widened gradient (and so
// the device's: rt_adamw_bf16 is checked against rt_adamw the same way), and its accumulation
// of micro-batches the device's rt_accumulate_bf16 bits.
static void test_grads_bf16_host(long n, int threads) {
  float *g = randoms(n, 0.5f), *w = malloc((size_t)n * sizeof *w + 1);
  rt_bf16 *h = malloc((size_t)n * sizeof *h + 1);
  IR_ASSERT(w && h);
  rt_cast_f32_bf16(h, g, n);
  rt_cast_bf16_f32(w, h, n);
  float *p = randoms(n, 1.0f), *m = randoms(n, 0.1f), *v = randoms(n, 0.1f);
  for (long i = 0; i < n; i++) v[i] *= v[i];
  float *p2 = copy_of(p, n), *m2 = copy_of(m, n), *v2 = copy_of(v, n);
  long decay_n = n - n / 3;
  rt_adamw_host_bf16(p, h, m, v, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 2, 0.5f, decay_n, threads);
  rt_adamw_host(p2, w, m2, v2, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 2, 0.5f, decay_n, threads);
  check(first_diff(p, p2, n) < 0 && first_diff(m, m2, n) < 0 && first_diff(v, v2, n) < 0,
        "adamw_host_bf16 n=%ld threads=%d: the float32 update's bits over the widened gradient",
        n, threads);
  rt_sgd_host_bf16(p, h, n, 0.05f, 0.01f, 0.5f, decay_n);
  rt_sgd_host(p2, w, n, 0.05f, 0.01f, 0.5f, decay_n);
  check(first_diff(p, p2, n) < 0, "sgd_host_bf16 n=%ld: the float32 update's bits", n);
  float dev;
  rt_norm2_bf16(&dev, h, n);
  check(rt_norm2sq_host_bf16(h, n) == rt_norm2sq_host(w, n) &&
        (float)sqrt(rt_norm2sq_host_bf16(h, n)) == dev,
        "norm2sq_host_bf16 n=%ld: the float32 scan's and rt_norm2_bf16's bits", n);
  check(rt_find_nonfinite_host_bf16(h, n) == n, "find_nonfinite_host_bf16 n=%ld: none", n);
  h[n / 2].bits = 0x7fc0;   // NaN
  check(rt_find_nonfinite_host_bf16(h, n) == n / 2, "find_nonfinite_host_bf16 n=%ld: at %ld", n,
        n / 2);
  rt_cast_f32_bf16(h, g, n);
  rt_bf16 *acc = calloc((size_t)n + 1, sizeof *acc), *dacc = calloc((size_t)n + 1, sizeof *dacc);
  IR_ASSERT(acc && dacc);
  for (int micro = 0; micro < 3; micro++) {
    rt_dist.micro = micro;
    rt_accumulate_host_bf16(acc, h, n, 0.25f);
    rt_accumulate_bf16(dacc, h, n, 0.25f);
  }
  rt_dist.micro = 0;
  check(!memcmp(acc, dacc, (size_t)n * sizeof *acc), "accumulate_host_bf16 n=%ld: the device's "
        "bits", n);
  free(g), free(w), free(h), free(p), free(m), free(v), free(p2), free(m2), free(v2);
  free(acc), free(dacc);
}

static void test_copies(void) {
  long n = 1000;
  float *dev = randoms(n, 1.0f), *host = calloc((size_t)n, sizeof *host);
  float *before = copy_of(dev, n);
  rt_to_host(host, dev + 100, 300, -1);
  check(first_diff(host, dev + 100, 300) < 0 && host[300] == 0.0f,
        "to_host: 300 floats from offset 100, nothing past them");
  for (long i = 0; i < 300; i++)
    host[i] += 1.0f;
  rt_to_device(dev + 100, host, 300, -1);
  bool ok = first_diff(dev, before, 100) < 0 && first_diff(dev + 400, before + 400, n - 400) < 0;
  for (long i = 100; i < 400; i++)
    ok &= dev[i] == before[i] + 1.0f;
  check(ok, "to_device: 300 floats back to offset 100, nothing else changed");
  // started with a slot, a copy is made at its wait (as late as a GPU's copy stream may make
  // it): what it reads then is what it copies
  float *later = copy_of(dev, n);
  rt_to_host(host, dev, 300, 2);
  rt_to_device(dev + 500, host + 300, 10, 0);
  check(rt_copies_pending() == 2 && first_diff(dev + 500, later + 500, 10) < 0,
        "to_host, to_device with slots: started, nothing copied yet");
  dev[0] = 7.0f;
  rt_copy_wait(2, 1);
  rt_copy_wait(0, 0);
  check(host[0] == 7.0f && first_diff(host + 1, dev + 1, 299) < 0 && dev[500] == 0.0f &&
        rt_copies_pending() == 0, "copy_wait: each copy made at its wait");
  free(dev), free(host), free(before), free(later);
}

// The host's rounding of its masters to bf16 copies (bf16 offload) gives the
// device cast's bits, NaN, infinities and ties included; and back.
static void test_cast_host(void) {
  long n = 4096;
  float *x = randoms(n, 3.0f);
  const float odd[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.00390625f, 1.01171875f,
                       3.4e38f, -3.4e38f, 1e-40f};
  memcpy(x, odd, sizeof odd);
  rt_bf16 *dev = calloc((size_t)n, sizeof *dev), *host = calloc((size_t)n, sizeof *host);
  float *back_dev = calloc((size_t)n, sizeof *back_dev), *back_host = calloc((size_t)n, 4);
  rt_cast_f32_bf16(dev, x, n);
  rt_cast_host_f32_bf16(host, x, n);
  check(!memcmp(dev, host, (size_t)n * sizeof *dev), "cast_host f32 -> bf16: the device's bits");
  rt_cast_bf16_f32(back_dev, dev, n);
  rt_cast_host_bf16_f32(back_host, host, n);
  check(first_diff(back_dev, back_host, n) < 0, "cast_host bf16 -> f32: the device's bits");
  free(x), free(dev), free(host), free(back_dev), free(back_host);
}

// ---- the lowering -------------------------------------------------------------

static const char *gpt2_path;

static IrGraph *lowered_gpt2_as(int dp, PlanBlock rest, PassCtx *ctx, IrDiag *d) {
  static const FeDefine defs[] = {{"L", 2}, {"C", 32}, {"NH", 2}, {"T", 8}, {"V", 64}, {"B", 2}};
  static Plan plan;
  plan = plan_single();
  plan.lower = true;
  plan.mesh = mesh_make(dp, 1);
  plan.rest = rest;
  int zero = rest.zero;
  double offload = rest.offload;
  *ctx = (PassCtx){.opt = pass_default_options(), .diag = d, .plan = &plan};
  IrGraph *g = fe_dsl_load(gpt2_path, defs, 6, 0, d);
  if (!g || pass_run_all(g, ctx)) {
    printf("FAIL: gpt2 dp %d ZeRO-%d offload %g: ", dp, zero, offload);
    ir_diag_print(stdout, d);
    nfail++;
    pass_memplan_free(ctx->mem);
    ir_graph_free(g);
    return NULL;
  }
  return g;
}

static IrGraph *lowered_gpt2(int dp, int zero, double offload, PassCtx *ctx, IrDiag *d) {
  return lowered_gpt2_as(dp, (PlanBlock){.zero = zero, .offload = offload}, ctx, d);
}

// v's size in bytes
static int64_t nbytes(IrGraph *g, const IrValue *v) { return ir_eval(g, ir_nbytes(g, v)); }

static int64_t bytes_where(IrGraph *g, bool host, IrRole role) {
  int64_t total = 0;
  for (int i = 0; i < g->nvalues; i++)
    if (g->values[i]->host == host && g->values[i]->role == role)
      total += nbytes(g, g->values[i]);
  return total;
}

static void test_lowering(int dp, int zero, double offload) {
  IrDiag d = {0};
  PassCtx ctx;
  IrGraph *g = lowered_gpt2(dp, zero, offload, &ctx, &d);
  if (!g)
    return;
  const PassLowered *lw = ctx.lowered;
  int64_t host = 0, moments = 0;
  for (int i = 0; i < lw->nbuckets; i++) {
    const PassBucket *b = &lw->bucket[i];
    int64_t want = (int64_t)(offload * (double)(b->part / 16) + 0.5) * 16;
    check(b->part == (zero ? b->numel / dp : b->numel) && b->host_numel == want &&
              b->host_numel % 16 == 0,
          "dp %d ZeRO-%d offload %g: bucket %s updates %lld of %lld, %lld on the host (want %lld)",
          dp, zero, offload, b->name, (long long)b->part, (long long)b->numel,
          (long long)b->host_numel, (long long)want);
    host += 16 * b->host_numel;   // parameters, gradient, two moments
    moments += 8 * (b->part - b->host_numel);
  }
  const MemPlan *m = ctx.mem;
  check(m->host_bytes == host && bytes_where(g, true, ROLE_STATE) + bytes_where(g, true, ROLE_BUCKET) == host,
        "dp %d ZeRO-%d offload %g: host region %lld bytes, want %lld", dp, zero, offload,
        (long long)m->host_bytes, (long long)host);
  check(bytes_where(g, false, ROLE_STATE) == moments,
        "dp %d ZeRO-%d offload %g: %lld bytes of moments on the device, want %lld", dp, zero,
        offload, (long long)bytes_where(g, false, ROLE_STATE), (long long)moments);
  // per bucket, in the update: to_host, the device's adamw (if any), the
  // host's adamw, to_device, then any all_gather
  int order_ok = 1, copies = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    for (int k = 0; k < n->nin; k++)
      order_ok &= m->offset[n->in[k]->id] >= 0 &&
                  (!n->in[k]->host || m->offset[n->in[k]->id] < m->host_bytes);
    if (n->op != OP_TO_DEVICE)
      continue;
    copies++;
    const IrNode *h = g->nodes[i - 1];
    order_ok &= n->phase == PHASE_UPDATE && h->op == OP_ADAMW && h->in[0]->host &&
                h->in[0] == n->in[1] && h->in[1]->producer && h->in[1]->producer->op == OP_TO_HOST;
    for (int k = i + 1; k < g->nnodes && g->nodes[k]->block == n->block; k++)
      order_ok &= g->nodes[k]->op != OP_ADAMW;
  }
  check(order_ok && copies == (offload > 0 ? lw->nbuckets : 0),
        "dp %d ZeRO-%d offload %g: %d to_device for %d buckets, in order: %d", dp, zero,
        offload, copies, lw->nbuckets, order_ok);
  char *text = ir_print_str(g);
  check(offload == 0 || strstr(text, "%adamw.m.host.b1 : host f32["),
        "dp %d ZeRO-%d offload %g: the IR text marks host values", dp, zero, offload);
  free(text);
  pass_memplan_free(ctx.mem);
  ir_graph_free(g);
}

// Parameter offload (ZeRO-3, with the gradients): each bucket's parameters are in host memory
// only, as the masters the host updates (16 bytes an element on the host: parameters, gradient,
// two moments; nothing persistent on the device but the step's counter); forward's and
// backward's gathers each start with an unshard of the host's shard, and the update copies
// nothing back.
static void test_lowering_params(int dp) {
  IrDiag d = {0};
  PassCtx ctx;
  PlanBlock rest = {.zero = 3, .offload = 1, .offload_grads = true, .offload_params = true};
  IrGraph *g = lowered_gpt2_as(dp, rest, &ctx, &d);
  if (!g)
    return;
  const PassLowered *lw = ctx.lowered;
  int64_t host = 0;
  int unshards = 0, gathers = 0, back = 0;
  for (int i = 0; i < lw->nbuckets; i++) {
    const PassBucket *b = &lw->bucket[i];
    host += 16 * b->part;
    gathers += 1 + b->bwd_gather;
    check(b->params_host && b->host_numel == b->part && b->part == b->numel / dp &&
              b->host_params && b->host_params->host && nbytes(g, b->pshard) == 0,
          "dp %d, parameter offload: bucket %s: %lld of %lld on the host", dp, b->name,
          (long long)b->host_numel, (long long)b->part);
  }
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    unshards += n->op == OP_UNSHARD && n->in[0]->host;
    back += n->op == OP_TO_DEVICE;
  }
  const MemPlan *m = ctx.mem;
  int64_t kept = 0;   // model state in the arena's persistent part
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if (!v->host && (v->role == ROLE_BUCKET || v->role == ROLE_STATE) && m->bytes[i] > 0 &&
        m->offset[i] < m->persistent_bytes)
      kept += m->bytes[i];
  }
  check(m->host_bytes == host && kept == 0,
        "dp %d, parameter offload: host region %lld bytes (want %lld), %lld bytes of model state "
        "kept on the device", dp, (long long)m->host_bytes, (long long)host, (long long)kept);
  check(unshards == gathers && back == 0, "dp %d, parameter offload: %d gathers from the host "
        "(want %d), %d copies back", dp, unshards, gathers, back);
  pass_memplan_free(ctx.mem);
  ir_graph_free(g);
  // without ZeRO-3, or without an offloaded share, the lowering says why
  PlanBlock bad[2] = {{.zero = 2, .offload = 1, .offload_grads = true, .offload_params = true},
                      {.zero = 3, .offload = 0, .offload_params = true}};
  for (int k = 0; k < 2; k++) {
    d = (IrDiag){0};
    IrGraph *b = fe_dsl_load(gpt2_path, (FeDefine[]){{"L", 2}, {"C", 32}, {"NH", 2}, {"T", 8},
                                                     {"V", 64}, {"B", 2}}, 6, 0, &d);
    Plan plan = plan_single();
    plan.lower = true;
    plan.mesh = mesh_make(dp, 1);
    plan.rest = bad[k];
    PassCtx c = {.opt = pass_default_options(), .diag = &d, .plan = &plan};
    int rc = b ? pass_run_all(b, &c) : -1;
    check(rc && strstr(d.msg, "offloads its parameters") &&
              strstr(d.msg, k ? "none of its optimizer state" : "ZeRO-2"),
          "dp %d, parameter offload %s: rc %d, '%s'", dp, k ? "of no share" : "at ZeRO-2", rc,
          d.msg);
    pass_memplan_free(c.mem);
    ir_graph_free(b);
  }
}

// Parameter offload of half of each shard, the gradients on the device (ProTrain's chunks
// apart from the blocks'): the shard's last half (16-element runs, as the optimizer's offload
// cuts it) is in host memory only, the rest on the device; each gather's unshard takes both
// ranges, and the update copies the reduced gradient's half down and nothing back.
static void test_lowering_params_share(int dp) {
  IrDiag d = {0};
  PassCtx ctx;
  PlanBlock rest = {.zero = 3, .offload = 0.5, .offload_params = true};
  IrGraph *g = lowered_gpt2_as(dp, rest, &ctx, &d);
  if (!g)
    return;
  const PassLowered *lw = ctx.lowered;
  int unshards = 0, gathers = 0, back = 0, down = 0;
  for (int i = 0; i < lw->nbuckets; i++) {
    const PassBucket *b = &lw->bucket[i];
    gathers += 1 + b->bwd_gather;
    int64_t host = pass_offload_elems(b->part, 0.5);
    check(b->params_host && b->host_numel == host && host > 0 && host < b->part &&
              nbytes(g, b->host_params) == 4 * host && b->host_params->host &&
              nbytes(g, b->pshard) == 4 * (b->part - host) && !b->pshard->host,
          "dp %d, half the parameters offloaded: bucket %s: %lld of %lld on the host", dp,
          b->name, (long long)b->host_numel, (long long)b->part);
  }
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    unshards += n->op == OP_UNSHARD && n->nin == 2 && !n->in[0]->host && n->in[1]->host;
    back += n->op == OP_TO_DEVICE;
    down += n->op == OP_TO_HOST;
  }
  check(unshards == gathers && back == 0 && down == lw->nbuckets,
        "dp %d, half the parameters offloaded: %d gathers from both ranges (want %d), %d copies "
        "back, %d down", dp, unshards, gathers, back, down);
  pass_memplan_free(ctx.mem);
  ir_graph_free(g);
}

// The IR text: host values read back as host; the copies' rules hold.
static void test_text(void) {
  const char *ok = "graph \"h\"\n"
                   "state %m : host f32[16] zeros\n"
                   "bucket %x : f32[64]\n"
                   "update\n"
                   "  %h : host f32[16] = to_host(%x) offset=16 shards=2\n"
                   "  to_device(%x, %h) offset=16 shards=2\n";
  IrDiag d = {0};
  IrGraph *g = ir_parse(ok, "ok.ir", &d);
  char *text = g ? ir_print_str(g) : NULL;
  check(g && ir_verify(g, NULL, &d) == 0 && text && !strcmp(text, ok) &&
            ir_value_find(g, "m")->host && ir_value_find(g, "h")->host &&
            !ir_value_find(g, "x")->host,
        "host values print and parse back: %s", text ? text : d.msg);
  free(text);
  ir_graph_free(g);
  struct {
    const char *body, *want;
  } bad[] = {
      {"  %h : f32[16] = to_host(%x) offset=16\n", "must be in device memory and 'h' in host"},
      {"  %h : host f32[16] = to_host(%x) offset=24 shards=2\n", "elements 24 .. 40"},
      {"  %h : host f32[16] = to_host(%x)\n  %y : f32[16] = scale(%h)\n", "in host memory: only"},
      {"  adamw(%x, %x, %m, %m)\n", "in device memory but 'm' in host memory"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char src[512];
    snprintf(src, sizeof src, "graph \"h\"\nstate %%m : host f32[64] zeros\nbucket %%x : f32[64]\n"
                              "update\n%s", bad[i].body);
    d = (IrDiag){0};
    g = ir_parse(src, "bad.ir", &d);
    int rc = g ? ir_verify(g, NULL, &d) : -1;
    check(rc != 0 && strstr(d.msg, bad[i].want), "bad IR %zu: want '%s', got '%s'", i,
          bad[i].want, d.msg);
    ir_graph_free(g);
  }
}

// The lowered one-rank program in the interpreter: `steps` steps of its AdamW, or (optimizer
// RT_OPT_SGD) of the SGD the program switches it to at run time.
static float **train(double offload, int zero, int optimizer, int steps, IrGraph **gout) {
  IrDiag d = {0};
  PassCtx ctx;
  IrGraph *g = lowered_gpt2(1, zero, offload, &ctx, &d);
  if (!g)
    return NULL;
  rt_dist_init(1, 1, 1, 1, 1, ctx.lowered->nslots);
  CgInterp *it = cg_interp_new(g, ctx.mem, &d);
  IR_ASSERT(it);
  cg_interp_init_params(it, 42);
  rt_rng r;
  rt_rng_seed(&r, 5);
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *v = g->values[i];
    if (v->role == ROLE_INPUT)
      for (int64_t k = 0; k < nbytes(g, v) / 4; k++)
        cg_interp_i32(it, v)[k] = (int32_t)rt_rng_below(&r, (uint64_t)ir_eval(g, v->range));
  }
  rt_hparams h = cg_default_hparams(g);
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  h.optimizer = optimizer;
  for (h.step = 1; h.step <= steps; h.step++) {
    cg_interp_run(it, PHASE_FORWARD, &h);
    cg_interp_run(it, PHASE_BACKWARD, &h);
    cg_interp_run(it, PHASE_UPDATE, &h);
  }
  float **params = calloc((size_t)g->nvalues, sizeof *params);
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *p = g->values[i];
    if (p->role != ROLE_PARAM)
      continue;
    params[i] = malloc((size_t)nbytes(g, p));
    memcpy(params[i], cg_interp_f32(it, p), (size_t)nbytes(g, p));
  }
  cg_interp_free(it);
  pass_memplan_free(ctx.mem);
  *gout = g;
  return params;
}

// Three steps with a share of the state offloaded give the bits of none, and they move every
// parameter away from its initial values.
static void test_interp(int zero, double offload, int optimizer) {
  IrGraph *g0 = NULL, *g1 = NULL, *g2 = NULL;
  float **want = train(0, zero, optimizer, 3, &g0), **got = train(offload, zero, optimizer, 3, &g1);
  float **init = train(0, zero, optimizer, 0, &g2);
  if (!want || !got || !init)
    return;
  int same = 0, n = 0, moved = 0;
  for (int i = 0; i < g0->nvalues; i++) {
    if (!want[i])
      continue;
    n++;
    long k = (long)(nbytes(g0, g0->values[i]) / 4);
    same += got[i] && first_diff(want[i], got[i], k) < 0;
    // a program whose host range never came back would keep its initial values there
    moved += want[i][k - 1] != init[i][k - 1];
    free(want[i]), free(got[i]), free(init[i]);
  }
  check(n > 0 && same == n && moved == n,
        "interpreter, ZeRO-%d offload %g, %s: %d of %d parameters have the bits of no offload "
        "after 3 steps, %d moved", zero, offload, optimizer == RT_OPT_SGD ? "SGD" : "AdamW", same,
        n, moved);
  free(want), free(got), free(init);
  ir_graph_free(g0), ir_graph_free(g1), ir_graph_free(g2);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_offload examples/gpt2.mtc\n");
    return 2;
  }
  gpt2_path = argv[1];
  rt_comm_init(&argc, &argv, 1, "test_offload");
  rt_rng_seed(&rng, 7);
  long sizes[] = {1, 15, 16, 17, 1000, 3 * 65536 + 5, (1L << 20) + 3};
  int threads[] = {1, 2, 3, 4, 7, 16, 0};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++)
      test_adamw_host(sizes[s], threads[t]);
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (int t = 0; t < 3; t++)
      test_scans_host(sizes[s], (const char *[]){"1", "2", "7"}[t]);
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    test_grads_bf16_host(sizes[s], (int)(s % 3) + 1);
  test_copies();
  test_cast_host();
  for (int zero = 0; zero <= 3; zero++) {
    test_lowering(2, zero, 0.5);
    test_lowering(4, zero, 1.0);
    test_lowering(2, zero, 0.0);
  }
  test_lowering(1, 0, 0.3);
  test_lowering_params(1);
  test_lowering_params(2);
  test_lowering_params_share(1);
  test_lowering_params_share(2);
  test_text();
  for (int opt = RT_OPT_ADAMW; opt <= RT_OPT_SGD; opt++) {
    test_interp(0, 0.5, opt);
    test_interp(0, 1.0, opt);
    test_interp(2, 0.5, opt);
  }
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail ? 1 : 0;
}
