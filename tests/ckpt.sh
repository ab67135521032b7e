#!/usr/bin/env bash
# Activation checkpointing (or swap) against none: compiles MODEL without and
# with `--checkpoint CKPT` (CKPT swap:S: `--swap S`), trains both for STEPS
# AdamW steps on the same synthetic batch (one rank), and checks:
#   - compile says it checkpointed (swapped) LAYERS layers;
#   - the losses agree to 1e-5 relative and the saved weights to 1e-4 per
#     tensor (tools/parity_check.py): recompute gives the same numbers,
#     dropout masks included, and activations come back from the host as
#     they went;
#   - the planned peak of live bytes is lower (LAYERS 0: the same); swap: the
#     program says how many bytes of activations wait in host memory, and
#     they are the planner's.
#
#   tests/ckpt.sh MTC MODEL OUT CKPT LAYERS [MTC ARGS...]
set -euo pipefail
mtc=$1 model=$2 out=$3 ckpt=$4 layers=$5
shift 5
here=$(cd "$(dirname "$0")" && pwd)
check="/usr/bin/python3 $here/../tools/parity_check.py"
steps=${CKPT_STEPS:-10}
rm -rf "$out"
mkdir -p "$out"
export OMP_NUM_THREADS=1

. "$here/lib.sh"
build() { build_program "$mtc" "$model" "$1" "$1.compile.log" "${@:2}"; }
build "$out/none" "$@"
flag=--checkpoint verb=checkpointing
if [[ $ckpt == swap:* ]]; then
  flag=--swap verb=swapping ckpt=${ckpt#swap:}
fi
build "$out/ckpt" "$@" "$flag" "$ckpt"
ok=0
said=$(grep -E "^mtc: $verb" "$out/ckpt.compile.log" || true)
echo "$said"
[[ $said == "mtc: $verb $layers of "* ]] || { echo "FAIL: want $verb $layers layers"; ok=1; }
for run in none ckpt; do
  "$out/$run/train" --optimizer adamw --seed 7 --steps "$steps" --save "$out/$run.safetensors" \
    > "$out/$run.log"
done
grep -E "^step" "$out/ckpt.log" | tail -1
$check logs "$out/none.log" "$out/ckpt.log" --tol 1e-5 | tail -1 || ok=1
$check grads "$out/none.safetensors" "$out/ckpt.safetensors" --tol 1e-4 > "$out/weights.txt" || ok=1
echo "weights: $(tail -1 "$out/weights.txt")"
grep FAIL "$out/weights.txt" || true
peak() { sed -nE 's/.*memory: planned arena ([0-9]+) .*peak live ([0-9]+)\).*/\1 \2/p' "$1"; }
read -r arena0 peak0 <<< "$(peak "$out/none.log")"
read -r arena1 peak1 <<< "$(peak "$out/ckpt.log")"
echo "planned arena $arena0 -> $arena1 bytes, peak live $peak0 -> $peak1 bytes"
if [ -z "$peak0" ] || [ -z "$peak1" ]; then
  echo "FAIL: no memory line"; ok=1
elif [ "$layers" -gt 0 ] && [ "$peak1" -ge "$peak0" ]; then
  echo "FAIL: checkpointing $layers layers does not lower the peak"; ok=1
elif [ "$layers" -eq 0 ] && [ "$peak1" -ne "$peak0" ]; then
  echo "FAIL: checkpointing nothing changes the peak"; ok=1
fi
if [ "$flag" = --swap ]; then
  swapped=$(sed -nE 's/^activation swap: ([0-9]+) bytes.*/\1/p' "$out/ckpt.log")
  planned=$(sed -nE 's/^activation swap: .*\(planner: ([0-9]+)\)/\1/p' "$out/ckpt.log")
  echo "swapped: ${swapped:-none} bytes in host memory (planner: ${planned:-none})"
  if [ "$layers" -gt 0 ] && [ "${swapped:-0}" -le 0 ]; then
    echo "FAIL: --swap $ckpt puts no activations in host memory"; ok=1
  elif [ "${swapped:-0}" != "${planned:-0}" ]; then
    echo "FAIL: the planner says ${planned:-nothing} of the swapped bytes"; ok=1
  fi
fi
[ $ok -eq 0 ] && echo "PASS: $flag $ckpt equals none" || echo "FAIL: $flag $ckpt"
exit $ok
