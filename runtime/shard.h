// llm.c's token shards (train --data): a 256 x int32 header (magic 20240520,
// version 1, the token count), then that many little-endian uint16 tokens.
// Header-only, so the program and the fuzz target (tests/fuzz) read shards with
// the same code.
#ifndef MTC_RT_SHARD_H
#define MTC_RT_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define RT_SHARD_MAGIC 20240520
#define RT_SHARD_VERSION 1
#define RT_SHARD_HEADER_BYTES (256 * 4)

typedef struct rt_shard {
  const uint8_t *map;   // the whole file
  size_t map_bytes;
  const uint8_t *toks;  // little-endian uint16 tokens
  long ntok;
} rt_shard;

static inline int32_t rt_shard_le32(const uint8_t *p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                   (uint32_t)p[3] << 24);
}

static inline long rt_shard_token(const rt_shard *s, long i) {
  return (long)s->toks[2 * i] | (long)s->toks[2 * i + 1] << 8;
}

// Checks the bytes of a shard (its header against its size, at least need tokens, each below
// vocab) and fills s; 0, or -1 with a message (naming path) in err.
static inline int rt_shard_parse(rt_shard *s, const uint8_t *map, size_t bytes, long need,
                                 long vocab, const char *path, char *err, size_t cap) {
  if (bytes < RT_SHARD_HEADER_BYTES) {
    snprintf(err, cap, "%s is not a token shard: %zu bytes, less than the %d-byte header", path,
             bytes, RT_SHARD_HEADER_BYTES);
    return -1;
  }
  int32_t magic = rt_shard_le32(map), version = rt_shard_le32(map + 4);
  int32_t ntok = rt_shard_le32(map + 8);
  if (magic != RT_SHARD_MAGIC) {
    snprintf(err, cap, "%s is not a token shard: magic number %d, expected %d", path, magic,
             RT_SHARD_MAGIC);
    return -1;
  }
  if (version != RT_SHARD_VERSION) {
    snprintf(err, cap, "%s: unsupported token shard version %d, expected %d", path, version,
             RT_SHARD_VERSION);
    return -1;
  }
  if (ntok < 0 || (size_t)RT_SHARD_HEADER_BYTES + 2 * (size_t)ntok != bytes) {
    snprintf(err, cap, "%s: the header says %d tokens (%lld bytes), but the file has %zu bytes "
             "after the header", path, ntok, 2LL * ntok, bytes - RT_SHARD_HEADER_BYTES);
    return -1;
  }
  *s = (rt_shard){.map = map, .map_bytes = bytes, .toks = map + RT_SHARD_HEADER_BYTES,
                  .ntok = ntok};
  if (s->ntok < need) {
    snprintf(err, cap, "%s has %ld tokens, one step needs %ld", path, s->ntok, need);
    return -1;
  }
  long first = -1, most = 0;  // the first token past the vocabulary, the largest token
  for (long i = 0; i < s->ntok; i++) {
    long t = rt_shard_token(s, i);
    if (t >= vocab && first < 0) first = i;
    if (t > most) most = t;
  }
  if (first >= 0) {
    snprintf(err, cap, "%s: token %ld at position %ld is out of range for the model's "
             "vocabulary of %ld (tokens 0 to %ld); the file's largest token is %ld: compile the "
             "model with a vocabulary of at least %ld (e.g. mtc compile ... -D V=%ld), or "
             "tokenize the data for this one", path, rt_shard_token(s, first), first, vocab,
             vocab - 1, most, most + 1, most + 1);
    return -1;
  }
  return 0;
}

// Window w of n + 1 tokens into stream: tokens [w n, w n + n], for w below
// (ntok - 1) / n, the shard's count of windows (runtime/data.c).
static inline void rt_shard_window(const rt_shard *s, long w, long n, int32_t *stream) {
  for (long j = 0; j <= n; j++) stream[j] = (int32_t)rt_shard_token(s, w * n + j);
}

#endif
