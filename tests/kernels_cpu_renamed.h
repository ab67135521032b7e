// Renames the CPU kernels of runtime/kernels_cpu.c and dist_cpu.c to cpu_rt_*, so that
// tests/test_kernels_cuda.cu links them beside their CUDA twins, which have
// the rt_* names: both are compiled for that test with -include
// this file; the test includes it around a second include of kernels.h, then
// again with CPU_RENAMED_UNDEF defined to drop the names. Every external
// symbol of both is listed (nm the object when one is added).
#ifndef CPU_RENAMED_UNDEF
#define rt_accumulate cpu_rt_accumulate
#define rt_adamw cpu_rt_adamw
#define rt_attention_bwd cpu_rt_attention_bwd
#define rt_attention_fwd cpu_rt_attention_fwd
#define rt_binary cpu_rt_binary
#define rt_col2im cpu_rt_col2im
#define rt_copy cpu_rt_copy
#define rt_copy_i32 cpu_rt_copy_i32
#define rt_cast_i32_f32 cpu_rt_cast_i32_f32
#define rt_crossentropy_bwd cpu_rt_crossentropy_bwd
#define rt_crossentropy_fwd cpu_rt_crossentropy_fwd
#define rt_dropout cpu_rt_dropout
#define rt_embedding_bwd cpu_rt_embedding_bwd
#define rt_embedding_fwd cpu_rt_embedding_fwd
#define rt_embedding_vp_fwd cpu_rt_embedding_vp_fwd
#define rt_equal_i32 cpu_rt_equal_i32
#define rt_equal_f32 cpu_rt_equal_f32
#define rt_fill cpu_rt_fill
#define rt_find_nonfinite cpu_rt_find_nonfinite
#define rt_gelu_bwd cpu_rt_gelu_bwd
#define rt_gelu_erf_bwd cpu_rt_gelu_erf_bwd
#define rt_gelu_erf_fwd cpu_rt_gelu_erf_fwd
#define rt_gelu_fwd cpu_rt_gelu_fwd
#define rt_im2col cpu_rt_im2col
#define rt_layernorm_bwd cpu_rt_layernorm_bwd
#define rt_layernorm_fwd cpu_rt_layernorm_fwd
#define rt_log_softmax_bwd cpu_rt_log_softmax_bwd
#define rt_log_softmax_fwd cpu_rt_log_softmax_fwd
#define rt_masked_fill cpu_rt_masked_fill
#define rt_masked_fill_i32 cpu_rt_masked_fill_i32
#define rt_matmul cpu_rt_matmul
#define rt_nll_loss_bwd cpu_rt_nll_loss_bwd
#define rt_nll_loss_fwd cpu_rt_nll_loss_fwd
#define rt_reduce_sum cpu_rt_reduce_sum
#define rt_relu_bwd cpu_rt_relu_bwd
#define rt_relu_fwd cpu_rt_relu_fwd
#define rt_rmsnorm_bwd cpu_rt_rmsnorm_bwd
#define rt_rmsnorm_fwd cpu_rt_rmsnorm_fwd
#define rt_rope cpu_rt_rope
#define rt_scale cpu_rt_scale
#define rt_sgd cpu_rt_sgd
#define rt_silu_bwd cpu_rt_silu_bwd
#define rt_silu_fwd cpu_rt_silu_fwd
#define rt_slice cpu_rt_slice
#define rt_slice_axis cpu_rt_slice_axis
#define rt_slice_axis_bwd cpu_rt_slice_axis_bwd
#define rt_slice_axis_i32 cpu_rt_slice_axis_i32
#define rt_softmax_bwd cpu_rt_softmax_bwd
#define rt_softmax_fwd cpu_rt_softmax_fwd
#define rt_strided_copy cpu_rt_strided_copy
#define rt_tick cpu_rt_tick
#define rt_to_device cpu_rt_to_device
#define rt_to_host cpu_rt_to_host
#define rt_tp_gather cpu_rt_tp_gather
#define rt_tp_slice cpu_rt_tp_slice
#define rt_unary cpu_rt_unary
#define rt_unshard cpu_rt_unshard
#define rt_unslice cpu_rt_unslice
#define rt_unslice_i32 cpu_rt_unslice_i32
#define rt_vp_crossentropy_bwd cpu_rt_vp_crossentropy_bwd
#define rt_vp_crossentropy_fwd cpu_rt_vp_crossentropy_fwd
#else
#undef rt_accumulate
#undef rt_adamw
#undef rt_attention_bwd
#undef rt_attention_fwd
#undef rt_binary
#undef rt_col2im
#undef rt_copy
#undef rt_copy_i32
#undef rt_cast_i32_f32
#undef rt_crossentropy_bwd
#undef rt_crossentropy_fwd
#undef rt_dropout
#undef rt_embedding_bwd
#undef rt_embedding_fwd
#undef rt_embedding_vp_fwd
#undef rt_equal_i32
#undef rt_equal_f32
#undef rt_fill
#undef rt_find_nonfinite
#undef rt_gelu_bwd
#undef rt_gelu_erf_bwd
#undef rt_gelu_erf_fwd
#undef rt_gelu_fwd
#undef rt_im2col
#undef rt_layernorm_bwd
#undef rt_layernorm_fwd
#undef rt_log_softmax_bwd
#undef rt_log_softmax_fwd
#undef rt_masked_fill
#undef rt_masked_fill_i32
#undef rt_matmul
#undef rt_nll_loss_bwd
#undef rt_nll_loss_fwd
#undef rt_reduce_sum
#undef rt_relu_bwd
#undef rt_relu_fwd
#undef rt_rmsnorm_bwd
#undef rt_rmsnorm_fwd
#undef rt_rope
#undef rt_scale
#undef rt_sgd
#undef rt_silu_bwd
#undef rt_silu_fwd
#undef rt_slice
#undef rt_slice_axis
#undef rt_slice_axis_bwd
#undef rt_slice_axis_i32
#undef rt_softmax_bwd
#undef rt_softmax_fwd
#undef rt_strided_copy
#undef rt_tick
#undef rt_to_device
#undef rt_to_host
#undef rt_tp_gather
#undef rt_tp_slice
#undef rt_unary
#undef rt_unshard
#undef rt_unslice
#undef rt_unslice_i32
#undef rt_vp_crossentropy_bwd
#undef rt_vp_crossentropy_fwd
#endif
