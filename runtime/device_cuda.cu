// The CUDA build's device (device.h): one GPU per rank. The arena and the
// workspace are one cudaMalloc; the stage is host memory mapped on demand;
// the host region is pinned. Copies run on rt_cuda_stream, in order with the
// kernels.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cuda_common.h"
extern "C" {
#include "device.h"
}

static char name[320];
static RtDeviceInfo info;
// device memory free just before the arena's allocation (the context, the
// libraries and the communicators are up by then), and what the allocation took
static size_t free_before_alloc;
static long alloc_took;

static void fail_alloc(const char *what, long bytes, cudaError_t err) {
  fprintf(stderr, "train: error: cannot allocate %s of %ld bytes on the GPU: %s\n", what, bytes,
          cudaGetErrorString(err));
  exit(EXIT_FAILURE);
}

// The rank's place among the ranks of its node, from the launcher's
// environment (Open MPI's, or Slurm's), before MPI starts; 0 without one.
static int local_rank(void) {
  const char *s = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (!s) s = getenv("SLURM_LOCALID");
  if (!s) return 0;
  char *end;
  long r = strtol(s, &end, 10);  // atoi's overflow is undefined
  return *s == '\0' || *end != '\0' || r < 0 || r > INT_MAX ? 0 : (int)r;
}

extern "C" void rt_device_init(void) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    fprintf(stderr, "train: error: this program was built for a GPU (make gpu), and none can "
            "be used: %s; make cpu builds it for the CPU\n",
            err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device was found");
    exit(EXIT_FAILURE);
  }
  int dev = local_rank() % count;
  rt_cuda_init(dev);
  cudaDeviceProp prop;
  cudaCheck(cudaGetDeviceProperties(&prop, dev));
  snprintf(name, sizeof name, "%s (device %d)", prop.name, dev);
  info = RtDeviceInfo{1, (long)prop.totalGlobalMem, (long)prop.l2CacheSize,
                      (long)prop.multiProcessorCount};
}

extern "C" const char *rt_device_name(void) { return name; }

extern "C" RtDeviceInfo rt_device_info(void) { return info; }

// The workspace, 256-byte aligned, after the arena.
static long workspace_at(long arena_bytes) { return (arena_bytes + 255) / 256 * 256; }

extern "C" long rt_device_planned(long arena_bytes, long workspace_bytes) {
  return workspace_at(arena_bytes) + workspace_bytes;
}

extern "C" char *rt_device_alloc(long arena_bytes, long workspace_bytes) {
  long at = workspace_at(arena_bytes), bytes = rt_device_planned(arena_bytes, workspace_bytes);
  char *p = NULL;
  size_t total, free_after;
  cudaCheck(cudaMemGetInfo(&free_before_alloc, &total));
  cudaError_t err = cudaMalloc((void **)&p, (size_t)bytes);
  if (err != cudaSuccess) fail_alloc("the arena and workspace", bytes, err);
  cudaCheck(cudaMemGetInfo(&free_after, &total));
  alloc_took = (long)(free_before_alloc - free_after);
  cudaCheck(cudaMemset(p, 0, (size_t)arena_bytes));
  rt_cuda_set_workspace(p + at, (size_t)workspace_bytes);
  return p;
}

extern "C" void rt_device_free(char *arena, long arena_bytes) {
  (void)arena_bytes;
  cudaCheck(cudaFree(arena));
}

extern "C" char *rt_device_stage(char *arena, long arena_bytes) {
  (void)arena;
  void *s = mmap(NULL, (size_t)arena_bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (s == MAP_FAILED) {
    fprintf(stderr, "train: error: cannot map a host copy of the arena (%ld bytes)\n",
            arena_bytes);
    exit(EXIT_FAILURE);
  }
  return (char *)s;
}

extern "C" void rt_device_free_stage(char *stage, char *arena, long arena_bytes) {
  (void)arena;
  munmap(stage, (size_t)arena_bytes);
}

extern "C" void rt_device_put(char *arena, const char *stage, long off, long bytes) {
  if (bytes <= 0) return;
  // from pageable memory: the call returns once it has copied the bytes to a
  // staging buffer, so the host may rewrite the stage right after, and the
  // kernels queued before and after it need not be waited for
  cudaCheck(cudaMemcpyAsync(arena + off, stage + off, (size_t)bytes, cudaMemcpyHostToDevice,
                            rt_cuda_stream));
}

extern "C" void rt_device_get(char *stage, const char *arena, long off, long bytes) {
  if (bytes <= 0) return;
  cudaCheck(cudaMemcpyAsync(stage + off, arena + off, (size_t)bytes, cudaMemcpyDeviceToHost,
                            rt_cuda_stream));
  // the caller reads the stage next: the copy must be done, whatever CUDA
  // does for pageable memory
  cudaCheck(cudaStreamSynchronize(rt_cuda_stream));
}

extern "C" void rt_device_sync(void) { rt_cuda_sync(); }

extern "C" char *rt_device_host_alloc(long bytes) {
  char *p = NULL;
  cudaError_t err = cudaMallocHost((void **)&p, (size_t)(bytes > 0 ? bytes : 1));
  if (err != cudaSuccess) fail_alloc("the pinned host region", bytes, err);
  memset(p, 0, (size_t)bytes);
  return p;
}

extern "C" void rt_device_host_free(char *p) {
  if (p) cudaCheck(cudaFreeHost(p));
}

extern "C" long rt_device_measured(const char *arena, long arena_bytes) {
  (void)arena, (void)arena_bytes;
  return alloc_took;
}

extern "C" const char *rt_device_measure_how(void) {
  return "device memory the arena and workspace took (cudaMemGetInfo)";
}

extern "C" long rt_device_measured_since(void) {
  size_t free_now, total;
  cudaCheck(cudaMemGetInfo(&free_now, &total));
  return (long)(free_before_alloc - free_now);
}
