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

enum { RT_ADD, RT_SUB, RT_MUL, RT_DIV };                   // rt_binary's op
enum { RT_EXP, RT_LOG, RT_SQRT, RT_TANH, RT_ERF, RT_POW };  // rt_unary's op

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

#endif
