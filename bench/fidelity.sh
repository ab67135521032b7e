#!/usr/bin/env bash
# The planner's step time beside the measured one, on this machine: every
# model and layout of bench/dist.sh (bench/layouts.sh), priced with a device
# profile of this machine that `mtc calibrate` measures first.
#
#   bench/fidelity.sh [--steps N] [--steps-124m N] [--only small|124m]
#                     [--layout NAME]... [--wait S] [MTC]
#
# MTC defaults to build/mtc. For each number of ranks R the layouts use (1,
# 2, 4) it runs `mtc calibrate --ranks R` (a profile of a rank when R share
# the machine, as they will while training; OMP_NUM_THREADS=1 per rank, as in
# bench/dist.sh), or with more ranks than cores the profile of as many ranks
# as cores (time-shared cores are not measured: the planner scales), then for every layout compiles the model with
# `--device PROFILE` (the planner prices the layout it lowers on this
# machine), builds it (make cpu), runs it (several ranks with
# tests/mpirun.sh) for --steps steps (default 30; --steps-124m, default 3, for
# the 124M model) and reads the program's own line
#
#   timing: median step M ms of N on this machine | planner, on CPU: P ms (compute ...)
#
# so measured and predicted come from the same program, as a user sees them.
# Prints one row per layout (the predicted/measured ratio, and the
# planner's split of its prediction), then for each model and number of
# ranks whether the planner ranks the layouts as the clock does (the
# question a planner answers is which layout to run on the ranks at hand),
# and of the pairs of layouts whose measured steps are more than 10% apart
# (the clock's order beyond its run-to-run spread) how many it orders alike.
# Waits (at most --wait seconds, default 120) for idle CPUs before each
# calibration and run; "others' CPU" is the busy share it last saw.
set -euo pipefail
cd "$(dirname "$0")/.."
cmdline="bench/fidelity.sh${*:+ $*}"

steps=30
steps_124m=3
vocab_124m=50257
only=""
picked=()
wait_s=120
mtc=build/mtc
while [ $# -gt 0 ]; do
  case $1 in
  --steps) steps=$2; shift 2 ;;
  --steps-124m) steps_124m=$2; shift 2 ;;
  --only) only=$2; shift 2 ;;
  --layout) picked+=("$2"); shift 2 ;;
  --wait) wait_s=$2; shift 2 ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "bench/fidelity.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  *) mtc=$1; shift ;;
  esac
done
case $only in "" | small | 124m) ;; *) echo "bench/fidelity.sh: --only small or 124m" >&2; exit 2 ;; esac
[ -x "$mtc" ] || { echo "no $mtc: build first (cmake -S . -B build && cmake --build build)"; exit 1; }
export MTC_RUNTIME_DIR=${MTC_RUNTIME_DIR:-$PWD/runtime}
ncpu=$(getconf _NPROCESSORS_ONLN)
export OMP_NUM_THREADS=1
export OMPI_MCA_mpi_yield_when_idle=1   # as tests/mpirun.sh runs the programs
export MTC_MPIRUN_TIMEOUT=${MTC_MPIRUN_TIMEOUT:-3600}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

source bench/layouts.sh   # models and layouts
source bench/idle.sh      # wait_for_idle

# mtc calibrate's launcher: tests/mpirun.sh's options for Open MPI
launcher="mpirun"
if mpirun --version 2>&1 | grep -q "Open MPI"; then
  launcher="mpirun --oversubscribe --bind-to none"
  [ "$(id -u)" -ne 0 ] || launcher+=" --allow-run-as-root"
fi

wanted() {   # layout name
  [ ${#picked[@]} -eq 0 ] || printf '%s\n' "${picked[@]}" | grep -qxF "$1"
}

echo "    $cmdline"
echo
echo "$ncpu CPU cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), OMP_NUM_THREADS=1 per rank," \
  "$(mpirun --version 2>/dev/null | head -1 || echo 'no MPI'); $(date -u +%Y-%m-%d)."
echo "B=4 sequences of T=64 per data-parallel rank, fp32, AdamW; $steps steps (124M: $steps_124m);" \
  "the program's median step beside the planner's price of its layout."
echo

# one profile per number of ranks, measured at most a rank per core
declare -A profile
for l in "${layouts[@]}"; do
  IFS='|' read -r ranks lname _ <<< "$l"
  wanted "$lname" || continue
  [ -z "${profile[$ranks]:-}" ] || continue
  if [ "$ranks" -gt 1 ] && ! command -v mpirun > /dev/null; then continue; fi
  r=$((ranks < ncpu ? ranks : ncpu))
  if [ ! -e "$tmp/profile$r.json" ]; then
    wait_for_idle > /dev/null
    "$mtc" calibrate --ranks "$r" --mpirun "$launcher" -o "$tmp/profile$r.json" 2> "$tmp/cal" ||
      { cat "$tmp/cal" >&2; exit 1; }
    echo "- $(sed -n 's/^mtc calibrate: //p' "$tmp/cal" | head -1)"
  fi
  profile[$ranks]=$tmp/profile$r.json
done
echo

echo "| model | ranks | layout | measured (ms) | planner (ms) | planner / measured | planner's split (ms) | others' CPU |"
echo "|---|---:|---|---:|---:|---:|---|---:|"
declare -A measured predicted
skipped=()
for m in "${models[@]}"; do
  IFS='|' read -r name mflags <<< "$m"
  [ -z "$only" ] || [ "${only,,}" = "${name,,}" ] || continue
  n=$steps
  [ "$name" != 124M ] || n=$steps_124m
  for l in "${layouts[@]}"; do
    IFS='|' read -r ranks lname lflags <<< "$l"
    wanted "$lname" || continue
    if [ -z "${profile[$ranks]:-}" ]; then skipped+=("$name, $lname: no mpirun"); continue; fi
    dir=$tmp/prog
    rm -rf "$dir"
    if ! lflags=$(layout_flags "$mtc" "$mflags" "$lflags" "$tmp"); then
      skipped+=("$name, $lname: mtc plan failed for its groups")
      continue
    fi
    # shellcheck disable=SC2086
    if ! "$mtc" compile examples/gpt2.mtc --precision fp32 $mflags $lflags \
        --device "${profile[$ranks]}" -o "$dir" > "$tmp/compile" 2>&1; then
      skipped+=("$name, $lname: $(grep -m1 error: "$tmp/compile" | sed 's/^[^ ]*: error: //')")
      continue
    fi
    make -s -C "$dir" cpu > "$tmp/make" 2>&1 || { skipped+=("$name, $lname: make cpu failed"); continue; }
    before=$(wait_for_idle)
    rc=0
    if [ "$ranks" -eq 1 ]; then
      "$dir/train" --steps "$n" > "$tmp/log" 2>&1 || rc=$?
    else
      tests/mpirun.sh "$ranks" "$dir/train" --steps "$n" > "$tmp/log" 2>&1 || rc=$?
    fi
    line=$(grep -m1 '^timing: median step' "$tmp/log" || true)
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
      skipped+=("$name, $lname: the run exited with $rc: $(grep -m1 . "$tmp/log" || true)")
      continue
    fi
    meas=$(sed -n 's/^timing: median step \([0-9.e+]*\) ms.*/\1/p' <<< "$line")
    pred=$(sed -n 's/.*| planner, on [^:]*: \([0-9.e+]*\) ms.*/\1/p' <<< "$line")
    split=$(sed -n 's/.* ms (\(.*\))$/\1/p' <<< "$line" |   # the parts that are not 0
            awk -F', ' '{ s = ""; for (i = 1; i <= NF; i++) { n = split($i, w, " "); if (w[n] + 0 != 0) s = s (s ? ", " : "") $i } print s }')
    measured["$name|$ranks|$lname"]=$meas
    predicted["$name|$ranks|$lname"]=$pred
    ratio=$(awk -v p="$pred" -v m="$meas" 'BEGIN { printf "%.2f", p / m }')
    printf '| %s | %s | %s | %.1f | %.1f | %s | %s | %s%% |\n' "$name" "$ranks" "$lname" "$meas" "$pred" \
      "$ratio" "$split" "$before"
  done
done

echo
echo "Rankings (fastest first) per model and number of ranks:"
echo
for m in "${models[@]}"; do
  IFS='|' read -r name _ <<< "$m"
  for r in 1 2 4; do
    keys=()
    for k in "${!measured[@]}"; do
      IFS='|' read -r kn kr _ <<< "$k"
      [ "$kn" = "$name" ] && [ "$kr" = "$r" ] && keys+=("$k")
    done
    [ ${#keys[@]} -ge 2 ] || continue
    by_clock=$(for k in "${keys[@]}"; do echo "${measured[$k]} ${k##*|}"; done | sort -g | cut -d' ' -f2- | paste -sd '<' | sed 's/</ < /g')
    by_plan=$(for k in "${keys[@]}"; do echo "${predicted[$k]} ${k##*|}"; done | sort -g | cut -d' ' -f2- | paste -sd '<' | sed 's/</ < /g')
    if [ "$by_clock" = "$by_plan" ]; then
      echo "- $name, $r ranks: the same: $by_clock"
    else
      echo "- $name, $r ranks: measured $by_clock; planner $by_plan"
    fi
    # the pairs the clock tells apart (steps more than 10% apart): how many the planner orders
    # as the clock does, and which not
    for k in "${keys[@]}"; do echo "${measured[$k]}|${predicted[$k]}|${k##*|}"; done |
      awk -F'|' -v tag="$name, $r ranks" '{ m[NR] = $1; p[NR] = $2; n[NR] = $3 }
        END { for (i = 1; i <= NR; i++) for (j = i + 1; j <= NR; j++) {
                lo = m[i] < m[j] ? m[i] : m[j]; hi = m[i] < m[j] ? m[j] : m[i]
                if (hi <= 1.1 * lo) continue
                apart++
                if ((m[i] < m[j]) == (p[i] < p[j])) alike++
                else miss = miss sprintf("%s%s vs %s", miss == "" ? "" : "; ", n[i], n[j]) }
              printf "  (pairs more than 10%% apart: %d of %d ordered as the clock orders them%s)\n",
                     alike, apart, miss == "" ? "" : "; not: " miss }'
  done
done
if [ ${#skipped[@]} -gt 0 ]; then
  echo
  echo "Skipped:"
  for s in "${skipped[@]}"; do echo "- $s"; done
fi
