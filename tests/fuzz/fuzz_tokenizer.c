// Tokenizer files (DIR/tokenizer.bin, runtime/tokenizer.c): what parses has a
// piece for every id, and its encoding of a text decodes back to that text
// (the merges are checked to join their tokens' bytes); what fails says why.
#include "fuzz.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rt_tokenizer t;
  char err[512] = "";
  if (rt_tok_parse(&t, data, size, "fuzz.bin", err, sizeof err)) {
    if (!err[0])
      __builtin_trap(); // every failure says why
    return 0;
  }
  for (int id = 0; id < t.vocab; id++) {
    size_t len;
    if (!rt_tok_piece(&t, id, &len) || len == 0)
      __builtin_trap();
  }
  static const char text[] = "Hello, world! It's  2024\n\n\tok<|endoftext|>aaaa 'll x";
  int32_t ids[sizeof text];
  long n = rt_tok_encode(&t, text, ids, (long)sizeof text, err, sizeof err);
  if (n < 0 && !err[0])
    __builtin_trap();
  char back[sizeof text];
  size_t at = 0;
  for (long i = 0; i < n; i++) {
    size_t len;
    const char *p = rt_tok_piece(&t, ids[i], &len);
    if (!p || at + len >= sizeof back)
      __builtin_trap();
    memcpy(back + at, p, len);
    at += len;
  }
  if (n >= 0 && (at != sizeof text - 1 || memcmp(back, text, at)))
    __builtin_trap();
  rt_tok_free(&t);
  return 0;
}
