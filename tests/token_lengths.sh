#!/usr/bin/env bash
# Token inputs of different lengths (an encoder's [B, TE], a decoder's [B, TD] and its targets)
# in the emitted train, on tests/token_lengths.mtc with weights from numpy (--load):
#   --inputs   a batch of each input's own shape gives numpy's loss
#   --data     a token shard: each token input takes the first of the step's tokens (the
#              targets the ones after), the step advancing by the longest; numpy's losses
#   synthetic  runs and gives a finite loss
#
#   token_lengths.sh MTC MODEL OUTDIR
# Exits 77 (ctest: skipped) when numpy is missing.
set -euo pipefail
mtc=$1 model=$2 out=$3
# shellcheck source=tests/numpy.sh
source "$(dirname "$0")/numpy.sh"
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"

rm -rf "$out"
"$mtc" compile "$model" -o "$out" -D B=2 -D TE=12 -D TD=5 -D C=8 -D V=32 --precision fp32
make_program "$out" "-O2 -fopenmp -std=c11 -Wall -Wextra -Werror"
cd "$out"

# weights, a batch, a shard, and numpy's losses on them (ref_inputs, ref_data: one per step)
"$python" - "$tools" << 'EOF'
import struct
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from parity_check import st_write
B, TE, TD, C, V = 2, 12, 5, 8, 32
rng = np.random.default_rng(3)
wte = (0.5 * rng.standard_normal((V, C))).astype(np.float32)
w = (0.5 * rng.standard_normal((C, V))).astype(np.float32)
st_write("weights.safetensors", {"wte": wte, "w": w})

def loss(src, tgt, y):
    ctx = wte.astype(np.float64)[src].mean(axis=1, keepdims=True)
    logits = (wte.astype(np.float64)[tgt] + ctx) @ w
    m = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - m).sum(-1)) + m[..., 0]
    return float((lse - np.take_along_axis(logits, y[..., None], -1)[..., 0]).mean())

src, tgt, y = rng.integers(0, V, (B, TE)), rng.integers(0, V, (B, TD)), rng.integers(0, V, (B, TD))
st_write("batch.safetensors", {"src": src.astype(np.int32), "tgt": tgt.astype(np.int32),
                               "y": y.astype(np.int32)})
open("ref_inputs", "w").write(f"{loss(src, tgt, y)!r}\n")
toks = rng.integers(0, V, 200)
with open("shard.bin", "wb") as f:
    f.write(struct.pack("<3i", 20240520, 1, len(toks)) + b"\0" * (1024 - 12))
    f.write(toks.astype("<u2").tobytes())
n = B * TE  # the longest token input: the step advances by it
ref = []
for step in range(3):
    s = toks[step * n:]
    ref.append(loss(s[:B * TE].reshape(B, TE), s[:B * TD].reshape(B, TD), s[1:B * TD + 1].reshape(B, TD)))
open("ref_data", "w").write("".join(f"{r!r}\n" for r in ref))
EOF

# compare losses in file $1 with the reference in file $2 (absolute 2e-5: train prints 6 decimals)
compare() {
  paste "$1" "$2" | awk -v what="$3" '{ d = $1 - $2; if (d < 0) d = -d; if (d > max) max = d;
      if (d > 2e-5) bad = 1; n++ }
    END { printf "%s: %d losses, max diff %.2e\n", what, n, max; exit bad || n == 0 }' ||
    fail "$3: losses $(tr '\n' ' ' < "$1") differ from numpy's $(tr '\n' ' ' < "$2")"
}

./train --load weights.safetensors --inputs batch.safetensors --optimizer sgd --lr 0 --steps 1 \
  > inputs.log
losses inputs.log > inputs.losses
compare inputs.losses ref_inputs "--inputs"

./train --load weights.safetensors --data shard.bin --no-shuffle --optimizer sgd --lr 0 --steps 3 > data.log
losses data.log > data.losses
compare data.losses ref_data "--data"

./train --steps 2 > synthetic.log
[ "$(losses synthetic.log | wc -l)" = 2 ] || fail "the synthetic run did not train 2 steps"
losses synthetic.log | awk '$1 != $1 + 0 || $1 == "nan" || $1 == "inf" { exit 1 }' ||
  fail "the synthetic run's loss is not a number: $(losses synthetic.log | tr '\n' ' ')"
echo "ok: token inputs of different lengths"
