// mtc calibrate: measures this machine for the planner. It builds the
// runtime's measuring program (runtime/calibrate.c) with the compiler and
// flags of the programs mtc emits, runs it on R ranks (mpirun) at once, and
// writes the device profile it prints, after reading it back as the planner
// will (--device FILE, or --cluster FILE).
#define _XOPEN_SOURCE 700   // mkdtemp, nftw
#include "calibrate.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen.h"
#include "solver.h"

static void usage(FILE *f) {
  fputs("usage: mtc calibrate [-o FILE] [--ranks R] [--mpirun CMD] [--quick] [--gpu]\n"
        "                     [--cuda-arch FLAGS] [--build-only FILE | --program FILE]\n"
        "\n"
        "Measures this machine as the planner prices it: the runtime's GEMMs on a grid of\n"
        "shapes (float32 and bf16), memory bandwidth, elementwise and attention kernels,\n"
        "AdamW, copies to and from host memory, and all-reduces among R ranks (latency,\n"
        "bandwidth, overlap with a kernel), every rank measuring at once, as a program's\n"
        "ranks share the machine. Writes a device profile for mtc plan and mtc compile:\n"
        "--device FILE (with --gpus N), or --cluster FILE (R ranks).\n"
        "\n"
        "  -o FILE        write the profile to FILE (default: standard output)\n"
        "  --ranks R      ranks measuring at once (default 1); R > 1 runs under MPI\n"
        "  --mpirun CMD   the launcher, split at spaces (default \"mpirun\"); mtc adds\n"
        "                 -np R, e.g. --mpirun \"mpirun --oversubscribe --bind-to none\"\n"
        "  --quick        shorter measurements (tests; noisier)\n"
        "  --gpu          measure the GPU build's kernels (nvcc, cuBLAS; NCCL for R > 1),\n"
        "                 one GPU per rank; the profile names the GPU as CUDA does, which\n"
        "                 the planner reads as its built-in entry with the measured rates\n"
        "  --cuda-arch FLAGS  nvcc's -gencode flags (default: sm_80 and sm_90, as make gpu)\n"
        "  --build-only FILE  build the measuring program into FILE and stop (to measure\n"
        "                 another machine, or later: --program FILE there)\n"
        "  --program FILE  measure with FILE (from --build-only) instead of building one\n"
        "\n"
        "It needs cc (mpicc for R > 1; with --gpu, CUDA's nvcc: CUDA=its folder, default\n"
        "/usr/local/cuda) and mtc's runtime/ (MTC_RUNTIME_DIR). Each rank runs\n"
        "OMP_NUM_THREADS threads, as the programs will. Takes about 30 s.\n",
        f);
}

static _Noreturn void bad_usage(const char *what) {
  fprintf(stderr, "mtc calibrate: error: %s (see mtc calibrate --help)\n", what);
  exit(2);
}

// One message; the exit status 1.
static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
  fputs("mtc calibrate: error: ", stderr);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return 1;
}

// SIGINT, SIGTERM or SIGHUP: the signal, passed on to the program running
// (the compiler, mpirun); the measurement stops, its folder is removed, and
// mtc ends by the signal.
static volatile sig_atomic_t interrupted;
static volatile pid_t running;

static void on_signal(int sig) {
  interrupted = sig;
  if (running > 0)
    kill(running, sig);
}

// Runs argv (NULL-terminated), its standard output into out_path when given.
// Its exit status, or -1 when it could not start (or mtc was interrupted).
static int run(char *const argv[], const char *out_path) {
  if (interrupted)
    return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    if (out_path) {
      int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd < 0 || dup2(fd, 1) < 0)
        _exit(127);
      close(fd);
    }
    execvp(argv[0], argv);
    fprintf(stderr, "mtc calibrate: error: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  running = pid;
  if (interrupted)   // a signal between fork and here
    kill(pid, interrupted);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      running = 0;
      return -1;
    }
  running = 0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path) != 0 && errno != ENOENT;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
    n += got;
    if (n + 1 == cap) {
      char *more = realloc(buf, cap *= 2);
      if (!more)
        free(buf);
      buf = more;
    }
  }
  fclose(f);
  if (buf)
    buf[n] = '\0';
  return buf;
}

// Copies the program exe to dst, whole or not at all: a temporary beside dst, renamed onto it.
static int install(const char *exe, const char *dst) {
  char part[4200];
  snprintf(part, sizeof part, "%s.mtc-%d", dst, (int)getpid());
  int in = open(exe, O_RDONLY), out = open(part, O_WRONLY | O_CREAT | O_TRUNC, 0755);
  bool ok = in >= 0 && out >= 0;
  char buf[1 << 16];
  for (ssize_t got; ok && (got = read(in, buf, sizeof buf)) != 0;)
    ok = got > 0 && write(out, buf, (size_t)got) == got;
  ok = (out < 0 || !close(out)) && ok;
  if (in >= 0)
    close(in);
  if (!ok || rename(part, dst)) {
    int err = errno ? errno : EIO;
    remove(part);
    return fail("cannot write %s: %s", dst, strerror(err));
  }
  return 0;
}

// Splits s at spaces into argv[at..]; the count, or -1 when more than max.
static int split(char *s, char **argv, int max) {
  int n = 0;
  for (char *tok = strtok(s, " \t"); tok; tok = strtok(NULL, " \t")) {
    if (n == max)
      return -1;
    argv[n++] = tok;
  }
  return n;
}

// How the measuring program is built: for this CPU, or (gpu) with the GPU build's kernels.
typedef struct Build {
  int ranks;
  bool gpu;
  const char *cuda_arch;   // nvcc's -gencode flags
} Build;

// Runs cc (argv, NULL-terminated); 0, or 1 with one message naming what failed.
static int compile(char **argv, const char *what, const char *hint) {
  int rc = run(argv, NULL);
  return rc ? fail("%s with %s failed%s", what, argv[0], rc == 127 ? hint : "") : 0;
}

// Builds the measuring program exe from mtc's runtime, its objects in dir.
static int build(const Build *b, const char *dir, const char *exe) {
  const char *rt = getenv("MTC_RUNTIME_DIR") ? getenv("MTC_RUNTIME_DIR") : MTC_SOURCE_DIR "/runtime";
  const char *cuda = getenv("CUDA") && *getenv("CUDA") ? getenv("CUDA") : "/usr/local/cuda";
  bool mpi = b->ranks > 1;
  // the host code (and the CPU build's kernels), then the collectives: one rank; several over
  // MPI, on GPUs over NCCL beside it (runtime/runtime.mk's lists)
  static const char *const host[] = {"calibrate.c", "dist.c", "host.c", NULL};
  static const char *const cpu[] = {"kernels_cpu.c", "device_cpu.c", NULL};
  static const char *const kernels_cuda[2] = {"kernels_cuda", "device_cuda"};
  char flags[] = CG_CPU_CFLAGS, gpu_flags[] = CG_GPU_CFLAGS, nvcc_flags[] = CG_NVCC_FLAGS;
  char arch[1024], inc[4200], cuda_inc[4200], cuda_lib[4200], rpath[4200], nvcc[4200];
  char src[8][4200], cu[2][4200], obj[2][4200];
  int ns = 0;
  snprintf(inc, sizeof inc, "-I%s", rt);
  snprintf(cuda_inc, sizeof cuda_inc, "-I%s/include", cuda);
  snprintf(cuda_lib, sizeof cuda_lib, "-L%s/lib64", cuda);
  snprintf(rpath, sizeof rpath, "-Wl,-rpath,%s/lib64", cuda);
  snprintf(nvcc, sizeof nvcc, "%s/bin/nvcc", cuda);
  snprintf(src[0], sizeof src[0], "%s/calibrate.c", rt);
  if (access(src[0], R_OK))
    return fail("cannot read %s: set MTC_RUNTIME_DIR to mtc's runtime/", src[0]);
  if (b->gpu && access(nvcc, X_OK))
    return fail("--gpu: no nvcc at %s: install the CUDA toolkit, or set CUDA to its folder",
                nvcc);
  char *cc[96];
  int n = 0;
  for (int i = 0; b->gpu && i < 2; i++) {   // the kernels by nvcc, as a program's Makefile does
    snprintf(cu[i], sizeof cu[i], "%s/%s.cu", rt, kernels_cuda[i]);
    snprintf(obj[i], sizeof obj[i], "%s/%s.o", dir, kernels_cuda[i]);
    snprintf(nvcc_flags, sizeof nvcc_flags, "%s", CG_NVCC_FLAGS);   // (split cuts them)
    snprintf(arch, sizeof arch, "%s", b->cuda_arch);
    n = 0;
    cc[n++] = nvcc;
    n += split(nvcc_flags, cc + n, 16);
    n += split(arch, cc + n, 16);
    cc[n++] = inc;
    cc[n++] = "-c";
    cc[n++] = "-o";
    cc[n++] = obj[i];
    cc[n++] = cu[i];
    cc[n] = NULL;
    if (compile(cc, "building the measuring program's kernels", ""))
      return 1;
  }
  n = 0;
  cc[n++] = mpi ? "mpicc" : (getenv("CC") && *getenv("CC") ? getenv("CC") : "cc");
  n += split(b->gpu ? gpu_flags : flags, cc + n, 16);
  if (b->gpu && mpi) {
    cc[n++] = "-DRT_COMM_NCCL";
    cc[n++] = cuda_inc;
  }
  cc[n++] = inc;
  cc[n++] = "-o";
  cc[n++] = (char *)exe;
  for (int i = 0; host[i]; i++, ns++) {
    snprintf(src[ns], sizeof src[0], "%s/%s", rt, host[i]);
    cc[n++] = src[ns];
  }
  for (int i = 0; !b->gpu && cpu[i]; i++, ns++) {
    snprintf(src[ns], sizeof src[0], "%s/%s", rt, cpu[i]);
    cc[n++] = src[ns];
  }
  snprintf(src[ns], sizeof src[0], "%s/%s", rt, mpi ? "comm_mpi.c" : "comm_single.c");
  cc[n++] = src[ns++];
  if (b->gpu && mpi) {
    snprintf(src[ns], sizeof src[0], "%s/comm_nccl.c", rt);
    cc[n++] = src[ns++];
  }
  if (b->gpu) {
    cc[n++] = obj[0];
    cc[n++] = obj[1];
    cc[n++] = cuda_lib;
    cc[n++] = rpath;
    if (mpi)
      cc[n++] = "-lnccl";
    cc[n++] = "-lcublasLt";
    cc[n++] = "-lcublas";
    cc[n++] = "-lcudart";
    cc[n++] = "-lstdc++";
  }
  cc[n++] = "-lm";
  cc[n++] = "-lpthread";
  cc[n] = NULL;
  return compile(cc, "building the measuring program",
                 mpi ? " (is MPI installed? apt-get install libopenmpi-dev)" : "");
}

// Runs the measuring program exe on R ranks; its profile into out.
static int measure(const char *exe, const char *out, int ranks, const char *mpirun, bool quick) {
  char launcher[1024], nranks[16];
  snprintf(launcher, sizeof launcher, "%s", mpirun);
  snprintf(nranks, sizeof nranks, "%d", ranks);
  char *argv[64];
  int n = 0;
  if (ranks > 1) {
    int k = split(launcher, argv, 48);
    if (k < 1)
      bad_usage("--mpirun names the launcher and its options");
    n += k;
    argv[n++] = "-np";
    argv[n++] = nranks;
  }
  argv[n++] = (char *)exe;
  argv[n++] = nranks;
  if (quick)
    argv[n++] = "--quick";
  argv[n] = NULL;
  int rc = run(argv, out);
  if (rc)
    return fail("the measuring run (%s ...) failed%s", argv[0],
                ranks > 1 ? "; is mpirun installed, and does it need --mpirun \"mpirun "
                            "--oversubscribe\" or --allow-run-as-root here?" : "");
  return 0;
}

int mtc_calibrate(int argc, char **argv) {
  const char *outfile = NULL, *mpirun = "mpirun", *build_only = NULL, *program = NULL;
  Build b = {.ranks = 1, .cuda_arch = CG_CUDA_ARCH};
  bool quick = false;
  for (int i = 2; i < argc; i++) {
    const char *s = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(s, "-o") && next) {
      outfile = argv[++i];
    } else if (!strcmp(s, "--ranks") && next) {
      char *end;
      long r = strtol(argv[++i], &end, 10);
      if (*end || r < 1 || r > 1024)
        bad_usage("--ranks takes a number of ranks from 1 to 1024");
      b.ranks = (int)r;
    } else if (!strcmp(s, "--mpirun") && next) {
      mpirun = argv[++i];
    } else if (!strcmp(s, "--quick")) {
      quick = true;
    } else if (!strcmp(s, "--gpu")) {
      b.gpu = true;
    } else if (!strcmp(s, "--cuda-arch") && next) {
      b.cuda_arch = argv[++i];
    } else if (!strcmp(s, "--build-only") && next) {
      build_only = argv[++i];
    } else if (!strcmp(s, "--program") && next) {
      program = argv[++i];
    } else {
      char what[300];
      snprintf(what, sizeof what, next || s[0] != '-' ? "unexpected argument '%.200s'"
                                                     : "%.200s needs a value", s);
      bad_usage(what);
    }
  }
  if (build_only && program)
    bad_usage("--build-only builds a program, --program measures with one: give one of them");
  if (build_only && outfile)
    bad_usage("--build-only writes no profile: drop -o, and measure with --program FILE");
  if (program && (b.gpu || strcmp(b.cuda_arch, CG_CUDA_ARCH)))
    bad_usage("--program's build is made: --gpu and --cuda-arch go with --build-only");
  if (program && access(program, X_OK))
    return fail("--program %s: %s (build one with mtc calibrate --build-only FILE)", program,
                strerror(errno));
  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  char dir[] = "/tmp/mtc-calibrate-XXXXXX";
  const char *tmp = getenv("TMPDIR");
  char where[4096];
  snprintf(where, sizeof where, "%s/mtc-calibrate-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  char *d = mkdtemp(strlen(where) < sizeof where - 1 ? where : dir);
  if (!d)
    return fail("cannot make a folder for the measuring program: %s", strerror(errno));
  char exe[4200], path[4200];
  snprintf(exe, sizeof exe, "%s/calibrate", d);
  snprintf(path, sizeof path, "%s/profile.json", d);
  int rc = 0;
  if (build_only) {
    rc = build(&b, d, exe) || interrupted || install(exe, build_only);
    if (!rc)
      fprintf(stderr, "mtc calibrate: built %s (measure with mtc calibrate --program %s%s)\n",
              build_only, build_only, b.ranks > 1 ? " --ranks R" : "");
  } else {
    rc = (!program && build(&b, d, exe)) || interrupted ||
         measure(program ? program : exe, path, b.ranks, mpirun, quick) || interrupted;
  }
  char *json = rc || build_only ? NULL : slurp(path);
  if (!rc && !build_only && !json)
    rc = fail("cannot read the measuring program's profile %s", path);
  SvCluster c;
  IrDiag diag = {0};
  if (!rc && !build_only && sv_cluster_parse(&c, json, "the measured profile", &diag)) {
    ir_diag_print(stderr, &diag);
    rc = 1;
  }
  if (!rc && !build_only) {
    const SvDevice *v = &c.group[0].dev;
    int ranks = b.ranks;
    if (v->cores > 0)
      fprintf(stderr,
              "mtc calibrate: %s, %d rank%s of %d thread%s on %d cores: GEMMs up to %.1f GFLOP/s "
              "(float32) and %.1f (bf16), memory %.1f GB/s",
              c.group[0].name, ranks, ranks > 1 ? "s" : "", v->threads,
              v->threads > 1 ? "s" : "", v->cores, v->flops_fp32 / 1e9, v->flops_bf16 / 1e9,
              v->hbm_bw / 1e9);
    else   // a GPU: its built-in entry, the measured rates in place of the datasheet's
      fprintf(stderr,
              "mtc calibrate: %s (the planner's %s), %d rank%s: GEMMs up to %.1f TFLOP/s "
              "(float32) and %.1f (bf16), memory %.0f GB/s, host copies %.1f GB/s",
              c.group[0].name, v->name, ranks, ranks > 1 ? "s" : "", v->flops_fp32 / 1e12,
              v->flops_bf16 / 1e12, v->hbm_bw / 1e9, v->host_bw / 1e9);
    if (ranks > 1)   // bus bandwidths at 64 MiB, and at 1 MiB
      fprintf(stderr, ", all-reduce %.2f GB/s after %.1f us (all-gather %.2f, reduce-scatter "
              "%.2f; at 1 MiB %.2f, %.2f, %.2f), %.0f%% of it hidden behind a kernel",
              v->intra_bw / 1e9, v->eff.alpha_intra * 1e6, v->intra_bw * v->eff.gather / 1e9,
              v->intra_bw * v->eff.scatter / 1e9, sv_coll_bw(v, SV_ALL_REDUCE, 0x1p20) / 1e9,
              sv_coll_bw(v, SV_ALL_GATHER, 0x1p20) / 1e9,
              sv_coll_bw(v, SV_REDUCE_SCATTER, 0x1p20) / 1e9, 100 * v->eff.overlap);
    fputs("\n", stderr);
    if (v->cores > 0 && ranks * v->threads > v->cores)
      fprintf(stderr, "mtc calibrate: warning: %d ranks of %d thread%s time-share %d cores, and a "
              "kernel shorter than the system's time slice runs at a whole core's speed, so "
              "these rates mix the two; measure at most %d ranks of %d thread%s (the planner "
              "scales a profile to more ranks per machine)\n", ranks, v->threads,
              v->threads > 1 ? "s" : "", v->cores, v->cores / v->threads > 0 ? v->cores / v->threads : 1,
              v->threads, v->threads > 1 ? "s" : "");
    if (outfile) {   // whole or not at all: a temporary beside the target, renamed onto it
      char part[4200];
      snprintf(part, sizeof part, "%s.mtc-%d", outfile, (int)getpid());
      FILE *f = fopen(part, "w");
      bool ok = f && fputs(json, f) >= 0;
      ok = f && !fclose(f) && ok;
      if (!ok || rename(part, outfile)) {
        remove(part);
        rc = fail("cannot write %s: %s", outfile, strerror(errno ? errno : EIO));
      } else {
        fprintf(stderr, "mtc calibrate: wrote %s (mtc plan MODEL --device %s --gpus N)\n",
                outfile, outfile);
      }
    } else {
      fputs(json, stdout);
    }
  }
  free(json);
  nftw(d, remove_one, 16, FTW_DEPTH | FTW_PHYS);
  if (interrupted) {   // the folder gone, end as the signal would have
    fprintf(stderr, "mtc calibrate: interrupted; nothing written\n");
    signal(interrupted, SIG_DFL);
    raise(interrupted);
  }
  return rc;
}
