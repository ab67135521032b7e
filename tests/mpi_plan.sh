#!/usr/bin/env bash
# A saved and edited plan applied by `mtc compile --plan`: the planner's
# plan.json for 4 GPUs, edited to dp 2 x tp 2 with ZeRO-3 on every block,
# must run under mpirun and equal the one-rank program (tests/mpi.sh).
# PLAN_OFFLOADS="0 1 0.5" gives block i the i-th share (cycled) of its
# optimizer state on the host (0 for all without it). PLAN_ZERO replaces the
# ZeRO stage 3. PLAN_GROUP_MICRO="1 3" splits the 4 GPUs into two groups of
# one replica each (a mixed cluster's), running 1 and 3 of the 4
# micro-batches (uneven batch shares; the state sharded evenly, or with
# PLAN_GROUP_STATE="0.25 0.75" in those shares: a program of its own per group;
# PLAN_GROUP_ROWS="2 4" gives the groups' micro-batches those sizes, the first the model's
# batch dim: a program per size, the one-rank program's batch the sum).
# PLAN_BATCH_TP="1 2" makes those blocks data parallel over all 4 GPUs (dp 4,
# tp 1) beside the others' dp 2 x tp 2: the program splits their batch over
# tp too (per-block meshes; all of them: each says so with "batch_tp": 2). PLAN_OFFLOAD_GRADS="2" offloads those blocks'
# gradients with all of their optimizer state, PLAN_OFFLOAD_PARAMS="1" those blocks'
# parameters too (with ZeRO-3: the other blocks keep theirs on the device).
# PLAN_TP4="0" gives those blocks dp 1 x tp 4 beside the others' dp 2 x tp 2: the program's
# mesh is tp 4, the other blocks tensor parallel over 2 of its ranks and data parallel over
# the 2 such groups (TP2 beside TP4).
# PLAN_GRID="1 2" gives those blocks a 2 x 2 grid (dp 1, q 2) beside PLAN_TP4's blocks: 2D
# beside 1D in a mesh of tp 4.
# PLAN_GPUS=8 plans for 8 GPUs (micro-batches of 4, the global batch 16) and edits every block to
# dp 1 x tp 8 without ZeRO; PLAN_SUBGRID="1 2" gives those blocks dp 2 x a 2 x 2 grid (with
# PLAN_ZERO's stage over their 2 replicas): 2D on each group of 4 of the tp ranks, the batch
# over the 2 grids' rows.
# PLAN_PRECISION=bf16 plans and compiles in bf16 (give mpi.sh its bf16 tolerances).
# PLAN_GPUS=2 (or 3) plans for 2 (3) GPUs and edits every block to dp 2 (3) x tp 1 instead (the
# options above that name tp 4, a grid or data parallelism over tp need 4); PLAN_GROUP_COUNTS="1
# 2" gives the groups of PLAN_GROUP_MICRO those numbers of GPUs (default: half of them each).
#
#   tests/mpi_plan.sh MTC MODEL OUT [MTC ARGS...]   (the model's batch dim: 2 per rank, 4 on 8)
set -euo pipefail
mtc=$1 model=$2 out=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
gpus=${PLAN_GPUS:-4} batch=() micro=2
[ "$gpus" = 4 ] || batch=(--batch 8)
[ "$gpus" = 8 ] && micro=4 batch=(--batch 16)
"$mtc" plan "$model" "$@" -D B=$micro --gpus "$gpus" "${batch[@]}" --precision "${PLAN_PRECISION:-fp32}" \
  --json "$out/plan.json" > "$out/plan.txt"
/usr/bin/python3 - "$out/plan.json" "$out/edited.json" "${PLAN_OFFLOADS:-0}" "${PLAN_ZERO:-3}" \
  "${PLAN_GROUP_MICRO:-}" "${PLAN_BATCH_TP:-}" "${PLAN_OFFLOAD_GRADS:-}" \
  "${PLAN_OFFLOAD_PARAMS:-}" "${PLAN_TP4:-}" "${PLAN_GRID:-}" "${PLAN_GROUP_STATE:-}" "$gpus" \
  "${PLAN_GROUP_COUNTS:-}" "${PLAN_SUBGRID:-}" "${PLAN_GROUP_ROWS:-}" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
shares = [float(x) for x in sys.argv[3].split()]
gpus = int(sys.argv[12])
assert plan["batch"]["micro"] == (4 if gpus == 8 else 2), plan["batch"]
assert plan["batch"]["micro_batches"] == 4, plan["batch"]
batch = [int(x) for x in sys.argv[6].split()]
grads = [int(x) for x in sys.argv[7].split()]
params = [int(x) for x in sys.argv[8].split()]
tp4 = [int(x) for x in sys.argv[9].split()]
grid = [int(x) for x in sys.argv[10].split()]
subgrid = [int(x) for x in sys.argv[14].split()]
tp = 2 if gpus == 4 else 8 if gpus == 8 else 1
for i, b in enumerate(plan["blocks"]):
    b.update(dp=gpus // tp, tp=tp, q=1, zero=int(sys.argv[4]) if gpus > tp else 0,
             checkpoint=False, offload=shares[i % len(shares)])
    if b["id"] in batch:   # every block: only "batch_tp" says that the mesh is dp 2 x tp 2
        b.update(dp=4, tp=1, batch_tp=2) if len(batch) == len(plan["blocks"]) else \
            b.update(dp=4, tp=1)
    if b["id"] in tp4:   # one replica: no ZeRO (the solver prices no stage there)
        b.update(dp=1, tp=4, zero=0)
    if b["id"] in subgrid:
        b.update(dp=2, tp=1, q=2, zero=int(sys.argv[4]))
    if b["id"] in grid:
        b.update(dp=1, tp=1, q=2, zero=0)
    if b["id"] in grads:
        b.update(offload=1, offload_grads=True)
    if b["id"] in params:
        b.update(zero=3, offload=1, offload_grads=True, offload_params=True)
if sys.argv[5]:
    group = plan["groups"][0]
    state = [float(x) for x in sys.argv[11].split()] or [0.5, 0.5]
    counts = [int(x) for x in sys.argv[13].split()] or [gpus // 2] * 2
    plan["groups"] = [dict(group, name=f"g{i}", count=counts[i], micro_batches=int(m),
                           state_share=state[i]) for i, m in enumerate(sys.argv[5].split())]
    rows = [int(x) for x in sys.argv[15].split()]
    for g, r in zip(plan["groups"], rows):
        g["micro"] = r
    if rows:
        plan["batch"]["global"] = sum(g["micro_batches"] * g["micro"] for g in plan["groups"])
json.dump(plan, open(sys.argv[2], "w"), indent=1)
PY
# global batch: 2 sequences x 4 micro-batches (2 replicas, 2 micro-batches each; or one
# replica, 4 micro-batches); on 8 GPUs 4 sequences x 4
global=$((micro * 4))
if [ -n "${PLAN_GROUP_ROWS:-}" ]; then   # each group's micro-batches times their size
  read -ra m <<< "$PLAN_GROUP_MICRO"
  read -ra r <<< "$PLAN_GROUP_ROWS"
  global=0
  for i in "${!m[@]}"; do global=$((global + m[i] * r[i])); done
fi
# the same plan from the model's IR text after autodiff weighs each program's dloss alike (the
# mark of autodiff's fill survives IR text; a DSL model's: an ONNX model's weights do not)
if [ -n "${PLAN_GROUP_ROWS:-}" ] && [ "${model##*.}" = mtc ]; then
  prec=(--precision "${PLAN_PRECISION:-fp32}")
  "$mtc" inspect "$model" "$@" -D B=$micro "${prec[@]}" --dump-after autodiff > "$out/ad.ir" \
    2> /dev/null
  for src in model ir; do
    rm -rf "$out/seed"
    from=$model
    [ $src = ir ] && from=$out/ad.ir
    "$mtc" compile "$from" "$@" -D B=$micro "${prec[@]}" --plan "$out/edited.json" \
      -o "$out/seed" > /dev/null
    grep -h 'rt_fill(b.d_loss' "$out/seed"/model*.c > "$out/seed.$src"
  done
  if ! cmp -s "$out/seed.model" "$out/seed.ir" || grep -q ' 1.0f);' "$out/seed.ir"; then
    echo "FAIL: dloss from the model, and from its IR text: $(cat "$out/seed.model" "$out/seed.ir")"
    exit 1
  fi
fi
exec "$here/mpi.sh" "$mtc" "$model" "$out/run" "$gpus" $global $micro "--plan $out/edited.json" "$@" \
  --precision "${PLAN_PRECISION:-fp32}"
