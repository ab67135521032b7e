#!/usr/bin/env bash
# The emitted program's safetensors flags with offload (GPT-2 small dims, one
# rank, every block's optimizer state on the host against none of it):
#   --dump-grads   the gradients are the same bits (they are read on the device)
#   --save         after 3 AdamW steps the weights are the same bits (the host
#                  updated its range and copied it back)
#   --load         loading saved weights fills the host's copy of the parameters:
#                  one step at lr 0 saves the same bytes it loaded
#
#   offload_io.sh MTC MODEL OUTDIR [MTC ARGS...]
set -euo pipefail
mtc=$1 model=$2 out=$3
shift 3
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
rm -rf "$out"
mkdir -p "$out"
export OMP_NUM_THREADS=1 MTC_HOST_THREADS=2
for v in plain:0 offload:1; do
  "$mtc" compile "$model" -o "$out/${v%%:*}" --precision fp32 "$@" --offload "${v##*:}" > /dev/null
  make_program "$out/${v%%:*}" "-O1 -fopenmp -std=c11 -Wall -Wextra -Werror"
done
fail=0
for v in plain offload; do
  "$out/$v/train" --steps 3 --lr 1e-2 --dump-grads "$out/$v.grads.st" --save "$out/$v.w.st" \
    > "$out/$v.log"
done
grep -q "bytes on host (planner" "$out/offload.log" && ! grep -q " 0 bytes on host" "$out/offload.log" ||
  { echo "FAIL: the offload program reports no host state"; fail=1; }
cmp -s "$out/plain.grads.st" "$out/offload.grads.st" || { echo "FAIL: --dump-grads differs"; fail=1; }
cmp -s "$out/plain.w.st" "$out/offload.w.st" || { echo "FAIL: --save after 3 steps differs"; fail=1; }
"$out/offload/train" --steps 1 --lr 0 --load "$out/plain.w.st" --save "$out/reload.w.st" > /dev/null
cmp -s "$out/plain.w.st" "$out/reload.w.st" ||
  { echo "FAIL: --load, one step at lr 0, --save changed the weights"; fail=1; }
[ $fail -eq 0 ] && echo "PASS: --dump-grads, --save and --load with offload" || exit 1
