# The runtime's sources by build, as paths from an emitted program's folder. Every program's
# Makefile includes this file (mtc copies it with the runtime); the tests build archives of the
# same lists once (tests/runtime_lib.sh) and link them into each program they build.
#
# the host code of every build
RT_SRC = runtime/train.c runtime/host.c runtime/safetensors.c runtime/dist.c \
  runtime/schedule.c runtime/log.c runtime/tokenizer.c runtime/data.c runtime/checkpoint.c \
  runtime/profile.c
# the collectives: one rank; several over MPI; on GPUs, over NCCL beside MPI
RT_COMM_SINGLE = runtime/comm_single.c
RT_COMM_MPI = runtime/comm_mpi.c
RT_COMM_NCCL = runtime/comm_nccl.c
# the CPU build's kernels (the GPU build's are runtime/*.cu, built by nvcc)
RT_CPU_SRC = runtime/kernels_cpu.c runtime/dist_cpu.c runtime/device_cpu.c
RT_HDR = runtime/kernels.h runtime/kernels.def runtime/kernels_kinds.h runtime/dtypes.def \
  runtime/bf16.h runtime/cpu_variants.h runtime/cpu_variant.h runtime/kernels_cpu_t.h \
  runtime/dist_cpu_t.h runtime/adamw_cpu.h runtime/exp_cpu.h runtime/scan_cpu.h runtime/coalesce.h runtime/copy_slots.h runtime/pool.h \
  runtime/model_api.h runtime/rng.h runtime/safetensors.h runtime/schedule.h runtime/log.h \
  runtime/profile.h runtime/shard.h runtime/parts.h runtime/tokenizer.h runtime/data.h \
  runtime/checkpoint.h runtime/comm.h \
  runtime/dist.h runtime/device.h runtime/comm_nccl.h
RT_CUDA_HDR = runtime/cuda_common.h runtime/mma_cuda.cuh runtime/move_cuda.cuh \
  runtime/elementwise_cuda.cuh runtime/matmul_cuda.cuh runtime/nn_cuda.cuh \
  runtime/attention_cuda.cuh runtime/optim_cuda.cuh runtime/onnx_cuda.cuh runtime/dist_cuda.cuh
