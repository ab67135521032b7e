// The interpreter: runs a planned graph in-process with the runtime's CPU
// kernels. Tests use it to check gradients by finite differences without
// compiling a program; it executes exactly the calls the emitter prints.
#include "codegen.h"
#include "dist.h"

#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "rng.h"

// One lowered call with its arguments resolved to numbers and pointers.
typedef struct Exec {
  CgKernel k;
  IrDType t, u;  // the call's element types (its variant)
  IrPhase phase;
  void *p[CG_MAXARGS];
  long i[CG_MAXARGS];
  float f[CG_MAXARGS];
  long a[CG_MAXARGS][IR_MAXRANK];
  const char *hparam[CG_MAXARGS];   // CG_HPARAM: the rt_hparams field to read at run time
  int only;      // -1: always; else the optimizer (RT_OPT_*) it runs under: an AdamW update
                 // and its SGD form (cg_lower_adamw_as_sgd), switched at run time as update() is
} Exec;

struct CgInterp {
  IrGraph *g;
  const MemPlan *mem;
  char *arena;
  char *host;     // the host region (offload)
  Exec *execs;
  int nexecs;
};

// The first element of this rank's part of a bucket (CgArg.rank_stride), as emit_c.c writes it.
static int64_t rank_start(const CgInterp *it, const CgArg *a) {
  int64_t start = (rt_axis_rank(a->rank_axis) - a->rank_first) * ir_eval(it->g, a->rank_stride);
  return start + (a->rank_base ? ir_eval(it->g, a->rank_base) : 0);
}

static int resolve(CgInterp *it, const CgCall *c, IrPhase phase, Exec *e, IrDiag *d) {
  memset(e, 0, sizeof *e);
  e->k = c->k;
  e->t = c->t;
  e->u = c->u;
  e->phase = phase;
  for (int j = 0; j < c->nargs; j++) {
    const CgArg *a = &c->args[j];
    int64_t x = 0;
    switch (a->kind) {
    case CG_BUF:
      e->p[j] = (a->buf->host ? it->host : it->arena) + it->mem->offset[a->buf->id];
      if (a->rank_stride) // this rank's part of a bucket
        e->p[j] = (char *)e->p[j] + rank_start(it, a) * ir_dtype_size(a->buf->dtype);
      if (a->elem_off) // a range of it
        e->p[j] = (char *)e->p[j] + ir_eval(it->g, a->elem_off) * ir_dtype_size(a->buf->dtype);
      break;
    case CG_INT:
    case CG_ENUM:
      if (sym_eval(a->i, &it->g->syms, &x))
        return ir_error(d, (IrLoc){0}, "interp: a size does not evaluate to an integer");
      if (a->rank_stride) // less this rank's start
        x -= rank_start(it, a);
      e->i[j] = (long)x;
      break;
    case CG_FLOAT: e->f[j] = (float)a->f; break;
    case CG_INTS:
      for (int k = 0; k < a->n; k++) {
        if (sym_eval(a->ints[k], &it->g->syms, &x))
          return ir_error(d, (IrLoc){0}, "interp: a size does not evaluate to an integer");
        e->a[j][k] = (long)x;
      }
      break;
    case CG_HPARAM: e->hparam[j] = a->name; break;
    case CG_NONE: e->p[j] = NULL; break;
    }
  }
  return 0;
}

CgInterp *cg_interp_new(IrGraph *g, const MemPlan *m, IrDiag *d) {
  CgInterp *it = calloc(1, sizeof *it);
  IR_ASSERT(it);
  it->g = g;
  it->mem = m;
  it->arena = aligned_alloc(64, (size_t)(m->arena_bytes + 64) / 64 * 64);
  IR_ASSERT(it->arena);
  memset(it->arena, 0, (size_t)m->arena_bytes);
  it->host = calloc((size_t)m->host_bytes + 64, 1);
  IR_ASSERT(it->host);
  int cap = 0;
  CgCall calls[64];
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    int nc = cg_lower(g, m, n, calls, 63, d);
    if (nc < 0) {
      cg_interp_free(it);
      return NULL;
    }
    bool adamw = n->op == OP_ADAMW;
    if (adamw)
      cg_lower_adamw_as_sgd(g, n, &calls[nc++]);
    for (int c = 0; c < nc; c++) {
      if (it->nexecs == cap) {
        cap = cap ? 2 * cap : 256;
        it->execs = realloc(it->execs, (size_t)cap * sizeof *it->execs);
        IR_ASSERT(it->execs);
      }
      Exec *e = &it->execs[it->nexecs++];
      if (resolve(it, &calls[c], n->phase, e, d)) {
        cg_interp_free(it);
        return NULL;
      }
      e->only = !adamw ? -1 : c == nc - 1 ? RT_OPT_SGD : RT_OPT_ADAMW;
    }
  }
  return it;
}

void cg_interp_free(CgInterp *it) {
  if (!it)
    return;
  free(it->arena);
  free(it->host);
  free(it->execs);
  free(it);
}

char *cg_interp_arena(CgInterp *it) { return it->arena; }
float *cg_interp_f32(CgInterp *it, const IrValue *v) {
  return (float *)((v->host ? it->host : it->arena) + it->mem->offset[v->id]);
}
int32_t *cg_interp_i32(CgInterp *it, const IrValue *v) {
  return (int32_t *)(it->arena + it->mem->offset[v->id]);
}

void cg_interp_init_params(CgInterp *it, uint64_t seed) {
  int index = 0;
  for (int i = 0; i < it->g->nvalues; i++) {
    const IrValue *v = it->g->values[i];
    if (v->role == ROLE_PARAM)
      cg_init_param(it->g, v, index++, seed, cg_interp_f32(it, v));
    else if (v->role == ROLE_CONST && !v->producer)
      cg_init_param(it->g, v, 0, seed, cg_interp_f32(it, v));
    else if (v->role == ROLE_STATE)
      memset(cg_interp_f32(it, v), 0, (size_t)it->mem->bytes[v->id]);
  }
  // the host's copies of device values (offload: the parameters the host
  // updates) start as those values, as the emitted init_host does (not the
  // bf16 copies, which the host makes from its masters; nor swapped activations)
  for (int n = 0; n < it->nexecs; n++)
    if (it->execs[n].k == CG_K_to_device && it->execs[n].t == DT_F32 &&
        it->execs[n].phase == PHASE_UPDATE)
      rt_to_host((float *)it->execs[n].p[1], (const float *)it->execs[n].p[0], it->execs[n].i[2],
                 -1);
}

// Set the hyper-parameter arguments of e from h.
static void bind_hparams(Exec *e, const rt_hparams *h) {
  for (int j = 0; j < CG_MAXARGS; j++) {
    const char *s = e->hparam[j];
    if (!s)
      continue;
    if (!strcmp(s, "step"))
      e->i[j] = h->step;
    else
      e->f[j] = !strcmp(s, "lr")           ? h->lr
                : !strcmp(s, "beta1")      ? h->beta1
                : !strcmp(s, "beta2")      ? h->beta2
                : !strcmp(s, "eps")        ? h->eps
                : !strcmp(s, "grad_scale") ? h->grad_scale
                                           : h->weight_decay;
  }
}

void cg_interp_run(CgInterp *it, IrPhase phase, const rt_hparams *h) {
  for (int n = 0; n < it->nexecs; n++) {
    Exec *e = &it->execs[n];
    if (e->phase != phase)
      continue;
    if (e->only >= 0 && e->only != (h ? h->optimizer : RT_OPT_ADAMW))
      continue;
    if (h)
      bind_hparams(e, h);
    // argument i of each kernel (runtime/kernels.def), as the lowering gave it
    // (tensors as void pointers: the variant's prototype gives their types)
#define K_OUT(j, x) (e->p[j])
#define K_IN(j, x) (e->p[j])
#define K_OUTU(j, x) (e->p[j])
#define K_OUTF(j, x) (e->p[j])
#define K_INF(j, x) (e->p[j])
#define K_OUTI(j, x) (e->p[j])
#define K_OUTH(j, x) (e->p[j])
#define K_INI(j, x) (e->p[j])
#define K_LONG(j, x) (e->i[j])
#define K_INT(j, x) ((int)e->i[j])
#define K_FLT(j, x) (e->f[j])
#define K_DIMS(j, x) (e->a[j])
    // a typed kernel: the variant of the call's element types
#define CALL_T(suffix, T, name, ...)                                                           \
  if (e->t == DT_##T) {                                                                        \
    rt_##name##suffix(__VA_ARGS__);                                                              \
    break;                                                                                       \
  }
#define CALL_TU(suffix, T, U, name, ...)                                                       \
  if (e->t == DT_##T && e->u == DT_##U) {                                                      \
    rt_##name##suffix(__VA_ARGS__);                                                              \
    break;                                                                                       \
  }
    switch (e->k) {
#define K(name, ...)                                                                            \
  case CG_K_##name:                                                                              \
    rt_##name(__VA_ARGS__);                                                                      \
    break;
#define KT(name, ...)                                                                           \
  case CG_K_##name:                                                                              \
    RT_T_VARIANTS(CALL_T, name, __VA_ARGS__)                                                     \
    IR_ASSERT(!"a variant the lowering checked");                                                \
    break;
#define KTU(name, ...)                                                                          \
  case CG_K_##name:                                                                              \
    RT_TU_VARIANTS(CALL_TU, name, __VA_ARGS__)                                                   \
    IR_ASSERT(!"a variant the lowering checked");                                                \
    break;
#include "kernels.def"
    case CG_K_COUNT: break;
    }
  }
}

// Parameters: normal(std) / zeros / ones from a per-parameter stream, so
// adding a parameter does not change the others' values. INIT_DATA values
// (parameters and constants from ONNX initializers) are copied, f32 or i32.
void cg_init_param(const IrGraph *g, const IrValue *p, int index, uint64_t seed, float *out) {
  int64_t n = 0;   // a tensor split over tp starts whole (each rank takes its part)
  IrValue whole = ir_whole(p);
  IR_ASSERT(sym_eval(ir_numel((IrGraph *)g, &whole), &g->syms, &n) == 0);
  if (p->init.kind == INIT_DATA) {
    size_t bytes = (size_t)n * (size_t)ir_dtype_size(p->dtype);
    if (p->data)
      memcpy(out, p->data, bytes);
    else
      memset(out, 0, bytes);
    return;
  }
  if (p->init.kind != INIT_NORMAL) {
    for (int64_t i = 0; i < n; i++)
      out[i] = p->init.kind == INIT_ONES ? 1.0f : 0.0f;
    return;
  }
  rt_rng_init_normal(out, (long)n, (float)p->init.std, seed, index);
}
