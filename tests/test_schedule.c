// The learning-rate schedule (runtime/schedule.c) at chosen steps, against
// values worked out by hand from its definition (nanoGPT's and llm.c's):
// warmup lr * step / warmup; then constant, linear to lr_min, or
// lr_min + (lr - lr_min) (1 + cos(pi p)) / 2 with p the share of the decay
// steps done. Prints one line per check and "N passed, M failed".
#include <math.h>
#include <stdio.h>

#include "schedule.h"

static int passed, failed;

static void expect(const char *what, double got, double want) {
  if (fabs(got - want) <= 1e-12 * fmax(1.0, fabs(want))) {
    passed++;
    printf("ok   %s: %.10g\n", what, got);
  } else {
    failed++;
    printf("FAIL %s: %.10g, expected %.10g\n", what, got, want);
  }
}

int main(void) {
  rt_lr_kind k;
  rt_schedule c = {RT_LR_CONSTANT, 0.01, 0, 0, 100};
  expect("constant, step 1", rt_schedule_lr(&c, 1), 0.01);
  expect("constant, step 100", rt_schedule_lr(&c, 100), 0.01);
  rt_schedule w = {RT_LR_CONSTANT, 0.01, 0, 4, 100};
  expect("warmup 4, step 1", rt_schedule_lr(&w, 1), 0.0025);
  expect("warmup 4, step 3", rt_schedule_lr(&w, 3), 0.0075);
  expect("warmup 4, step 4", rt_schedule_lr(&w, 4), 0.01);
  expect("warmup 4, step 5", rt_schedule_lr(&w, 5), 0.01);
  // linear over steps 11..110 after 10 of warmup: p = (step - 10) / 100
  rt_schedule l = {RT_LR_LINEAR, 0.01, 0.001, 10, 110};
  expect("linear, step 5 (warmup)", rt_schedule_lr(&l, 5), 0.005);
  expect("linear, step 10 (warmup's end)", rt_schedule_lr(&l, 10), 0.01);
  expect("linear, step 35 (p 1/4)", rt_schedule_lr(&l, 35), 0.01 - 0.009 * 0.25);
  expect("linear, step 60 (p 1/2)", rt_schedule_lr(&l, 60), 0.0055);
  expect("linear, step 110 (last)", rt_schedule_lr(&l, 110), 0.001);
  rt_schedule s = {RT_LR_COSINE, 0.01, 0.001, 10, 110};
  expect("cosine, step 10 (warmup's end)", rt_schedule_lr(&s, 10), 0.01);
  expect("cosine, step 35 (p 1/4)", rt_schedule_lr(&s, 35), 0.001 + 0.009 * (1 + sqrt(0.5)) / 2);
  expect("cosine, step 60 (p 1/2: the mean)", rt_schedule_lr(&s, 60), 0.0055);
  expect("cosine, step 85 (p 3/4)", rt_schedule_lr(&s, 85), 0.001 + 0.009 * (1 - sqrt(0.5)) / 2);
  expect("cosine, step 110 (last)", rt_schedule_lr(&s, 110), 0.001);
  rt_schedule n = {RT_LR_COSINE, 0.01, 0, 0, 4};
  expect("cosine without warmup, step 1", rt_schedule_lr(&n, 1), 0.01 * (1 + sqrt(0.5)) / 2);
  rt_schedule a = {RT_LR_LINEAR, 0.01, 0, 8, 5};
  expect("warmup longer than the run, step 5", rt_schedule_lr(&a, 5), 0.01 * 5 / 8);
  expect("kind 'cosine'", rt_schedule_kind("cosine", &k) == 0 && k == RT_LR_COSINE, 1);
  expect("kind 'step' refused", rt_schedule_kind("step", &k), -1);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
