#!/usr/bin/env bash
# An integer input that the model casts to float (Hugging Face's attention_mask) is a padding
# mask: `mtc inspect` shows its kind, the synthetic data gives each row 1s up to a random valid
# length and 0s after it (the program trains on it with finite losses), and --inputs takes only
# 0 and 1 for it.
#
#   mask_input.sh MTC MODEL OUTDIR     (MODEL: tests/fixtures/parity/hf_bert_cls/model_o17_dyn.onnx)
# Exits 77 (ctest: skipped) when numpy is missing (it writes the test inputs).
set -euo pipefail
mtc=$1 model=$2 out=$3
# shellcheck source=tests/numpy.sh
source "$(dirname "$0")/numpy.sh"
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"

rm -rf "$out"
"$mtc" inspect "$model" -D B=4 -D T=16 > "$out.ir" 2>&1 || fail "inspect: $(cat "$out.ir")"
grep -q '^input %attention_mask : i32\[B,T\] mask(2)' "$out.ir" ||
  fail "attention_mask is not a mask input: $(grep '^input' "$out.ir")"
build_program "$mtc" "$model" "$out" "$out.log" -D B=4 -D T=16
cd "$out"
./train --steps 3 > train.log
awk -F'|' '/^step/ { sub(/ *loss /, "", $2); if ($2 + 0 != $2 + 0 || $2 == "nan" || $2 == "inf") exit 1 }' train.log ||
  fail "losses not finite: $(cat train.log)"
grep -c '^step' train.log | grep -qx 3 || fail "train did not run 3 steps: $(cat train.log)"

"$python" - "$tools" << 'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from parity_check import st_write
rng = np.random.default_rng(1)
idx = rng.integers(0, 128, (4, 16)).astype(np.int32)
mask = np.ones((4, 16), np.int32)
mask[2, 9:] = 0
labels = rng.integers(0, 3, 4).astype(np.int32)
st_write("good.safetensors", {"idx": idx, "attention_mask": mask, "labels": labels})
mask[1, 3] = 2
st_write("bad.safetensors", {"idx": idx, "attention_mask": mask, "labels": labels})
PY
./train --inputs good.safetensors --steps 1 > good.log || fail "a 0/1 mask was refused"
if ./train --inputs bad.safetensors --steps 1 > bad.log 2> bad.err; then fail "a mask value 2 was taken"; fi
grep -qF "tensor 'attention_mask': element 19 is 2, outside [0, 2) (a padding mask holds 0 and 1)" bad.err ||
  fail "no clear error: $(cat bad.err)"
echo "ok: attention_mask is a padding mask (synthetic, --inputs, and a bad value refused)"
