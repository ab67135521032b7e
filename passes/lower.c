// Lowering a parallel plan: data parallelism, ZeRO stages 1-3 and
// micro-batches, as buckets and collective ops in the training graph.
//
// Every rank runs the same graph (SPMD). Under data parallelism over dp ranks
// the model's batch dim stays what it is: it is each rank's micro-batch, and
// the global batch is batch x dp x micro_batches; the training program hands
// each rank its slice. Every loss of mtc is a mean over the batch, so the mean
// of the ranks' gradients is the gradient of the global batch.
//
// Per block (the IR's block id; block 0 holds what is outside repeated
// blocks), the parameters the block reads first become one flat bucket, each
// parameter at a 64-byte aligned offset, the whole padded to a multiple of
// 16 x dp elements so that every rank's shard is whole and aligned (of
// 16 x dp x tp for a block data parallel over tp, below). Their
// gradients are placed the same way in a gradient bucket that backward
// writes (zeroed first, so the padding is zero). After the last gradient of
// the bucket is written:
//
//   ZeRO 0      all_reduce(grads) (mean), waited for in update
//   ZeRO 1      reduce_scatter(grads) (mean): this rank's shard of the bucket
//               is reduced in place, waited for in update
//   ZeRO 2, 3   reduce_scatter(grads) every micro-batch, then this rank's
//               shard is accumulated into a persistent gradient shard
//
// With micro-batches, ZeRO 0 and 1 first accumulate the gradients in a
// persistent bucket and reduce that after the last micro-batch.
//
// A block data parallel over the tp ranks too (PlanBlock.batch_tp) writes
// gradients that are each rank's partial sums over tp. Its bucket is reduced
// and sharded over every rank of the mesh instead of dp (PassBucket.axis,
// IR_MESH_ALL): the collectives above run over all dp x tp ranks, the mean
// being the sum over tp of the mean over dp (runtime/dist.c), the bucket is
// padded to 16 x dp x tp, and ZeRO shards its state in dp x tp parts (the
// "shard_axis" of the nodes that take this rank's part says whose).
//
// Uneven batch shares (Plan.replica_micro, a mixed cluster's): replica d runs
// m_d of the step's M micro-batches. Each micro-batch's gradient is scaled by
// dp / M before it is accumulated, so that the mean over the replicas is the
// mean over the global batch (dp / M is 1 / micro_batches when the shares are
// even). With micro-batches of unequal sizes (Plan.replica_rows: r_d sequences
// each, R all replicas' per step) backward starts from dloss = r M / R (this
// program's r) where it starts from 1, so that each micro-batch's mean over its
// rows weighs its rows' share, before any reduction (ZeRO 2 and 3 scale after
// theirs). Under the stages that reduce or gather every micro-batch (ZeRO 2, 3) a
// replica with fewer micro-batches than the most joins the others' collectives
// of the ones it does not run with ghost micro-batches (codegen/emit_c.c, train.c). So it does
// under gradient offload, which reduces every micro-batch too: a ghost micro-batch copies the
// reduced part that reaches it to the host and adds it there, as its own micro-batches do.
//
// The update of a bucket is one adamw (or sgd) op over it:
//
//   ZeRO 0      the whole bucket; moments of the bucket's size
//   ZeRO 1, 2   this rank's shard of the parameters (moments of the shard's
//               size), then all_gather(params) gives every rank all of them
//   ZeRO 3      parameters are kept as this rank's shard only; forward
//               gathers the whole bucket before the block's first read and
//               backward gathers it again (the parameters' reads in backward
//               are redirected to the second copy), each freed after its use
//
// Offload (ZeRO-Offload): with the block's offload share F, the last F of
// the elements a rank updates (the whole bucket under ZeRO 0, its shard
// under ZeRO 1-3; rounded to whole blocks of 16, 64 bytes) are updated on
// the host. Their AdamW moments live in host memory beside a copy of those
// parameters (the master the host updates; in an fp32 program it equals the
// device's copy) and of their gradient:
//
//   to_host(reduced)          the gradient range, device -> host
//   adamw(params, reduced, m, v) part=P   the device's range (its moments
//                             cover the first P - H elements of the part)
//   adamw(host params, host grads, host m, host v)   rt_adamw_host, threads
//   to_device(params, host params)   the updated range back, before any
//                             all_gather of the parameters
//
// The program fills the host's parameters from the device's after loading the
// weights (init_host), so --load, --save and --dump-grads, which read the
// device, see what they always did.
//
// bf16 offload keeps the offloaded range's float32 masters on the host only
// (the device's masters are the first P - H elements of the part) and sends
// bf16 copies back, half the bytes:
//
//   adamw(host params, ...)             the host's masters
//   cast(host params) -> copies.host    rounded on the host (rt_cast_host)
//   to_device(copies, copies.host)      the copies' range, before their assign
//                                       writes the device's range and any
//                                       all_gather of the copies
//
// The program loads and saves those masters in the host region (train.c,
// rt_bucket.host_numel).
//
// Parameter offload (ZeRO-Infinity's offload_param, PlanBlock.offload_params;
// with ZeRO-3, the gradients and the whole update on the host): the host's
// copy of this rank's shard is the only one. ZeRO-3's gathers start from it,
// its shard copied from host memory into its place in the gathered bucket
// (unshard of a host value) before the all-gather; the update writes it on
// the host and sends nothing back. In bf16 the shard of working copies the
// gathers read lives in host memory too (copies.host), written there from the
// updated masters (assign(copies.host, host params), rt_cast_host). On the
// device the block holds its parameters only while a phase reads them, as
// ZeRO-3's gathered buckets.
//
// bf16 mixed precision (passes/precision.c): the parameters are the float32
// masters and their gradients float32 (or, --grad-precision bf16, bf16: the gradient
// buckets, their accumulation and reductions in bf16), lowered as above; their bf16 working
// copies, which forward and backward read, are one more bucket per block
// (copies.bN, laid out as the parameters), written from the masters by one
// assign after the update (and after offload's copy back):
//
//   ZeRO 0      the whole bucket of masters, the whole bucket of copies
//   ZeRO 1, 2   masters as this rank's shard only (params.shard, which only
//               the update reads); the assign writes this rank's part of the
//               copies and all_gather(copies) the rest: half the bytes of
//               float32's all-gather
//   ZeRO 3      masters and copies as shards (copies.shard); the copies are
//               what forward and backward gather
//
// Collectives start and return; comm_wait finishes them (slots pair them).
#include "passes.h"
#include "parts.h"   // runtime/: a bucket's uneven parts, as the program computes them

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The pass edits the graph in one batch (ir_batch_begin): positions are those
// of the graph as it came, found in sweeps made before any edit.
typedef struct Lower {
  IrGraph *g;
  const Plan *plan;
  int dp, tp, micro;         // the plan's mesh and micro-batches (the most a replica runs)
  int sub;                   // the degree of its blocks below tp (1: none)
  double scale;              // each micro-batch's gradient in its replica's accumulation
  PassLowered *out;
  IrDiag *d;
  // by value id: the position of the first forward and backward node that reads
  // it (g->nnodes: none), a parameter's update (NULL: none), and (bf16) its
  // working copy and the assign that writes it
  int *first_fwd, *first_bwd;
  IrNode **update, **assign;
  // ZeRO-3: backward's reads of from[i] become reads of to[i] (one sweep at the end)
  IrValue **from, **to;
  int nswap;
} Lower;

static int64_t round_up(int64_t x, int64_t k) { return (x + k - 1) / k * k; }

int pass_reduced_at(const IrGraph *g, int at, const IrValue *v) {
  while (at + 1 < g->nnodes && (g->nodes[at + 1]->op == OP_ALL_REDUCE ||
                                g->nodes[at + 1]->op == OP_COMM_WAIT) &&
         g->nodes[at + 1]->in[0] == v)
    at++;
  return at;
}

static IrValue *flat(Lower *L, const char *what, const PassBucket *b, IrRole role, int64_t n) {
  char name[256];
  snprintf(name, sizeof name, "%s.%s", what, b->name);
  IrValue *v = ir_value_new(L->g, name, DT_F32, role);
  const Sym *s = sym_const(&L->g->arena, n);
  ir_value_set_shape(v, 1, &s);
  if (role == ROLE_STATE)
    v->init.kind = INIT_ZEROS;
  return v;
}

static int infer(Lower *L, IrNode *n) { return ir_infer(L->g, n, L->d); }

// A collective on x, a bucket of b or its part, over the axis b is reduced and sharded over,
// with a slot of its own.
static IrNode *collective(Lower *L, const PassBucket *b, IrOp op, IrValue *x, bool avg,
                          bool last_micro) {
  IrNode *n = ir_node_new(L->g, op, &x, 1, 0);
  ir_set_int(L->g, n, "axis", ir_rt_axis(b->axis));
  if (op != OP_ALL_GATHER)
    ir_set_int(L->g, n, "avg", avg);
  ir_set_int(L->g, n, "slot", L->out->nslots++);
  if (last_micro)
    ir_set_int(L->g, n, "last_micro", 1);
  return n;
}

static IrNode *wait(Lower *L, IrNode *started) {
  IrNode *n = ir_node_new(L->g, OP_COMM_WAIT, started->in, 1, 0);
  ir_set_int(L->g, n, "slot", ir_attr_i(started, "slot"));
  if (started->op != OP_ALL_GATHER && ir_attr_i(started, "last_micro"))
    ir_set_int(L->g, n, "last_micro", 1);
  return n;
}

// The uneven parts b is sharded in (Plan.replica_parts: over dp only), or NULL.
static const int *bucket_parts(const Lower *L, const PassBucket *b) {
  return b->axis == IR_MESH_DP ? L->plan->replica_parts : NULL;
}

// Over uneven parts (runtime/parts.h), node n's rank's part of a bucket of b's: the program's
// replicas, from parts_first, have parts of parts_mine of the bucket's parts_total units each,
// the first of them after parts_before.
static void uneven(Lower *L, IrNode *n, const PassBucket *b) {
  const int *w = bucket_parts(L, b);
  if (!w)
    return;
  int first = L->plan->part_first;
  long total = rt_parts_total(w, b->shards), mine;
  long before = rt_part(total, w, b->shards, first, &mine);   // in units
  ir_set_int(L->g, n, "parts_total", total);
  ir_set_int(L->g, n, "parts_mine", mine);
  ir_set_int(L->g, n, "parts_first", first);
  ir_set_int(L->g, n, "parts_before", before);
}

// Node n reads or writes this rank's part of a bucket of b's: its place among b's shards.
static void sharded(Lower *L, IrNode *n, const PassBucket *b, bool parts) {
  ir_set_int(L->g, n, "shards", parts ? b->shards : 1);
  if (b->axis != IR_MESH_DP)
    ir_set_int(L->g, n, "shard_axis", ir_rt_axis(b->axis));
  if (parts)
    uneven(L, n, b);
}

static IrNode *accumulate(Lower *L, const PassBucket *b, IrValue *acc, IrValue *x) {
  IrValue *in[2] = {acc, x};
  IrNode *n = ir_node_new(L->g, OP_ACCUMULATE, in, 2, 0);
  sharded(L, n, b, true);
  if (L->micro > 1)
    ir_set_float(L->g, n, "scale", L->scale);
  return n;
}

// Position of the first node of `phase` that reads one of vals[0..n) (or -1).
static int first_read(const Lower *L, IrValue *const *vals, int n, IrPhase phase) {
  const int *first = phase == PHASE_FORWARD ? L->first_fwd : L->first_bwd;
  int at = L->g->nnodes;
  for (int j = 0; j < n; j++)
    at = first[vals[j]->id] < at ? first[vals[j]->id] : at;
  return at < L->g->nnodes ? at : -1;
}

// Whether parameter p's own update applies weight decay (passes/optimizer.c).
static bool decayed(const Lower *L, const IrValue *p) {
  const IrNode *u = L->update[p->id];
  return !u || ir_attr_i(u, "decay_end") != 0;
}

// The block's parameters into buckets: offsets, padding, the bucket's name.
// The decayed ones first (a stable partition), so that one update reaches
// them all with a single boundary, decay_end.
static int64_t place_members(Lower *L, PassBucket *b, IrValue **members, int n) {
  IrValue **rest = L->to + L->nswap; // scratch past the swaps
  int nd = 0, nr = 0;
  for (int i = 0; i < n; i++) {
    if (decayed(L, members[i]))
      members[nd++] = members[i];
    else
      rest[nr++] = members[i];
  }
  memcpy(members + nd, rest, (size_t)nr * sizeof *rest);
  b->decay_end = nr ? 0 : -1;
  int64_t at = 0;
  for (int i = 0; i < n; i++) {
    if (i == nd && nr)
      b->decay_end = at;
    int64_t numel;
    if (sym_eval(ir_numel(L->g, members[i]), &L->g->syms, &numel))
      return ir_error(L->d, members[i]->loc, "lower: the size of '%s' is not known: bind every "
                      "dim (-D NAME=VALUE)", members[i]->name);
    members[i]->bucket_off = at * 4;
    members[i]->grad->bucket_off = at * ir_dtype_size(members[i]->grad->dtype);
    if (L->assign[members[i]->id])  // the working copy, bf16
      L->assign[members[i]->id]->in[0]->bucket_off = at * 2;
    at += round_up(numel, PASS_ALIGN_ELEMS);
  }
  const int *w = bucket_parts(L, b);
  b->numel = round_up(at, (int64_t)PASS_ALIGN_ELEMS * rt_parts_total(w, b->shards));
  long len;
  rt_part(b->numel, w, b->shards, w ? L->plan->part_first : 0, &len);
  b->shard = len;
  return 0;
}

// A flat host value of n elements, named like flat()'s ("adamw.m.host.b3").
static IrValue *host_flat(Lower *L, const char *what, const PassBucket *b, IrRole role,
                          int64_t n) {
  char name[64];
  snprintf(name, sizeof name, "%s.host", what);
  IrValue *v = flat(L, name, b, role, n);
  v->host = true;
  return v;
}

// Offload: the copies move elements [part - host_numel, part) of the rank's
// part of bucket x (a whole bucket, or that part itself).
static void host_range(Lower *L, IrNode *n, const PassBucket *b, const IrValue *x) {
  ir_set_int(L->g, n, "offset", b->part - b->host_numel);
  sharded(L, n, b, ir_eval(L->g, ir_numel(L->g, x)) != b->part);
  IR_ASSERT(infer(L, n) == 0);
}

static IrValue *to_host(Lower *L, const PassBucket *b, const char *what, IrValue *x) {
  IrNode *n = ir_node_new(L->g, OP_TO_HOST, &x, 1, 1);
  IrValue *h = n->out[0];
  char name[64];
  snprintf(name, sizeof name, "%s.host.%s", what, b->name);
  ir_value_rename(L->g, h, name);
  h->role = ROLE_BUCKET;
  h->host = true;
  h->dtype = x->dtype;   // (bf16 gradients stay bf16 on the host)
  const Sym *s = sym_const(&L->g->arena, b->host_numel);
  ir_value_set_shape(h, 1, &s);
  host_range(L, n, b, x);
  return h;
}

static void to_device(Lower *L, const PassBucket *b, IrValue *x, IrValue *h) {
  IrValue *in[2] = {x, h};
  host_range(L, ir_node_new(L->g, OP_TO_DEVICE, in, 2, 0), b, x);
}

// Gradient offload: this rank's part of the bucket reduced every
// micro-batch (all-reduce under ZeRO 0, reduce-scatter from ZeRO 1 on),
// waited for at once and copied to the host, where the micro-batches are
// accumulated; the device's bucket is free again after the copy, so the
// device holds no gradient beyond the block's backward. The whole part is the
// host's (offload share 1), and so is its update (lower_update).
static void grads_to_host(Lower *L, PassBucket *b) {
  wait(L, collective(L, b, b->zero ? OP_REDUCE_SCATTER : OP_ALL_REDUCE, b->grads, true, false));
  b->part = b->zero == 0 ? b->numel : b->shard;
  b->host_numel = b->part;
  if (L->micro > 1) {  // copied to a host buffer, accumulated there
    b->host_grads = host_flat(L, "grads", b, ROLE_BUCKET, b->part);
    b->host_grads->dtype = b->grads->dtype;
    accumulate(L, b, b->host_grads, to_host(L, b, "grads.stage", b->grads));
  } else {
    b->host_grads = to_host(L, b, "grads", b->grads);
  }
  b->reduced = b->host_grads;  // the step's reduced gradient: this rank's part, on the host
  b->reduced_sharded = b->zero >= 1;
}

// The axis b is reduced and sharded over. A block data parallel over tp has gradients that are
// partial sums over tp (each rank's over its part of the batch): its bucket is reduced over
// every rank at once (the sum over tp of the mean over dp, dist.c) and its ZeRO stage shards
// its state over every rank. A block tensor parallel over the mesh's sub ranks has them
// partial over subdp: its bucket is reduced and sharded over its replicas, dp x subdp. Every
// member's gradient must be one; -1 with L->d when one is not (it does not sum over the
// batch).
static int bucket_axis(Lower *L, PassBucket *b, IrValue **members, int n) {
  IrMeshAxis over = members[0]->grad->partial_batch;
  for (int i = 1; i < n; i++) {
    IrMeshAxis other = members[i]->grad->partial_batch;
    if (other == over)
      continue;
    const IrValue *whole = over ? members[i] : members[0];   // the one that is not partial
    return ir_error(L->d, whole->loc, "lower: block %d splits its batch over %s, but the "
                    "gradient of '%s' does not sum over the batch's parts: give the block the "
                    "mesh's tensor parallelism", b->block, ir_mesh_axis_name(over ? over : other),
                    whole->name);
  }
  b->axis = over == IR_MESH_TP ? IR_MESH_ALL : over == IR_MESH_SUBDP ? IR_MESH_SUBREP : IR_MESH_DP;
  if (b->axis != IR_MESH_DP && L->plan->replica_parts)
    return ir_error(L->d, members[0]->loc, "lower: block %d splits its batch over %s, and the "
                    "replicas hold uneven parts of the state, which is not lowered yet: give "
                    "the block the mesh's tensor parallelism, or the groups even state shares",
                    b->block, ir_mesh_axis_name(over));
  b->shards = L->dp * (over == IR_MESH_TP ? L->tp : over == IR_MESH_SUBDP ? L->tp / L->sub : 1);
  return 0;
}

// Gradients: a zeroed bucket that backward writes them into, and the
// reduction after the last one.
static void lower_grads(Lower *L, PassBucket *b, IrValue **members, int n) {
  IrGraph *g = L->g;
  int first = g->nnodes, last = -1;
  for (int i = 0; i < n; i++) {
    const IrValue *v = members[i]->grad;
    const IrNode *p = v->producer;
    IR_ASSERT(p && p->phase == PHASE_BACKWARD);
    first = p->id < first ? p->id : first;
    // the gradient is final after any reduction of it in place (over tp: the
    // norms' weights under sequence parallelism)
    int at = pass_reduced_at(g, p->id, v);
    last = at > last ? at : last;
  }
  g->cur_phase = PHASE_BACKWARD;
  g->cur_block = b->block, g->cur_use = 0;
  ir_insert_before(g, first);
  IrNode *zero = ir_node_new(g, OP_FILL, NULL, 0, 1);
  b->grads = zero->out[0];
  char name[256];
  snprintf(name, sizeof name, "grads.%s", b->name);
  ir_value_rename(g, b->grads, name);
  b->grads->role = ROLE_BUCKET;
  const Sym *s = sym_const(&g->arena, b->numel);
  ir_value_set_shape(b->grads, 1, &s);
  ir_set_float(g, zero, "value", 0.0);
  IR_ASSERT(infer(L, zero) == 0);
  b->grads->dtype = members[0]->grad->dtype;  // float32, or bf16 (--grad-precision bf16)
  for (int i = 0; i < n; i++)
    members[i]->grad->bucket = b->grads;

  ir_insert_before(g, last + 1); // after the last gradient
  bool micro = L->micro > 1;
  if (plan_block(L->plan, b->block)->offload_grads) {
    grads_to_host(L, b);
  } else if (b->zero <= 1) {
    IrValue *red = b->grads;
    if (micro) {
      red = flat(L, "grads.acc", b, ROLE_BUCKET, b->numel);
      red->dtype = b->grads->dtype;
      accumulate(L, b, red, b->grads);
    }
    b->reduce = collective(L, b, b->zero ? OP_REDUCE_SCATTER : OP_ALL_REDUCE, red, true, micro);
    b->reduced = red;
    b->reduced_sharded = b->zero == 1;
  } else {
    IrNode *rs = collective(L, b, OP_REDUCE_SCATTER, b->grads, true, false);
    wait(L, rs);
    b->reduced = flat(L, "grads.shard", b, ROLE_BUCKET, b->shard);
    b->reduced->dtype = b->grads->dtype;
    b->reduced_sharded = true;
    accumulate(L, b, b->reduced, b->grads);
  }
  ir_insert_before(g, -1);
}

// ZeRO-3: the whole bucket gathered from the shards before the first read of
// any of reads[0..n) in `phase`, and vals[0..n) placed in it (nothing when that
// phase reads none of them).
static void gather_params(Lower *L, PassBucket *b, IrValue *const *shard, int nshard,
                          IrValue *const *reads, IrValue *const *vals, int n, IrPhase phase) {
  IrGraph *g = L->g;
  int at = first_read(L, reads, n, phase);
  if (at < 0)
    return;
  g->cur_phase = phase;
  g->cur_block = b->block, g->cur_use = 0;
  ir_insert_before(g, at);
  IrNode *u = ir_node_new(g, OP_UNSHARD, shard, nshard, 1);
  sharded(L, u, b, true);
  IR_ASSERT(infer(L, u) == 0);
  IrValue *whole = u->out[0];
  whole->role = ROLE_BUCKET;
  char name[256];
  snprintf(name, sizeof name, "%s.%s.%s", shard[0] == b->copies ? "copies" : "params",
           phase == PHASE_FORWARD ? "fwd" : "bwd", b->name);
  ir_value_rename(g, whole, name);
  wait(L, collective(L, b, OP_ALL_GATHER, whole, false, false));
  ir_insert_before(g, -1);
  for (int i = 0; i < n; i++)
    vals[i]->bucket = whole;
}

// ZeRO-3: the values forward and backward read (the parameters, or in bf16
// their working copies) are gathered from this rank's shard before each
// phase's first read: `head` on the device, `tail` (NULL: none) in host memory
// (parameter offload: the shard's last elements, or all of it where head is
// empty); backward reads copies of them placed in the second gathered bucket.
// A block whose backward reads none of them (a stem convolution's filter
// gradient needs its input and dy only) is gathered in forward only.
static void lower_params_zero3(Lower *L, PassBucket *b, IrValue *head, IrValue *tail,
                               IrValue **vals, int n) {
  IrGraph *g = L->g;
  IrValue *shard[2];
  int nshard = 0;
  if (!tail || ir_eval(g, ir_numel(g, head)) > 0)
    shard[nshard++] = head;
  if (tail)
    shard[nshard++] = tail;
  b->bwd_gather = first_read(L, vals, n, PHASE_BACKWARD) >= 0;
  if (!b->bwd_gather) {
    gather_params(L, b, shard, nshard, vals, vals, n, PHASE_FORWARD);
    return;
  }
  IrValue **copy = L->to + L->nswap;
  for (int i = 0; i < n; i++) {
    L->from[L->nswap++] = vals[i];
    char name[512];
    snprintf(name, sizeof name, "%s.bwd", vals[i]->name);
    copy[i] = ir_value_new(g, name, vals[i]->dtype, ROLE_ACT);
    ir_value_set_shape(copy[i], vals[i]->rank, vals[i]->shape);
    copy[i]->loc = vals[i]->loc;
    copy[i]->bucket_off = vals[i]->bucket_off;
  }
  gather_params(L, b, shard, nshard, vals, vals, n, PHASE_FORWARD);
  gather_params(L, b, shard, nshard, vals, copy, n, PHASE_BACKWARD); // the reads the copies take
                                                                       // over
}

// An update with the hyper-parameters of `rule` (its own copy of them).
static IrNode *update_like(Lower *L, const IrNode *rule, IrValue **in, int nin) {
  IrNode *u = ir_node_new(L->g, rule->op, in, nin, 0);
  ir_copy_attrs(L->g, u, rule);
  return u;
}

// The weight decay of update u of b, which starts `first` elements into this
// rank's part (the part at rank x part when sharded).
static void set_decay(Lower *L, IrNode *u, const PassBucket *b, int64_t first, bool sharded) {
  // -1: all of it; 0: decay ends before this range starts, on every rank
  int64_t end = b->decay_end < 0 ? -1 : b->decay_end > first ? b->decay_end - first : 0;
  ir_set_int(L->g, u, "decay_end", end);
  ir_set_int(L->g, u, "decay_stride", end > 0 && sharded ? b->part : 0);
  if (end > 0 && sharded)   // (the decay's boundary moves back by this rank's start)
    uneven(L, u, b);
}

// The host's share of an AdamW update of b.
static int64_t host_share(const Lower *L, const PassBucket *b) {
  return pass_offload_elems(b->part, plan_block(L->plan, b->block)->offload);
}

// Parameter offload: the elements of this rank's ZeRO-3 shard whose only copy is in host memory,
// the last ones, as many as the host's share of the update (all of them, or the offload
// share's); 0 without.
static int64_t params_on_host(const Lower *L, const PassBucket *b) {
  return b->params_host ? pass_offload_elems(b->shard, plan_block(L->plan, b->block)->offload)
                        : 0;
}

// One update op for the bucket, replacing its parameters' own; with offload,
// two (device and host) and the copies.
static int lower_update(Lower *L, PassBucket *b, IrValue *const *members, int n) {
  IrGraph *g = L->g;
  double share = plan_block(L->plan, b->block)->offload;
  if (!(share >= 0 && share <= 1))
    return ir_error(L->d, (IrLoc){0}, "lower: block %d: offload share %g (0 to 1)", b->block,
                    share);
  const IrNode *rule = NULL; // the first of the members' updates
  for (int i = 0; i < n; i++) {
    IrNode *u = L->update[members[i]->id];
    if (u && (!rule || u->id < rule->id))
      rule = u;
  }
  IR_ASSERT(rule);
  for (int i = 0; i < n; i++)
    if (L->update[members[i]->id])
      ir_node_remove(g, L->update[members[i]->id]);
  g->cur_phase = PHASE_UPDATE;
  g->cur_block = b->block, g->cur_use = 0;
  if (b->reduce)
    wait(L, b->reduce);
  IrValue *p = b->pshard ? b->pshard : b->params;
  IrNode *u;
  b->nstate = rule->op == OP_ADAMW ? 2 : 0;
  b->part = b->zero == 0 ? b->numel : b->shard;
  b->host_numel = rule->op == OP_ADAMW ? host_share(L, b) : 0; // SGD has no state
  int64_t on_device = b->part - b->host_numel;
  // bf16, parameter offload: the host's masters are on the host only
  if ((b->copies || b->params_host) && b->host_numel) {
    const Sym *dev = sym_const(&g->arena, on_device);
    ir_value_set_shape(p, 1, &dev);
    for (int i = 0; i < n; i++)  // read and written only as the bucket
      if (members[i]->bucket == p)
        members[i]->in_shard = true;
  }
  IR_ASSERT(!b->host_grads || b->host_numel == b->part);  // gradient offload: all of it
  if (b->host_numel && !b->host_grads)
    b->host_grads = to_host(L, b, "grads", b->reduced);
  IrValue *host_grads = b->host_grads;
  if (rule->op == OP_ADAMW && on_device) {
    IrValue *in[4] = {p, b->reduced, flat(L, "adamw.m", b, ROLE_STATE, on_device),
                      flat(L, "adamw.v", b, ROLE_STATE, on_device)};
    u = update_like(L, rule, in, 4);
  } else if (rule->op == OP_SGD) {
    IrValue *in[2] = {p, b->reduced};
    u = update_like(L, rule, in, 2);
  } else {
    u = NULL; // all of it on the host
  }
  // SGD has no state to shard: under ZeRO-1 it updates the whole bucket (the
  // shards other ranks reduced are then overwritten by the all-gather)
  bool parts = b->zero >= 2 || (b->zero == 1 && (rule->op == OP_ADAMW || b->pshard));
  if (u) {
    sharded(L, u, b, parts);
    if (b->host_numel)
      ir_set_int(g, u, "part", b->part);
    set_decay(L, u, b, 0, parts);
    IR_ASSERT(infer(L, u) == 0);
  }
  IR_ASSERT(!b->params_host || b->host_numel == params_on_host(L, b));
  if (b->host_numel) {
    if (!b->host_params)
      b->host_params = host_flat(L, "params", b, ROLE_BUCKET, b->host_numel);
    IrValue *in[4] = {b->host_params, host_grads,
                      host_flat(L, "adamw.m", b, ROLE_STATE, b->host_numel),
                      host_flat(L, "adamw.v", b, ROLE_STATE, b->host_numel)};
    IrNode *h = update_like(L, rule, in, 4);
    sharded(L, h, b, false);  // the host's range alone (its decay is this rank's)
    set_decay(L, h, b, on_device, parts);
    IR_ASSERT(infer(L, h) == 0);
    if (b->copies && b->params_host) {  // bf16: the host's masters rounded into its copies
      IrValue *in[2] = {b->host_copies ? b->host_copies : b->copies, b->host_params};
      IrNode *a = ir_node_new(g, OP_ASSIGN, in, 2, 0);
      sharded(L, a, b, false);
      IR_ASSERT(infer(L, a) == 0);
    } else if (b->copies) {  // bf16: the host's masters rounded there, the copies sent
      IrValue *m = b->host_params;
      IrNode *c = ir_node_new(g, OP_CAST, &m, 1, 1);
      ir_set_str(g, c, "to", ir_dtype_name(b->copies->dtype));
      IrValue *hc = c->out[0];
      char name[64];
      snprintf(name, sizeof name, "copies.host.%s", b->name);
      ir_value_rename(g, hc, name);
      hc->role = ROLE_BUCKET;
      hc->host = true;
      IR_ASSERT(infer(L, c) == 0);
      to_device(L, b, b->copies, hc);
    } else if (!b->params_host) {
      to_device(L, b, p, b->host_params);
    }
  }
  if (b->copies && on_device) {  // the working copies from the updated masters (ZeRO-1, 2: this rank's part)
    IrValue *in[2] = {b->copies, p};
    IrNode *a = ir_node_new(g, OP_ASSIGN, in, 2, 0);
    sharded(L, a, b, b->zero == 1 || b->zero == 2);
    IR_ASSERT(infer(L, a) == 0);
  }
  if (b->zero == 1 || b->zero == 2)  // every rank's part to all (bf16: of the copies)
    wait(L, collective(L, b, OP_ALL_GATHER, b->copies ? b->copies : b->params, false, false));
  return 0;
}

// bf16: the bucket of the members' working copies, in place of their assigns
// (ZeRO-3: this rank's shard of it, gathered before forward's and backward's
// reads as the parameters are in float32; the masters are then only shards).
static int lower_copies(Lower *L, PassBucket *b, IrValue **members, int n) {
  IrValue *copies = NULL, **vals = L->to + L->nswap + n;  // scratch past the swaps
  int nc = 0;
  for (int i = 0; i < n; i++) {
    IrNode *a = L->assign[members[i]->id];
    if (!a)
      continue;
    if (!copies) {
      int64_t numel = b->zero == 3 ? b->shard : b->numel;
      int64_t host = params_on_host(L, b);
      // parameter offload: the shard's last `host` in host memory (all of it: only there)
      copies = host == numel ? host_flat(L, "copies", b, ROLE_BUCKET, numel)
                             : flat(L, b->zero == 3 ? "copies.shard" : "copies", b, ROLE_BUCKET,
                                    numel - host);
      copies->dtype = DT_BF16;
      if (host && host < numel) {
        b->host_copies = host_flat(L, "copies", b, ROLE_BUCKET, host);
        b->host_copies->dtype = DT_BF16;
      }
    }
    vals[nc++] = a->in[0];
    if (b->zero < 3)
      a->in[0]->bucket = copies;
    ir_node_remove(L->g, a);
  }
  b->copies = copies;
  if (copies && b->zero == 3) {
    IrValue *keep[nc > 0 ? nc : 1];
    memcpy(keep, vals, (size_t)nc * sizeof *keep);
    lower_params_zero3(L, b, copies, b->host_copies, keep, nc);
  }
  return 0;
}

// One sweep of the graph as it came: each value's first forward and backward
// reader, and each parameter's update.
static void sweep(Lower *L) {
  const IrGraph *g = L->g;
  for (int i = 0; i < g->nvalues; i++) {
    L->first_fwd[i] = L->first_bwd[i] = g->nnodes;
    L->update[i] = L->assign[i] = NULL;
  }
  for (int i = g->nnodes - 1; i >= 0; i--) {
    IrNode *n = g->nodes[i];
    int *first = n->phase == PHASE_FORWARD ? L->first_fwd
                 : n->phase == PHASE_BACKWARD ? L->first_bwd : NULL;
    for (int k = 0; first && k < n->nin; k++)
      first[n->in[k]->id] = i;
    if ((n->op == OP_ADAMW || n->op == OP_SGD) && n->in[0]->role == ROLE_PARAM)
      L->update[n->in[0]->id] = n;
    if (n->op == OP_ASSIGN && n->in[1]->role == ROLE_PARAM)
      L->assign[n->in[1]->id] = n;
  }
}

// The block that first reads parameter v (bf16: its working copy) in forward
// (0 when none does).
static int owner(const Lower *L, const IrValue *v) {
  if (L->assign[v->id])
    v = L->assign[v->id]->in[0];
  int at = L->first_fwd[v->id];
  return at < L->g->nnodes ? L->g->nodes[at]->block : 0;
}

// A forward node that works across dim 0, the batch's rows: a running sum
// along it (cumsum true), or a mean or sum over it (a BatchNorm's per-channel
// statistics, the count of the elements a mask keeps) other than the loss.
static const IrNode *across_rows(const IrGraph *g, bool cumsum) {
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    if (n->phase != PHASE_FORWARD)
      continue;
    if (cumsum && n->op == OP_CUMSUM &&
        (ir_attr_i(n, "axis") == 0 || ir_attr_i(n, "axis") == -n->in[0]->rank))
      return n;
    if (cumsum || (n->op != OP_MEAN && n->op != OP_SUM) || n->in[0]->rank < 1 ||
        n->out[0] == g->loss)
      continue;
    int na;
    const int64_t *axes = ir_attr_ints(n, "axes", &na);
    bool rows = !axes || na == 0;   // every dim
    for (int k = 0; axes && k < na; k++)
      rows |= axes[k] == 0 || axes[k] == -n->in[0]->rank;
    if (rows)
      return n;
  }
  return NULL;
}

static int check(Lower *L) {
  IrGraph *g = L->g;
  if (L->dp < 1 || L->tp < 1 || L->micro < 1)
    return ir_error(L->d, (IrLoc){0}, "lower: dp, tp and micro-batches must be at least 1");
  const Plan *P = L->plan;
  bool sgd = false;
  for (int i = 0; i < g->nnodes; i++)
    sgd |= g->nodes[i]->op == OP_SGD;
  for (int b = 0; b < ir_nblocks(g); b++) {
    const PlanBlock *pb = plan_block(P, b);
    if (pb->offload_params && pb->zero != 3)
      return ir_error(L->d, (IrLoc){0}, "block %d offloads its parameters with ZeRO-%d: "
                      "parameter offload keeps ZeRO-3's shards in host memory (give it ZeRO-3)",
                      b, pb->zero);
    if (pb->offload_params && (sgd || !(pb->offload > 0)))
      return ir_error(L->d, (IrLoc){0}, "block %d offloads its parameters with %s: the "
                      "parameters in host memory are the optimizer state's offloaded share, "
                      "which the host's update writes (%s)", b,
                      sgd ? "SGD, which has no optimizer state" : "none of its optimizer state",
                      sgd ? "train with AdamW, or keep them on the device"
                          : "give it an offload share above 0");
    if (!pb->offload_grads)
      continue;
    if (pb->offload != 1)
      return ir_error(L->d, (IrLoc){0}, "block %d offloads its gradients but only %g of its "
                      "optimizer state: gradient offload moves the whole update to the host "
                      "(offload 1)", b, pb->offload);
    if (sgd)
      return ir_error(L->d, (IrLoc){0}, "block %d offloads its gradients, and SGD has no "
                      "optimizer state to offload with them: train with AdamW, or keep the "
                      "gradients on the device", b);
  }
  if (!g->loss || !g->loss->producer)
    return ir_error(L->d, (IrLoc){0}, "lower: the graph has no loss");
  const IrNode *l = g->loss->producer;
  if (l->op == OP_NLL_LOSS && ir_attr_i(l, "sum") && (L->dp > 1 || L->micro > 1))
    return ir_error(L->d, l->loc, "lower: the loss is a sum over the batch; data parallelism and "
                    "micro-batches need a mean (export the loss with reduction='mean')");
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->phase == PHASE_UPDATE && g->nodes[i]->op != OP_ADAMW &&
        g->nodes[i]->op != OP_SGD && g->nodes[i]->op != OP_ASSIGN)
      return ir_error(L->d, g->nodes[i]->loc, "lower: the update has a %s op; only adamw and "
                      "sgd updates are lowered", ir_op_name(g->nodes[i]->op));
  const IrNode *sums = L->dp > 1 || L->micro > 1 ? across_rows(g, true) : NULL;
  if (sums)
    return ir_error(L->d, sums->loc, "a cumsum over the batch's rows: with %d data-parallel "
                    "rank%s and %d micro-batch%s each would sum along its own rows rather than "
                    "the step's, and mtc's ranks compute what one rank does: compile this model "
                    "for one rank and one micro-batch", L->dp, L->dp == 1 ? "" : "s", L->micro,
                    L->micro == 1 ? "" : "es");
  return 0;
}

// Statistics over the batch's rows (SyncBatchNorm): a BatchNorm's mean and
// variance, and in backward the sums over the rows that carry their
// gradients, or the count of the elements a mask keeps that a loss divides
// by, are each rank's over its own rows. ir/shard.c's propagation with the
// batch split over dp (its degree left open: the shapes are one rank's
// already) says which values are such partial sums that a reader needs whole;
// each is all-reduced over dp, as a mean, right after it is made. A rank's
// means divide by its own rows and its gradients are dp times the step's
// (every rank's loss is its term of the step's; the buckets take the mean over
// dp), so the mean over dp of each is the one-rank program's, in forward and
// backward alike. The parameters' gradients stay the buckets' (the
// propagation leaves them partial), and so does the loss (the step's log
// adds it up). Micro-batches cannot share statistics that way: any such
// value is refused under them, naming its node. Found on the graph as it
// comes (before tensor parallelism rewrites it), and only for a graph with a
// forward mean or sum over the rows (across_rows); *vals gets the values, *n
// their count.
static int row_syncs(Lower *L, IrValue ***vals, int *n) {
  IrGraph *g = L->g;
  *vals = NULL, *n = 0;
  if ((L->dp == 1 && L->micro == 1) || !across_rows(g, false))
    return 0;
  int nb = ir_nblocks(g), *ones = malloc((size_t)nb * sizeof *ones + 1);
  IR_ASSERT(ones);
  for (int b = 0; b < nb; b++)
    ones[b] = 1;
  ShardSpec spec = {.dp = SHARD_TP_ANY, .nblocks = nb, .tp = ones};
  ShardResult r;
  int rc = ir_shard(g, &spec, &r, L->d);
  free(ones);
  if (rc)
    return -1;
  *vals = malloc((size_t)r.ncolls * sizeof **vals + 1);
  IR_ASSERT(*vals);
  for (int i = 0; i < r.ncolls && !rc; i++) {
    const ShardColl *c = &r.coll[i];
    // A gather over dp is the propagation asking for the whole batch, mostly where a
    // transpose and a reshape move its split off dim 0 (a sequence-first layout, which each
    // rank runs on its own rows, rightly): left as every data-parallel program leaves it.
    // Only the partial sums are the ranks' to share.
    if (c->axis != IR_MESH_DP || c->kind != SHARD_ALL_REDUCE)
      continue;
    if (L->micro > 1)
      rc = ir_error(L->d, c->node->loc, "a %s over the batch's rows (%s): with %d micro-batches "
                    "each would use its own rows rather than the step's, and mtc's micro-batches "
                    "compute what one batch does: compile this model with one micro-batch "
                    "(data-parallel ranks share such statistics, as SyncBatchNorm)",
                    ir_op_name(c->node->op), c->what, L->micro);
    else if (c->at != SHARD_AFTER)
      rc = ir_error(L->d, c->node->loc, "lower: %s reads a partial sum over the data-parallel "
                    "ranks (%s) that an earlier reader took as it was, which is not lowered: "
                    "compile this model for one rank", ir_op_name(c->node->op), c->what);
    else
      (*vals)[(*n)++] = (IrValue *)c->value;
  }
  ir_shard_free(&r);
  return rc;
}

// A BatchNorm keeps its running variance unbiased, n / (n - 1) of the batch's
// (a scale's bessel_n says n): n values are one rank's, and the step has dp
// times as many.
static void unbias_over_dp(Lower *L) {
  for (int i = 0; L->dp > 1 && i < L->g->nnodes; i++) {
    IrNode *c = L->g->nodes[i];
    double n = c->op == OP_SCALE ? (double)ir_attr_i(c, "bessel_n") : 0, all = n * L->dp;
    if (n > 1) {
      ir_set_float(L->g, c, "s", ir_attr_f(c, "s") * (n - 1) / n * all / (all - 1));
      ir_set_int(L->g, c, "bessel_n", (int64_t)all);
    }
  }
}

// Each of vals[0..n) all-reduced (a mean over dp) right after its producer and
// any reduction already there (tensor parallelism's); the bytes go to the plan.
static void lower_row_syncs(Lower *L, IrValue **vals, int n) {
  IrGraph *g = L->g;
  for (int i = 0; i < n; i++) {
    IrValue *v = vals[i];
    IrNode *at = v->producer;
    g->cur_phase = at->phase;
    ir_set_block(g, at);
    ir_insert_before(g, pass_reduced_at(g, at->id, v) + 1);
    IrNode *c = ir_node_new(g, OP_ALL_REDUCE, &v, 1, 0);
    ir_set_int(g, c, "axis", ir_rt_axis(IR_MESH_DP));
    ir_set_int(g, c, "avg", 1);
    ir_set_int(g, c, "slot", L->out->nslots++);
    IR_ASSERT(infer(L, c) == 0 && infer(L, wait(L, c)) == 0);
    L->out->dp_sync_bytes += (double)ir_eval(g, ir_numel(g, v)) * ir_dtype_size(v->dtype);
  }
  ir_insert_before(g, -1);
}

// Dropout draws each element's mask bit at its place in the step's whole tensor, a rank's or a
// micro-batch's rows one run of it (ir_batch_rows: the batch's rows lead). A dropout over a
// tensor that holds the rows of dim B on a later dim (sequence-first: [T, B, C]) would draw
// every rank's and micro-batch's masks as for the step's first rows: refused under data
// parallelism and micro-batches, naming the node. (A fixed batch is a row whole; on a grid,
// dropout's sharding rule reads whole the rows split on a later dim, ir/shard.c.)
static int dropout_rows(Lower *L) {
  IrGraph *g = L->g;
  if (g->batch_sym < 0 || (L->dp == 1 && L->micro == 1))
    return 0;
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    if (n->op != OP_DROPOUT || n->phase != PHASE_FORWARD || ir_batch_rows(g, n->in[0]))
      continue;
    bool later = false;
    for (int k = 1; k < n->in[0]->rank; k++)
      later |= sym_uses(n->in[0]->shape[k], g->batch_sym);
    if (later)
      return ir_error(L->d, n->loc, "a dropout over a tensor whose first dim is not the batch's "
                      "rows (%s): with %d data-parallel rank%s and %d micro-batch%s its masks "
                      "would not be one rank's; export the model batch-first (batch_first=True) "
                      "or compile it for one rank and one micro-batch",
                      ir_shape_str(g, n->in[0]), L->dp, L->dp == 1 ? "" : "s", L->micro,
                      L->micro == 1 ? "" : "es");
  }
  return 0;
}

// Unequal micro-batch sizes (Plan.replica_rows): backward starts from dloss = r M / R, this
// program's rows' share of the step (the fill autodiff marks loss_seed; IR text keeps the mark).
static int weigh_loss(Lower *L) {
  const Plan *P = L->plan;
  if (!P->replica_rows)
    return 0;
  for (int i = 0; i < L->g->nnodes; i++) {
    IrNode *n = L->g->nodes[i];
    if (n->op == OP_FILL && ir_attr_i(n, "loss_seed")) {
      ir_set_float(L->g, n, "value", (double)P->micro * (double)plan_micro_total(P) /
                                         (double)plan_rows_total(P));
      return 0;
    }
  }
  return ir_error(L->d, (IrLoc){0}, "lower: the replicas' micro-batches differ in size, and the "
                  "graph has no dloss to weigh by them (autodiff marks it loss_seed)");
}

int pass_lower(IrGraph *g, PassCtx *ctx, bool *changed) {
  const Plan *P = ctx->plan;
  if (!P || !P->lower)
    return 0;
  PassLowered *out = ir_alloc(&g->arena, sizeof *out);
  out->plan = *P;
  Lower L = {.g = g, .plan = P, .dp = P->mesh.size[IR_MESH_DP], .tp = P->mesh.size[IR_MESH_TP],
             .sub = P->mesh.size[IR_MESH_SUB],
             .micro = P->micro_batches, .out = out, .d = ctx->diag,
             .scale = (double)P->mesh.size[IR_MESH_DP] / (double)plan_micro_total(P)};
  bool split = L.tp > 1 || P->mesh.size[IR_MESH_ROW] > 1;
  IrValue **syncs = NULL;
  int nsyncs = 0;
  if (check(&L) || dropout_rows(&L) || row_syncs(&L, &syncs, &nsyncs) ||
      (split && pass_lower_tp(g, P, out, ctx->diag))) {
    free(syncs);
    return -1;
  }
  lower_row_syncs(&L, syncs, nsyncs);
  free(syncs);
  unbias_over_dp(&L);
  if (weigh_loss(&L))
    return -1;
  size_t nv = (size_t)g->nvalues + 1;
  L.first_fwd = malloc(nv * sizeof *L.first_fwd);
  L.first_bwd = malloc(nv * sizeof *L.first_bwd);
  L.update = malloc(nv * sizeof *L.update);
  L.assign = malloc(nv * sizeof *L.assign);
  L.from = malloc(nv * sizeof *L.from);
  L.to = malloc(nv * sizeof *L.to);
  // the parameters by block (a counting sort), in the order of their ids
  IrValue **members = malloc(nv * sizeof *members);
  sweep(&L);
  int nb = ir_nblocks(g), rc = 0, *start = calloc((size_t)nb + 1, sizeof *start);
  IR_ASSERT(L.first_fwd && L.first_bwd && L.update && L.assign && L.from && L.to && members &&
            start);
  for (int i = 0; i < g->nvalues; i++)
    if (g->values[i]->role == ROLE_PARAM)
      start[owner(&L, g->values[i]) + 1]++;
  for (int blk = 0; blk < nb; blk++)
    start[blk + 1] += start[blk];
  for (int i = 0; i < g->nvalues; i++)
    if (g->values[i]->role == ROLE_PARAM)
      members[start[owner(&L, g->values[i])]++] = g->values[i];
  // start[blk] is now where block blk + 1's parameters start
  out->bucket = ir_alloc(&g->arena, (size_t)nb * sizeof *out->bucket);
  ir_batch_begin(g);
  for (int blk = 0; blk < nb && !rc; blk++) {
    IrValue **mine = blk ? members + start[blk - 1] : members;
    int n = (int)(members + start[blk] - mine);
    if (!n)
      continue;
    PassBucket *b = &out->bucket[out->nbuckets++];
    char name[32];
    snprintf(name, sizeof name, "b%d", blk);
    b->name = ir_strdup(&g->arena, name);
    b->block = blk;
    b->zero = plan_block(P, blk)->zero;
    if (b->zero < 0 || b->zero > 3) {
      rc = ir_error(ctx->diag, (IrLoc){0}, "lower: ZeRO stage %d (0 to 3)", b->zero);
      break;
    }
    if ((rc = bucket_axis(&L, b, mine, n)) || (rc = place_members(&L, b, mine, n)))
      break;
    // bf16: forward and backward read the working copies, so the masters are
    // only shards from ZeRO-1 on (the optimizer state shards them)
    bool copies = L.assign[mine[0]->id] != NULL;
    // parameter offload: the only copy of the shard's last `host` elements (all of them, or
    // the offload share's), which the host's update writes; the device has the rest
    b->params_host = plan_block(P, blk)->offload_params;
    int64_t host = params_on_host(&L, b);
    if (b->params_host)
      b->host_params = host_flat(&L, "params", b, ROLE_BUCKET, host);
    if (b->zero == 3 || (copies && b->zero >= 1)) {
      b->pshard = flat(&L, "params.shard", b, ROLE_BUCKET, b->shard - host);
    } else {
      b->params = flat(&L, "params", b, ROLE_BUCKET, b->numel);
      for (int i = 0; i < n; i++)
        mine[i]->bucket = b->params;
    }
    if ((rc = lower_copies(&L, b, mine, n)))
      break;
    lower_grads(&L, b, mine, n);
    if (b->zero == 3 && !b->copies)
      lower_params_zero3(&L, b, b->pshard, b->params_host ? b->host_params : NULL, mine, n);
    for (int i = 0; b->copies && b->pshard && i < n; i++) {
      mine[i]->bucket = b->pshard;
      mine[i]->in_shard = true;
    }
    if ((rc = lower_update(&L, b, mine, n)))
      break;
  }
  ir_batch_end(g);
  ir_replace_uses_in_phase(g, L.from, L.to, L.nswap, PHASE_BACKWARD);
  free(L.first_fwd), free(L.first_bwd), free(L.update), free(L.assign), free(L.from), free(L.to);
  free(members), free(start);
  ir_remove_unused(g, ROLE_STATE); // the parameters' own moments
  g->cur_phase = PHASE_FORWARD;
  ir_set_block(g, NULL);
  ctx->lowered = out;
  *changed = true;
  return rc;
}
