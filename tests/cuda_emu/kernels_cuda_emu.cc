// runtime/kernels_cuda.cu, its kernels run on the host by the CUDA emulation (cuda_emu.h).
#include "cuda_emu.h"

// the device code meets the host compiler's warnings here only (norm2_kernel
// compares threadIdx.x with an int)
#pragma GCC diagnostic ignored "-Wsign-compare"

#include "kernels_cuda.cu"
