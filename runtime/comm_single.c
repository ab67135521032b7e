// comm.h for a program of one rank, with no MPI: every group is that rank
// alone, so every collective leaves its buffer as it is (an average over one
// is the identity) and nothing is sent.
//
// What it must catch is a launch it cannot serve: a program compiled for
// several ranks, or this one started as several processes by a launcher,
// which would otherwise train the same model N times side by side without
// a word. Launchers are recognized by the environment they give each
// process: Open MPI's mpirun (OMPI_COMM_WORLD_SIZE), MPICH and Intel MPI
// (PMI_SIZE), MVAPICH2 (MV2_COMM_WORLD_SIZE) and Slurm's srun
// (SLURM_STEP_NUM_TASKS; not SLURM_NTASKS, which a batch script running one
// process also has).
#include "comm.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

struct rt_group {
  int size;  // 1
};

static rt_group world = {1};

static const char *const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE",
                                        "SLURM_STEP_NUM_TASKS"};
static const char *const rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK",
                                        "SLURM_PROCID"};

// A launcher's count in [0, INT_MAX], -1 when s is not one (atoi's overflow is undefined).
static int env_count(const char *s) {
  if (!s) return -1;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  return *s == '\0' || *end != '\0' || errno || v < 0 || v > INT_MAX ? -1 : (int)v;
}

// The number of processes a launcher started (1 when none did); *var names
// the variable that says so. Only the first process (rank 0) should speak.
static int launched(const char **var, int *first) {
  for (int i = 0; i < (int)(sizeof size_vars / sizeof *size_vars); i++) {
    int n = env_count(getenv(size_vars[i])), r = env_count(getenv(rank_vars[i]));
    if (n > 1) {
      *var = size_vars[i];
      *first = r <= 0;
      return n;
    }
  }
  *first = 1;
  return 1;
}

void rt_comm_init(int *argc, char ***argv, int ranks, const char *what) {
  (void)argc;
  const char *prog = argv && *argv && (*argv)[0] ? (*argv)[0] : "./train";
  const char *var = NULL;
  int first, procs = launched(&var, &first);
  if (ranks == 1 && procs == 1) return;
  if (first) {
    if (ranks != 1) {
      fprintf(stderr, "train: error: this program was compiled for %d ranks", ranks);
      if (what && *what) fprintf(stderr, " (%s)", what);
      fprintf(stderr,
              " but built without MPI; build it with make cpu on a machine with MPI "
              "(apt-get install libopenmpi-dev) and run it with mpirun -np %d %s\n",
              ranks, prog);
    } else {
      fprintf(stderr,
              "train: error: this program was compiled for one rank but started as one "
              "of %d processes (%s=%d); run it as %s, without mpirun or srun\n",
              procs, var, procs, prog);
    }
  }
  exit(1);
}

void rt_comm_finalize(void) {}
int rt_comm_rank(void) { return 0; }
int rt_comm_size(void) { return 1; }
rt_group *rt_group_world(void) { return &world; }

rt_group *rt_group_split(rt_group *parent, int color, int key) {
  (void)color, (void)key;
  return parent;
}

int rt_group_rank(const rt_group *g) {
  (void)g;
  return 0;
}

int rt_group_size(const rt_group *g) { return g->size; }

// One rank holds every part.
void rt_group_set_parts(rt_group *g, const int *w) { (void)g, (void)w; }

// A non-blocking collective is already done; the request only records it, so
// that rt_wait and the request's reuse behave as they do with MPI.
static void pending(const char *fn, rt_request *req, rt_group *g, void *buf, long count) {
  if (!req) return;
  if (req->active) {
    fprintf(stderr, "train: error: %s: the request is still in flight (rt_wait it first)\n", fn);
    exit(1);
  }
  *req = (rt_request){.active = 1, .buf = buf, .count = count, .group = g};
}

void rt_allreduce_typed(rt_group *g, void *buf, long count, int dtype, int op, rt_request *req) {
  (void)dtype, (void)op;
  pending("rt_allreduce", req, g, buf, count);
}

void rt_reduce_scatter_typed(rt_group *g, void *buf, long count, int dtype, int op,
                             rt_request *req) {
  (void)dtype, (void)op;
  pending("rt_reduce_scatter", req, g, buf, count);
}

void rt_allgather_typed(rt_group *g, void *buf, long count, int dtype, rt_request *req) {
  (void)dtype;
  pending("rt_allgather", req, g, buf, count);
}

void rt_reduce_typed(rt_group *g, void *buf, long count, int dtype, int op, int root,
                     rt_request *req) {
  (void)dtype, (void)op, (void)root;
  pending("rt_reduce", req, g, buf, count);
}

void rt_broadcast(rt_group *g, void *buf, long bytes, int root, rt_request *req) {
  (void)root;
  pending("rt_broadcast", req, g, buf, bytes);
}

void rt_wait(rt_request *req) { req->active = 0; }
void rt_barrier(rt_group *g) { (void)g; }

double rt_allreduce_scalar(rt_group *g, double x, int op) {
  (void)g, (void)op;
  return x;
}

int64_t rt_comm_bytes_sent(void) { return 0; }
void rt_comm_reset_bytes(void) {}
double rt_comm_seconds(void) { return 0; }
