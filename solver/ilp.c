// GLPK behind a small interface: the only file that includes glpk.h.
//
// The caller adds columns, rows and coefficients with 0-based indices; the
// wrapper merges repeated coefficients, loads GLPK's 1-based arrays, solves
// and maps GLPK's return codes and statuses to IlpStatus.
//
// GLPK aborts the process on an internal error unless an error hook takes
// over: ours longjmps back into ilp_solve, which frees GLPK's environment
// (every GLPK object goes with it) and reports ILP_ERROR with GLPK's last
// message. GLPK's terminal output goes through a hook too: to stderr when
// verbose, otherwise only remembered for that message.
//
// Settings (REFERENCES.md section 7): presolve, cover/MIR/Gomory/clique cuts,
// the feasibility pump, a relative gap and a time limit. An incumbent is
// handed to GLPK from its callback (GLP_IHEUR) with glp_ios_heur_sol. GLPK's
// callback sees the presolved problem when the MIP presolver runs, so with an
// incumbent the presolver is off; the root LP is then solved by glp_simplex
// first (glp_intopt needs its basis) and the preprocessor still tightens
// bounds at every node.
#define _POSIX_C_SOURCE 200809L

#include <glpk.h>
#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

typedef struct Triplet {
  int row, col;
  double a;
} Triplet;

struct Ilp {
  int ncols, nrows, nnz;
  int capcols, caprows, capnz;
  double *lo, *hi, *cost;
  IlpKind *kind;
  double *rlo, *rhi;
  Triplet *t;
};

static void *grow(void *p, int *cap, int need, size_t size) {
  if (need <= *cap)
    return p;
  *cap = *cap ? *cap * 2 : 64;
  if (*cap < need)
    *cap = need;
  p = realloc(p, (size_t)*cap * size);
  IR_ASSERT(p);
  return p;
}

Ilp *ilp_new(void) {
  Ilp *p = calloc(1, sizeof *p);
  IR_ASSERT(p);
  return p;
}

void ilp_free(Ilp *p) {
  if (!p)
    return;
  free(p->lo), free(p->hi), free(p->cost), free(p->kind);
  free(p->rlo), free(p->rhi), free(p->t);
  free(p);
}

int ilp_col(Ilp *p, double lo, double hi, double cost, IlpKind kind) {
  int cap = p->capcols;
  p->lo = grow(p->lo, &cap, p->ncols + 1, sizeof *p->lo);
  cap = p->capcols;
  p->hi = grow(p->hi, &cap, p->ncols + 1, sizeof *p->hi);
  cap = p->capcols;
  p->cost = grow(p->cost, &cap, p->ncols + 1, sizeof *p->cost);
  p->kind = grow(p->kind, &p->capcols, p->ncols + 1, sizeof *p->kind);
  if (kind == ILP_BIN)
    lo = 0, hi = 1;
  p->lo[p->ncols] = lo;
  p->hi[p->ncols] = hi;
  p->cost[p->ncols] = cost;
  p->kind[p->ncols] = kind;
  return p->ncols++;
}

int ilp_row(Ilp *p, double lo, double hi) {
  int cap = p->caprows;
  p->rlo = grow(p->rlo, &cap, p->nrows + 1, sizeof *p->rlo);
  p->rhi = grow(p->rhi, &p->caprows, p->nrows + 1, sizeof *p->rhi);
  p->rlo[p->nrows] = lo;
  p->rhi[p->nrows] = hi;
  return p->nrows++;
}

void ilp_coef(Ilp *p, int row, int col, double a) {
  IR_ASSERT(row >= 0 && row < p->nrows && col >= 0 && col < p->ncols);
  if (a == 0)
    return;
  p->t = grow(p->t, &p->capnz, p->nnz + 1, sizeof *p->t);
  p->t[p->nnz++] = (Triplet){row, col, a};
}

int ilp_ncols(const Ilp *p) { return p->ncols; }
int ilp_nrows(const Ilp *p) { return p->nrows; }
int ilp_nnz(const Ilp *p) { return p->nnz; }

int ilp_count(const Ilp *p, IlpKind kind) {
  int n = 0;
  for (int j = 0; j < p->ncols; j++)
    n += p->kind[j] == kind;
  return n;
}

void ilp_result_free(IlpResult *r) {
  free(r->x);
  r->x = NULL;
}

static int by_row_col(const void *a, const void *b) {
  const Triplet *x = a, *y = b;
  if (x->row != y->row)
    return x->row < y->row ? -1 : 1;
  return (x->col > y->col) - (x->col < y->col);
}

// Sorts the coefficients and adds up repeated (row, col) pairs.
static void merge(Ilp *p) {
  qsort(p->t, (size_t)p->nnz, sizeof *p->t, by_row_col);
  int n = 0;
  for (int i = 0; i < p->nnz; i++) {
    if (n > 0 && p->t[n - 1].row == p->t[i].row && p->t[n - 1].col == p->t[i].col)
      p->t[n - 1].a += p->t[i].a;
    else
      p->t[n++] = p->t[i];
  }
  p->nnz = n;
}

// ---- GLPK's hooks -------------------------------------------------------------------------------

// GLPK's last two lines of output: an error prints its message, then where.
static char glpk_said[2][256];
static bool glpk_verbose;

static int on_output(void *info, const char *s) {
  (void)info;
  if (glpk_verbose)
    fputs(s, stderr);
  char *last = glpk_said[1];
  size_t n = strlen(last);
  if (n > 0 && last[n - 1] == '\n') {
    memcpy(glpk_said[0], last, sizeof glpk_said[0]);
    last[0] = '\0', n = 0;
  }
  snprintf(last + n, sizeof glpk_said[1] - n, "%s", s);
  return 1;   // handled: GLPK prints nothing itself
}

// "what went wrong (where)", from GLPK's last two lines.
static const char *glpk_message(char *buf, size_t n) {
  char a[256], b[256];
  snprintf(a, sizeof a, "%s", glpk_said[0]);
  snprintf(b, sizeof b, "%s", glpk_said[1]);
  a[strcspn(a, "\n")] = b[strcspn(b, "\n")] = '\0';
  if (a[0] && b[0])
    snprintf(buf, n, "%.120s (%.120s)", a, b);
  else
    snprintf(buf, n, "%.200s", a[0] ? a : b[0] ? b : "internal error");
  return buf;
}

static void on_error(void *info) { longjmp(*(jmp_buf *)info, 1); }

typedef struct Callback {
  const double *x1;        // the incumbent, 1-based
  bool offered, accepted;
  double gap;
  double cutoff;           // (0: none)
  bool cut;                // stopped at it
} Callback;

static void on_tree(glp_tree *T, void *info) {
  Callback *cb = info;
  int best = glp_ios_best_node(T);   // the active node of the lowest bound: the global bound
  if (cb->cutoff > 0 && best && glp_ios_node_bound(T, best) >= cb->cutoff && !cb->cut) {
    cb->cut = true;
    glp_ios_terminate(T);
    return;
  }
  if (glp_ios_reason(T) == GLP_IHEUR && cb->x1 && !cb->offered) {
    cb->offered = true;
    cb->accepted = glp_ios_heur_sol(T, cb->x1) == 0;
  }
  if (glp_mip_status(glp_ios_get_prob(T)) == GLP_FEAS)
    cb->gap = glp_ios_mip_gap(T);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int bound_type(double lo, double hi) {
  if (lo == -INFINITY && hi == INFINITY)
    return GLP_FR;
  if (hi == INFINITY)
    return GLP_LO;
  if (lo == -INFINITY)
    return GLP_UP;
  return lo == hi ? GLP_FX : GLP_DB;
}

static double finite(double x) { return isfinite(x) ? x : 0; }

// Loads p into lp (1-based everywhere).
static void load(glp_prob *lp, const Ilp *p, int *ia, int *ja, double *ar) {
  glp_set_obj_dir(lp, GLP_MIN);
  if (p->nrows > 0)
    glp_add_rows(lp, p->nrows);
  if (p->ncols > 0)
    glp_add_cols(lp, p->ncols);
  for (int i = 0; i < p->nrows; i++)
    glp_set_row_bnds(lp, i + 1, bound_type(p->rlo[i], p->rhi[i]), finite(p->rlo[i]),
                     finite(p->rhi[i]));
  for (int j = 0; j < p->ncols; j++) {
    if (p->kind[j] == ILP_BIN)
      glp_set_col_kind(lp, j + 1, GLP_BV);
    else {
      glp_set_col_kind(lp, j + 1, p->kind[j] == ILP_INT ? GLP_IV : GLP_CV);
      glp_set_col_bnds(lp, j + 1, bound_type(p->lo[j], p->hi[j]), finite(p->lo[j]),
                       finite(p->hi[j]));
    }
    glp_set_obj_coef(lp, j + 1, p->cost[j]);
  }
  for (int k = 0; k < p->nnz; k++) {
    ia[k + 1] = p->t[k].row + 1;
    ja[k + 1] = p->t[k].col + 1;
    ar[k + 1] = p->t[k].a;
  }
  glp_load_matrix(lp, p->nnz, ia, ja, ar);
}

int ilp_solve(Ilp *p, const IlpOptions *o, IlpResult *r) {
  memset(r, 0, sizeof *r);
  double t0 = now();
  merge(p);
  // Everything GLPK does not own is allocated before setjmp, so that the
  // error path can free it.
  int *ia = malloc(((size_t)p->nnz + 1) * sizeof *ia);
  int *ja = malloc(((size_t)p->nnz + 1) * sizeof *ja);
  double *ar = malloc(((size_t)p->nnz + 1) * sizeof *ar);
  double *x1 = o->incumbent ? malloc(((size_t)p->ncols + 1) * sizeof *x1) : NULL;
  double *x = malloc(((size_t)p->ncols + 1) * sizeof *x);
  IR_ASSERT(ia && ja && ar && x && (x1 || !o->incumbent));
  for (int j = 0; x1 && j < p->ncols; j++)
    x1[j + 1] = o->incumbent[j];
  Callback cb = {.x1 = x1, .gap = NAN, .cutoff = o->cutoff};

  glpk_said[0][0] = glpk_said[1][0] = '\0';
  glpk_verbose = o->verbose;
  jmp_buf jb;
  glp_term_hook(on_output, NULL);
  glp_error_hook(on_error, &jb);
  if (setjmp(jb)) {
    glp_free_env();   // GLPK cannot go on after an error; this frees all its objects
    r->status = ILP_ERROR;
    char why[256];
    snprintf(r->msg, sizeof r->msg, "GLPK failed: %s", glpk_message(why, sizeof why));
    free(ia), free(ja), free(ar), free(x1), free(x);
    r->seconds = now() - t0;
    return -1;
  }
  glp_prob *lp = glp_create_prob();
  load(lp, p, ia, ja, ar);

  glp_iocp parm;
  glp_init_iocp(&parm);
  parm.msg_lev = o->verbose ? GLP_MSG_ON : GLP_MSG_OFF;
  parm.mip_gap = o->mip_gap;
  parm.tm_lim = o->time_limit > 0 ? (int)fmin(o->time_limit * 1000, 1e9) : INT32_MAX;
  parm.pp_tech = GLP_PP_ALL;
  parm.presolve = o->presolve && !o->incumbent ? GLP_ON : GLP_OFF;
  parm.cov_cuts = parm.mir_cuts = parm.gmi_cuts = parm.clq_cuts = o->cuts ? GLP_ON : GLP_OFF;
  parm.fp_heur = GLP_ON;
  parm.cb_func = on_tree;
  parm.cb_info = &cb;

  int rc = 0;
  if (!parm.presolve) {   // glp_intopt needs an optimal basis of the root LP
    glp_smcp sp;
    glp_init_smcp(&sp);
    sp.msg_lev = parm.msg_lev;
    sp.tm_lim = parm.tm_lim;
    glp_scale_prob(lp, GLP_SF_AUTO); // as presolve would: coefficients far from 1 otherwise
    rc = glp_simplex(lp, &sp);
    if (!rc && glp_get_status(lp) == GLP_NOFEAS)
      rc = GLP_ENOPFS;
    else if (!rc && glp_get_status(lp) != GLP_OPT)
      rc = GLP_EFAIL;
  }
  if (!rc) {
    double left = o->time_limit > 0 ? o->time_limit - (now() - t0) : 1e6;
    parm.tm_lim = (int)fmax(1, fmin(left * 1000, 1e9));
    rc = glp_intopt(lp, &parm);
  }
  int mip = glp_mip_status(lp);
  switch (rc) {
  case 0:
    r->status = mip == GLP_OPT ? ILP_OPTIMAL : mip == GLP_NOFEAS ? ILP_INFEASIBLE : ILP_FEASIBLE;
    r->gap = 0;
    break;
  case GLP_EMIPGAP:
    r->status = ILP_OPTIMAL;
    r->gap = isnan(cb.gap) ? o->mip_gap : cb.gap;
    break;
  case GLP_ESTOP:
    if (cb.cut) {
      r->status = ILP_CUTOFF;
      break;
    }
    // fall through
  case GLP_ETMLIM:
    r->status = mip == GLP_FEAS || mip == GLP_OPT ? ILP_FEASIBLE : ILP_NOSOLUTION;
    r->gap = isnan(cb.gap) ? INFINITY : cb.gap;
    snprintf(r->msg, sizeof r->msg, "time limit of %g s reached", o->time_limit);
    break;
  case GLP_ENOPFS:
    r->status = ILP_INFEASIBLE;
    break;
  case GLP_ENODFS:
    r->status = ILP_ERROR;
    snprintf(r->msg, sizeof r->msg, "the program is unbounded (a missing constraint)");
    break;
  default:
    r->status = ILP_ERROR;
    char why[256];
    snprintf(r->msg, sizeof r->msg, "GLPK returned %d: %s", rc, glpk_message(why, sizeof why));
    break;
  }
  bool solved = r->status == ILP_OPTIMAL || r->status == ILP_FEASIBLE;
  for (int j = 0; solved && j < p->ncols; j++)
    x[j] = glp_mip_col_val(lp, j + 1);
  if (solved)
    r->obj = glp_mip_obj_val(lp);
  r->seeded = cb.accepted;
  glp_delete_prob(lp);
  glp_error_hook(NULL, NULL);
  glp_term_hook(NULL, NULL);
  free(ia), free(ja), free(ar), free(x1);
  if (solved)
    r->x = x;
  else
    free(x);
  r->seconds = now() - t0;
  return r->status == ILP_ERROR ? -1 : 0;
}
