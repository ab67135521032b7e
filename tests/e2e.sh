#!/usr/bin/env bash
# End to end: compile a model with mtc, build the emitted program with
# `make cpu` (and its GPU build where nvcc is; warnings are errors), train it on one fixed synthetic batch, and
# check the loss: it must at least halve in STEPS steps, the first loss must
# be within 2% of FIRST (when given, e.g. ln(vocab)), and a second run with
# the same seed must print bit-identical losses (its first 10 steps: a step
# depends only on the ones before it, and the suite's time goes to training).
#
#   e2e.sh MTC MODEL OUTDIR STEPS FIRST|- "TRAIN OPTIONS" [mtc options...]
set -euo pipefail
mtc=$1 model=$2 out=$3 steps=$4 first=$5 train_opts=$6
shift 6

# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"

rm -rf "$out"
"$mtc" compile "$model" -o "$out" --precision fp32 "$@"
make_program "$out" "-O2 -fopenmp -std=c11 -Wall -Wextra -Werror"
# shellcheck disable=SC2086
(cd "$out" && ./train --steps "$steps" --seed 7 $train_opts) | tee "$out/run1.log"
again=$((steps < 10 ? steps : 10))
# shellcheck disable=SC2086
(cd "$out" && ./train --steps "$again" --seed 7 $train_opts) > "$out/run2.log"

losses "$out/run1.log" > "$out/loss1.txt"
losses "$out/run2.log" > "$out/loss2.txt"
[ "$(wc -l < "$out/loss1.txt")" -eq "$steps" ] || { echo "FAIL: expected $steps steps"; exit 1; }
[ "$(wc -l < "$out/loss2.txt")" -eq "$again" ] &&
  head -n "$again" "$out/loss1.txt" | cmp -s - "$out/loss2.txt" ||
  { echo "FAIL: same seed, different losses"; exit 1; }

l0=$(head -1 "$out/loss1.txt") l1=$(tail -1 "$out/loss1.txt")
awk -v a="$l0" -v b="$l1" 'BEGIN { exit !(b <= a / 2) }' ||
  { echo "FAIL: loss went from $l0 to $l1; it must at least halve"; exit 1; }
if [ "$first" != "-" ]; then
  awk -v a="$l0" -v f="$first" 'BEGIN { d = a - f; if (d < 0) d = -d; exit !(d <= 0.02 * f) }' ||
    { echo "FAIL: first loss $l0 is not within 2% of $first"; exit 1; }
fi
grep -q '^memory: planned arena' "$out/run1.log" || { echo "FAIL: no memory line"; exit 1; }
echo "ok: $model: loss $l0 -> $l1 in $steps steps, deterministic"
