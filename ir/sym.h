// Symbolic dimensions.
//
// A dimension is a Laurent polynomial with rational coefficients over named
// symbols (B, T, C, ...): sums of terms coef * B^e1 * T^e2 ..., where
// exponents may be negative so that C/NH * NH simplifies to C. Element
// counts, bytes and FLOPs are built from dims and so are polynomials too.
//
// A Sym is immutable and kept in canonical form (terms sorted, no zero
// coefficients, den > 0, gcd(num, den) == 1), so equality is structural.
#ifndef MTC_IR_SYM_H
#define MTC_IR_SYM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"

#define SYM_MAXVARS 16
#define SYM_NAMELEN 32

// The symbols of one compilation and their bindings (values).
typedef struct SymTab {
  int n;
  char name[SYM_MAXVARS][SYM_NAMELEN];
  int64_t value[SYM_MAXVARS];
  bool bound[SYM_MAXVARS];
} SymTab;

typedef struct SymTerm {
  int64_t num, den;            // rational coefficient num/den, den > 0
  int8_t exp[SYM_MAXVARS];     // exponent of each symbol of the SymTab
} SymTerm;

typedef struct Sym {
  int n;                       // number of terms; 0 means the constant 0
  SymTerm t[];
} Sym;

// Symbol table.
int symtab_find(const SymTab *tab, const char *name);  // index or -1
int symtab_add(SymTab *tab, const char *name);         // index (existing or new); -1 when full or name too long
void symtab_bind(SymTab *tab, int var, int64_t value);

// Construction. Results live in the arena. An operation whose coefficients
// overflow int64 (or that scales by 1/0) gives the overflowed formula, and
// every operation on it gives it again (as NaN in floating point): check
// sym_overflowed, or sym_eval's -3, where a formula from input is used.
const Sym *sym_const(IrArena *a, int64_t c);
const Sym *sym_var(IrArena *a, int var);
const Sym *sym_add(IrArena *a, const Sym *x, const Sym *y);
const Sym *sym_sub(IrArena *a, const Sym *x, const Sym *y);
const Sym *sym_mul(IrArena *a, const Sym *x, const Sym *y);
const Sym *sym_scale(IrArena *a, const Sym *x, int64_t num, int64_t den);
// x / y where y is a single term (monomial times a coefficient); NULL when y
// has several terms or is zero.
const Sym *sym_div(IrArena *a, const Sym *x, const Sym *y);

// Queries.
bool sym_eq(const Sym *x, const Sym *y);
// Two lists of n formulas, equal one by one.
bool sym_list_eq(const Sym *const *x, const Sym *const *y, int n);
bool sym_is_const(const Sym *x, int64_t *value);      // an integer constant?
bool sym_uses(const Sym *x, int var);           // does symbol var occur in x?
bool sym_is_one(const Sym *x);                        // the constant 1?
bool sym_is_zero(const Sym *x);
bool sym_overflowed(const Sym *x);

// Evaluation under the table's bindings.
// Returns 0 and sets *out when every symbol used is bound and the result is
// an integer; -1 when a symbol is unbound; -2 when the result is not an
// integer (or divides by a symbol bound to 0); -3 when it overflows int64
// (or x is the overflowed formula).
int sym_eval(const Sym *x, const SymTab *tab, int64_t *out);
double sym_evalf(const Sym *x, const SymTab *tab);     // NaN when unbound or overflowed

// Printing: "4*B*T*C + 2*B*T", "C/NH", "3*C/2", "T*T" (powers are written as
// repeated products so the text is also a valid C expression), "0";
// "overflow" for the overflowed formula.
// snprintf semantics: returns the length the full text needs.
int sym_print(char *buf, size_t n, const Sym *x, const SymTab *tab);
// Convenience: print into the arena.
const char *sym_str(IrArena *a, const Sym *x, const SymTab *tab);

// Parsing the printed form (and a little more: parentheses around products,
// '^' powers). Unknown symbol names are added to the table. Stops at the
// first character that cannot continue a formula and sets *end to it.
// Returns NULL on a syntax error (then *end points at the bad character).
const Sym *sym_parse(IrArena *a, SymTab *tab, const char *s, const char **end);

#endif
