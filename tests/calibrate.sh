#!/usr/bin/env bash
# mtc calibrate measures this machine and writes a device profile that the
# planner reads: on 1 rank, and on 2 ranks under MPI when mpirun is here.
# The profile plans (--device with --gpus, and --cluster) on a CPU of its
# name; a program compiled with it prints the planner's price on that CPU
# beside its measured step; the measuring program builds apart and measures
# later (--build-only, --program), its GPU build too where nvcc is; bad flags,
# a missing runtime and a device that is both named and described are refused
# with a clear message and no file.
#
#   tests/calibrate.sh MTC EXAMPLES_DIR OUT
set -euo pipefail
mtc=$1 examples=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib.sh
source "$here/lib.sh"
rm -rf "$out"
mkdir -p "$out"
export OMP_NUM_THREADS=1

"$mtc" calibrate --quick -o "$out/one.json" 2> "$out/one.err" || fail "calibrate: $(cat "$out/one.err")"
grep -q "1 rank of 1 thread on [0-9]* cores: GEMMs up to [0-9.]* GFLOP/s" "$out/one.err" ||
  fail "calibrate's summary: $(cat "$out/one.err")"
name=$(sed -n 's/^ *"name": "\(.*\)",$/\1/p' "$out/one.json")
[ -n "$name" ] || fail "no name in the profile: $(head -5 "$out/one.json")"
"$mtc" plan "$examples/gpt2.mtc" --precision fp32 --device "$out/one.json" --gpus 2 > "$out/plan.txt"
grep -q "^cluster: 2 x $name (" "$out/plan.txt" || fail "plan on the profile: $(head -3 "$out/plan.txt")"
"$mtc" plan "$examples/gpt2.mtc" --cluster "$out/one.json" > "$out/cluster.txt"
grep -q "^cluster: 1 x $name (" "$out/cluster.txt" || fail "--cluster: $(head -3 "$out/cluster.txt")"

# a program priced on this machine says so beside its measured step
MTC_RUNTIME_DIR=${MTC_RUNTIME_DIR:-$here/../runtime} "$mtc" compile "$examples/gpt2.mtc" \
  --precision fp32 -D L=1 -D C=64 -D NH=2 -D T=16 -D V=64 -D B=2 --device "$out/one.json" \
  -o "$out/prog" > "$out/compile.txt" 2>&1 || fail "compile: $(cat "$out/compile.txt")"
grep -q "the planner prices a step of this layout at [0-9.]* ms on $name" "$out/compile.txt" ||
  fail "compile's price: $(cat "$out/compile.txt")"
make -s -C "$out/prog" cpu > "$out/make.txt" 2>&1 || fail "make cpu: $(cat "$out/make.txt")"
"$out/prog/train" --steps 3 > "$out/train.txt" 2>&1
grep -q "^timing: median step [0-9.]* ms of 3 on this machine | planner, on $name: [0-9.e+-]* ms" \
  "$out/train.txt" || fail "the program's timing line: $(grep timing "$out/train.txt")"

# --profile: the steps after the first by op, each op's nodes as many as the program has (mtc
# inspect's count of the lowered graph's), the rows adding up to the step, the planner's price
# of the same nodes beside them
"$out/prog/train" --steps 3 --profile > "$out/profile.txt" 2>&1 || fail "--profile: $(cat "$out/profile.txt")"
"$out/prog/train" --steps 1 --profile 2>&1 | grep -q "^profile: no step to show: the first is not profiled" ||
  fail "--profile of one step: $("$out/prog/train" --steps 1 --profile 2>&1 | tail -2)"
"$mtc" inspect "$examples/gpt2.mtc" --precision fp32 -D L=1 -D C=64 -D NH=2 -D T=16 -D V=64 -D B=2 \
  > "$out/inspect.txt" 2>&1 || fail "inspect: $(cat "$out/inspect.txt")"
matmuls=$(grep -c "= matmul(" "$out/inspect.txt")
grep -q "^profile: the step by op, mean of 2 steps: [0-9.e+-]* ms" "$out/profile.txt" ||
  fail "the profile's header: $(grep profile "$out/profile.txt")"
grep -Eq "^profile:   matmul +$matmuls +[0-9.e+-]+ +[0-9.]+% +[0-9.e+-]+ +[0-9.]+$" "$out/profile.txt" ||
  fail "the profile's matmul row ($matmuls nodes, priced): $(grep profile "$out/profile.txt")"
grep -Eq "^profile:   \(outside the model\) +0 +[0-9.e+-]+ +[0-9.]+% +[0-9.e+-]+ +[0-9.]+$" \
  "$out/profile.txt" ||
  fail "the profile's row of the time outside the model: $(grep profile "$out/profile.txt")"
awk '/^profile: the step by op/ { match($0, /steps: [0-9.e+-]+ ms/); total = substr($0, RSTART + 7) + 0 }
     /^profile:   / && $2 != "op" { sum += $(NF - 3) }
     END { exit !(total > 0 && sum > 0.98 * total && sum < 1.02 * total) }' "$out/profile.txt" ||
  fail "the profile's rows do not add up to its step: $(grep profile "$out/profile.txt")"

# two ranks measuring at once, when MPI is here
if command -v mpirun > /dev/null && command -v mpicc > /dev/null; then
  launcher="mpirun"
  if mpirun --version 2>&1 | grep -q "Open MPI"; then
    launcher="mpirun --oversubscribe --bind-to none"
    [ "$(id -u)" -ne 0 ] || launcher+=" --allow-run-as-root"
  fi
  "$mtc" calibrate --quick --ranks 2 --mpirun "$launcher" -o "$out/two.json" 2> "$out/two.err" ||
    fail "calibrate --ranks 2: $(cat "$out/two.err")"
  grep -q "2 ranks of 1 thread on .* all-reduce [0-9.]* GB/s after [0-9.]* us" "$out/two.err" ||
    fail "calibrate --ranks 2's summary: $(cat "$out/two.err")"
  # the collectives' bus bandwidth by size, 16 KiB to 64 MiB, each of the three
  for k in all_reduce all_gather reduce_scatter; do
    grep -Eq "^ *\"$k\": \[\[16384, [0-9.e+]+\](, \[[0-9]+, [0-9.e+]+\]){3}, \[67108864, [0-9.e+]+\]\],?$" \
      "$out/two.json" || fail "the profile's $k by size: $(grep -A4 collectives "$out/two.json")"
  done
  grep -q "at 1 MiB [0-9.]*, [0-9.]*, [0-9.]*)" "$out/two.err" ||
    fail "calibrate --ranks 2's summary at 1 MiB: $(cat "$out/two.err")"
  "$mtc" plan "$examples/gpt2.mtc" --cluster "$out/two.json" > "$out/two.txt"
  grep -q "^cluster: 2 x $name (.*, 2 per node" "$out/two.txt" || fail "2 ranks: $(head -3 "$out/two.txt")"
fi

# the measuring program built apart (--build-only), then measuring (--program): the same profile
"$mtc" calibrate --build-only "$out/measure" 2> "$out/build.err" ||
  fail "--build-only: $(cat "$out/build.err")"
grep -q "built $out/measure (measure with mtc calibrate --program $out/measure)" "$out/build.err" ||
  fail "--build-only's message: $(cat "$out/build.err")"
"$mtc" calibrate --program "$out/measure" --quick -o "$out/program.json" 2> "$out/program.err" ||
  fail "--program: $(cat "$out/program.err")"
grep -q "1 rank of 1 thread on [0-9]* cores: GEMMs up to" "$out/program.err" ||
  fail "--program's summary: $(cat "$out/program.err")"
# the GPU build's measuring program, where nvcc is (it runs on a GPU: tools/gpu_check.sh)
nvcc=${CUDA:-/usr/local/cuda}/bin/nvcc
if [ -x "$nvcc" ]; then
  "$mtc" calibrate --gpu --cuda-arch "-gencode arch=compute_90,code=sm_90" \
    --build-only "$out/measure_gpu" 2> "$out/gpu.err" ||
    fail "--gpu --build-only: $(cat "$out/gpu.err")"
  libs=$(ldd "$out/measure_gpu")   # (grep -q in a pipe: ldd's SIGPIPE fails it under pipefail)
  grep -q libcublas <<< "$libs" || fail "the GPU build links no cuBLAS: $libs"
fi

# refusals: one message, an exit status, no profile
expect() { expect_exit "$@"; }   # STATUS TEXT COMMAND...
expect 2 "--ranks takes a number of ranks from 1 to 1024" "$mtc" calibrate --ranks 0
expect 2 "unexpected argument 'now'" "$mtc" calibrate now
expect 2 "-o needs a value" "$mtc" calibrate -o
expect 1 "set MTC_RUNTIME_DIR to mtc's runtime/" env MTC_RUNTIME_DIR="$out/nowhere" "$mtc" calibrate -o "$out/none.json"
[ ! -e "$out/none.json" ] || fail "a failed calibration left $out/none.json"
expect 2 "give one of them" "$mtc" calibrate --build-only "$out/a" --program "$out/measure"
expect 2 "--build-only writes no profile" "$mtc" calibrate --build-only "$out/a" -o "$out/none.json"
expect 2 "--gpu and --cuda-arch go with --build-only" \
  "$mtc" calibrate --program "$out/measure" --gpu
expect 1 "--program $out/nowhere: No such file" "$mtc" calibrate --program "$out/nowhere"
expect 1 "--gpu: no nvcc at $out/nowhere/bin/nvcc" env CUDA="$out/nowhere" "$mtc" calibrate --gpu \
  --build-only "$out/a"
[ ! -e "$out/none.json" ] && [ ! -e "$out/a" ] || fail "a refused calibration wrote a file"
expect 2 "--device $out/one.json describes the device: leave out --gpu H100" \
  "$mtc" plan "$examples/gpt2.mtc" --device "$out/one.json" --gpu H100
expect 1 "cannot read $out/nowhere.json" "$mtc" plan "$examples/gpt2.mtc" --device "$out/nowhere.json"
# interrupted (the measuring program still building): the signal passed on, its folder removed,
# no profile, mtc ended by SIGINT
mkdir -p "$out/tmp"
TMPDIR="$out/tmp" "$mtc" calibrate --quick -o "$out/int.json" 2> "$out/int.err" &
pid=$!
sleep 1
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" = 130 ] || fail "calibrate interrupted exited $rc, not 130: $(cat "$out/int.err")"
[ -z "$(ls -A "$out/tmp")" ] || fail "an interrupted calibration left $(ls "$out/tmp")"
[ ! -e "$out/int.json" ] || fail "an interrupted calibration wrote $out/int.json"
grep -q "interrupted; nothing written" "$out/int.err" || fail "interrupted: $(cat "$out/int.err")"
echo "ok: calibrate"
