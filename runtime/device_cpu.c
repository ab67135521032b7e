// The CPU build's device: host memory. The arena is anonymous pages, zero
// until touched; the stage is the arena itself.
#define _DEFAULT_SOURCE  // mmap's MAP_ANONYMOUS, madvise, mincore under -std=c11
#include "device.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void fail(const char *what, long bytes) {
  fprintf(stderr, "train: error: cannot allocate %s of %ld bytes: %s\n", what, bytes,
          strerror(errno));
  exit(1);
}

void rt_device_init(void) {}

const char *rt_device_name(void) { return "cpu"; }

RtDeviceInfo rt_device_info(void) {
  RtDeviceInfo info = {0, sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE), 0,
                       sysconf(_SC_NPROCESSORS_ONLN)};
#ifdef _SC_LEVEL2_CACHE_SIZE
  info.cache_bytes = sysconf(_SC_LEVEL2_CACHE_SIZE) > 0 ? sysconf(_SC_LEVEL2_CACHE_SIZE) : 0;
#endif
  return info;
}

char *rt_device_alloc(long arena_bytes, long workspace_bytes) {
  (void)workspace_bytes;
  char *arena = mmap(NULL, (size_t)arena_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (arena == MAP_FAILED) fail("the arena", arena_bytes);
#ifdef MADV_HUGEPAGE
  // 2 MiB pages where the kernel has them: a GEMM's packing reads rows
  // far apart (one TLB entry per row with 4 KiB pages), and the first step
  // faults in the whole arena. Advice only: failure changes nothing.
  (void)madvise(arena, (size_t)arena_bytes, MADV_HUGEPAGE);
#endif
  return arena;
}

long rt_device_planned(long arena_bytes, long workspace_bytes) {
  (void)workspace_bytes;
  return arena_bytes;
}

void rt_device_free(char *arena, long arena_bytes) { munmap(arena, (size_t)arena_bytes); }

char *rt_device_stage(char *arena, long arena_bytes) {
  (void)arena_bytes;
  return arena;
}

void rt_device_free_stage(char *stage, char *arena, long arena_bytes) {
  (void)stage, (void)arena, (void)arena_bytes;
}

void rt_device_put(char *arena, const char *stage, long off, long bytes) {
  if (arena != stage) memcpy(arena + off, stage + off, (size_t)bytes);
}

void rt_device_get(char *stage, const char *arena, long off, long bytes) {
  if (arena != stage) memcpy(stage + off, arena + off, (size_t)bytes);
}

void rt_device_sync(void) {}

char *rt_device_host_alloc(long bytes) {
  size_t rounded = (size_t)(bytes + 63) / 64 * 64;
  char *p = aligned_alloc(64, rounded > 0 ? rounded : 64);
  if (!p) fail("the host region", bytes);
  memset(p, 0, rounded);
  return p;
}

void rt_device_host_free(char *p) { free(p); }

// The arena's pages resident in memory, by mincore().
long rt_device_measured(const char *arena, long arena_bytes) {
  long page = sysconf(_SC_PAGESIZE);
  long npages = (arena_bytes + page - 1) / page;
  unsigned char *vec = malloc((size_t)npages);
  if (!vec) return -1;
  if (mincore((void *)arena, (size_t)arena_bytes, vec) != 0) {
    free(vec);
    return -1;
  }
  long resident = 0;
  for (long i = 0; i < npages; i++) resident += vec[i] & 1;
  free(vec);
  resident *= page;
  return resident < arena_bytes ? resident : arena_bytes;
}

const char *rt_device_measure_how(void) { return "arena resident"; }

long rt_device_measured_since(void) { return -1; }
