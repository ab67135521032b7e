#!/usr/bin/env bash
# Bad input for multi-rank programs: one clear message, a non-zero exit, nothing written.
#   tests/mpi_errors.sh MTC MODEL OUT
set -uo pipefail
mtc=$1 model=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$out"
mkdir -p "$out"
fails=0 passes=0
expect() { # NAME STATUS REGEX COMMAND...
  local name=$1 want=$2 re=$3
  shift 3
  local got
  got=$("$@" 2>&1)
  local rc=$?
  if [ "$rc" -eq "$want" ] && grep -qE -e "$re" <<< "$got"; then
    passes=$((passes + 1))
  else
    fails=$((fails + 1))
    echo "FAIL $name: exit $rc (want $want), output: $got"
  fi
}
expect tp_not_lowered 1 "tensor parallelism \(tp 2\) is planned but not lowered" \
  "$mtc" compile "$model" --tp 2 -o "$out/tp2"
[ -e "$out/tp2" ] && { echo "FAIL tp_not_lowered: $out/tp2 was written"; fails=$((fails + 1)); }
expect zero_stage 2 "--zero takes a stage 0, 1, 2 or 3" "$mtc" compile "$model" --zero 4 -o "$out/z"
expect dp_zero 2 "--dp takes a positive whole number" "$mtc" compile "$model" --dp 0 -o "$out/z"
expect plan_forced 2 "plan chooses it" "$mtc" plan "$model" --dp 2
for bad in 1.5 -0.1 abc nan ""; do
  expect "offload_$bad" 2 "--offload takes a share of the optimizer state from 0 to 1, not '$bad'" \
    "$mtc" compile "$model" --dp 2 --offload "$bad" -o "$out/off"
done
expect offload_missing 2 "--offload needs a value" "$mtc" compile "$model" -o "$out/off" --offload
[ -e "$out/off" ] && { echo "FAIL offload: $out/off was written"; fails=$((fails + 1)); }
# a program for 2 ranks started on 1 (no mpirun), and on 3
"$mtc" compile "$model" -D L=1 --dp 2 -o "$out/dp2" > /dev/null && make -s -C "$out/dp2" cpu > /dev/null 2>&1 ||
  { echo "FAIL: cannot build the dp 2 program"; exit 1; }
expect one_process 1 "compiled for 2 ranks.*mpirun -np 2" "$out/dp2/train" --steps 1
if command -v mpirun > /dev/null; then
  expect wrong_n 1 "compiled for 2 ranks.*mpirun -np 2" "$here/mpirun.sh" 3 "$out/dp2/train" --steps 1
fi
# the Makefile of a multi-rank program says what to install when mpicc is missing
expect no_mpicc 2 "needs MPI: apt-get install" make -s -C "$out/dp2" -B cpu CC=/nonexistent/mpicc
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
