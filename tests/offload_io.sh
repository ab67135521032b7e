#!/usr/bin/env bash
# The emitted program's safetensors flags with offload (GPT-2 small dims, one
# rank, every block's optimizer state on the host, with --offload-grads its
# gradients too, and with --offload-params its parameters too, against none of it):
#   --dump-grads   the gradients are the same bits (read on the device, or on
#                  the host where they were offloaded)
#   --save         after 3 AdamW steps the weights are the same bits (the host
#                  updated its range and copied it back)
#   --load         loading saved weights fills the host's copy of the parameters
#                  (with --offload-params, the only one): one step at lr 0 saves
#                  the same bytes it loaded
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
for v in "plain:--offload 0" "offload:--offload 1" "grads:--offload-grads" "params:--offload-params"; do
  # shellcheck disable=SC2086
  "$mtc" compile "$model" -o "$out/${v%%:*}" --precision fp32 "$@" ${v#*:} > /dev/null
  make_program "$out/${v%%:*}" "$MTC_TEST_CFLAGS"
done
fail=0
for v in plain offload grads params; do
  "$out/$v/train" --steps 3 --lr 1e-2 --dump-grads "$out/$v.grads.st" --save "$out/$v.w.st" \
    > "$out/$v.log"
done
for v in offload grads params; do
  grep -q "bytes on host (planner" "$out/$v.log" && ! grep -q " 0 bytes on host" "$out/$v.log" ||
    { echo "FAIL: the $v program reports no host state"; fail=1; }
  cmp -s "$out/plain.grads.st" "$out/$v.grads.st" || { echo "FAIL: $v: --dump-grads differs"; fail=1; }
  cmp -s "$out/plain.w.st" "$out/$v.w.st" || { echo "FAIL: $v: --save after 3 steps differs"; fail=1; }
  "$out/$v/train" --steps 1 --lr 0 --load "$out/plain.w.st" --save "$out/reload.w.st" > /dev/null
  cmp -s "$out/plain.w.st" "$out/reload.w.st" ||
    { echo "FAIL: $v: --load, one step at lr 0, --save changed the weights"; fail=1; }
done
# the gradient norm the host sums (gradient offload) is the device's to float32 roundoff
norm() { sed -nE 's/.*norm ([0-9.e+-]+).*/\1/p' "$1" | tail -1; }
python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-5 * abs(a))" \
  "$(norm "$out/plain.log")" "$(norm "$out/grads.log")" ||
  { echo "FAIL: gradient norms $(norm "$out/plain.log") and $(norm "$out/grads.log")"; fail=1; }
[ $fail -eq 0 ] && echo "PASS: --dump-grads, --save and --load with offload, and with the gradients and parameters offloaded" || exit 1
