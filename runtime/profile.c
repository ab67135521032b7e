// The step's time by op (profile.h).
#define _POSIX_C_SOURCE 200809L  // clock_gettime
#include "profile.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device.h"

int rt_prof_on;

static struct {
  int n;           // the model's op kinds; row n is the time outside the model's code
  double *sec;     // per row: seconds over the steps profiled
  long *calls;     // per row: its nodes run over the steps profiled
  int cur;         // the row the time since `last` is charged to
  double last;
  int steps;
} P;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void rt_prof_init(const rt_model *M) {
  P.n = M->n_op_kinds;
  P.sec = calloc((size_t)P.n + 1, sizeof *P.sec);
  P.calls = calloc((size_t)P.n + 1, sizeof *P.calls);
  if (!P.sec || !P.calls) {
    fprintf(stderr, "train: error: out of memory (--profile)\n");
    exit(EXIT_FAILURE);
  }
}

// Charges the time since the last mark to its row, and starts row `row`'s.
static void mark(int row) {
  rt_device_sync();
  double t = now();
  P.sec[P.cur] += t - P.last;
  P.last = t;
  P.cur = row;
}

void rt_prof_op(int kind) {
  int row = kind >= 0 && kind < P.n ? kind : P.n;
  mark(row);
  if (row < P.n)
    P.calls[row]++;
}

void rt_prof_step_begin(void) {
  if (!P.sec)
    return;
  rt_device_sync();
  P.last = now();
  P.cur = P.n;
  rt_prof_on = 1;
}

void rt_prof_step_end(void) {
  if (!rt_prof_on)
    return;
  mark(P.n);
  rt_prof_on = 0;
  P.steps++;
}

typedef struct Row {
  int k;
  double sec;
} Row;

static int slower_first(const void *a, const void *b) {
  double x = ((const Row *)a)->sec, y = ((const Row *)b)->sec;
  return x < y ? 1 : x > y ? -1 : ((const Row *)a)->k - ((const Row *)b)->k;
}

void rt_prof_report(FILE *f, const rt_model *M, int micro) {
  if (!P.sec)
    return;
  if (P.steps == 0) {
    fprintf(f, "profile: no step to show: the first is not profiled (run --steps 2 or more)\n");
    return;
  }
  Row *rows = malloc(((size_t)P.n + 1) * sizeof *rows);
  if (!rows)
    return;
  double step = 0, priced = 0;
  for (int k = 0; k <= P.n; k++) {
    rows[k] = (Row){k, P.sec[k] / P.steps};
    step += rows[k].sec;
  }
  qsort(rows, (size_t)P.n + 1, sizeof *rows, slower_first);
  bool has_price = M->op_micro_s && M->op_step_s;
  fprintf(f, "profile: the step by op, mean of %d step%s: %.4g ms (each op waited for; "
          "train --profile)\n", P.steps, P.steps == 1 ? "" : "s", 1e3 * step);
  fprintf(f, "profile:   %-22s %8s %10s %7s", "op", "nodes", "ms", "share");
  if (has_price)
    fprintf(f, " %10s %7s", "priced ms", "priced/ms");
  fputc('\n', f);
  for (int i = 0; i <= P.n; i++) {
    int k = rows[i].k;
    if (k < P.n && P.calls[k] == 0)
      continue;
    const char *name = k < P.n ? M->op_kinds[k] : "(outside the model)";
    fprintf(f, "profile:   %-22s %8.4g %10.4g %6.1f%%", name,
            k < P.n ? (double)P.calls[k] / P.steps : 0.0, 1e3 * rows[i].sec,
            step > 0 ? 100 * rows[i].sec / step : 0.0);
    if (has_price && (k == P.n || M->op_micro_s[k] >= 0)) {
      double p = k == P.n ? M->op_outside_s : micro * M->op_micro_s[k] + M->op_step_s[k];
      priced += p;
      fprintf(f, " %10.4g %7.2f", 1e3 * p, rows[i].sec > 0 ? p / rows[i].sec : 0.0);
    } else if (has_price) {
      fprintf(f, " %10s %7s", "-", "-");
    }
    fputc('\n', f);
  }
  if (has_price)
    fprintf(f, "profile: priced: the planner's roofline of this program's own nodes on %s, "
            "%.4g ms (outside the model: the gradients' norm and the weights' finite check; "
            "communication and host copies not priced)\n",
            M->planner_device, 1e3 * priced);
  free(rows);
}

void rt_prof_free(void) {
  free(P.sec);
  free(P.calls);
  memset(&P, 0, sizeof P);
}
