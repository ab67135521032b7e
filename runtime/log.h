// The training log (train's --log FILE.jsonl): one JSON object per line, per
// step, flushed as written, so that a run killed midway leaves every step it
// finished. tools/plot_log.py draws it.
#ifndef MTC_RT_LOG_H
#define MTC_RT_LOG_H

#include <stdio.h>

typedef struct rt_log {
  FILE *f;  // NULL: no log
} rt_log;

// One training step, as its step line prints it (NaN and infinities as null).
typedef struct rt_log_step {
  long step, steps;  // 1-based, of the run's
  double loss;       // the global batch's mean loss
  double lr;         // the rate the update used
  double grad_norm;  // the global gradient norm, before clipping
  double ms;         // the step's time
  double tokens_per_s;
  double gflops_per_s;  // the model's forward, backward and update FLOPs over the step's time
  double mfu;           // ... over the device's peak (NaN: unknown)
  long memory_bytes;    // the device memory the program planned (arena and workspace)
  long peak_rss_bytes;  // the process's peak resident memory so far
} rt_log_step;

// Opens path for writing: replacing it, or (a resumed run) appending to it;
// -1 with errno set when it cannot.
int rt_log_open(rt_log *log, const char *path, int append);
void rt_log_write_step(rt_log *log, const rt_log_step *s);
// A validation after step `step` of `steps`: the mean loss over `batches` global batches.
void rt_log_write_val(rt_log *log, long step, long steps, double loss, long batches);
void rt_log_close(rt_log *log);

#endif
