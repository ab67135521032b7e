// runtime/device_cuda.cu over the CUDA emulation (cuda_emu.h): the GPU build's device (its
// arena, its stage, pinned host memory) on the CPU, for a GPU build's program run whole in the
// tests (calibrate_gpu_emu: mtc calibrate's measuring program).
#include "cuda_emu.h"

#include "device_cuda.cu"
