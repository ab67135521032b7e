// One variant of runtime/cpu_variants.h: reads RT_TEMPLATE with the types
// and names the includer defined (RT_T, RT_U, RT_T_F32, RT_U_F32, RT_KT,
// RT_SUFFIX, RT_TF_SUFFIX, TO_T, TO_U, RT_DTYPE), then undefines them for the
// next variant. No include guard: read once per variant.
#include RT_TEMPLATE
#undef RT_DTYPE
#undef RT_T
#undef RT_U
#undef RT_T_F32
#undef RT_U_F32
#undef RT_KT
#undef RT_SUFFIX
#undef RT_TF_SUFFIX
#undef TO_T
#undef TO_U
