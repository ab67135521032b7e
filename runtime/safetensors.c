// safetensors files: the reader validates everything before a tensor is
// handed out; the writer writes a temporary file beside the target, syncs it
// and renames it over the target. See safetensors.h for the format.
#define _GNU_SOURCE
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER_MAX (100L << 20)       // the limit of the reference implementation
#define EXACT_MAX 9007199254740992.0  // 2^53: JSON numbers are doubles

static const struct {
  const char *name;
  size_t size;
} dtypes[RT_ST_NDTYPES] = {
    [RT_ST_BOOL] = {"BOOL", 1}, [RT_ST_U8] = {"U8", 1},   [RT_ST_I8] = {"I8", 1},
    [RT_ST_I16] = {"I16", 2},   [RT_ST_U16] = {"U16", 2}, [RT_ST_F16] = {"F16", 2},
    [RT_ST_BF16] = {"BF16", 2}, [RT_ST_I32] = {"I32", 4}, [RT_ST_U32] = {"U32", 4},
    [RT_ST_F32] = {"F32", 4},   [RT_ST_F64] = {"F64", 8}, [RT_ST_I64] = {"I64", 8},
    [RT_ST_U64] = {"U64", 8},
};

const char *rt_st_dtype_name(rt_st_dtype dt) { return dtypes[dt].name; }
size_t rt_st_dtype_size(rt_st_dtype dt) { return dtypes[dt].size; }

__attribute__((format(printf, 3, 4))) static int st_error(char *err, size_t cap, const char *fmt,
                                                          ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, cap, fmt, ap);
  va_end(ap);
  return -1;
}

static bool host_is_big_endian(void) {
  const uint16_t one = 1;
  return *(const uint8_t *)&one == 0;
}

// ---- reading ----------------------------------------------------------------------------

// A JSON number that is a non-negative integer below 2^53.
static bool json_count(const cJSON *j, double *out) {
  if (!cJSON_IsNumber(j)) return false;
  double x = j->valuedouble;
  if (!(x >= 0 && x < EXACT_MAX) || x != (double)(long long)x) return false;
  *out = x;
  return true;
}

// One header entry: "NAME": {"dtype": ..., "shape": [...], "data_offsets": [b, e]}.
// begin/end are the entry's data offsets.
static int parse_entry(const cJSON *e, rt_st_tensor *t, double *begin, double *end,
                       const char *path, char *err, size_t cap) {
  const char *name = t->name;
  if (!cJSON_IsObject(e))
    return st_error(err, cap, "%s: tensor '%s': the header entry is not a JSON object", path, name);
  const cJSON *dtype = NULL, *shape = NULL, *offsets = NULL, *field;
  cJSON_ArrayForEach(field, e) {
    if (!strcmp(field->string, "dtype")) dtype = field;
    else if (!strcmp(field->string, "shape")) shape = field;
    else if (!strcmp(field->string, "data_offsets")) offsets = field;
    else
      return st_error(err, cap, "%s: tensor '%s': unknown field '%s' (dtype, shape, data_offsets)",
                      path, name, field->string);
  }
  if (!cJSON_IsString(dtype))
    return st_error(err, cap, "%s: tensor '%s': no \"dtype\" string", path, name);
  int dt = 0;
  while (dt < RT_ST_NDTYPES && strcmp(dtypes[dt].name, dtype->valuestring)) dt++;
  if (dt == RT_ST_NDTYPES)
    return st_error(err, cap, "%s: tensor '%s': unknown dtype '%s'", path, name,
                    dtype->valuestring);
  t->dtype = (rt_st_dtype)dt;

  if (!cJSON_IsArray(shape))
    return st_error(err, cap, "%s: tensor '%s': no \"shape\" array", path, name);
  int rank = cJSON_GetArraySize(shape);
  if (rank > RT_ST_MAXRANK)
    return st_error(err, cap, "%s: tensor '%s' has rank %d, at most %d is supported", path, name,
                    rank, RT_ST_MAXRANK);
  t->rank = rank;
  double numel = 1;
  const cJSON *d;
  int i = 0;
  cJSON_ArrayForEach(d, shape) {
    double x;
    if (!json_count(d, &x))
      return st_error(err, cap, "%s: tensor '%s': shape[%d] is not a non-negative integer", path,
                      name, i);
    t->shape[i++] = (long)x;
    numel *= x;
    if (numel >= EXACT_MAX)
      return st_error(err, cap, "%s: tensor '%s': the shape is too large", path, name);
  }
  t->numel = (long)numel;

  if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
      !json_count(cJSON_GetArrayItem(offsets, 0), begin) ||
      !json_count(cJSON_GetArrayItem(offsets, 1), end) || *begin > *end)
    return st_error(err, cap,
                    "%s: tensor '%s': \"data_offsets\" must be [BEGIN, END] with "
                    "0 <= BEGIN <= END",
                    path, name);
  double want = numel * (double)dtypes[dt].size;
  if (*end - *begin != want)
    return st_error(err, cap,
                    "%s: tensor '%s': data_offsets [%.0f, %.0f] hold %.0f bytes, but %s%s "
                    "needs %.0f",
                    path, name, *begin, *end, *end - *begin, dtypes[dt].name,
                    rank ? " of that shape" : " scalar", want);
  return 0;
}

typedef struct span {
  double begin, end;
  const char *name;
} span;

static int by_begin(const void *a, const void *b) {
  const span *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// The names are unique and the spans tile [0, data_bytes).
static int check_layout(rt_st_file *f, span *spans, double data_bytes, const char *path, char *err,
                        size_t cap) {
  const char **names = malloc((size_t)f->n * sizeof *names + 1);
  if (!names) return st_error(err, cap, "%s: out of memory", path);
  for (int i = 0; i < f->n; i++) names[i] = f->tensors[i].name;
  qsort(names, (size_t)f->n, sizeof *names, by_name);
  for (int i = 1; i < f->n; i++)
    if (!strcmp(names[i - 1], names[i])) {
      st_error(err, cap, "%s: tensor '%s' appears twice in the header", path, names[i]);
      free(names);
      return -1;
    }
  free(names);

  qsort(spans, (size_t)f->n, sizeof *spans, by_begin);
  double at = 0;
  for (int i = 0; i < f->n; i++) {
    if (spans[i].end > data_bytes)
      return st_error(err, cap,
                      "%s: tensor '%s': data_offsets [%.0f, %.0f] run past the end of the "
                      "data (%.0f bytes)",
                      path, spans[i].name, spans[i].begin, spans[i].end, data_bytes);
    if (spans[i].begin != at)
      return st_error(err, cap, "%s: tensor '%s' starts at data offset %.0f, expected %.0f (%s)",
                      path, spans[i].name, spans[i].begin, at,
                      spans[i].begin < at ? "it overlaps another tensor" : "a hole in the data");
    at = spans[i].end;
  }
  if (at != data_bytes)
    return st_error(err, cap, "%s: the tensors cover %.0f bytes of data, but the file holds %.0f",
                    path, at, data_bytes);
  return 0;
}

// "__metadata__": {"KEY": "VALUE", ...}
static int check_metadata(const cJSON *meta, const char *path, char *err, size_t cap) {
  if (!cJSON_IsObject(meta))
    return st_error(err, cap, "%s: \"__metadata__\" is not an object", path);
  const cJSON *kv;
  cJSON_ArrayForEach(kv, meta) {
    if (!cJSON_IsString(kv))
      return st_error(err, cap, "%s: \"__metadata__\": the value of '%s' is not a string", path,
                      kv->string);
  }
  return 0;
}

// Fills f from the parsed header; `data` is the data part of the mapping.
static int parse_header(rt_st_file *f, const cJSON *root, const uint8_t *data, double data_bytes,
                        const char *path, char *err, size_t cap) {
  if (!cJSON_IsObject(root)) return st_error(err, cap, "%s: the header is not a JSON object", path);
  int n = 0;
  size_t name_bytes = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, root) {
    if (strcmp(e->string, "__metadata__")) {
      n++;
      name_bytes += strlen(e->string) + 1;
    }
  }
  f->tensors = calloc((size_t)n + 1, sizeof *f->tensors);
  f->names = malloc(name_bytes + 1);
  span *spans = malloc(((size_t)n + 1) * sizeof *spans);
  if (!f->tensors || !f->names || !spans) {
    free(spans);
    return st_error(err, cap, "%s: out of memory", path);
  }
  char *names = f->names;
  int rc = 0;
  cJSON_ArrayForEach(e, root) {
    if (!strcmp(e->string, "__metadata__")) {
      if ((rc = check_metadata(e, path, err, cap))) break;
      continue;
    }
    rt_st_tensor *t = &f->tensors[f->n];
    strcpy(names, e->string);
    t->name = names;
    names += strlen(names) + 1;
    span *s = &spans[f->n];
    s->name = t->name;
    f->n++;
    if ((rc = parse_entry(e, t, &s->begin, &s->end, path, err, cap))) break;
    t->data = data + (size_t)s->begin;
  }
  if (!rc) rc = check_layout(f, spans, data_bytes, path, err, cap);
  free(spans);
  return rc;
}

// "a folder", "a FIFO", "a socket" or "a device": what a file that is not regular is.
static const char *file_kind(mode_t mode) {
  return S_ISDIR(mode) ? "a folder" : S_ISFIFO(mode) ? "a FIFO" : S_ISSOCK(mode) ? "a socket"
                                                                   : "a device";
}

int rt_st_open_regular(const char *path, struct stat *st, char *err, size_t cap) {
  // O_NONBLOCK: opening a FIFO does not wait for a writer (it is refused below)
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int saved = errno;
    st_error(err, cap, "cannot open %s: %s", path, strerror(saved));
    errno = saved;
    return -1;
  }
  int flags = fcntl(fd, F_GETFL);
  if (fstat(fd, st) != 0 || flags == -1 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    int saved = errno;
    close(fd);
    return st_error(err, cap, "cannot stat %s: %s", path, strerror(saved));
  }
  if (!S_ISREG(st->st_mode)) {
    close(fd);
    st_error(err, cap, "%s is %s, not a regular file", path, file_kind(st->st_mode));
    return -2;
  }
  return fd;
}

int rt_st_read(rt_st_file *f, const char *path, char *err, size_t cap) {
  memset(f, 0, sizeof *f);
  struct stat st;
  int fd = rt_st_open_regular(path, &st, err, cap);
  if (fd < 0) return -1;
  size_t size = (size_t)st.st_size;
  if (size < 8) {
    close(fd);
    return st_error(err, cap,
                    "%s is not a safetensors file: %zu bytes, less than the 8-byte "
                    "header length",
                    path, size);
  }
  void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return st_error(err, cap, "cannot map %s: %s", path, strerror(errno));
  f->map = map;
  f->map_bytes = size;

  const uint8_t *p = map;
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | p[i];
  if (hlen > (uint64_t)HEADER_MAX || hlen > size - 8) {
    rt_st_close(f);
    return st_error(
        err, cap, "%s is not a safetensors file: the header length is %llu bytes, but %s", path,
        (unsigned long long)hlen, hlen > size - 8 ? "the file is shorter" : "the limit is 100 MiB");
  }
  const char *json = (const char *)p + 8;
  const char *endp = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(json, (size_t)hlen, &endp, 0);
  int rc = 0;
  if (!root) {
    long at = endp ? (long)(endp - json) : 0;
    rc = st_error(err, cap, "%s: the header is not valid JSON (near byte %ld of %llu)", path, at,
                  (unsigned long long)hlen);
  } else {
    // the reference writer pads the header with spaces to a multiple of 8
    for (const char *q = endp; q < json + hlen && !rc; q++)
      if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r')
        rc = st_error(err, cap, "%s: text after the JSON header at byte %ld", path,
                      (long)(q - json));
    if (!rc) rc = parse_header(f, root, p + 8 + hlen, (double)(size - 8 - hlen), path, err, cap);
  }
  cJSON_Delete(root);
  if (rc) rt_st_close(f);
  return rc;
}

const rt_st_tensor *rt_st_find(const rt_st_file *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
  return NULL;
}

void rt_st_close(rt_st_file *f) {
  free(f->tensors);
  free(f->names);
  if (f->map) munmap(f->map, f->map_bytes);
  memset(f, 0, sizeof *f);
}

void rt_st_to_f32(const rt_st_tensor *t, float *out) {
  if (t->dtype == RT_ST_BF16) {  // widened: the upper half of a float32, little-endian
    const uint8_t *p = t->data;
    for (long i = 0; i < t->numel; i++) {
      uint32_t u = ((uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8) << 16;
      memcpy(out + i, &u, sizeof u);
    }
    return;
  }
  memcpy(out, t->data, (size_t)t->numel * 4);
  if (host_is_big_endian()) {
    uint32_t *w = (uint32_t *)out;
    for (long i = 0; i < t->numel; i++) w[i] = __builtin_bswap32(w[i]);
  }
}

int rt_st_to_i32(const rt_st_tensor *t, int32_t *out, char *err, size_t cap) {
  const uint8_t *p = t->data;
  for (long i = 0; i < t->numel; i++) {
    if (t->dtype == RT_ST_I32) {
      const uint8_t *b = p + 4 * i;
      out[i] = (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                         (uint32_t)b[3] << 24);
      continue;
    }
    uint64_t u = 0;
    for (int k = 7; k >= 0; k--) u = u << 8 | p[8 * i + k];
    int64_t v = (int64_t)u;
    if (v < INT32_MIN || v > INT32_MAX)
      return st_error(err, cap, "tensor '%s': element %ld is %lld, which does not fit in int32",
                      t->name, i, (long long)v);
    out[i] = (int32_t)v;
  }
  return 0;
}

// ---- writing ----------------------------------------------------------------------------

// The header: the JSON, padded with spaces to a multiple of 8 bytes.
static char *make_header(const rt_st_tensor *t, int n, const char *const *metadata, size_t *len) {
  cJSON *root = cJSON_CreateObject();
  bool ok = root != NULL;
  if (ok && metadata && metadata[0]) {
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    ok = meta != NULL;
    for (int i = 0; ok && metadata[i] && metadata[i + 1]; i += 2)
      ok = cJSON_AddStringToObject(meta, metadata[i], metadata[i + 1]) != NULL;
  }
  double at = 0;
  for (int i = 0; ok && i < n; i++) {
    cJSON *e = cJSON_AddObjectToObject(root, t[i].name);
    double shape[RT_ST_MAXRANK];
    for (int k = 0; k < t[i].rank; k++) shape[k] = (double)t[i].shape[k];
    double bytes = (double)t[i].numel * (double)dtypes[t[i].dtype].size;
    double offsets[2] = {at, at + bytes};
    at += bytes;
    ok = e && cJSON_AddStringToObject(e, "dtype", dtypes[t[i].dtype].name) &&
         cJSON_AddItemToObject(e, "shape", cJSON_CreateDoubleArray(shape, t[i].rank)) &&
         cJSON_AddItemToObject(e, "data_offsets", cJSON_CreateDoubleArray(offsets, 2));
  }
  char *json = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  if (!json) return NULL;
  size_t n0 = strlen(json), padded = (n0 + 7) / 8 * 8;
  char *out = realloc(json, padded + 1);
  if (!out) {
    free(json);
    return NULL;
  }
  memset(out + n0, ' ', padded - n0);
  out[padded] = '\0';
  *len = padded;
  return out;
}

// ---- the target and its temporary ----------------------------------------------------
//
// rt_st_write writes DIR/.NAME.mtc-tmp.HOST.PID beside DIR/NAME and renames it
// over NAME: the host and the process name a temporary that only that process
// writes, so that a later run can tell one left by a killed save (its process
// gone) from one being written.

// What rt_st_write is writing now, for rt_st_abandon (a signal handler).
static char partial[4096 + 512];
static volatile sig_atomic_t writing;

// path's folder ("." for a bare name) and its last component
static void split_path(const char *path, char *dir, size_t dcap, const char **base) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    snprintf(dir, dcap, ".");
    *base = path;
  } else {
    snprintf(dir, dcap, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    *base = slash + 1;
  }
}

static void host_name(char *host, size_t cap) {
  if (gethostname(host, cap) != 0) snprintf(host, cap, "localhost");
  host[cap - 1] = '\0';
  for (char *c = host; *c; c++)
    if (*c == '/') *c = '_';
}

// The prefix of path's temporaries, ".NAME.mtc-tmp.HOST." (NAME cut to 160
// bytes so that the whole stays under NAME_MAX), into out.
static void temp_prefix(const char *base, char *out, size_t cap) {
  char host[64];
  host_name(host, sizeof host);
  snprintf(out, cap, ".%.160s.mtc-tmp.%s.", base, host);
}

// Why path cannot be a target (as an error), or 0: it is absent or a regular
// file. A symlink is refused, not followed: rename would replace the link.
static int check_kind(const char *path, char *err, size_t cap) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT) return 0;
    return st_error(err, cap, "%s: cannot write: %s", path, strerror(errno));
  }
  if (S_ISREG(st.st_mode)) return 0;
  if (S_ISLNK(st.st_mode))
    return st_error(err, cap,
                    "%s: is a symbolic link; the file would replace the link, not write "
                    "through it: give the path it points to, or another name",
                    path);
  if (S_ISDIR(st.st_mode))
    return st_error(err, cap, "%s: is a folder; give the name of a file", path);
  return st_error(err, cap,
                  "%s: is %s, not a regular file; the file would replace it: give another name",
                  path, file_kind(st.st_mode));
}

// Creates path's temporary (exclusively) into tmp; the open descriptor, or
// -1 with the error.
static int create_temp(const char *path, char *tmp, size_t tcap, char *err, size_t cap) {
  char dir[4096], prefix[512];
  const char *base;
  split_path(path, dir, sizeof dir, &base);
  if (*base == '\0') return st_error(err, cap, "%s: is a folder; give the name of a file", path);
  temp_prefix(base, prefix, sizeof prefix);
  if (snprintf(tmp, tcap, "%s/%s%ld", dir, prefix, (long)getpid()) >= (int)tcap)
    return st_error(err, cap, "%s: the path is too long", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (fd < 0)
    return st_error(err, cap, "%s: cannot write into the folder %s: %s", path, dir,
                    strerror(errno));
  return fd;
}

int rt_st_check_target(const char *path, char *err, size_t cap) {
  if (check_kind(path, err, cap)) return -1;
  char tmp[4096 + 512];
  int fd = create_temp(path, tmp, sizeof tmp, err, cap);
  if (fd < 0) return -1;
  close(fd);
  unlink(tmp);
  return 0;
}

int rt_st_remove_stale(const char *path, char *removed, size_t rcap, char *err, size_t cap) {
  char dir[4096], prefix[512];
  const char *base;
  split_path(path, dir, sizeof dir, &base);
  temp_prefix(base, prefix, sizeof prefix);
  size_t plen = strlen(prefix);
  if (rcap) removed[0] = '\0';
  DIR *d = opendir(dir);
  if (!d) return st_error(err, cap, "%s: cannot read the folder %s: %s", path, dir, strerror(errno));
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, prefix, plen)) continue;
    const char *digits = e->d_name + plen;
    char *end;
    errno = 0;
    long pid = strtol(digits, &end, 10);
    if (*digits < '0' || *digits > '9' || *end || errno || pid <= 0 || pid > INT_MAX ||
        pid == (long)getpid())
      continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to ask
    char file[4096 + 512];
    if (snprintf(file, sizeof file, "%s/%s", dir, e->d_name) >= (int)sizeof file) continue;
    if (unlink(file) != 0) {
      int saved = errno;
      closedir(d);
      return st_error(err, cap, "%s: cannot remove the stale temporary file %s: %s", path, file,
                      strerror(saved));
    }
    if (rcap && strlen(removed) + strlen(file) + 3 < rcap)
      snprintf(removed + strlen(removed), rcap - strlen(removed), "%s%s", n ? ", " : "", file);
    n++;
  }
  closedir(d);
  return n;
}

void rt_st_abandon(void) {
  if (writing) unlink(partial);
}

// ---- the writer ---------------------------------------------------------------------------

// Writes all of buf to fd; false with errno set on failure.
static bool write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (k == 0) errno = EIO;
      return false;
    }
    p += k;
    n -= (size_t)k;
  }
  return true;
}

// The tensor's bytes, little-endian whatever the host.
static bool write_data(int fd, const rt_st_tensor *t) {
  size_t es = dtypes[t->dtype].size, bytes = (size_t)t->numel * es;
  if (!host_is_big_endian() || es == 1) return write_all(fd, t->data, bytes);
  uint8_t buf[1 << 12];
  const uint8_t *src = t->data;
  for (size_t at = 0; at < bytes; at += sizeof buf) {
    size_t len = bytes - at < sizeof buf ? bytes - at : sizeof buf;
    for (size_t i = 0; i < len; i += es)
      for (size_t k = 0; k < es; k++) buf[i + k] = src[at + i + es - 1 - k];
    if (!write_all(fd, buf, len)) return false;
  }
  return true;
}

int rt_st_write(const char *path, const rt_st_tensor *t, int n, const char *const *metadata,
                char *err, size_t cap) {
  for (int i = 0; i < n; i++)
    for (int k = 0; k < i; k++)
      if (!strcmp(t[i].name, t[k].name))
        return st_error(err, cap, "%s: cannot write tensor '%s' twice", path, t[i].name);
  if (check_kind(path, err, cap)) return -1;
  size_t hlen;
  char *header = make_header(t, n, metadata, &hlen);
  if (!header) return st_error(err, cap, "%s: cannot write: out of memory", path);

  char tmp[sizeof partial];
  int fd = create_temp(path, tmp, sizeof tmp, err, cap);
  if (fd < 0) {
    free(header);
    return -1;
  }
  memcpy(partial, tmp, sizeof tmp);
  writing = 1;
  struct stat st;  // a file replaced keeps its permissions
  if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) (void)fchmod(fd, st.st_mode & 07777);
  uint8_t len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
  bool ok = write_all(fd, len8, 8) && write_all(fd, header, hlen);
  free(header);
  for (int i = 0; ok && i < n; i++) ok = write_data(fd, &t[i]);
  ok = ok && fsync(fd) == 0;
  int saved = errno;
  if (close(fd) != 0 && ok) ok = false, saved = errno;
  bool renamed = ok && rename(tmp, path) == 0;
  if (!renamed) {
    if (ok) saved = errno;
    unlink(tmp);
    writing = 0;
    return st_error(err, cap, ok ? "%s: cannot rename %s over it: %s"
                                 : "%s: cannot write the temporary file %s: %s",
                    path, tmp, strerror(saved));
  }
  writing = 0;
  // the rename is durable once the folder is: a file system that cannot sync
  // a folder (EINVAL) has nothing to sync
  char dir[4096];
  const char *base;
  split_path(path, dir, sizeof dir, &base);
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    int rc = fsync(dfd);
    saved = errno;
    close(dfd);
    if (rc != 0 && saved != EINVAL && saved != EROFS && saved != EBADF)
      return st_error(err, cap, "%s: written, but its folder %s cannot be synced: %s", path, dir,
                      strerror(saved));
  }
  return 0;
}
