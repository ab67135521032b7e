// mtc: an ahead-of-time compiler for training.
//
//   mtc compile MODEL -o DIR [options]   plan and emit a training program
//   mtc inspect MODEL [options]          print the IR (after any pass) and the memory plan
//   mtc plan MODEL --gpus N [options]    choose the parallel strategy and explain it (solver/)
//
// The pipeline, as `compile` runs it (main, at the end of this file):
//   load (DSL, ONNX or IR text) -> the training graph (passes: shapes, fusion, autodiff,
//   optimizer, precision) -> the plan (ir/plan.h: the layout flags --dp/--tp/--zero/...,
//   a plan file --plan, the solver's with --gpus/--cluster, or one rank) -> its lowering
//   (recompute, lower, swap, memplan) -> the program (codegen) and its plan.json
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calibrate.h"
#include "codegen.h"
#include "frontend.h"
#include "ir.h"
#include "passes.h"
#include "solver.h"

#define MAX_DEFINES 32

typedef struct Args {
  const char *cmd;
  const char *model;
  const char *outdir;
  FeDefine defines[MAX_DEFINES];
  int ndefines;
  PassOptions pass;
  uint64_t seed;
  bool dot;
  const char *loss, *labels; // ONNX: --loss cross-entropy|mse over the output --labels names
  // the planner (plan, and the plan.json that compile writes)
  SvConfig sv;             // batch, precision, sharing, solver limits; the cluster comes from:
  const char *gpu, *cluster;
  const char *device;      // --device FILE: a measured device (mtc calibrate) instead of --gpu
  int gpus, per_node;
  double gpu_mem, intra_bw, inter_bw;
  double host_mem;         // --host-mem: CPU bytes per GPU for offloaded state (< 0: the type's)
  const char *json;        // plan --json FILE
  const char *svg;         // plan --svg FILE
  bool formulas;           // plan --formulas
  bool any_mesh;           // plan --any-mesh: each block its own mesh (not compiled)
  bool layers_dp;          // --layers-dp: the repeated layers data parallel over dp x tp
  int layers_tp;           // --layers-tp S: the repeated layers tensor parallel over S of tp
                           // (0: not given)
  // compile, inspect: one layout for every block instead of the solver's choice
  Plan layout;             // --dp, --tp, --zero, --micro-batches, --offload, --checkpoint
  bool forced;             // --dp, --tp, --zero, --micro-batches or --offload(-grads) given
  bool offload;            // --offload given
  bool zero;               // --zero given
  const char *plan_file;   // compile --plan FILE: a saved plan instead of the solver's
  bool checkpoint;         // --checkpoint given (layout.checkpoint says which layers)
  bool swap;               // --swap given (layout.swap says which layers)
} Args;

static void usage(FILE *f) {
  fputs("usage: mtc compile MODEL -o DIR [--gpus N ... | --cluster FILE | --plan FILE.json |\n"
        "                                     --dp D --tp T ...] [options]\n"
        "       mtc inspect MODEL [--dump-after PASS] [--dot] [options]\n"
        "       mtc plan MODEL [--gpus N --gpu TYPE | --gpus N --device FILE | --cluster FILE]\n"
        "                [options]\n"
        "       mtc calibrate [-o FILE] [--ranks R] (this machine's device profile; --help)\n"
        "\n"
        "MODEL is a .mtc DSL file, an .onnx model or an .ir IR text file.\n"
        "\n"
        "options:\n"
        "  -D NAME=VALUE          set a dim (e.g. -D L=12); repeatable\n"
        "  -o DIR                 output folder (compile)\n"
        "  --optimizer adamw|sgd  the update rule (default adamw)\n"
        "  --lr X --beta1 X --beta2 X --eps X --weight-decay X\n"
        "                         optimizer defaults compiled into the program (train's\n"
        "                         flags override them; 1e-3, 0.9, 0.999, 1e-8, 0)\n"
        "  --freeze REGEX         parameters whose names match REGEX (POSIX extended) are\n"
        "                         not trained: constants of the model, no gradient, no\n"
        "                         optimizer state (PyTorch's requires_grad=False)\n"
        "  --padding-idx REGEX=ROW  embedding tables whose names match REGEX give row ROW\n"
        "                         no gradient (PyTorch's Embedding padding_idx, which an\n"
        "                         ONNX Gather cannot say)\n"
        "  --no-decay REGEX       parameters whose names match REGEX (POSIX extended) get\n"
        "                         no weight decay, all others do (default: none of rank\n"
        "                         0 or 1, i.e. norms and biases; '^$' decays every one)\n"
        "  --no-epilogue          a linear layer's bias add and the GELU after it stay kernels\n"
        "                         of their own instead of their GEMM's epilogue (the same\n"
        "                         results in fp32, bit for bit)\n"
        "  --seed N               seed of the weights and the dropout masks (default 1337)\n"
        "  --dump-after PASS      print the IR after PASS (shapes, fusion, freeze,\n"
        "                         autodiff, optimizer, precision, vocab, recompute, lower,\n"
        "                         epilogue, swap, copies, memplan, or all)\n"
        "  --dot                  print Graphviz instead of IR text (inspect) or of the\n"
        "                         report (plan: a box per block, an edge per activation)\n"
        "  --loss cross-entropy|mse  ONNX: add this loss (for a model without a scalar\n"
        "                         output) over the output --labels names\n"
        "  --labels OUTPUT        ONNX: the graph output the loss is over (default: the\n"
        "                         only one); the labels become a new input 'labels'\n"
        "\n"
        "planner (plan; compile writes the plan to DIR/plan.json):\n"
        "  --gpus N               GPUs (default 1)\n"
        "  --gpu TYPE             A100-40GB, A100-80GB, H100-80GB (default), H200-141GB,\n"
        "                         V100-32GB, L4-24GB, RTX4090-24GB\n"
        "  --gpu-mem SIZE         memory per GPU instead of the type's (e.g. 24GiB)\n"
        "  --host-mem SIZE        CPU memory per GPU for offloaded optimizer state instead\n"
        "                         of the type's (e.g. 64GiB; 0: no offload)\n"
        "  --gpus-per-node N      GPUs per node (default 8)\n"
        "  --intra-bw N --inter-bw N\n"
        "                         GB/s per GPU inside a node and between nodes\n"
        "  --device FILE          a device profile (mtc calibrate's: this machine's CPU)\n"
        "                         instead of --gpu\n"
        "  --cluster FILE         a JSON cluster of device groups instead of the above\n"
        "  --batch N              global batch in sequences (default micro-batch x GPUs)\n"
        "  --micro-batch N        sequences per model replica per micro-step (default: the\n"
        "                         model's batch dim; -D B=N does the same)\n"
        "  --seq N                sequence length (the model's sequence dim)\n"
        "  --precision bf16|fp32  bf16 with fp32 master weights (default), or fp32\n"
        "  --grad-precision bf16|fp32  under bf16: the gradients made, accumulated and reduced\n"
        "                         in bf16 (ZeRO's 16 bytes a parameter, half the bytes of\n"
        "                         fp32's reductions and offload copies), or in fp32 (default;\n"
        "                         Megatron's main grads, 18 bytes a parameter)\n"
        "  --json FILE            write the plan as JSON (plan)\n"
        "  --svg FILE             draw the plan as SVG: blocks, memory and time bars, baselines\n"
        "                         (plan; compile writes DIR/plan.svg beside plan.json)\n"
        "  --formulas             print per-block memory and FLOPs as formulas (plan)\n"
        "  --any-mesh             plan: let each block take its own mesh (TP2 and TP4 beside\n"
        "                         TP8), each priced as a mesh of its own, where that beats the\n"
        "                         plan compile --gpus N builds (which plan reports by default);\n"
        "                         a note says when mtc compile --plan refuses the plan\n"
        "  --no-share             one set of variables per block, even for identical blocks\n"
        "  --seq-parallel         Megatron sequence parallelism under tensor parallelism:\n"
        "                         the activations between its regions split on the\n"
        "                         sequence (plan, and the programs compile writes)\n"
        "  --time-limit S --mip-gap X\n"
        "                         GLPK's limits (default 20 s, 0.001)\n"
        "\n"
        "compile with --gpus N (or --cluster FILE): the program runs the planner's choice,\n"
        "one mesh of dp x tp ranks for every block (per-block ZeRO and offload share,\n"
        "the first S layers swapped and the K after them checkpointed; on a mixed cluster\n"
        "each group's replicas run their own number of micro-batches, ranks numbered group\n"
        "by group); plan.json in DIR\n"
        "  --plan FILE.json       apply a saved or edited plan (mtc plan --json) instead;\n"
        "                         with --cluster FILE the program prints the planner's step\n"
        "                         for those groups (ranks numbered group by group)\n"
        "\n"
        "one layout for every block (compile lowers it; plan prices it: its step split as\n"
        "the planner splits it and its memory per GPU; ranks = dp x tp, or dp x Q x Q):\n"
        "  --dp D                 data-parallel ranks; the global batch is the model's\n"
        "                         batch dim x D x micro-batches\n"
        "  --zero 0|1|2|3         ZeRO stage (default 0)\n"
        "  --micro-batches M      forward/backward passes per optimizer step (default 1)\n"
        "  --tp T                 tensor-parallel ranks (Megatron 1D; T divides the heads,\n"
        "                         hidden sizes and vocabulary)\n"
        "  --tp2d Q               Optimus 2D: each replica on a Q x Q grid (Q*Q ranks; the\n"
        "                         batch over its rows, features and weights over both;\n"
        "                         Q divides the batch, heads and hidden sizes)\n"
        "  --layers-dp            with --tp: the repeated layers data parallel over all\n"
        "                         dp x tp ranks (their batch split over tp too, their\n"
        "                         weights whole), the rest (embeddings, head) tensor parallel\n"
        "  --layers-tp S          with --tp T: the repeated layers tensor parallel over S\n"
        "                         of the T ranks (S divides T) and data parallel over the\n"
        "                         T / S groups of them, the rest over all T\n"
        "  --checkpoint none|all|K\n"
        "                         activation checkpointing: backward recomputes the forward\n"
        "                         of no layer (default), every repeated layer, or the first\n"
        "                         K (compile, inspect; also with one rank)\n"
        "  --swap none|all|S      activation swap: the first S repeated layers' activations\n"
        "                         go to host memory after forward and come back before\n"
        "                         backward (default none; --checkpoint then takes the K\n"
        "                         layers after them)\n"
        "  --offload F            the share F (0 to 1) of each block's optimizer state that\n"
        "                         lives in host memory, its update on the host's threads\n"
        "                         (default 0; with one rank too)\n"
        "  --offload-grads        the gradients too, as ZeRO-Offload does: each micro-batch's\n"
        "                         leave the device once reduced and are summed on the host\n"
        "                         (implies --offload 1)\n"
        "  --offload-params       the parameters too, as ZeRO-Infinity does: each rank's\n"
        "                         shard lives in host memory, copied to the device and\n"
        "                         gathered before forward and backward read it (implies\n"
        "                         --zero 3 --offload-grads); with --offload F below 1, the\n"
        "                         last F of each shard only, the gradients on the device\n"
        "  -h, --help             this text\n",
        f);
}

// One line on stderr, exit 2: the command line is wrong.
static _Noreturn void bad_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static _Noreturn void bad_usage(const char *fmt, ...) {
  fputs("mtc: error: ", stderr);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs(" (see mtc --help)\n", stderr);
  exit(2);
}

static double parse_double(const char *flag, const char *s) {
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (!*s || *end || errno)
    bad_usage("%s takes a number", flag);
  return x;
}

// A whole number from 1 to max.
static int64_t parse_whole(const char *flag, const char *s, double max) {
  double x = parse_double(flag, s);
  if (!(x >= 1 && x <= max) || x != floor(x))
    bad_usage("%s takes a whole number from 1 to %.0f, not '%s'", flag, max, s);
  return (int64_t)x;
}

// int64 counts: batches, sequence lengths.
static int64_t parse_count(const char *flag, const char *s) { return parse_whole(flag, s, 1e12); }

// int counts: micro-batches, layers.
static int parse_small_count(const char *flag, const char *s) {
  return (int)parse_whole(flag, s, 1e6);
}

// GPUs and ranks: at most SV_MAX_GPUS.
static int parse_gpus(const char *flag, const char *s) {
  return (int)parse_whole(flag, s, SV_MAX_GPUS);
}

// --checkpoint or --swap none|all|K: 0, PLAN_CHECKPOINT_ALL or K >= 1 layers.
static int parse_layers(const char *flag, const char *s) {
  if (!strcmp(s, "none"))
    return 0;
  if (!strcmp(s, "all"))
    return PLAN_CHECKPOINT_ALL;
  char *end;
  errno = 0;
  long k = strtol(s, &end, 10);
  if (!*s || *end || errno || k < 1 || k > 1000000 || s[0] == '+')
    bad_usage("%s takes none, all or a number of layers K >= 1, not '%s'", flag, s);
  return (int)k;
}

// The planner's flags. Returns false for any other flag.
static bool parse_plan_flag(Args *a, const char *s, const char *next, int *i) {
#define NEXT() (next ? (++*i, next) : (bad_usage("%s needs a value", s), ""))
  if (!strcmp(s, "--gpus")) {
    a->gpus = parse_gpus(s, NEXT());
  } else if (!strcmp(s, "--gpu")) {
    a->gpu = NEXT();
  } else if (!strcmp(s, "--gpu-mem")) {
    const char *v = NEXT();
    if (sv_parse_size(v, &a->gpu_mem) || a->gpu_mem <= 0)
      bad_usage("--gpu-mem takes a size like 24GiB or 80GB, not '%s'", v);
  } else if (!strcmp(s, "--host-mem")) {
    const char *v = NEXT();
    if (sv_parse_size(v, &a->host_mem))
      bad_usage("--host-mem takes a size like 256GiB, or 0 for no offload, not '%s'", v);
  } else if (!strcmp(s, "--gpus-per-node")) {
    a->per_node = parse_gpus(s, NEXT());
  } else if (!strcmp(s, "--intra-bw")) {
    a->intra_bw = parse_count(s, NEXT()) * 1e9;
  } else if (!strcmp(s, "--inter-bw")) {
    a->inter_bw = parse_count(s, NEXT()) * 1e9;
  } else if (!strcmp(s, "--cluster")) {
    a->cluster = NEXT();
  } else if (!strcmp(s, "--device")) {
    a->device = NEXT();
  } else if (!strcmp(s, "--batch")) {
    a->sv.global_batch = parse_count(s, NEXT());
  } else if (!strcmp(s, "--micro-batch")) {
    a->sv.micro_batch = parse_count(s, NEXT());
  } else if (!strcmp(s, "--seq")) {
    a->sv.seq = parse_count(s, NEXT());
  } else if (!strcmp(s, "--precision")) {
    const char *v = NEXT();
    if (strcmp(v, "bf16") && strcmp(v, "fp32"))
      bad_usage("--precision takes bf16 or fp32, not '%s'", v);
    a->pass.precision = !strcmp(v, "bf16") ? PASS_PRECISION_BF16 : PASS_PRECISION_FP32;
  } else if (!strcmp(s, "--grad-precision")) {
    const char *v = NEXT();
    if (strcmp(v, "bf16") && strcmp(v, "fp32"))
      bad_usage("--grad-precision takes bf16 or fp32, not '%s'", v);
    a->pass.grads_bf16 = !strcmp(v, "bf16");
  } else if (!strcmp(s, "--json")) {
    a->json = NEXT();
  } else if (!strcmp(s, "--svg")) {
    a->svg = NEXT();
  } else if (!strcmp(s, "--formulas")) {
    a->formulas = true;
  } else if (!strcmp(s, "--any-mesh")) {
    a->any_mesh = true;
  } else if (!strcmp(s, "--no-share")) {
    a->sv.share_blocks = false;
  } else if (!strcmp(s, "--seq-parallel")) {
    a->sv.seq_parallel = true;
  } else if (!strcmp(s, "--time-limit")) {
    a->sv.time_limit = parse_double(s, NEXT());
    if (!(a->sv.time_limit > 0))
      bad_usage("%s takes seconds, more than 0", s);
  } else if (!strcmp(s, "--mip-gap")) {
    a->sv.mip_gap = parse_double(s, NEXT());
    if (!(a->sv.mip_gap >= 0 && a->sv.mip_gap < 1))
      bad_usage("%s takes a relative gap from 0 to 1 (0.001 is 0.1%%)", s);
  } else {
    return false;
  }
  return true;
#undef NEXT
}

static void parse_define(Args *a, const char *s) {
  const char *eq = strchr(s, '=');
  if (!eq || eq == s)
    bad_usage("-D takes NAME=VALUE, not '%s'", s);
  char *end;
  errno = 0;
  long long v = strtoll(eq + 1, &end, 10);
  if (!eq[1] || *end || errno || v <= 0)
    bad_usage("-D %s: the value must be a positive integer", s);
  if (a->ndefines == MAX_DEFINES)
    bad_usage("too many -D options (at most %s)", "32");
  FeDefine *d = &a->defines[a->ndefines++];
  d->name = strndup(s, (size_t)(eq - s));
  d->value = v;
}

static Args parse_args(int argc, char **argv) {
  Args a = {.pass = pass_default_options(), .seed = 1337, .sv = sv_default_config(),
            .host_mem = -1, .layout = plan_single()};
  a.pass.precision = PASS_PRECISION_BF16;  // compile, inspect and plan: what users train with
  if (argc < 2) {
    usage(stderr);
    exit(2);
  }
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    const char *next = i + 1 < argc ? argv[i + 1] : NULL;
#define VALUE() (next ? (i++, next) : (bad_usage("%s needs a value", s), ""))
    if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(s, "-D")) {
      parse_define(&a, VALUE());
    } else if (!strncmp(s, "-D", 2)) {
      parse_define(&a, s + 2);
    } else if (!strcmp(s, "-o")) {
      a.outdir = VALUE();
    } else if (!strcmp(s, "--optimizer")) {
      const char *o = VALUE();
      if (!strcmp(o, "adamw"))
        a.pass.optimizer = OPTIM_ADAMW;
      else if (!strcmp(o, "sgd"))
        a.pass.optimizer = OPTIM_SGD;
      else
        bad_usage("--optimizer takes adamw or sgd, not '%s'", o);
    } else if (!strcmp(s, "--lr")) {
      a.pass.lr = parse_double(s, VALUE());
    } else if (!strcmp(s, "--beta1")) {
      a.pass.beta1 = parse_double(s, VALUE());
    } else if (!strcmp(s, "--beta2")) {
      a.pass.beta2 = parse_double(s, VALUE());
    } else if (!strcmp(s, "--eps")) {
      a.pass.eps = parse_double(s, VALUE());
    } else if (!strcmp(s, "--weight-decay")) {
      a.pass.weight_decay = parse_double(s, VALUE());
    } else if (!strcmp(s, "--no-decay")) {
      a.pass.no_decay = VALUE();
    } else if (!strcmp(s, "--no-epilogue")) {
      a.pass.no_epilogue = true;
    } else if (!strcmp(s, "--freeze")) {
      a.pass.freeze = VALUE();
    } else if (!strcmp(s, "--padding-idx")) {
      a.pass.padding_idx = VALUE();
    } else if (!strcmp(s, "--seed")) {
      const char *v = VALUE();
      char *end;
      errno = 0;
      unsigned long long seed = strtoull(v, &end, 10);
      if (!isdigit((unsigned char)*v) || *end || errno)
        bad_usage("--seed takes a whole number from 0 to %llu, not '%s'",
                  (unsigned long long)UINT64_MAX, v);
      a.seed = seed;
    } else if (!strcmp(s, "--dump-after")) {
      a.pass.dump_after = VALUE();
      if (strcmp(a.pass.dump_after, "all") && !pass_exists(a.pass.dump_after))
        bad_usage("--dump-after: no pass named '%s' (shapes, fusion, freeze, autodiff, "
                  "optimizer, precision, vocab, recompute, lower, epilogue, swap, copies, memplan, all)",
                  a.pass.dump_after);
    } else if (!strcmp(s, "--dot")) {
      a.dot = a.pass.dot = true;
    } else if (!strcmp(s, "--loss")) {
      a.loss = VALUE();
      if (strcmp(a.loss, "cross-entropy") && strcmp(a.loss, "mse"))
        bad_usage("--loss takes cross-entropy or mse, not '%s'", a.loss);
    } else if (!strcmp(s, "--labels")) {
      a.labels = VALUE();
    } else if (!strcmp(s, "--dp")) {
      a.layout.mesh.size[IR_MESH_DP] = parse_gpus(s, VALUE()), a.forced = true;
    } else if (!strcmp(s, "--tp")) {
      a.layout.mesh.size[IR_MESH_TP] = parse_gpus(s, VALUE()), a.forced = true;
    } else if (!strcmp(s, "--tp2d")) {
      int q = parse_gpus(s, VALUE());
      a.layout.mesh.size[IR_MESH_ROW] = a.layout.mesh.size[IR_MESH_COL] = q, a.forced = true;
    } else if (!strcmp(s, "--zero")) {
      const char *v = VALUE();
      if (strlen(v) != 1 || v[0] < '0' || v[0] > '3')
        bad_usage("--zero takes a stage 0, 1, 2 or 3, not '%s'", v);
      a.layout.rest.zero = v[0] - '0', a.forced = a.zero = true;
    } else if (!strcmp(s, "--micro-batches")) {
      a.layout.micro_batches = parse_small_count(s, VALUE()), a.forced = true;
    } else if (!strcmp(s, "--plan")) {
      a.plan_file = VALUE();
    } else if (!strcmp(s, "--checkpoint")) {
      a.layout.checkpoint = parse_layers(s, VALUE()), a.checkpoint = true;
    } else if (!strcmp(s, "--swap")) {
      a.layout.swap = parse_layers(s, VALUE()), a.swap = true;
    } else if (!strcmp(s, "--offload")) {
      const char *v = VALUE();
      char *end;
      errno = 0;
      double share = a.layout.rest.offload = strtod(v, &end);
      if (!*v || *end || errno || !(share >= 0 && share <= 1))
        bad_usage("--offload takes a share of the optimizer state from 0 to 1, not '%s'", v);
      a.forced = a.offload = true;
    } else if (!strcmp(s, "--offload-grads")) {
      a.layout.rest.offload_grads = a.forced = true;
    } else if (!strcmp(s, "--offload-params")) {
      a.layout.rest.offload_params = a.forced = true;
    } else if (!strcmp(s, "--layers-dp")) {
      a.layers_dp = a.forced = true;
    } else if (!strcmp(s, "--layers-tp")) {
      a.layers_tp = parse_gpus(s, VALUE()), a.forced = true;
    } else if (parse_plan_flag(&a, s, next, &i)) {
      continue;
    } else if (s[0] == '-') {
      bad_usage("unknown option '%s'", s);
    } else if (!a.cmd) {
      a.cmd = s;
    } else if (!a.model) {
      a.model = s;
    } else {
      bad_usage("unexpected argument '%s'", s);
    }
#undef VALUE
  }
  if (!a.cmd || (strcmp(a.cmd, "compile") && strcmp(a.cmd, "inspect") && strcmp(a.cmd, "plan")))
    bad_usage("unknown command '%s' (compile, inspect, plan, calibrate)", a.cmd ? a.cmd : "");
  if (a.cluster && (a.gpus || a.gpu || a.device || a.gpu_mem || a.per_node || a.host_mem >= 0))
    bad_usage("--cluster %s describes the GPUs: leave out --gpus, --gpu, --device, --gpu-mem, "
              "--host-mem and --gpus-per-node", a.cluster);
  if (a.device && a.gpu)
    bad_usage("--device %s describes the device: leave out --gpu %s", a.device, a.gpu);
  if (!a.model)
    bad_usage("%s needs a model file", a.cmd);
  if ((a.forced || a.checkpoint || a.swap) && !strcmp(a.cmd, "plan") &&
      (a.json || a.svg || a.dot || a.formulas))
    bad_usage("--dp, --tp, --tp2d, --zero, --micro-batches, --offload, --checkpoint and --swap "
              "make plan price that one layout: --json, --svg, --dot and --formulas describe a "
              "plan it chooses");
  if (a.any_mesh && (strcmp(a.cmd, "plan") || a.forced || a.checkpoint || a.swap))
    bad_usage("--any-mesh lets mtc plan give each block its own mesh, which mtc compile --gpus "
              "does not plan: use it with plan alone, without a layout's flags");
  a.layout.seq_parallel = a.sv.seq_parallel;
  if (a.pass.grads_bf16 && a.pass.precision != PASS_PRECISION_BF16)
    bad_usage("--grad-precision bf16 keeps the gradients of bf16 mixed precision in bf16: "
              "leave out --precision fp32, or --grad-precision bf16");
  if (a.layout.rest.offload_params && a.zero && a.layout.rest.zero != 3)
    bad_usage("--offload-params keeps each rank's shard of the parameters in host memory, which "
              "ZeRO-3's shards are: leave out --zero %d, or make it 3", a.layout.rest.zero);
  if (a.layout.rest.offload_params)
    a.layout.rest.zero = 3;
  if (a.layout.rest.offload_params && a.offload && !(a.layout.rest.offload > 0))
    bad_usage("--offload-params keeps the offloaded share of each shard in host memory: give "
              "--offload a share above 0, or leave it out (all of it)");
  // --offload-params alone: all of each shard, the gradients with it (ZeRO-Infinity's
  // offload_param beside offload_optimizer)
  if (a.layout.rest.offload_params && (!a.offload || a.layout.rest.offload == 1))
    a.layout.rest.offload_grads = true;
  if (a.layout.rest.offload_grads && a.offload && a.layout.rest.offload != 1)
    bad_usage("--offload-%s moves every gradient, and all of the optimizer state with it: "
              "leave out --offload %g, or make it 1",
              a.layout.rest.offload_params ? "params" : "grads", a.layout.rest.offload);
  if (a.layout.rest.offload_grads)
    a.layout.rest.offload = 1;
  if (a.plan_file && (strcmp(a.cmd, "compile") || a.forced || a.gpus))
    bad_usage("--plan %s is a layout for compile: leave out --dp, --tp, --zero, "
              "--micro-batches, --offload and --gpus", a.plan_file);
  int dp = a.layout.mesh.size[IR_MESH_DP], tp = a.layout.mesh.size[IR_MESH_TP];
  int q = a.layout.mesh.size[IR_MESH_ROW];
  if (tp > 1 && q > 1)
    bad_usage("--tp %d --tp2d %d: a replica is split over tp ranks (Megatron 1D) or over a "
              "q x q grid (Optimus 2D), not both", tp, q);
  if (a.layers_dp && tp < 2)
    bad_usage("--layers-dp makes the repeated layers data parallel over the tp ranks too, "
              "beside the tensor-parallel rest: give --tp 2 or more");
  if (a.layers_tp && (a.layers_tp < 2 || a.layers_tp >= tp || tp % a.layers_tp || a.layers_dp))
    bad_usage("--layers-tp %d makes the repeated layers tensor parallel over %d of the --tp "
              "ranks: give --tp a multiple of it, above it (and not --layers-dp)", a.layers_tp,
              a.layers_tp);
  double ranks = (double)dp * tp * q * q;   // (exact: at most 2^64)
  if (ranks > SV_MAX_GPUS && q > 1)
    bad_usage("--dp %d --tp2d %d: %.0f ranks, more than %d", dp, q, ranks, SV_MAX_GPUS);
  if (ranks > SV_MAX_GPUS)
    bad_usage("--dp %d --tp %d: %.0f ranks, more than %d", dp, tp, ranks, SV_MAX_GPUS);
  if (!strcmp(a.cmd, "compile") && !a.outdir)
    bad_usage("compile needs an output folder: -o %s", "DIR");
  return a;
}

static IrGraph *load(const Args *a, IrDiag *d) {
  FeLoadOptions o = {.defines = a->defines, .ndefines = a->ndefines, .loss = a->loss,
                     .labels = a->labels, .seed = a->seed};
  return fe_load(a->model, &o, d);
}

// The model with its dims bound from sv (micro_batch, seq), through the training passes into
// ctx: *g (NULL where it did not load) and 0, or -1 with d.
static int build(const Args *a, const SvConfig *sv, PassCtx *ctx, IrGraph **g, IrDiag *d) {
  *g = load(a, d);
  int rc = *g ? sv_bind_dims(*g, sv, d) : -1;
  return rc ? rc : pass_build_training(*g, ctx);
}

// What --swap and --checkpoint did, as lines that start with `lead`.
static void print_checkpoint(const char *lead, const Args *a, const PassCtx *ctx) {
  if (a->swap)
    printf("%sswapping %d of %d repeated layers: their activations wait in host memory for "
           "backward\n", lead, ctx->nswapped, ctx->nlayers);
  if (!a->checkpoint)
    return;
  if (ctx->ncheckpointed)
    printf("%scheckpointing %d of %d repeated layers: backward recomputes their activations\n",
           lead, ctx->ncheckpointed, ctx->nlayers);
  else
    printf("%scheckpointing 0 of %d repeated layers: nothing is recomputed\n", lead,
           ctx->nlayers);
}

static void print_memory(IrGraph *g, const MemPlan *m) {
  printf("# memory plan: arena %lld bytes = persistent %lld + transient %lld\n",
         (long long)m->arena_bytes, (long long)m->persistent_bytes,
         (long long)(m->arena_bytes - m->persistent_bytes));
  printf("# peak live %lld bytes at schedule position %d = %s\n", (long long)m->peak_live_bytes,
         m->peak_at, sym_str(&g->arena, m->peak_formula, &g->syms));
}

// The planner's configuration: the flags, and the cluster from --cluster or --gpus/--gpu.
static int plan_config(const Args *a, SvConfig *cfg, IrDiag *d) {
  *cfg = a->sv;
  if (a->cluster)
    return sv_cluster_load(&cfg->cluster, a->cluster, d);
  int rc;
  if (a->device) {
    SvDevice dev;
    rc = sv_device_load(&dev, a->device, d) ||
         sv_cluster_of(&cfg->cluster, &dev, a->gpus ? a->gpus : 1, a->per_node, a->gpu_mem,
                       a->intra_bw, a->inter_bw, d);
  } else {
    rc = sv_cluster_simple(&cfg->cluster, a->gpu ? a->gpu : "H100-80GB", a->gpus ? a->gpus : 1,
                           a->per_node, a->gpu_mem, a->intra_bw, a->inter_bw, d);
  }
  if (rc)
    return -1;
  if (a->host_mem >= 0)
    cfg->cluster.group[0].dev.host_mem = a->host_mem;
  return 0;
}

// The planner's step time for a layout (before it is lowered), on the flags'
// GPUs (without --gpus, as many as the plan has ranks): sv_price's 0, 1 or -1.
static int layout_config(const Args *a, const Plan *plan, SvConfig *cfg, IrDiag *d) {
  Args on = *a;
  if (!on.gpus && !on.cluster)
    on.gpus = mesh_ranks(&plan->mesh);
  return plan_config(&on, cfg, d);
}

// (cfg: the configuration it priced on)
static int price_layout(IrGraph *g, const Args *a, const Plan *plan, SvPriced *out,
                        SvConfig *cfg, IrDiag *d) {
  return layout_config(a, plan, cfg, d) ? -1 : sv_price(g, cfg, plan, out, d);
}

// The layout the flags force (--dp, --tp, ..., --layers-dp) for g's blocks.
static int forced_layout(IrGraph *g, const Args *a, Plan *plan, IrDiag *d) {
  *plan = a->layout;
  plan->lower = true;
  if (!a->layers_dp && !a->layers_tp)
    return 0;
  int nb = ir_nblocks(g);
  const char *flag = a->layers_dp ? "--layers-dp" : "--layers-tp";
  if (nb < 2)
    return ir_error(d, (IrLoc){0}, "%s: the model has no repeated layers (a DSL `repeat`, or "
                    "the layers an ONNX model's names number) to give their own layout; leave "
                    "it out", flag);
  if (plan_alloc_blocks(plan, nb))
    return ir_error(d, (IrLoc){0}, "out of memory");
  for (int b = 1; b < nb; b++)
    plan->block[b].batch_tp = a->layers_dp, plan->block[b].sub = a->layers_tp > 0;
  if (a->layers_tp)
    plan->mesh = mesh_with_sub(plan->mesh, a->layers_tp);
  return 0;
}

// mtc plan --dp/--tp/.../--checkpoint: what the planner says of that one
// layout (what compile prints, and the program beside its measured step),
// with its split and memory. A layout that does not fit is reported, not an
// error: the question was its price.
static int price_forced(IrGraph *g, const Args *a, IrDiag *d) {
  Plan plan;
  SvPriced p;
  SvConfig cfg;
  if (forced_layout(g, a, &plan, d) || price_layout(g, a, &plan, &p, &cfg, d)) {
    plan_free(&plan);
    return -1;
  }
  char mesh[64], ck[48] = "none", sw[64] = "", mem[32], cap[32];
  mesh_str(mesh, sizeof mesh, &plan.mesh);
  if (plan.checkpoint == PLAN_CHECKPOINT_ALL)
    snprintf(ck, sizeof ck, plan.swap ? "every layer after them" : "every layer");
  else if (plan.checkpoint == 1)
    snprintf(ck, sizeof ck, "the first layer%s", plan.swap ? " after them" : "");
  else if (plan.checkpoint > 0)
    snprintf(ck, sizeof ck, "the first %d layers%s", plan.checkpoint,
             plan.swap ? " after them" : "");
  if (plan.swap == PLAN_CHECKPOINT_ALL)
    snprintf(sw, sizeof sw, ", every layer's activations swapped");
  else if (plan.swap == 1)
    snprintf(sw, sizeof sw, ", the first layer's activations swapped");
  else if (plan.swap > 0)
    snprintf(sw, sizeof sw, ", the first %d layers' activations swapped", plan.swap);
  printf("layout: %s%s, ZeRO-%d, offload %g%%%s, %d micro-batch%s per replica%s, checkpointing "
         "%s%s, on %d x %s\n", mesh, a->layers_dp ? " (the layers data parallel over tp too)" : "",
         plan.rest.zero, 100 * plan.rest.offload,
         plan.rest.offload_params ? (plan.rest.offload_grads ? " with the gradients and parameters"
                                                             : " with the parameters")
         : plan.rest.offload_grads ? " with the gradients" : "", plan.micro_batches,
         plan.micro_batches == 1 ? "" : "es", sw, ck,
         plan.seq_parallel ? ", sequence-parallel" : "", mesh_ranks(&plan.mesh), p.device);
  printf("step: %.4g ms =", 1e3 * p.step_s);
  for (int i = 0; i <= SV_NT; i++)
    printf("%s %s %.4g", i ? " +" : "", sv_time_names[i], 1e3 * p.t[i]);
  printf("\nmemory per GPU: %s of %s usable: %s\n", sv_bytes_str(mem, p.mem_bytes),
         sv_bytes_str(cap, p.usable_bytes), p.fits ? "fits" : "does not fit");
  plan_free(&plan);
  return 0;
}

// --any-mesh: says when mtc compile --plan would refuse the plan (blocks on meshes that no
// one program runs, or checkpointed in an order it does not), and why.
static void note_meshes(const SvPlan *p) {
  char why[1024];
  if (!p->sol.feasible || sv_plan_runs(p, why, sizeof why))
    return;
  printf("\nnote: mtc compile --plan refuses this plan: %s; without --any-mesh, mtc plan reports "
         "the plan it builds\n", why);
}

// mtc plan: the formulas, or the plan's report (and --json). No plan fits: an error.
static int run_plan(IrGraph *g, const Args *a, IrDiag *d) {
  if (a->forced || a->checkpoint || a->swap)
    return price_forced(g, a, d);
  SvConfig cfg;
  if (plan_config(a, &cfg, d))
    return -1;
  if (a->formulas) {
    SvModel *m = sv_model_build(g, cfg.share_blocks, cfg.seq_parallel, d);
    if (!m)
      return -1;
    sv_print_formulas(stdout, m);
    sv_model_free(m);
    return 0;
  }
  // the plan mtc compile runs, or (--any-mesh) one that may give blocks meshes of their own,
  // unless compile's is faster (own: then that one's step, INFINITY when none fits)
  SvPlan *p;
  double own = -1;
  if (a->any_mesh ? sv_plan(g, &cfg, &p, d) : sv_plan_compiled(g, &cfg, &p, d))
    return -1;
  if (a->any_mesh) {
    SvPlan *c = NULL;
    IrDiag quiet = {0};
    if (!sv_plan_compiled(g, &cfg, &c, &quiet) && c->sol.feasible &&
        (!p->sol.feasible || c->sol.time < p->sol.time)) {
      own = p->sol.feasible ? p->sol.time : INFINITY;
      sv_plan_free(p);
      p = c;
    } else {
      sv_plan_free(c);
    }
  }
  // --json - or --svg -: standard output is that document alone
  bool piped = (a->json && !strcmp(a->json, "-")) || (a->svg && !strcmp(a->svg, "-"));
  if (a->json && a->svg && piped) {
    sv_plan_free(p);
    return ir_error(d, (IrLoc){0}, "--json and --svg cannot share standard output: give one "
                    "of them a file");
  }
  if (a->dot && !piped)
    sv_report_dot(stdout, p);
  else if (!piped)
    sv_report(stdout, p);
  if (a->any_mesh && !piped && isinf(own))
    printf("\nnote: mtc compile's plan (above) fits where none that gives blocks meshes of their "
           "own does\n");
  else if (a->any_mesh && !piped && own >= 0)
    printf("\nnote: mtc compile's plan (above) is faster than any that gives blocks meshes of "
           "their own (%.2f ms a step)\n", own * 1e3);
  else if (a->any_mesh && !piped)
    note_meshes(p);
  int rc = a->json ? sv_write_json(p, a->json, d) : 0;
  if (!rc && a->svg)
    rc = sv_write_svg(p, a->svg, d);
  if (!rc && !p->sol.feasible)
    rc = ir_error(d, (IrLoc){0}, "%s", p->why);
  sv_plan_free(p);
  return rc;
}

// DIR/plan.json and DIR/plan.svg: the planner's plan p.
static int plan_files(const SvPlan *p, const char *dir, IrDiag *d) {
  char path[4300];
  snprintf(path, sizeof path, "%s/plan.json", dir);
  int rc = sv_write_json(p, path, d);
  snprintf(path, sizeof path, "%s/plan.svg", dir);
  return rc ? rc : sv_write_svg(p, path, d);
}

// mtc compile of one rank: the planner's plan for the model goes into DIR (lowering it is
// compile --gpus N).
static int write_plan(IrGraph *g, const Args *a, const char *dir, IrDiag *d) {
  SvConfig cfg;
  SvPlan *p;
  if (plan_config(a, &cfg, d) || sv_plan(g, &cfg, &p, d))
    return -1;
  int rc = plan_files(p, dir, d);
  if (!rc && !p->sol.feasible)
    fprintf(stderr, "mtc: warning: %s\n", p->why);
  sv_plan_free(p);
  return rc;
}

// How --data feeds the token inputs, one line (none without any): a model
// that shifts its labels itself gets the tokens, one that does not the next
// tokens (frontend/onnx.c decides from the graph).
static void print_token_inputs(const IrGraph *g) {
  const char *sep = "mtc: --data feeds ";
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if (v->role != ROLE_INPUT)
      continue;
    const char *what = v->input_kind == INPUT_TOKENS    ? "the tokens"
                       : v->input_kind == INPUT_TARGETS ? "the next tokens (targets)"
                       : v->input_kind == INPUT_LABELS  ? "the tokens again (labels the model "
                                                          "shifts itself)"
                                                        : NULL;
    if (!what)
      continue;
    printf("%s'%s' %s", sep, v->name, what);
    sep = ", ";
  }
  if (strcmp(sep, ", ") == 0)
    printf("\n");
}

// What --freeze froze (and the initializers the model keeps constant itself:
// BatchNorm's running statistics), one line.
static void print_frozen(const IrGraph *g, const char *freeze) {
  char names[400];
  int64_t elems;
  int n = pass_frozen(g, names, sizeof names, &elems);
  const char *more = strlen(names) + 1 >= sizeof names ? " ..." : "";
  if (n && freeze)
    printf("mtc: --freeze leaves %d parameters (%lld elements) untrained: %s%s\n", n,
           (long long)elems, names, more);
  else if (n)
    printf("mtc: %d initializers (%lld elements) are not trained (BatchNorm's running "
           "statistics: loaded and saved with the weights): %s%s\n", n, (long long)elems, names,
           more);
}

// Which parameters weight decay reaches, one line.
static void print_decay(const IrGraph *g, const PassOptions *o) {
  int n, decayed;
  IrDiag d = {0};
  if (pass_count_decayed(g, o, &n, &decayed, &d) || !n)
    return;  // pass_optimizer has reported a bad pattern
  if (o->no_decay)
    printf("mtc: weight decay reaches %d of %d parameters (those --no-decay '%s' does not "
           "match)\n", decayed, n, o->no_decay);
  else
    printf("mtc: weight decay reaches %d of %d parameters (those of rank 2 or more; the "
           "norms' and biases' none: --no-decay REGEX to choose)\n", decayed, n);
}

// The sequences of g's micro-batch: its batch dim (0: not bound); 1 for a fixed batch (no dim B).
static int64_t bound_batch(IrGraph *g) {
  int64_t batch = 0;
  if (g->batch_sym < 0)
    return 1;   // a fixed batch: a sample is one whole set of the inputs
  if (sym_eval(sym_var(&g->arena, g->batch_sym), &g->syms, &batch))
    return 0;
  return batch;
}

// The plan the program runs: the layout the flags force (--dp, --tp, ...), a
// saved plan (compile --plan FILE), the solver's (compile --gpus N or
// --cluster FILE: *kept is its plan, for plan.json), or one rank as the model
// is. --checkpoint overrides the plan's checkpointing.
static int choose_plan(IrGraph *g, const Args *a, Plan *plan, SvPlan **kept, char **text,
                       IrDiag *d) {
  bool apply = !strcmp(a->cmd, "compile") && !a->forced && (a->plan_file || a->gpus || a->cluster);
  if (a->forced)
    return forced_layout(g, a, plan, d);
  if (!apply) {
    *plan = a->layout;
    plan->lower = false;
    return 0;
  }
  int rc;
  if (a->plan_file) {
    *text = fe_read_text(a->plan_file, d);
    rc = *text ? sv_apply_read(g, a->plan_file, *text, plan, d) : -1;
    SvConfig cfg;   // (--cluster: the groups the program's price is for)
    if (!rc && a->cluster && !(rc = plan_config(a, &cfg, d)) &&
        sv_cluster_gpus(&cfg.cluster) != mesh_ranks(&plan->mesh))
      rc = ir_error(d, (IrLoc){0}, "%s runs on %d ranks and %s has %d GPUs: give the plan a "
                    "cluster of as many", a->plan_file, mesh_ranks(&plan->mesh), a->cluster,
                    sv_cluster_gpus(&cfg.cluster));
  } else {
    SvConfig cfg;
    rc = plan_config(a, &cfg, d);
    if (!rc)
      rc = sv_apply_best(g, &cfg, plan, kept, d);
  }
  if (rc)
    return -1;
  int64_t batch = bound_batch(g);
  if (!batch)
    return ir_error(d, (IrLoc){0}, "the model's batch dim is not bound: give it with -D");
  if (plan->micro != batch && !*kept)   // (the solver's own: main builds the model again)
    return ir_error(d, (IrLoc){0}, "the plan runs micro-batches of %lld sequences, the model's "
                    "batch dim is %lld: compile with --micro-batch %lld", (long long)plan->micro,
                    (long long)batch, (long long)plan->micro);
  if (a->checkpoint)
    plan->checkpoint = a->layout.checkpoint;
  if (a->swap)
    plan->swap = a->layout.swap;
  plan->seq_parallel |= a->sv.seq_parallel;
  return 0;
}

// DIR/plan.json: the plan the program runs.
static int save_plan(const char *dir, const SvPlan *kept, const char *text, IrDiag *d) {
  if (kept)
    return plan_files(kept, dir, d);
  char path[4300];
  snprintf(path, sizeof path, "%s/plan.json", dir);
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f))
    return ir_error(d, (IrLoc){0}, "cannot write %s: %s", path, strerror(errno));
  return 0;
}

// compile's output folder, taken back on SIGINT, SIGTERM and SIGHUP
static CgOutdir outdir;

// The signal may reach any thread, and more than one: the first cleans up and
// ends the process with the signal; the others wait for that.
static void on_signal(int sig) {
  static int taken;
  if (__atomic_exchange_n(&taken, 1, __ATOMIC_SEQ_CST))
    for (;;)
      pause();
  cg_outdir_abort(&outdir);
  signal(sig, SIG_DFL);
  raise(sig);
}

// compile: the price the program prints beside its measured step, and the configuration
// it priced on (cfg: its nodes' prices, train --profile's); false, with a note, where the
// planner has none.
static bool price_plan(IrGraph *g, const Args *a, const Plan *plan, SvPriced *out,
                       SvConfig *cfg) {
  _Static_assert(SV_NT + 1 == RT_PLANNER_NTIMES, "the program's split of the step is the planner's");
  IrDiag d = {0};
  if (!price_layout(g, a, plan, out, cfg, &d))
    return true;
  fprintf(stderr, "mtc: note: the program will not print the planner's step time: %s\n", d.msg);
  return false;
}

// The lowering's predictions for the program ctx lowered, into co.
static void predicted(const PassCtx *ctx, CgOptions *co, SvPredicted *pr) {
  const PassLowered *lw = ctx->lowered;
  if (!lw)
    return;
  sv_predict(lw, ctx->nswapped, ctx->ncheckpointed, ctx->nlayers, pr);
  co->layout = pr->layout;
  co->planner_state_bytes = pr->state_bytes;
  co->planner_host_bytes = pr->host_bytes;
  co->planner_comm_bytes = pr->comm_bytes;
  co->planner_comm_micro_bytes = pr->comm_micro_bytes;
  co->planner_comm_ghost_bytes = pr->comm_ghost_bytes;
  int dp = lw->plan.mesh.size[IR_MESH_DP];
  co->rank_end = lw->plan.part_end * (mesh_ranks(&lw->plan.mesh) / dp);
}

// Programs 1 .. of a plan whose replicas hold uneven parts of the state (Plan.replica_parts)
// or run micro-batches of unequal sizes (Plan.replica_rows, each program's batch dim its own):
// each run of replicas with one part has sizes of its own, so the model is built, planned and
// lowered again for it and written beside model.c (co: model 0's options).
static int emit_others(const Args *a, const PassCtx *first, const CgOptions *co, IrDiag *d) {
  Plan P = first->lowered->plan;   // its arrays stay the caller's
  int n = plan_programs(&P, 0, &P.part_first, &P.part_end);
  for (int k = 1; k < n; k++) {
    plan_programs(&P, k, &P.part_first, &P.part_end);
    PassCtx ctx = {.opt = first->opt, .diag = d, .plan = &P};
    SvConfig sv = a->sv;   // its replicas' micro-batches: the model's batch dim
    if (P.replica_rows)
      sv.micro_batch = P.micro = plan_replica_rows(&P, P.part_first);
    IrGraph *g;
    int rc = build(a, &sv, &ctx, &g, d);
    if (!rc)
      rc = pass_lower_plan(g, &ctx);
    if (!rc) {
      CgOptions mine = *co;
      mine.op_micro_s = mine.op_step_s = NULL;   // (model 0's nodes)
      SvPredicted pr;
      mine.mem = ctx.mem, mine.lowered = ctx.lowered, mine.model = k;
      predicted(&ctx, &mine, &pr);
      rc = cg_emit_c(g, &mine, d);
    }
    pass_memplan_free(ctx.mem);
    ir_graph_free(g);
    if (rc)
      return -1;
  }
  return 0;
}

// compile's last stage: the program, its plan.json, and what it says it did.
static int emit(IrGraph *g, const Args *a, const PassCtx *ctx, const SvPlan *kept,
                const char *plan_text, const SvPriced *price, const SvConfig *priced_on,
                IrDiag *d) {
  const PassLowered *lw = ctx->lowered;
  CgOptions co = {.mem = ctx->mem, .outdir = outdir.tmp, .seed = a->seed, .source = a->model,
                  .runtime_dir = getenv("MTC_RUNTIME_DIR") ? getenv("MTC_RUNTIME_DIR")
                                                           : MTC_SOURCE_DIR "/runtime",
                  .lowered = lw, .nmodels = 1};
  SvPredicted pr;
  predicted(ctx, &co, &pr);
  if (lw) {
    int first, end;
    co.nmodels = plan_programs(&lw->plan, 0, &first, &end);
  }
  if (price) {
    co.planner_device = price->device;
    co.planner_step_s = price->step_s;
    co.planner_swap_bytes = (int64_t)llround(price->swap_bytes);
    memcpy(co.planner_time_s, price->t, sizeof co.planner_time_s);
  }
  double op_micro_s[OP_COUNT], op_step_s[OP_COUNT];
  if (price) {   // the planner's price of each op's nodes in the lowered program
    sv_price_nodes(g, priced_on, op_micro_s, op_step_s, &co.op_outside_s);
    co.op_micro_s = op_micro_s, co.op_step_s = op_step_s;
  }
  for (int i = 0; lw && i < lw->nreplicated; i++)
    fprintf(stderr, "mtc: note: tp %d leaves a weight whole on every rank of its group: %s\n",
            lw->plan.mesh.size[IR_MESH_TP], lw->replicated[i]);
  int rc = cg_emit_c(g, &co, d);
  if (!rc && co.nmodels > 1)
    rc = emit_others(a, ctx, &co, d);
  if (!rc && (kept || plan_text))
    rc = save_plan(outdir.tmp, kept, plan_text, d);
  // The planner reads the training graph as autodiff made it: a graph with a layout or
  // recompute applied is not one it can plan.
  else if (!rc && !lw && !a->checkpoint && !a->swap)
    rc = write_plan(g, a, outdir.tmp, d);
  if (!rc)
    rc = cg_outdir_commit(&outdir, d);
  if (rc)
    return -1;
  if (a->checkpoint || a->swap)
    print_checkpoint("mtc: ", a, ctx);
  print_token_inputs(g);
  print_frozen(g, a->pass.freeze);
  print_decay(g, &ctx->opt);
  if (price) {
    printf("mtc: the planner prices a step of this layout at %.3g ms on %s%s\n",
           1e3 * price->step_s, price->device, price->fits ? "" : " (though it does not fit "
           "there)");
    if (co.nmodels == 1)   // (uneven state shares: each group's differs)
      printf("mtc: the planner's model state per GPU: %.0f bytes on the device\n",
             price->state_bytes);
  }
  printf("mtc: wrote %s (arena %lld bytes); build with: make -C %s cpu (or make gpu: nvcc, "
         "for NVIDIA GPUs)\n", a->outdir, (long long)ctx->mem->arena_bytes, a->outdir);
  return 0;
}

// The pipeline, as chibicc's cc1: load -> the training graph -> the plan ->
// its lowering and memory plan -> the program (or, for plan and inspect, what
// they print).
int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "calibrate"))
    return mtc_calibrate(argc, argv);
  Args a = parse_args(argc, argv);
  IrDiag diag = {0};
  bool compile = !strcmp(a.cmd, "compile"), inspect = !strcmp(a.cmd, "inspect"),
       plan = !strcmp(a.cmd, "plan");
  if (compile) {  // the target first: a folder mtc may not replace is said before any work
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    if (cg_outdir_begin(&outdir, a.outdir, &diag)) {
      ir_diag_print(stderr, &diag);
      return 1;
    }
  }
  PassCtx ctx = {.opt = a.pass, .diag = &diag};
  if (inspect && !a.pass.dump_after)
    ctx.opt.dump_after = "memplan";
  Plan layout = plan_single();
  SvPlan *kept = NULL;
  SvPriced price;
  bool priced = false;
  SvConfig priced_on;   // (where priced)
  char *plan_text = NULL;
  IrGraph *planned = NULL;   // the graph the plan was made on, where g is built again

  IrGraph *g;
  int rc = build(&a, &a.sv, &ctx, &g, &diag);
  if (!rc && plan)
    rc = run_plan(g, &a, &diag);
  if (!rc && !plan && !(rc = choose_plan(g, &a, &layout, &kept, &plan_text, &diag))) {
    if (kept && layout.micro != bound_batch(g)) {   // the first group's micro-batches its own
      planned = g;                                  // size (Cephalo): the model at that size
      a.sv.micro_batch = layout.micro;              // (the plan's stays: kept reads it)
      ctx = (PassCtx){.opt = ctx.opt, .diag = &diag};
      rc = build(&a, &a.sv, &ctx, &g, &diag);
      if (!rc)
        fprintf(stderr, "mtc: note: the groups' micro-batches are of their own sizes: the model "
                "is built with %s=%lld, the first group's\n", g->syms.name[g->batch_sym],
                (long long)layout.micro);
    }
  }
  if (!rc && !plan) {
    priced = compile && price_plan(g, &a, &layout, &price, &priced_on);
    ctx.plan = &layout;
    rc = pass_lower_plan(g, &ctx);
  }
  if (!rc && inspect && !a.dot && (a.checkpoint || a.swap))
    print_checkpoint("# ", &a, &ctx);
  if (!rc && inspect && !a.dot && ctx.mem)
    print_memory(g, ctx.mem);
  if (!rc && compile)
    rc = emit(g, &a, &ctx, kept, plan_text, priced ? &price : NULL, &priced_on, &diag);
  if (rc)
    ir_diag_print(stderr, &diag);
  if (compile)
    cg_outdir_abort(&outdir);  // after an error: nothing of the program is left
  plan_free(&layout);
  sv_plan_free(kept);
  free(plan_text);
  pass_memplan_free(ctx.mem);
  ir_graph_free(g);
  ir_graph_free(planned);
  for (int i = 0; i < a.ndefines; i++)
    free((char *)a.defines[i].name);
  return rc ? 1 : 0;
}
