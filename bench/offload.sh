#!/usr/bin/env bash
# Offload on this machine: GPT-2 124M (T=64 unless --seq, B=4 sequences per
# data-parallel rank, fp32 and bf16) with nothing offloaded, with every block's
# optimizer state on the host (--offload 1), and with its gradients too
# (--offload-grads, ZeRO-Offload's layout), at 1 rank and at DP2 with ZeRO-2
# and 2 micro-batches; with its parameters too (--offload-params, ZeRO-3's
# shards in host memory as ZeRO-Infinity keeps them), at 1 rank and at DP2;
# half of each block's optimizer state under ZeRO-3, with and without that
# half's parameters (--offload 0.5 --offload-params: the gradients stay);
# and with every layer's activations swapped to host memory (--swap all),
# alone and with the gradients offloaded.
#
#   bench/offload.sh [--steps N] [--wait S] [--seq T] [--precision 'fp32 bf16 bf16g']
#                    [--rows REGEX] [MTC]
#
# --seq T sets the sequence length (default 64: the activations are a small
# share of the memory; at 256 they are most of it), --precision the precisions (default
# "fp32 bf16"; bf16g is bf16 with bf16 gradients, --grad-precision bf16) and --rows the rows
# whose "ranks|offloaded" matches the extended REGEX (default all).
#
# For each row it compiles the model (`mtc compile examples/gpt2.mtc ...`),
# builds it (`make cpu`), runs it --steps times (default 3; several ranks
# under tests/mpirun.sh) with OMP_NUM_THREADS=1 per rank and
# MTC_HOST_THREADS=1 (the host's AdamW on one thread: the machine has few
# cores), and prints one row of a Markdown table: rank 0's median step time
# (the first step dropped), the planned device arena (what the program
# allocates: parameters, gradients, moments and activations), the model state
# on the device and in host memory beside the planner's ("(=)": equal to the
# byte), the activations swapped to host memory likewise, and the bytes sent
# per step. On a CPU the device and host are one
# memory and the copies are memcpy: the step times show what the host's
# update and the copies cost here, not over PCIe. Before each run it waits
# (at most --wait seconds, default 120) for the CPUs to be at most 15% busy;
# the last column is the busy share it saw. (--offload 0 on one rank: the
# layout's buckets, so that the program reports its model state.)
set -euo pipefail
cd "$(dirname "$0")/.."
cmdline="bench/offload.sh${*:+ $*}"
steps=3
wait_s=120
seq=64
precisions="fp32 bf16"
only=
mtc=build/mtc
while [ $# -gt 0 ]; do
  case $1 in
  --steps) steps=$2; shift 2 ;;
  --wait) wait_s=$2; shift 2 ;;
  --seq) seq=$2; shift 2 ;;
  --precision) precisions=$2; shift 2 ;;
  --rows) only=$2; shift 2 ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "bench/offload.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  *) mtc=$1; shift ;;
  esac
done
[ -x "$mtc" ] || { echo "no $mtc: build first (cmake -S . -B build && cmake --build build)"; exit 1; }
export MTC_RUNTIME_DIR=${MTC_RUNTIME_DIR:-$PWD/runtime}
ncpu=$(getconf _NPROCESSORS_ONLN)
export OMP_NUM_THREADS=1 MTC_HOST_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source bench/idle.sh

model="-D L=12 -D C=768 -D NH=12 -D V=50257 -D T=$seq -D B=4"
rows=(   # ranks|layout|flags
  "1|none|--offload 0"
  "1|optimizer state|--offload 1"
  "1|+ gradients|--offload-grads"
  "1|+ gradients and parameters|--offload-params"
  "1|ZeRO-3, half the optimizer state|--zero 3 --offload 0.5"
  "1|ZeRO-3, half the optimizer state and parameters|--offload 0.5 --offload-params"
  "1|activations swapped|--offload 0 --swap all"
  "1|+ gradients, activations swapped|--offload-grads --swap all"
  "2|ZeRO-2 DP2 x 2 micro, none|--dp 2 --zero 2 --micro-batches 2"
  "2|ZeRO-2 DP2 x 2 micro, optimizer state|--dp 2 --zero 2 --micro-batches 2 --offload 1"
  "2|ZeRO-2 DP2 x 2 micro, + gradients|--dp 2 --zero 2 --micro-batches 2 --offload-grads"
  "2|ZeRO-3 DP2 x 2 micro, + gradients|--dp 2 --zero 3 --micro-batches 2 --offload-grads"
  "2|ZeRO-3 DP2 x 2 micro, + gradients and parameters|--dp 2 --micro-batches 2 --offload-params"
  "2|ZeRO-3 DP2 x 2 micro, half the optimizer state and parameters|--dp 2 --micro-batches 2 --offload 0.5 --offload-params"
)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
versus() { [ "$1" = "$2" ] && echo "$(mib "$1") (=)" || echo "$(mib "$1") (planner $(mib "$2"))"; }

echo "    $cmdline"
echo
echo "$ncpu CPU cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1))," \
  "OMP_NUM_THREADS=1 and MTC_HOST_THREADS=1 per rank; $(date -u +%Y-%m-%d). GPT-2 124M, T=$seq, B=4" \
  "per micro-batch; $steps steps, the first dropped."
echo
echo "| precision | ranks | offloaded | step (ms) | arena (MiB) | state on device (MiB) | state on host (MiB) | activations on host (MiB) | sent per step (MiB) | busy before |"
echo "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
for precision in $precisions; do
  for r in "${rows[@]}"; do
    IFS='|' read -r ranks name flags <<< "$r"
    [ -z "$only" ] || [[ "$ranks|$name" =~ $only ]] || continue
    dir="$tmp/p" log="$tmp/log"
    rm -rf "$dir"
    # shellcheck disable=SC2086
    "$mtc" compile examples/gpt2.mtc $model --precision ${precision%g} \
      $([ "$precision" = bf16g ] && echo --grad-precision bf16) $flags -o "$dir" > "$tmp/compile" 2>&1 ||
      { echo "| $precision | $ranks | $name | compile failed: $(grep -m1 error: "$tmp/compile") |"; continue; }
    make -s -C "$dir" cpu > "$tmp/make" 2>&1 ||
      { echo "| $precision | $ranks | $name | make failed |"; continue; }
    before=$(wait_for_idle)
    if [ "$ranks" -eq 1 ]; then
      "$dir/train" --steps "$steps" > "$log" 2>&1 || { echo "| $precision | $ranks | $name | failed |"; continue; }
    else
      tests/mpirun.sh "$ranks" "$dir/train" --steps "$steps" > "$log" 2>&1 ||
        { echo "| $precision | $ranks | $name | failed |"; continue; }
    fi
    step=$(awk -F' [|] ' '/^step [0-9]+\/[0-9]+ [|]/ { split($1, s, " "); split(s[2], k, "/");
             if (k[1] >= 2) { sub(/ ms$/, "", $3); print $3 } }' "$log" | sort -g |
           awk '{ v[NR] = $1 } END { printf "%.0f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    arena=$(sed -n 's/.*memory: planned arena \([0-9]*\) bytes.*/\1/p' "$log" | head -1)
    re='state: ([0-9]+) bytes on device, ([0-9]+) bytes on host \(planner: ([0-9]+), ([0-9]+)\).*sent ([0-9]+) bytes per step \(planner: ([0-9]+)\)'
    line=$(grep -m1 "model state:" "$log" || true)
    [[ $line =~ $re ]] || { echo "| $precision | $ranks | $name | no model-state line |"; continue; }
    m=("${BASH_REMATCH[@]}")
    swap=0 swap_planned=0
    re='activation swap: ([0-9]+) bytes .*\(planner: ([0-9]+)\)'
    line=$(grep -m1 "activation swap:" "$log" || true)
    [[ $line =~ $re ]] && swap=${BASH_REMATCH[1]} swap_planned=${BASH_REMATCH[2]}
    echo "| $precision | $ranks | $name | $step | $(mib "$arena") | $(versus "${m[1]}" "${m[3]}") |" \
      "$(versus "${m[2]}" "${m[4]}") | $(versus "$swap" "$swap_planned") |" \
      "$(versus "${m[5]}" "${m[6]}") | $before% |"
  done
done
