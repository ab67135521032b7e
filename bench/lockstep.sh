#!/usr/bin/env bash
# Uneven hardware, measured on this machine: two ranks, the second slowed by a busy loop on its
# core, run uneven and even batch shares under ZeRO-1 (each rank's micro-steps its own, one
# reduction a step) and ZeRO-2 (a reduce-scatter every micro-step: the replicas in lockstep, a
# replica that runs fewer micro-batches joining the others' with ghosts), each beside the
# planner's price of it for a cluster of this machine's profile and its slowed copy.
#
#   bench/lockstep.sh [--steps N] [--wait S] [MTC]
#
# MTC defaults to build/mtc. It runs `mtc calibrate --ranks 2` (OMP_NUM_THREADS=1 per rank, as
# bench/fidelity.sh does), then measures how much slower GPT-2 124M's one-rank step runs on core
# 1 beside a busy loop there (the slow rank's factor, f), and writes a cluster file of two
# groups of one rank: the profile as measured, and the profile with every rate divided by f
# (the "GPU" of the slow rank). For each layout (a plan file edited to the groups'
# micro-batches, bench/layouts.sh's groups=), and for the solver's own plan for that cluster
# (mtc compile --cluster: its layout as the program says it), it compiles GPT-2 124M with that
# cluster, runs it on 2 ranks bound to cores 0 and 1 with the busy loop on core 1 for --steps
# steps (default 4), and prints the program's median step beside the planner's. Needs taskset
# and Open MPI.
set -euo pipefail
cd "$(dirname "$0")/.."
cmdline="bench/lockstep.sh${*:+ $*}"

steps=4
wait_s=120
mtc=build/mtc
while [ $# -gt 0 ]; do
  case $1 in
  --steps) steps=$2; shift 2 ;;
  --wait) wait_s=$2; shift 2 ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "bench/lockstep.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  *) mtc=$1; shift ;;
  esac
done
[ -x "$mtc" ] || { echo "no $mtc: build first (cmake -S . -B build && cmake --build build)"; exit 1; }
command -v taskset > /dev/null || { echo "bench/lockstep.sh: needs taskset (util-linux)"; exit 1; }
mpirun --version 2>&1 | grep -q "Open MPI" || { echo "bench/lockstep.sh: needs Open MPI"; exit 1; }
ncpu=$(getconf _NPROCESSORS_ONLN)
[ "$ncpu" -ge 2 ] || { echo "bench/lockstep.sh: needs 2 cores"; exit 1; }
export MTC_RUNTIME_DIR=${MTC_RUNTIME_DIR:-$PWD/runtime}
export OMP_NUM_THREADS=1 MTC_HOST_THREADS=1
export OMPI_MCA_mpi_yield_when_idle=1
tmp=$(mktemp -d)
hog=""
trap '[ -z "$hog" ] || kill "$hog" 2> /dev/null; rm -rf "$tmp"' EXIT

vocab_124m=50257
source bench/layouts.sh   # layout_flags
source bench/idle.sh      # wait_for_idle
mflags="-D L=12 -D C=768 -D NH=12 -D V=$vocab_124m -D T=64 -D B=2"
root=""
[ "$(id -u)" -ne 0 ] || root="--allow-run-as-root"

start_hog() { taskset -c 1 sh -c 'while :; do :; done' & hog=$!; }
stop_hog() { kill "$hog" 2> /dev/null; wait "$hog" 2> /dev/null || true; hog=""; }
median_step() { sed -n 's/^timing: median step \([0-9.e+]*\) ms.*/\1/p' "$1" | head -1; }

echo "    $cmdline"
echo
echo "$ncpu CPU cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), OMP_NUM_THREADS=1 per rank," \
  "$(mpirun --version 2>/dev/null | head -1); $(date -u +%Y-%m-%d)."

wait_for_idle > /dev/null
"$mtc" calibrate --ranks 2 --mpirun "mpirun --oversubscribe --bind-to none $root" \
  -o "$tmp/profile.json" 2> "$tmp/cal" || { cat "$tmp/cal" >&2; exit 1; }
echo "- $(sed -n 's/^mtc calibrate: //p' "$tmp/cal" | head -1)"

# the slow rank's factor: one rank's step on core 1, alone and beside the busy loop
# shellcheck disable=SC2086
"$mtc" compile examples/gpt2.mtc --precision fp32 $mflags -o "$tmp/one" > /dev/null 2>&1
make -s -C "$tmp/one" cpu > /dev/null 2>&1
wait_for_idle > /dev/null
taskset -c 1 "$tmp/one/train" --steps "$steps" > "$tmp/alone" 2>&1
start_hog
taskset -c 1 "$tmp/one/train" --steps "$steps" > "$tmp/shared" 2>&1
stop_hog
alone=$(median_step "$tmp/alone") shared=$(median_step "$tmp/shared")
factor=$(awk -v a="$alone" -v s="$shared" 'BEGIN { printf "%.3f", s / a }')
echo "- one rank's step on core 1: $alone ms alone, $shared ms beside the busy loop:" \
  "the slow rank's factor $factor"
echo "- GPT-2 124M, T=64, micro-batches of B=2, fp32, AdamW; $steps steps, the first dropped."

/usr/bin/python3 - "$tmp/profile.json" "$factor" "$tmp/cluster.json" << 'EOF'
import json, sys
prof, f = json.load(open(sys.argv[1])), float(sys.argv[2])
fast = dict(prof["groups"][0], name="fast", count=1, gpus_per_node=1)
slow = dict(fast, name="slow")
for k in ("flops_fp32", "flops_bf16", "hbm_bw", "host_bw", "cpu_adam"):
    if k in slow:
        slow[k] = fast[k] / f
slow["gemm"] = [row[:3] + [r / f for r in row[3:]] for row in fast.get("gemm", [])]
slow["attention"] = [row[:2] + [r / f for r in row[2:]] for row in fast.get("attention", [])]
slow["ops"] = {op: [[p[0]] + [s * f for s in p[1:]] for p in pts]
               for op, pts in fast.get("ops", {}).items()}
json.dump({"groups": [fast, slow]}, open(sys.argv[3], "w"), indent=1)
EOF

echo
echo "| layout | measured (ms) | planner (ms) | planner / measured | planner's split (ms) |"
echo "|---|---:|---:|---:|---|"
for l in "ZeRO-1 DP2, 2 and 2 micro-batches|groups=2,2/0.5,0.5" \
         "ZeRO-1 DP2, 3 and 1 micro-batches|groups=3,1/0.5,0.5" \
         "ZeRO-2 DP2, 2 and 2 micro-batches|groups=2,2/0.5,0.5/2" \
         "ZeRO-2 DP2, 3 and 1 micro-batches (2 ghosts)|groups=3,1/0.5,0.5/2" \
         "the solver's plan|--batch 8"; do
  IFS='|' read -r lname lflags <<< "$l"
  lflags=$(layout_flags "$mtc" "$mflags" "$lflags" "$tmp")
  rm -rf "$tmp/prog"
  # shellcheck disable=SC2086
  "$mtc" compile examples/gpt2.mtc --precision fp32 $mflags $lflags --cluster "$tmp/cluster.json" \
    -o "$tmp/prog" > "$tmp/compile" 2>&1 || { cat "$tmp/compile" >&2; exit 1; }
  make -s -C "$tmp/prog" cpu > /dev/null 2>&1
  wait_for_idle > /dev/null
  start_hog
  rc=0
  # shellcheck disable=SC2086
  mpirun -np 2 --bind-to core --map-by core $root "$tmp/prog/train" --steps "$steps" \
    > "$tmp/log" 2>&1 || rc=$?
  stop_hog
  line=$(grep -m1 '^timing: median step' "$tmp/log" || true)
  if [ $rc -ne 0 ] || [ -z "$line" ]; then
    echo "$lname: the run exited with $rc" >&2
    cat "$tmp/log" >&2
    exit 1
  fi
  meas=$(median_step "$tmp/log")
  [ "$lflags" != "--batch 8" ] ||   # (the solver's: its layout as the program prints it)
    lname="the solver's plan: $(sed -n 's/^plan: \(.*\) | global batch.*/\1/p' "$tmp/log" |
                                head -1 | sed 's/ | /; /g')"
  pred=$(sed -n 's/.*| planner, on [^:]*: \([0-9.e+]*\) ms.*/\1/p' <<< "$line")
  split=$(sed -n 's/.* ms (\(.*\))$/\1/p' <<< "$line" |
          awk -F', ' '{ s = ""; for (i = 1; i <= NF; i++) { n = split($i, w, " "); if (w[n] + 0 != 0) s = s (s ? ", " : "") $i } print s }')
  printf '| %s | %.1f | %.1f | %.2f | %s |\n' "$lname" "$meas" "$pred" \
    "$(awk -v p="$pred" -v m="$meas" 'BEGIN { printf "%.2f", p / m }')" "$split"
done
