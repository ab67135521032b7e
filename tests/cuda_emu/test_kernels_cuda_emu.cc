// tests/test_kernels_cuda.cu over the CUDA emulation (cuda_emu.h): every launcher against its
// CPU twin, the big cases shrunk.
#include "cuda_emu.h"
#include "test_kernels_cuda.cu"
