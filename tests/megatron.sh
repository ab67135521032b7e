#!/usr/bin/env bash
# megatron.sh MTC: examples/gpt_megatron.mtc, GPT as Megatron-LM trained it, at a small size:
#   - fusion: with dropout the scores stay written out (a causal softmax per layer, dropout on
#     the probabilities and on both residual branches); without (-D KEEP=100) the causal
#     softmax and its product with v are attention again, and the program trains as gpt2.mtc's:
#     the same 5 losses;
#   - with dropout the losses differ from those, --seed draws other masks, and checkpointing
#     every layer (the forward recomputed, its masks drawn again) changes nothing.
set -euo pipefail
mtc=$1
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/tests/lib.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=$src/examples/gpt_megatron.mtc
dims=(-D L=2 -D C=64 -D NH=4 -D T=16 -D V=256)

count() { grep -c "= $1(" <<< "$2" || true; }
ir=$("$mtc" inspect "$model" "${dims[@]}" --dump-after fusion)
[ "$(count attention "$ir")" = 0 ] && [ "$(grep -c 'softmax(.*causal=1' <<< "$ir")" = 2 ] &&
  [ "$(count dropout "$ir")" = 6 ] ||
  fail "with dropout: $(count attention "$ir") attention, $(count softmax "$ir") softmax, $(count dropout "$ir") dropout; want 0, 2 causal, 6"
ir=$("$mtc" inspect "$model" "${dims[@]}" -D KEEP=100 --dump-after fusion)
[ "$(count attention "$ir")" = 2 ] && [ "$(count softmax "$ir")" = 0 ] &&
  grep -q 'attention(.*causal=1' <<< "$ir" ||
  fail "-D KEEP=100: $(count attention "$ir") attention, $(count softmax "$ir") softmax; want 2 causal attention, 0 softmax"
echo "ok   fusion: written out with dropout, attention without"

train() {   # NAME MODEL ARGS...: 5 AdamW steps, the losses in $work/NAME.losses
  local name=$1 m=$2
  shift 2
  build_program "$mtc" "$m" "$work/$name" "$work/$name.log" --gpus 1 "${dims[@]}" "$@"
  (cd "$work/$name" && ./train --steps 5 > "$work/$name.out" 2>&1) ||
    { cat "$work/$name.out"; fail "$name: the program failed"; }
  losses "$work/$name.out" > "$work/$name.losses"
  [ "$(wc -l < "$work/$name.losses")" = 5 ] || fail "$name: not 5 losses"
}
train gpt2 "$src/examples/gpt2.mtc"
train nodrop "$model" -D KEEP=100
cmp -s "$work/gpt2.losses" "$work/nodrop.losses" ||
  fail "-D KEEP=100 does not train as gpt2.mtc: $(paste -d' ' "$work/gpt2.losses" "$work/nodrop.losses" | tr '\n' ';')"
echo "ok   -D KEEP=100 trains as gpt2.mtc: $(tr '\n' ' ' < "$work/gpt2.losses")"

train drop "$model"
train seed "$model" --seed 7
train ckpt "$model" --checkpoint all
for other in nodrop seed; do
  [ "$(head -1 "$work/drop.losses")" != "$(head -1 "$work/$other.losses")" ] ||
    fail "dropout: the first loss equals $other's ($(head -1 "$work/drop.losses"))"
done
cmp -s "$work/drop.losses" "$work/ckpt.losses" ||
  fail "--checkpoint all changes the losses: $(paste -d' ' "$work/drop.losses" "$work/ckpt.losses" | tr '\n' ';')"
echo "ok   dropout: $(tr '\n' ' ' < "$work/drop.losses")(--seed 7: $(head -1 "$work/seed.losses"); --checkpoint all the same)"
