// The training main of every mtc-compiled model.
//
// Built together with a generated model.c that defines `mtc_models` (see
// model_api.h): picks the rank's model, allocates the model's arena, loads the initial weights
// (weights.bin, or a safetensors file by name), fills the inputs (an llm.c
// token shard, a fixed batch from a safetensors file, or one fixed synthetic
// batch), runs forward / backward / update for --steps steps, prints the loss
// and the speed of every step, and at the end the planned versus measured
// memory. It can dump the first step's gradients and save the trained weights
// as safetensors.
//
// The arena is the device's (device.h): host memory in the CPU build, a GPU's
// in the CUDA build. Everything here reads and writes a host copy of it, the
// stage, at the arena's offsets: weights and inputs are written to the stage
// and put to the device; the loss and the weights to save are got from it.
// Everything train.c writes before the first step (inputs, parameters,
// optimizer state) lies in the persistent part of the arena, [0,
// persistent_bytes).
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "device.h"
#include "dist.h"
#include "kernels.h"
#include "model_api.h"
#include "profile.h"
#include "parts.h"
#include "rng.h"
#include "safetensors.h"
#include "log.h"
#include "schedule.h"
#include "checkpoint.h"
#include "data.h"
#include "tokenizer.h"

// The model this rank runs: its group's (rt_model.rank_end), once the rank is known; before,
// the first, which every model of the program agrees with on what the flags read.
static const rt_model *the_model;
static const rt_model *model(void) { return the_model ? the_model : mtc_models[0]; }

// Bytes of a gradient's element: float32, or bf16 (--grad-precision bf16).
static long grad_size(void) { return model()->grad_dtype == RT_BF16 ? 2 : 4; }

// n elements of esize bytes at src (4: float32, 2: bf16, widened) into n floats.
static void to_floats(float *dst, const char *src, long n, long esize) {
  if (esize == 4) memcpy(dst, src, (size_t)n * 4);
  else rt_cast_host_bf16_f32(dst, (const rt_bf16 *)src, n);
}

static const rt_model *model_of_rank(int rank) {
  int k = 0;
  while (k + 1 < mtc_nmodels && rank >= mtc_models[k]->rank_end) k++;
  return mtc_models[k];
}

// The median step time is over the last this many steps (--steps goes to INT_MAX).
#define TIMED_STEPS (1 << 20)

// ---------------------------------------------------------------------------
// errors

// one line on stderr: "train: error: ...", naming the rank when there are several
static void print_error(const char *fmt, va_list ap) {
  fflush(stdout);
  if (rt_comm_size() > 1) fprintf(stderr, "train: error (rank %d): ", rt_comm_rank());
  else fputs("train: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

// runtime failure: one line on stderr, exit 1
__attribute__((format(printf, 1, 2))) _Noreturn static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  print_error(fmt, ap);
  va_end(ap);
  exit(1);
}

// Every rank stops here, or none does. `stop` says whether this rank must,
// with its message; one collective over the world makes the ranks agree on
// whose message is printed, once: the lowest `key` (a whole number below
// 2^40), then the lowest rank. Every rank exits 1. Returns when none must
// stop.
__attribute__((format(printf, 3, 4))) static void stop_together(bool stop, double key,
                                                                const char *fmt, ...) {
  int n = rt_comm_size();
  double mine = stop ? -(key * n + rt_comm_rank()) : -HUGE_VAL;
  double first = n > 1 ? rt_allreduce_scalar(rt_group_world(), mine, RT_REDUCE_MAX) : mine;
  if (first == -HUGE_VAL) return;
  if (stop && first == mine) {
    va_list ap;
    va_start(ap, fmt);
    print_error(fmt, ap);
    va_end(ap);
  }
  fflush(stdout);
  fflush(stderr);
  rt_comm_finalize();
  exit(1);
}

// bad command line: one line on stderr, exit 2
__attribute__((format(printf, 1, 2))) _Noreturn static void usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("train: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs(" (see --help)\n", stderr);
  va_end(ap);
  exit(2);
}

// ---------------------------------------------------------------------------
// command line

typedef struct {
  int steps;
  rt_hparams h;         // optimizer: compiled-in defaults, then the flags
  uint64_t seed;
  const char *data;     // token shards (a file, glob or folder; data.h); NULL: synthetic
  const char *val_data; // the same for validation (NULL: none)
  int val_every;        // validate every N steps (0: at the end only)
  int val_steps;        // global batches per validation
  bool shuffle;         // --data's windows in an order drawn per epoch (--no-shuffle: in order)
  int sample;           // tokens to generate after training (0: none)
  const char *prompt;   // their prompt as text (the tokenizer encodes it), or
  const char *prompt_tokens;  // as a token shard
  const char *tokenizer;      // tokenizer.bin (NULL: the one beside --data's shards, if any)
  float temperature;    // 0: the most likely token each time
  int top_k;            // draw among the k most likely (0: all)
  double peak_tflops;   // the device's peak for MFU (0: a GPU's published one, if known)
  const char *ckpt_dir; // checkpoints go here (checkpoint.h; NULL: none)
  int ckpt_every;       // ... every N steps (0: at the end and on SIGINT/SIGTERM only)
  int keep;             // ... the newest K of them stay (0: all)
  const char *resume;   // continue from a checkpoint (a --checkpoint-dir, or one step_* folder)
  const char *init_from;  // safetensors: the weights it has by name, over the initial ones
  const char *inputs;   // safetensors: one fixed batch, by input name
  const char *weights;  // NULL: weights.bin here or next to the program
  const char *load;     // safetensors: the weights by name, instead of weights.bin
  const char *save;     // safetensors: the weights at the end
  const char *dump_grads;  // safetensors: the gradients of the first backward
  const char *log;      // JSON lines: a record per step (NULL: none)
  int log_every;
  bool check_finite;    // stop at a non-finite gradient or weight (--no-check-finite: don't)
  bool profile;         // the steps' time by op (profile.h), after the first step
  double grad_clip;     // the most global gradient norm the update sees (0: no clipping)
  rt_schedule sched;    // the learning rate per step (its lr and steps filled in at the end)
} options;

static void print_help(void) {
  printf(
      "usage: train [options]\n"
      "Trains the model '%s' compiled into this program.\n"
      "\n"
      "  --steps N       number of training steps (default 20)\n"
      "  --optimizer adamw|sgd  update rule (default: as compiled)\n"
      "  --lr F --beta1 F --beta2 F --eps F --weight-decay F\n"
      "                  optimizer settings, PyTorch semantics (defaults: as\n"
      "                  compiled; see the first line the program prints)\n"
      "  --lr-schedule constant|linear|cosine  the rate per step (default constant):\n"
      "                  after the warmup, constant at --lr, or decaying to --lr-min\n"
      "                  at the last step, linearly or along a half cosine\n"
      "  --warmup N      steps of linear warmup from lr/N to lr (default 0)\n"
      "  --lr-min F      the rate a decay ends at (default 0)\n"
      "  --grad-clip F   scale the gradients down to a global norm of at most F\n"
      "                  (over every rank's part, as torch.nn.utils.clip_grad_norm_;\n"
      "                  default 0: no clipping); the step line shows the norm\n"
      "  --seed N        seed of the synthetic inputs (default 1337)\n"
      "  --data FILES    llm.c token shards to train on: a file, a glob in quotes\n"
      "                  ('data/*train*.bin') or a folder (its *train*.bin files);\n"
      "                  each epoch visits the shards, and each shard's batches,\n"
      "                  in an order drawn from --seed (default: one fixed\n"
      "                  synthetic batch, reused every step); token inputs of\n"
      "                  different lengths each take the first of a step's tokens\n"
      "  --no-shuffle    read --data's shards and batches in order\n"
      "  --val-data FILES  shards to validate on (a folder: its *val*.bin files);\n"
      "                  the mean loss of --val-steps batches from their start, in\n"
      "                  eval mode (no dropout, no backward), after the last step\n"
      "                  and every --val-every steps\n"
      "  --val-every N   validate every N steps too (default 0: at the end only)\n"
      "  --val-steps N   global batches per validation (default 20)\n"
      "  --sample N      after training, generate N tokens from the weights with\n"
      "                  forwards in eval mode, printed as text through the\n"
      "                  tokenizer (else as token ids); --steps 0 samples only\n"
      "  --prompt TEXT   what the sample continues (default: the end-of-text token)\n"
      "  --prompt-tokens FILE  the same as a token shard (tools/prep_text.py encode)\n"
      "  --tokenizer FILE  tokenizer.bin (tools/prep_text.py writes it; default: the\n"
      "                  one beside --data's shards)\n"
      "  --temperature F  divides the logits (default 1; 0: the most likely token)\n"
      "  --top-k K       draw among the K most likely tokens (default 0: all)\n"
      "  --inputs FILE   a fixed batch, reused every step: a safetensors file with\n"
      "                  one tensor per model input, by name (F32 for float\n"
      "                  inputs, I32 or I64 for integer inputs)\n"
      "  --weights FILE  initial weights: raw float32 parameters in model order\n"
      "                  (default: drawn from the compiled seed, or for a model\n"
      "                  that gives its own values weights.bin in the current\n"
      "                  directory, else next to this program)\n"
      "  --init-from FILE  start from the weights a safetensors file has by name (a\n"
      "                  Hugging Face checkpoint: F32 or BF16; a matrix stored\n"
      "                  transposed, as GPT-2's Conv1D, is transposed), the others\n"
      "                  as initialized (listed); for fine-tuning\n"
      "  --load FILE     initial weights from a safetensors file, by name (F32),\n"
      "                  instead of weights.bin (which still gives the model's\n"
      "                  constants that FILE lacks)\n"
      "  --save FILE     write the weights (and constants) at the end as\n"
      "                  safetensors\n"
      "  --checkpoint-dir DIR  write checkpoints into DIR (step_N folders: weights,\n"
      "                  AdamW moments, step, data position; DIR/latest names the\n"
      "                  newest) at the end, on SIGINT or SIGTERM (then stop), and\n"
      "  --checkpoint-every N  every N steps (default 0: those only)\n"
      "  --keep K        keep the newest K checkpoints (default 0: all)\n"
      "  --resume DIR    continue a run from DIR's latest checkpoint (or a step_N\n"
      "                  folder) up to --steps, on this program's layout\n"
      "  --dump-grads FILE  write every parameter's gradient after the first\n"
      "                  backward (before the first update) as safetensors\n"
      "  --log-every N   print every N steps; the last always prints (default 1);\n"
      "                  each line: step n/N, loss, time, tokens/s, lr, gradient\n"
      "                  norm, the time left (ETA) and, where the peak is known,\n"
      "                  MFU (the model's FLOPs over the device's peak)\n"
      "  --peak-tflops F  the device's peak for MFU (default: a GPU's published\n"
      "                  dense figure in the program's precision; a CPU has none)\n"
      "  --log FILE      write a JSON line per step (step, loss, lr, grad_norm, ms,\n"
      "                  tokens_per_s, gflops_per_s, mfu) and per validation to FILE,\n"
      "                  whatever --log-every (appended to with --resume);\n"
      "                  tools/plot_log.py draws it\n"
      "  --no-check-finite  do not scan the gradients and weights of each step for\n"
      "                  NaN and infinities (the loss is always checked)\n"
      "  --profile       print the steps' time by op after the first step, beside the\n"
      "                  planner's price of the same nodes (on a GPU each op is waited\n"
      "                  for: profiled steps are slower)\n"
      "  -h, --help      show this help\n",
      model()->name);
}

// The text of a number: no leading space or sign that strtol, strtoull and
// strtod would skip or take ("-1" is 2^64 - 1 to strtoull).
static bool plain_number(const char *s, bool sign) {
  return *s != '\0' && !isspace((unsigned char)*s) && (sign || (*s != '-' && *s != '+'));
}

// an integer in [lo, hi], or a usage error naming the flag
static long parse_int(const char *flag, const char *s, long lo, long hi,
                      const char *what) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (!plain_number(s, true) || *end != '\0' || errno || v < lo || v > hi)
    usage_error("%s expects %s, got '%s'", flag, what, s);
  return v;
}

// A setting the program uses as float32, in [0, hi) (hi: 1, the betas) or in
// [0, FLT_MAX] (hi: 0). Checked after the conversion too: a value float32
// rounds to infinity, to hi, or from non-zero to 0 is a usage error that says
// what it became and the range float32 allows.
static float parse_float(const char *flag, const char *s, double hi) {
  char range[128];
  if (hi > 0) snprintf(range, sizeof range, "a number in [0, %g)", hi);
  else snprintf(range, sizeof range, "a number in [0, %g]", (double)FLT_MAX);
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (!plain_number(s, true) || *end != '\0' || (errno && errno != ERANGE) || !isfinite(v) ||
      v < 0.0 || (hi > 0 && v >= hi))
    usage_error("%s expects %s, got '%s'", flag, range, s);
  float f = (float)v;
  if (!isfinite(f))
    usage_error("%s expects %s, got '%s', which is infinite in float32", flag, range, s);
  if (hi > 0 && f >= (float)hi)
    usage_error("%s expects %s, got '%s', which is %g in float32 (the largest below it is %.9g)",
                flag, range, s, (double)f, (double)nextafterf((float)hi, 0.0f));
  if (f == 0.0f && v != 0.0)
    usage_error("%s expects %s, got '%s', which is 0 in float32 (the smallest non-zero value "
                "is %g)", flag, range, s, (double)FLT_TRUE_MIN);
  return f;
}

static options parse_args(int argc, char **argv) {
  options o = {.steps = 20, .h = model()->defaults, .seed = 1337, .data = NULL,
               .weights = NULL, .log_every = 1, .check_finite = true, .val_steps = 20,
               .shuffle = true, .temperature = 1.0f};
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
      print_help();
      exit(0);
    }
    if (strncmp(arg, "--", 2) != 0) usage_error("unexpected argument '%s'", arg);
    if (!strcmp(arg, "--no-check-finite")) {
      o.check_finite = false;
      continue;
    }
    if (!strcmp(arg, "--profile")) {
      o.profile = true;
      continue;
    }
    if (!strcmp(arg, "--no-shuffle")) {
      o.shuffle = false;
      continue;
    }
    // --flag VALUE or --flag=VALUE
    char name[64];
    const char *eq = strchr(arg, '='), *val = NULL;
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    if (len >= sizeof name) len = sizeof name - 1;
    memcpy(name, arg, len);
    name[len] = '\0';
    const char *expects;
    if (!strcmp(name, "--log-every") || !strcmp(name, "--val-steps"))
      expects = "an integer in [1, 2147483647]";
    else if (!strcmp(name, "--warmup") || !strcmp(name, "--val-every") ||
             !strcmp(name, "--steps") || !strcmp(name, "--sample") || !strcmp(name, "--top-k") ||
             !strcmp(name, "--checkpoint-every") || !strcmp(name, "--keep"))
      expects = "an integer in [0, 2147483647]";
    else if (!strcmp(name, "--lr-schedule"))
      expects = "constant, linear or cosine";
    else if (!strcmp(name, "--seed"))
      expects = "an integer in [0, 18446744073709551615]";
    else if (!strcmp(name, "--lr") || !strcmp(name, "--beta1") || !strcmp(name, "--beta2") ||
             !strcmp(name, "--eps") || !strcmp(name, "--weight-decay") || !strcmp(name, "--lr-min") ||
             !strcmp(name, "--grad-clip") || !strcmp(name, "--temperature") ||
             !strcmp(name, "--peak-tflops"))
      expects = "a non-negative number";
    else if (!strcmp(name, "--prompt"))
      expects = "a text";
    else if (!strcmp(name, "--optimizer"))
      expects = "adamw or sgd";
    else if (!strcmp(name, "--data") || !strcmp(name, "--weights") ||
             !strcmp(name, "--inputs") || !strcmp(name, "--load") || !strcmp(name, "--save") ||
             !strcmp(name, "--dump-grads") || !strcmp(name, "--log") ||
             !strcmp(name, "--val-data") || !strcmp(name, "--prompt-tokens") ||
             !strcmp(name, "--tokenizer") || !strcmp(name, "--checkpoint-dir") ||
             !strcmp(name, "--resume") || !strcmp(name, "--init-from"))
      expects = "a file name";
    else
      usage_error("unknown option '%s'", arg);
    if (eq) val = eq + 1;
    else if (i + 1 < argc) val = argv[++i];
    else usage_error("%s expects %s, but no value was given", name, expects);

    if (!strcmp(name, "--steps")) {
      o.steps = (int)parse_int(name, val, 0, INT_MAX, expects);
    } else if (!strcmp(name, "--sample")) {
      o.sample = (int)parse_int(name, val, 0, INT_MAX, expects);
    } else if (!strcmp(name, "--checkpoint-every")) {
      o.ckpt_every = (int)parse_int(name, val, 0, INT_MAX, expects);
    } else if (!strcmp(name, "--keep")) {
      o.keep = (int)parse_int(name, val, 0, INT_MAX, expects);
    } else if (!strcmp(name, "--top-k")) {
      o.top_k = (int)parse_int(name, val, 0, INT_MAX, expects);
    } else if (!strcmp(name, "--peak-tflops")) {
      o.peak_tflops = parse_float(name, val, 0);
    } else if (!strcmp(name, "--temperature")) {
      o.temperature = parse_float(name, val, 0);
    } else if (!strcmp(name, "--prompt")) {
      o.prompt = val;
    } else if (!strcmp(name, "--log-every")) {
      o.log_every = (int)parse_int(name, val, 1, INT_MAX, expects);
    } else if (!strcmp(name, "--val-steps")) {
      o.val_steps = (int)parse_int(name, val, 1, INT_MAX, expects);
    } else if (!strcmp(name, "--val-every")) {
      o.val_every = (int)parse_int(name, val, 0, INT_MAX, expects);
    } else if (!strcmp(name, "--seed")) {
      char *end;
      errno = 0;
      unsigned long long v = strtoull(val, &end, 10);
      if (!plain_number(val, false) || *end != '\0' || errno)
        usage_error("%s expects %s, got '%s'", name, expects, val);
      o.seed = (uint64_t)v;
    } else if (!strcmp(name, "--warmup")) {
      o.sched.warmup = parse_int(name, val, 0, INT_MAX, expects);
    } else if (!strcmp(name, "--lr-schedule")) {
      if (rt_schedule_kind(val, &o.sched.kind)) usage_error("%s expects %s, got '%s'", name, expects, val);
    } else if (!strcmp(name, "--lr-min")) {
      o.sched.lr_min = parse_float(name, val, 0);
    } else if (!strcmp(name, "--grad-clip")) {
      o.grad_clip = parse_float(name, val, 0);
    } else if (!strcmp(name, "--lr")) {
      o.h.lr = parse_float(name, val, 0);
    } else if (!strcmp(name, "--beta1")) {
      o.h.beta1 = parse_float(name, val, 1);
    } else if (!strcmp(name, "--beta2")) {
      o.h.beta2 = parse_float(name, val, 1);
    } else if (!strcmp(name, "--eps")) {
      o.h.eps = parse_float(name, val, 0);
    } else if (!strcmp(name, "--weight-decay")) {
      o.h.weight_decay = parse_float(name, val, 0);
    } else if (!strcmp(name, "--optimizer")) {
      if (!strcmp(val, "adamw")) o.h.optimizer = RT_OPT_ADAMW;
      else if (!strcmp(val, "sgd")) o.h.optimizer = RT_OPT_SGD;
      else usage_error("%s expects %s, got '%s'", name, expects, val);
      if (o.h.optimizer == RT_OPT_ADAMW && !model()->has_adam_state)
        usage_error("--optimizer adamw: this program was compiled for SGD and has no AdamW "
                    "state; recompile with mtc compile --optimizer adamw");
    } else {  // a file name
      if (*val == '\0') usage_error("%s expects %s, got ''", name, expects);
      if (!strcmp(name, "--data")) o.data = val;
      else if (!strcmp(name, "--inputs")) o.inputs = val;
      else if (!strcmp(name, "--weights")) o.weights = val;
      else if (!strcmp(name, "--load")) o.load = val;
      else if (!strcmp(name, "--save")) o.save = val;
      else if (!strcmp(name, "--log")) o.log = val;
      else if (!strcmp(name, "--val-data")) o.val_data = val;
      else if (!strcmp(name, "--prompt-tokens")) o.prompt_tokens = val;
      else if (!strcmp(name, "--tokenizer")) o.tokenizer = val;
      else if (!strcmp(name, "--checkpoint-dir")) o.ckpt_dir = val;
      else if (!strcmp(name, "--resume")) o.resume = val;
      else if (!strcmp(name, "--init-from")) o.init_from = val;
      else o.dump_grads = val;
    }
  }
  if (o.data && o.inputs) usage_error("--data and --inputs exclude each other");
  if (o.val_every && !o.val_data) usage_error("--val-every: give the data with --val-data");
  if (o.prompt && o.prompt_tokens) usage_error("--prompt and --prompt-tokens exclude each other");
  if ((o.ckpt_every || o.keep) && !o.ckpt_dir)
    usage_error("--checkpoint-every and --keep: give the folder with --checkpoint-dir");
  if (o.resume && (o.load || o.weights || o.init_from))
    usage_error("--resume gives the weights: leave out --load, --weights and --init-from");
  if (o.init_from && o.load)
    usage_error("--init-from and --load exclude each other (--load needs every parameter)");
  if ((o.prompt || o.prompt_tokens || o.top_k) && !o.sample)
    usage_error("--prompt, --prompt-tokens and --top-k are for sampling: give --sample N");
  if (o.sample && model()->logits_offset < 0)
    usage_error("--sample: the model '%s' has no next-token logits to sample from (a "
                "cross-entropy over its token input's next tokens, not split over tensor-parallel "
                "ranks)", model()->name);
  o.sched.lr = o.h.lr;
  o.sched.steps = o.steps;
  if (o.sched.kind != RT_LR_CONSTANT && o.sched.lr_min > o.sched.lr)
    usage_error("--lr-min %g is above --lr %g: a decay ends below where it starts", o.sched.lr_min,
                o.sched.lr);
  if (o.sched.kind == RT_LR_CONSTANT && o.sched.lr_min > 0)
    usage_error("--lr-min is the end of a decay: give --lr-schedule linear or cosine");
  // the host's threads (offloaded AdamW): rt_host_threads reads it at each update
  const char *threads = getenv("MTC_HOST_THREADS");
  if (threads)
    parse_int("MTC_HOST_THREADS", threads, 1, 256, "an integer in [1, 256] (the environment)");
  return o;
}

// ---------------------------------------------------------------------------
// model table checks

// The ranks the program runs on: dp replicas of tp ranks or of a grid.
static int world_ranks(void) {
  return model()->dp * model()->tp * model()->grid_side * model()->grid_side;
}

// The micro-batches replica d runs per step, and the first of them in the
// global batch (the replicas before it run the ones before).
static int replica_micro(int d) {
  return model()->replica_micro ? model()->replica_micro[d] : model()->micro_batches;
}

static long first_micro(int d) {
  long k = 0;
  for (int r = 0; r < d; r++) k += replica_micro(r);
  return k;
}

// micro-batches per step, all replicas together
static long micro_total(void) { return first_micro(model()->dp); }

// The sequences (rows) of replica d's micro-batches, the first row of its first in the step's
// global batch (the replicas before it hold the ones before), and the step's rows.
static long replica_rows(int d) {
  return model()->replica_rows ? model()->replica_rows[d] : model()->batch_rows;
}

static long first_row(int d) {
  long r = 0;
  for (int k = 0; k < d; k++) r += replica_micro(k) * replica_rows(k);
  return r;
}

static long rows_total(void) { return first_row(model()->dp); }

// The rows this rank's inputs hold of a micro-batch (a grid program's rows cut it).
static long rank_rows(void) {
  long r = replica_rows(rt_dist.dp_rank) / model()->grid_side;
  return r > 0 ? r : 1;
}

// Is parameter t split over ranks (tensor parallel, a 2D grid), or padded?
static bool is_split(const rt_tensor *t) { return t->split[0].dim >= 0; }

// Elements this rank holds of t.
static long local_numel(const rt_tensor *t) {
  long n = t->numel;
  for (int k = 0; k < 2 && t->split[k].dim >= 0; k++) {
    const rt_split *s = &t->split[k];
    n = n / t->sizes[s->dim] * ((t->sizes[s->dim] + s->pad) / rt_axis_size(s->axis));
  }
  return n;
}

// The elements of this rank's shard of bucket k (of the whole over the ranks along its
// shard_axis: dp, or every rank; along dp, in the ratio of the model's dp_parts), and its first.
static const int *shard_parts(const rt_bucket *k) {
  return k->shard_axis == RT_AXIS_DP ? model()->dp_parts : NULL;
}
static long shard_start(const rt_bucket *k, long *len) {
  return rt_part(k->numel, shard_parts(k), rt_axis_size(k->shard_axis),
                 rt_axis_rank(k->shard_axis), len);
}
static long shard_numel(const rt_bucket *k) {
  long len;
  shard_start(k, &len);
  return len;
}

// This rank's part of bucket k's parameters, the whole bucket where it is not
// sharded: its first element in the bucket (*lo) and its size. Its last
// k->host_numel are in the host region (bf16 offload), the others in the arena.
static long bucket_part(const rt_bucket *k, bool sharded, long *lo) {
  long len = k->numel;
  *lo = sharded ? shard_start(k, &len) : 0;
  return len;
}
static long params_part(const rt_bucket *k, long *lo) {
  return bucket_part(k, k->params_sharded, lo);
}

static void check_table(void) {
  const rt_model *M = model();
  if (M->arena_bytes <= 0 || M->persistent_bytes < 0 || M->persistent_bytes > M->arena_bytes)
    fail("model table: arena_bytes is %ld, persistent_bytes %ld", M->arena_bytes,
         M->persistent_bytes);
  for (int pass = 0; pass < 2; pass++) {
    int n = pass ? M->n_inputs : M->n_params;
    const rt_tensor *ts = pass ? M->inputs : M->params;
    for (int i = 0; i < n; i++) {
      const rt_tensor *t = &ts[i];
      long bytes = local_numel(t) * 4;  // f32 and i32 alike
      // train.c writes inputs and parameters at their offsets, except those in a
      // bucket (written as the bucket, checked below)
      long room = pass || t->bucket < 0 ? M->persistent_bytes : M->arena_bytes;
      // a parameter held only as its bucket's shards (bf16 masters under ZeRO-1-3)
      // or partly in the host region (bf16 offload) has no buffer of its own:
      // written and read as the bucket
      bool shards_only = !pass && t->bucket >= 0 && (M->buckets[t->bucket].params_sharded ||
                                                     M->buckets[t->bucket].host_numel);
      if (t->offset < 0 || t->numel < 0 || (!shards_only && t->offset + bytes > room))
        fail("model table: %s '%s' (offset %ld, %ld elements) lies outside the %s %ld "
             "bytes of the arena", pass ? "input" : "parameter", t->name, t->offset, t->numel,
             room == M->arena_bytes ? "whole" : "persistent", room);
      long numel = 1;
      for (int k = 0; k < t->rank && k < RT_MAXRANK; k++) numel *= t->sizes[k];
      if (t->rank < 0 || t->rank > RT_MAXRANK || numel != t->numel)
        fail("model table: %s '%s' has rank %d and %ld elements, but its sizes "
             "multiply to %ld", pass ? "input" : "parameter", t->name, t->rank,
             t->numel, numel);
    }
  }
  for (int i = 0; i < M->n_params; i++) {
    const rt_tensor *p = &M->params[i];
    long at = M->grad_offsets[i], bytes = local_numel(p) * grad_size();
    if (at < 0 || at + bytes > M->arena_bytes)
      fail("model table: the gradient of '%s' (offset %ld) lies outside the arena",
           M->params[i].name, at);
  }
  for (int b = 0; b < M->n_buckets; b++) {
    const rt_bucket *k = &M->buckets[b];
    long lo, bytes = (params_part(k, &lo) - k->host_numel) * 4;
    if (k->params_offset < 0 || bytes < 0 || k->params_offset + bytes > M->persistent_bytes)
      fail("model table: bucket %s (offset %ld) lies outside the persistent %ld bytes of the "
           "arena", k->name, k->params_offset, M->persistent_bytes);
    if (k->host_numel && (k->host_offset < 0 || k->host_offset + 4 * k->host_numel > M->host_bytes))
      fail("model table: the host's part of bucket %s (offset %ld) lies outside the %ld bytes "
           "of the host region", k->name, k->host_offset, M->host_bytes);
    long end = k->grads_offset + grad_size() * k->grads_numel;
    if (k->grads_offset < 0 || end > (k->grads_host ? M->host_bytes : M->arena_bytes))
      fail("model table: the reduced gradient of bucket %s (offset %ld) lies outside the %s",
           k->name, k->grads_offset, k->grads_host ? "host region" : "arena");
  }
  for (int i = 0; i < M->n_params; i++)
    for (int k = 0; k < 2; k++) {
      long at = M->adam_offsets[2 * i + k];
      if (at >= 0 && at + local_numel(&M->params[i]) * 4 > M->persistent_bytes)
        fail("model table: the AdamW moments of '%s' (offset %ld) lie outside the persistent "
             "%ld bytes of the arena", M->params[i].name, at, M->persistent_bytes);
    }
  for (int b = 0; b < M->n_buckets; b++) {
    const rt_bucket *k = &M->buckets[b];
    long part = k->state_sharded ? shard_numel(k) : k->numel, dev = part - k->state_host_numel;
    long m[2] = {k->m_offset, k->v_offset}, h[2] = {k->m_host_offset, k->v_host_offset};
    for (int j = 0; j < 2; j++)
      if ((m[j] >= 0 && m[j] + dev * 4 > M->persistent_bytes) ||
          (h[j] >= 0 && h[j] + k->state_host_numel * 4 > M->host_bytes))
        fail("model table: the AdamW moments of bucket %s lie outside the arena or the host "
             "region", k->name);
  }
  if (M->dropout_step_offset >= M->persistent_bytes)
    fail("model table: the dropout counter (offset %ld) lies outside the persistent arena",
         M->dropout_step_offset);
  if (M->logits_offset >= 0 &&
      M->logits_offset + M->logits_rows * M->logits_vocab * rt_dtype_size(M->logits_dtype) >
          M->arena_bytes)
    fail("model table: the logits (offset %ld) lie outside the arena", M->logits_offset);
  if (M->loss_offset < 0 || M->loss_offset + 4 > M->arena_bytes)
    fail("model table: loss offset %ld lies outside the arena", M->loss_offset);
}

// ---------------------------------------------------------------------------
// where parameters and gradients are
//
// A parameter in a bucket (multi-rank programs) is read and written through
// a host image of its whole bucket: load_weights fills the images and
// scatter_images puts each rank's part into the arena; gather_images makes
// the images whole again from every rank's part (all-gather) for --save and
// --dump-grads. Other parameters and the constants are at their offsets.
// The images (and the whole tensors below) exist only while weights are
// read or written, so that training holds no more than the arena and the
// host region.

//
// A parameter split over ranks (tensor parallel, a 2D grid) is read and
// written whole on the host (whole[i]); tp_scatter gives each rank its part
// of it, tp_gather makes it whole again from every rank's part, element by
// element through whole_index (runtime/dist.h has the layout). A padded
// vocabulary's padding is in no whole tensor: its elements are zeros.

static float **images;  // per bucket: numel floats
static float **whole;   // per parameter: the whole tensor of one split over tp, else NULL
static float **widened; // bf16 gradients outside the buckets, per parameter: its gradient
                        // widened to floats (gather_images), else NULL
static rt_tensor *IN;   // the inputs over the global batch (see make_global_inputs)
static int NIN;
static char *global;    // their values
static long global_bytes;

// What the images and whole tensors hold: the parameters (float32: bf16's
// masters), their gradients, or AdamW's first or second moments, all laid out
// alike (a bucket's moments are its parameters' part).
typedef enum { VIEW_PARAMS, VIEW_GRADS, VIEW_M, VIEW_V } view;

// This rank's values of parameter i (its part when split over tp) in view w.
static char *local_ptr(char *arena, int i, view w) {
  const rt_model *M = model();
  const rt_tensor *p = &M->params[i];
  if (p->bucket >= 0) return (char *)(images[p->bucket] + p->bucket_elem);
  switch (w) {
    case VIEW_PARAMS: return arena + p->offset;
    case VIEW_GRADS: return widened[i] ? (char *)widened[i] : arena + M->grad_offsets[i];
    default: return arena + M->adam_offsets[2 * i + (w == VIEW_V)];
  }
}

// Parameter i in view w: the whole tensor.
static char *view_ptr(char *arena, int i, view w) {
  return whole[i] ? (char *)whole[i] : local_ptr(arena, i, w);
}

static char *param_ptr(char *arena, int i) { return view_ptr(arena, i, VIEW_PARAMS); }

static void free_images(void) {
  const rt_model *M = model();
  for (int b = 0; images && b < M->n_buckets; b++)
    free(images[b]);
  for (int i = 0; whole && i < M->n_params; i++)
    free(whole[i]), free(widened[i]);
  free(images), free(whole), free(widened);
  images = NULL, whole = NULL, widened = NULL;
}

static void alloc_images(void) {
  const rt_model *M = model();
  images = calloc((size_t)M->n_buckets + 1, sizeof *images);
  whole = calloc((size_t)M->n_params + 1, sizeof *whole);
  widened = calloc((size_t)M->n_params + 1, sizeof *widened);
  if (!images || !whole || !widened) fail("out of memory");
  for (int b = 0; b < M->n_buckets; b++)
    if (!(images[b] = calloc((size_t)M->buckets[b].numel, sizeof(float))))
      fail("out of memory for the image of bucket %s", M->buckets[b].name);
  for (int i = 0; i < M->n_params; i++)
    if (is_split(&M->params[i]) && !(whole[i] = calloc((size_t)M->params[i].numel, 4)))
      fail("out of memory for parameter %s", M->params[i].name);
}

// Element j of the part of parameter p that the rank at place `at` of a
// replica (rt_dist.tp_rank's numbering) holds, as an index of the whole
// tensor; -1 in a padded vocabulary's padding. A split dim of whole size d
// (+ pad) in P pieces over n ranks holds, in each piece, the rank's
// contiguous (d + pad) / (P n).
static long whole_index_at(const rt_tensor *p, long j, int at) {
  long local[RT_MAXRANK], idx = 0;
  for (int k = p->rank - 1; k >= 0; k--) {   // j's coordinates in the part
    long size = p->sizes[k];
    for (int s = 0; s < 2; s++)
      if (p->split[s].dim == k)
        size = (size + p->split[s].pad) / rt_axis_size(p->split[s].axis);
    local[k] = j % size;
    j /= size;
  }
  for (int k = 0; k < p->rank; k++) {
    long c = local[k];
    for (int s = 0; s < 2; s++) {
      const rt_split *sp = &p->split[s];
      if (sp->dim != k) continue;
      int n = rt_axis_size(sp->axis), r = rt_axis_place(sp->axis, at);
      long chunk = (p->sizes[k] + sp->pad) / ((long)n * sp->pieces);
      c = ((c / chunk) * n + r) * chunk + c % chunk;
      if (c >= p->sizes[k]) return -1;   // padding
    }
    idx = idx * p->sizes[k] + c;
  }
  return idx;
}

// ... of the part this rank holds.
static long whole_index(int i, long j) {
  const rt_tensor *p = &model()->params[i];
  return is_split(p) ? whole_index_at(p, j, rt_dist.tp_rank) : j;
}

// The whole parameters into this rank's parts.
static bool has_moments(int i);

// Whether parameter i has values in view w (the moments: where AdamW keeps them).
static bool has_view(int i, view w) { return (w != VIEW_M && w != VIEW_V) || has_moments(i); }

static void tp_scatter(char *arena, view w) {
  const rt_model *M = model();
  for (int i = 0; i < M->n_params; i++) {
    if (!whole[i] || !has_view(i, w)) continue;
    float *part = (float *)local_ptr(arena, i, w);
    for (long j = 0, n = local_numel(&M->params[i]); j < n; j++) {
      long k = whole_index(i, j);
      part[j] = k < 0 ? 0.0f : whole[i][k];
    }
  }
}

// Every replica rank's part into the whole tensors of view w.
static void tp_gather(char *arena, view w) {
  const rt_model *M = model();
  int ranks = rt_replica_ranks();
  for (int i = 0; i < M->n_params; i++) {
    if (!whole[i] || !has_view(i, w)) continue;
    const rt_tensor *p = &M->params[i];
    long n = local_numel(p);
    float *parts = malloc((size_t)(n * ranks) * sizeof *parts + 1);
    if (!parts) fail("out of memory");
    memcpy(parts + rt_dist.tp_rank * n, local_ptr(arena, i, w), (size_t)n * 4);
    rt_allgather(rt_dist.group[RT_AXIS_TP], parts, n * ranks, NULL);
    for (int r = 0; r < ranks; r++)
      for (long j = 0; j < n; j++) {
        long k = whole_index_at(p, j, r);
        if (k >= 0) whole[i][k] = parts[r * n + j];
      }
    free(parts);
  }
}

static char *host_region;  // the host region (offload), NULL: none

// This rank's part of bucket k's AdamW moments: elements [*lo, *lo + part).
static long state_part(const rt_bucket *k, long *lo) {
  return bucket_part(k, k->state_sharded, lo);
}

// The images into the arena (and the host region): the whole bucket, or this
// rank's shard of it; the parameters or the moments.
static void scatter_images(char *arena, view w) {
  const rt_model *M = model();
  for (int b = 0; b < M->n_buckets; b++) {
    const rt_bucket *k = &M->buckets[b];
    if (w == VIEW_M || w == VIEW_V) {
      long lo, n = state_part(k, &lo), dev = n - k->state_host_numel;
      long at = w == VIEW_M ? k->m_offset : k->v_offset;
      long host = w == VIEW_M ? k->m_host_offset : k->v_host_offset;
      if (at >= 0) memcpy(arena + at, images[b] + lo, (size_t)dev * 4);
      if (host >= 0)
        memcpy(host_region + host, images[b] + lo + dev, (size_t)k->state_host_numel * 4);
      continue;
    }
    long lo, n = params_part(k, &lo), dev = n - k->host_numel;
    memcpy(arena + k->params_offset, images[b] + lo, (size_t)dev * 4);
    if (k->host_numel)
      memcpy(host_region + k->host_offset, images[b] + lo + dev, (size_t)k->host_numel * 4);
  }
}

// This rank's shard of bucket k's reduced gradients (grads) or parameters:
// elements [*lo, *lo + part) of the bucket, the first at byte offset *at.
// Where the bucket is whole on every rank (not sharded), the shards of the
// ranks along its shard_axis together cover it.
static void bucket_shard(const rt_bucket *k, bool grads, long *lo, long *at) {
  long part;
  *lo = shard_start(k, &part);
  bool sharded = grads ? k->grads_sharded : k->params_sharded;
  long have = grads ? (sharded ? k->grads_numel : k->numel) : sharded ? part : k->numel;
  *at = (grads ? k->grads_offset : k->params_offset) +
        (have == k->numel ? *lo * (grads ? grad_size() : 4) : 0);
}

// The images from the arena (save_view has waited for the collectives):
// the parameters, the reduced gradients or the moments.
static void gather_images(char *arena, view w) {
  const rt_model *M = model();
  for (int b = 0; b < M->n_buckets; b++) {
    const rt_bucket *k = &M->buckets[b];
    if (w == VIEW_M || w == VIEW_V) {
      long lo, n = state_part(k, &lo), dev = n - k->state_host_numel;
      long at = w == VIEW_M ? k->m_offset : k->v_offset;
      long host = w == VIEW_M ? k->m_host_offset : k->v_host_offset;
      if (at >= 0) memcpy(images[b] + lo, arena + at, (size_t)dev * 4);
      if (host >= 0)
        memcpy(images[b] + lo + dev, host_region + host, (size_t)k->state_host_numel * 4);
      if (k->state_sharded) rt_allgather(rt_dist.group[k->shard_axis], images[b], k->numel, NULL);
      continue;
    }
    if (w == VIEW_PARAMS) {
      long lo, n = params_part(k, &lo), dev = n - k->host_numel;
      memcpy(images[b] + lo, arena + k->params_offset, (size_t)dev * 4);
      if (k->host_numel)
        memcpy(images[b] + lo + dev, host_region + k->host_offset, (size_t)k->host_numel * 4);
      if (k->params_sharded)
        rt_allgather(rt_dist.group[k->shard_axis], images[b], k->numel, NULL);
      continue;
    }
    char *from = k->grads_host ? host_region : arena;  // (gradient offload: the host's)
    if (!k->grads_sharded) {
      to_floats(images[b], from + k->grads_offset, k->numel, grad_size());
      continue;
    }
    long lo, at;
    bucket_shard(k, true, &lo, &at);
    to_floats(images[b] + lo, from + at, shard_numel(k), grad_size());
    rt_allgather(rt_dist.group[k->shard_axis], images[b], k->numel, NULL);
  }
  for (int i = 0; w == VIEW_GRADS && grad_size() != 4 && i < M->n_params; i++) {
    const rt_tensor *p = &M->params[i];
    if (p->bucket >= 0 || p->kind != RT_PARAM_TRAINED) continue;
    long n = local_numel(p);
    if (!(widened[i] = malloc((size_t)n * sizeof(float) + 1))) fail("out of memory");
    to_floats(widened[i], arena + M->grad_offsets[i], n, grad_size());
  }
}

// ---------------------------------------------------------------------------
// weights

static int host_is_big_endian(void) {
  const uint16_t one = 1;
  return *(const uint8_t *)&one == 0;
}

// path opened for reading if it is a regular file (its stat into *st); NULL
// with errno when it cannot be opened; a folder, a FIFO or a device fails with
// a message that names `what` (a FIFO is opened without waiting for a writer).
static FILE *open_regular(const char *what, const char *path, struct stat *st) {
  char err[1024];
  int fd = rt_st_open_regular(path, st, err, sizeof err);
  if (fd == -2) fail("%s %s", what, err);
  if (fd < 0) return NULL;
  FILE *f = fdopen(fd, "rb");
  if (!f) fail("cannot open %s %s: %s", what, path, strerror(errno));
  return f;
}

// opens --weights, or weights.bin in the current directory, or weights.bin
// in the directory of the program; the path used goes into `path`, its stat
// into *st
static FILE *open_weights(const char *given, const char *argv0, char *path,
                          size_t cap, struct stat *st) {
  if (given) {
    snprintf(path, cap, "%s", given);
    FILE *f = open_regular("weights file", path, st);
    if (!f) fail("cannot open weights file %s: %s", path, strerror(errno));
    return f;
  }
  snprintf(path, cap, "weights.bin");
  FILE *f = open_regular("weights file", path, st);
  if (f) return f;
  // the directory of argv[0], or of the executable when argv[0] has no '/'
  char dir[4096];
  const char *slash = strrchr(argv0, '/');
  if (slash) {
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - argv0), argv0);
  } else {
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    dir[n > 0 ? n : 0] = '\0';
    char *s = strrchr(dir, '/');
    if (s) *s = '\0';
    else snprintf(dir, sizeof dir, ".");
  }
  if (dir[0] == '\0') snprintf(dir, sizeof dir, "/");
  snprintf(path, cap, "%s/weights.bin", dir);
  f = open_regular("weights file", path, st);
  if (!f)
    fail("cannot find weights.bin in the current directory or in %s (use "
         "--weights FILE)", dir);
  return f;
}

// The params table's tensors from weights.bin, except those marked in `done`
// (NULL: none; --load filled them).
static void load_weights(char *arena, const char *given, const char *argv0, const bool *done) {
  const rt_model *M = model();
  char path[4200];
  struct stat st;
  FILE *f = open_weights(given, argv0, path, sizeof path, &st);
  long expected = 0;
  for (int i = 0; i < M->n_params; i++) expected += M->params[i].numel * 4;
  if ((long long)st.st_size != (long long)expected)
    fail("%s has %lld bytes, the model expects %ld", path, (long long)st.st_size,
         expected);
  for (int i = 0; i < M->n_params; i++) {
    const rt_tensor *p = &M->params[i];
    float *dst = (float *)param_ptr(arena, i);
    if (done && done[i]) {
      if (fseek(f, p->numel * 4, SEEK_CUR) != 0) fail("cannot seek in %s", path);
      continue;
    }
    if (fread(dst, 4, (size_t)p->numel, f) != (size_t)p->numel)
      fail("cannot read parameter '%s' from %s", p->name, path);
    if (host_is_big_endian()) {  // the file is little-endian
      uint32_t *w = (uint32_t *)dst;
      for (long j = 0; j < p->numel; j++) w[j] = __builtin_bswap32(w[j]);
    }
  }
  fclose(f);
}

// The initial values of a model that gives none (rt_model.weights_file 0),
// drawn as mtc compile --seed would have written them into weights.bin: each
// parameter from its own stream (rt_rng_init_normal), whatever the layout.
static void draw_weights(char *arena, const bool *done) {
  const rt_model *M = model();
  for (int i = 0; i < M->n_params; i++) {
    const rt_tensor *p = &M->params[i];
    if (done && done[i]) continue;
    float *dst = (float *)param_ptr(arena, i);
    if (p->init == RT_INIT_NORMAL) {
      rt_rng_init_normal(dst, p->numel, p->init_std, M->init_seed, i);
    } else {
      float v = p->init == RT_INIT_ONES ? 1.0f : 0.0f;
      for (long j = 0; j < p->numel; j++) dst[j] = v;
    }
  }
}

// ---------------------------------------------------------------------------
// safetensors files: --inputs, --load, --save, --dump-grads

// "[4, 64, 128]"
static const char *sizes_str(char *buf, size_t cap, int rank, const long *sizes) {
  int n = snprintf(buf, cap, "[");
  for (int k = 0; k < rank && n < (int)cap; k++)
    n += snprintf(buf + n, cap - (size_t)n, "%s%ld", k ? ", " : "", sizes[k]);
  if (n < (int)cap) snprintf(buf + n, cap - (size_t)n, "]");
  return buf;
}

static void open_safetensors(rt_st_file *f, const char *flag, const char *path) {
  char err[1024];
  if (rt_st_read(f, path, err, sizeof err)) fail("%s: %s", flag, err);
}

// The tensor of f named like t, with t's shape; `flag` and `what` ("input",
// "parameter") are for the messages.
static const rt_st_tensor *find_like(const rt_st_file *f, const char *flag, const char *path,
                                     const rt_tensor *t, const char *what) {
  const rt_st_tensor *s = rt_st_find(f, t->name);
  if (!s) {
    char names[512] = "";
    for (int i = 0; i < f->n && strlen(names) < 400; i++)
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", i ? ", " : "",
               f->tensors[i].name);
    fail("%s %s: no tensor named '%s' (the model's %s, shape %s); the file has %d: %s%s",
         flag, path, t->name, what, t->shape, f->n, names,
         strlen(names) >= 400 ? ", ..." : "");
  }
  bool same = s->rank == t->rank;
  for (int k = 0; same && k < t->rank; k++) same = s->shape[k] == t->sizes[k];
  if (!same) {
    char got[256], want[256];
    fail("%s %s: tensor '%s' has shape %s, the model's %s expects %s (%s)", flag, path,
         t->name, sizes_str(got, sizeof got, s->rank, s->shape), what,
         sizes_str(want, sizeof want, t->rank, t->sizes), t->shape);
  }
  return s;
}

// Tensors of f that are not in the table are ignored, with a note.
static void note_unused(const rt_st_file *f, const char *flag, const char *path,
                        const rt_tensor *table, int n, const char *what) {
  for (int i = 0; i < f->n; i++) {
    int k = 0;
    while (k < n && strcmp(table[k].name, f->tensors[i].name)) k++;
    if (k == n)
      fprintf(stderr, "train: note: %s %s: ignoring tensor '%s' (not a model %s)\n", flag,
              path, f->tensors[i].name, what);
  }
}

// s into t's buffer: F32 or BF16 (widened, exactly) for a float tensor, I32 or
// I64 for an int32 one.
static void copy_in(char *dst, const rt_tensor *t, const rt_st_tensor *s, const char *flag,
                    const char *path, const char *what) {
  const char *got = rt_st_dtype_name(s->dtype);
  if (t->dtype == RT_F32) {
    if (s->dtype != RT_ST_F32 && s->dtype != RT_ST_BF16)
      fail("%s %s: tensor '%s' is %s; the model's %s is float32: expected F32 or BF16", flag,
           path, t->name, got, what);
    rt_st_to_f32(s, (float *)dst);
    return;
  }
  if (s->dtype != RT_ST_I32 && s->dtype != RT_ST_I64)
    fail("%s %s: tensor '%s' is %s; the model's %s is int32: expected I32 or I64", flag, path,
         t->name, got, what);
  char err[512];
  if (rt_st_to_i32(s, (int32_t *)dst, err, sizeof err))
    fail("%s %s: %s", flag, path, err);
}

// --load: every parameter by name, of its shape, F32; the constants the file
// has (done[i] marks what was loaded; weights.bin gives the rest).
static void load_named_weights(char *arena, const char *flag, const char *path, bool *done) {
  const rt_model *M = model();
  rt_st_file f;
  open_safetensors(&f, flag, path);
  for (int i = 0; i < M->n_params; i++) {
    const rt_tensor *p = &M->params[i];
    bool trained = p->kind == RT_PARAM_TRAINED;
    if (!trained && !rt_st_find(&f, p->name)) continue;
    const rt_st_tensor *s = find_like(&f, flag, path, p, trained ? "parameter" : "constant");
    copy_in(param_ptr(arena, i), p, s, flag, path, trained ? "parameter" : "constant");
    done[i] = true;
  }
  note_unused(&f, flag, path, M->params, M->n_params, "parameter or constant");
  rt_st_close(&f);
}

// --init-from: over the initial weights (in arena), every trained parameter
// the file has by name, F32 or BF16, of the parameter's shape or (a matrix)
// its transpose; the others keep their initial values, listed in a note.
static void init_from(char *arena, const char *path) {
  const rt_model *M = model();
  rt_st_file f;
  open_safetensors(&f, "--init-from", path);
  int found = 0, transposed = 0, missing = 0;
  char names[600] = "";
  for (int i = 0; i < M->n_params; i++) {
    const rt_tensor *p = &M->params[i];
    const rt_st_tensor *t = rt_st_find(&f, p->name);
    if (p->kind != RT_PARAM_TRAINED) continue;
    if (!t) {
      if (strlen(names) < 500)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'",
                 missing ? ", " : "", p->name);
      missing++;
      continue;
    }
    bool same = t->rank == p->rank, flip = p->rank == 2 && t->rank == 2 &&
                                           t->shape[0] == p->sizes[1] && t->shape[1] == p->sizes[0];
    for (int k = 0; same && k < p->rank; k++) same = t->shape[k] == p->sizes[k];
    if (!same && !flip) find_like(&f, "--init-from", path, p, "parameter");  // says how
    if (t->dtype != RT_ST_F32 && t->dtype != RT_ST_BF16)
      fail("--init-from %s: tensor '%s' is %s; expected F32 or BF16", path, p->name,
           rt_st_dtype_name(t->dtype));
    float *dst = (float *)param_ptr(arena, i);
    if (same) {
      rt_st_to_f32(t, dst);
    } else {  // [cols, rows] as stored: transpose into [rows, cols]
      float *tmp = malloc((size_t)p->numel * sizeof *tmp);
      if (!tmp) fail("out of memory");
      rt_st_to_f32(t, tmp);
      long rows = p->sizes[0], cols = p->sizes[1];
      for (long r = 0; r < rows; r++)
        for (long c = 0; c < cols; c++) dst[r * cols + c] = tmp[c * rows + r];
      free(tmp);
      transposed++;
    }
    found++;
  }
  printf("--init-from %s: %d parameters (%d of them transposed)", path, found, transposed);
  if (missing)
    printf("; %d not in the file keep their initial values: %s%s", missing, names,
           strlen(names) >= 500 ? ", ..." : "");
  printf("\n");
  note_unused(&f, "--init-from", path, M->params, M->n_params, "parameter");
  rt_st_close(&f);
}

// --inputs: every input by name, of its shape: F32 for float inputs, I32 or
// I64 for integer ones (each value must fit in int32, and lie in [0, range)
// for classes and tokens, or be the ignored label of a loss's labels).
static void load_inputs(char *arena, const char *path) {
  rt_st_file f;
  open_safetensors(&f, "--inputs", path);
  for (int i = 0; i < NIN; i++) {
    const rt_tensor *t = &IN[i];
    copy_in(arena + t->offset, t, find_like(&f, "--inputs", path, t, "input"), "--inputs", path,
            "input");
    if (t->dtype != RT_I32 || t->range <= 0) continue;
    const int32_t *dst = (const int32_t *)(arena + t->offset);
    const char *why = t->kind == RT_IN_CLASSES ? "the model's classes"
                      : t->kind == RT_IN_MASK  ? "a padding mask holds 0 and 1"
                                               : "the model's vocabulary";
    for (long j = 0; j < t->numel; j++)
      if ((dst[j] < 0 || dst[j] >= t->range) && !(t->ignores && dst[j] == t->ignore))
        fail("--inputs %s: tensor '%s': element %ld is %d, outside [0, %ld) (%s)%s", path,
             t->name, j, dst[j], t->range, why, t->ignores ? " and not the ignored label" : "");
  }
  note_unused(&f, "--inputs", path, IN, NIN, "input");
  rt_st_close(&f);
}

// --save and --dump-grads, checked before training rather than after: the
// target is absent or a regular file and its folder takes a new file. Only
// the rank that writes (0) touches the file system; it also removes the
// temporary files that saves killed before they finished left there.
static void check_target(const char *flag, const char *path) {
  if (!path) return;
  char err[1024] = "";
  bool bad = false;
  if (rt_comm_rank() == 0) {
    bad = rt_st_check_target(path, err, sizeof err) != 0;
    char removed[1024], why[1024];
    int n = bad ? 0 : rt_st_remove_stale(path, removed, sizeof removed, why, sizeof why);
    if (n > 0)
      fprintf(stderr, "train: note: %s %s: removed %d temporary file%s of a save that did not "
              "finish: %s\n", flag, path, n, n > 1 ? "s" : "", removed);
    else if (n < 0)
      fprintf(stderr, "train: note: %s %s\n", flag, why);
  }
  stop_together(bad, 0, "%s %s", flag, err);
}

// A kill during a save leaves no temporary file: SIGINT, SIGTERM and SIGHUP
// remove it (rt_st_abandon) and end the program as they would have.
static const int save_signals[] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction saved_actions[3];

static void abandon_save(int sig) {
  rt_st_abandon();
  raise(sig);  // SA_RESETHAND: the default action, once this handler returns
}

static void guard_save(bool on) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = abandon_save;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 3; i++) {
    if (on) sigaction(save_signals[i], &sa, &saved_actions[i]);
    else sigaction(save_signals[i], &saved_actions[i], NULL);
  }
}

// Whether parameter i has AdamW moments in the arena (in a bucket or its own).
static bool has_moments(int i) {
  const rt_model *M = model();
  const rt_tensor *p = &M->params[i];
  if (p->kind != RT_PARAM_TRAINED || !M->has_adam_state) return false;
  if (p->bucket < 0) return M->adam_offsets[2 * i] >= 0;
  const rt_bucket *k = &M->buckets[p->bucket];
  return k->m_offset >= 0 || k->m_host_offset >= 0;
}

// Whether view w writes parameter i: for the weights (--save) every parameter
// and constant but the constants shaped by the rank's batch (token types or a
// mask expanded over it), which are no weights; gradients (--dump-grads) every
// parameter's; moments every parameter's that has them.
static bool in_view(int i, view w) {
  const rt_tensor *p = &model()->params[i];
  if (w == VIEW_PARAMS) return p->kind == RT_PARAM_TRAINED || !p->batched;
  if (w == VIEW_GRADS) return p->kind == RT_PARAM_TRAINED;
  return has_moments(i);
}

// The device's values into the stage for save_view: the persistent bytes
// (parameters, moments), or with grads the whole arena (gradients lie
// anywhere in it), once every collective still reducing them has finished.
static void stage_values(char *arena, char *stage, bool grads) {
  rt_comm_wait_all();
  rt_device_get(stage, arena, 0, grads ? model()->arena_bytes : model()->persistent_bytes);
}

// Writes view w of the params table by name, whole (gathered over the ranks),
// from the stage stage_values filled, as safetensors: --save, --dump-grads and
// the checkpoints. The number of tensors written (rank 0; 0 on the others).
static int save_view(const char *path, const char *flag, char *stage, view w) {
  const rt_model *M = model();
  char *arena = stage;
  alloc_images();
  gather_images(arena, w);  // every rank takes part
  tp_gather(arena, w);
  if (rt_comm_rank() != 0) {
    free_images();
    return 0;
  }
  rt_st_tensor *ts = calloc((size_t)M->n_params + 1, sizeof *ts);
  if (!ts) fail("out of memory");
  int n = 0;
  for (int i = 0; i < M->n_params; i++) {
    const rt_tensor *p = &M->params[i];
    if (!in_view(i, w)) continue;
    rt_st_tensor *t = &ts[n++];
    t->name = p->name;
    t->dtype = p->dtype == RT_I32 ? RT_ST_I32 : RT_ST_F32;
    t->rank = p->rank;
    memcpy(t->shape, p->sizes, sizeof p->sizes);
    t->numel = p->numel;
    t->data = view_ptr(arena, i, w);
  }
  static const char *const contents[] = {"weights", "gradients after the first backward",
                                         "AdamW's first moments", "AdamW's second moments"};
  const char *content = contents[w];
  const char *meta[] = {"format", "pt", "model", M->name, "content", content, NULL};
  char err[1024];
  guard_save(true);
  int rc = rt_st_write(path, ts, n, meta, err, sizeof err);
  guard_save(false);
  if (rc) fail("%s %s", flag, err);
  free(ts);
  free_images();
  return n;
}

// --save and --dump-grads
static void save_file(const char *path, const char *flag, char *arena, char *stage, view w) {
  stage_values(arena, stage, w == VIEW_GRADS);
  int n = save_view(path, flag, stage, w);
  if (rt_comm_rank() == 0)
    printf("wrote %s: %s, %d tensors\n", path, w == VIEW_GRADS ? "gradients after the first "
           "backward" : "weights", n);
}

// A checkpoint after `step` (checkpoint.h): the weights and moments gathered
// whole, written by rank 0 with the state, then named latest.
static void write_checkpoint(const options *o, char *arena, char *stage, long step,
                             const rt_data *data) {
  const rt_model *M = model();
  char err[1024] = "", dir[4096], file[4200];
  bool bad = rt_comm_rank() == 0 && rt_ckpt_begin(o->ckpt_dir, step, err, sizeof err);
  stop_together(bad, 0, "--checkpoint-dir %s", err);
  rt_ckpt_path(o->ckpt_dir, step, true, dir, sizeof dir);
  stage_values(arena, stage, false);  // weights, moments and the dropout counter: persistent
  snprintf(file, sizeof file, "%s/model.safetensors", dir);
  save_view(file, "--checkpoint-dir", stage, VIEW_PARAMS);
  if (M->has_adam_state) {
    snprintf(file, sizeof file, "%s/adam_m.safetensors", dir);
    save_view(file, "--checkpoint-dir", stage, VIEW_M);
    snprintf(file, sizeof file, "%s/adam_v.safetensors", dir);
    save_view(file, "--checkpoint-dir", stage, VIEW_V);
  }
  rt_ckpt_state s = {.step = step, .seed = o->seed, .dropout_step = -1};
  snprintf(s.model, sizeof s.model, "%s", M->name);
  snprintf(s.layout, sizeof s.layout, "%s", M->layout);
  snprintf(s.optimizer, sizeof s.optimizer, "%s",
           o->h.optimizer == RT_OPT_SGD || !M->has_adam_state ? "sgd" : "adamw");
  if (data->nshards) {
    s.has_data = true;
    s.data = data->pos;
    s.window_tokens = data->n;
  }
  if (M->dropout_step_offset >= 0) {
    int32_t counter;
    memcpy(&counter, stage + M->dropout_step_offset, 4);
    s.dropout_step = counter;
  }
  bad = rt_comm_rank() == 0 && rt_ckpt_commit(o->ckpt_dir, &s, o->keep, err, sizeof err);
  stop_together(bad, 0, "--checkpoint-dir %s", err);
  rt_ckpt_path(o->ckpt_dir, step, false, dir, sizeof dir);
  printf("checkpoint %s (step %ld)\n", dir, step);
  fflush(stdout);
}

// SIGINT and SIGTERM with --checkpoint-dir: the run stops after the step in
// progress, with a checkpoint (a second signal ends it at once).
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) { stop_signal = sig; }

static void catch_stop_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

// A checkpoint's moments (view w) by name into the stage and the host region.
static void load_moments(char *stage, const char *path, view w) {
  const rt_model *M = model();
  rt_st_file f;
  open_safetensors(&f, "--resume", path);
  alloc_images();
  for (int i = 0; i < M->n_params; i++)
    if (has_moments(i))
      copy_in(view_ptr(stage, i, w), &M->params[i],
              find_like(&f, "--resume", path, &M->params[i], "parameter's moment"), "--resume",
              path, "parameter's moment");
  rt_st_close(&f);
  tp_scatter(stage, w);
  scatter_images(stage, w);
  free_images();
}

// ---------------------------------------------------------------------------
// the finite check
//
// Each step stops at a loss, a gradient or a weight that is NaN or infinite,
// before the optimizer or --save uses it: the loss once reduced, the
// gradients once reduced and before the update, the weights after it. Each
// rank scans its own part of them (of a bucket, its dp shard: the one its
// update writes; of a tensor split over tp, its part) with
// rt_find_nonfinite, and the ranks agree through one collective
// (stop_together). Pieces side by side in the arena are scanned as one run,
// each run's result one int of train.c's bytes after the model's arena (at
// check_at), all read with one rt_device_get; only when a run has a hit is
// each tensor scanned alone, in table order, to name the first.

// A piece of one parameter's values (or gradient) in this rank's arena, or
// (a gradient offloaded with its bucket's) in the host region, which the host
// scans.
typedef struct piece {
  int param;    // index in the params table
  long offset;  // byte offset in the arena, or in the host region
  long n;       // floats
  long elem;    // the first one's index in this rank's part of the parameter
  bool host;
} piece;

typedef struct scan {
  int esize;      // bytes an element: 4, or the gradients' (grad_size)
  piece *pieces;  // in table order
  int npieces, cap;
  piece *runs;    // the pieces by offset, neighbours merged (param, elem unused)
  int nruns;
} scan;

static scan grad_scan, weight_scan;
static scan norm_scan;  // the gradients this rank counts in the global norm
static long check_at;  // byte offset of the runs' results, after the model's arena

#define RUN_MAX (1L << 30)  // floats per rt_find_nonfinite (its index is an int)

static void add_piece(scan *s, int param, long offset, long n, long elem, bool host) {
  for (long done = 0; done < n; done += RUN_MAX) {
    if (s->npieces == s->cap) {
      s->cap = s->cap ? 2 * s->cap : 64;
      s->pieces = realloc(s->pieces, (size_t)s->cap * sizeof *s->pieces);
      if (!s->pieces) fail("out of memory");
    }
    long len = n - done < RUN_MAX ? n - done : RUN_MAX;
    s->pieces[s->npieces++] = (piece){param, offset + done * s->esize, len, elem + done, host};
  }
}

static int by_offset(const void *a, const void *b) {  // the device's first
  const piece *x = a, *y = b;
  if (x->host != y->host) return x->host - y->host;
  return (x->offset > y->offset) - (x->offset < y->offset);
}

static bool split_over(const rt_tensor *p, int axis) {
  for (int k = 0; k < 2; k++)
    if (p->split[k].dim >= 0 && p->split[k].axis == axis) return true;
  return false;
}

// Of the replica's ranks that hold the same values of p (those along the axes
// it is not split over), is this rank the first? A parameter of a block below
// the mesh's tp (or on the grid of its sub ranks) is held by the ranks of its sub group (its
// bucket shards it over the others, RT_AXIS_SUBREP).
static bool replica_owner(const rt_tensor *p) {
  const rt_model *M = model();
  if (p->bucket >= 0 && M->buckets[p->bucket].shard_axis == RT_AXIS_SUBREP) {
    if (split_over(p, RT_AXIS_SUB)) return true;
    if (rt_dist.q == 1) return rt_axis_rank(RT_AXIS_SUB) == 0;
    // a grid's on those ranks (q x q = sub): held along the grid axes it is split over
    for (int a = RT_AXIS_ROW; a <= RT_AXIS_COL; a++)
      if (!split_over(p, a) && rt_axis_rank(a) != 0) return false;
    return true;
  }
  // (sub and subdp are parts of tp; so are a grid's rows and columns beside tp blocks: a
  // parameter split over them is held along them, another along tp)
  bool on_grid = split_over(p, RT_AXIS_ROW) || split_over(p, RT_AXIS_COL);
  bool grid_in_tp = rt_dist.tp > 1 && rt_dist.q > 1;
  for (int a = RT_AXIS_TP; a <= RT_AXIS_COL; a++) {
    bool factor = a == RT_AXIS_TP ? grid_in_tp && on_grid : grid_in_tp && !on_grid;
    if (!factor && !split_over(p, a) && rt_axis_size(a) > 1 && rt_axis_rank(a) != 0)
      return false;
  }
  return true;
}

// The pieces of every trained parameter's gradient (grads) or value. For the
// global norm (norm), each element once over all ranks: a gradient whole on
// some replica ranks only on the first of them (but a bucket sharded over
// every rank has each element on one rank), one outside the buckets only on
// dp rank 0.
static void build_scan(scan *s, bool grads, bool norm) {
  const rt_model *M = model();
  s->esize = grads ? (int)grad_size() : 4;
  for (int i = 0; i < M->n_params; i++) {
    const rt_tensor *p = &M->params[i];
    if (p->kind != RT_PARAM_TRAINED) continue;
    bool everywhere = p->bucket >= 0 && M->buckets[p->bucket].shard_axis == RT_AXIS_ALL;
    if (norm && ((!everywhere && !replica_owner(p)) || (p->bucket < 0 && rt_dist.dp_rank != 0)))
      continue;
    long n = local_numel(p);
    if (p->bucket < 0) {
      add_piece(s, i, grads ? M->grad_offsets[i] : p->offset, n, 0, false);
      continue;
    }
    const rt_bucket *k = &M->buckets[p->bucket];
    long lo, at, part = shard_numel(k), plo;
    bucket_shard(k, grads, &lo, &at);
    long b0 = p->bucket_elem > lo ? p->bucket_elem : lo;
    long b1 = p->bucket_elem + n < lo + part ? p->bucket_elem + n : lo + part;
    if (!grads) {  // (bf16 offload: the parameters past dev_end are on the host)
      long dev_end = params_part(k, &plo) - k->host_numel;
      if (b1 > plo + dev_end) b1 = plo + dev_end;
    }
    if (b0 < b1)
      add_piece(s, i, at + (b0 - lo) * s->esize, b1 - b0, b0 - p->bucket_elem,
                grads && k->grads_host);
  }
  s->runs = malloc((size_t)s->npieces * sizeof *s->runs + 1);
  if (!s->runs) fail("out of memory");
  memcpy(s->runs, s->pieces, (size_t)s->npieces * sizeof *s->runs);
  qsort(s->runs, (size_t)s->npieces, sizeof *s->runs, by_offset);
  s->nruns = 0;
  for (int r = 0; r < s->npieces; r++) {
    piece *last = s->nruns ? &s->runs[s->nruns - 1] : NULL;
    if (last && last->host == s->runs[r].host &&
        last->offset + last->n * s->esize == s->runs[r].offset &&
        last->n + s->runs[r].n <= RUN_MAX)
      last->n += s->runs[r].n;
    else
      s->runs[s->nruns++] = s->runs[r];
  }
}

// The index of the first non-finite element of a piece of s in the host region, or -1.
static long host_nonfinite(const scan *s, const piece *p) {
  const char *x = host_region + p->offset;
  long j = s->esize == 4 ? rt_find_nonfinite_host((const float *)x, p->n)
                         : rt_find_nonfinite_host_bf16((const rt_bf16 *)x, p->n);
  return j < p->n ? j : -1;
}

// rt_find_nonfinite over n elements of s's type at x, on the device.
static void scan_nonfinite(const scan *s, int *at, const char *x, long n) {
  if (s->esize == 4) rt_find_nonfinite(at, (const float *)x, n);
  else rt_find_nonfinite_bf16(at, (const rt_bf16 *)x, n);
}

// The first non-finite value of s on this rank: its parameter (-1: none), its
// element in this rank's part and the value.
static int find_nonfinite(char *arena, char *stage, const scan *s, long *elem, float *value) {
  int *result = (int *)(arena + check_at);  // on the device
  const int *got = (const int *)(stage + check_at);
  int ndev = 0;  // the device's runs come first
  while (ndev < s->nruns && !s->runs[ndev].host) ndev++;
  for (int r = 0; r < ndev; r++)
    scan_nonfinite(s, result + r, arena + s->runs[r].offset, s->runs[r].n);
  rt_device_get(stage, arena, check_at, (long)ndev * 4);
  bool any = false;
  for (int r = 0; r < s->nruns; r++)
    any |= r < ndev ? got[r] >= 0 : host_nonfinite(s, &s->runs[r]) >= 0;
  if (!any) return -1;
  for (int k = 0; k < s->npieces; k++) {  // which is first in table order
    const piece *p = &s->pieces[k];
    if (p->host) {
      long j = host_nonfinite(s, p);
      if (j < 0) continue;
      to_floats(value, host_region + p->offset + j * s->esize, 1, s->esize);
      *elem = p->elem + j;
      return p->param;
    }
    scan_nonfinite(s, result, arena + p->offset, p->n);
    rt_device_get(stage, arena, check_at, 4);
    if (got[0] < 0) continue;
    long at = p->offset + (long)got[0] * s->esize;
    rt_device_get(stage, arena, at, s->esize);
    to_floats(value, stage + at, 1, s->esize);
    *elem = p->elem + got[0];
    return p->param;
  }
  return -1;  // NEVER: a run's hit is in one of its pieces
}

// The same for the parameters in the host region (bf16 offload), which the
// host scans: the first in table order with a non-finite value.
static int find_nonfinite_host(long *elem, float *value) {
  const rt_model *M = model();
  int first = -1;
  for (int b = 0; b < M->n_buckets; b++) {
    const rt_bucket *k = &M->buckets[b];
    const float *x = (const float *)(host_region + k->host_offset);
    if (rt_find_nonfinite_host(x, k->host_numel) == k->host_numel) continue;
    long lo, e0 = params_part(k, &lo) - k->host_numel;
    e0 += lo;  // the bucket element at x[0]
    for (int i = 0; i < M->n_params && (first < 0 || i < first); i++) {
      const rt_tensor *p = &M->params[i];
      if (p->bucket != b || p->kind != RT_PARAM_TRAINED) continue;
      long e = p->bucket_elem > e0 ? p->bucket_elem : e0, end = p->bucket_elem + local_numel(p);
      end = end < e0 + k->host_numel ? end : e0 + k->host_numel;
      for (; e < end && isfinite(x[e - e0]); e++) {}
      if (e < end) first = i, *elem = e - p->bucket_elem, *value = x[e - e0];
    }
  }
  return first;
}

// The global norm of the gradients (every rank's part), as
// torch.nn.utils.clip_grad_norm_ computes it: rt_norm2 of each run on the
// device, squared, and rt_norm2sq_host of each in host memory, summed in
// float64 in order, then over the ranks.
static double grad_norm(char *arena, char *stage) {
  float *result = (float *)(arena + check_at);  // on the device
  const float *got = (const float *)(stage + check_at);
  int ndev = 0;  // the device's runs come first; the host sums its own
  while (ndev < norm_scan.nruns && !norm_scan.runs[ndev].host) ndev++;
  for (int r = 0; r < ndev; r++) {
    const char *x = arena + norm_scan.runs[r].offset;
    if (norm_scan.esize == 4) rt_norm2(result + r, (const float *)x, norm_scan.runs[r].n);
    else rt_norm2_bf16(result + r, (const rt_bf16 *)x, norm_scan.runs[r].n);
  }
  rt_device_get(stage, arena, check_at, (long)ndev * 4);
  double sum = 0.0;
  for (int r = 0; r < ndev; r++) sum += (double)got[r] * (double)got[r];
  for (int r = ndev; r < norm_scan.nruns; r++) {
    const char *x = host_region + norm_scan.runs[r].offset;
    sum += norm_scan.esize == 4 ? rt_norm2sq_host((const float *)x, norm_scan.runs[r].n)
                                : rt_norm2sq_host_bf16((const rt_bf16 *)x, norm_scan.runs[r].n);
  }
  if (rt_comm_size() > 1) sum = rt_allreduce_scalar(rt_group_world(), sum, RT_REDUCE_SUM);
  return sqrt(sum);
}

// "nan", "inf" or "-inf" (printf may write "-nan")
static const char *nonfinite_name(double x) {
  return isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
}

// Stops every rank at step `step` when any has a non-finite gradient (grads)
// or weight; the message names the first (in table order) and its element.
static void check_finite(char *arena, char *stage, int step, bool grads) {
  long elem = 0;
  float value = 0;
  int i = find_nonfinite(arena, stage, grads ? &grad_scan : &weight_scan, &elem, &value);
  long host_elem = 0;
  float host_value = 0;
  int ih = grads || !host_region ? -1 : find_nonfinite_host(&host_elem, &host_value);
  if (ih >= 0 && (i < 0 || ih < i)) i = ih, elem = host_elem, value = host_value;
  const char *name = i >= 0 ? model()->params[i].name : "";
  long at = i >= 0 ? whole_index(i, elem) : 0;
  char where[64];
  if (at >= 0) snprintf(where, sizeof where, "element %ld", at);
  else snprintf(where, sizeof where, "its padding");
  if (grads)
    stop_together(i >= 0, i, "step %d: gradient of %s is not finite (first at %s: %s); stopping "
                  "before the optimizer writes it", step, name, where, nonfinite_name(value));
  else
    stop_together(i >= 0, i, "step %d: parameter %s is not finite after the update (first at "
                  "%s: %s); stopping before another step or --save uses it", step, name, where,
                  nonfinite_name(value));
}

// ---------------------------------------------------------------------------
// inputs
//
// The data is defined over the global batch: every input with a batch dim
// holds rows_total() rows (IN, on the host; the model's batch x dp x micro_batches
// unless the replicas' shares or micro-batch sizes are uneven). Replica d runs
// rows first_row(d) ..., replica_rows(d) per micro-batch, so that a run on any
// number of ranks sees the same tokens.
// On a 2D grid each micro-batch is cut in grid_side slices (a rank's inputs), one
// per grid row.


static void make_global_inputs(void) {
  const rt_model *M = model();
  long R = rows_total(), r = rank_rows(), at = 0;
  NIN = M->n_inputs;
  IN = calloc((size_t)NIN + 1, sizeof *IN);
  if (!IN) fail("out of memory");
  for (int i = 0; i < NIN; i++) {
    IN[i] = M->inputs[i];
    if (IN[i].batched) {
      IN[i].numel = IN[i].numel / r * R;
      IN[i].sizes[0] = IN[i].sizes[0] / r * R;
    }
    IN[i].offset = at;
    at += IN[i].numel * 4;
  }
  global_bytes = at + 4;
  if (!(global = calloc((size_t)global_bytes, 1))) fail("out of memory for the global batch");
}

// The rank's rows of a micro-batch from `row` of the global batch into the arena's inputs.
static void take_slice(char *arena, char *stage, long row) {
  const rt_model *M = model();
  long r = rank_rows();
  for (int i = 0; i < NIN; i++) {
    const rt_tensor *t = &M->inputs[i];
    long from = IN[i].offset + (t->batched ? row * (t->numel / r) * 4 : 0);
    memcpy(stage + t->offset, global + from, (size_t)t->numel * 4);
    rt_device_put(arena, stage, t->offset, t->numel * 4);
  }
}

static void store(char *arena, const rt_tensor *t, long i, double value) {
  if (t->dtype == RT_I32) ((int32_t *)(arena + t->offset))[i] = (int32_t)value;
  else ((float *)(arena + t->offset))[i] = (float)value;
}

static int is_token_input(const rt_tensor *t) {
  return t->kind == RT_IN_TOKENS || t->kind == RT_IN_TARGETS || t->kind == RT_IN_LABELS;
}

// n (tokens per step: the largest token input's element count) and the
// smallest vocabulary over the token inputs; n is 0 when the model has none.
// Token inputs may differ in length (an encoder's [B, TE] and a decoder's
// [B, TD]): each takes the first of the step's tokens it holds.
static void token_geometry(long *n, long *vocab) {
  *n = 0;
  *vocab = 0;
  for (int i = 0; i < NIN; i++) {
    const rt_tensor *t = &IN[i];
    if (!is_token_input(t)) continue;
    if (t->range <= 0 || t->range > (1L << 31))
      fail("model table: token input '%s' has range %ld", t->name, t->range);
    if (t->numel > *n) *n = t->numel;
    if (*vocab == 0 || t->range < *vocab) *vocab = t->range;
  }
}

// token inputs from a stream of n+1 tokens: TOKENS (and LABELS, which the
// model shifts itself) its first numel, TARGETS the numel after the first
// (the next token of each)
static void fill_tokens(char *arena, const int32_t *stream) {
  for (int i = 0; i < NIN; i++) {
    const rt_tensor *t = &IN[i];
    if (!is_token_input(t)) continue;
    const int32_t *src = stream + (t->kind == RT_IN_TARGETS ? 1 : 0);
    for (long j = 0; j < t->numel; j++) store(arena, t, j, src[j]);
  }
}

// The synthetic inputs, drawn once from the seed: a token stream of n+1
// tokens, then every input in table order.
static void fill_synthetic(char *arena, uint64_t seed, long n, long vocab,
                           int32_t *stream) {
  rt_rng r;
  rt_rng_seed(&r, seed);
  if (n > 0)
    for (long j = 0; j <= n; j++) stream[j] = (int32_t)rt_rng_below(&r, (uint64_t)vocab);
  for (int i = 0; i < NIN; i++) {
    const rt_tensor *t = &IN[i];
    switch (t->kind) {
      case RT_IN_RANDN:
        for (long j = 0; j < t->numel; j++) store(arena, t, j, rt_rng_normal(&r));
        break;
      case RT_IN_CLASSES:
        if (t->range <= 0 || t->range > (1L << 31))
          fail("model table: input '%s' has range %ld", t->name, t->range);
        for (long j = 0; j < t->numel; j++)
          store(arena, t, j, rt_rng_below(&r, (uint64_t)t->range));
        break;
      case RT_IN_MASK:  // each row of the last dim: 1 for a valid length, then 0
        rt_rng_padding_mask(&r, (int32_t *)(arena + t->offset), t->numel,
                            t->rank > 0 ? t->sizes[t->rank - 1] : 1);
        break;
      default:
        break;
    }
  }
  if (n > 0) fill_tokens(arena, stream);
}

// The shards flag names (data.h), or a message naming them and the exit.
static void open_data(rt_data *d, const char *flag, const char *spec, const char *pattern, long n,
                      long vocab, bool shuffle, uint64_t seed) {
  char err[1024];
  if (rt_data_open(d, flag, spec, pattern, n, vocab, shuffle, seed, err, sizeof err))
    fail("%s", err);
  printf("%s: %d shard%s, %ld batches of %ld tokens%s\n", flag, d->nshards,
         d->nshards == 1 ? "" : "s", d->total, n, shuffle ? ", shuffled per epoch" : "");
}

// ---------------------------------------------------------------------------
// steps

// Every copy between device and host memory that a phase starts, it finishes (the compiler places
// each copy's wait: passes/copies.c).
static void copies_done(const char *phase) {
  int n = rt_copies_pending();
  if (n) fail("internal: %s left %d cop%s between device and host memory unfinished", phase, n,
              n == 1 ? "y" : "ies");
}

// Forward (training: and backward) over this rank's micro-batches of the
// global batch in `global`: the global batch's mean loss, the same on every
// rank. Every loss of mtc is a mean over the batch, so each micro-batch's
// weighs its rows' share of the step's in it, 1 / micro_total() when the sizes are equal (the
// lowering scales the gradients alike).
static double run_batch(char *arena, char *stage, bool train) {
  const rt_model *M = model();
  double loss = 0;
  int d = rt_dist.dp_rank;
  long first = first_row(d), rows = replica_rows(d), total = rows_total();
  rt_dist.rows = rank_rows();
  for (int m = 0; m < replica_micro(d); m++) {
    rt_dist.micro = m;
    rt_dist.row = first + m * rows +
                  (M->grid_side > 1 ? rt_axis_rank(RT_AXIS_ROW) * rt_dist.rows : 0);
    take_slice(arena, stage, rt_dist.row);
    M->forward(arena, host_region);
    copies_done("forward");
    rt_device_get(stage, arena, M->loss_offset, 4);
    float l;
    memcpy(&l, stage + M->loss_offset, sizeof l);
    loss += l / ((double)total / (double)rows);
    if (train) M->backward(arena, host_region);
    copies_done("backward");
  }
  for (int m = replica_micro(d); M->ghost && m < M->micro_batches; m++) {  // then the others'
    rt_dist.micro = m;            // collectives of the micro-batches it does not run (the last
    M->ghost(arena, host_region, train);   // one's reductions of its accumulated gradients too)
    copies_done("a ghost micro-batch");
  }
  for (int a = RT_AXIS_TP; a < RT_NAXES; a++)  // each rank has its term (a vocabulary-parallel
    if (M->loss_partial_axes & (1 << a))         // loss; a 2D grid's rows)
      loss = rt_allreduce_scalar(rt_dist.group[a], loss, RT_REDUCE_SUM);
  return rt_allreduce_scalar(rt_dist.group[RT_AXIS_DP], loss, RT_REDUCE_SUM);
}

// The mean loss of the first `batches` global batches of val, forward only in
// eval mode, on val_batch (the training batch in `global` stays as it is).
static double validate(char *arena, char *stage, rt_data *val, long batches, char *val_batch,
                       int32_t *stream) {
  char *train_batch = global;
  global = val_batch;
  rt_eval_mode = 1;
  rt_data_rewind(val);
  double sum = 0;
  for (long i = 0; i < batches; i++) {
    rt_data_next(val, stream);
    fill_tokens(global, stream);
    sum += run_batch(arena, stage, false);
  }
  rt_eval_mode = 0;
  global = train_batch;
  return sum / (double)batches;
}

// ---------------------------------------------------------------------------
// sampling

// The tokenizer for --sample: --tokenizer, else tokenizer.bin in the folder
// of --data's first shard (where tools/prep_text.py writes it); false: none.
static bool load_tokenizer(rt_tokenizer *t, const options *o, const rt_data *data) {
  char path[4096], err[1024];
  const char *file = o->tokenizer;
  if (!file && data->nshards > 0) {
    const char *first = data->paths[0], *slash = strrchr(first, '/');
    int len = slash ? (int)(slash - first) : 1;
    snprintf(path, sizeof path, "%.*s/tokenizer.bin", len, slash ? first : ".");
    if (access(path, R_OK) != 0) return false;
    file = path;
  }
  if (!file) return false;
  if (rt_tok_load(t, file, err, sizeof err)) fail("--tokenizer: %s", err);
  printf("sample: tokenizer %s (vocabulary %d)\n", file, t->vocab);
  return true;
}

// A token of the logits row l (v values): the most likely at temperature 0,
// else drawn from softmax(l / temperature) over the top_k largest (0: all).
static int draw_token(const float *l, long v, float temperature, int top_k, rt_rng *r,
                      float *scratch) {
  long best = 0;
  for (long i = 1; i < v; i++) best = l[i] > l[best] ? i : best;
  if (temperature == 0.0f) return (int)best;
  float cut = -INFINITY;  // the k-th largest value
  if (top_k > 0 && top_k < v) {
    memcpy(scratch, l, (size_t)v * sizeof *scratch);
    for (int k = 0; k < top_k; k++) {  // k partial passes of a selection: k is small
      long m = k;
      for (long i = k + 1; i < v; i++) m = scratch[i] > scratch[m] ? i : m;
      float t = scratch[k];
      scratch[k] = scratch[m];
      scratch[m] = t;
    }
    cut = scratch[top_k - 1];
  }
  double sum = 0;
  for (long i = 0; i < v; i++)
    sum += l[i] >= cut ? exp((double)(l[i] - l[best]) / temperature) : 0.0;
  double u = (double)rt_rng_uniform(r) * sum, acc = 0;
  for (long i = 0; i < v; i++) {
    if (l[i] < cut) continue;
    acc += exp((double)(l[i] - l[best]) / temperature);
    if (acc > u) return (int)i;
  }
  return (int)best;
}

static void print_token(const rt_tokenizer *t, bool text, int id) {
  size_t len;
  const char *piece = text ? rt_tok_piece(t, id, &len) : NULL;
  if (piece) fwrite(piece, 1, len, stdout);
  else printf("%d ", id);
  // Alone, each token shows as it is drawn. Under mpirun a partial line could be
  // forwarded and another rank's line land inside it (each rank's stdout is its own
  // pipe): there the sample goes out whole, at its closing line.
  if (rt_comm_size() == 1) fflush(stdout);
}

// --sample: o->sample tokens after the prompt, each from the logits of a
// forward in eval mode over the last context tokens (every sequence of the
// global batch holds them, so every rank reads the same row and draws the same
// token), drawn from --seed; printed as text through the tokenizer, else as ids.
// batch: the global batch buffer to use; n: its tokens (B x T), vocab: the
// model's.
static void sample(char *arena, char *stage, const options *o, const rt_data *data, char *batch,
                   long n, long vocab, int32_t *stream) {
  const rt_model *M = model();
  rt_tokenizer tok = {0};
  bool text = load_tokenizer(&tok, o, data);
  long seq = 0;  // tokens per sequence: the token input's second dim
  for (int i = 0; i < M->n_inputs; i++)
    if (M->inputs[i].kind == RT_IN_TOKENS) seq = M->inputs[i].sizes[1];
  long ctx = M->logits_rows, v = M->logits_vocab < vocab ? M->logits_vocab : vocab;
  if (text && tok.vocab < v) v = tok.vocab;
  int32_t *tokens = NULL;
  long count = 0;
  char err[1024];
  if (o->prompt_tokens) {
    if (rt_data_read_tokens("--prompt-tokens", o->prompt_tokens, vocab, &tokens, &count, err,
                            sizeof err))
      fail("%s", err);
  } else if (o->prompt) {
    if (!text)
      usage_error("--prompt needs a tokenizer: --tokenizer FILE (tools/prep_text.py writes "
                  "DIR/tokenizer.bin), or give token ids with --prompt-tokens");
    long cap = (long)strlen(o->prompt) + 1;
    if (!(tokens = malloc((size_t)cap * sizeof *tokens))) fail("out of memory");
    if ((count = rt_tok_encode(&tok, o->prompt, tokens, cap, err, sizeof err)) < 0)
      fail("--prompt: %s", err);
    for (long i = 0; i < count; i++)
      if (tokens[i] >= vocab)
        fail("--prompt: token %d is outside the model's vocabulary of %ld", tokens[i], vocab);
  }
  if (count == 0) {  // the start of a document
    free(tokens);
    if (!(tokens = malloc(sizeof *tokens))) fail("out of memory");
    tokens[0] = text && tok.eot >= 0 && tok.eot < vocab ? tok.eot : 0;
    count = 1;
  }
  long total = count + o->sample;
  int32_t *all = realloc(tokens, (size_t)total * sizeof *all);
  float *logits = malloc((size_t)M->logits_vocab * sizeof *logits);
  float *scratch = malloc((size_t)M->logits_vocab * sizeof *scratch);
  if (!all || !logits || !scratch) fail("out of memory");
  printf("sample: %d tokens after a prompt of %ld, temperature %g, top-k %d, context %ld\n",
         o->sample, count, (double)o->temperature, o->top_k, ctx);
  printf("----\n");
  for (long i = 0; i < count; i++) print_token(&tok, text, all[i]);
  rt_rng r;
  rt_rng_seed(&r, o->seed ^ 0x5A4D504C45ull);  // "SAMPLE": apart from the inputs' stream
  char *train_batch = global;
  global = batch;
  rt_eval_mode = 1;
  int dsize = rt_dtype_size(M->logits_dtype);
  for (long have = count; have < total; have++) {
    long len = have < ctx ? have : ctx, from = have - len;
    for (long j = 0; j <= n; j++)  // every sequence: the context, then zeros
      stream[j] = j < n && j % seq < len ? all[from + j % seq] : 0;
    fill_tokens(global, stream);
    run_batch(arena, stage, false);
    long at = M->logits_offset + (len - 1) * M->logits_vocab * dsize;
    rt_device_get(stage, arena, at, M->logits_vocab * dsize);
    for (long i = 0; i < M->logits_vocab; i++)
      logits[i] = M->logits_dtype == RT_BF16 ? rt_bf16_to_f32(((rt_bf16 *)(stage + at))[i])
                                             : ((float *)(stage + at))[i];
    all[have] = draw_token(logits, v, o->temperature, o->top_k, &r, scratch);
    print_token(&tok, text, all[have]);
  }
  rt_eval_mode = 0;
  global = train_batch;
  printf("\n----\n");
  fflush(stdout);  // before lines other ranks' stream writes
  free(all), free(logits), free(scratch);
  if (text) rt_tok_free(&tok);
}

// ---------------------------------------------------------------------------
// measurement

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const double *v, int n) {
  double *s = malloc((size_t)n * sizeof(double));
  if (!s) fail("out of memory");
  memcpy(s, v, (size_t)n * sizeof(double));
  qsort(s, (size_t)n, sizeof(double), cmp_double);
  double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  free(s);
  return m;
}

// The process's peak resident memory so far, in bytes.
static long peak_rss(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (long)ru.ru_maxrss * 1024L;  // ru_maxrss is in KiB
}

// "1h02m", "3m05s", "42s"
static void format_seconds(char *out, size_t cap, double s) {
  long t = isfinite(s) && s > 0 ? (long)(s + 0.5) : 0;
  if (t >= 3600) snprintf(out, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else if (t >= 60) snprintf(out, cap, "%ldm%02lds", t / 60, t % 60);
  else snprintf(out, cap, "%lds", t);
}

// The dense peak FLOP/s of this rank's device in the program's precision, for
// MFU: --peak-tflops, else the published figure of a GPU mtc knows (NVIDIA's
// data sheets: tensor cores in bf16, CUDA cores in float32), else 0 (a CPU:
// bench/gemm.c measures one).
static double peak_flops(const options *o) {
  if (o->peak_tflops > 0) return o->peak_tflops * 1e12;
  static const struct {
    const char *gpu;
    double bf16, fp32;  // TFLOP/s
  } known[] = {{"H200", 989.4, 66.9}, {"H100 80GB HBM3", 989.4, 66.9}, {"H100 PCIe", 756.0, 51.2},
               {"H100", 989.4, 66.9}, {"A100", 312.0, 19.5}, {"L4", 121.0, 30.3},
               {"L40S", 362.0, 91.6}, {"A10", 125.0, 31.2}};
  const char *name = rt_device_name();
  bool bf16 = model()->init_copies != NULL;  // bf16 programs have working copies
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strstr(name, known[i].gpu)) return 1e12 * (bf16 ? known[i].bf16 : known[i].fp32);
  return 0;
}

// ---------------------------------------------------------------------------

static FILE *every_rank;  // stdout, also on ranks whose stdout is silenced

// One line per rank, in rank order (rank 0 alone in a one-rank run).
__attribute__((format(printf, 1, 2))) static void print_ranked(const char *fmt, ...) {
  int n = rt_comm_size();
  for (int r = 0; r < n; r++) {
    if (r == rt_comm_rank()) {
      va_list ap;
      va_start(ap, fmt);
      if (n > 1) fprintf(every_rank, "rank %d: ", r);
      vfprintf(every_rank, fmt, ap);
      va_end(ap);
      fflush(every_rank);
    }
    if (n > 1) rt_barrier(rt_group_world());
  }
}

int main(int argc, char **argv) {
  options opt = parse_args(argc, argv);  // first: --help and flag errors need no GPU
  rt_device_init();
  rt_comm_init(&argc, &argv, world_ranks(), model()->layout);
  const rt_model *M = the_model = model_of_rank(rt_comm_rank());
  rt_dist_init(M->dp, M->tp, M->grid_side > 1 ? M->grid_side : M->tp_grid, M->tp_sub,
               M->micro_batches, M->n_slots);
  // uneven shares: this replica's own micro-batches, or with ghosts the most any runs
  rt_dist.micro_total = M->ghost ? M->micro_batches : replica_micro(rt_dist.dp_rank);
  if (M->dp_parts) rt_group_set_parts(rt_dist.group[RT_AXIS_DP], M->dp_parts);
  every_rank = fdopen(dup(STDOUT_FILENO), "w");
  if (!every_rank) fail("cannot duplicate stdout: %s", strerror(errno));
  if (rt_comm_rank() != 0 && !freopen("/dev/null", "w", stdout))  // rank 0 prints the run
    fail("cannot silence the output of rank %d", rt_comm_rank());
  check_table();
  check_target("--save", opt.save);
  check_target("--dump-grads", opt.dump_grads);
  rt_log log = {0};  // rank 0 writes it
  if (opt.log) {
    bool bad = rt_comm_rank() == 0 && rt_log_open(&log, opt.log, opt.resume != NULL) != 0;
    stop_together(bad, 0, "--log %s: cannot write it: %s", opt.log, bad ? strerror(errno) : "");
  }
  make_global_inputs();

  long n, vocab;  // over the global batch
  token_geometry(&n, &vocab);
  if (opt.data && n == 0)
    usage_error("--data given, but the model '%s' has no token inputs", M->name);

  // the arena on the device with train.c's bytes after it (the finite
  // check's results), its host copy, and (offload) the host region
  build_scan(&grad_scan, true, false);
  build_scan(&weight_scan, false, false);
  build_scan(&norm_scan, true, true);
  check_at = (M->arena_bytes + 63) / 64 * 64;
  int most_runs = grad_scan.nruns > weight_scan.nruns ? grad_scan.nruns : weight_scan.nruns;
  most_runs = norm_scan.nruns > most_runs ? norm_scan.nruns : most_runs;
  long device_bytes = check_at + 4L * most_runs + 4;
  char *arena = rt_device_alloc(device_bytes, M->workspace_bytes);
  char *stage = rt_device_stage(arena, device_bytes);
  char *host = M->host_bytes > 0 ? rt_device_host_alloc(M->host_bytes) : NULL;
  host_region = host;

  // the checkpoint to resume from
  rt_ckpt_state resumed = {0};
  char resume_dir[4096], file[4200];
  if (opt.resume) {
    char err[1024];
    if (rt_ckpt_open(opt.resume, resume_dir, sizeof resume_dir, &resumed, err, sizeof err))
      fail("--resume %s", err);
    if (strcmp(resumed.model, M->name))
      fail("--resume %s: a checkpoint of the model '%s'; this program trains '%s'", resume_dir,
           resumed.model, M->name);
  }
  if (opt.ckpt_dir) catch_stop_signals();

  // the initial weights: --resume's or --load's by name, then weights.bin for what they lack
  alloc_images();
  bool *done = calloc((size_t)M->n_params + 1, sizeof *done);
  if (!done) fail("out of memory");
  bool all = false;
  if (opt.load || opt.resume) {
    snprintf(file, sizeof file, "%s/model.safetensors", resume_dir);
    load_named_weights(stage, opt.resume ? "--resume" : "--load", opt.resume ? file : opt.load,
                       done);
    all = true;
    for (int i = 0; i < M->n_params; i++) all &= done[i];
  }
  if (!all && (opt.weights || M->weights_file)) load_weights(stage, opt.weights, argv[0], done);
  else if (!all) draw_weights(stage, done);
  if (opt.init_from) init_from(stage, opt.init_from);
  free(done);
  tp_scatter(stage, VIEW_PARAMS);
  scatter_images(stage, VIEW_PARAMS);
  free_images();
  if (opt.resume) {  // the moments, the dropout masks' counter
    if (M->has_adam_state && !strcmp(resumed.optimizer, "adamw")) {
      snprintf(file, sizeof file, "%s/adam_m.safetensors", resume_dir);
      load_moments(stage, file, VIEW_M);
      snprintf(file, sizeof file, "%s/adam_v.safetensors", resume_dir);
      load_moments(stage, file, VIEW_V);
    } else if (M->has_adam_state) {
      printf("--resume: the checkpoint was trained with SGD: AdamW's moments start at zero\n");
    }
    if (M->dropout_step_offset >= 0 && resumed.dropout_step >= 0)
      memcpy(stage + M->dropout_step_offset, &(int32_t){(int32_t)resumed.dropout_step}, 4);
    printf("resumed from %s: step %ld (written by %s)\n", resume_dir, resumed.step,
           resumed.layout);
  }
  rt_device_put(arena, stage, 0, M->persistent_bytes);
  if (M->init_host) M->init_host(arena, host);
  if (M->init_copies) M->init_copies(arena, host);
  printf("model %s |", M->name);
  for (int i = 0; i < M->n_dims; i++)
    printf(" %s=%ld", M->dims[i].name, M->dims[i].value);
  printf(" | %d parameter tensors | arena %ld bytes\n", M->n_params, M->arena_bytes);
  if (strcmp(rt_device_name(), "cpu"))
    printf("device: %s | arena and workspace %ld bytes\n", rt_device_name(),
           rt_device_planned(device_bytes, M->workspace_bytes));
  if (M->replica_micro || M->replica_rows) {   // uneven batch shares, or micro-batch sizes
    printf("plan: %s on %d ranks | micro-batches per replica", M->layout, world_ranks());
    for (int d = 0; d < M->dp; d++) {
      printf("%s%d", d ? ", " : " ", replica_micro(d));
      if (M->replica_rows) printf(" of %ld", replica_rows(d));
    }
    if (M->replica_rows) printf(" sequences | global batch %ld sequences\n", rows_total());
    else printf(" | global batch %ld x the model's\n", micro_total());
  } else if (world_ranks() > 1 || M->micro_batches > 1) {
    printf("plan: %s on %d ranks | %d micro-batch%s | global batch %ld x the model's\n", M->layout,
           world_ranks(), M->micro_batches, M->micro_batches > 1 ? "es" : "", micro_total());
  }
  if (M->dp_parts) {   // uneven state shares: each replica's part of the sharded state
    long total = rt_parts_total(M->dp_parts, M->dp);
    printf("state: the replicas' parts of each sharded bucket");
    for (int d = 0; d < M->dp; d++) printf("%s%d/%ld", d ? ", " : " ", M->dp_parts[d], total);
    printf(" (a program of %d model%s)\n", mtc_nmodels, mtc_nmodels > 1 ? "s" : "");
  }
  if (opt.h.optimizer == RT_OPT_SGD)
    printf("optimizer sgd | lr %g | weight decay %g\n", opt.h.lr, opt.h.weight_decay);
  else
    printf("optimizer adamw | lr %g | betas %g %g | eps %g | weight decay %g\n", opt.h.lr,
           opt.h.beta1, opt.h.beta2, opt.h.eps, opt.h.weight_decay);
  if (opt.sched.kind != RT_LR_CONSTANT || opt.sched.warmup > 0)
    printf("lr schedule %s | warmup %ld steps | to lr %g at step %ld\n",
           rt_schedule_name(opt.sched.kind), opt.sched.warmup,
           opt.sched.kind == RT_LR_CONSTANT ? opt.sched.lr : opt.sched.lr_min, opt.sched.steps);

  int32_t *stream = malloc((size_t)(n + 1) * sizeof(int32_t));
  if (!stream) fail("out of memory");
  rt_data data = {0}, val = {0};
  if (opt.data)  // a resumed run's data order is the checkpoint's
    open_data(&data, "--data", opt.data, "*train*.bin", n, vocab, opt.shuffle,
              opt.resume && resumed.has_data ? resumed.seed : opt.seed);
  if (opt.data && opt.resume && resumed.has_data) {
    if (resumed.window_tokens != n)
      fail("--resume %s: the checkpoint's run read batches of %ld tokens, this program's global "
           "batch has %ld: resume with the same global batch (B x data-parallel ranks x "
           "micro-batches)", resume_dir, resumed.window_tokens, n);
    if (rt_data_seek(&data, resumed.data))
      fail("--resume %s: the checkpoint's data position (epoch %ld, shard %ld, batch %ld) is "
           "not in --data's shards: resume on the data the run read", resume_dir,
           resumed.data.epoch, resumed.data.shard, resumed.data.window);
  }
  if (opt.inputs) load_inputs(global, opt.inputs);
  else fill_synthetic(global, opt.seed, n, vocab, stream);
  char *val_batch = NULL;  // the validation's global batch: its other inputs as training's
  long val_batches = 0;
  if (opt.val_data) {
    if (n == 0) usage_error("--val-data given, but the model '%s' has no token inputs", M->name);
    open_data(&val, "--val-data", opt.val_data, "*val*.bin", n, vocab, false, 0);
    val_batches = opt.val_steps < val.total ? opt.val_steps : val.total;
    if (val_batches < opt.val_steps)
      printf("--val-data: %ld batches, fewer than --val-steps %d: each validation reads them all\n",
             val.total, opt.val_steps);
    if (!(val_batch = malloc((size_t)global_bytes))) fail("out of memory");
    memcpy(val_batch, global, (size_t)global_bytes);
  }

  // the times of the last TIMED_STEPS steps, at (step - 1) % TIMED_STEPS
  double peak = peak_flops(&opt);  // for MFU (0: unknown)
  long planned_bytes = rt_device_planned(device_bytes, M->workspace_bytes);
  long first = opt.resume ? resumed.step + 1 : 1, run = opt.steps - first + 1;  // steps to run
  if (run < 0) run = 0;
  if (opt.resume && run == 0)
    printf("--resume: the checkpoint is at step %ld, --steps %d: no step to run\n", resumed.step,
           opt.steps);
  int timed = run < TIMED_STEPS ? (int)run : TIMED_STEPS;
  double *times = malloc((size_t)(timed + 1) * sizeof(double));
  double *comm_times = malloc((size_t)(timed + 1) * sizeof(double));  // inside collectives
  if (!times || !comm_times) fail("out of memory");
  long global_tokens = M->tokens_per_step / rank_rows() * rows_total();
  rt_comm_reset_bytes();
  if (opt.profile)
    rt_prof_init(M);
  int64_t io_bytes = 0;  // gathers for --dump-grads: not the step's traffic
  for (long next = first; next <= opt.steps; next++) {  // long: --steps may be INT_MAX
    int step = (int)next;
    if (opt.profile && next > first)
      rt_prof_step_begin();
    double t0 = now_seconds(), comm0 = rt_comm_seconds();
    if (opt.data) {
      rt_data_next(&data, stream);
      fill_tokens(global, stream);
    }
    double loss = run_batch(arena, stage, true);
    if (!isfinite(loss))  // the same on every rank
      stop_together(rt_comm_rank() == 0, 0, "step %d: the loss is not finite (%s); stopping "
                    "before the optimizer writes the weights", step, nonfinite_name(loss));
    rt_comm_wait_all();  // the gradients, reduced
    // their norm; a non-finite one (the same on every rank) is a non-finite
    // gradient, which check_finite names
    double norm = grad_norm(arena, stage);
    if (opt.check_finite && !isfinite(norm)) check_finite(arena, stage, step, true);
    double coef = opt.grad_clip / (norm + 1e-6);  // torch's clip_grad_norm_
    opt.h.grad_scale = opt.grad_clip > 0 && isfinite(norm) && coef < 1 ? (float)coef : 1.0f;
    if (step == 1 && opt.dump_grads) {  // not counted in the step's time
      double t = now_seconds(), comm = rt_comm_seconds();
      int64_t before = rt_comm_bytes_sent();
      save_file(opt.dump_grads, "--dump-grads", arena, stage, VIEW_GRADS);
      io_bytes += rt_comm_bytes_sent() - before;
      t0 += now_seconds() - t;
      comm0 += rt_comm_seconds() - comm;
    }
    opt.h.step = step;
    opt.h.lr = (float)rt_schedule_lr(&opt.sched, step);
    M->update(arena, host, &opt.h);
    copies_done("the update");
    if (opt.check_finite) check_finite(arena, stage, step, false);
    rt_device_sync();
    rt_prof_step_end();
    double dt = now_seconds() - t0;
    times[(next - first) % TIMED_STEPS] = dt;
    comm_times[(next - first) % TIMED_STEPS] = rt_comm_seconds() - comm0;
    double tps = dt > 0 ? (double)global_tokens / dt : 0.0;
    double mfu = peak > 0 && dt > 0 ? M->flops_per_step / dt / peak : NAN;
    rt_log_write_step(&log, &(rt_log_step){.step = step, .steps = opt.steps, .loss = loss,
                                           .lr = opt.h.lr, .grad_norm = norm, .ms = 1e3 * dt,
                                           .tokens_per_s = tps,
                                           .gflops_per_s = dt > 0 ? M->flops_per_step / dt / 1e9 : 0,
                                           .mfu = mfu, .memory_bytes = planned_bytes,
                                           .peak_rss_bytes = log.f ? peak_rss() : 0});
    if (step % opt.log_every == 0 || step == opt.steps) {
      char eta[32], util[32] = "";
      // the time left: the mean of the last (up to 10) steps' times for each step to come
      long done = next - first + 1, k = done < 10 ? done : 10;
      double recent = 0;
      for (long j = done - k; j < done; j++) recent += times[j % TIMED_STEPS];
      format_seconds(eta, sizeof eta, recent / (double)k * (double)(opt.steps - step));
      if (isfinite(mfu)) snprintf(util, sizeof util, " | MFU %.1f%%", 100 * mfu);
      printf("step %d/%d | loss %.6f | %.1f ms | %.0f tok/s | lr %.4g | norm %.4f | ETA %s%s\n",
             step, opt.steps, loss, 1e3 * dt, tps, opt.h.lr, norm, eta, util);
      fflush(stdout);
    }
    if (opt.val_data && (step == opt.steps || (opt.val_every && step % opt.val_every == 0))) {
      double t = now_seconds();
      int64_t before = rt_comm_bytes_sent();
      double vloss = validate(arena, stage, &val, val_batches, val_batch, stream);
      io_bytes += rt_comm_bytes_sent() - before;  // not the steps' traffic
      printf("val | step %d | loss %.6f | %ld batches | %.1f ms\n", step, vloss, val_batches,
             1e3 * (now_seconds() - t));
      fflush(stdout);
      rt_log_write_val(&log, step, opt.steps, vloss, val_batches);
    }
    if (opt.ckpt_dir) {  // every N steps, at the end, and on a signal (on any rank)
      int sig = stop_signal;
      if (rt_comm_size() > 1) sig = (int)rt_allreduce_scalar(rt_group_world(), sig, RT_REDUCE_MAX);
      int64_t before = rt_comm_bytes_sent();
      if (sig || step == opt.steps || (opt.ckpt_every && step % opt.ckpt_every == 0))
        write_checkpoint(&opt, arena, stage, step, &data);
      io_bytes += rt_comm_bytes_sent() - before;
      if (sig) {
        printf("stopped by signal %d after step %d\n", sig, step);
        fflush(stdout);
        rt_log_close(&log);
        rt_comm_finalize();
        exit(128 + sig);
      }
    }
  }
  int64_t sent = rt_comm_bytes_sent() - io_bytes;

  rt_log_close(&log);
  if (opt.save) save_file(opt.save, "--save", arena, stage, VIEW_PARAMS);
  if (opt.sample) {  // on a batch of its own: the training batch's other inputs
    char *batch = malloc((size_t)global_bytes);
    if (!batch) fail("out of memory");
    memcpy(batch, global, (size_t)global_bytes);
    sample(arena, stage, &opt, &data, batch, n, vocab, stream);
    free(batch);
  }

  long measured = rt_device_measured(arena, M->arena_bytes);
  long rss = peak_rss();
  print_ranked("memory: planned arena %ld bytes (persistent %ld, peak live %ld) | "
               "measured: %s %ld bytes, process peak RSS %ld bytes\n",
               M->arena_bytes, M->persistent_bytes, M->peak_live_bytes, rt_device_measure_how(),
               measured, rss);
  if (M->swap_host_bytes > 0) {  // beside the planner's figure where it gave one
    char planner[48] = "";
    if (M->planner_swap_bytes > 0)
      snprintf(planner, sizeof planner, " (planner: %ld)", M->planner_swap_bytes);
    print_ranked("activation swap: %ld bytes of activations wait in host memory for backward%s\n",
                 M->swap_host_bytes, planner);
  }
  long since = rt_device_measured_since();
  if (since >= 0)
    print_ranked("device memory taken since the arena's allocation began: %ld bytes (%ld beyond "
                 "the arena and workspace: CUDA's code loaded at first launch, libraries' own)\n",
                 since, since - measured);
  if (M->n_buckets > 0)  // the planner's bytes for a replica of micro_batches, to this one's
    print_ranked("model state: %ld bytes on device, %ld bytes on host (planner: %ld, %ld) | "
                 "sent %lld bytes per step (planner: %ld)\n", M->model_state_bytes,
                 M->model_host_bytes, M->planner_state_bytes, M->planner_host_bytes,
                 (long long)(run > 0 ? sent / run : 0),
                 M->planner_comm_bytes + (replica_micro(rt_dist.dp_rank) - M->micro_batches) *
                                             (M->planner_comm_micro_bytes -
                                              (M->ghost ? M->planner_comm_ghost_bytes : 0)));
  double med = timed > 0 ? median(times, timed) : 0.0;
  if (rt_comm_size() > 1 && timed > 0) {  // this rank's median step and median time in collectives
    double comm = median(comm_times, timed);
    print_ranked("comm: %.1f ms per step (%.1f%% of the step)\n", 1e3 * comm,
                 med > 0 ? 100 * comm / med : 0.0);
  }
  if (timed > 0)
    printf("flops: %.3g per step, %.2f GFLOP/s\n", M->flops_per_step,
           med > 0 ? M->flops_per_step / med / 1e9 : 0.0);
  if (timed > 0 && M->planner_device) {  // the planner's price of this layout, as mtc plan splits it
    const double *t = M->planner_time_s;
    printf("timing: median step %.4g ms of %d on this machine | planner, on %s: "
           "%.4g ms (compute %.4g, recompute %.4g, tensor-parallel %.4g, data-parallel %.4g, "
           "offload %.4g, optimizer %.4g, resharding %.4g)\n", 1e3 * med, timed,
           M->planner_device, 1e3 * M->planner_step_s, 1e3 * t[0], 1e3 * t[1], 1e3 * t[2],
           1e3 * t[3], 1e3 * t[4], 1e3 * t[5], 1e3 * t[6]);
  }

  if (opt.profile && rt_comm_rank() == 0)   // (rank 0's)
    rt_prof_report(stdout, M, replica_micro(rt_dist.dp_rank));
  rt_prof_free();
  free(times);
  free(comm_times);
  free(grad_scan.pieces), free(grad_scan.runs), free(weight_scan.pieces), free(weight_scan.runs);
  free(norm_scan.pieces), free(norm_scan.runs);
  free(stream);
  rt_data_close(&data);
  rt_data_close(&val);
  free(val_batch);
  rt_device_free_stage(stage, arena, device_bytes);
  rt_device_free(arena, device_bytes);
  rt_device_host_free(host);
  rt_comm_finalize();
  return 0;
}
