// Runs a fuzz target without libFuzzer: over every file named, and every file
// in every folder named (one level), so that the seed corpus and every finding
// in tests/fuzz/corpus stay tested in ordinary builds (and under ASan + UBSan).
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot read %s\n", path);
    return 1;
  }
  size_t cap = 1 << 16, n = 0;
  uint8_t *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) {
      uint8_t *nb = realloc(buf, cap *= 2);
      if (!nb)
        free(buf);
      buf = nb;
    }
  }
  fclose(f);
  if (!buf)
    return 1;
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int files = 0, bad = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "no such file or folder: %s\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      bad += run_file(argv[i]), files++;
      continue;
    }
    DIR *dir = opendir(argv[i]);
    for (struct dirent *e; dir && (e = readdir(dir));) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
      if (e->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode))
        bad += run_file(path), files++;
    }
    if (dir)
      closedir(dir);
  }
  printf("%s: %d inputs\n", argv[0], files);
  return bad != 0 || files == 0;
}
