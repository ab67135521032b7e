#!/usr/bin/env bash
# The emitted program stops at the first step whose loss, gradients or weights are not finite,
# naming what and where, with exit status 1 and nothing saved (examples/mlp.mtc; weights and
# batches edited with tests/st_poke.py, no numpy):
#   loss      w2 holds a NaN: step 1, the loss
#   gradient  column 5 of the LayerNorm is 0 (ln_w, ln_b) and row 5 of w2 is +-3.4e38, every
#             label 0: the forward is finite (0 x 3.4e38), ln_b's gradient overflows: step 1,
#             gradient of ln_b, element 5, -inf
#   weight    b1[7] = -inf: ReLU makes the forward finite and its gradient 0; the update keeps
#             -inf: step 1, parameter b1, element 7
#   later     SGD with lr 1e38: step 2, the loss
#   --no-check-finite  the weight case trains on
# With RANKS=2 the program is compiled for dp 2 with ZeRO-3 (each rank scans its shard) and runs
# under tests/mpirun.sh: the same messages, printed once. With MODE offload (one rank) it is
# compiled in bf16 with every master weight offloaded to the host region, which the host scans:
# the weight case. With MODE offload_grads the gradients are offloaded too (the host scans them
# and sums their norm): every case; offload_grads16 the same in bf16 with bf16 gradients.
#
#   finite.sh MTC MODEL OUTDIR [RANKS [MODE]]
set -euo pipefail
mtc=$1 model=$2 out=$3 ranks=${4:-1} mode=${5:-}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib.sh
source "$here/lib.sh"
rm -rf "$out"
mkdir -p "$out"
if [ "$ranks" -gt 1 ]; then
  build_program "$mtc" "$model" "$out/p" "$out/compile.log" -D B=16 --dp 2 --zero 3
  run() { "$here/mpirun.sh" 2 "$out/p/train" "$@"; }
elif [ "$mode" = offload_grads ]; then
  build_program "$mtc" "$model" "$out/p" "$out/compile.log" -D B=32 --offload-grads
  run() { "$out/p/train" "$@"; }
elif [ "$mode" = offload_grads16 ]; then
  build_program "$mtc" "$model" "$out/p" "$out/compile.log" -D B=32 --precision bf16 \
    --grad-precision bf16 --offload-grads
  run() { "$out/p/train" "$@"; }
elif [ "$mode" = offload ]; then
  build_program "$mtc" "$model" "$out/p" "$out/compile.log" -D B=32 --precision bf16 --offload 1
  run() { "$out/p/train" "$@"; }
else
  build_program "$mtc" "$model" "$out/p" "$out/compile.log" -D B=32
  run() { "$out/p/train" "$@"; }
fi
cd "$out"
export OMP_NUM_THREADS=1
poke() { python3 "$here/st_poke.py" "$@"; }

run --steps 1 --lr 0 --save w0.st > /dev/null
poke inputs label0.st 1 32 64 0
poke set w0.st loss.st w2 3 nan
# (in bf16 the largest finite weight is 3.39e38: 3.4e38 rounds to infinity)
m=3.4e38
[ "$mode" = offload_grads16 ] && m=3.38e38
big=(ln_w 5 0 ln_b 5 0 w2 50 $m)
for k in 1 2 3 4 5 6 7 8 9; do big+=(w2 $((50 + k)) -$m); done
poke set w0.st grad.st "${big[@]}"
poke set w0.st b1.st b1 7 -inf

expect() {  # expect TEXT train-args...: exit 1, TEXT once on stderr, no step line, no save
  local text=$1 rc=0
  shift
  rm -f saved.st
  run --save saved.st "$@" > out.log 2> err.log || rc=$?
  [ "$rc" -eq 1 ] || fail "train $* exited $rc, expected 1: $(cat err.log)"
  [ "$(grep -cF -- "$text" err.log)" -eq 1 ] ||
    fail "train $*: '$text' not once in: $(cat err.log)"
  [ ! -e saved.st ] || fail "train $*: --save wrote the weights"
  echo "ok: train $* -> $(grep -F -- "$text" err.log)"
}
if [ "$mode" = offload ]; then
  expect "step 1: parameter b1 is not finite after the update (first at element 7: -inf)" \
    --load b1.st --steps 3
  echo "ok: a non-finite weight in host memory stops training"
  exit 0
fi
expect "step 1: the loss is not finite (nan)" --load loss.st --steps 3
expect "step 1: gradient of ln_b is not finite (first at element 5: -inf); stopping before the" \
  --load grad.st --inputs label0.st --steps 3
grep -q "^step 1/" out.log && fail "step 1 was printed as done"
expect "step 1: parameter b1 is not finite after the update (first at element 7: -inf)" \
  --load b1.st --steps 3
expect "step 2: the loss is not finite (nan)" --optimizer sgd --lr 1e38 --steps 3
run --load b1.st --steps 2 --no-check-finite > out.log 2>&1 || fail "--no-check-finite: $(cat out.log)"
grep -q "^step 2/" out.log || fail "--no-check-finite did not train on"
echo "ok: non-finite values stop training ($ranks rank(s))"
