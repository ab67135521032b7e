// The learning-rate schedule (see schedule.h).
#include "schedule.h"

#include <math.h>
#include <string.h>

static const char *const names[] = {"constant", "linear", "cosine"};

double rt_schedule_lr(const rt_schedule *s, long step) {
  if (s->warmup > 0 && step <= s->warmup) return s->lr * (double)step / (double)s->warmup;
  if (s->kind == RT_LR_CONSTANT || s->steps <= s->warmup) return s->lr;
  double p = (double)(step - s->warmup) / (double)(s->steps - s->warmup);
  if (p > 1) p = 1;
  if (s->kind == RT_LR_LINEAR) return s->lr - (s->lr - s->lr_min) * p;
  const double pi = 3.14159265358979323846;
  return s->lr_min + (s->lr - s->lr_min) * 0.5 * (1.0 + cos(pi * p));
}

int rt_schedule_kind(const char *name, rt_lr_kind *kind) {
  for (int k = 0; k < (int)(sizeof names / sizeof names[0]); k++)
    if (!strcmp(name, names[k])) {
      *kind = (rt_lr_kind)k;
      return 0;
    }
  return -1;
}

const char *rt_schedule_name(rt_lr_kind kind) { return names[kind]; }
