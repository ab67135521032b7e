// llm.c token shards (train --data): what parses has every token below the
// vocabulary, and windows read inside the file.
#include "fuzz.h"
#include "shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rt_shard s;
  char err[512] = "";
  long need = 9, vocab = 50257;
  if (rt_shard_parse(&s, data, size, need, vocab, "fuzz.bin", err, sizeof err)) {
    if (!err[0])
      __builtin_trap(); // every failure says why
    return 0;
  }
  int32_t window[9];
  for (int step = 0; step < 4; step++) {
    rt_shard_next(&s, need - 1, window);
    for (int j = 0; j < need; j++)
      if (window[j] < 0 || window[j] >= vocab)
        __builtin_trap();
  }
  return 0;
}
