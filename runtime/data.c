// The token data of a run: shards by file, glob or folder; windows in order
// or shuffled per epoch (data.h).
#define _DEFAULT_SOURCE  // DT_ (readdir) on glibc
#include "data.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rng.h"
#include "safetensors.h"  // rt_st_open_regular

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int add_path(rt_data *d, const char *path) {
  char **p = realloc(d->paths, (size_t)(d->nshards + 1) * sizeof *p);
  if (!p) return -1;
  d->paths = p;
  if (!(p[d->nshards] = strdup(path))) return -1;
  d->nshards++;
  return 0;
}

// The files spec names into d->paths, sorted: a folder's entries matching
// pattern, a glob's matches, or the one file.
static int find_files(rt_data *d, const char *flag, const char *spec, const char *pattern,
                      char *err, size_t cap) {
  struct stat st;
  if (strpbrk(spec, "*?[")) {
    glob_t g;
    int rc = glob(spec, GLOB_ERR, NULL, &g);
    if (rc == GLOB_NOMATCH) {
      snprintf(err, cap, "%s %s: the pattern matches no file", flag, spec);
      return -1;
    }
    if (rc) {
      snprintf(err, cap, "%s %s: cannot read the folders of the pattern", flag, spec);
      return -1;
    }
    for (size_t i = 0; i < g.gl_pathc; i++)
      if (add_path(d, g.gl_pathv[i])) {
        globfree(&g);
        snprintf(err, cap, "out of memory");
        return -1;
      }
    globfree(&g);  // glob sorts its matches
    return 0;
  }
  if (stat(spec, &st) != 0) {
    snprintf(err, cap, "%s %s: %s", flag, spec, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) return add_path(d, spec) ? (snprintf(err, cap, "out of memory"), -1) : 0;
  DIR *dir = opendir(spec);
  if (!dir) {
    snprintf(err, cap, "%s %s: cannot read the folder: %s", flag, spec, strerror(errno));
    return -1;
  }
  struct dirent *e;
  char path[4096];
  while ((e = readdir(dir))) {
    if (fnmatch(pattern, e->d_name, 0) != 0) continue;
    snprintf(path, sizeof path, "%s/%s", spec, e->d_name);
    if (add_path(d, path)) {
      closedir(dir);
      snprintf(err, cap, "out of memory");
      return -1;
    }
  }
  closedir(dir);
  if (d->nshards == 0) {
    snprintf(err, cap, "%s %s: the folder has no %s files (token shards); name the files, or "
             "a glob of them", flag, spec, pattern);
    return -1;
  }
  qsort(d->paths, (size_t)d->nshards, sizeof *d->paths, cmp_str);
  return 0;
}

static int map_shard(rt_shard *s, const char *flag, const char *path, long need, long vocab,
                     char *err, size_t cap) {
  struct stat st;
  char why[1024];
  int fd = rt_st_open_regular(path, &st, why, sizeof why);  // a FIFO or folder: refused
  if (fd < 0) {
    snprintf(err, cap, "%s: %s", flag, why);
    return -1;
  }
  size_t size = (size_t)st.st_size;
  void *m = size > 0 ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
  close(fd);
  if (m == MAP_FAILED) {
    snprintf(err, cap, "%s: cannot map %s: %s", flag, path, strerror(errno));
    return -1;
  }
  if (rt_shard_parse(s, m, size, need, vocab, path, err, cap)) {
    if (m) munmap(m, size);
    return -1;
  }
  return 0;
}

// A permutation of [0, n) into out: the identity, or drawn from (seed, a, b).
static void permutation(long *out, long n, bool shuffle, uint64_t seed, uint64_t a, uint64_t b) {
  for (long i = 0; i < n; i++) out[i] = i;
  if (!shuffle) return;
  rt_rng r;
  rt_rng_seed(&r, seed ^ (a + 1) * 0xD1B54A32D192ED03ull ^ (b + 1) * 0x8CB92BA72F3D8DD7ull);
  for (long i = n - 1; i > 0; i--) {  // Fisher-Yates
    long j = (long)rt_rng_below(&r, (uint64_t)i + 1);
    long t = out[i];
    out[i] = out[j];
    out[j] = t;
  }
}

static long windows_of(const rt_data *d, long s) { return (d->shards[s].ntok - 1) / d->n; }

// The shard order of pos.epoch and the window order of its shard pos.shard
// (d->windows holds as many as the largest shard has).
static void arrange(rt_data *d) {
  permutation(d->order, d->nshards, d->shuffle, d->seed, (uint64_t)d->pos.epoch, UINT64_MAX);
  long s = d->order[d->pos.shard];
  d->nwindows = windows_of(d, s);
  permutation(d->windows, d->nwindows, d->shuffle, d->seed, (uint64_t)d->pos.epoch, (uint64_t)s);
}

int rt_data_open(rt_data *d, const char *flag, const char *spec, const char *pattern, long n,
                 long vocab, bool shuffle, uint64_t seed, char *err, size_t cap) {
  *d = (rt_data){.n = n, .shuffle = shuffle, .seed = seed};
  if (n < 1) {
    snprintf(err, cap, "%s: the model has no token inputs", flag);
    return -1;
  }
  if (find_files(d, flag, spec, pattern, err, cap)) goto fail;
  if (!(d->shards = calloc((size_t)d->nshards, sizeof *d->shards)) ||
      !(d->order = malloc((size_t)d->nshards * sizeof *d->order))) {
    snprintf(err, cap, "out of memory");
    goto fail;
  }
  long most = 0;
  for (int i = 0; i < d->nshards; i++) {
    if (map_shard(&d->shards[i], flag, d->paths[i], n + 1, vocab, err, cap)) goto fail;
    d->total += windows_of(d, i);
    most = windows_of(d, i) > most ? windows_of(d, i) : most;
  }
  if (!(d->windows = malloc((size_t)most * sizeof *d->windows))) {
    snprintf(err, cap, "out of memory");
    goto fail;
  }
  arrange(d);
  return 0;
fail:
  rt_data_close(d);
  return -1;
}

void rt_data_next(rt_data *d, int32_t *stream) {
  rt_shard_window(&d->shards[d->order[d->pos.shard]], d->windows[d->pos.window], d->n, stream);
  if (++d->pos.window == d->nwindows) {
    d->pos.window = 0;
    if (++d->pos.shard == d->nshards) {
      d->pos.shard = 0;
      d->pos.epoch++;
    }
    arrange(d);
  }
}

int rt_data_seek(rt_data *d, rt_data_pos pos) {
  if (pos.epoch < 0 || pos.shard < 0 || pos.shard >= d->nshards || pos.window < 0) return -1;
  rt_data_pos was = d->pos;
  d->pos = pos;
  arrange(d);
  if (pos.window < d->nwindows) return 0;
  d->pos = was;
  arrange(d);
  return -1;
}

void rt_data_rewind(rt_data *d) { rt_data_seek(d, (rt_data_pos){0, 0, 0}); }

void rt_data_close(rt_data *d) {
  for (int i = 0; d->shards && i < d->nshards; i++)
    if (d->shards[i].map) munmap((void *)d->shards[i].map, d->shards[i].map_bytes);
  for (int i = 0; d->paths && i < d->nshards; i++) free(d->paths[i]);
  free(d->shards), free(d->paths), free(d->order), free(d->windows);
  *d = (rt_data){0};
}

int rt_data_read_tokens(const char *flag, const char *path, long vocab, int32_t **out,
                        long *count, char *err, size_t cap) {
  rt_shard s;
  if (map_shard(&s, flag, path, 1, vocab, err, cap)) return -1;
  *count = s.ntok;
  *out = malloc((size_t)s.ntok * sizeof **out);
  if (*out)
    for (long i = 0; i < s.ntok; i++) (*out)[i] = (int32_t)rt_shard_token(&s, i);
  munmap((void *)s.map, s.map_bytes);
  if (!*out) snprintf(err, cap, "out of memory");
  return *out ? 0 : -1;
}
