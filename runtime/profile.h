// The training step's time by IR op (train --profile): the model's code marks
// each node before its kernels run (RT_OP in model_api.h), and the time from one
// mark to the next is its op's. The step's time outside the model's code (the
// loss read back, the gradient norm, the finite check, data) is a row of its own,
// so the rows add up to the step. On a GPU each mark waits for the device, so a
// profiled step shows each op's time with nothing overlapped: slower than an
// unprofiled one, and each op's time its own.
#ifndef MTC_RT_PROFILE_H
#define MTC_RT_PROFILE_H

#include <stdio.h>

#include "model_api.h"

// Profiles the steps between rt_prof_step_begin and rt_prof_step_end of M.
void rt_prof_init(const rt_model *M);
void rt_prof_step_begin(void);
void rt_prof_step_end(void);
// The table of the steps profiled: per op kind its kernels' calls and mean time per step, its
// share of the step, and (where M carries it) the planner's price of the same nodes on
// M->planner_device; micro: the micro-batches this rank ran per step.
void rt_prof_report(FILE *f, const rt_model *M, int micro);
void rt_prof_free(void);

#endif
