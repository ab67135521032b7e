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
  long windows = (s.ntok - 1) / (need - 1);  // every one read inside the file
  for (long w = 0; w < windows && w < 4; w++) {
    rt_shard_window(&s, windows - 1 - w, need - 1, window);
    for (int j = 0; j < need; j++)
      if (window[j] < 0 || window[j] >= vocab)
        __builtin_trap();
  }
  return 0;
}
