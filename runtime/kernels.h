// The kernels of the mtc runtime (prefix rt_): their prototypes, from the
// table in kernels.def, which documents each. runtime/kernels_cpu.c,
// dist_cpu.c and dist.c define them for the CPU build; kernels_cuda.cu and
// dist.c for the GPU build; host.c has the host code of both.
//
// Every generated forward/backward/update is a straight-line list of calls to
// these functions.
#ifndef MTC_RT_KERNELS_H
#define MTC_RT_KERNELS_H

#define RT_MAXRANK 8

// rt_binary's and rt_unary's ops, each list once: the enums, and the names
// codegen writes into the program (RT_EXP, ...)
#define RT_BINARY_OPS(X) X(ADD) X(SUB) X(MUL) X(DIV) X(MIN) X(MAX)
#define RT_UNARY_OPS(X) X(EXP) X(LOG) X(SQRT) X(TANH) X(ERF) X(POW) X(SIN) X(COS) X(ABS) X(SIGN) \
  X(SIGMOID)
#define RT_OP_ENUM(name) RT_##name,
enum { RT_BINARY_OPS(RT_OP_ENUM) };
enum { RT_UNARY_OPS(RT_OP_ENUM) };

// The variants of the typed kernels (kernels.def's KT and KTU), each listed
// once: X(suffix, T) for KT kernels, X(suffix, T, U) for KTU kernels, T and U
// the names of element types in runtime/dtypes.def; the function of a variant
// is rt_<name><suffix>. The lowering picks the variant
// whose types are those of a call's tensors (codegen/kcall.c).
// (Extra arguments after X are passed on to it.)
#define RT_T_VARIANTS(X, ...) X(, F32, __VA_ARGS__)
#define RT_TU_VARIANTS(X, ...) X(, F32, F32, __VA_ARGS__)
// The C type of an element type's name in those lists (runtime/dtypes.def).
#define RT_CTYPE_F32 float
#define RT_CTYPE_I32 int

// The prototypes: kernels.def read once per variant, its kinds naming that
// variant's types (RT_T, RT_U).
#define K_OUT(i, x) RT_T *x
#define K_IN(i, x) const RT_T *x
#define K_OUTU(i, x) RT_U *x
#define K_OUTF(i, x) float *x
#define K_INF(i, x) const float *x
#define K_OUTI(i, x) int *x
#define K_INI(i, x) const int *x
#define K_LONG(i, x) long x
#define K_INT(i, x) int x
#define K_FLT(i, x) float x
#define K_DIMS(i, x) const long *x
#define RT_T float
#define RT_U float
#define K(name, ...) void rt_##name(__VA_ARGS__);
#define KT K
#define KTU K
#include "kernels.def"
#undef RT_T
#undef RT_U

// The host's threads (rt_adamw_host's default): $MTC_HOST_THREADS, else the
// online CPUs.
int rt_host_threads(void);

// The rows of a cross-entropy that count: those whose target (on the host) is not `ignore`.
static inline long rt_counted_rows(const int *targets, long n, long ignore) {
  long count = 0;
  for (long i = 0; i < n; i++) count += targets[i] != ignore;
  return count;
}

#endif
