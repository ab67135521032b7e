// The argument kinds of runtime/kernels.def as C parameter declarations, for
// a variant whose element types are RT_T and RT_U (runtime/kernels.h reads
// kernels.def once per variant, this file before each reading: kernels.def
// undefines the kinds at its end). No include guard, on purpose.
#define K_OUT(i, x) RT_T *x
#define K_IN(i, x) const RT_T *x
#define K_OUTU(i, x) RT_U *x
#define K_OUTF(i, x) float *x
#define K_INF(i, x) const float *x
#define K_OUTI(i, x) int *x
#define K_OUTH(i, x) rt_bf16 *x
#define K_INI(i, x) const int *x
#define K_LONG(i, x) long x
#define K_INT(i, x) int x
#define K_FLT(i, x) float x
#define K_DIMS(i, x) const long *x
