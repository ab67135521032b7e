// The token data a program trains and validates on (train --data, --val-data):
// llm.c token shards (shard.h) named by a file, a glob ("data/*train*.bin") or
// a folder (its *train*.bin files for --data, *val*.bin for --val-data, as
// llm.c's and tools/prep_text.py's data folders are named), read as windows of
// n + 1 tokens: the global batch's n tokens and the one after the last.
//
// A shard of ntok tokens has (ntok - 1) / n windows, window w starting at
// token w * n. With shuffling (llm.c's), each epoch visits the shards in an
// order drawn from the seed and the epoch, and each shard's windows in an
// order drawn from the seed, the epoch and the shard; without it, in order.
// The position (epoch, shard, window) says everything that comes next, so a
// run that resumes there reads what the uninterrupted run would have.
#ifndef MTC_RT_DATA_H
#define MTC_RT_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shard.h"

typedef struct rt_data_pos {
  long epoch;   // 0-based
  long shard;   // index into this epoch's shard order
  long window;  // index into that shard's window order
} rt_data_pos;

typedef struct rt_data {
  int nshards;
  rt_shard *shards;   // mapped read-only
  char **paths;
  long n;             // tokens per window, less one
  bool shuffle;
  uint64_t seed;
  rt_data_pos pos;
  long *order;        // this epoch's shard order
  long *windows;      // the current shard's window order
  long nwindows;      // ... and its length
  long total;         // windows in all shards
} rt_data;

// Opens the shards `spec` names for windows of n + 1 tokens below vocab; flag
// ("--data") and a folder's file pattern ("*train*.bin") are for messages and
// folders. 0, or non-zero with a message in err (a file that is not a shard,
// one too short for a window, a glob or folder with no shard).
int rt_data_open(rt_data *d, const char *flag, const char *spec, const char *pattern, long n,
                 long vocab, bool shuffle, uint64_t seed, char *err, size_t cap);

// The next window into stream (n + 1 tokens), moving on to the next shard and
// epoch at the ends.
void rt_data_next(rt_data *d, int32_t *stream);

// Back to the first window of the first epoch (validation starts there each time).
void rt_data_rewind(rt_data *d);

// Continue from pos (a checkpoint's); non-zero when pos is not within the data.
int rt_data_seek(rt_data *d, rt_data_pos pos);

void rt_data_close(rt_data *d);

// All tokens of one shard (a prompt: tools/prep_text.py encode writes one) into
// a new array *out of *count; 0, or non-zero with a message naming the file.
int rt_data_read_tokens(const char *flag, const char *path, long vocab, int32_t **out,
                        long *count, char *err, size_t cap);

#endif
