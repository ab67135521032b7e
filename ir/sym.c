// Symbolic dimensions: Laurent polynomials with rational coefficients.
//
// Every Sym is built by collecting raw terms into a fresh arena object and
// calling normalize(), which sorts them, merges like terms and drops zeros.
// Coefficients are kept as reduced int64 fractions; products and sums are
// formed in __int128 first, so overflow is detected exactly. The internal
// helpers return NULL on overflow: the parser turns that into a syntax
// error, the public constructors into the overflowed formula, which every
// later operation passes on (as NaN does) and sym_eval reports, so that the
// caller that owns the input can name it.
#include "sym.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

// sym_eq compares terms with memcmp, so a term must have no padding.
_Static_assert(sizeof(SymTerm) == 2 * sizeof(int64_t) + SYM_MAXVARS,
               "SymTerm must not contain padding");

#define EXP_MAX 127 // exponents stay in -EXP_MAX..EXP_MAX
#define POW_MAX 64  // largest power accepted by the parser's '^'

// The result of an operation that overflowed int64 or divided by zero.
static const Sym overflowed = {.n = -1};

bool sym_overflowed(const Sym *x) {
  return x->n < 0;
}

// r, or the overflowed formula when an internal helper gave NULL.
static const Sym *checked(const Sym *r) {
  return r ? r : &overflowed;
}

// Stops the compiler on a misuse of the API (bad index, zero divisor).
static void misuse(const char *what) {
  fprintf(stderr, "mtc: sym.c: %s\n", what);
  abort();
}

//
// Symbol table
//

// Returns the index of name, or -1.
int symtab_find(const SymTab *tab, const char *name) {
  for (int i = 0; i < tab->n; i++)
    if (strcmp(tab->name[i], name) == 0)
      return i;
  return -1;
}

// Returns the index of name, adding it unbound when new; -1 when the name
// does not fit or the table is full.
int symtab_add(SymTab *tab, const char *name) {
  if (strlen(name) > SYM_NAMELEN - 1)
    return -1;
  int i = symtab_find(tab, name);
  if (i >= 0)
    return i;
  if (tab->n >= SYM_MAXVARS)
    return -1;
  i = tab->n++;
  strcpy(tab->name[i], name);
  tab->value[i] = 0;
  tab->bound[i] = false;
  return i;
}

// Gives symbol var a value; out-of-range indices are ignored.
void symtab_bind(SymTab *tab, int var, int64_t value) {
  if (var < 0 || var >= tab->n)
    return;
  tab->value[var] = value;
  tab->bound[var] = true;
}

//
// Coefficients
//

// Magnitude of x; well defined for every i128.
static u128 mag128(i128 x) {
  return x < 0 ? -(u128)x : (u128)x;
}

// Greatest common divisor; gcd(0, b) == b.
static u128 gcd128(u128 a, u128 b) {
  while (b) {
    u128 t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// Stores num/den into t in lowest terms with den > 0. The inputs are
// products or sums of two int64 products, so |num|, |den| < 2^127 and
// negating them is safe. Returns false when den is 0 or the reduced
// fraction does not fit int64 (INT64_MIN is refused so that negation of a
// coefficient can never overflow).
static bool coef_set(SymTerm *t, i128 num, i128 den) {
  if (den == 0)
    return false;
  if (den < 0) {
    num = -num;
    den = -den;
  }
  u128 g = gcd128(mag128(num), (u128)den);
  num /= (i128)g;
  den /= (i128)g;
  if (num > INT64_MAX || num < -INT64_MAX || den > INT64_MAX)
    return false;
  t->num = (int64_t)num;
  t->den = (int64_t)den;
  return true;
}

//
// Terms and canonical form
//

// Sum of the exponents of t.
static int term_degree(const SymTerm *t) {
  int d = 0;
  for (int i = 0; i < SYM_MAXVARS; i++)
    d += t->exp[i];
  return d;
}

// qsort order of terms: higher total degree first, then the higher
// exponent of the lowest-index symbol where the two differ.
static int term_cmp(const void *pa, const void *pb) {
  const SymTerm *a = pa, *b = pb;
  int da = term_degree(a), db = term_degree(b);
  if (da != db)
    return da > db ? -1 : 1;
  for (int i = 0; i < SYM_MAXVARS; i++)
    if (a->exp[i] != b->exp[i])
      return a->exp[i] > b->exp[i] ? -1 : 1;
  return 0;
}

// Allocates a Sym with room for n terms (all zero).
static Sym *new_sym(IrArena *a, size_t n) {
  if (n > (SIZE_MAX - sizeof(Sym)) / sizeof(SymTerm))
    misuse("polynomial too large");
  Sym *s = ir_alloc(a, sizeof(Sym) + n * sizeof(SymTerm));
  s->n = (int)n;
  return s;
}

// Brings s into canonical form in place: sorts the terms, merges terms with
// the same monomial and drops zero coefficients. Returns false on overflow.
static bool normalize(Sym *s) {
  qsort(s->t, (size_t)s->n, sizeof(SymTerm), term_cmp);
  int k = 0;
  for (int i = 0; i < s->n;) {
    SymTerm acc = s->t[i++];
    while (i < s->n && term_cmp(&acc, &s->t[i]) == 0) {
      const SymTerm *u = &s->t[i++];
      i128 num = (i128)acc.num * u->den + (i128)u->num * acc.den;
      if (!coef_set(&acc, num, (i128)acc.den * u->den))
        return false;
    }
    if (acc.num != 0)
      s->t[k++] = acc;
  }
  // Clear the dropped tail so that no stale term stays behind.
  memset(&s->t[k], 0, (size_t)(s->n - k) * sizeof(SymTerm));
  s->n = k;
  return true;
}

//
// Arithmetic (NULL on overflow)
//

// x + sign*y for sign = 1 or -1.
static Sym *add_syms(IrArena *a, const Sym *x, const Sym *y, int sign) {
  Sym *r = new_sym(a, (size_t)x->n + (size_t)y->n);
  for (int i = 0; i < x->n; i++)
    r->t[i] = x->t[i];
  for (int i = 0; i < y->n; i++) {
    r->t[x->n + i] = y->t[i];
    r->t[x->n + i].num *= sign; // |num| <= INT64_MAX: cannot overflow
  }
  return normalize(r) ? r : NULL;
}

// Product of terms u and v into out; false on overflow.
static bool mul_term(SymTerm *out, const SymTerm *u, const SymTerm *v) {
  for (int i = 0; i < SYM_MAXVARS; i++) {
    int e = u->exp[i] + v->exp[i];
    if (e > EXP_MAX || e < -EXP_MAX)
      return false;
    out->exp[i] = (int8_t)e;
  }
  return coef_set(out, (i128)u->num * v->num, (i128)u->den * v->den);
}

// x * y.
static Sym *mul_syms(IrArena *a, const Sym *x, const Sym *y) {
  Sym *r = new_sym(a, (size_t)x->n * (size_t)y->n);
  int k = 0;
  for (int i = 0; i < x->n; i++)
    for (int j = 0; j < y->n; j++)
      if (!mul_term(&r->t[k++], &x->t[i], &y->t[j]))
        return NULL;
  return normalize(r) ? r : NULL;
}

// x / d for a single nonzero term d.
static Sym *div_term(IrArena *a, const Sym *x, const SymTerm *d) {
  // Multiply by the inverse of d: reciprocal coefficient, negated exponents.
  SymTerm inv = {0};
  for (int i = 0; i < SYM_MAXVARS; i++)
    inv.exp[i] = (int8_t)-d->exp[i];
  if (!coef_set(&inv, d->den, d->num))
    return NULL;
  Sym *r = new_sym(a, (size_t)x->n);
  for (int i = 0; i < x->n; i++)
    if (!mul_term(&r->t[i], &x->t[i], &inv))
      return NULL;
  return normalize(r) ? r : NULL;
}

// x * num/den for den != 0.
static Sym *scale_sym(IrArena *a, const Sym *x, int64_t num, int64_t den) {
  SymTerm c = {0};
  if (!coef_set(&c, num, den))
    return NULL;
  Sym *r = new_sym(a, (size_t)x->n);
  for (int i = 0; i < x->n; i++)
    if (!mul_term(&r->t[i], &x->t[i], &c))
      return NULL;
  return normalize(r) ? r : NULL;
}

// The constant c, or NULL when c is INT64_MIN.
static Sym *const_sym(IrArena *a, int64_t c) {
  if (c == 0)
    return new_sym(a, 0);
  if (c == INT64_MIN)
    return NULL;
  Sym *r = new_sym(a, 1);
  r->t[0].num = c;
  r->t[0].den = 1;
  return r;
}

// x^e for e >= 0 by repeated multiplication.
static Sym *pow_sym(IrArena *a, const Sym *x, int e) {
  Sym *r = const_sym(a, 1);
  for (int i = 0; i < e && r; i++)
    r = mul_syms(a, r, x);
  return r;
}

//
// Public construction
//

const Sym *sym_const(IrArena *a, int64_t c) {
  return checked(const_sym(a, c));
}

const Sym *sym_var(IrArena *a, int var) {
  if (var < 0 || var >= SYM_MAXVARS)
    misuse("sym_var: symbol index out of range");
  Sym *r = new_sym(a, 1);
  r->t[0].num = 1;
  r->t[0].den = 1;
  r->t[0].exp[var] = 1;
  return r;
}

const Sym *sym_add(IrArena *a, const Sym *x, const Sym *y) {
  return sym_overflowed(x) || sym_overflowed(y) ? &overflowed : checked(add_syms(a, x, y, 1));
}

const Sym *sym_sub(IrArena *a, const Sym *x, const Sym *y) {
  return sym_overflowed(x) || sym_overflowed(y) ? &overflowed : checked(add_syms(a, x, y, -1));
}

const Sym *sym_mul(IrArena *a, const Sym *x, const Sym *y) {
  return sym_overflowed(x) || sym_overflowed(y) ? &overflowed : checked(mul_syms(a, x, y));
}

const Sym *sym_scale(IrArena *a, const Sym *x, int64_t num, int64_t den) {
  return sym_overflowed(x) || den == 0 ? &overflowed : checked(scale_sym(a, x, num, den));
}

const Sym *sym_div(IrArena *a, const Sym *x, const Sym *y) {
  if (sym_overflowed(x) || sym_overflowed(y))
    return &overflowed;
  if (y->n != 1)
    return NULL;
  return checked(div_term(a, x, &y->t[0]));
}

//
// Queries
//

bool sym_list_eq(const Sym *const *x, const Sym *const *y, int n) {
  for (int i = 0; i < n; i++)
    if (!sym_eq(x[i], y[i]))
      return false;
  return true;
}

bool sym_eq(const Sym *x, const Sym *y) {
  if (x == y)
    return true;
  return x->n == y->n &&
         memcmp(x->t, y->t, (size_t)x->n * sizeof(SymTerm)) == 0;
}

// True when x is an integer constant; its value goes to *value if non-NULL.
bool sym_is_const(const Sym *x, int64_t *value) {
  int64_t v = 0;
  if (x->n > 1 || x->n < 0)
    return false;
  if (x->n == 1) {
    const SymTerm *t = &x->t[0];
    if (t->den != 1)
      return false;
    for (int i = 0; i < SYM_MAXVARS; i++)
      if (t->exp[i] != 0)
        return false;
    v = t->num;
  }
  if (value)
    *value = v;
  return true;
}

bool sym_uses(const Sym *x, int var) {
  for (int k = 0; k < x->n; k++)
    if (x->t[k].exp[var] != 0)
      return true;
  return false;
}

bool sym_is_one(const Sym *x) {
  int64_t c;
  return sym_is_const(x, &c) && c == 1;
}

bool sym_is_zero(const Sym *x) {
  return x->n == 0;
}

//
// Evaluation
//

// True when every symbol x uses is bound in tab.
static bool all_bound(const Sym *x, const SymTab *tab) {
  for (int k = 0; k < x->n; k++)
    for (int i = 0; i < SYM_MAXVARS; i++)
      if (x->t[k].exp[i] != 0 && (i >= tab->n || !tab->bound[i]))
        return false;
  return true;
}

// Checked i128 arithmetic for sym_eval: *ok turns false on overflow.
static i128 eval_mul(i128 a, i128 b, bool *ok) {
  i128 r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    *ok = false;
  return r;
}

static i128 eval_add(i128 a, i128 b, bool *ok) {
  i128 r = 0;
  if (__builtin_add_overflow(a, b, &r))
    *ok = false;
  return r;
}

// Reduces the fraction *num / *den (den != 0) to lowest terms, den > 0.
static void eval_reduce(i128 *num, i128 *den, bool *ok) {
  if (*den < 0) {
    *num = eval_mul(*num, -1, ok);
    *den = eval_mul(*den, -1, ok);
  }
  if (!*ok || *den == 0)
    return;
  u128 g = gcd128(mag128(*num), (u128)*den); // g <= den < 2^127
  *num /= (i128)g;
  *den /= (i128)g;
}

// Exact value of term t as *num / *den; false when a symbol it divides by
// is bound to zero.
static bool eval_term(const SymTerm *t, const SymTab *tab, i128 *num,
                      i128 *den, bool *ok) {
  i128 n = t->num, d = t->den;
  for (int i = 0; i < SYM_MAXVARS && *ok; i++) {
    int e = t->exp[i];
    if (e == 0)
      continue;
    i128 v = tab->value[i];
    if (e < 0 && v == 0)
      return false;
    for (int k = 0; k < abs(e) && *ok; k++) {
      if (e > 0)
        n = eval_mul(n, v, ok);
      else
        d = eval_mul(d, v, ok);
    }
  }
  eval_reduce(&n, &d, ok);
  *num = n;
  *den = d;
  return true;
}

int sym_eval(const Sym *x, const SymTab *tab, int64_t *out) {
  if (sym_overflowed(x))
    return -3;
  if (!all_bound(x, tab))
    return -1;

  // Sum the exact term values as a fraction sn/sd.
  bool ok = true;
  i128 sn = 0, sd = 1;
  for (int k = 0; k < x->n && ok; k++) {
    i128 tn, td;
    if (!eval_term(&x->t[k], tab, &tn, &td, &ok))
      return -2;
    sn = eval_add(eval_mul(sn, td, &ok), eval_mul(tn, sd, &ok), &ok);
    sd = eval_mul(sd, td, &ok);
    eval_reduce(&sn, &sd, &ok);
  }
  if (!ok || sn > INT64_MAX || sn < INT64_MIN)
    return -3;
  if (sd != 1)
    return -2;
  *out = (int64_t)sn;
  return 0;
}

double sym_evalf(const Sym *x, const SymTab *tab) {
  if (sym_overflowed(x) || !all_bound(x, tab))
    return NAN;
  double sum = 0;
  for (int k = 0; k < x->n; k++) {
    const SymTerm *t = &x->t[k];
    double v = (double)t->num / (double)t->den;
    for (int i = 0; i < SYM_MAXVARS; i++) {
      for (int e = 0; e < t->exp[i]; e++)
        v *= (double)tab->value[i];
      for (int e = 0; e > t->exp[i]; e--)
        v /= (double)tab->value[i];
    }
    sum += v;
  }
  return sum;
}

//
// Printing
//

// snprintf-style output: writes what fits, counts everything.
typedef struct Out {
  char *buf;
  size_t cap;
  size_t len; // length of the full text so far
} Out;

// Appends the string s.
static void out_str(Out *o, const char *s) {
  for (; *s; s++) {
    if (o->len + 1 < o->cap)
      o->buf[o->len] = *s;
    o->len++;
  }
}

// Appends the decimal form of v.
static void out_int(Out *o, int64_t v) {
  char tmp[32];
  snprintf(tmp, sizeof(tmp), "%lld", (long long)v);
  out_str(o, tmp);
}

// Appends the name of symbol i ("?" plus the index when tab lacks it).
static void out_var(Out *o, const SymTab *tab, int i) {
  if (tab && i < tab->n) {
    out_str(o, tab->name[i]);
    return;
  }
  out_str(o, "?");
  out_int(o, i);
}

// Appends term t with its sign: "-" before a leading negative term, " + "
// or " - " before the others.
static void print_term(Out *o, const SymTerm *t, const SymTab *tab,
                       bool first) {
  bool neg = t->num < 0;
  if (first)
    out_str(o, neg ? "-" : "");
  else
    out_str(o, neg ? " - " : " + ");

  bool has_pos = false;
  for (int i = 0; i < SYM_MAXVARS; i++)
    if (t->exp[i] > 0)
      has_pos = true;

  // Numerator: the coefficient (unless it is a bare 1 before variables),
  // then the positive powers as repeated products.
  int64_t num = neg ? -t->num : t->num;
  bool need_star = false;
  if (num != 1 || !has_pos) {
    out_int(o, num);
    need_star = true;
  }
  for (int i = 0; i < SYM_MAXVARS; i++) {
    for (int e = 0; e < t->exp[i]; e++) {
      if (need_star)
        out_str(o, "*");
      out_var(o, tab, i);
      need_star = true;
    }
  }

  // Denominator: "/den", then "/X" for each negative power.
  if (t->den != 1) {
    out_str(o, "/");
    out_int(o, t->den);
  }
  for (int i = 0; i < SYM_MAXVARS; i++) {
    for (int e = 0; e > t->exp[i]; e--) {
      out_str(o, "/");
      out_var(o, tab, i);
    }
  }
}

int sym_print(char *buf, size_t n, const Sym *x, const SymTab *tab) {
  Out o = {buf, n, 0};
  if (sym_overflowed(x))
    out_str(&o, "overflow");
  if (x->n == 0)
    out_str(&o, "0");
  for (int k = 0; k < x->n; k++)
    print_term(&o, &x->t[k], tab, k == 0);
  if (n > 0)
    buf[o.len < n ? o.len : n - 1] = '\0';
  return o.len > INT_MAX ? INT_MAX : (int)o.len;
}

const char *sym_str(IrArena *a, const Sym *x, const SymTab *tab) {
  int len = sym_print(NULL, 0, x, tab);
  char *buf = ir_alloc(a, (size_t)len + 1);
  sym_print(buf, (size_t)len + 1, x, tab);
  return buf;
}

//
// Parsing
//
//   expr    = term (('+' | '-') term)*
//   term    = factor (('*' | '/') factor)*
//   factor  = '-' factor | primary ('^' INT)?
//   primary = INT | IDENT | '(' expr ')'
//

typedef struct Parser {
  IrArena *a;
  SymTab *tab;
  const char *p;   // next character
  const char *err; // where the error is, once there is one
  int depth;       // nesting of parentheses and unary minus
} Parser;

// Deepest nesting the parser follows (each level is a few C stack frames).
#define PARSE_DEPTH_MAX 100

static const Sym *parse_expr(Parser *ps);

static bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

static bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_ident_char(char c) {
  return is_ident_start(c) || is_digit(c);
}

// Skips spaces and tabs.
static void skip_space(Parser *ps) {
  while (*ps->p == ' ' || *ps->p == '\t')
    ps->p++;
}

// Records a syntax error at `at` and returns NULL.
static const Sym *fail(Parser *ps, const char *at) {
  ps->err = at;
  return NULL;
}

// Reads a decimal integer at ps->p into *v; false when it overflows int64
// (ps->p is then left at the start of the literal).
static bool read_int(Parser *ps, int64_t *v) {
  const char *s = ps->p;
  int64_t r = 0;
  for (; is_digit(*s); s++) {
    int d = *s - '0';
    if (r > (INT64_MAX - d) / 10)
      return false;
    r = r * 10 + d;
  }
  *v = r;
  ps->p = s;
  return true;
}

// primary = INT | IDENT | '(' expr ')'
static const Sym *parse_primary(Parser *ps) {
  skip_space(ps);
  const char *start = ps->p;

  if (is_digit(*start)) {
    int64_t v;
    if (!read_int(ps, &v))
      return fail(ps, start);
    return const_sym(ps->a, v);
  }

  if (is_ident_start(*start)) {
    const char *s = start;
    while (is_ident_char(*s))
      s++;
    size_t len = (size_t)(s - start);
    if (len > SYM_NAMELEN - 1)
      return fail(ps, start);
    char name[SYM_NAMELEN];
    memcpy(name, start, len);
    name[len] = '\0';
    int var = symtab_add(ps->tab, name);
    if (var < 0)
      return fail(ps, start);
    ps->p = s;
    return sym_var(ps->a, var);
  }

  if (*start == '(') {
    if (ps->depth >= PARSE_DEPTH_MAX)
      return fail(ps, start);
    ps->p++;
    ps->depth++;
    const Sym *x = parse_expr(ps);
    ps->depth--;
    if (!x)
      return NULL;
    skip_space(ps);
    if (*ps->p != ')')
      return fail(ps, ps->p);
    ps->p++;
    return x;
  }

  return fail(ps, start);
}

// factor = '-' factor | primary ('^' INT)?
static const Sym *parse_factor(Parser *ps) {
  skip_space(ps);
  if (*ps->p == '-') {
    const char *minus = ps->p;
    if (ps->depth >= PARSE_DEPTH_MAX)
      return fail(ps, minus);
    ps->p++;
    ps->depth++;
    const Sym *x = parse_factor(ps);
    ps->depth--;
    if (!x)
      return NULL;
    x = scale_sym(ps->a, x, -1, 1);
    return x ? x : fail(ps, minus);
  }

  const Sym *x = parse_primary(ps);
  if (!x)
    return NULL;
  skip_space(ps);
  if (*ps->p != '^')
    return x;

  const char *caret = ps->p++;
  skip_space(ps);
  const char *start = ps->p;
  int64_t e;
  if (!is_digit(*start))
    return fail(ps, start);
  if (!read_int(ps, &e) || e > POW_MAX)
    return fail(ps, start);
  x = pow_sym(ps->a, x, (int)e);
  return x ? x : fail(ps, caret);
}

// term = factor (('*' | '/') factor)*
static const Sym *parse_term(Parser *ps) {
  const Sym *x = parse_factor(ps);
  while (x) {
    skip_space(ps);
    char op = *ps->p;
    if (op != '*' && op != '/')
      break;
    const char *at = ps->p++;
    skip_space(ps);
    const char *start = ps->p;
    const Sym *y = parse_factor(ps);
    if (!y)
      return NULL;
    if (op == '*') {
      x = mul_syms(ps->a, x, y);
    } else {
      // Only a single nonzero term can divide.
      if (y->n != 1)
        return fail(ps, start);
      x = div_term(ps->a, x, &y->t[0]);
    }
    if (!x)
      return fail(ps, at);
  }
  return x;
}

// expr = term (('+' | '-') term)*
static const Sym *parse_expr(Parser *ps) {
  const Sym *x = parse_term(ps);
  while (x) {
    skip_space(ps);
    char op = *ps->p;
    if (op != '+' && op != '-')
      break;
    const char *at = ps->p++;
    const Sym *y = parse_term(ps);
    if (!y)
      return NULL;
    x = add_syms(ps->a, x, y, op == '+' ? 1 : -1);
    if (!x)
      return fail(ps, at);
  }
  return x;
}

const Sym *sym_parse(IrArena *a, SymTab *tab, const char *s,
                     const char **end) {
  Parser ps = {a, tab, s, NULL, 0};
  const Sym *x = parse_expr(&ps);
  if (x)
    skip_space(&ps);
  if (end)
    *end = x ? ps.p : ps.err;
  return x;
}
