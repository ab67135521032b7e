// Bump allocator for IR objects.
//
// Memory comes from a list of malloc'ed blocks (newest first). Each request
// is rounded up to 16 bytes and carved from the newest block; when it does
// not fit, a new block of at least BLOCK_SIZE bytes is started. Nothing is
// freed individually: ir_arena_free releases every block at once.
#include "arena.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN 16
#define BLOCK_SIZE (64 * 1024)

struct IrArenaBlock {
  IrArenaBlock *next;
  char *base;  // first 16-byte aligned byte after the header
  size_t cap;  // usable bytes from base
  size_t used; // bytes handed out from base
};

// Reports an allocation failure and stops; the only abort in this file.
static void out_of_memory(void) {
  fprintf(stderr, "mtc: out of memory\n");
  abort();
}

// Rounds n up to a multiple of ALIGN, treating overflow as out of memory.
static size_t align_up(size_t n) {
  if (n > SIZE_MAX - (ALIGN - 1))
    out_of_memory();
  return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

// Mallocs a block with at least cap usable, aligned bytes.
static IrArenaBlock *new_block(size_t cap) {
  size_t hdr = sizeof(IrArenaBlock) + ALIGN - 1;
  if (cap > SIZE_MAX - hdr)
    out_of_memory();
  IrArenaBlock *b = malloc(hdr + cap);
  if (!b)
    out_of_memory();
  uintptr_t p = (uintptr_t)(b + 1);
  p = (p + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1);
  b->next = NULL;
  b->base = (char *)p;
  b->cap = cap;
  b->used = 0;
  return b;
}

// Returns n zeroed bytes aligned to 16. A request of 0 bytes still gets a
// distinct pointer.
void *ir_alloc(IrArena *a, size_t n) {
  n = align_up(n ? n : 1);
  IrArenaBlock *b = a->head;

  if (!b || b->cap - b->used < n) {
    if (n > BLOCK_SIZE / 4 && b) {
      // A big request gets a block of its own, linked behind the current
      // one so that the room left there keeps serving small requests.
      IrArenaBlock *big = new_block(n);
      big->next = b->next;
      b->next = big;
      b = big;
    } else {
      b = new_block(n > BLOCK_SIZE ? n : BLOCK_SIZE);
      b->next = a->head;
      a->head = b;
    }
  }

  void *p = b->base + b->used;
  b->used += n;
  a->bytes += n;
  memset(p, 0, n);
  return p;
}

// Copies at most n chars of s (stopping at a NUL) into the arena.
char *ir_strndup(IrArena *a, const char *s, size_t n) {
  size_t len = 0;
  while (len < n && s[len])
    len++;
  char *p = ir_alloc(a, len + 1);
  memcpy(p, s, len);
  p[len] = '\0';
  return p;
}

// Copies the NUL-terminated string s into the arena.
char *ir_strdup(IrArena *a, const char *s) {
  return ir_strndup(a, s, strlen(s));
}

// Frees every block and leaves the arena empty and reusable.
void ir_arena_free(IrArena *a) {
  IrArenaBlock *b = a->head;
  while (b) {
    IrArenaBlock *next = b->next;
    free(b);
    b = next;
  }
  a->head = NULL;
  a->bytes = 0;
}
