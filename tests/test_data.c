// The data loader (runtime/data.c): shards by file, glob and folder; every
// window once per epoch, in order or shuffled (another order each epoch, the
// same for the same seed); seek to a position reads what the run would have;
// errors name the file.
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "data.h"

#define CHECK(c) check((c), "%s:%d: %s", __FILE__, __LINE__, #c)

static char dir[256];

// A shard of ntok tokens, token i of shard k being (k * 1000 + i) % 60000.
static void write_shard(const char *name, int k, long ntok) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  CHECK(f);
  int32_t header[256] = {20240520, 1, (int32_t)ntok};
  fwrite(header, sizeof header, 1, f);
  for (long i = 0; i < ntok; i++) {
    uint16_t t = (uint16_t)((k * 1000 + i) % 60000);
    fwrite(&t, 2, 1, f);
  }
  fclose(f);
}

// The window's identity: its first token (unique over the shards above).
static long next_id(rt_data *d, int32_t *stream) {
  rt_data_next(d, stream);
  for (long j = 1; j <= d->n; j++) CHECK(stream[j] == stream[0] + j);  // consecutive tokens
  return stream[0];
}

static void open_ok(rt_data *d, const char *spec, const char *pattern, long n, bool shuffle,
                    uint64_t seed) {
  char err[1024] = "";
  int rc = rt_data_open(d, "--data", spec, pattern, n, 65536, shuffle, seed, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  CHECK(rc == 0);
}

static void open_fails(const char *spec, const char *pattern, long n, long vocab, const char *want) {
  rt_data d;
  char err[1024] = "";
  CHECK(rt_data_open(&d, "--data", spec, pattern, n, vocab, true, 1, err, sizeof err) != 0);
  if (!strstr(err, want)) fprintf(stderr, "message '%s' lacks '%s'\n", err, want);
  CHECK(strstr(err, want) != NULL);
}

// One epoch's window ids, sorted, against every window of the shards.
static int cmp_long(const void *a, const void *b) {
  long x = *(const long *)a, y = *(const long *)b;
  return (x > y) - (x < y);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/mtc_test_data.%d", (int)getpid());
  CHECK(mkdir(dir, 0700) == 0);
  // shard k has (ntok - 1) / n windows of n + 1 tokens: n = 10
  write_shard("a_train_000.bin", 0, 51);   // 5 windows
  write_shard("a_train_001.bin", 1, 31);   // 3
  write_shard("a_train_002.bin", 2, 100);  // 9
  write_shard("a_val_000.bin", 3, 21);     // 2
  long n = 10, total = 17;
  int32_t stream[11];

  // a folder: its *train*.bin files, in name order; no shuffle: in order
  rt_data d;
  open_ok(&d, dir, "*train*.bin", n, false, 0);
  CHECK(d.nshards == 3 && d.total == total);
  long want_in_order[17], k = 0;
  for (long w = 0; w < 5; w++) want_in_order[k++] = 0 + w * n;
  for (long w = 0; w < 3; w++) want_in_order[k++] = 1000 + w * n;
  for (long w = 0; w < 9; w++) want_in_order[k++] = 2000 + w * n;
  for (int epoch = 0; epoch < 2; epoch++)
    for (long i = 0; i < total; i++) CHECK(next_id(&d, stream) == want_in_order[i]);
  CHECK(d.pos.epoch == 2 && d.pos.shard == 0 && d.pos.window == 0);
  rt_data_close(&d);

  // shuffled: each epoch every window once, in another order per epoch;
  // the same seed the same orders, another seed others
  long epochs[3][17];
  open_ok(&d, dir, "*train*.bin", n, true, 7);
  for (int e = 0; e < 3; e++)
    for (long i = 0; i < total; i++) epochs[e][i] = next_id(&d, stream);
  rt_data_close(&d);
  for (int e = 0; e < 3; e++) {
    long sorted[17];
    memcpy(sorted, epochs[e], sizeof sorted);
    qsort(sorted, 17, sizeof *sorted, cmp_long);
    CHECK(memcmp(sorted, want_in_order, sizeof sorted) == 0);
  }
  CHECK(memcmp(epochs[0], epochs[1], sizeof epochs[0]) != 0);
  CHECK(memcmp(epochs[0], want_in_order, sizeof epochs[0]) != 0);
  rt_data e2;
  open_ok(&e2, dir, "*train*.bin", n, true, 7);
  for (long i = 0; i < total; i++) CHECK(next_id(&e2, stream) == epochs[0][i]);
  // seek: from any position, what the run read there
  for (long at = 0; at < 2 * total; at += 5) {
    rt_data r;
    open_ok(&r, dir, "*train*.bin", n, true, 7);
    for (long i = 0; i < at; i++) rt_data_next(&r, stream);
    rt_data_pos pos = r.pos;
    rt_data_close(&r);
    open_ok(&r, dir, "*train*.bin", n, true, 7);
    CHECK(rt_data_seek(&r, pos) == 0);
    for (long i = at; i < at + 10; i++) CHECK(next_id(&r, stream) == epochs[i / total][i % total]);
    rt_data_close(&r);
  }
  CHECK(rt_data_seek(&e2, (rt_data_pos){0, 3, 0}) != 0);   // no shard 3
  CHECK(rt_data_seek(&e2, (rt_data_pos){0, 0, 99}) != 0);  // no window 99
  rt_data_close(&e2);
  rt_data other;
  open_ok(&other, dir, "*train*.bin", n, true, 8);
  long differ = 0;
  for (long i = 0; i < total; i++) differ += next_id(&other, stream) != epochs[0][i];
  CHECK(differ > 0);
  rt_data_close(&other);

  // a glob, a file, a folder's other pattern; rewind
  char spec[512];
  snprintf(spec, sizeof spec, "%s/a_train_00[12].bin", dir);
  open_ok(&d, spec, "*train*.bin", n, false, 0);
  CHECK(d.nshards == 2 && d.total == 12 && next_id(&d, stream) == 1000);
  rt_data_close(&d);
  snprintf(spec, sizeof spec, "%s/a_val_000.bin", dir);
  open_ok(&d, spec, "*train*.bin", n, false, 0);
  CHECK(d.nshards == 1 && d.total == 2);
  CHECK(next_id(&d, stream) == 3000 && next_id(&d, stream) == 3010);
  rt_data_rewind(&d);
  CHECK(next_id(&d, stream) == 3000);
  rt_data_close(&d);
  open_ok(&d, dir, "*val*.bin", n, false, 0);
  CHECK(d.nshards == 1 && d.total == 2);
  rt_data_close(&d);

  // errors name the file or pattern and the problem
  snprintf(spec, sizeof spec, "%s/nothing_*.bin", dir);
  open_fails(spec, "*train*.bin", n, 65536, "matches no file");
  open_fails(dir, "*test*.bin", n, 65536, "the folder has no *test*.bin files");
  snprintf(spec, sizeof spec, "%s/missing.bin", dir);
  open_fails(spec, "*train*.bin", n, 65536, "missing.bin: No such file");
  open_fails(dir, "*train*.bin", 40, 65536, "a_train_001.bin has 31 tokens, one step needs 41");
  open_fails(dir, "*train*.bin", n, 1500, "a_train_002.bin: token 2000 at position 0 is out of range");
  write_shard("b_train_bad.bin", 4, 10);
  snprintf(spec, sizeof spec, "%s/b_train_bad.bin", dir);
  FILE *f = fopen(spec, "r+b");
  CHECK(f && fseek(f, 0, SEEK_SET) == 0);
  int32_t bad = 12345;
  fwrite(&bad, 4, 1, f);
  fclose(f);
  open_fails(dir, "*train*.bin", n, 65536, "b_train_bad.bin is not a token shard: magic number");

  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail ? 1 : 0;
}
