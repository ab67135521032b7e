#!/usr/bin/env bash
# The compiler's own time on large graphs: GPT-2 (examples/gpt2.mtc, its small
# default widths) at L = 12, 48, 96, 256 and 1024 layers, and a 20,000-node
# IR text file (an MLP of matmul, gelu and residual add written by this
# script; autodiff and AdamW make it about 60,000 nodes).
#
#   bench/compile_time.sh [MTC]        (default: build/mtc)
#
# Prints a Markdown table: the nodes of the training graph (mtc inspect's
# node lines), then the wall time of `mtc inspect` (frontend and every pass,
# memory plan included, and printing the IR), `mtc plan` (to the solver's
# plan, 1 GPU) and `mtc compile` (all of it, and writing the program), and
# the size of weights.bin (none since the programs of a DSL model draw their own
# initial weights; it was 0.8 GB and most of compile's time at L = 1024).
# A second table times the lowered plans (`inspect` and `compile`; `plan`
# takes no layout): dp 2 x tp 2 with ZeRO-3 and every layer checkpointed,
# the layout whose passes edit the graph most (recompute clones, tp
# conversions, ZeRO-3 gathers).
# A run that takes longer than MTC_BENCH_TIMEOUT seconds (default 600)
# prints as "> N". Targets on a 2-core machine: under 1 s for the
# 20,000-node file and under 5 s for GPT-2 at L = 1024, each of inspect,
# plan, and compile less its weights.
set -euo pipefail
cd "$(dirname "$0")/.."
mtc=${1:-build/mtc}
[ -x "$mtc" ] || { echo "no $mtc: build first (cmake -S . -B build && cmake --build build)"; exit 1; }
export MTC_RUNTIME_DIR=${MTC_RUNTIME_DIR:-$PWD/runtime}
limit=${MTC_BENCH_TIMEOUT:-600}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

tools/chain_ir.sh 20000 > "$tmp/chain20000.ir"

# Seconds one mtc command takes ("> limit" when it runs out of time, "(exit N)"
# after them when it fails); its output in $tmp/out.txt.
timed() {
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  timeout "$limit" "$mtc" "$@" > "$tmp/out.txt" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  if [ "$rc" = 124 ]; then echo "> $limit"; return; fi
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }'
  [ "$rc" = 0 ] || echo " (exit $rc)"
}

# The node lines of the IR the last `timed inspect` printed ("?" when it failed).
nodes_of() {   # inspect's time
  if [ "$1" = "${1%)}" ] && [ "$1" = "${1#>}" ]; then grep -c '^  ' "$tmp/out.txt" || true
  else echo "?"; fi
}

row() {   # name model flags...
  local name=$1 model=$2 inspect plan compile nodes weights
  shift 2
  inspect=$(timed inspect "$model" "$@")
  nodes=$(nodes_of "$inspect")
  plan=$(timed plan "$model" "$@")
  rm -rf "$tmp/out"
  compile=$(timed compile "$model" "$@" -o "$tmp/out")
  weights=$(stat -c %s "$tmp/out/weights.bin" 2> /dev/null || echo "none")
  [ "$weights" = "none" ] || weights=$(awk -v b="$weights" 'BEGIN { printf "%.1f", b / 1e6 }')
  rm -rf "$tmp/out"
  printf "| %s | %s | %s | %s | %s | %s |\n" "$name" "$nodes" "$inspect" "$plan" "$compile" \
    "$weights"
}

echo "| model | nodes | mtc inspect (s) | mtc plan (s) | mtc compile (s) | weights (MB) |"
echo "|---|---:|---:|---:|---:|---:|"
for L in 12 48 96 256 1024; do
  row "GPT-2 L=$L" examples/gpt2.mtc -D L="$L"
done
row "IR text, 20,000 nodes" "$tmp/chain20000.ir"

lowered_row() {   # name model flags...
  local name=$1 model=$2 inspect compile nodes
  shift 2
  inspect=$(timed inspect "$model" "$@")
  nodes=$(nodes_of "$inspect")
  rm -rf "$tmp/out"
  compile=$(timed compile "$model" "$@" -o "$tmp/out")
  rm -rf "$tmp/out"
  printf "| %s | %s | %s | %s |\n" "$name" "$nodes" "$inspect" "$compile"
}

echo
echo "| lowered: --dp 2 --tp 2 --zero 3 --checkpoint all | nodes | mtc inspect (s) | mtc compile (s) |"
echo "|---|---:|---:|---:|"
for L in 256 1024; do
  lowered_row "GPT-2 L=$L" examples/gpt2.mtc -D L="$L" --dp 2 --tp 2 --zero 3 --checkpoint all
done
