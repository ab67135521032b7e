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
  fputs("usage: mtc calibrate [-o FILE] [--ranks R] [--mpirun CMD] [--quick]\n"
        "\n"
        "Measures this machine as the planner prices it: the runtime's GEMMs on a grid of\n"
        "shapes (float32 and bf16), memory bandwidth, elementwise and attention kernels,\n"
        "AdamW, and all-reduces among R ranks (latency, bandwidth, overlap with a kernel),\n"
        "every rank measuring at once, as a program's ranks share the machine. Writes a\n"
        "device profile for mtc plan and mtc compile: --device FILE (with --gpus N), or\n"
        "--cluster FILE (R ranks).\n"
        "\n"
        "  -o FILE        write the profile to FILE (default: standard output)\n"
        "  --ranks R      ranks measuring at once (default 1); R > 1 runs under MPI\n"
        "  --mpirun CMD   the launcher, split at spaces (default \"mpirun\"); mtc adds\n"
        "                 -np R, e.g. --mpirun \"mpirun --oversubscribe --bind-to none\"\n"
        "  --quick        shorter measurements (tests; noisier)\n"
        "\n"
        "It needs cc (mpicc for R > 1) and mtc's runtime/ (MTC_RUNTIME_DIR). Each rank\n"
        "runs OMP_NUM_THREADS threads, as the programs will. Takes about 10 s.\n",
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

// Builds and runs the measuring program in dir; its profile is dir/profile.json.
static int measure(const char *dir, int ranks, const char *mpirun, bool quick) {
  const char *rt = getenv("MTC_RUNTIME_DIR") ? getenv("MTC_RUNTIME_DIR") : MTC_SOURCE_DIR "/runtime";
  static const char *const sources[] = {"calibrate.c", "kernels_cpu.c", "dist.c", NULL};
  char flags[] = CG_CPU_CFLAGS;
  char exe[4200], inc[4200], src[4][4200];
  snprintf(exe, sizeof exe, "%s/calibrate", dir);
  snprintf(inc, sizeof inc, "-I%s", rt);
  char *cc[64];
  int n = 0;
  cc[n++] = ranks > 1 ? "mpicc" : (getenv("CC") && *getenv("CC") ? getenv("CC") : "cc");
  n += split(flags, cc + n, 16);
  cc[n++] = inc;
  cc[n++] = "-o";
  cc[n++] = exe;
  for (int i = 0; sources[i]; i++) {
    snprintf(src[i], sizeof src[i], "%s/%s", rt, sources[i]);
    cc[n++] = src[i];
  }
  snprintf(src[3], sizeof src[3], "%s/%s", rt, ranks > 1 ? "comm_mpi.c" : "comm_single.c");
  cc[n++] = src[3];
  cc[n++] = "-lm";
  cc[n++] = "-lpthread";
  cc[n] = NULL;
  if (access(src[0], R_OK))
    return fail("cannot read %s: set MTC_RUNTIME_DIR to mtc's runtime/", src[0]);
  int rc = run(cc, NULL);
  if (rc)
    return fail("building the measuring program with %s failed%s", cc[0],
                rc == 127 && ranks > 1 ? " (is MPI installed? apt-get install libopenmpi-dev)" : "");

  char launcher[1024], nranks[16], out[4200];
  snprintf(launcher, sizeof launcher, "%s", mpirun);
  snprintf(nranks, sizeof nranks, "%d", ranks);
  snprintf(out, sizeof out, "%s/profile.json", dir);
  char *argv[64];
  n = 0;
  if (ranks > 1) {
    int k = split(launcher, argv, 48);
    if (k < 1)
      bad_usage("--mpirun names the launcher and its options");
    n += k;
    argv[n++] = "-np";
    argv[n++] = nranks;
  }
  argv[n++] = exe;
  argv[n++] = nranks;
  if (quick)
    argv[n++] = "--quick";
  argv[n] = NULL;
  rc = run(argv, out);
  if (rc)
    return fail("the measuring run (%s ...) failed%s", argv[0],
                ranks > 1 ? "; is mpirun installed, and does it need --mpirun \"mpirun "
                            "--oversubscribe\" or --allow-run-as-root here?" : "");
  return 0;
}

int mtc_calibrate(int argc, char **argv) {
  const char *outfile = NULL, *mpirun = "mpirun";
  int ranks = 1;
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
      ranks = (int)r;
    } else if (!strcmp(s, "--mpirun") && next) {
      mpirun = argv[++i];
    } else if (!strcmp(s, "--quick")) {
      quick = true;
    } else {
      char what[300];
      snprintf(what, sizeof what, next || s[0] != '-' ? "unexpected argument '%.200s'"
                                                     : "%.200s needs a value", s);
      bad_usage(what);
    }
  }
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
  int rc = measure(d, ranks, mpirun, quick) || interrupted;
  char path[4200];
  snprintf(path, sizeof path, "%s/profile.json", d);
  char *json = rc ? NULL : slurp(path);
  if (!rc && !json)
    rc = fail("cannot read the measuring program's profile %s", path);
  SvCluster c;
  IrDiag diag = {0};
  if (!rc && sv_cluster_parse(&c, json, "the measured profile", &diag)) {
    ir_diag_print(stderr, &diag);
    rc = 1;
  }
  if (!rc) {
    const SvDevice *v = &c.group[0].dev;
    fprintf(stderr,
            "mtc calibrate: %s, %d rank%s of %d thread%s on %d cores: GEMMs up to %.1f GFLOP/s "
            "(float32) and %.1f (bf16), memory %.1f GB/s",
            c.group[0].name, ranks, ranks > 1 ? "s" : "", v->threads, v->threads > 1 ? "s" : "",
            v->cores, v->flops_fp32 / 1e9, v->flops_bf16 / 1e9, v->hbm_bw / 1e9);
    if (ranks > 1)   // bus bandwidths at 64 MiB, and at 1 MiB
      fprintf(stderr, ", all-reduce %.2f GB/s after %.1f us (all-gather %.2f, reduce-scatter "
              "%.2f; at 1 MiB %.2f, %.2f, %.2f), %.0f%% of it hidden behind a kernel",
              v->intra_bw / 1e9, v->eff.alpha_intra * 1e6, v->intra_bw * v->eff.gather / 1e9,
              v->intra_bw * v->eff.scatter / 1e9, sv_coll_bw(v, SV_ALL_REDUCE, 0x1p20) / 1e9,
              sv_coll_bw(v, SV_ALL_GATHER, 0x1p20) / 1e9,
              sv_coll_bw(v, SV_REDUCE_SCATTER, 0x1p20) / 1e9, 100 * v->eff.overlap);
    fputs("\n", stderr);
    if (ranks * v->threads > v->cores)
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
