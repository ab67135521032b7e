// Checkpoint folders and state.json (checkpoint.h).
#define _DEFAULT_SOURCE  // DT_DIR (readdir)
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PREFIX "step_"

void rt_ckpt_path(const char *dir, long step, bool tmp, char *out, size_t cap) {
  snprintf(out, cap, "%s/" PREFIX "%08ld%s", dir, step, tmp ? ".tmp" : "");
}

// mkdir -p
static int make_dirs(const char *dir, char *err, size_t cap) {
  char path[4096];
  snprintf(path, sizeof path, "%s", dir);
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p != '\0') continue;
    char c = *p;
    *p = '\0';
    if (mkdir(path, 0777) != 0 && errno != EEXIST) {
      snprintf(err, cap, "cannot create the folder %s: %s", path, strerror(errno));
      return -1;
    }
    *p = c;
    if (!c) break;
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(err, cap, "%s is not a folder", dir);
    return -1;
  }
  return 0;
}

// Removes a checkpoint folder: the files a checkpoint has, then the folder.
static void remove_ckpt(const char *path) {
  static const char *const files[] = {"model.safetensors", "adam_m.safetensors",
                                      "adam_v.safetensors", "state.json", NULL};
  char f[4400];
  for (int i = 0; files[i]; i++)
    if (snprintf(f, sizeof f, "%s/%s", path, files[i]) < (int)sizeof f) unlink(f);
  rmdir(path);
}

int rt_ckpt_begin(const char *dir, long step, char *err, size_t cap) {
  if (make_dirs(dir, err, cap)) return -1;
  char tmp[4096];
  rt_ckpt_path(dir, step, true, tmp, sizeof tmp);
  remove_ckpt(tmp);
  if (mkdir(tmp, 0777) != 0) {
    snprintf(err, cap, "cannot create %s: %s", tmp, strerror(errno));
    return -1;
  }
  return 0;
}

// Writes text into path through a temporary file and a rename.
static int write_atomic(const char *path, const char *text, char *err, size_t cap) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f || fputs(text, f) == EOF || fflush(f) != 0 || fsync(fileno(f)) != 0) {
    snprintf(err, cap, "cannot write %s: %s", tmp, strerror(errno));
    if (f) fclose(f);
    unlink(tmp);
    return -1;
  }
  if (fclose(f) != 0 || rename(tmp, path) != 0) {
    snprintf(err, cap, "cannot write %s: %s", path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

static char *state_json(const rt_ckpt_state *s) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "format", "mtc checkpoint");
  cJSON_AddNumberToObject(o, "version", 1);
  cJSON_AddStringToObject(o, "model", s->model);
  cJSON_AddStringToObject(o, "layout", s->layout);
  cJSON_AddStringToObject(o, "optimizer", s->optimizer);
  cJSON_AddNumberToObject(o, "step", (double)s->step);
  char seed[32];  // a JSON number holds 53 bits: the seed as text
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)s->seed);
  cJSON_AddStringToObject(o, "seed", seed);
  cJSON_AddNumberToObject(o, "dropout_step", (double)s->dropout_step);
  if (s->has_data) {
    cJSON *d = cJSON_AddObjectToObject(o, "data");
    if (d) {
      cJSON_AddNumberToObject(d, "epoch", (double)s->data.epoch);
      cJSON_AddNumberToObject(d, "shard", (double)s->data.shard);
      cJSON_AddNumberToObject(d, "window", (double)s->data.window);
      cJSON_AddNumberToObject(d, "window_tokens", (double)s->window_tokens);
    }
  }
  char *text = cJSON_Print(o);
  cJSON_Delete(o);
  return text;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

// Removes all but the newest keep checkpoints of dir (their names sort by step).
static void prune(const char *dir, int keep) {
  DIR *d = opendir(dir);
  if (!d) return;
  char **names = NULL;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (strncmp(e->d_name, PREFIX, strlen(PREFIX)) != 0 || len != strlen(PREFIX) + 8) continue;
    char **more = realloc(names, (size_t)(n + 1) * sizeof *names);
    if (!more || !(more[n] = strdup(e->d_name))) {
      names = more ? more : names;
      break;
    }
    names = more;
    n++;
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, by_name);
  char path[4200];
  for (int i = 0; i < n; i++) {
    if (i < n - keep && snprintf(path, sizeof path, "%s/%s", dir, names[i]) < (int)sizeof path)
      remove_ckpt(path);
    free(names[i]);
  }
  free(names);
}

int rt_ckpt_commit(const char *dir, const rt_ckpt_state *s, int keep, char *err, size_t cap) {
  char tmp[4096], final[4096], path[4200];
  rt_ckpt_path(dir, s->step, true, tmp, sizeof tmp);
  rt_ckpt_path(dir, s->step, false, final, sizeof final);
  char *text = state_json(s);
  if (!text) {
    snprintf(err, cap, "out of memory");
    return -1;
  }
  snprintf(path, sizeof path, "%s/state.json", tmp);
  int rc = write_atomic(path, text, err, cap);
  cJSON_free(text);
  if (rc) return -1;
  remove_ckpt(final);  // a checkpoint of the same step from an earlier run
  if (rename(tmp, final) != 0) {
    snprintf(err, cap, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
    return -1;
  }
  char line[64];
  snprintf(line, sizeof line, PREFIX "%08ld\n", s->step);
  snprintf(path, sizeof path, "%s/latest", dir);
  if (write_atomic(path, line, err, cap)) return -1;
  if (keep > 0) prune(dir, keep);
  return 0;
}

// The whole of a small file, NUL-terminated; NULL with a message.
static char *read_small(const char *path, char *err, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, cap, "cannot read %s: %s", path, strerror(errno));
    return NULL;
  }
  char *buf = malloc(1 << 20);
  size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
  bool more = buf && fgetc(f) != EOF;
  fclose(f);
  if (!buf || more) {
    snprintf(err, cap, "%s: %s", path, buf ? "larger than a state file (1 MiB)" : "out of memory");
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  return buf;
}

// A number member of o in [lo, hi], or -1 with a message.
static int get_long(const cJSON *o, const char *name, long lo, long hi, long *out,
                    const char *path, char *err, size_t cap) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  if (!cJSON_IsNumber(v) || v->valuedouble < (double)lo || v->valuedouble > (double)hi ||
      v->valuedouble != (double)(long)v->valuedouble) {
    snprintf(err, cap, "%s: '%s' is missing or not an integer in [%ld, %ld]", path, name, lo, hi);
    return -1;
  }
  *out = (long)v->valuedouble;
  return 0;
}

static int get_string(const cJSON *o, const char *name, char *out, size_t n, const char *path,
                      char *err, size_t cap) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  if (!cJSON_IsString(v) || strlen(v->valuestring) >= n) {
    snprintf(err, cap, "%s: '%s' is missing or not a text", path, name);
    return -1;
  }
  strcpy(out, v->valuestring);
  return 0;
}

static int parse_state(const char *path, const char *text, rt_ckpt_state *s, char *err,
                       size_t cap) {
  cJSON *o = cJSON_Parse(text);
  if (!o) {
    snprintf(err, cap, "%s is not valid JSON (a truncated or damaged checkpoint)", path);
    return -1;
  }
  memset(s, 0, sizeof *s);
  char format[64], seed[32];
  long version, big = 1L << 52;
  int rc = -1;
  if (get_string(o, "format", format, sizeof format, path, err, cap) ||
      get_long(o, "version", 0, big, &version, path, err, cap))
    goto done;
  if (strcmp(format, "mtc checkpoint") || version != 1) {
    snprintf(err, cap, "%s: not an mtc checkpoint of version 1 (format '%s', version %ld)",
             path, format, version);
    goto done;
  }
  if (get_string(o, "model", s->model, sizeof s->model, path, err, cap) ||
      get_string(o, "layout", s->layout, sizeof s->layout, path, err, cap) ||
      get_string(o, "optimizer", s->optimizer, sizeof s->optimizer, path, err, cap) ||
      get_string(o, "seed", seed, sizeof seed, path, err, cap) ||
      get_long(o, "step", 0, big, &s->step, path, err, cap) ||
      get_long(o, "dropout_step", -1, big, &s->dropout_step, path, err, cap))
    goto done;
  char *end;
  errno = 0;
  s->seed = strtoull(seed, &end, 10);
  if (*end || errno || !*seed) {
    snprintf(err, cap, "%s: 'seed' is not a whole number", path);
    goto done;
  }
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "data");
  if (d) {
    s->has_data = true;
    if (get_long(d, "epoch", 0, big, &s->data.epoch, path, err, cap) ||
        get_long(d, "shard", 0, big, &s->data.shard, path, err, cap) ||
        get_long(d, "window", 0, big, &s->data.window, path, err, cap) ||
        get_long(d, "window_tokens", 1, big, &s->window_tokens, path, err, cap))
      goto done;
  }
  rc = 0;
done:
  cJSON_Delete(o);
  return rc;
}

int rt_ckpt_open(const char *dir, char *path, size_t pcap, rt_ckpt_state *s, char *err,
                 size_t cap) {
  char file[4200];
  snprintf(file, sizeof file, "%s/state.json", dir);
  if (access(file, F_OK) == 0) {
    snprintf(path, pcap, "%s", dir);
  } else {
    snprintf(file, sizeof file, "%s/latest", dir);
    char *latest = read_small(file, err, cap);
    if (!latest) {
      snprintf(err, cap, "%s holds no checkpoint: neither a state.json nor a 'latest' file "
               "(give the --checkpoint-dir of a run, or one of its step_* folders)", dir);
      return -1;
    }
    latest[strcspn(latest, "\n")] = '\0';
    if (strncmp(latest, PREFIX, strlen(PREFIX)) || strchr(latest, '/')) {
      snprintf(err, cap, "%s names '%s', not a step_* folder", file, latest);
      free(latest);
      return -1;
    }
    snprintf(path, pcap, "%s/%s", dir, latest);
    free(latest);
    snprintf(file, sizeof file, "%s/state.json", path);
  }
  char *text = read_small(file, err, cap);
  if (!text) return -1;
  int rc = parse_state(file, text, s, err, cap);
  free(text);
  return rc;
}
