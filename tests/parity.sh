#!/usr/bin/env bash
# Parity with PyTorch: compile MODEL with mtc, build the CPU program, and
# check it against the reference in FIXTURE (written by tools/parity_*.py):
# the first loss and every parameter's gradient after one backward, then the
# losses of 10 AdamW steps and of 10 SGD steps on the same fixed batch, and
# where the fixture has them (FIXTURE/running_sgd.safetensors) BatchNorm's
# running statistics after the SGD steps. Every relative error must be within
# 1e-4 (tools/parity_check.py prints them all).
#
#   parity.sh MTC MODEL FIXTURE OUTDIR
#
# FIXTURE/parity.env says how: mtc_args (e.g. -D B=4), load (initial weights
# by name, for DSL models; ONNX models carry theirs), adamw_args, sgd_args,
# dynamic_args: the mtc_args of a MODEL named *_dyn.onnx (exported with
# dynamic axes, so its dims need values), and grad_floor: the least scale a
# gradient is compared at, as a share of the model's largest (default 1e-6;
# a fixture whose zero-in-exact-arithmetic gradients round larger sets more).
# PARITY_STEPS=N runs and checks only the first N optimizer steps (default
# 10; for large models). Exits 77 (ctest: skipped) when MODEL is ONNX and this
# mtc cannot read ONNX yet (or has no --loss/--labels yet), or when numpy is
# missing.
set -euo pipefail
mtc=$1 model=$2 fix=$3 out=$4
# shellcheck source=tests/numpy.sh
source "$(dirname "$0")/numpy.sh"
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
check() { "$python" "$tools/parity_check.py" "$@"; }

# shellcheck disable=SC2034  # adamw_args and sgd_args are read as ${!args}
mtc_args="" load="" adamw_args="" sgd_args="" dynamic_args="" grad_floor=1e-6
# shellcheck source=/dev/null
source "$fix/parity.env"
case $model in *_dyn.onnx) mtc_args=$dynamic_args ;; esac

rm -rf "$out"
mkdir -p "$out"
# shellcheck disable=SC2086
if ! "$mtc" compile "$model" -o "$out" --precision fp32 $mtc_args 2> "$out.compile.err"; then
  cat "$out.compile.err" >&2
  if grep -q "ONNX input is not supported" "$out.compile.err"; then
    echo "SKIP: this mtc cannot read ONNX yet ($model)"
    exit 77
  fi
  if grep -q "unknown option '--\(loss\|labels\)'" "$out.compile.err"; then
    echo "SKIP: this mtc has no --loss/--labels yet ($model)"
    exit 77
  fi
  echo "FAIL: mtc compile $model"
  exit 1
fi
make_program "$out" "$MTC_TEST_CFLAGS"

train() {
  local weights=()
  [ -n "$load" ] && weights=(--load "$fix/$load")
  "$out/train" --inputs "$fix/batch.safetensors" "${weights[@]}" "$@"
}

status=0
train --steps 1 --lr 0 --dump-grads "$out/grads.safetensors" > "$out/grads.log"
check losses "$fix/ref.json" loss "$out/grads.log" || status=1
check grads "$fix/grads.safetensors" "$out/grads.safetensors" --floor "$grad_floor" || status=1
steps=${PARITY_STEPS:-10}
for opt in adamw sgd; do
  args=${opt}_args
  # shellcheck disable=SC2086
  save=()   # BatchNorm's running statistics after the SGD steps, where the fixture has PyTorch's
  [ "$opt" = sgd ] && [ "$steps" = 10 ] && [ -f "$fix/running_sgd.safetensors" ] &&
    save=(--save "$out/sgd.safetensors")
  train --steps "$steps" ${!args} "${save[@]}" > "$out/$opt.log"
  check losses "$fix/ref.json" "$opt" "$out/$opt.log" --steps "$steps" || status=1
  [ ${#save[@]} = 0 ] || check tensors "$fix/running_sgd.safetensors" "$out/sgd.safetensors" ||
    status=1
done
[ "$status" -eq 0 ] && echo "ok: $model matches PyTorch" || echo "FAIL: $model differs from PyTorch"
exit "$status"
