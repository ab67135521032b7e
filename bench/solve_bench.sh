#!/usr/bin/env bash
# The planner's solve time: GPT-2 124M, 350M and 1.5B (examples/gpt2.mtc) and
# a 48-layer model whose layers differ (examples/mixed48.mtc, with identical
# layers sharing variables and with --no-share), on 8, 64 and 512 H100s.
#
#   bench/solve_bench.sh [MTC]        (default: build/mtc)
#
# Prints Markdown tables: the whole `mtc plan` wall time (DSL, passes, cost
# model, baselines, GLPK), GLPK's own time, the program's size, its status
# and gap, and the planned step time; then the larger models again with
# 8 GiB per GPU, where memory binds; then mixed48 on a cluster of two kinds of
# GPU (tests/solver/mixed.json, and mixed_8g.json with 8 GiB each). Targets on
# a 2-core machine: at most 1 s for 124M on 8 GPUs and 2 s for 1.5B on 64, with
# a gap of at most 0.1%; the mixed clusters optimal (gap <= 0.5%) in 2 s.
set -euo pipefail
cd "$(dirname "$0")/.."
mtc=${1:-build/mtc}
[ -x "$mtc" ] || { echo "no $mtc: build first (cmake -S . -B build && cmake --build build)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

models=(
  "GPT-2 124M|examples/gpt2.mtc|-D L=12 -D C=768 -D NH=12 -D V=50257 -D T=1024"
  "GPT-2 350M|examples/gpt2.mtc|-D L=24 -D C=1024 -D NH=16 -D V=50257 -D T=1024"
  "GPT-2 1.5B|examples/gpt2.mtc|-D L=48 -D C=1600 -D NH=25 -D V=50257 -D T=1024"
  "mixed48|examples/mixed48.mtc|-D C=1024 -D NH=16 -D V=50257 -D T=1024"
  "mixed48 --no-share|examples/mixed48.mtc|-D C=1024 -D NH=16 -D V=50257 -D T=1024 --no-share"
)

# A number from plan.json's "solver" object (cJSON writes one key per line).
field() { sed -n "/\"solver\"/,/}/s/^[[:space:]]*\"$1\":[[:space:]]*\"\{0,1\}\([^\",]*\).*/\1/p" "$2" | head -1; }
# A number at plan.json's top level (one tab in: not a group's).
top() { sed -n "s/^\t\"$1\":[[:space:]]*\([^,]*\).*/\1/p" "$2" | head -1; }

row() {   # name file "flags" gpus [the GPUs' flags: --gpus GPUS]
  local json="$tmp/plan.json" t0 t1 wall step gap
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$mtc" plan "$2" $3 ${5:---gpus $4} --json "$json" > "$tmp/out.txt" || true
  t1=$(date +%s.%N)
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
  step=$(top step_time_s "$json")
  step=$(awk -v s="${step:-0}" 'BEGIN { printf "%.1f", 1000 * s }')
  gap=$(awk -v g="$(field gap "$json")" 'BEGIN { printf "%.3f%%", 100 * g }')
  printf "| %s | %d | %s | %.3f | %s | %s | %s | %s | %s | %s |\n" "$1" "$4" "$wall" \
    "$(field seconds "$json")" "$(field units "$json")" "$(field variables "$json")" \
    "$(field rows "$json")" "$(field status "$json")" "$gap" "$step"
}

header() {
  echo "| model | GPUs | mtc plan (s) | GLPK (s) | units | variables | rows | status | gap | step (ms) |"
  echo "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"
}

echo "H100-80GB, 8 per node, bf16, micro-batch 4, global batch 4 x GPUs:"
echo
header
for m in "${models[@]}"; do
  IFS='|' read -r name file flags <<< "$m"
  for gpus in 8 64 512; do
    row "$name" "$file" "$flags" "$gpus"
  done
done

# Where memory binds, the knapsack makes the program hard (REFERENCES.md section 7).
echo
echo "The same with 8 GiB per GPU (memory binds):"
echo
header
for m in "${models[@]:2}"; do
  IFS='|' read -r name file flags <<< "$m"
  for gpus in 8 64; do
    row "$name" "$file" "$flags --gpu-mem 8GiB" "$gpus"
  done
done

# Mixed GPUs (Cephalo's uneven shares): each group's share of the batch and of the state, whole
# micro-batches per replica. With --no-share the meshes are solved fastest-first by their
# plans with shared variables, so the one that wins gives the cutoff early.
echo
echo "Mixed GPUs, 8 A100-40GB and 8 H100-80GB (tests/solver/mixed.json; mixed_8g.json: 8 GiB each):"
echo
header
for m in "${models[@]:3}"; do
  IFS='|' read -r name file flags <<< "$m"
  for cluster in mixed mixed_8g; do
    row "$name, $cluster" "$file" "$flags" 16 "--cluster tests/solver/$cluster.json"
  done
done

