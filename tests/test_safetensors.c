// Tests of the safetensors reader and writer (runtime/safetensors.c).
//
//   test_safetensors TMPDIR
//
// 1. Round trip: tensors of several dtypes and ranks (a scalar and an empty
//    tensor among them) written with metadata read back with the same names,
//    shapes and bytes; the file is replaced atomically (no temporary left).
// 2. int64 -> int32 conversion, and its range check.
// 3. Hand-made broken files: each fails with a message that names the
//    problem (the table below).
// 4. 2000 mutations of a valid file (flipped bytes, truncations) each either
//    read into tensors that lie inside the file or fail with a message; none
//    crashes (CI runs this under ASan and UBSan).
// 5. The target: a symlink, a FIFO or a folder is refused and left as it
//    was; a replaced file keeps its mode; stale temporaries of ended
//    processes are removed, no others; SIGTERM during a write (a handler
//    calling rt_st_abandon) leaves neither the file nor its temporary.
#define _GNU_SOURCE

#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "rng.h"
#include "safetensors.h"

static const char *tmpdir;

// TMPDIR/name, in one of 8 buffers used in turn (so a few can be held at once)
static const char *tmp_path(const char *name) {
  static char paths[8][4096];
  static int next;
  char *path = paths[next++ % 8];
  snprintf(path, sizeof paths[0], "%s/%s", tmpdir, name);
  return path;
}

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
    printf("cannot write %s\n", path);
    exit(1);
  }
}

static unsigned char *read_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc(*n + 1);
  if (fread(p, 1, *n, f) != *n) *n = 0;
  fclose(f);
  return p;
}

// Files in tmpdir named like a temporary of `name` (.NAME.mtc-tmp.*).
static int count_temps(const char *name) {
  char prefix[512];
  snprintf(prefix, sizeof prefix, ".%s.mtc-tmp.", name);
  DIR *d = opendir(tmpdir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += !strncmp(e->d_name, prefix, strlen(prefix));
  if (d) closedir(d);
  return n;
}

static void abandon_and_die(int sig) {
  rt_st_abandon();
  raise(sig);
}

// ---- 1, 2: round trip -------------------------------------------------------------------

static void test_round_trip(void) {
  float w[6] = {1, -2, 3.5f, 0, 1e-30f, -7};
  int64_t idx[4] = {0, 5, -3, 2147483647};
  float s = 42;
  double d[2] = {0.25, -1};
  rt_st_tensor in[] = {
      {.name = "h.0.w", .dtype = RT_ST_F32, .rank = 2, .shape = {2, 3}, .numel = 6, .data = w},
      {.name = "idx", .dtype = RT_ST_I64, .rank = 1, .shape = {4}, .numel = 4, .data = idx},
      {.name = "scalar", .dtype = RT_ST_F32, .rank = 0, .numel = 1, .data = &s},
      {.name = "empty", .dtype = RT_ST_F32, .rank = 2, .shape = {0, 3}, .numel = 0, .data = w},
      {.name = "d", .dtype = RT_ST_F64, .rank = 1, .shape = {2}, .numel = 2, .data = d},
  };
  int n = (int)(sizeof in / sizeof in[0]);
  const char *meta[] = {"model", "test", "content", "weights", NULL};
  char err[1024] = "";
  const char *path = tmp_path("round.safetensors");
  unlink(path);
  check(rt_st_write(path, in, n, meta, err, sizeof err) == 0, "write: %s", err);
  check(count_temps("round.safetensors") == 0, "a temporary file of round.safetensors is left");

  size_t size;
  unsigned char *raw = read_bytes(path, &size);
  check(raw && size >= 8 && raw[0] % 8 == 0, "the header is padded to 8 bytes");
  free(raw);

  rt_st_file f;
  if (!check(rt_st_read(&f, path, err, sizeof err) == 0, "read back: %s", err)) return;
  check(f.n == n, "read back %d tensors, wrote %d", f.n, n);
  for (int i = 0; i < n; i++) {
    const rt_st_tensor *t = rt_st_find(&f, in[i].name);
    if (!check(t != NULL, "tensor %s is missing", in[i].name)) continue;
    bool same = t->dtype == in[i].dtype && t->rank == in[i].rank && t->numel == in[i].numel;
    for (int k = 0; same && k < t->rank; k++) same = t->shape[k] == in[i].shape[k];
    check(same, "tensor %s: dtype, rank or shape differ", in[i].name);
    size_t bytes = (size_t)t->numel * rt_st_dtype_size(t->dtype);
    check(!memcmp(t->data, in[i].data, bytes), "tensor %s: the values differ", in[i].name);
  }
  check(rt_st_find(&f, "nope") == NULL, "rt_st_find finds a tensor that is not there");

  float back[6];
  rt_st_to_f32(rt_st_find(&f, "h.0.w"), back);
  check(!memcmp(back, w, sizeof w), "rt_st_to_f32 changes the values");
  int32_t i32[4];
  const rt_st_tensor *t = rt_st_find(&f, "idx");
  check(rt_st_to_i32(t, i32, err, sizeof err) == 0 && i32[1] == 5 && i32[2] == -3 &&
            i32[3] == 2147483647,
        "int64 -> int32: %s", err);
  rt_st_close(&f);

  int64_t big[2] = {1, 2147483648LL};
  rt_st_tensor over = {
      .name = "big", .dtype = RT_ST_I64, .rank = 1, .shape = {2}, .numel = 2, .data = big};
  check(rt_st_to_i32(&over, i32, err, sizeof err) != 0 && strstr(err, "element 1") &&
            strstr(err, "int32"),
        "int64 overflow: '%s'", err);

  rt_st_tensor dup[2] = {in[0], in[0]};
  check(rt_st_write(tmp_path("dup.safetensors"), dup, 2, NULL, err, sizeof err) != 0 &&
            strstr(err, "twice"),
        "writing a name twice: '%s'", err);
  check(rt_st_write("/nonexistent-dir/x.safetensors", in, 1, NULL, err, sizeof err) != 0 &&
            strstr(err, "cannot write"),
        "writing into a missing folder: '%s'", err);
}

// ---- 5: the target ----------------------------------------------------------------------

// A symlink, a folder and a FIFO are refused and left as they were; a file
// replaced keeps its permissions; stale temporaries of ended processes go,
// others stay; a kill during the write leaves neither the file nor a
// temporary.
static void test_target(void) {
  float w[2] = {1, 2};
  rt_st_tensor t = {.name = "w", .dtype = RT_ST_F32, .rank = 1, .shape = {2}, .numel = 2, .data = w};
  char err[1024] = "";
  const char *file = tmp_path("target.safetensors"), *link = tmp_path("link.safetensors");
  const char *fifo = tmp_path("fifo.safetensors"), *dir = tmp_path("dir.safetensors");
  unlink(file), unlink(link), unlink(fifo), rmdir(dir);
  check(rt_st_check_target(file, err, sizeof err) == 0, "an absent file as target: %s", err);
  check(rt_st_write(file, &t, 1, NULL, err, sizeof err) == 0, "write: %s", err);
  check(symlink(file, link) == 0 && mkfifo(fifo, 0644) == 0 && mkdir(dir, 0755) == 0,
        "cannot make a symlink, FIFO and folder in %s", tmpdir);
  struct {
    const char *path, *want;
  } refused[] = {{link, "is a symbolic link"}, {fifo, "is a FIFO"}, {dir, "is a folder"}};
  for (int i = 0; i < 3; i++) {
    check(rt_st_check_target(refused[i].path, err, sizeof err) != 0 &&
              strstr(err, refused[i].want) && strstr(err, refused[i].path),
          "check_target %s: '%s', expected '%s'", refused[i].path, err, refused[i].want);
    check(rt_st_write(refused[i].path, &t, 1, NULL, err, sizeof err) != 0 &&
              strstr(err, refused[i].want),
          "write %s: '%s', expected '%s'", refused[i].path, err, refused[i].want);
  }
  struct stat st;
  check(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the symlink was replaced");
  check(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO was replaced");
  check(rt_st_check_target("/nonexistent-dir/x", err, sizeof err) != 0 &&
            strstr(err, "cannot write into the folder /nonexistent-dir"),
        "check_target in a missing folder: '%s'", err);

  chmod(file, 0600);
  check(rt_st_write(file, &t, 1, NULL, err, sizeof err) == 0, "rewrite: %s", err);
  check(stat(file, &st) == 0 && (st.st_mode & 0777) == 0600, "the mode 0600 became %o",
        (unsigned)(st.st_mode & 0777));

  // a temporary of an ended process (a child, reaped), one of this process, one of another host
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, NULL, 0);
  char host[64], name[600];
  gethostname(host, sizeof host);
  host[sizeof host - 1] = '\0';
  long pids[2] = {(long)child, (long)getpid()};
  for (int i = 0; i < 2; i++) {
    snprintf(name, sizeof name, ".target.safetensors.mtc-tmp.%s.%ld", host, pids[i]);
    write_bytes(tmp_path(name), "x", 1);
  }
  write_bytes(tmp_path(".target.safetensors.mtc-tmp.otherhost.1"), "x", 1);
  char removed[1024];
  int n = rt_st_remove_stale(file, removed, sizeof removed, err, sizeof err);
  check(n == 1 && strstr(removed, name) == NULL, "remove_stale: %d removed (%s): %s", n, removed,
        err);
  check(count_temps("target.safetensors") == 2, "remove_stale left %d temporaries, expected 2",
        count_temps("target.safetensors"));
  unlink(tmp_path(name));
  unlink(tmp_path(".target.safetensors.mtc-tmp.otherhost.1"));

  // SIGTERM while a 128 MiB tensor (zero pages) is written: the child's handler abandons it
  const char *big_path = tmp_path("killed.safetensors");
  unlink(big_path);
  long big_n = 1L << 25;
  float *big = mmap(NULL, (size_t)big_n * 4, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (!check(big != MAP_FAILED, "cannot map 128 MiB")) return;
  child = fork();
  if (child == 0) {
    struct sigaction sa = {.sa_handler = abandon_and_die, .sa_flags = SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    rt_st_tensor b = {.name = "big", .dtype = RT_ST_F32, .rank = 1, .shape = {big_n},
                      .numel = big_n, .data = big};
    _exit(rt_st_write(big_path, &b, 1, NULL, err, sizeof err) == 0 ? 0 : 3);
  }
  for (int i = 0; i < 5000 && count_temps("killed.safetensors") == 0; i++) usleep(1000);
  kill(child, SIGTERM);
  int status = 0;
  waitpid(child, &status, 0);
  munmap(big, (size_t)big_n * 4);
  if (WIFEXITED(status)) {
    printf("kill during a write: skipped (the write finished first)\n");
    unlink(big_path);
    return;
  }
  check(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM, "the writer did not die of SIGTERM");
  check(access(big_path, F_OK) != 0, "a killed write left %s", big_path);
  check(count_temps("killed.safetensors") == 0, "a killed write left its temporary file");
}

// ---- 3: broken files ---------------------------------------------------------------------

// A file of the 8-byte length, `header` and `data_bytes` zero bytes; the
// length field says `hlen` (-1: the header's length).
static void write_file(const char *path, const char *header, long long hlen, size_t data_bytes) {
  size_t n = strlen(header);
  unsigned long long len = hlen < 0 ? n : (unsigned long long)hlen;
  unsigned char *buf = calloc(8 + n + data_bytes + 1, 1);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(len >> (8 * i));
  memcpy(buf + 8, header, n);
  write_bytes(path, buf, 8 + n + data_bytes);
  free(buf);
}

static void test_broken(void) {
  static const struct {
    const char *header;
    long long hlen;  // -1: the right one
    size_t data_bytes;
    const char *expect;  // a substring of the message
  } cases[] = {
      {"{}", 100, 0, "the file is shorter"},
      {"{}", 200LL << 20, 0, "header length"},
      {"{\"a\": ", -1, 0, "not valid JSON"},
      {"[1, 2]", -1, 0, "not a JSON object"},
      {"{} x", -1, 0, "text after the JSON header"},
      {"{\"a\": 1}", -1, 0, "not a JSON object"},
      {"{\"a\": {\"dtype\": \"F33\", \"shape\": [1], \"data_offsets\": [0, 4]}}", -1, 4,
       "unknown dtype 'F33'"},
      {"{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", -1, 4, "no \"dtype\""},
      {"{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", -1, 4, "no \"shape\""},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", -1, 4,
       "shape[0]"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", -1, 4,
       "shape[0]"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}",
       -1, 4, "rank 9"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}", -1, 4,
       "data_offsets"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", -1, 4,
       "data_offsets"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", -1, 4, "needs 8"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", -1, 4,
       "run past the end"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
       "\"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [2, 6]}}",
       -1, 8, "overlaps"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", -1, 8, "a hole"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", -1, 12,
       "cover 4 bytes"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
       "\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
       -1, 8, "appears twice"},
      {"{\"__metadata__\": {\"k\": 1}}", -1, 0, "__metadata__"},
      {"{\"__metadata__\": [1]}", -1, 0, "__metadata__"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], \"x\": 1}}", -1, 4,
       "unknown field 'x'"},
  };
  char err[1024];
  rt_st_file f;
  const char *path = tmp_path("broken.safetensors");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_file(path, cases[i].header, cases[i].hlen, cases[i].data_bytes);
    err[0] = '\0';
    int rc = rt_st_read(&f, path, err, sizeof err);
    check(rc != 0 && strstr(err, cases[i].expect) && strstr(err, path),
          "broken file %zu (%s): expected an error with '%s', got rc %d '%s'", i, cases[i].header,
          cases[i].expect, rc, err);
    if (rc == 0) rt_st_close(&f);
  }
  write_bytes(path, "abc", 3);
  check(rt_st_read(&f, path, err, sizeof err) != 0 && strstr(err, "8-byte"), "a 3-byte file: '%s'",
        err);
  check(rt_st_read(&f, tmp_path("missing.safetensors"), err, sizeof err) != 0 &&
            strstr(err, "cannot open"),
        "a missing file: '%s'", err);

  // accepted: an empty file list, metadata only, a padded header
  write_file(path, "{\"__metadata__\": {\"k\": \"v\"}}    ", -1, 0);
  check(rt_st_read(&f, path, err, sizeof err) == 0 && f.n == 0, "metadata only: %s", err);
  rt_st_close(&f);
}

// ---- 4: mutations ------------------------------------------------------------------------

static void test_mutations(void) {
  float w[12];
  for (int i = 0; i < 12; i++) w[i] = (float)i;
  int32_t ids[3] = {1, 2, 3};
  rt_st_tensor in[] = {
      {.name = "w", .dtype = RT_ST_F32, .rank = 2, .shape = {3, 4}, .numel = 12, .data = w},
      {.name = "ids", .dtype = RT_ST_I32, .rank = 1, .shape = {3}, .numel = 3, .data = ids},
  };
  const char *meta[] = {"model", "mutations", NULL};
  char err[1024];
  const char *good = tmp_path("good.safetensors"), *path = tmp_path("mutant.safetensors");
  if (!check(rt_st_write(good, in, 2, meta, err, sizeof err) == 0, "write: %s", err)) return;
  size_t n;
  unsigned char *orig = read_bytes(good, &n);
  unsigned char *buf = malloc(n);
  rt_rng r;
  rt_rng_seed(&r, 7);
  int accepted = 0;
  for (int m = 0; m < 2000; m++) {
    memcpy(buf, orig, n);
    size_t len = n;
    int kind = (int)rt_rng_below(&r, 3);
    if (kind == 0) {  // a few random bytes anywhere
      for (int k = 0, flips = 1 + (int)rt_rng_below(&r, 4); k < flips; k++)
        buf[rt_rng_below(&r, n)] = (unsigned char)rt_rng_below(&r, 256);
    } else if (kind == 1) {  // one byte of the header changed to a JSON-ish character
      static const char chars[] = "{}[]\":,0123456789-. eE";
      buf[8 + rt_rng_below(&r, n - 8)] = (unsigned char)chars[rt_rng_below(&r, sizeof chars - 1)];
    } else {  // truncated
      len = (size_t)rt_rng_below(&r, n);
    }
    write_bytes(path, buf, len);
    rt_st_file f;
    err[0] = '\0';
    if (rt_st_read(&f, path, err, sizeof err) != 0) {
      check(err[0] != '\0', "mutation %d: failed without a message", m);
      continue;
    }
    accepted++;
    for (int i = 0; i < f.n; i++) {
      const rt_st_tensor *t = &f.tensors[i];
      const unsigned char *p = t->data, *base = f.map;
      size_t bytes = (size_t)t->numel * rt_st_dtype_size(t->dtype);
      check(p >= base && p + bytes <= base + f.map_bytes,
            "mutation %d: tensor '%s' lies outside the file", m, t->name);
    }
    rt_st_close(&f);
  }
  printf("mutations: 2000, %d accepted (the others failed with a message)\n", accepted);
  free(buf);
  free(orig);
}

int main(int argc, char **argv) {
  tmpdir = argc > 1 ? argv[1] : "/tmp";
  test_round_trip();
  test_broken();
  test_mutations();
  test_target();
  printf("safetensors: %d checks passed, %d failed\n", npass, nfail);
  return nfail ? 1 : 0;
}
