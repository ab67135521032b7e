// CUDA emulated on the host, for the kernel tests without a GPU: a file that
// includes this header first (kernels_cuda_emu.cc includes it, then
// runtime/kernels_cuda.cu) is compiled by the host C++ compiler, and its
// kernels run on the CPU. The real CUDA headers give the types (dim3,
// cudaError_t, cublasHandle_t) and bf16's host conversions (cuda_bf16.h:
// round to nearest even); cuda_emu.cc implements the runtime and cuBLAS
// calls the kernels use, and runs the launches.
//
// What it models and checks:
//   - A launch (RT_LAUNCH, runtime/cuda_common.h) runs its blocks one after
//     another. The threads of a block run as fibers (ucontext), each on its
//     own stack, each until it finishes or waits at a barrier, in one of four
//     orders, the next block in the next: in rounds, every thread one turn in
//     index order (or in reverse) until all wait; or warp by warp (or the last
//     warp first), each warp until it waits at __syncthreads or exits.
//   - __syncthreads() is a barrier of the block: the threads go on when every
//     thread of the block waits at the same one (the same source line). A
//     thread that has exited, or waits at another barrier or warp op, while
//     others wait is a divergent barrier: the test aborts with a message that
//     names the kernel, the block and the threads.
//   - The warp shuffles and votes (__shfl*_sync, __ballot_sync, __any_sync,
//     __all_sync) are barriers of the lanes of their mask, which exchange
//     their values through per-thread slots. A lane of the mask that has
//     exited, waits elsewhere, or does not exist, a caller outside its own
//     mask, and a shuffle that reads a lane outside the mask are errors.
//   - __syncwarp is a barrier of the lanes of its mask, checked as the shuffles
//     are. The tensor cores' mma.sync and ldmatrix (runtime/mma_cuda.cuh) are
//     warp ops of the whole warp, checked the same way, which read every
//     lane's registers (or row addresses) at once and give each lane its
//     share as the PTX ISA lays them out; ldmatrix reads the dynamic shared
//     memory only, from 16-byte aligned rows.
//   - cp.async's copies (runtime/mma_cuda.cuh) are a thread's own queue: in
//     two of the four orders a copy is made as soon as it is issued (so that
//     the overwrite of a tile others still read shows), in the other two only
//     when the thread's cp.async.wait_group lets its group land (the
//     destination keeps what it had until then, so that a read before the
//     wait shows); a thread that exits with copies in flight is reported.
//   - __shared__ arrays are function-local statics (one block runs at a time);
//     the dynamic shared memory (RT_DYNAMIC_SHARED) is a buffer of the
//     launch's smem bytes, filled with 0xff bytes (NaN as floats) before each
//     block; a kernel that wrote past it is reported after the block.
//   - Device memory is host memory, each cudaMalloc its own malloc of the exact
//     size, so that the sanitizer build catches a kernel that reads or writes
//     past a buffer. Atomics are plain read-modify-writes (one OS thread).
//   - Kernels and the default stream's copies run at once. A created stream's
//     copies are queued and made only when an event recorded after them is
//     waited for (cudaStreamWaitEvent, cudaEventSynchronize) or the stream is
//     synchronized: a read of a copy's output before its wait, or a write of
//     its input, shows.
//   - cuBLAS's GEMMs are a reference GEMM with cuBLAS's semantics
//     (column-major, op(A) op(B), alpha, beta, leading dimensions, strided
//     batches, bf16 or float operands, float or bf16 C), summed in double;
//     cuBLASLt's the same, with the epilogues BIAS, GELU_AUX_BIAS (GELU in its
//     tanh form), BGRADA and BGRADB, refusing an attribute it does not know and
//     what its heuristic would refuse (GELU's aux ld not a multiple of 8).
//   - Limits: 1024 threads a block, 227 KiB of dynamic shared memory.
//
// What it cannot see: races that its four schedules hide (a missing barrier
// shows only when a thread reads what another has not written yet, or has
// written again, in one of those orders: no race detector looks at the
// accesses); memory ordering and the order of atomics; kernels on several
// streams (they run in launch order); a host pointer
// handed to a kernel (all memory is host memory); the 48 KiB of dynamic shared
// memory a kernel gets without cudaFuncSetAttribute; static shared memory read
// before it is written (it keeps the previous block's values); the device's
// math library (expf and the like are the host's, so results agree to
// rounding); speed.
#ifndef MTC_CUDA_EMU_H
#define MTC_CUDA_EMU_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

// for the includer: CUDA is emulated (the kernel test shrinks its big cases)
#define MTC_CUDA_EMU 1

// __global__, __device__ and __host__ are empty for a host compiler already;
// shared memory is one array for the block, and one block runs at a time.
#undef __shared__
#define __shared__ static

namespace emu {

// The running launch's grid and block, the running block and thread (the
// scheduler sets thread_idx, the running fiber's, whenever it switches).
extern dim3 grid_dim, block_dim;
extern uint3 block_idx, thread_idx;

enum WarpOp { SHFL, SHFL_UP, SHFL_DOWN, SHFL_XOR, BALLOT, ANY, ALL, SYNCWARP, MMA, LDMATRIX };

// Waits until every lane of `mask` has reached this warp op, then returns
// what it reads: a shuffle the value v of its source lane (arg: the lane,
// delta or lane mask), a vote the ballot of the lanes' v != 0.
uint64_t warp_op(WarpOp op, unsigned mask, uint64_t v, int arg, int width, const char *file,
                 int line);
// Waits until every thread of the block is at this barrier.
void syncthreads(const char *file, int line);
// The launch's dynamic shared memory.
void *dynamic_shared(void);
// Runs thread(body) as every thread of every block of the launch.
void run(const char *kernel, dim3 grid, dim3 block, size_t smem, void (*thread)(void *),
         void *body);

template <typename T>
T shuffle(WarpOp op, unsigned mask, T v, int arg, int width, const char *file, int line) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "a shuffle moves at most 8 bytes");
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof v);
  bits = warp_op(op, mask, bits, arg, width, file, line);
  memcpy(&v, &bits, sizeof v);
  return v;
}

// The host side of RT_LAUNCH: the kernel called with a copy of the arguments
// in every thread.
template <typename K, typename... A>
void launch(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t, K kernel,
            A... args) {
  auto body = [&] { kernel(args...); };
  void (*thread)(void *) = [](void *b) { (*(decltype(body) *)b)(); };
  run(name, grid, block, smem, thread, &body);
}

}  // namespace emu

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#define threadIdx (emu::thread_idx)
#define blockIdx (emu::block_idx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)
#define warpSize 32

// The kernel is named inside a generic lambda, so that its template arguments
// are deduced from the launch's arguments as <<<...>>> deduces them.
#define RT_LAUNCH(kernel, grid, block, smem, stream, ...)                           \
  emu::launch(#kernel, grid, block, smem, stream, [](auto... a) { kernel(a...); }, \
              __VA_ARGS__)
#define RT_DYNAMIC_SHARED(type, name) type *name = (type *)emu::dynamic_shared()

// The barriers know their call site from the default arguments.
#define EMU_AT const char *file = __builtin_FILE(), int line = __builtin_LINE()

inline void __syncthreads(EMU_AT) { emu::syncthreads(file, line); }

template <typename T>
T __shfl_sync(unsigned mask, T v, int lane, int width = warpSize, EMU_AT) {
  return emu::shuffle(emu::SHFL, mask, v, lane, width, file, line);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize, EMU_AT) {
  return emu::shuffle(emu::SHFL_UP, mask, v, (int)delta, width, file, line);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize, EMU_AT) {
  return emu::shuffle(emu::SHFL_DOWN, mask, v, (int)delta, width, file, line);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize, EMU_AT) {
  return emu::shuffle(emu::SHFL_XOR, mask, v, lane_mask, width, file, line);
}
inline unsigned __ballot_sync(unsigned mask, int p, EMU_AT) {
  return (unsigned)emu::warp_op(emu::BALLOT, mask, p != 0, 0, warpSize, file, line);
}
inline int __any_sync(unsigned mask, int p, EMU_AT) {
  return (int)emu::warp_op(emu::ANY, mask, p != 0, 0, warpSize, file, line);
}
inline int __all_sync(unsigned mask, int p, EMU_AT) {
  return (int)emu::warp_op(emu::ALL, mask, p != 0, 0, warpSize, file, line);
}

inline void __syncwarp(unsigned mask = 0xffffffffu, EMU_AT) {
  emu::warp_op(emu::SYNCWARP, mask, 0, 0, warpSize, file, line);
}

// ---- the tensor cores' PTX (runtime/mma_cuda.cuh): mma.sync m16n8k16 (bf16
// operands, float sums) and ldmatrix .x4, each a warp op of the whole warp
// (every lane there, at the same line), which reads the lanes' registers (or
// addresses) at once and gives each lane its share in the PTX ISA's layout.

namespace emu {
// d += a b (mma_16816's fragments); each product exact in float, summed over k in order
void mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2], EMU_AT);
// r <- four 8 x 8 matrices, lane l's p the address of row l % 8 of matrix l / 8:
// 16-byte aligned, in the dynamic shared memory (the kernels keep their tiles there)
void ldmatrix_x4(uint32_t r[4], const void *p, bool trans, EMU_AT);
// cp.async (mma_cuda.cuh): the running thread's copy of `bytes` (16, or 0: zeros) from src to
// dst, 16 bytes at dst, made at once or when a cp_async_wait lets it land (above)
void cp_async(void *dst, const void *src, int bytes, EMU_AT);
void cp_async_commit(void);
void cp_async_wait(int groups);
}  // namespace emu

// One OS thread runs every thread: an atomic is a plain read-modify-write.
template <typename T>
T atomicAdd(T *p, T v) {
  T old = *p;
  *p = old + v;
  return old;
}
template <typename T>
T atomicMin(T *p, T v) {
  T old = *p;
  *p = v < old ? v : old;
  return old;
}
template <typename T>
T atomicMax(T *p, T v) {
  T old = *p;
  *p = v > old ? v : old;
  return old;
}

#endif
