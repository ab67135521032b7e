// Bump allocator for IR objects: one arena per compilation, one free.
#ifndef MTC_IR_ARENA_H
#define MTC_IR_ARENA_H

#include <stddef.h>

typedef struct IrArenaBlock IrArenaBlock;

typedef struct IrArena {
  IrArenaBlock *head; // newest block first
  size_t bytes;       // total bytes handed out
} IrArena;

void *ir_alloc(IrArena *a, size_t n);        // zeroed, 16-byte aligned; aborts only on OOM
char *ir_strdup(IrArena *a, const char *s);
char *ir_strndup(IrArena *a, const char *s, size_t n);
void ir_arena_free(IrArena *a);

#endif
