// The training log: JSON lines (runtime/log.h), written with cJSON.
#include "log.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>

int rt_log_open(rt_log *log, const char *path, int append) {
  log->f = fopen(path, append ? "a" : "w");
  return log->f ? 0 : -1;
}

// A number, or null where JSON has none (NaN, infinities).
static void add_number(cJSON *o, const char *name, double x) {
  if (isfinite(x)) cJSON_AddNumberToObject(o, name, x);
  else cJSON_AddNullToObject(o, name);
}

// Writes o as one line and frees it.
static void write_line(rt_log *log, cJSON *o) {
  char *text = cJSON_PrintUnformatted(o);
  if (text) {
    fputs(text, log->f);
    fputc('\n', log->f);
    fflush(log->f);
    cJSON_free(text);
  }
  cJSON_Delete(o);
}

void rt_log_write_step(rt_log *log, const rt_log_step *s) {
  if (!log->f) return;
  cJSON *o = cJSON_CreateObject();
  if (!o) return;
  cJSON_AddStringToObject(o, "kind", "train");
  cJSON_AddNumberToObject(o, "step", (double)s->step);
  cJSON_AddNumberToObject(o, "steps", (double)s->steps);
  add_number(o, "loss", s->loss);
  add_number(o, "lr", s->lr);
  add_number(o, "grad_norm", s->grad_norm);
  add_number(o, "ms", s->ms);
  add_number(o, "tokens_per_s", s->tokens_per_s);
  add_number(o, "gflops_per_s", s->gflops_per_s);
  add_number(o, "mfu", s->mfu);
  cJSON_AddNumberToObject(o, "memory_bytes", (double)s->memory_bytes);
  cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)s->peak_rss_bytes);
  write_line(log, o);
}

void rt_log_write_val(rt_log *log, long step, long steps, double loss, long batches) {
  if (!log->f) return;
  cJSON *o = cJSON_CreateObject();
  if (!o) return;
  cJSON_AddStringToObject(o, "kind", "val");
  cJSON_AddNumberToObject(o, "step", (double)step);
  cJSON_AddNumberToObject(o, "steps", (double)steps);
  add_number(o, "loss", loss);
  cJSON_AddNumberToObject(o, "batches", (double)batches);
  write_line(log, o);
}

void rt_log_close(rt_log *log) {
  if (log->f) fclose(log->f);
  log->f = NULL;
}
