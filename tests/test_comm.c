// test_comm.c: the collectives of runtime/comm.h, built twice: against
// comm_mpi.c, run as `tests/mpirun.sh 4 test_comm_mpi --ranks 4` (a dp 2 x tp 2
// mesh), and against comm_single.c, run as `test_comm_single --ranks 1`.
//
// Every collective runs blocking and non-blocking, with SUM, AVG and MAX, on
// odd sizes, over the world, the mesh's dp and tp groups and one-rank groups.
// Inputs are small integers and groups have 1, 2 or 4 ranks, so every result,
// averages included, is exact and compared with ==. Each rank checks its own
// results; rank 0 prints the world's total.
//
//   test_comm --ranks N              the checks; N is what rt_comm_init is told
//   test_comm --ranks N --too-big    an all-reduce over INT_MAX + 1 elements,
//                                    which comm_mpi.c must refuse with a message
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm.h"
#include "parts.h"

static int world_rank;

// the mesh: world rank = d*tp + t, so that a tp group's ranks are adjacent
static int dp, tp;

// What group rank k contributes at element i: small integers of both signs,
// different on every rank, so that SUM, AVG and MAX all tell ranks apart.
static float val(int k, long i) { return (float)((k * 37 + i * 11) % 101 - 50); }

// op over the n ranks of a group of val(k, i)
static float reduced(int op, int n, long i) {
  float acc = val(0, i);
  for (int k = 1; k < n; k++) {
    float x = val(k, i);
    acc = op == RT_REDUCE_MAX ? (x > acc ? x : acc) : acc + x;
  }
  return op == RT_REDUCE_AVG ? acc / n : acc;
}

static const char *op_name(int op) {
  return op == RT_REDUCE_SUM ? "sum" : op == RT_REDUCE_AVG ? "avg" : "max";
}

// buf[lo, hi) == want(i); one check, naming the first wrong element.
static bool check_range(const char *what, const float *buf, long lo, long hi, int op, int n) {
  for (long i = lo; i < hi; i++) {
    float want = reduced(op, n, i);
    if (buf[i] != want)
      return check(false, "rank %d: %s: element %ld is %g, expected %g", world_rank, what, i,
                   buf[i], want);
  }
  return check(true, "%s", what);
}

// ---------------------------------------------------------------------------
// one collective at a time, on one group

static void test_allreduce(rt_group *g, const char *gname, bool nonblocking) {
  int n = rt_group_size(g), k = rt_group_rank(g);
  long count = 1001;
  float *buf = malloc(count * sizeof *buf);
  for (int op = RT_REDUCE_SUM; op <= RT_REDUCE_MAX; op++) {
    for (long i = 0; i < count; i++) buf[i] = val(k, i);
    rt_request req = {0};
    rt_allreduce(g, buf, count, op, nonblocking ? &req : NULL);
    rt_wait(&req);
    char what[96];
    snprintf(what, sizeof what, "%s allreduce %s %s", gname, op_name(op),
             nonblocking ? "non-blocking" : "blocking");
    check_range(what, buf, 0, count, op, n);
  }
  free(buf);
}

static void test_reduce_scatter(rt_group *g, const char *gname, bool nonblocking) {
  int n = rt_group_size(g), k = rt_group_rank(g);
  long shard = 333, count = n * shard;
  float *buf = malloc(count * sizeof *buf);
  for (int op = RT_REDUCE_SUM; op <= RT_REDUCE_MAX; op++) {
    for (long i = 0; i < count; i++) buf[i] = val(k, i);
    rt_request req = {0};
    rt_reduce_scatter(g, buf, count, op, nonblocking ? &req : NULL);
    rt_wait(&req);
    char what[96];
    snprintf(what, sizeof what, "%s reduce_scatter %s %s", gname, op_name(op),
             nonblocking ? "non-blocking" : "blocking");
    check_range(what, buf, k * shard, (k + 1) * shard, op, n);
  }
  free(buf);
}

// Rank k's shard holds 1000*k + i; the rest is -1 until gathered.
static float gathered(long shard, long i) { return (float)(1000 * (i / shard) + i); }

static void fill_shard(float *buf, long count, long shard, int k) {
  for (long i = 0; i < count; i++) buf[i] = i / shard == k ? gathered(shard, i) : -1;
}

static bool check_gathered(const char *what, const float *buf, long count, long shard) {
  for (long i = 0; i < count; i++)
    if (buf[i] != gathered(shard, i))
      return check(false, "rank %d: %s: element %ld is %g, expected %g", world_rank, what, i,
                   buf[i], gathered(shard, i));
  return check(true, "%s", what);
}

static void test_allgather(rt_group *g, const char *gname, bool nonblocking) {
  int n = rt_group_size(g), k = rt_group_rank(g);
  long shard = 257, count = n * shard;
  float *buf = malloc(count * sizeof *buf);
  fill_shard(buf, count, shard, k);
  rt_request req = {0};
  rt_allgather(g, buf, count, nonblocking ? &req : NULL);
  rt_wait(&req);
  char what[96];
  snprintf(what, sizeof what, "%s allgather %s", gname, nonblocking ? "non-blocking" : "blocking");
  check_gathered(what, buf, count, shard);
  free(buf);
}

// From the group's last rank (not 0), an odd number of bytes.
static void test_broadcast(rt_group *g, const char *gname, bool nonblocking) {
  int n = rt_group_size(g), k = rt_group_rank(g), root = n - 1;
  unsigned char buf[1003];
  for (int i = 0; i < (int)sizeof buf; i++) buf[i] = (unsigned char)(k == root ? i * 7 + 3 : 0);
  rt_request req = {0};
  rt_broadcast(g, buf, sizeof buf, root, nonblocking ? &req : NULL);
  rt_wait(&req);
  int bad = -1;
  for (int i = 0; i < (int)sizeof buf && bad < 0; i++)
    if (buf[i] != (unsigned char)(i * 7 + 3)) bad = i;
  check(bad < 0, "rank %d: %s broadcast from %d %s: byte %d differs", world_rank, gname, root,
        nonblocking ? "non-blocking" : "blocking", bad);
}

// To rank 1 (0 in a group of one), in place: the sum of every rank's k + 1 + i; the other ranks'
// buffers as they were.
static void test_reduce(rt_group *g, const char *gname, bool nonblocking) {
  int n = rt_group_size(g), k = rt_group_rank(g), root = n > 1 ? 1 : 0;
  long count = 517;
  float *buf = malloc(count * sizeof *buf);
  for (long i = 0; i < count; i++) buf[i] = (float)(k + 1 + i);
  rt_request req = {0};
  rt_reduce_typed(g, buf, count, RT_F32, RT_REDUCE_SUM, root, nonblocking ? &req : NULL);
  rt_wait(&req);
  long bad = -1;
  for (long i = 0; i < count && bad < 0; i++) {
    float want = k == root ? (float)(n * (n + 1) / 2 + n * i) : (float)(k + 1 + i);
    if (buf[i] != want) bad = i;
  }
  check(bad < 0, "rank %d: %s reduce to %d %s: element %ld differs", world_rank, gname, root,
        nonblocking ? "non-blocking" : "blocking", bad);
  free(buf);
}

static void test_scalar(rt_group *g, const char *gname) {
  int n = rt_group_size(g), k = rt_group_rank(g);
  double sum = rt_allreduce_scalar(g, k + 1, RT_REDUCE_SUM);
  double avg = rt_allreduce_scalar(g, k + 1, RT_REDUCE_AVG);
  double max = rt_allreduce_scalar(g, k + 1, RT_REDUCE_MAX);
  check(sum == n * (n + 1) / 2.0, "rank %d: %s scalar sum %g, expected %g", world_rank, gname, sum,
        n * (n + 1) / 2.0);
  check(avg == (n + 1) / 2.0, "rank %d: %s scalar avg %g, expected %g", world_rank, gname, avg,
        (n + 1) / 2.0);
  check(max == n, "rank %d: %s scalar max %g, expected %d", world_rank, gname, max, n);
}

static void test_group(rt_group *g, const char *gname) {
  for (int nb = 0; nb < 2; nb++) {
    test_allreduce(g, gname, nb);
    test_reduce_scatter(g, gname, nb);
    test_allgather(g, gname, nb);
    test_broadcast(g, gname, nb);
    test_reduce(g, gname, nb);
  }
  test_scalar(g, gname);
  rt_barrier(g);
}

// ---------------------------------------------------------------------------
// the mesh, requests in flight together, the bytes counter

// dp groups gather the ranks with the same t, tp groups those with the same d.
static void test_mesh(rt_group *dpg, rt_group *tpg) {
  int d = world_rank / tp, t = world_rank % tp;
  check(rt_group_size(dpg) == dp && rt_group_rank(dpg) == d,
        "rank %d: dp group %d/%d, expected %d/%d", world_rank, rt_group_rank(dpg),
        rt_group_size(dpg), d, dp);
  check(rt_group_size(tpg) == tp && rt_group_rank(tpg) == t,
        "rank %d: tp group %d/%d, expected %d/%d", world_rank, rt_group_rank(tpg),
        rt_group_size(tpg), t, tp);
  // the members, by their world ranks: d*tp + t' for t' < tp, d'*tp + t for d' < dp
  double tp_sum = rt_allreduce_scalar(tpg, world_rank, RT_REDUCE_SUM);
  double dp_sum = rt_allreduce_scalar(dpg, world_rank, RT_REDUCE_SUM);
  check(tp_sum == d * tp * tp + tp * (tp - 1) / 2, "rank %d: tp group's world ranks sum to %g",
        world_rank, tp_sum);
  check(dp_sum == tp * dp * (dp - 1) / 2 + dp * t, "rank %d: dp group's world ranks sum to %g",
        world_rank, dp_sum);
}

// Six collectives on three groups in flight at once, waited for in another
// order than they started.
static void test_in_flight(rt_group *world, rt_group *dpg, rt_group *tpg) {
  int n = rt_group_size(world), k = rt_group_rank(world);
  long count = 777, shard = 129, rs_count = n * shard, ag_count = rt_group_size(tpg) * shard;
  float *a = malloc(count * sizeof *a), *b = malloc(rs_count * sizeof *b);
  float *c = malloc(ag_count * sizeof *c), *e = malloc(count * sizeof *e);
  float *f = malloc(count * sizeof *f);
  unsigned char bytes[501];
  for (long i = 0; i < count; i++) a[i] = val(k, i), e[i] = val(rt_group_rank(dpg), i);
  for (long i = 0; i < count; i++) f[i] = val(rt_group_rank(tpg), i);
  for (long i = 0; i < rs_count; i++) b[i] = val(k, i);
  fill_shard(c, ag_count, shard, rt_group_rank(tpg));
  for (int i = 0; i < (int)sizeof bytes; i++) bytes[i] = k == 0 ? (unsigned char)(i ^ 0x5a) : 0;

  static rt_request req[6];
  rt_allreduce(world, a, count, RT_REDUCE_SUM, &req[0]);
  rt_reduce_scatter(world, b, rs_count, RT_REDUCE_AVG, &req[1]);
  rt_allgather(tpg, c, ag_count, &req[2]);
  rt_broadcast(world, bytes, sizeof bytes, 0, &req[3]);
  rt_allreduce(dpg, e, count, RT_REDUCE_MAX, &req[4]);
  rt_allreduce(tpg, f, count, RT_REDUCE_AVG, &req[5]);
  int order[6] = {3, 5, 1, 4, 0, 2};
  for (int i = 0; i < 6; i++) {
    check(req[order[i]].active, "rank %d: request %d active before rt_wait", world_rank, order[i]);
    rt_wait(&req[order[i]]);
    check(!req[order[i]].active, "rank %d: request %d inactive after rt_wait", world_rank,
          order[i]);
  }
  rt_wait(&req[0]);  // a second wait is a no-op

  check_range("in flight: world allreduce sum", a, 0, count, RT_REDUCE_SUM, n);
  check_range("in flight: world reduce_scatter avg", b, k * shard, (k + 1) * shard, RT_REDUCE_AVG,
              n);
  check_gathered("in flight: tp allgather", c, ag_count, shard);
  check_range("in flight: dp allreduce max", e, 0, count, RT_REDUCE_MAX, rt_group_size(dpg));
  check_range("in flight: tp allreduce avg", f, 0, count, RT_REDUCE_AVG, rt_group_size(tpg));
  int bad = -1;
  for (int i = 0; i < (int)sizeof bytes && bad < 0; i++)
    if (bytes[i] != (unsigned char)(i ^ 0x5a)) bad = i;
  check(bad < 0, "rank %d: in flight: world broadcast: byte %d differs", world_rank, bad);
  free(a), free(b), free(c), free(e), free(f);
}

// The ring formula of comm.h, S the bytes, n the group's size.
static int64_t ring(int64_t factor, int64_t n, int64_t s) {
  return n == 1 ? 0 : factor * (n - 1) * s / n;
}

static void test_bytes(rt_group *g, const char *gname) {
  int n = rt_group_size(g), k = rt_group_rank(g);
  long count = 1000, shard = 100;
  float *buf = calloc(n * shard > count ? n * shard : count, sizeof *buf);
  static rt_request req;
  rt_comm_reset_bytes();
  check(rt_comm_bytes_sent() == 0, "rank %d: bytes after reset", world_rank);

  rt_allreduce(g, buf, count, RT_REDUCE_SUM, NULL);
  int64_t want = ring(2, n, 4 * count);
  check(rt_comm_bytes_sent() == want, "rank %d: %s allreduce sent %lld bytes, expected %lld",
        world_rank, gname, (long long)rt_comm_bytes_sent(), (long long)want);
  rt_reduce_scatter(g, buf, n * shard, RT_REDUCE_AVG, &req);
  want += ring(1, n, 4 * n * shard);  // counted when the collective starts
  check(rt_comm_bytes_sent() == want, "rank %d: %s reduce_scatter sent %lld bytes, expected %lld",
        world_rank, gname, (long long)rt_comm_bytes_sent(), (long long)want);
  rt_wait(&req);
  rt_allgather(g, buf, n * shard, NULL);
  want += ring(1, n, 4 * n * shard);
  check(rt_comm_bytes_sent() == want, "rank %d: %s allgather sent %lld bytes, expected %lld",
        world_rank, gname, (long long)rt_comm_bytes_sent(), (long long)want);
  rt_broadcast(g, buf, 1003, 0, NULL);   // a pipelined ring from 0: every rank but the last sends
  want += n > 1 && k != n - 1 ? 1003 : 0;
  check(rt_comm_bytes_sent() == want, "rank %d: %s broadcast sent %lld bytes, expected %lld",
        world_rank, gname, (long long)rt_comm_bytes_sent(), (long long)want);
  rt_reduce_typed(g, buf, 250, RT_F32, RT_REDUCE_SUM, 0, NULL);   // every rank but the root sends
  want += n > 1 && k != 0 ? 1000 : 0;
  check(rt_comm_bytes_sent() == want, "rank %d: %s reduce sent %lld bytes, expected %lld",
        world_rank, gname, (long long)rt_comm_bytes_sent(), (long long)want);
  rt_allreduce_scalar(g, 1, RT_REDUCE_SUM);  // not a buffer; not counted
  check(rt_comm_bytes_sent() == want, "rank %d: %s scalar counted", world_rank, gname);
  free(buf);
}

// Uneven parts (a mixed cluster's state shares): rank k holds k + 1 units of every bucket
// (1, 2, 3, ... of their sum), reduce-scattered into and all-gathered from its own part,
// blocking and not, the bytes each sends being the buffer less its part; then equal parts again.
static void test_parts(rt_group *g, const char *gname) {
  int n = rt_group_size(g), k = rt_group_rank(g);
  int *w = malloc((size_t)n * sizeof *w);
  for (int r = 0; r < n; r++) w[r] = r + 1;
  rt_group_set_parts(g, w);
  long unit = 37, count = unit * rt_parts_total(w, n), len, lo = rt_part(count, w, n, k, &len);
  float *buf = malloc((size_t)count * sizeof *buf);
  char what[96];
  for (int nb = 0; nb < 2; nb++) {
    rt_request req = {0};
    for (long i = 0; i < count; i++) buf[i] = val(k, i);
    rt_comm_reset_bytes();
    rt_reduce_scatter(g, buf, count, RT_REDUCE_SUM, nb ? &req : NULL);
    rt_wait(&req);
    snprintf(what, sizeof what, "%s uneven reduce_scatter %s", gname,
             nb ? "non-blocking" : "blocking");
    check_range(what, buf, lo, lo + len, RT_REDUCE_SUM, n);
    for (long i = 0; i < count; i++) buf[i] = i >= lo && i < lo + len ? (float)i : -1;
    rt_allgather(g, buf, count, nb ? &req : NULL);
    rt_wait(&req);
    long bad = -1;
    for (long i = 0; i < count && bad < 0; i++)
      if (buf[i] != (float)i) bad = i;
    check(bad < 0, "rank %d: %s uneven allgather: element %ld differs", world_rank, gname, bad);
    int64_t want = n > 1 ? 2 * 4 * (count - len) : 0;
    check(rt_comm_bytes_sent() == want, "rank %d: %s uneven parts sent %lld bytes, expected %lld",
          world_rank, gname, (long long)rt_comm_bytes_sent(), (long long)want);
  }
  rt_group_set_parts(g, NULL);
  test_reduce_scatter(g, gname, false);
  free(buf);
  free(w);
}

int main(int argc, char **argv) {
  int ranks = 0;
  bool too_big = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
      ranks = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--too-big"))
      too_big = true;
    else {
      fprintf(stderr, "usage: test_comm --ranks N [--too-big]\n");
      return 2;
    }
  }
  tp = ranks % 2 == 0 ? 2 : 1;
  dp = ranks / tp;
  char what[64];
  snprintf(what, sizeof what, "dp %d x tp %d", dp, tp);
  rt_comm_init(&argc, &argv, ranks, what);
  world_rank = rt_comm_rank();
  rt_group *world = rt_group_world();

  if (too_big) {
    float x = 0;
    rt_allreduce(world, &x, (long)INT_MAX + 1, RT_REDUCE_SUM, NULL);
    fprintf(stderr, "rt_allreduce accepted INT_MAX + 1 elements\n");
    rt_comm_finalize();
    return 1;
  }

  check(rt_comm_size() == ranks, "rank %d: world size %d, expected %d", world_rank, rt_comm_size(),
        ranks);
  check(rt_group_size(world) == ranks && rt_group_rank(world) == world_rank,
        "rank %d: world group %d/%d", world_rank, rt_group_rank(world), rt_group_size(world));
  rt_request idle = {0};
  rt_wait(&idle);  // not active: a no-op
  check(!idle.active, "rank %d: rt_wait on an idle request", world_rank);

  int d = world_rank / tp, t = world_rank % tp;
  rt_group *dpg = rt_group_split(world, t, d);
  rt_group *tpg = rt_group_split(world, d, t);
  rt_group *self = rt_group_split(world, world_rank, 0);
  check(rt_group_size(self) == 1 && rt_group_rank(self) == 0, "rank %d: one-rank group %d/%d",
        world_rank, rt_group_rank(self), rt_group_size(self));

  test_mesh(dpg, tpg);
  test_group(world, "world");
  test_group(dpg, "dp");
  test_group(tpg, "tp");
  test_group(self, "self");
  test_in_flight(world, dpg, tpg);
  test_bytes(world, "world");
  test_bytes(dpg, "dp");
  test_bytes(self, "self");
  test_parts(dpg, "dp");
  test_parts(self, "self");
  if (ranks == 4) {  // the formula's numbers, written out: 2 x 3/4 x 4000 bytes
    rt_comm_reset_bytes();
    float buf[1000] = {0};
    rt_allreduce(world, buf, 1000, RT_REDUCE_SUM, NULL);
    check(rt_comm_bytes_sent() == 6000, "rank %d: 4-rank allreduce of 4000 bytes sent %lld",
          world_rank, (long long)rt_comm_bytes_sent());
  }

  double passed = rt_allreduce_scalar(world, npass, RT_REDUCE_SUM);
  double failed = rt_allreduce_scalar(world, nfail, RT_REDUCE_SUM);
  if (world_rank == 0) printf("%.0f passed, %.0f failed\n", passed, failed);
  rt_comm_finalize();
  return failed ? 1 : 0;
}
