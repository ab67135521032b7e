// Shared by the fuzz targets (tests/fuzz/fuzz_*.c). Each target defines
// LLVMFuzzerTestOneInput: one input, never a crash, a hang, a leak or a
// sanitizer report, whatever the bytes. Under libFuzzer (cmake -DMTC_FUZZ=ON,
// clang) it is the fuzzer's entry; otherwise driver.c runs it over files.
#ifndef MTC_FUZZ_H
#define MTC_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// data as a NUL-terminated string (malloc'd).
static inline char *fuzz_text(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (s) {
    memcpy(s, data, size);
    s[size] = '\0';
  }
  return s;
}

// data written to this process's scratch file with the given suffix (loaders that take a path
// look at it); the path, or NULL when it cannot be written.
static inline const char *fuzz_file(const uint8_t *data, size_t size, const char *suffix) {
  static char path[256];
  const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(path, sizeof path, "%s/mtc-fuzz-%ld%s", dir, (long)getpid(), suffix);
  FILE *f = fopen(path, "wb");
  if (!f)
    return NULL;
  size_t n = fwrite(data, 1, size, f);
  return fclose(f) == 0 && n == size ? path : NULL;
}

#endif
