#!/usr/bin/env bash
# bf16 gradients (--grad-precision bf16) against float32 ones, one rank, GPT-2 in bf16 mixed
# precision: the gradients after one backward agree as bf16's rounding allows (cosine at least
# 0.9999 per tensor, the largest error within 1e-2 of each tensor's largest), the losses of 10
# AdamW steps within 1e-3, the gradient norms the programs print within 1e-2, and the planner's
# model state is 2 bytes a parameter less.
#
#   tests/grad_precision.sh MTC OUT
set -euo pipefail
mtc=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
. "$here/numpy.sh"
rm -rf "$out"
mkdir -p "$out"
export OMP_NUM_THREADS=2
model=$here/../examples/gpt2.mtc
dims=(-D L=2 -D C=64 -D NH=4 -D T=32 -D B=4 -D V=256)
for g in fp32 bf16; do
  build_program "$mtc" "$model" "$out/$g" "$out/$g.compile.log" "${dims[@]}" --precision bf16 \
    --grad-precision "$g"
  "$out/$g/train" --steps 10 --eps 1e-4 --dump-grads "$out/$g.grads.safetensors" > "$out/$g.log"
done
"$python" "$tools/parity_check.py" cosine "$out/fp32.grads.safetensors" \
  "$out/bf16.grads.safetensors" --min 0.9999
"$python" "$tools/parity_check.py" grads "$out/fp32.grads.safetensors" \
  "$out/bf16.grads.safetensors" --tol 1e-2 > "$out/grads.txt" || { cat "$out/grads.txt"; fail "gradients"; }
"$python" "$tools/parity_check.py" logs "$out/fp32.log" "$out/bf16.log" --tol 1e-3
# the planner's model state: the gradients' 4 bytes a parameter become 2
state() { sed -n 's/.*model state per GPU: \([0-9]*\) bytes.*/\1/p' "$out/$1.compile.log"; }
params=$("$python" - "$out/fp32.grads.safetensors" "$tools" << 'PYEOF'
import sys
sys.path.insert(0, sys.argv[2])
from parity_check import st_read
print(sum(t.size for t in st_read(sys.argv[1]).values()))
PYEOF
)
f32=$(state fp32) b16=$(state bf16)
[ -n "$f32" ] && [ -n "$b16" ] || fail "no model state in the compile logs"
[ $((f32 - b16)) -eq $((2 * params)) ] ||
  fail "model state $f32 -> $b16 bytes: $((f32 - b16)) less, not 2 x $params parameters"
echo "PASS: bf16 gradients within bf16's rounding of float32's; model state $f32 -> $b16 bytes"
