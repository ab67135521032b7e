// The learning-rate schedule of a training run (train's --lr-schedule,
// --warmup, --lr-min), as nanoGPT and llm.c schedule it: a linear warmup
// from lr/warmup to lr over the first `warmup` steps, then constant, or a
// linear or cosine decay that reaches lr_min at the last step.
#ifndef MTC_RT_SCHEDULE_H
#define MTC_RT_SCHEDULE_H

typedef enum { RT_LR_CONSTANT, RT_LR_LINEAR, RT_LR_COSINE } rt_lr_kind;

typedef struct rt_schedule {
  rt_lr_kind kind;
  double lr, lr_min;  // the peak rate, and the last step's (decays only)
  long warmup;        // steps of linear warmup (0: none)
  long steps;         // the run's steps
} rt_schedule;

// The rate of step `step` (1-based): lr * step / warmup while step <= warmup;
// after it, with p = (step - warmup) / (steps - warmup) in (0, 1]: lr
// (constant), lr - (lr - lr_min) p (linear), lr_min + (lr - lr_min) (1 +
// cos(pi p)) / 2 (cosine).
double rt_schedule_lr(const rt_schedule *s, long step);

// The kind named `name` (constant, linear, cosine) into *kind; -1 if none is.
int rt_schedule_kind(const char *name, rt_lr_kind *kind);
const char *rt_schedule_name(rt_lr_kind kind);

#endif
