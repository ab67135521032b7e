// The CUDA build of the mtc runtime: the stream every launcher runs on, error
// checks, and device setup. The launchers themselves (runtime/kernels_cuda.cu)
// have the names and prototypes of the CPU kernels in kernels.h and take
// device pointers.
#ifndef MTC_RT_CUDA_COMMON_H
#define MTC_RT_CUDA_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

// Prints file:line and the CUDA error string, and exits, when x fails.
#define cudaCheck(x)                                                           \
  do {                                                                         \
    cudaError_t cuda_check_err_ = (x);                                         \
    if (cuda_check_err_ != cudaSuccess) {                                      \
      fprintf(stderr, "%s:%d: CUDA error: %s\n", __FILE__, __LINE__,           \
              cudaGetErrorString(cuda_check_err_));                            \
      exit(EXIT_FAILURE);                                                      \
    }                                                                          \
  } while (0)

// The same for a cuBLAS status.
#define cublasCheck(x)                                                         \
  do {                                                                         \
    cublasStatus_t cublas_check_st_ = (x);                                     \
    if (cublas_check_st_ != CUBLAS_STATUS_SUCCESS) {                           \
      fprintf(stderr, "%s:%d: cuBLAS error: %s\n", __FILE__, __LINE__,         \
              cublasGetStatusString(cublas_check_st_));                        \
      exit(EXIT_FAILURE);                                                      \
    }                                                                          \
  } while (0)

// Launches `kernel` on `grid` blocks of `block` threads, with `smem` bytes of
// dynamic shared memory, on `stream`, and the kernel reads that memory as an
// array RT_DYNAMIC_SHARED(type, name), 128-byte aligned (ldmatrix's rows need
// 16). Under nvcc these are the <<<...>>> launch and an extern __shared__
// array; the CUDA emulation of the kernel
// tests (tests/cuda_emu/cuda_emu.h, included first) defines them to run the
// blocks as host code.
#ifndef RT_LAUNCH
#define RT_LAUNCH(kernel, grid, block, smem, stream, ...) \
  kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#define RT_DYNAMIC_SHARED(type, name) extern __shared__ __align__(128) type name[]
#endif

#ifdef __cplusplus
extern "C" {
#endif

// The stream every launcher runs on (0, the default stream, unless the
// program sets another). Launchers are asynchronous: rt_cuda_sync() waits.
extern cudaStream_t rt_cuda_stream;

// Selects the device and creates its context and the GEMM library's handle
// (call before the first kernel).
void rt_cuda_init(int device);
// The device memory the kernels take scratch from: the GEMM library's
// workspace (RT_GEMM_WORKSPACE_BYTES, model_api.h), then the kernels' scratch
// (the most one call needs: KS in kernels.def). Without it, scratch is
// allocated when first needed (the kernel tests).
void rt_cuda_set_workspace(void *p, size_t bytes);
// Waits until everything launched on rt_cuda_stream has finished.
void rt_cuda_sync(void);

// The address of every launcher named in runtime/kernels.def except the
// collectives (runtime/dist.c) and rt_adamw_host (runtime/host.c), host code
// in every build: a kernel of kernels.def without a CUDA twin does not compile.
extern void *const rt_cuda_kernels[];
extern const int rt_cuda_nkernels;

#ifdef __cplusplus
}
#endif

#endif
