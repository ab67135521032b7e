#!/usr/bin/env bash
# Validation (train --val-data) and eval mode, on tools/onnx_models.py's small
# GPT with dropout 0.1 (gpt_o17_train.onnx) and the same model and weights
# without dropout (gpt_o17_train_p0.onnx), on one shard:
#   - eval mode is the forward without dropout: the dropout model's validation
#     loss on a batch is the no-dropout model's training loss on it (within
#     1e-5: one fuses attention, the other cannot), and not its own training
#     loss (dropout is on in training);
#   - the no-dropout model's validation loss is its training loss, to the bit;
#   - validating leaves training as it was: 4 steps with --val-every 1 give the
#     losses of 4 steps without it, to the bit (eval mode does not move the
#     dropout masks' counter);
#   - --val-every N validates at N, 2N, ... and the last step; --log writes
#     each as a "val" record; --val-steps beyond the data reads all of it;
#   - flag errors.
#
#   val.sh MTC ONNX_DIR OUT
set -euo pipefail
mtc=$1 onnx=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
rm -rf "$out"
mkdir -p "$out"
if ! "$mtc" compile "$onnx/gpt_o17_train_p0.onnx" -o "$out/p0" --precision fp32 -D B=2 -D T=8 \
    > "$out/p0.log" 2>&1; then
  grep -q "ONNX input is not supported" "$out/p0.log" && { echo "SKIP: no ONNX"; exit 77; }
  cat "$out/p0.log"
  exit 1
fi
make_program "$out/p0" "$MTC_TEST_CFLAGS"
build_program "$mtc" "$onnx/gpt_o17_train.onnx" "$out/drop" "$out/drop.log" -D B=2 -D T=8
cd "$out"
step_losses() { awk -F'|' '/^step/ { sub(/ *loss /, "", $2); print $2 }' "$1"; }
val_loss() { awk -F'|' '/^val/ { sub(/ *loss /, "", $3); print $3 }' "$1" | sed -n "${2:-1}p"; }

# 10 batches of 2 x 8 tokens (and one more token), below the vocabulary of 64
/usr/bin/python3 - << 'EOF'
import struct
toks = [(i * 7 + i // 5) % 64 for i in range(161)]
with open("s.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(struct.pack(f"<{len(toks)}H", *toks))
EOF
one=(--data s.bin --no-shuffle --val-data s.bin --val-steps 1 --lr 0 --steps 1 --optimizer sgd)
p0/train "${one[@]}" > p0.run
drop/train "${one[@]}" > drop.run
train_p0=$(step_losses p0.run) val_p0=$(val_loss p0.run)
train_drop=$(step_losses drop.run) val_drop=$(val_loss drop.run)
echo "no dropout: train $train_p0, val $val_p0 | dropout 0.1: train $train_drop, val $val_drop"
[ "$train_p0" = "$val_p0" ] || fail "without dropout, the validation loss $val_p0 is not the training loss $train_p0"
awk -v a="$val_drop" -v b="$train_p0" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * b) }' ||
  fail "eval mode: the dropout model's validation loss $val_drop is not the loss without dropout $train_p0"
[ "$train_drop" != "$val_drop" ] || fail "the dropout model trains without dropout: $train_drop"

# validation between steps leaves the training losses to the bit
drop/train --data s.bin --steps 4 --lr 1e-2 --log-every 1 > plain.run
drop/train --data s.bin --steps 4 --lr 1e-2 --log-every 1 --val-data s.bin --val-every 1 \
  --val-steps 3 --log val.jsonl > with_val.run
diff <(step_losses plain.run) <(step_losses with_val.run) > /dev/null ||
  fail "validating changed the training losses: $(step_losses plain.run | tr '\n' ' ') vs $(step_losses with_val.run | tr '\n' ' ')"
[ "$(grep -c '^val | step [1-4] | loss .* | 3 batches' with_val.run)" = 4 ] ||
  fail "--val-every 1: a validation after each of the 4 steps"
[ "$(grep -c '"kind":"val"' val.jsonl)" = 4 ] || fail "--log: 4 val records"
drop/train --data s.bin --steps 5 --val-data s.bin --val-every 2 --val-steps 50 > every2.run
[ "$(grep '^val' every2.run | awk -F'|' '{ print $2 }' | tr -d ' step' | tr '\n' ' ')" = "2 4 5 " ] ||
  fail "--val-every 2 over 5 steps validates after steps 2, 4 and 5: $(grep '^val' every2.run)"
grep -q "10 batches, fewer than --val-steps 50: each validation reads them all" every2.run ||
  fail "--val-steps beyond the data: no note"

# flag errors: a message and exit 2
expect() { local text=$1; shift; expect_exit 2 "$text" drop/train "$@"; }   # TEXT ARGS...
expect "--val-every: give the data with --val-data" --val-every 5
expect "--val-steps expects an integer in [1, 2147483647], got '0'" --val-data s.bin --val-steps 0
echo "PASS"
