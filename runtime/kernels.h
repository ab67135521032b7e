// The kernels of the mtc runtime (prefix rt_): their prototypes, from the
// table in kernels.def, which documents each. runtime/kernels_cpu.c,
// dist_cpu.c and dist.c define them for the CPU build; kernels_cuda.cu and
// dist.c for the GPU build; host.c has the host code of both.
//
// Every generated forward/backward/update is a straight-line list of calls to
// these functions.
#ifndef MTC_RT_KERNELS_H
#define MTC_RT_KERNELS_H

#include "bf16.h"

#define RT_MAXRANK 8

// rt_binary's and rt_unary's ops, each list once: the enums, and the names
// codegen writes into the program (RT_EXP, ...)
#define RT_BINARY_OPS(X) X(ADD) X(SUB) X(MUL) X(DIV) X(MIN) X(MAX)
#define RT_UNARY_OPS(X) X(EXP) X(LOG) X(SQRT) X(TANH) X(ERF) X(POW) X(SIN) X(COS) X(ABS) X(SIGN) \
  X(SIGMOID)
// rt_compare's: a == b, a < b, a <= b, a > b, a >= b
#define RT_COMPARE_OPS(X) X(EQ) X(LT) X(LE) X(GT) X(GE)
#define RT_OP_ENUM(name) RT_##name,
enum { RT_BINARY_OPS(RT_OP_ENUM) };
enum { RT_UNARY_OPS(RT_OP_ENUM) };
enum { RT_COMPARE_OPS(RT_OP_ENUM) };

// The variants of the typed kernels (kernels.def's KT and KTU), each listed
// once: X(suffix, T) for KT kernels, X(suffix, T, U) for KTU kernels, T and U
// the names of element types in runtime/dtypes.def; the function of a variant
// is rt_<name><suffix>. The lowering picks the variant
// whose types are those of a call's tensors (codegen/kcall.c).
// (Extra arguments after X are passed on to it.)
#define RT_T_VARIANTS(X, ...) X(, F32, __VA_ARGS__) X(_bf16, BF16, __VA_ARGS__)
#define RT_TU_VARIANTS(X, ...)                                                 \
  X(, F32, F32, __VA_ARGS__) X(_bf16, BF16, BF16, __VA_ARGS__)                 \
  X(_bf16_f32, BF16, F32, __VA_ARGS__) X(_f32_bf16, F32, BF16, __VA_ARGS__)
// The C type of an element type's name in those lists (runtime/dtypes.def).
#define RT_CTYPE_F32 float
#define RT_CTYPE_BF16 rt_bf16
#define RT_CTYPE_I32 int

// The prototypes: kernels.def read once per variant (runtime/kernels_kinds.h
// names its types RT_T and RT_U in each reading): float32 (every kernel),
// bf16 (KT and KTU), then the KTU pairs of two types.
#define RT_T float
#define RT_U float
#include "kernels_kinds.h"
#define K(name, ...) void rt_##name(__VA_ARGS__);
#define KT K
#define KTU K
#include "kernels.def"
#undef RT_T
#undef RT_U

#define RT_T rt_bf16
#define RT_U rt_bf16
#include "kernels_kinds.h"
#define K(name, ...)
#define KT(name, ...) void rt_##name##_bf16(__VA_ARGS__);
#define KTU KT
#include "kernels.def"
#undef RT_T
#undef RT_U

#define RT_T rt_bf16
#define RT_U float
#include "kernels_kinds.h"
#define K(name, ...)
#define KT(name, ...)
#define KTU(name, ...) void rt_##name##_bf16_f32(__VA_ARGS__);
#include "kernels.def"
#undef RT_T
#undef RT_U

#define RT_T float
#define RT_U rt_bf16
#include "kernels_kinds.h"
#define K(name, ...)
#define KT(name, ...)
#define KTU(name, ...) void rt_##name##_f32_bf16(__VA_ARGS__);
#include "kernels.def"
#undef RT_T
#undef RT_U

// How the CPU build multiplies bf16 matrices (chosen when kernels_cpu.c is
// compiled): "avx512-bf16 dot products" or "bf16 widened to float32".
const char *rt_cpu_gemm_bf16_kind(void);

// The copies started with a slot (to_host, to_device) whose copy_wait has not come: 0 at the end
// of every phase of a step (train.c checks). Each build defines it beside its copies.
int rt_copies_pending(void);

// Non-zero while the program runs forward in eval mode (validation, sampling):
// dropout passes its input through, as PyTorch's model.eval() has it.
// Defined in dist.c, which every build links.
extern int rt_eval_mode;

// The host's threads (rt_adamw_host's default): $MTC_HOST_THREADS, else the
// online CPUs.
int rt_host_threads(void);
// Scans of arrays in host memory (offloaded state), on the host's threads, as the CPU build's
// rt_norm2 and rt_find_nonfinite scan (runtime/scan_cpu.h): x[0, n)'s sum of squares in
// float64 (rt_norm2's bits before its root), and the index of its first non-finite element
// (n: none).
double rt_norm2sq_host(const float *x, long n);
long rt_find_nonfinite_host(const float *x, long n);
// ... over bf16 elements (bf16 gradients offloaded: --grad-precision bf16)
double rt_norm2sq_host_bf16(const rt_bf16 *x, long n);
long rt_find_nonfinite_host_bf16(const rt_bf16 *x, long n);

// The rows of a cross-entropy that count: those whose target (on the host) is not `ignore`.
static inline long rt_counted_rows(const int *targets, long n, long ignore) {
  long count = 0;
  for (long i = 0; i < n; i++) count += targets[i] != ignore;
  return count;
}

#endif
