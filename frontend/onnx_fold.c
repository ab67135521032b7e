// Compile-time evaluation of ONNX ops on known tensors (FeConst).
//
// torch.onnx writes shapes as little programs: Shape(x) -> Gather(1) ->
// Unsqueeze -> Concat -> Reshape, or Slice(mask, 0, T) -> Equal(0) -> Where.
// Here they run against the symbolic shapes: integer elements are kept as
// formulas (the dim T, or C/NH) next to their values under the -D bindings,
// so a Reshape target comes out as [B, T, 4, C/4] and the IR keeps its
// symbols. Float elements (masks, scales) are float32 numbers.
//
// fe_fold_<Op>(cx, in, nin, out) reads known inputs in[0..nin) (NULL for an
// absent optional input) and writes known outputs; it returns 0, -1 on an
// error, or 1 when this case is better run than folded (a result too large
// to keep at compile time), so the op is converted to IR instead.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

#define FOLD_MAX ((int64_t)1 << 22)   // largest result folded (elements)
#define KNOWN_MAX IR_DATA_MAX         // largest known tensor (elements)
#define SYM_LIMIT ((int64_t)1 << 31)  // formulas only over values this small

// ---- known tensors -------------------------------------------------------------------------

bool fe_is_float_type(int type) { return type == FE_FLOAT || type == FE_DOUBLE; }

bool fe_is_int_type(int type) {
  switch (type) {
  case FE_UINT8: case FE_INT8: case FE_UINT16: case FE_INT16: case FE_INT32: case FE_INT64:
  case FE_BOOL: case FE_UINT32: case FE_UINT64: return true;
  default: return false;
  }
}

const char *fe_type_name(int type) {
  static const char *const names[] = {"undefined", "float", "uint8", "int8", "uint16", "int16",
                                      "int32", "int64", "string", "bool", "float16", "double",
                                      "uint32", "uint64", "complex64", "complex128", "bfloat16"};
  return type >= 0 && type < (int)(sizeof names / sizeof names[0]) ? names[type] : "unknown";
}

int fe_eval(FeOnnx *cx, const Sym *s, int64_t *out) {
  int rc = sym_eval(s, &cx->g->syms, out);
  if (rc == 0)
    return 0;
  return fe_err(cx, "the size %s %s", sym_str(&cx->g->arena, s, &cx->g->syms),
                rc == -3 ? "overflows int64" : rc == -2 ? "is not an integer" : "has an unbound symbol");
}

int fe_check_size(FeOnnx *cx, int rank, const Sym *const *shape) {
  int64_t n = 1, d;
  for (int i = 0; i < rank; i++) {
    if (fe_eval(cx, shape[i], &d))
      return -1;
    if (d < 0 || d > FE_MAX_NUMEL || __builtin_mul_overflow(n, d, &n) || n > FE_MAX_NUMEL)
      return fe_err(cx, "a tensor with %lld elements in dim %d is larger than mtc handles "
                        "(2^36 elements)", (long long)d, i);
  }
  return 0;
}

FeConst *fe_const_new(FeOnnx *cx, int type, int rank, const Sym *const *shape) {
  if (rank < 0 || rank > IR_MAXRANK)
    return fe_err(cx, "a tensor of rank %d (at most %d)", rank, IR_MAXRANK), NULL;
  FeConst *k = ir_alloc(&cx->g->arena, sizeof *k);
  k->type = type;
  k->rank = rank;
  k->n = 1;
  double numel = 1;
  for (int i = 0; i < rank; i++) {
    int64_t d;
    if (fe_eval(cx, shape[i], &d))
      return NULL;
    if (d < 0)
      return fe_err(cx, "a negative dim %lld", (long long)d), NULL;
    numel *= (double)d;
    k->shape[i] = shape[i];
  }
  if (numel > (double)KNOWN_MAX)
    return fe_err(cx, "a tensor known at compile time would hold %.0f elements; mtc keeps at most "
                  "%lld (2^26) there", numel, (long long)KNOWN_MAX), NULL;
  k->n = (int64_t)numel;
  if (fe_is_float_type(type))
    k->f = ir_alloc(&cx->g->arena, (size_t)(k->n + 1) * sizeof *k->f);
  else
    k->i = ir_alloc(&cx->g->arena, (size_t)(k->n + 1) * sizeof *k->i);
  return k;
}

// A fold's output: 0, 1 when it is too large to fold, -1 on an error.
static int new_out(FeOnnx *cx, int type, int rank, const Sym *const *shape, FeConst **out) {
  int64_t n = 1, d;
  for (int i = 0; i < rank; i++) {
    if (fe_eval(cx, shape[i], &d))
      return -1;
    if (d < 0)
      return fe_err(cx, "a negative dim %lld", (long long)d);
    if (d && n > FOLD_MAX / d)
      return 1;
    n *= d;
  }
  return (*out = fe_const_new(cx, type, rank, shape)) ? 0 : -1;
}

// Formulas are kept only while they stay small (a huge value is a number).
static const Sym *tame(FeOnnx *cx, const Sym *s, int64_t value) {
  bool ok = s && s->n <= 8 && value > -SYM_LIMIT && value < SYM_LIMIT;
  for (int t = 0; ok && t < s->n; t++)
    ok = s->t[t].num > -SYM_LIMIT && s->t[t].num < SYM_LIMIT && s->t[t].den < SYM_LIMIT;
  return ok ? s : sym_const(&cx->g->arena, value);
}

// Give k its formulas (constants from the values) when it is small.
static void with_syms(FeOnnx *cx, FeConst *k) {
  if (!k->i || k->s || k->n > FE_SYM_MAX)
    return;
  k->s = ir_alloc(&cx->g->arena, (size_t)(k->n + 1) * sizeof *k->s);
  for (int64_t i = 0; i < k->n; i++)
    k->s[i] = sym_const(&cx->g->arena, k->i[i]);
}

FeConst *fe_const_scalar_int(FeOnnx *cx, int type, const Sym *s) {
  FeConst *k = fe_const_new(cx, type, 0, NULL);
  if (!k || fe_eval(cx, s, &k->i[0]))
    return NULL;
  k->s = ir_alloc(&cx->g->arena, sizeof *k->s);
  k->s[0] = tame(cx, s, k->i[0]);
  return k;
}

FeConst *fe_const_ints(FeOnnx *cx, int n, const Sym *const *s) {
  const Sym *len = sym_const(&cx->g->arena, n);
  FeConst *k = fe_const_new(cx, FE_INT64, 1, &len);
  if (!k)
    return NULL;
  k->s = ir_alloc(&cx->g->arena, (size_t)(n + 1) * sizeof *k->s);
  for (int i = 0; i < n; i++) {
    if (fe_eval(cx, s[i], &k->i[i]))
      return NULL;
    k->s[i] = tame(cx, s[i], k->i[i]);
  }
  return k;
}

const Sym *fe_const_sym(FeOnnx *cx, const FeConst *k, int64_t i) {
  if (k->s)
    return k->s[i];
  return sym_const(&cx->g->arena, fe_const_int(k, i));
}

double fe_const_num(const FeConst *k, int64_t i) { return k->f ? k->f[i] : (double)k->i[i]; }

static int64_t saturate(double x) {
  if (isnan(x))
    return 0;
  if (x >= 0x1p63)
    return INT64_MAX;
  if (x <= -0x1p63)
    return INT64_MIN;
  return (int64_t)x;
}

int64_t fe_const_int(const FeConst *k, int64_t i) { return k->i ? k->i[i] : saturate(k->f[i]); }

int fe_const_int_list(FeOnnx *cx, const FeConst *k, const char *what, int64_t *v, int *n, int max) {
  if (!k->i || k->rank > 1 || k->n > max)
    return fe_err(cx, "%s must be a list of at most %d integers", what, max);
  for (int64_t i = 0; i < k->n; i++)
    v[i] = k->i[i];
  *n = (int)k->n;
  return 0;
}

int fe_split_sizes(FeOnnx *cx, const FeConst *k, const Sym *dim, int a, int n,
                   const Sym **parts, int64_t *sizes) {
  if (n < 1 || n > 64)
    return fe_err(cx, "%d outputs (1 to 64)", n);
  int64_t d, total = 0;
  bool known = sym_eval(dim, &cx->g->syms, &d) == 0;
  if (!k) {
    if (!known && fe_eval(cx, dim, &d))
      return -1;
    if (d % n)
      return fe_err(cx, "dim %d (%lld) does not split into %d equal parts", a, (long long)d, n);
    for (int i = 0; i < n; i++)
      parts[i] = sym_scale(&cx->g->arena, dim, 1, n), sizes[i] = d / n;
    return 0;
  }
  int m;
  if (fe_const_int_list(cx, k, "split", sizes, &m, 64))
    return -1;
  if (m != n)
    return fe_err(cx, "split lists %d sizes for %d outputs", m, n);
  for (int i = 0; i < n; i++) {
    if (sizes[i] < 0)
      return fe_err(cx, "split size %lld is negative", (long long)sizes[i]);
    parts[i] = fe_const_sym(cx, k, i);
    total += sizes[i];
  }
  if (known && total != d)
    return fe_err(cx, "dim %d (%lld) does not split into the sizes listed (%lld in all)", a,
                  (long long)d, (long long)total);
  return 0;
}

int fe_const_scalar(FeOnnx *cx, const FeConst *k, const char *what, double *out) {
  if (k->n != 1)
    return fe_err(cx, "%s must be a single value, not %lld of them", what, (long long)k->n);
  *out = fe_const_num(k, 0);
  return 0;
}

// Copy element j of src into element i of dst (its formula too).
static void copy_elem(FeOnnx *cx, FeConst *dst, int64_t i, const FeConst *src, int64_t j) {
  if (dst->f)
    dst->f[i] = src->f ? src->f[j] : (float)src->i[j];
  else
    dst->i[i] = fe_const_int(src, j);
  if (dst->s)
    dst->s[i] = src->s ? src->s[j] : sym_const(&cx->g->arena, dst->i[i]);
}

// ---- shapes ---------------------------------------------------------------------------------

int fe_axis(FeOnnx *cx, int64_t axis, int rank, int *out) {
  if (axis < -rank || axis >= (rank ? rank : 1))
    return fe_err(cx, "axis %lld is out of range for rank %d", (long long)axis, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return 0;
}

static bool same_dim(FeOnnx *cx, const Sym *a, const Sym *b) {
  int64_t x, y;
  return sym_eq(a, b) || (sym_eval(a, &cx->g->syms, &x) == 0 && sym_eval(b, &cx->g->syms, &y) == 0 &&
                          x == y);
}

int fe_broadcast(FeOnnx *cx, int ra, const Sym *const *a, int rb, const Sym *const *b, int *r,
                 const Sym **out) {
  *r = ra > rb ? ra : rb;
  for (int i = 0; i < *r; i++) {
    int ia = i - (*r - ra), ib = i - (*r - rb);
    const Sym *da = ia >= 0 ? a[ia] : NULL, *db = ib >= 0 ? b[ib] : NULL;
    if (!da || (db && sym_is_one(da)))
      out[i] = db;
    else if (!db || sym_is_one(db) || same_dim(cx, da, db))
      out[i] = da;
    else
      return fe_err(cx, "shapes do not broadcast: dim %s against %s",
                    sym_str(&cx->g->arena, da, &cx->g->syms), sym_str(&cx->g->arena, db, &cx->g->syms));
  }
  return fe_check_size(cx, *r, out);
}

static const Sym *product(FeOnnx *cx, int rank, const Sym *const *shape) {
  const Sym *p = sym_const(&cx->g->arena, 1);
  for (int i = 0; i < rank; i++)
    p = sym_mul(&cx->g->arena, p, shape[i]);
  return p;
}

// Reshape's target: 0 copies the input's dim (unless allowzero), -1 is
// inferred from the element count.
int fe_reshape_target(FeOnnx *cx, int xrank, const Sym *const *xshape, const FeConst *target,
                      bool allowzero, int *rank, const Sym **shape) {
  if (!target->i || target->rank != 1 || target->n > IR_MAXRANK)
    return fe_err(cx, "the target shape must be a list of at most %d integers", IR_MAXRANK);
  int infer = -1;
  *rank = (int)target->n;
  for (int i = 0; i < *rank; i++) {
    int64_t v = target->i[i];
    if (v == 0 && !allowzero) {
      if (i >= xrank)
        return fe_err(cx, "target dim %d is 0 (copy) but the input has rank %d", i, xrank);
      shape[i] = xshape[i];
    } else if (v == -1 && infer < 0) {
      infer = i;
      shape[i] = sym_const(&cx->g->arena, 1);
    } else if (v < 0 || v > SYM_LIMIT) {
      return fe_err(cx, "target dim %d is %lld", i, (long long)v);
    } else {
      shape[i] = fe_const_sym(cx, target, i);
    }
  }
  const Sym *have = product(cx, xrank, xshape), *want = product(cx, *rank, shape);
  int64_t h, w;
  if (fe_eval(cx, have, &h) || fe_eval(cx, want, &w))
    return -1;
  if (infer >= 0) {
    if (w == 0 || h % w)
      return fe_err(cx, "cannot infer dim %d: %lld elements do not divide by %lld", infer,
                    (long long)h, (long long)w);
    const Sym *q = sym_div(&cx->g->arena, have, want);
    int64_t qv;
    shape[infer] = q && sym_eval(q, &cx->g->syms, &qv) == 0 && qv == h / w ? tame(cx, q, qv)
                                                                         : sym_const(&cx->g->arena, h / w);
    w *= h / w;
  }
  if (h != w)
    return fe_err(cx, "cannot reshape %lld elements into %lld", (long long)h, (long long)w);
  return 0;
}

int fe_unsqueeze_shape(FeOnnx *cx, int xrank, const Sym *const *xs, const int64_t *axes, int naxes,
                       int *rank, const Sym **shape) {
  *rank = xrank + naxes;
  if (*rank > IR_MAXRANK)
    return fe_err(cx, "the result has more than %d dims", IR_MAXRANK);
  bool ins[IR_MAXRANK] = {0};
  for (int i = 0; i < naxes; i++) {
    int a = 0;
    if (fe_axis(cx, axes[i], *rank, &a))
      return -1;
    if (ins[a])
      return fe_err(cx, "axis %lld is listed twice", (long long)axes[i]);
    ins[a] = true;
  }
  for (int i = 0, j = 0; i < *rank; i++)
    shape[i] = ins[i] ? sym_const(&cx->g->arena, 1) : xs[j++];
  return 0;
}

// naxes < 0: every dim of size 1.
int fe_squeeze_shape(FeOnnx *cx, int xrank, const Sym *const *xs, const int64_t *axes, int naxes,
                     int *rank, const Sym **shape) {
  bool drop[IR_MAXRANK] = {0};
  for (int i = 0; i < naxes; i++) {
    int a = 0;
    if (fe_axis(cx, axes[i], xrank, &a))
      return -1;
    if (!sym_is_one(xs[a]))
      return fe_err(cx, "cannot squeeze dim %d of size %s", a,
                    sym_str(&cx->g->arena, xs[a], &cx->g->syms));
    drop[a] = true;
  }
  for (int i = 0; naxes < 0 && i < xrank; i++)
    drop[i] = sym_is_one(xs[i]);
  *rank = 0;
  for (int i = 0; i < xrank; i++)
    if (!drop[i])
      shape[(*rank)++] = xs[i];
  return 0;
}

// Gather's output: x's dims before axis, the indices' dims, x's dims after.
int fe_gather_shape(FeOnnx *cx, int xrank, const Sym *const *xs, int axis, int irank,
                    const Sym *const *is, int *rank, const Sym **shape) {
  if (xrank - 1 + irank > IR_MAXRANK)
    return fe_err(cx, "the result has more than %d dims", IR_MAXRANK);
  *rank = 0;
  for (int i = 0; i < axis; i++)
    shape[(*rank)++] = xs[i];
  for (int i = 0; i < irank; i++)
    shape[(*rank)++] = is[i];
  for (int i = axis + 1; i < xrank; i++)
    shape[(*rank)++] = xs[i];
  return 0;
}

static int64_t clamp(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }

// One axis of a Slice: ONNX's clamping rules, and the length as a formula
// when it is one (x[:, :T] keeps T; x[1:] is dim - 1).
static int slice_one(FeOnnx *cx, const Sym *dim, const FeConst *ends, int i, int64_t s, int64_t e,
                     int64_t step, FeSliceAxis *out) {
  int64_t d;
  if (fe_eval(cx, dim, &d))
    return -1;
  if (step == 0)
    return fe_err(cx, "a slice step of 0");
  int64_t e0 = e, s0 = s;
  if (s < 0)
    s += d;
  if (e < 0)
    e += d;
  s = step > 0 ? clamp(s, 0, d) : clamp(s, 0, d - 1);
  e = step > 0 ? clamp(e, 0, d) : clamp(e, -1, d - 1);
  // 0 <= s, e <= d here, so e - s cannot overflow; -(i128)step can
  int64_t len = step > 0 ? (e > s ? (e - s - 1) / step + 1 : 0)
                         : (s > e ? (int64_t)((s - e - 1) / -(__int128)step + 1) : 0);
  out->start = s;
  out->step = step;
  out->len = sym_const(&cx->g->arena, len);
  if (step == 1 && s == 0 && e0 >= 0 && e0 <= d && e == e0)
    out->len = tame(cx, fe_const_sym(cx, ends, i), len);   // x[:T]
  else if (step == 1 && e == d && e0 >= d)
    out->len = tame(cx, sym_sub(&cx->g->arena, dim, sym_const(&cx->g->arena, s)), len); // x[s:]
  else if (step == 1 && s0 >= 0 && e0 < 0 && e == e0 + d && e > s)   // x[s:-k]: dim - k - s
    out->len = tame(cx, sym_sub(&cx->g->arena, dim, sym_const(&cx->g->arena, s - e0)), len);
  return 0;
}

int fe_slice_axes(FeOnnx *cx, int rank, const Sym *const *shape, FeConst *const *in,
                  FeSliceAxis *out, int *n) {
  int64_t st[IR_MAXRANK], en[IR_MAXRANK], ax[IR_MAXRANK], sp[IR_MAXRANK];
  int ns, ne, na, np;
  if (fe_const_int_list(cx, in[0], "starts", st, &ns, IR_MAXRANK) ||
      fe_const_int_list(cx, in[1], "ends", en, &ne, IR_MAXRANK))
    return -1;
  na = np = ns;
  for (int i = 0; i < ns; i++)
    ax[i] = i, sp[i] = 1;
  if ((in[2] && fe_const_int_list(cx, in[2], "axes", ax, &na, IR_MAXRANK)) ||
      (in[3] && fe_const_int_list(cx, in[3], "steps", sp, &np, IR_MAXRANK)))
    return -1;
  if (ne != ns || na != ns || np != ns)
    return fe_err(cx, "starts, ends, axes and steps must have the same length");
  bool seen[IR_MAXRANK] = {0};
  for (int i = 0; i < ns; i++) {
    int a = 0;
    if (fe_axis(cx, ax[i], rank, &a))
      return -1;
    if (seen[a])
      return fe_err(cx, "axis %d is sliced twice", a);
    seen[a] = true;
    out[i].axis = a;
    if (slice_one(cx, shape[a], in[1], i, st[i], en[i], sp[i], &out[i]))
      return -1;
  }
  *n = ns;
  return 0;
}

bool fe_trilu_keep(int64_t r, int64_t c, int64_t k, bool upper) {
  return upper ? c - r >= k : c - r <= k;
}

// ---- element indexing -----------------------------------------------------------------------

// Shape values of k (evaluated dims).
static void dims_of(FeOnnx *cx, int rank, const Sym *const *shape, int64_t *d) {
  for (int i = 0; i < rank; i++)
    sym_eval(shape[i], &cx->g->syms, &d[i]);
}

// Offset in a tensor of shape `in` (rank ri) of output element `idx` of an
// output of shape `od` (rank ro), numpy-broadcasting from the right.
static int64_t bcast_offset(int64_t idx, int ro, const int64_t *od, int ri, const int64_t *in) {
  int64_t off = 0, stride = 1;
  for (int i = ro - 1; i >= 0; i--) {
    int64_t c = idx % od[i];
    idx /= od[i];
    int j = i - (ro - ri);
    if (j < 0)
      break;
    if (in[j] != 1)
      off += c * stride;
    stride *= in[j];
  }
  return off;
}

// ---- elementwise folds ------------------------------------------------------------------------

typedef enum Arith { A_ADD, A_SUB, A_MUL, A_DIV, A_POW, A_MIN, A_MAX, A_MOD, A_FMOD } Arith;
typedef enum Cmp { C_EQ, C_LT, C_GT, C_LE, C_GE, C_AND, C_OR } Cmp;

static double arith_num(Arith op, double a, double b) {
  switch (op) {
  case A_ADD: return a + b;
  case A_SUB: return a - b;
  case A_MUL: return a * b;
  case A_DIV: return a / b;
  case A_POW: return pow(a, b);
  case A_MIN: return a < b ? a : b;
  case A_FMOD: return fmod(a, b);  // the sign of a (Mod fmod=1, the only float Mod)
  case A_MOD: {                    // the sign of b (Python's %)
    double r = fmod(a, b);
    return r != 0 && (r < 0) != (b < 0) ? r + b : r;
  }
  default: return a > b ? a : b;
  }
}

// Integer a op b with a formula: exact under the bindings, or NULL when
// it overflows or divides by zero (the value goes to *v).
static const Sym *arith_int(FeOnnx *cx, Arith op, const Sym *sa, int64_t a, const Sym *sb, int64_t b,
                            int64_t *v) {
  IrArena *ar = &cx->g->arena;
  bool small = a > -SYM_LIMIT && a < SYM_LIMIT && b > -SYM_LIMIT && b < SYM_LIMIT;
  switch (op) {
  case A_ADD:
    if (__builtin_add_overflow(a, b, v))
      return NULL;
    return tame(cx, small ? sym_add(ar, sa, sb) : NULL, *v);
  case A_SUB:
    if (__builtin_sub_overflow(a, b, v))
      return NULL;
    return tame(cx, small ? sym_sub(ar, sa, sb) : NULL, *v);
  case A_MUL:
    if (__builtin_mul_overflow(a, b, v))
      return NULL;
    return tame(cx, small ? sym_mul(ar, sa, sb) : NULL, *v);
  case A_DIV: {
    if (b == 0 || (a == INT64_MIN && b == -1))
      return NULL;
    *v = a / b;
    const Sym *q = small && a % b == 0 ? sym_div(ar, sa, sb) : NULL;
    int64_t qv;
    return tame(cx, q && sym_eval(q, &cx->g->syms, &qv) == 0 && qv == *v ? q : NULL, *v);
  }
  case A_MOD:
  case A_FMOD:
    if (b == 0 || (a == INT64_MIN && b == -1))
      return NULL;
    *v = a % b;
    if (op == A_MOD && *v != 0 && (*v < 0) != (b < 0))
      *v += b;
    return sym_const(ar, *v);
  case A_MIN: *v = a < b ? a : b; return *v == a ? sa : sb;
  case A_MAX: *v = a > b ? a : b; return *v == a ? sa : sb;
  default: {
    double p = pow((double)a, (double)b);
    if (!(fabs(p) < 9e18))
      return NULL;
    *v = (int64_t)p;
    return sym_const(ar, *v);
  }
  }
}

// Broadcast a and b into an output of a's type, element by element.
static int fold_arith(FeOnnx *cx, Arith op, FeConst *a, FeConst *b, FeConst **out) {
  if (fe_is_float_type(a->type) != fe_is_float_type(b->type))
    return fe_err(cx, "operands of types %s and %s", fe_type_name(a->type), fe_type_name(b->type));
  int r;
  const Sym *shape[IR_MAXRANK];
  int64_t od[IR_MAXRANK], ad[IR_MAXRANK], bd[IR_MAXRANK];
  if (fe_broadcast(cx, a->rank, a->shape, b->rank, b->shape, &r, shape))
    return -1;
  int rc = new_out(cx, a->type, r, shape, out);
  if (rc)
    return rc;
  FeConst *o = *out;
  dims_of(cx, r, shape, od), dims_of(cx, a->rank, a->shape, ad), dims_of(cx, b->rank, b->shape, bd);
  with_syms(cx, o);
  for (int64_t i = 0; i < o->n; i++) {
    int64_t ia = bcast_offset(i, r, od, a->rank, ad), ib = bcast_offset(i, r, od, b->rank, bd);
    if (o->f) {
      o->f[i] = (float)arith_num(op, a->f[ia], b->f[ib]);
      continue;
    }
    const Sym *s = arith_int(cx, op, fe_const_sym(cx, a, ia), a->i[ia], fe_const_sym(cx, b, ib),
                             b->i[ib], &o->i[i]);
    if (!s)
      return fe_err(cx, "integer overflow or division by zero (%lld, %lld)", (long long)a->i[ia],
                    (long long)b->i[ib]);
    if (o->s)
      o->s[i] = s;
  }
  return 0;
}

static bool compare(Cmp op, double a, double b) {
  switch (op) {
  case C_EQ: return a == b;
  case C_LT: return a < b;
  case C_GT: return a > b;
  case C_LE: return a <= b;
  case C_GE: return a >= b;
  case C_AND: return a != 0 && b != 0;
  default: return a != 0 || b != 0;
  }
}

static int fold_compare(FeOnnx *cx, Cmp op, FeConst *a, FeConst *b, FeConst **out) {
  int r;
  const Sym *shape[IR_MAXRANK];
  int64_t od[IR_MAXRANK], ad[IR_MAXRANK], bd[IR_MAXRANK];
  if (fe_broadcast(cx, a->rank, a->shape, b->rank, b->shape, &r, shape))
    return -1;
  int rc = new_out(cx, FE_BOOL, r, shape, out);
  if (rc)
    return rc;
  dims_of(cx, r, shape, od), dims_of(cx, a->rank, a->shape, ad), dims_of(cx, b->rank, b->shape, bd);
  for (int64_t i = 0; i < (*out)->n; i++)
    (*out)->i[i] = compare(op, fe_const_num(a, bcast_offset(i, r, od, a->rank, ad)),
                           fe_const_num(b, bcast_offset(i, r, od, b->rank, bd)));
  with_syms(cx, *out);
  return 0;
}

// Every input there (optional ones may be NULL only past `need`).
static int need_inputs(FeOnnx *cx, FeConst **in, int nin, int need) {
  if (nin < need)
    return fe_err(cx, "needs %d inputs, has %d", need, nin);
  for (int i = 0; i < need; i++)
    if (!in[i])
      return fe_err(cx, "input %d is missing", i);
  return 0;
}

// The first `need` inputs present, and the axis attribute (default dflt)
// normalized for input 0's rank (plus `extra`: Flatten's axis may equal it).
static int fold_axis(FeOnnx *cx, FeConst **in, int nin, int need, int64_t dflt, int extra, int *a) {
  int64_t axis;
  if (need_inputs(cx, in, nin, need) || fe_attr_int(cx, "axis", dflt, &axis))
    return -1;
  return fe_axis(cx, axis, in[0]->rank + extra, a);
}

#define ARITH(Op, code)                                                             \
  int fe_fold_##Op(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {              \
    return need_inputs(cx, in, nin, 2) ? -1 : fold_arith(cx, code, in[0], in[1], out); \
  }
ARITH(Add, A_ADD)
ARITH(Sub, A_SUB)
ARITH(Mul, A_MUL)
ARITH(Div, A_DIV)
ARITH(Pow, A_POW)

// Mod: fmod 0 takes the divisor's sign (integers only), fmod 1 the dividend's
// (Swin's window padding, (w - H mod w) mod w, folds this way).
int fe_fold_Mod(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  int64_t fm;
  if (need_inputs(cx, in, nin, 2) || fe_attr_int(cx, "fmod", 0, &fm))
    return -1;
  if (!fm && (fe_is_float_type(in[0]->type) || fe_is_float_type(in[1]->type)))
    return fe_err(cx, "fmod=0 on floats is not defined (ONNX); floats take fmod=1");
  return fold_arith(cx, fm ? A_FMOD : A_MOD, in[0], in[1], out);
}

#define COMPARE(Op, code)                                                              \
  int fe_fold_##Op(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {                 \
    return need_inputs(cx, in, nin, 2) ? -1 : fold_compare(cx, code, in[0], in[1], out); \
  }
COMPARE(Equal, C_EQ)
COMPARE(Less, C_LT)
COMPARE(Greater, C_GT)
COMPARE(LessOrEqual, C_LE)
COMPARE(GreaterOrEqual, C_GE)
COMPARE(And, C_AND)
COMPARE(Or, C_OR)

// Min/Max: variadic, folded pairwise.
static int fold_minmax(FeOnnx *cx, Arith op, FeConst **in, int nin, FeConst **out) {
  if (need_inputs(cx, in, nin, 1))
    return -1;
  FeConst *acc = in[0];
  for (int i = 1; i < nin; i++) {
    int rc = in[i] ? fold_arith(cx, op, acc, in[i], &acc) : 0;
    if (rc)
      return rc;
  }
  *out = acc;
  return 0;
}
int fe_fold_Min(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  return fold_minmax(cx, A_MIN, in, nin, out);
}
int fe_fold_Max(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  return fold_minmax(cx, A_MAX, in, nin, out);
}

static bool neg_i(int64_t x, int64_t *y) { return !__builtin_sub_overflow((int64_t)0, x, y); }
static bool abs_i(int64_t x, int64_t *y) { return x < 0 ? neg_i(x, y) : (*y = x, true); }
static bool sign_i(int64_t x, int64_t *y) { return *y = (x > 0) - (x < 0), true; }
static double neg(double x) { return -x; }
static double recip(double x) { return 1.0 / x; }
static double sign(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; }
static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

// Unary folds: f(x) on floats; on integers fi(x), false on overflow (Neg, Abs, Sign; other
// integer math runs). The formulas of symbolic sizes go through Neg and Abs.
static int fold_unary(FeOnnx *cx, FeConst **in, int nin, FeConst **out, double (*f)(double),
                      bool (*fi)(int64_t, int64_t *)) {
  if (need_inputs(cx, in, nin, 1))
    return -1;
  FeConst *x = in[0];
  if (!x->f && !fi)
    return 1; // integer math other than these: run it
  int rc = new_out(cx, x->type, x->rank, x->shape, out);
  if (rc)
    return rc;
  for (int64_t i = 0; i < x->n; i++) {
    if (x->f)
      (*out)->f[i] = (float)f(x->f[i]);
    else if (!fi(x->i[i], &(*out)->i[i]))
      return fe_err(cx, "integer overflow");
  }
  with_syms(cx, *out);
  for (int64_t i = 0; x->s && (*out)->s && fi != sign_i && i < x->n; i++) {
    bool flip = fi == neg_i || x->i[i] < 0; // the formulas of -x and |x| (by x's sign now)
    (*out)->s[i] = tame(cx, flip ? sym_scale(&cx->g->arena, x->s[i], -1, 1) : x->s[i],
                        (*out)->i[i]);
  }
  return 0;
}
#define FOLD_UNARY(Name, f, fi)                                                          \
  int fe_fold_##Name(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {                \
    return fold_unary(cx, in, nin, out, f, fi);                                          \
  }
FOLD_UNARY(Neg, neg, neg_i)
FOLD_UNARY(Abs, fabs, abs_i)
FOLD_UNARY(Sign, sign, sign_i)
FOLD_UNARY(Sqrt, sqrt, NULL)
FOLD_UNARY(Reciprocal, recip, NULL)
FOLD_UNARY(Exp, exp, NULL)
FOLD_UNARY(Log, log, NULL)
FOLD_UNARY(Tanh, tanh, NULL)
FOLD_UNARY(Erf, erf, NULL)
FOLD_UNARY(Sin, sin, NULL)
FOLD_UNARY(Cos, cos, NULL)
FOLD_UNARY(Sigmoid, sigmoid, NULL)

// MatMul of float constants (rotary tables, say), numpy's semantics: a rank-1
// operand is a row (a) or a column (b), the batch dims broadcast. Sums in
// double, rounded once. Integer operands, and products too costly to fold
// (over 2^32 multiply-adds), run.
int fe_fold_MatMul(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  if (need_inputs(cx, in, nin, 2))
    return -1;
  FeConst *a = in[0], *b = in[1];
  if (!a->f || !b->f)
    return 1;
  if (a->rank < 1 || b->rank < 1)
    return fe_err(cx, "an operand is a scalar; MatMul needs rank 1 or more");
  // a as [batch.., M, K], b as [batch.., K, N]
  const Sym *one = sym_const(&cx->g->arena, 1), *as[IR_MAXRANK + 1], *bs[IR_MAXRANK + 1];
  int ra = a->rank, rb = b->rank;
  memcpy(as + (ra == 1), a->shape, (size_t)ra * sizeof *as);
  memcpy(bs, b->shape, (size_t)rb * sizeof *bs);
  if (ra == 1)
    as[0] = one, ra = 2;
  if (rb == 1)
    bs[1] = one, rb = 2;
  int64_t m, k, kb, n;
  if (fe_eval(cx, as[ra - 2], &m) || fe_eval(cx, as[ra - 1], &k) || fe_eval(cx, bs[rb - 2], &kb) ||
      fe_eval(cx, bs[rb - 1], &n))
    return -1;
  if (k != kb)
    return fe_err(cx, "the inner dims differ: %lld and %lld", (long long)k, (long long)kb);
  int r;
  const Sym *shape[IR_MAXRANK + 2];
  if (fe_broadcast(cx, ra - 2, as, rb - 2, bs, &r, shape))
    return -1;
  int orank = r;
  if (a->rank > 1)
    shape[orank++] = as[ra - 2];
  if (b->rank > 1)
    shape[orank++] = bs[rb - 1];
  if (orank > IR_MAXRANK)
    return fe_err(cx, "the result has rank %d (at most %d)", orank, IR_MAXRANK);
  int rc = new_out(cx, a->type, orank, shape, out);
  if (rc)
    return rc;
  FeConst *o = *out;
  if ((double)o->n * (double)k > 0x1p32)
    return 1;
  int64_t od[IR_MAXRANK], ad[IR_MAXRANK], bd[IR_MAXRANK], batch = 1;
  dims_of(cx, r, shape, od), dims_of(cx, ra - 2, as, ad), dims_of(cx, rb - 2, bs, bd);
  for (int i = 0; i < r; i++)
    batch *= od[i];
  for (int64_t t = 0; t < batch; t++) {
    const float *pa = a->f + bcast_offset(t, r, od, ra - 2, ad) * m * k;
    const float *pb = b->f + bcast_offset(t, r, od, rb - 2, bd) * k * n;
    float *po = o->f + t * m * n;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double acc = 0.0;
        for (int64_t q = 0; q < k; q++)
          acc += (double)pa[i * k + q] * pb[q * n + j];
        po[i * n + j] = (float)acc;
      }
  }
  return 0;
}

int fe_fold_Not(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  if (need_inputs(cx, in, nin, 1))
    return -1;
  if (!in[0]->i)
    return fe_err(cx, "Not needs a bool tensor");
  int rc = new_out(cx, FE_BOOL, in[0]->rank, in[0]->shape, out);
  for (int64_t i = 0; !rc && i < in[0]->n; i++)
    (*out)->i[i] = !in[0]->i[i];
  return rc;
}

// Where(cond, x, y) = cond ? x : y, broadcast.
int fe_fold_Where(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  if (need_inputs(cx, in, nin, 3))
    return -1;
  FeConst *c = in[0], *x = in[1], *y = in[2];
  if (fe_is_float_type(x->type) != fe_is_float_type(y->type))
    return fe_err(cx, "x and y have types %s and %s", fe_type_name(x->type), fe_type_name(y->type));
  int r1, r;
  const Sym *s1[IR_MAXRANK], *shape[IR_MAXRANK];
  int64_t od[IR_MAXRANK], cd[IR_MAXRANK], xd[IR_MAXRANK], yd[IR_MAXRANK];
  if (fe_broadcast(cx, c->rank, c->shape, x->rank, x->shape, &r1, s1) ||
      fe_broadcast(cx, r1, s1, y->rank, y->shape, &r, shape))
    return -1;
  int rc = new_out(cx, x->type, r, shape, out);
  if (rc)
    return rc;
  with_syms(cx, *out);
  dims_of(cx, r, shape, od), dims_of(cx, c->rank, c->shape, cd);
  dims_of(cx, x->rank, x->shape, xd), dims_of(cx, y->rank, y->shape, yd);
  for (int64_t i = 0; i < (*out)->n; i++) {
    bool pick = fe_const_num(c, bcast_offset(i, r, od, c->rank, cd)) != 0;
    if (pick)
      copy_elem(cx, *out, i, x, bcast_offset(i, r, od, x->rank, xd));
    else
      copy_elem(cx, *out, i, y, bcast_offset(i, r, od, y->rank, yd));
  }
  return 0;
}

// ---- type and shape folds ----------------------------------------------------------------------

int fe_fold_Identity(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  if (need_inputs(cx, in, nin, 1))
    return -1;
  out[0] = in[0];
  return 0;
}

int fe_fold_Cast(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  int64_t to;
  if (need_inputs(cx, in, nin, 1) || fe_attr_int(cx, "to", 0, &to))
    return -1;
  FeConst *x = in[0];
  if (!fe_is_float_type((int)to) && !fe_is_int_type((int)to))
    return fe_err(cx, "cannot cast to %s", fe_type_name((int)to));
  int rc = new_out(cx, (int)to, x->rank, x->shape, out);
  if (rc)
    return rc;
  FeConst *o = *out;
  for (int64_t i = 0; i < x->n; i++) {
    double v = fe_const_num(x, i);
    if (o->f)
      o->f[i] = (float)v;
    else if (to == FE_BOOL)
      o->i[i] = v != 0;
    else
      o->i[i] = fe_const_int(x, i); // NaN and infinities saturate (HF masks them out later)
  }
  if (o->i && x->s && to != FE_BOOL) { // integer to integer keeps the formulas
    o->s = x->s;
  }
  with_syms(cx, o);
  return 0;
}

int fe_fold_Reshape(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  int64_t allowzero;
  int rank;
  const Sym *shape[IR_MAXRANK];
  if (need_inputs(cx, in, nin, 2) || fe_attr_int(cx, "allowzero", 0, &allowzero) ||
      fe_reshape_target(cx, in[0]->rank, in[0]->shape, in[1], allowzero, &rank, shape))
    return -1;
  FeConst *k = ir_alloc(&cx->g->arena, sizeof *k);
  *k = *in[0];
  k->rank = rank;
  memcpy(k->shape, shape, (size_t)rank * sizeof *shape);
  out[0] = k;
  return 0;
}

// Same elements, another shape.
static int reshaped(FeOnnx *cx, FeConst *x, int rank, const Sym *const *shape, FeConst **out) {
  FeConst *k = ir_alloc(&cx->g->arena, sizeof *k);
  *k = *x;
  k->rank = rank;
  memcpy(k->shape, shape, (size_t)rank * sizeof *shape);
  *out = k;
  return 0;
}

int fe_attr_axes(FeOnnx *cx, int64_t *axes, int *n) {
  const int64_t *a;
  if (fe_attr_ints(cx, "axes", &a, n))
    return -1;
  if (*n > IR_MAXRANK)
    return fe_err(cx, "too many axes");
  for (int i = 0; i < *n; i++)
    axes[i] = a[i];
  return 0;
}

// Axes of (Un)Squeeze: the input (opset 13+) or the attribute (older).
static int axes_of(FeOnnx *cx, FeConst *const *in, int nin, int64_t *axes, int *n) {
  if (nin > 1 && in[1])
    return fe_const_int_list(cx, in[1], "axes", axes, n, IR_MAXRANK);
  return fe_attr_axes(cx, axes, n);
}

int fe_fold_Unsqueeze(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  int64_t axes[IR_MAXRANK];
  int n, rank;
  const Sym *shape[IR_MAXRANK];
  if (need_inputs(cx, in, nin, 1) || axes_of(cx, in, nin, axes, &n))
    return -1;
  if (n < 0)
    return fe_err(cx, "needs axes");
  if (fe_unsqueeze_shape(cx, in[0]->rank, in[0]->shape, axes, n, &rank, shape))
    return -1;
  return reshaped(cx, in[0], rank, shape, out);
}

int fe_fold_Squeeze(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  int64_t axes[IR_MAXRANK];
  int n, rank;
  const Sym *shape[IR_MAXRANK];
  if (need_inputs(cx, in, nin, 1) || axes_of(cx, in, nin, axes, &n) ||
      fe_squeeze_shape(cx, in[0]->rank, in[0]->shape, axes, n, &rank, shape))
    return -1;
  return reshaped(cx, in[0], rank, shape, out);
}

int fe_fold_Flatten(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  int a;
  if (fold_axis(cx, in, nin, 1, 1, 1, &a))
    return -1;
  const Sym *shape[2] = {product(cx, a, in[0]->shape),
                         product(cx, in[0]->rank - a, in[0]->shape + a)};
  return reshaped(cx, in[0], 2, shape, out);
}

// The perm attribute (default: reversed dims), checked.
static int perm_of(FeOnnx *cx, int rank, int64_t *perm) {
  const int64_t *p;
  int n;
  if (fe_attr_ints(cx, "perm", &p, &n))
    return -1;
  bool seen[IR_MAXRANK] = {0};
  for (int i = 0; i < rank; i++) {
    perm[i] = n < 0 ? rank - 1 - i : i < n ? p[i] : -1;
    if (perm[i] < 0 || perm[i] >= rank || seen[perm[i]] || (n >= 0 && n != rank))
      return fe_err(cx, "perm must list each of the %d dims once", rank);
    seen[perm[i]] = true;
  }
  return 0;
}

int fe_fold_Transpose(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  int64_t perm[IR_MAXRANK], xd[IR_MAXRANK], od[IR_MAXRANK];
  if (need_inputs(cx, in, nin, 1) || perm_of(cx, in[0]->rank, perm))
    return -1;
  FeConst *x = in[0];
  const Sym *shape[IR_MAXRANK];
  for (int i = 0; i < x->rank; i++)
    shape[i] = x->shape[perm[i]];
  int rc = new_out(cx, x->type, x->rank, shape, out);
  if (rc)
    return rc;
  with_syms(cx, *out);
  dims_of(cx, x->rank, x->shape, xd), dims_of(cx, x->rank, shape, od);
  int64_t xs[IR_MAXRANK], s = 1;
  for (int i = x->rank - 1; i >= 0; i--)
    xs[i] = s, s *= xd[i];
  for (int64_t i = 0; i < x->n; i++) {
    int64_t rest = i, off = 0;
    for (int d = x->rank - 1; d >= 0; d--) {
      off += (rest % od[d]) * xs[perm[d]];
      rest /= od[d];
    }
    copy_elem(cx, *out, i, x, off);
  }
  return 0;
}

int fe_fold_Concat(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  int a;
  if (fold_axis(cx, in, nin, 1, 0, 0, &a))
    return -1;
  const Sym *shape[IR_MAXRANK];
  memcpy(shape, in[0]->shape, sizeof shape);
  for (int i = 1; i < nin; i++) {
    if (!in[i] || in[i]->rank != in[0]->rank || fe_is_float_type(in[i]->type) != fe_is_float_type(in[0]->type))
      return fe_err(cx, "inputs differ in rank or type");
    shape[a] = sym_add(&cx->g->arena, shape[a], in[i]->shape[a]);
  }
  int rc = new_out(cx, in[0]->type, in[0]->rank, shape, out);
  if (rc)
    return rc;
  with_syms(cx, *out);
  int64_t outer = 1, off = 0, od[IR_MAXRANK];
  dims_of(cx, in[0]->rank, shape, od);
  for (int d = 0; d < a; d++)
    outer *= od[d];
  int64_t wide = outer ? (*out)->n / outer : 0;
  for (int i = 0; i < nin; i++) {
    int64_t len = outer ? in[i]->n / outer : 0;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < len; j++)
        copy_elem(cx, *out, o * wide + off + j, in[i], o * len + j);
    off += len;
  }
  return 0;
}

// Split(x, split) axis: x's pieces along the axis, of the listed sizes or of equal ones
// (torch's repeat_interleave of a known tensor, as GPT-J and CodeGen export theirs).
int fe_fold_Split(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  int a, n = fe_nout(cx);
  if (fold_axis(cx, in, nin, 1, 0, 0, &a))
    return -1;
  FeConst *x = in[0];
  const Sym *parts[64];
  int64_t sizes[64], d[IR_MAXRANK], outer = 1, inner = 1;
  if (fe_split_sizes(cx, nin > 1 ? in[1] : NULL, x->shape[a], a, n, parts, sizes))
    return -1;
  dims_of(cx, x->rank, x->shape, d);
  for (int i = 0; i < a; i++)
    outer *= d[i];
  for (int i = a + 1; i < x->rank; i++)
    inner *= d[i];
  int64_t off = 0;
  for (int i = 0; i < n; off += sizes[i], i++) {
    const Sym *shape[IR_MAXRANK];
    memcpy(shape, x->shape, sizeof shape);
    shape[a] = parts[i];
    int rc = new_out(cx, x->type, x->rank, shape, &out[i]);
    if (rc)
      return rc;
    with_syms(cx, out[i]);
    int64_t len = sizes[i] * inner;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < len; j++)
        copy_elem(cx, out[i], o * len + j, x, (o * d[a] + off) * inner + j);
  }
  return 0;
}

int fe_fold_Gather(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  int a;
  if (fold_axis(cx, in, nin, 2, 0, 0, &a))
    return -1;
  FeConst *x = in[0], *idx = in[1];
  if (!idx->i)
    return fe_err(cx, "indices must be integers");
  const Sym *shape[IR_MAXRANK];
  int r;
  if (fe_gather_shape(cx, x->rank, x->shape, a, idx->rank, idx->shape, &r, shape))
    return -1;
  int rc = new_out(cx, x->type, r, shape, out);
  if (rc)
    return rc;
  with_syms(cx, *out);
  int64_t xd[IR_MAXRANK], outer = 1, inner = 1;
  dims_of(cx, x->rank, x->shape, xd);
  for (int i = 0; i < a; i++)
    outer *= xd[i];
  for (int i = a + 1; i < x->rank; i++)
    inner *= xd[i];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < idx->n; j++) {
      int64_t k = idx->i[j] < 0 ? idx->i[j] + xd[a] : idx->i[j];
      if (k < 0 || k >= xd[a])
        return fe_err(cx, "index %lld is out of range for dim %lld", (long long)idx->i[j],
                      (long long)xd[a]);
      for (int64_t e = 0; e < inner; e++)
        copy_elem(cx, *out, (o * idx->n + j) * inner + e, x, (o * xd[a] + k) * inner + e);
    }
  return 0;
}

// GatherElements(data, indices) axis: out[i] = data[i with its axis-th index
// replaced by indices[i]] (out has the indices' shape; their other dims are no
// larger than data's), as GPT-J's and CodeGen's exports index their rotary
// tables with the positions.
int fe_fold_GatherElements(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  int a;
  if (fold_axis(cx, in, nin, 2, 0, 0, &a))
    return -1;
  FeConst *x = in[0], *idx = in[1];
  if (!idx->i)
    return fe_err(cx, "indices must be integers");
  if (idx->rank != x->rank)
    return fe_err(cx, "indices of rank %d for data of rank %d (they must be equal)", idx->rank,
                  x->rank);
  int64_t xd[IR_MAXRANK], id[IR_MAXRANK];
  dims_of(cx, x->rank, x->shape, xd), dims_of(cx, idx->rank, idx->shape, id);
  for (int d = 0; d < x->rank; d++)
    if (d != a && id[d] > xd[d])
      return fe_err(cx, "indices dim %d (%lld) is larger than data's (%lld)", d, (long long)id[d],
                    (long long)xd[d]);
  int rc = new_out(cx, x->type, idx->rank, idx->shape, out);
  if (rc)
    return rc;
  with_syms(cx, *out);
  for (int64_t j = 0; j < idx->n; j++) {
    int64_t rest = j, off = 0, stride = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
      int64_t c = rest % id[d];
      rest /= id[d];
      if (d == a) {
        int64_t k = idx->i[j] < 0 ? idx->i[j] + xd[a] : idx->i[j];
        if (k < 0 || k >= xd[a])
          return fe_err(cx, "index %lld is out of range for dim %lld", (long long)idx->i[j],
                        (long long)xd[a]);
        c = k;
      }
      off += c * stride;
      stride *= xd[d];
    }
    copy_elem(cx, *out, j, x, off);
  }
  return 0;
}

int fe_fold_Slice(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  if (need_inputs(cx, in, nin, 3))
    return -1;
  FeConst *x = in[0];
  FeSliceAxis ax[IR_MAXRANK];
  int n;
  FeConst *rest[4] = {in[1], in[2], nin > 3 ? in[3] : NULL, nin > 4 ? in[4] : NULL};
  if (fe_slice_axes(cx, x->rank, x->shape, rest, ax, &n))
    return -1;
  const Sym *shape[IR_MAXRANK];
  int64_t start[IR_MAXRANK] = {0}, step[IR_MAXRANK], xd[IR_MAXRANK], od[IR_MAXRANK];
  memcpy(shape, x->shape, sizeof shape);
  for (int i = 0; i < x->rank; i++)
    step[i] = 1;
  for (int i = 0; i < n; i++) {
    shape[ax[i].axis] = ax[i].len;
    start[ax[i].axis] = ax[i].start;
    step[ax[i].axis] = ax[i].step;
  }
  int rc = new_out(cx, x->type, x->rank, shape, out);
  if (rc)
    return rc;
  with_syms(cx, *out);
  dims_of(cx, x->rank, x->shape, xd), dims_of(cx, x->rank, shape, od);
  for (int64_t i = 0; i < (*out)->n; i++) {
    int64_t rest_i = i, off = 0, stride = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
      off += (start[d] + (rest_i % od[d]) * step[d]) * stride;
      rest_i /= od[d];
      stride *= xd[d];
    }
    copy_elem(cx, *out, i, x, off);
  }
  return 0;
}

// Expand(x, shape): numpy broadcast of x against the shape.
int fe_fold_Expand(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  if (need_inputs(cx, in, nin, 2))
    return -1;
  FeConst *x = in[0];
  const Sym *want[IR_MAXRANK], *shape[IR_MAXRANK];
  int64_t v[IR_MAXRANK], od[IR_MAXRANK], xd[IR_MAXRANK];
  int nw, r;
  if (fe_const_int_list(cx, in[1], "shape", v, &nw, IR_MAXRANK))
    return -1;
  for (int i = 0; i < nw; i++)
    want[i] = fe_const_sym(cx, in[1], i);
  if (fe_broadcast(cx, x->rank, x->shape, nw, want, &r, shape))
    return -1;
  int rc = new_out(cx, x->type, r, shape, out);
  if (rc)
    return rc;
  with_syms(cx, *out);
  dims_of(cx, r, shape, od), dims_of(cx, x->rank, x->shape, xd);
  for (int64_t i = 0; i < (*out)->n; i++)
    copy_elem(cx, *out, i, x, bcast_offset(i, r, od, x->rank, xd));
  return 0;
}

// Tile(x, repeats): dim i repeated repeats[i] times (out[.., j, ..] = x[.., j mod dim, ..]);
// the decoder mask of T5 tiles an arange.
int fe_fold_Tile(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  if (need_inputs(cx, in, nin, 2))
    return -1;
  FeConst *x = in[0];
  int64_t reps[IR_MAXRANK], xd[IR_MAXRANK], od[IR_MAXRANK];
  int n;
  if (fe_const_int_list(cx, in[1], "repeats", reps, &n, IR_MAXRANK))
    return -1;
  if (n != x->rank)
    return fe_err(cx, "repeats has %d entries for a rank-%d input", n, x->rank);
  const Sym *shape[IR_MAXRANK];
  for (int i = 0; i < n; i++) {
    if (reps[i] < 0 || reps[i] > SYM_LIMIT)
      return fe_err(cx, "repeats[%d] is %lld", i, (long long)reps[i]);
    shape[i] = sym_mul(&cx->g->arena, x->shape[i], fe_const_sym(cx, in[1], i));
  }
  int rc = new_out(cx, x->type, x->rank, shape, out);
  if (rc)
    return rc;
  with_syms(cx, *out);
  dims_of(cx, x->rank, x->shape, xd), dims_of(cx, x->rank, shape, od);
  for (int64_t i = 0; i < (*out)->n; i++) {
    int64_t rest = i, off = 0, stride = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
      off += (rest % od[d]) % xd[d] * stride;
      rest /= od[d];
      stride *= xd[d];
    }
    copy_elem(cx, *out, i, x, off);
  }
  return 0;
}

int fe_scatter_map(FeOnnx *cx, int xrank, const Sym *const *xshape, const FeConst *idx, int urank,
                   const Sym *const *ushape, int64_t **map, int64_t *n) {
  const Onnx__AttributeProto *red = fe_attr(cx, "reduction");
  if (red && !(red->s.len == 4 && !memcmp(red->s.data, "none", 4)))
    return fe_err(cx, "reduction '%.*s' is not supported (only 'none')", (int)red->s.len,
                  (const char *)red->s.data);
  int64_t xd[IR_MAXRANK], ud[IR_MAXRANK], id[IR_MAXRANK], k;
  if (!idx->i || idx->rank < 1)
    return fe_err(cx, "indices must be integers [..., k]");
  if (fe_check_size(cx, xrank, xshape) || fe_check_size(cx, urank, ushape))
    return -1;
  dims_of(cx, xrank, xshape, xd), dims_of(cx, urank, ushape, ud);
  dims_of(cx, idx->rank, idx->shape, id);
  k = id[idx->rank - 1];
  bool ok = k >= 1 && k <= xrank && urank == idx->rank - 1 + xrank - (int)k;
  for (int i = 0; ok && i < idx->rank - 1; i++)
    ok = ud[i] == id[i];
  for (int i = (int)k; ok && i < xrank; i++)
    ok = ud[idx->rank - 1 + i - k] == xd[i];
  if (!ok)
    return fe_err(cx, "indices [..., %lld] and updates of rank %d do not fit data of rank %d",
                  (long long)k, urank, xrank);
  int64_t inner = 1, total = 1;
  for (int i = 0; i < xrank; i++)
    total *= xd[i], inner *= i >= k ? xd[i] : 1;
  int64_t *m = ir_alloc(&cx->g->arena, (size_t)(total + 1) * sizeof *m);
  for (int64_t i = 0; i < total; i++)
    m[i] = -1;
  for (int64_t j = 0; j * k < idx->n; j++) {
    int64_t off = 0;
    for (int a = 0; a < k; a++) {
      int64_t v = idx->i[j * k + a];
      if (v < -xd[a] || v >= xd[a])
        return fe_err(cx, "index %lld is out of range for dim %d (%lld)", (long long)v, a,
                      (long long)xd[a]);
      off = off * xd[a] + (v < 0 ? v + xd[a] : v);
    }
    for (int64_t e = 0; e < inner; e++)
      m[off * inner + e] = j * inner + e;
  }
  *map = m;
  *n = total;
  return 0;
}

// ScatterND(data, indices, updates): data with the slices that indices name
// replaced by updates.
int fe_fold_ScatterND(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  if (need_inputs(cx, in, nin, 3))
    return -1;
  FeConst *x = in[0], *u = in[2];
  if (fe_is_float_type(x->type) != fe_is_float_type(u->type))
    return fe_err(cx, "data and updates have types %s and %s", fe_type_name(x->type),
                  fe_type_name(u->type));
  int64_t *map, n;
  if (fe_scatter_map(cx, x->rank, x->shape, in[1], u->rank, u->shape, &map, &n))
    return -1;
  int rc = new_out(cx, x->type, x->rank, x->shape, out);
  if (rc)
    return rc;
  with_syms(cx, *out);
  for (int64_t i = 0; i < n; i++) {
    if (map[i] < 0)
      copy_elem(cx, *out, i, x, i);
    else
      copy_elem(cx, *out, i, u, map[i]);
  }
  return 0;
}

// Range(start, limit, delta): max(ceil((limit - start) / delta), 0)
// elements; arange(0, T) has the length T as a formula.
int fe_fold_Range(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  double s = 0, l = 0, dl = 1;
  if (need_inputs(cx, in, nin, 3) || fe_const_scalar(cx, in[0], "start", &s) ||
      fe_const_scalar(cx, in[1], "limit", &l) || fe_const_scalar(cx, in[2], "delta", &dl))
    return -1;
  if (dl == 0)
    return fe_err(cx, "delta is 0");
  // integers exactly (int64 limits are not doubles), floats as ONNX does
  bool ints = in[0]->i && in[1]->i && in[2]->i;
  __int128 span = ints ? (__int128)in[1]->i[0] - in[0]->i[0] : 0, step = ints ? in[2]->i[0] : 1;
  double count = ints ? (double)(span / step + (span % step != 0 && (span > 0) == (step > 0)))
                      : ceil((l - s) / dl);
  if (!(count < (double)FOLD_MAX))
    return fe_err(cx, "%g elements is too many to evaluate", count);
  int64_t n = count > 0 ? (int64_t)count : 0;
  const Sym *len = sym_const(&cx->g->arena, n);
  if (s == 0 && dl == 1 && in[1]->i)
    len = tame(cx, fe_const_sym(cx, in[1], 0), n);
  int rc = new_out(cx, in[0]->type, 1, &len, out);
  if (rc)
    return rc;
  with_syms(cx, *out);
  for (int64_t i = 0; i < n; i++) {
    if ((*out)->f)
      (*out)->f[i] = (float)(s + (double)i * dl);
    else
      (*out)->i[i] = (int64_t)(in[0]->i[0] + (__int128)i * step); // between start and limit
    if ((*out)->s)
      (*out)->s[i] = sym_const(&cx->g->arena, (*out)->i[i]);
  }
  return 0;
}

// CumSum(x, axis) exclusive reverse: running sums along axis, of compile-time
// values (OPT's positions: the cumulative sum of an all-ones attention mask
// that the model makes itself when it is not given one). Integers exactly,
// floats summed in double.
int fe_fold_CumSum(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  double a = 0;
  int64_t exclusive, reverse, d[IR_MAXRANK];
  int ax = 0;
  if (need_inputs(cx, in, nin, 2) || fe_const_scalar(cx, in[1], "axis", &a) ||
      fe_attr_int(cx, "exclusive", 0, &exclusive) || fe_attr_int(cx, "reverse", 0, &reverse) ||
      fe_axis(cx, (int64_t)a, in[0]->rank, &ax))
    return -1;
  FeConst *x = in[0];
  int rc = new_out(cx, x->type, x->rank, x->shape, out);
  if (rc)
    return rc;
  dims_of(cx, x->rank, x->shape, d);
  int64_t len = d[ax], inner = 1;
  for (int i = ax + 1; i < x->rank; i++)
    inner *= d[i];
  for (int64_t o = 0; len > 0 && o < x->n / len; o++) {  // each line along the axis
    int64_t base = o / inner * len * inner + o % inner;
    double sf = 0;
    __int128 si = 0;
    for (int64_t k = 0; k < len; k++) {
      int64_t at = base + (reverse ? len - 1 - k : k) * inner;
      double vf = x->f ? x->f[at] : 0;
      int64_t vi = x->i ? x->i[at] : 0;
      if (!exclusive)
        sf += vf, si += vi;
      if ((*out)->f)
        (*out)->f[at] = (float)sf;
      else if (si > INT64_MAX || si < INT64_MIN)
        return fe_err(cx, "the running sum leaves int64");
      else
        (*out)->i[at] = (int64_t)si;
      if (exclusive)
        sf += vf, si += vi;
    }
  }
  with_syms(cx, *out);
  return 0;
}

// ConstantOfShape(shape) value=tensor (default float 0).
int fe_fold_ConstantOfShape(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  int64_t v[IR_MAXRANK];
  int n;
  if (need_inputs(cx, in, nin, 1) || fe_const_int_list(cx, in[0], "shape", v, &n, IR_MAXRANK))
    return -1;
  const Onnx__TensorProto *tp = fe_attr_tensor(cx, "value");
  FeConst *val = tp ? fe_tensor_proto(cx, tp, "value") : NULL;
  if (tp && (!val || val->n != 1))
    return val ? fe_err(cx, "value must have one element") : -1;
  const Sym *shape[IR_MAXRANK];
  for (int i = 0; i < n; i++) {
    if (v[i] < 0)
      return fe_err(cx, "a negative dim %lld", (long long)v[i]);
    shape[i] = fe_const_sym(cx, in[0], i);
  }
  int rc = new_out(cx, val ? val->type : FE_FLOAT, n, shape, out);
  if (rc)
    return rc;
  with_syms(cx, *out);
  for (int64_t i = 0; i < (*out)->n; i++) {
    if (val)
      copy_elem(cx, *out, i, val, 0);
    else
      (*out)->f[i] = 0.0f;
  }
  return 0;
}

// Trilu(x, k) upper=1: keep the upper (or lower) triangle of the last two dims.
int fe_fold_Trilu(FeOnnx *cx, FeConst **in, int nin, FeConst **out) {
  int64_t upper, k = 0, d[IR_MAXRANK];
  double kk = 0;
  if (need_inputs(cx, in, nin, 1) || fe_attr_int(cx, "upper", 1, &upper))
    return -1;
  if (nin > 1 && in[1]) {
    if (fe_const_scalar(cx, in[1], "k", &kk))
      return -1;
    k = fe_const_int(in[1], 0);
  }
  FeConst *x = in[0];
  if (x->rank < 2)
    return fe_err(cx, "needs at least 2 dims");
  int rc = new_out(cx, x->type, x->rank, x->shape, out);
  if (rc)
    return rc;
  with_syms(cx, *out);
  dims_of(cx, x->rank, x->shape, d);
  int64_t rows = d[x->rank - 2], cols = d[x->rank - 1];
  for (int64_t i = 0; i < x->n; i++) {
    int64_t c = i % cols, r = (i / cols) % rows;
    copy_elem(cx, *out, i, x, i);
    if (!fe_trilu_keep(r, c, k, upper)) {
      if ((*out)->f)
        (*out)->f[i] = 0.0f;
      else
        (*out)->i[i] = 0;
      if ((*out)->s)
        (*out)->s[i] = sym_const(&cx->g->arena, 0);
    }
  }
  return 0;
}
