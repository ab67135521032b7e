#!/usr/bin/env bash
# The emitted program under AddressSanitizer and UBSan (-fno-sanitize-recover=all) on bad
# input: examples/mlp.mtc built with `make cpu CFLAGS=...sanitizers...`, then each bad file
# must end the program with exit status 1 or 2 and a message that names the problem, and no
# sanitizer report; a normal run of one step must succeed with none (leaks checked there).
# The files are made with the standard library's Python (tests/st_poke.py and inline).
#
#   program_asan.sh MTC MODEL OUTDIR
set -euo pipefail
mtc=$1 model=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib.sh
source "$here/lib.sh"
mtc=$(cd "$(dirname "$mtc")" && pwd)/$(basename "$mtc")
rm -rf "$out"
mkdir -p "$out"
"$mtc" compile "$model" -o "$out/p" -D B=8 -D D=16 -D H=32 -D K=10 > "$out/compile.log"
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
make -s -C "$out/p" cpu CFLAGS="-O1 -g -fopenmp -std=c11 -Wall -Wextra -Werror $san" \
  > "$out/make.log" 2>&1 || { cat "$out/make.log"; exit 1; }
cd "$out/p"
export OMP_NUM_THREADS=2 UBSAN_OPTIONS=print_stacktrace=1

# a good run, leaks checked; its weights are the base of the bad files
ASAN_OPTIONS=detect_leaks=1 ./train --steps 1 --save w.st > good.log 2>&1 ||
  fail "a normal run failed under the sanitizers: $(cat good.log)"
grep -q "^step 1/" good.log || fail "no step in the normal run"
python3 "$here/st_poke.py" inputs in.st 1 8 16 3

python3 - << 'EOF2'
import json, struct
blob = open("w.st", "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
head, data = json.loads(blob[8:8 + n]), blob[8 + n:]
def st(path, header, payload=b"", hlen=None):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text) if hlen is None else hlen) + text + payload)
open("truncated.st", "wb").write(blob[:len(blob) // 2])
open("short.st", "wb").write(blob[:5])
open("garbage.st", "wb").write(blob[:8] + b"{\"w1\": [" + b"\x00\xff" * 40 + blob[8 + 48:])
st("hlen_huge.st", head, data, hlen=(1 << 63) + 5)
st("hlen_past.st", head, data, hlen=n + 4096)
huge = dict(head, w1={"dtype": "F32", "shape": [1 << 40, 1 << 40], "data_offsets": [0, 1 << 62]})
st("huge_shape.st", huge, data)
big_off = dict(head, w1=dict(head["w1"], data_offsets=[1 << 50, (1 << 50) + 16 * 32 * 4]))
st("huge_offsets.st", big_off, data)
neg = dict(head, w1=dict(head["w1"], shape=[-16, 32]))
st("negative_shape.st", neg, data)
f64 = dict(head, w1=dict(head["w1"], dtype="I32"))
st("wrong_dtype.st", f64, data)
shape = dict(head, w1=dict(head["w1"], shape=[32, 16]))
st("wrong_shape.st", shape, data)
deep = "[" * 100000 + "]" * 100000
open("deep.st", "wb").write(struct.pack("<Q", len(deep)) + deep.encode())
# llm.c token shards: magic 20240520, version 1, token count, 256 int32 header
def shard(path, ntok, tokens):
    hdr = struct.pack("<3i", 20240520, 1, ntok) + b"\0" * (1024 - 12)
    open(path, "wb").write(hdr + struct.pack("<%dH" % len(tokens), *tokens))
shard("tokens_range.bin", 100, [65535] * 100)
shard("tokens_size.bin", 1000, [1] * 100)
shard("tokens_negative.bin", -5, [1] * 100)
open("tokens_short.bin", "wb").write(b"\x28\x0b\x35\x01")
EOF2
mkdir -p folder.st
rm -f fifo.st && mkfifo fifo.st
head -c 100 /dev/zero > weights_short.bin

expect() {  # expect TEXT train-args...: exit 1 or 2, TEXT in the message, no sanitizer report
  local text=$1 rc=0
  shift
  ASAN_OPTIONS=detect_leaks=0 timeout 60 ./train --steps 1 "$@" > run.log 2>&1 || rc=$?
  if grep -qE "Sanitizer|runtime error:" run.log; then cat run.log; fail "train $*: a sanitizer report"; fi
  [ "$rc" -eq 1 ] || [ "$rc" -eq 2 ] || { cat run.log; fail "train $* exited $rc"; }
  grep -qF -- "$text" run.log || fail "train $*: no '$text' in: $(cat run.log)"
  echo "ok: train $* -> $(grep -m1 error run.log)"
}
expect "data_offsets [" --load truncated.st
expect "less than the 8-byte header length" --load short.st
expect "the header is not valid JSON" --load garbage.st
expect "the header length is 9223372036854775813 bytes" --load hlen_huge.st
expect "but the file is shorter" --load hlen_past.st
expect "the shape is too large" --load huge_shape.st
expect "a hole in the data" --load huge_offsets.st
expect "shape[0] is not a non-negative integer" --load negative_shape.st
expect "tensor 'w1' is I32; the model's parameter is float32" --load wrong_dtype.st
expect "tensor 'w1' has shape [32, 16], the model's parameter expects [16, 32]" --load wrong_shape.st
expect "the header is not valid JSON" --load deep.st
expect "folder.st is a folder, not a regular file" --load folder.st
expect "fifo.st is a FIFO, not a regular file" --load fifo.st
expect "/dev/null is a device, not a regular file" --load /dev/null
expect "is a folder" --inputs folder.st
expect "no tensor named 'x'" --inputs w.st
expect "data_offsets [" --inputs truncated.st
expect "weights file folder.st is a folder, not a regular file" --weights folder.st
expect "weights_short.bin has 100 bytes" --weights weights_short.bin
expect "--data given, but the model 'mlp' has no token inputs" --data tokens_range.bin
expect "is a folder" --save folder.st
# the token shards need a model with tokens: GPT-2, small
"$mtc" compile "$here/../examples/gpt2.mtc" -o ../g -D L=1 -D C=32 -D NH=2 -D T=8 -D V=64 -D B=2 \
  > ../compile_gpt2.log
make -s -C ../g cpu CFLAGS="-O1 -g -fopenmp -std=c11 -Wall -Wextra -Werror $san" \
  > ../make_gpt2.log 2>&1 || { cat ../make_gpt2.log; exit 1; }
for f in tokens_*.bin folder.st fifo.st; do cp -a "$f" ../g/ 2> /dev/null || true; done
cd ../g
rm -f fifo.st && mkfifo fifo.st && mkdir -p folder.st
expect "token 65535 at position 0 is out of range for the model's vocabulary of 64 (tokens 0 to 63); the file's largest token is 65535: compile the model with a vocabulary of at least 65536 (e.g. mtc compile ... -D V=65536)" \
  --data tokens_range.bin
expect "the header says 1000 tokens" --data tokens_size.bin
expect "the header says -5 tokens" --data tokens_negative.bin
expect "less than the 1024-byte header" --data tokens_short.bin
expect "--data folder.st: the folder has no *train*.bin files" --data folder.st
expect "--data: fifo.st is a FIFO, not a regular file" --data fifo.st
ASAN_OPTIONS=detect_leaks=1 ./train --steps 1 > good.log 2>&1 ||
  fail "a normal GPT-2 run failed under the sanitizers: $(cat good.log)"
echo "ok: the emitted program under ASan and UBSan on bad input"
