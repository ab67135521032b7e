// The CUDA emulation's own checks (cuda_emu.h): the warp shuffles and votes
// read what CUDA defines on a block of two warps; the tensor cores' mma.sync
// and ldmatrix, through runtime/mma_cuda.cuh's operand loads, multiply
// matrices as the PTX ISA lays them out; then each broken kernel
// below, run in a child process, must stop it with the report it names
// (AddressSanitizer's, in the sanitizer build, for a write past the dynamic
// shared memory), in each of the emulation's four orders of threads (one
// block each: the next block takes the next order). One line per check, then
// "N passed, M failed".
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_emu.h"
#include "mma_cuda.cuh"

static int npassed, nfailed;

static void verdict(bool ok, const char *what, const char *detail) {
  ok ? npassed++ : nfailed++;
  printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, detail[0] ? ": " : "", detail);
}

// ---- kernels that are right

// Each thread's results, 8 a thread: shuffles over the warp and within halves
// of 16 (width), and votes over the block's even lanes. Four blocks: each of
// the emulation's orders of threads.
__global__ void warp_ops(int *out) {
  int t = threadIdx.x, lane = t % 32, *o = out + 8 * (64 * blockIdx.x + t);
  o[0] = __shfl_sync(0xffffffffu, t, 3);           // lane 3 of the warp
  o[1] = __shfl_up_sync(0xffffffffu, t, 2);        // lane - 2, itself below 2
  o[2] = __shfl_down_sync(0xffffffffu, t, 5, 16);  // lane + 5 within its 16, else itself
  o[3] = __shfl_xor_sync(0xffffffffu, t, 9);       // lane ^ 9
  __syncthreads();
  if (lane % 2) return;  // the odd lanes take no part in the votes
  o[4] = (int)__ballot_sync(0x55555555u, lane % 4 == 0);
  o[5] = __any_sync(0x55555555u, t == 34);
  o[6] = __all_sync(0x55555555u, lane < 32);
  o[7] = __all_sync(0x55555555u, lane < 30);
}

static void test_warp_ops(void) {
  int *out;
  cudaMalloc((void **)&out, 4 * 64 * 8 * sizeof(int));
  memset(out, 0, 4 * 64 * 8 * sizeof(int));
  RT_LAUNCH(warp_ops, 4, 64, 0, 0, out);
  long bad = 0;
  for (int bt = 0; bt < 4 * 64; bt++) {
    int t = bt % 64, lane = t % 32, w = t - lane, *o = out + 8 * bt;
    int want[8] = {w + 3,
                   lane >= 2 ? t - 2 : t,
                   lane % 16 + 5 < 16 ? t + 5 : t,
                   w + (lane ^ 9),
                   0x11111111,
                   w == 32,
                   1,
                   0};
    for (int k = 0; k < (lane % 2 ? 4 : 8); k++) bad += o[k] != want[k];
  }
  char detail[64];
  snprintf(detail, sizeof detail, "%ld of %d results differ", bad, 4 * 64 * 6);
  verdict(bad == 0, "shuffles and votes", bad ? detail : "");
  cudaFree(out);
}

// One warp: a (16 x 16) times b and times b transposed (b 16 x 16), each as two
// mma tiles of 16 x 8, from bf16 tiles in shared memory (ld 24, as the
// attention pads its rows); out: the products' elements where each lane holds
// them, 2 x 16 x 16 floats.
__global__ void mma_products(const float *a, const float *b, float *out) {
  RT_DYNAMIC_SHARED(__nv_bfloat16, smem);
  const int ld = 24;
  __nv_bfloat16 *ta = smem, *tb = smem + 16 * ld;
  int l = threadIdx.x;
  for (int e = l; e < 256; e += 32) {
    ta[e / 16 * ld + e % 16] = __float2bfloat16_rn(a[e]);
    tb[e / 16 * ld + e % 16] = __float2bfloat16_rn(b[e]);
  }
  __syncwarp();
  uint32_t fa[4], fb[4], fbt[4];
  mma_a(fa, ta, ld, 0, 0);
  mma_b(fb, tb, ld, 0, 0);
  mma_bt(fbt, tb, ld, 0, 0);
  float d[2][2][4] = {};  // [a b, a b^T][columns 0.., 8..]
  for (int n = 0; n < 2; n++) {
    mma_16816(d[0][n], fa, fb + 2 * n);
    mma_16816(d[1][n], fa, fbt + 2 * n);
  }
  for (int p = 0; p < 2; p++)
    for (int n = 0; n < 2; n++)
      for (int e = 0; e < 4; e++)
        out[p * 256 + (l / 4 + 8 * (e / 2)) * 16 + 8 * n + 2 * (l % 4) + e % 2] = d[p][n][e];
}

static void test_mma(void) {
  float *a, *b, *out;
  cudaMalloc((void **)&a, 256 * sizeof(float));
  cudaMalloc((void **)&b, 256 * sizeof(float));
  cudaMalloc((void **)&out, 512 * sizeof(float));
  for (int e = 0; e < 256; e++) {  // small integers: every product and sum exact
    a[e] = (float)((e * 7) % 11 - 5);
    b[e] = (float)((e * 5) % 13 - 6);
  }
  long bad = 0;
  for (int order = 0; order < 4; order++) {  // a block in each order of threads
    memset(out, 0, 512 * sizeof(float));
    RT_LAUNCH(mma_products, 1, 32, 2 * 16 * 24 * sizeof(__nv_bfloat16), 0, a, b, out);
    for (int i = 0; i < 16; i++)
      for (int j = 0; j < 16; j++) {
        float ab = 0.0f, abt = 0.0f;
        for (int k = 0; k < 16; k++) {
          ab += a[i * 16 + k] * b[k * 16 + j];
          abt += a[i * 16 + k] * b[j * 16 + k];
        }
        bad += (out[i * 16 + j] != ab) + (out[256 + i * 16 + j] != abt);
      }
  }
  char detail[64];
  snprintf(detail, sizeof detail, "%ld of %d elements differ", bad, 4 * 512);
  verdict(bad == 0, "mma.sync and ldmatrix multiply", bad ? detail : "");
  cudaFree(a);
  cudaFree(b);
  cudaFree(out);
}

// ---- kernels that are wrong, and what the emulation must say

// (thread 200: one that no earlier launch here has run, which never waited)
__global__ void exit_before_barrier(float *) {
  if (threadIdx.x == 200) return;
  __syncthreads();
}

__global__ void two_barriers(float *) {
  if (threadIdx.x < 32)
    __syncthreads();
  else
    __syncthreads();
}

__global__ void shuffle_lane_exited(float *out) {
  if (threadIdx.x == 3) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

__global__ void shuffle_against_barrier(float *out) {
  if (threadIdx.x < 16)
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  else
    __syncthreads();
}

__global__ void shuffle_outside_mask(float *out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_down_sync(0x0000ffffu, 1.0f, 1, 32);
}

__global__ void past_shared(float *out) {
  RT_DYNAMIC_SHARED(float, smem);
  smem[threadIdx.x] = 1.0f;  // 64 floats in 128 bytes
  out[threadIdx.x] = smem[threadIdx.x];
}

__global__ void mma_half_warp(float *out) {
  uint32_t a[4] = {}, b[2] = {};
  float d[4] = {};
  if (threadIdx.x < 16) mma_16816(d, a, b);
  out[threadIdx.x] = d[0];
}

__global__ void ldmatrix_outside_shared(float *out) {
  uint32_t r[4];
  ldsm_x4(r, (const __nv_bfloat16 *)out + threadIdx.x % 8 * 8, false);  // device memory
}

__global__ void copies_not_waited(float *out) {
  RT_DYNAMIC_SHARED(float, smem);
  cp_async16(smem + 4 * threadIdx.x, out, true);  // 16 bytes of out, never waited for
  cp_async_commit();
}

// Runs `launch` in a child, which must fail with `expect` (and `expect2`) in
// what it prints.
static void expect_abort(const char *what, void (*launch)(float *), const char *expect,
                         const char *expect2 = "") {
  int fd[2];
  if (pipe(fd) != 0) exit(2);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 2);
    close(fd[0]);
    float *out;
    cudaMalloc((void **)&out, 64 * sizeof(float));
    launch(out);
    exit(0);  // not reported
  }
  close(fd[1]);
  char text[1024] = "";
  size_t len = 0;
  ssize_t got;
  while (len < sizeof text - 1 && (got = read(fd[0], text + len, sizeof text - 1 - len)) > 0)
    len += (size_t)got;
  text[len] = '\0';
  if (len && text[len - 1] == '\n') text[len - 1] = '\0';
  close(fd[0]);
  int status;
  waitpid(pid, &status, 0);
  bool ok = !(WIFEXITED(status) && WEXITSTATUS(status) == 0) && strstr(text, expect) &&
            strstr(text, expect2);
  verdict(ok, what, len ? text : "no report");
}

static void check_reports(void) {
  expect_abort(
      "a thread exits before a barrier",
      [](float *out) { RT_LAUNCH(exit_before_barrier, 2, 256, 0, 0, out); },
      "exit_before_barrier, block (0,0,0): divergent __syncthreads: thread (0,0,0) "
      "waits at __syncthreads at test_cuda_emu.cc:", ", thread (200,0,0) has exited");
  expect_abort(
      "two barriers", [](float *out) { RT_LAUNCH(two_barriers, 1, 64, 0, 0, out); },
      "divergent __syncthreads");
  expect_abort(
      "a lane of a shuffle exits",
      [](float *out) { RT_LAUNCH(shuffle_lane_exited, 1, 32, 0, 0, out); },
      "and lane 3 of its mask, thread (3,0,0), has exited: divergent warp op");
  expect_abort(
      "a shuffle against a barrier",
      [](float *out) { RT_LAUNCH(shuffle_against_barrier, 1, 32, 0, 0, out); },
      "waits at __syncthreads at test_cuda_emu.cc:");
  expect_abort(
      "a shuffle reads outside its mask",
      [](float *out) { RT_LAUNCH(shuffle_outside_mask, 1, 32, 0, 0, out); },
      "thread (15,0,0) waits at __shfl_down_sync(mask 0x0000ffff) at "
      "test_cuda_emu.cc:");
  expect_abort(
      "an mma.sync that half the warp skips",
      [](float *out) { RT_LAUNCH(mma_half_warp, 1, 32, 0, 0, out); },
      "waits at mma.sync(mask 0xffffffff) at mma_cuda.cuh:", "has exited: divergent warp op");
  expect_abort(
      "an ldmatrix of device memory",
      [](float *out) { RT_LAUNCH(ldmatrix_outside_shared, 1, 32, 256, 0, out); },
      "waits at ldmatrix(mask 0xffffffff) at mma_cuda.cuh:",
      "is not 16-byte aligned dynamic shared memory");
  expect_abort(
      "a thread exits with cp.async copies in flight",
      [](float *out) { RT_LAUNCH(copies_not_waited, 1, 4, 64, 0, out); },
      "exited with 1 cp.async copies it did not wait for");
  expect_abort(
      "a kernel writes past its shared memory",
      [](float *out) { RT_LAUNCH(past_shared, 1, 64, 128, 0, out); },
#if defined(__SANITIZE_ADDRESS__)
      "AddressSanitizer: use-after-poison");
#else
      "past_shared, block (0,0,0): wrote");
#endif
}

__global__ void nothing(float *) {}

int main(void) {
  test_warp_ops();
  test_mma();
  for (int order = 0; order < 4; order++) {
    printf("-- the next order of threads\n");
    RT_LAUNCH(nothing, 1, 1, 0, 0, (float *)NULL);  // the children's blocks take the next order
    check_reports();
  }
  printf("%d passed, %d failed\n", npassed, nfailed);
  return nfailed ? 1 : 0;
}
