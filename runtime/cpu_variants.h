// Defines the typed kernels of a CPU source once per variant of
// runtime/kernels.h's RT_T_VARIANTS and RT_TU_VARIANTS: the includer defines
// RT_TEMPLATE, the file of kernels written over RT_T and RT_U (see
// runtime/kernels_cpu_t.h for what it may use), and includes this file once.
//   float32        KT and KTU kernels   rt_<name>
//   bf16           KT and KTU kernels   rt_<name>_bf16
//   bf16, float32  KTU kernels          rt_<name>_bf16_f32
//   float32, bf16  KTU kernels          rt_<name>_f32_bf16
#ifndef RT_TEMPLATE
#error "RT_TEMPLATE must name the file of typed kernels"
#endif

// n floats of scratch for a bf16 kernel's float32 copy of a tensor, and its
// release (runtime/kernels_cpu.c: one buffer per thread, reused from call to
// call, so that a step allocates nothing once the first has run; the program
// ends, saying so, when memory is out)
float *rt_cpu_alloc(long n);
void rt_cpu_free(float *p);

static inline float rt_ld_f32(float x) { return x; }
// an element of either type, widened to float (exact)
#define LD(x) _Generic((x), rt_bf16: rt_bf16_to_f32, default: rt_ld_f32)(x)
#define RT_CAT(a, b) RT_CAT_(a, b)
#define RT_CAT_(a, b) a##b
#define RT_NAME(name) RT_CAT(rt_##name, RT_SUFFIX)
#define RT_NAME_TF(name) RT_CAT(rt_##name, RT_TF_SUFFIX)
#define RT_LOCAL(name) RT_CAT(name##_, RT_SUFFIX)

#define RT_T float
#define RT_U float
#define RT_T_F32 1
#define RT_U_F32 1
#define RT_KT 1
#define RT_SUFFIX
#define RT_TF_SUFFIX
#define TO_T(x) (x)
#define TO_U(x) (x)
#define RT_DTYPE RT_F32
#include "cpu_variant.h"

#define RT_T rt_bf16
#define RT_U rt_bf16
#define RT_T_F32 0
#define RT_U_F32 0
#define RT_KT 1
#define RT_SUFFIX _bf16
#define RT_TF_SUFFIX _bf16_f32
#define TO_T(x) rt_f32_to_bf16(x)
#define TO_U(x) rt_f32_to_bf16(x)
#define RT_DTYPE RT_BF16
#include "cpu_variant.h"

#define RT_T rt_bf16
#define RT_U float
#define RT_T_F32 0
#define RT_U_F32 1
#define RT_KT 0
#define RT_SUFFIX _bf16_f32
#define RT_TF_SUFFIX _bf16_f32
#define TO_T(x) rt_f32_to_bf16(x)
#define TO_U(x) (x)
#define RT_DTYPE RT_BF16
#include "cpu_variant.h"

#define RT_T float
#define RT_U rt_bf16
#define RT_T_F32 1
#define RT_U_F32 0
#define RT_KT 0
#define RT_SUFFIX _f32_bf16
#define RT_TF_SUFFIX
#define TO_T(x) (x)
#define TO_U(x) rt_f32_to_bf16(x)
#define RT_DTYPE RT_F32
#include "cpu_variant.h"

#undef RT_TEMPLATE
