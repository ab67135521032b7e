#!/usr/bin/env bash
# Distributed training on this machine: GPT-2 small (examples/gpt2.mtc's
# default config) and GPT-2 124M, T=64, at 1, 2 and 4 ranks, for data
# parallelism, ZeRO-3 and tensor parallelism (with and without Megatron's
# sequence parallelism, +SP; and Optimus 2D on a 2 x 2 grid).
#
#   bench/dist.sh [--steps N] [--steps-124m N] [--vocab-124m V] [--only small|124m]
#                 [--layout NAME]... [--wait S] [MTC]
#
# MTC defaults to build/mtc. For every model and layout (1 rank; DP2; DP4;
# ZeRO-3 at DP2 and DP4; TP2, TP4 and DP2 x TP2, each also +SP; 2D 2x2; offload of the
# optimizer state at 1 rank, with the gradients at 1 rank and ZeRO-2 DP2, and with the
# parameters too at 1 rank and ZeRO-3 DP2; --layout picks
# some by name, e.g. --layout TP2 --layout 'DP2 x TP2') it compiles the model with that
# layout (`mtc compile ... --dp D --tp T --zero Z`, or `--tp2d 2`), builds it (`make cpu`:
# mpicc and comm_mpi.c when there are several ranks), runs it (several ranks
# with tests/mpirun.sh: oversubscribed, unbound, a rank waiting in MPI yields
# its core) with OMP_NUM_THREADS=1 per rank for --steps steps (default 6;
# --steps-124m, default 2, for the 124M model, whose step takes a minute or
# more on a CPU), and prints one row of a Markdown table:
#
#   - step time: the median of rank 0's step times, the first step (which
#     faults in the arena and opens MPI's connections) dropped; tokens/s are
#     the global batch's tokens over it.
#   - comm: the time each rank spends inside the collectives and their waits
#     per step (the program's `rank r: comm:` line: the median over all its
#     steps, and its share of that rank's median step); a range over ranks.
#     It includes waiting for slower ranks, and on an oversubscribed machine
#     waiting for a rank that is not scheduled.
#   - memory per rank: the planned arena beside the resident one (mincore),
#     the process's peak RSS, and the model state (parameters, gradients,
#     AdamW moments this rank holds) and bytes sent per step beside the
#     planner's formulas. "(=)" means equal to the planner's to the byte.
#   - others' CPU: the machine is shared. Before each run the script waits
#     (at most --wait seconds, default 120) for the CPUs to be at most 15%
#     busy; the column gives the busy share it last saw before the run, and
#     the share of all CPUs that other processes used during it.
#
# B=4 is each data-parallel rank's micro-batch (the model's B dim): the
# global batch is 4 x dp sequences of 64 tokens, so DP4 does 4 times the
# work of one rank per step. A row that cannot run (a layout mtc refuses, no
# mpirun, too little memory) is printed as skipped, with the reason below the
# table. GPT-2 124M's vocabulary, 50257, is odd: under tp 2 and on a 2 x 2
# grid mtc pads it to 50258 (vocabulary-parallel embedding and LM head, over
# tp or the grid's columns); --vocab-124m changes it
# (50304, as llm.c pads it). Needs the build (cmake -S . -B build && cmake
# --build build), cc, make, and for several ranks Open MPI (mpicc, mpirun).
set -euo pipefail
cd "$(dirname "$0")/.."
cmdline="bench/dist.sh${*:+ $*}"

steps=6
steps_124m=2
vocab_124m=50257
only=""
picked=()
wait_s=120
mtc=build/mtc
while [ $# -gt 0 ]; do
  case $1 in
  --steps) steps=$2; shift 2 ;;
  --steps-124m) steps_124m=$2; shift 2 ;;
  --vocab-124m) vocab_124m=$2; shift 2 ;;
  --only) only=$2; shift 2 ;;
  --layout) picked+=("$2"); shift 2 ;;
  --wait) wait_s=$2; shift 2 ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "bench/dist.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  *) mtc=$1; shift ;;
  esac
done
case $only in "" | small | 124m) ;; *) echo "bench/dist.sh: --only small or 124m" >&2; exit 2 ;; esac
[ -x "$mtc" ] || { echo "no $mtc: build first (cmake -S . -B build && cmake --build build)"; exit 1; }
export MTC_RUNTIME_DIR=${MTC_RUNTIME_DIR:-$PWD/runtime}
ncpu=$(getconf _NPROCESSORS_ONLN)  # not nproc: it answers OMP_NUM_THREADS
export OMP_NUM_THREADS=1
export MTC_MPIRUN_TIMEOUT=${MTC_MPIRUN_TIMEOUT:-3600}  # a 124M step at 4 ranks takes minutes
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

source bench/layouts.sh   # models and layouts

skipped=()
skip() {   # model layout ranks reason
  echo "| $1 | $3 | $2 | skipped | | | | | | | | | |"
  skipped+=("$1, $2: $4")
}

source bench/idle.sh   # wait_for_idle, cpu_busy

mib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }

# "a" when every rank's value formats as a, else "lo-hi"; $1 formats one value
range() {
  local fmt=$1 lo hi
  shift
  [ $# -gt 0 ] || { echo "-"; return; }
  lo=$($fmt "$(printf '%s\n' "$@" | sort -g | head -1)")
  hi=$($fmt "$(printf '%s\n' "$@" | sort -g | tail -1)")
  if [ "$lo" = "$hi" ]; then echo "$lo"; else echo "$lo-$hi"; fi
}
plain() { echo "$1"; }
ms() { awk -v x="$1" 'BEGIN { printf "%.0f", x }'; }

# measured (planner) in MiB; "(=)" when they agree to the byte
versus() {   # "measured planner" pairs, one per rank
  local m=() p=() pair all_eq=1
  for pair in "$@"; do
    m+=("${pair% *}")
    p+=("${pair#* }")
    [ "${pair% *}" = "${pair#* }" ] || all_eq=0
  done
  [ ${#m[@]} -gt 0 ] || { echo "-"; return; }
  if [ $all_eq = 1 ]; then echo "$(range mib "${m[@]}") (=)"
  else echo "$(range mib "${m[@]}") (planner $(range mib "${p[@]}"))"; fi
}

row() {   # model-name steps "model flags" ranks layout-name "layout flags"
  local name=$1 nsteps=$2 mflags=$3 ranks=$4 lname=$5 lflags=$6 dir="$tmp/prog" log="$tmp/log"
  rm -rf "$dir"
  if [ "$ranks" -gt 1 ] && ! command -v mpirun > /dev/null; then
    skip "$name" "$lname" "$ranks" "mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"
    return
  fi
  if ! lflags=$(layout_flags "$mtc" "$mflags" "$lflags" "$tmp"); then
    skip "$name" "$lname" "$ranks" "mtc plan failed for its groups"
    return
  fi
  # shellcheck disable=SC2086
  if ! "$mtc" compile examples/gpt2.mtc --precision fp32 $mflags $lflags -o "$dir" > "$tmp/compile" 2>&1; then
    skip "$name" "$lname" "$ranks" "mtc compile refuses it: $(grep -m1 error: "$tmp/compile" | sed 's/^[^ ]*: error: //')"
    return
  fi
  local arena avail
  arena=$(sed -n 's/.*(arena \([0-9]*\) bytes).*/\1/p' "$tmp/compile")
  avail=$(awk '/^MemAvailable:/ { printf "%.0f", $2 * 1024 }' /proc/meminfo)
  if [ -n "$arena" ] && [ "$((arena * ranks * 11 / 10))" -gt "$avail" ]; then
    skip "$name" "$lname" "$ranks" "$ranks arenas of $(mib "$arena") MiB need more than the $(mib "$avail") MiB available"
    return
  fi
  if ! make -s -C "$dir" cpu > "$tmp/make" 2>&1; then
    skip "$name" "$lname" "$ranks" "make cpu failed: $(head -1 "$tmp/make")"
    return
  fi
  local rc=0 before b0 c0 t0 others
  before=$(wait_for_idle)
  own_cpu
  c0=$(cat "$tmp/own") b0=$(cpu_busy) t0=$(date +%s.%N)
  if [ "$ranks" -eq 1 ]; then
    "$dir/train" --steps "$nsteps" > "$log" 2> "$tmp/err" || rc=$?
  else
    tests/mpirun.sh "$ranks" "$dir/train" --steps "$nsteps" > "$log" 2> "$tmp/err" || rc=$?
  fi
  own_cpu
  others=$(awk -v b0="$b0" -v b1="$(cpu_busy)" -v c0="$c0" -v c1="$(cat "$tmp/own")" -v t0="$t0" \
    -v t1="$(date +%s.%N)" -v n="$ncpu" \
    'BEGIN { o = (b1 - b0 - (c1 - c0)) / ((t1 - t0) * n); printf "%.0f%%", 100 * (o > 0 ? o : 0) }')
  if [ $rc -ne 0 ]; then
    skip "$name" "$lname" "$ranks" "the run exited with $rc: $(grep -m1 . "$tmp/err" || true)"
    return
  fi

  # rank 0's step times, the first dropped when there are others
  local step
  step=$(awk -v keep=$((nsteps > 1 ? 2 : 1)) -F' [|] ' '/^step [0-9]+(\/[0-9]+)? [|]/ {
           split($1, s, " "); if (s[2] >= keep) { sub(/ ms$/, "", $3); print $3 } }' "$log" |
         sort -g | awk '{ v[NR] = $1 } END { printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  local tokens tps
  tokens=$((64 * $(layout_batch "$6" 4)))
  tps=$(awk -v t="$tokens" -v s="$step" 'BEGIN { printf "%.0f", (s > 0 ? 1000 * t / s : 0) }')

  # per rank (with or without the "rank r: " prefix of a multi-rank run)
  local planned=() resident=() rss=() state=() sent=() comm=() share=()
  mapfile -t planned < <(sed -n 's/.*memory: planned arena \([0-9]*\) bytes.*/\1/p' "$log")
  mapfile -t resident < <(sed -n 's/.*arena resident \([0-9]*\) bytes.*/\1/p' "$log")
  mapfile -t rss < <(sed -n 's/.*process peak RSS \([0-9]*\) bytes.*/\1/p' "$log")
  mapfile -t state < <(sed -n 's/.*model state: \([0-9]*\) bytes on device, [0-9]* bytes on host (planner: \([0-9]*\),.*/\1 \2/p' "$log")
  mapfile -t sent < <(sed -n 's/.*sent \([0-9]*\) bytes per step (planner: \([0-9]*\)).*/\1 \2/p' "$log")
  mapfile -t comm < <(sed -n 's/.*comm: \([0-9.]*\) ms per step.*/\1/p' "$log")
  mapfile -t share < <(sed -n 's/.*comm: .* (\([0-9.]*\)% of the step).*/\1/p' "$log")
  local commcol="-" sharecol="-"
  [ ${#comm[@]} -eq 0 ] || commcol=$(range ms "${comm[@]}")
  [ ${#share[@]} -eq 0 ] || sharecol="$(range plain "${share[@]}")%"
  echo "| $name | $ranks | $lname | $step | $tps | $commcol | $sharecol |" \
    "$(range mib "${planned[@]}") | $(range mib "${resident[@]}") | $(range mib "${rss[@]}") |" \
    "$(versus "${state[@]}") | $(versus "${sent[@]}") | $before% / $others |"
  rm -rf "$dir"
}

echo "    $cmdline"
echo
echo "$ncpu CPU cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), OMP_NUM_THREADS=1 per rank," \
  "$(mpirun --version 2>/dev/null | head -1 || echo 'no MPI'); $(date -u +%Y-%m-%d)."
echo "B=4 sequences of T=64 per data-parallel rank (global batch 4 x dp), fp32, AdamW;" \
  "$steps steps (124M: $steps_124m), the first dropped from the step time."
echo
echo "| model | ranks | layout | step (ms) | tokens/s | comm (ms/step) | comm share | arena planned (MiB) | arena resident (MiB) | peak RSS (MiB) | model state (MiB) | sent per step (MiB) | others' CPU |"
echo "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for m in "${models[@]}"; do
  IFS='|' read -r name mflags <<< "$m"
  [ -z "$only" ] || [ "${only,,}" = "${name,,}" ] || continue
  n=$steps
  [ "$name" != 124M ] || n=$steps_124m
  for l in "${layouts[@]}"; do
    IFS='|' read -r ranks lname lflags <<< "$l"
    if [ ${#picked[@]} -gt 0 ] && ! printf '%s\n' "${picked[@]}" | grep -qxF "$lname"; then continue; fi
    row "$name" "$n" "$mflags" "$ranks" "$lname" "$lflags"
  done
done
if [ ${#skipped[@]} -gt 0 ]; then
  echo
  echo "Skipped:"
  for s in "${skipped[@]}"; do echo "- $s"; done
fi
