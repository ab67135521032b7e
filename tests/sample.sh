#!/usr/bin/env bash
# Sampling (train --sample) on text the model can learn by heart: a sentence
# repeated, as bytes (tools/prep_text.py --tokenizer bytes), GPT-2 from the DSL:
#   - after 300 steps, greedy sampling (--temperature 0) from a prompt continues
#     the sentence exactly, past the context of T tokens; --top-k 1 is greedy too;
#   - the tokenizer is found beside --data's shards or given; --prompt-tokens
#     reads a shard (tools/prep_text.py encode); without a tokenizer, token ids;
#   - drawing at temperature 1 repeats with the seed;
#   - two data-parallel ranks (ZeRO-3) with the saved weights sample what one does;
#   - errors: --prompt without a tokenizer, --top-k without --sample, a model
#     without next-token logits (the MLP).
#
#   sample.sh MTC OUT
set -euo pipefail
mtc=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
rm -rf "$out"
mkdir -p "$out/text"
cd "$out"
sentence="the quick brown fox jumps over the lazy dog. "
for _ in $(seq 400); do printf '%s' "$sentence"; done > text/a.txt
/usr/bin/python3 "$here/../tools/prep_text.py" --tokenizer bytes -o data text/a.txt > prep.log
dims=(-D V=256 -D L=2 -D C=64 -D NH=4 -D T=64 -D B=4)
build_program "$mtc" "$here/../examples/gpt2.mtc" one one.log "${dims[@]}"
# the sample: the text between the two ---- lines. Under mpirun the other ranks' lines
# ("rank 1: memory: ...") may arrive inside it: each rank's stdout is its own pipe.
sampled() { awk '/^----$/ { n++; next } n == 1 && !/^rank [0-9]+: /' "$1"; }
one/train --data data --steps 300 --lr 3e-3 --log-every 100 --save w.st --sample 120 \
  --prompt "the quick" --temperature 0 > greedy.run
grep -E "^step" greedy.run
want="the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the lazy"
[ "$(sampled greedy.run)" = "$want" ] || { cat greedy.run; fail "greedy sampling: '$(sampled greedy.run)'"; }
one/train --load w.st --steps 0 --tokenizer data/tokenizer.bin --sample 120 --prompt "the quick" \
  --temperature 0.7 --top-k 1 > top1.run
[ "$(sampled top1.run)" = "$want" ] || fail "--top-k 1: '$(sampled top1.run)'"
/usr/bin/python3 "$here/../tools/prep_text.py" encode --dir data "the lazy" -o prompt.bin > /dev/null
one/train --load w.st --steps 0 --data data --sample 20 --prompt-tokens prompt.bin \
  --temperature 0 > tokens.run
[ "$(sampled tokens.run)" = "the lazy dog. the quick brow" ] || fail "--prompt-tokens: '$(sampled tokens.run)'"
one/train --load w.st --steps 0 --sample 5 --prompt-tokens prompt.bin --temperature 0 > ids.run
[ "$(sampled ids.run)" = "116 104 101 32 108 97 122 121 32 100 111 103 46 " ] ||
  fail "without a tokenizer, ids: '$(sampled ids.run)'"
for k in 1 2; do
  one/train --load w.st --steps 0 --data data --sample 60 --seed 5 > "seed$k.run"
done
cmp -s <(sampled seed1.run) <(sampled seed2.run) || fail "the same seed drew another sample"
grep -q "quick brown fox" <(sampled seed1.run) || fail "temperature 1: '$(sampled seed1.run)'"

# two ranks, ZeRO-3: the same greedy sample from the same weights
build_program "$mtc" "$here/../examples/gpt2.mtc" dp2 dp2.log "${dims[@]}" -D B=2 --dp 2 --zero 3
set +e
"$here/mpirun.sh" 2 dp2/train --load w.st --steps 0 --tokenizer data/tokenizer.bin --sample 120 \
  --prompt "the quick" --temperature 0 > dp2.run 2> dp2.err
rc=$?
set -e
[ $rc -eq 77 ] && { echo "SKIP (two ranks): no MPI"; } || {
  [ $rc -eq 0 ] || { cat dp2.run dp2.err; fail "two ranks: exit $rc"; }
  [ "$(sampled dp2.run)" = "$want" ] || fail "two ranks sample '$(sampled dp2.run)'"
}

expect() { expect_exit 2 "$@"; }   # TEXT PROGRAM ARGS...
expect "--prompt needs a tokenizer" one/train --load w.st --steps 0 --sample 5 --prompt hi
expect "--prompt, --prompt-tokens and --top-k are for sampling: give --sample N" one/train --top-k 5
"$mtc" compile "$here/../examples/mlp.mtc" -o mlp > /dev/null
make -s -C mlp cpu CFLAGS="-O1 -fopenmp -std=c11" > /dev/null
expect "--sample: the model 'mlp' has no next-token logits to sample from" mlp/train --sample 5
echo PASS
