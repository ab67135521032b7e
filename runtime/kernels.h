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

#define K_OUT(i, x) float *x
#define K_IN(i, x) const float *x
#define K_OUTI(i, x) int *x
#define K_INI(i, x) const int *x
#define K_LONG(i, x) long x
#define K_INT(i, x) int x
#define K_FLT(i, x) float x
#define K_DIMS(i, x) const long *x
#define K(name, ...) void rt_##name(__VA_ARGS__);
#include "kernels.def"

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
