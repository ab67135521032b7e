#!/usr/bin/env bash
# bf16 mixed precision against PyTorch's own (torch.autocast on the CPU, float32
# master weights: tools/parity_*.py write FIXTURE/ref_bf16.json and
# grads_bf16.safetensors): compile MODEL with --precision bf16, build the CPU
# program, then the first loss within 1e-2 of PyTorch's bf16 loss, every
# parameter's gradient with a cosine similarity of at least 0.999 to PyTorch's,
# the losses of 10 AdamW steps within 2%, and the first loss within 1e-2 of the
# float32 reference (FIXTURE/ref.json): the same model in both precisions.
#
#   parity_bf16.sh MTC MODEL FIXTURE OUTDIR
set -euo pipefail
mtc=$1 model=$2 fix=$3 out=$4
# shellcheck source=tests/numpy.sh
source "$(dirname "$0")/numpy.sh"
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
check() { "$python" "$tools/parity_check.py" "$@"; }

mtc_args="" load="" adamw_args="" sgd_args="" dynamic_args=""
# shellcheck source=/dev/null
source "$fix/parity.env"
case $model in *_dyn.onnx) mtc_args=$dynamic_args ;; esac

rm -rf "$out"
# shellcheck disable=SC2086
build_program "$mtc" "$model" "$out" "$out.compile.log" $mtc_args --precision bf16
train() {
  local weights=()
  [ -n "$load" ] && weights=(--load "$fix/$load")
  "$out/train" --inputs "$fix/batch.safetensors" "${weights[@]}" "$@"
}
status=0
train --steps 1 --lr 0 --dump-grads "$out/grads.safetensors" > "$out/grads.log"
check losses "$fix/ref_bf16.json" loss "$out/grads.log" --tol 1e-2 || status=1
check losses "$fix/ref.json" loss "$out/grads.log" --tol 1e-2 || status=1
check cosine "$fix/grads_bf16.safetensors" "$out/grads.safetensors" --min 0.999 || status=1
# shellcheck disable=SC2086
train --steps 10 $adamw_args > "$out/adamw.log"
check losses "$fix/ref_bf16.json" adamw "$out/adamw.log" --tol 0.02 || status=1
[ "$status" -eq 0 ] && echo "ok: $model in bf16 matches PyTorch's bf16 autocast" ||
  echo "FAIL: $model in bf16 differs from PyTorch's bf16 autocast"
exit "$status"
