#!/usr/bin/env bash
# A model exported with a fixed batch (no dim B) trains as the same model with a dynamic batch:
# a step of K samples of the fixed batch is the dynamic model's batch of K times its rows. The
# dynamic model (-D B=2*ROWS) on one rank against the fixed one (FIXED: the same with B=ROWS,
# tests/onnx_edit.c's fix) as 2 micro-batches on one rank, and on 2 data-parallel ranks: the same tokens (each sample its own
# rows of the step's), the same dropout masks (drawn at each element's place in the step), so
# the losses agree to 1e-5 relative and the saved weights to 1e-4.
#
#   tests/fixed_batch.sh MTC MODEL FIXED OUT ROWS [MTC ARGS...]
set -euo pipefail
mtc=$1 model=$2 fixed=$3 out=$4 rows=$5
shift 5
here=$(cd "$(dirname "$0")" && pwd)
check="/usr/bin/python3 $here/../tools/parity_check.py"
. "$here/lib.sh"
rm -rf "$out"
mkdir -p "$out"
export OMP_NUM_THREADS=1
build_program "$mtc" "$model" "$out/dyn" "$out/compile.log" -D "B=$((2 * rows))" "$@"
build_program "$mtc" "$fixed" "$out/micro" "$out/compile.log" --micro-batches 2 "$@"
build_program "$mtc" "$fixed" "$out/dp" "$out/compile.log" --dp 2 "$@"
adamw=(--optimizer adamw --eps 1e-4 --weight-decay 0.5 --steps 5)
"$out/dyn/train" "${adamw[@]}" --save "$out/dyn.safetensors" > "$out/dyn.log"
"$out/micro/train" "${adamw[@]}" --save "$out/micro.safetensors" > "$out/micro.log"
"$here/mpirun.sh" 2 "$out/dp/train" "${adamw[@]}" --save "$out/dp.safetensors" > "$out/dp.log"
ok=0
for run in micro dp; do
  echo "$run:"
  $check logs "$out/dyn.log" "$out/$run.log" --tol 1e-5 | tail -1 || ok=1
  $check grads "$out/dyn.safetensors" "$out/$run.safetensors" --tol 1e-4 > "$out/$run.txt" || ok=1
  tail -1 "$out/$run.txt"
done
[ $ok -eq 0 ] && echo "PASS: a fixed batch's samples are the dynamic batch's rows" ||
  fail "the fixed batch's samples differ from the dynamic batch's rows"
