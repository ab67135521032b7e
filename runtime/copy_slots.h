// The slots of the copies between device and host memory started with one (kernels.def's
// to_host and to_device): each build's copy_start takes a slot's entry here, its copy_wait gives
// it back. Host code over a table that grows as slots are met (the compiler numbers them from
// 0, passes/copies.c); a slot started twice or waited for without a start is an internal error.
// The CPU build (kernels_cpu.c) keeps the copy itself in an entry and makes it at the wait; the
// CUDA build (kernels_cuda.cu) keeps the event its copy stream records.
#ifndef MTC_RT_COPY_SLOTS_H
#define MTC_RT_COPY_SLOTS_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rt_copy_slot {
  void *dst;         // (CPU build) the copy, made at the wait
  const void *src;
  size_t bytes;
  void *event;       // (CUDA build) its copy stream's event, made once and kept
  bool pending;      // started, not yet waited for
} rt_copy_slot;

typedef struct rt_copy_slots {
  rt_copy_slot *slot;
  int n;
} rt_copy_slots;

static inline void rt_copy_slot_fail(const char *what, int slot) {
  fflush(stdout);
  fprintf(stderr, "train: error: internal: %s copy slot %d\n", what, slot);
  exit(1);
}

// Slot `slot`'s entry for a copy that starts now (pending from here on).
static inline rt_copy_slot *rt_copy_slot_start(rt_copy_slots *t, int slot) {
  if (slot >= t->n) {
    int n = slot + 1 > 2 * t->n ? slot + 1 : 2 * t->n;
    rt_copy_slot *grown = (rt_copy_slot *)realloc(t->slot, (size_t)n * sizeof *grown);
    if (!grown) rt_copy_slot_fail("out of memory for", slot);
    memset(grown + t->n, 0, (size_t)(n - t->n) * sizeof *grown);
    t->slot = grown, t->n = n;
  }
  rt_copy_slot *c = &t->slot[slot];
  if (c->pending) rt_copy_slot_fail("a copy started again before its wait on", slot);
  c->pending = true;
  return c;
}

// Slot `slot`'s entry for its wait (no longer pending).
static inline rt_copy_slot *rt_copy_slot_wait(rt_copy_slots *t, int slot) {
  if (slot < 0 || slot >= t->n || !t->slot[slot].pending)
    rt_copy_slot_fail("a wait for no copy started on", slot);
  t->slot[slot].pending = false;
  return &t->slot[slot];
}

static inline int rt_copy_slots_pending(const rt_copy_slots *t) {
  int n = 0;
  for (int i = 0; i < t->n; i++) n += t->slot[i].pending;
  return n;
}

#endif
