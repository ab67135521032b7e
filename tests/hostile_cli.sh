#!/usr/bin/env bash
# Hostile command lines and inputs to mtc: each must end within 10 s with exit status 1 or 2
# and one error that says what is wrong (the text given), and `compile` must write nothing.
#
#   hostile_cli.sh MTC ONNX_EDIT OUTDIR
set -uo pipefail
mtc=$1 edit=$2 out=$3
rm -rf "$out"
mkdir -p "$out"
src=$(cd "$(dirname "$0")/.." && pwd)
gpt2=$src/examples/gpt2.mtc mlp=$src/examples/mlp.mtc
fails=0 n=0

# expect WANT ARGS...: mtc ARGS fails (not a crash, not a hang) printing WANT
expect() {
  local want=$1
  shift
  n=$((n + 1))
  timeout 10 "$mtc" "$@" > "$out/stdout" 2> "$out/stderr"
  local rc=$?
  if [[ $rc -ne 1 && $rc -ne 2 ]] || ! grep -qF -- "$want" "$out/stderr"; then
    echo "FAIL (exit $rc): mtc $*"
    echo "  want: $want"
    echo "  got:  $(head -c 300 "$out/stderr")"
    fails=$((fails + 1))
  fi
}

# IR text with one line changed
"$mtc" inspect "$mlp" --dump-after optimizer > "$out/mlp.ir"
ir() { sed "$1" "$out/mlp.ir" > "$out/$2.ir"; echo "$out/$2.ir"; }

expect "--seed takes a whole number" inspect "$mlp" --seed -5
expect "--seed takes a whole number" inspect "$mlp" --seed 1e30
expect "--lr nan is nan as a float" compile "$mlp" -o "$out/c1" --lr nan
expect "--lr -1 is -1 as a float" compile "$mlp" -o "$out/c2" --lr -1
expect "--lr 1e+39 is inf as a float" compile "$mlp" -o "$out/c3" --lr 1e39
expect "--beta1 5 is 5 as a float" compile "$mlp" -o "$out/c4" --beta1 5
expect "--beta2 0.99999999999 is 1 as a float" compile "$mlp" -o "$out/c5" --beta2 0.99999999999
expect "--no-decay 'w(' is not a regular expression" compile "$mlp" -o "$out/c9" --no-decay 'w('
expect "--gpus takes a whole number from 1 to 65536" plan "$gpt2" --gpus 1e9
expect "--gpus takes a whole number from 1 to 65536" plan "$gpt2" --gpus 1000000
expect "--gpus takes a whole number from 1 to 65536" plan "$gpt2" --gpus 1000001
expect "--dp 65536 --tp 65536: 4294967296 ranks, more than 65536" compile "$mlp" -o "$out/c7" \
  --dp 65536 --tp 65536
expect "--tp takes a whole number from 1 to 65536" compile "$mlp" -o "$out/c8" --tp 100000
expect "-D B=-3: the value must be a positive integer" inspect "$mlp" -D B=-3
expect "takes more than 256 TiB" plan "$gpt2" --micro-batch 1000000000000
expect "the largest micro-batch that fits is" plan "$gpt2" --micro-batch 100000000 --batch 200000000 --gpu-mem 8GiB
expect "dim B is 0; a dim is at least 1" compile "$(ir 's/^sym B = 32/sym B = 0/' zero)" -o "$out/c6"
expect "dim B is -4; a dim is at least 1" inspect "$(ir 's/^sym B = 32/sym B = -4/' neg)"
expect "takes more than 256 TiB" inspect "$(ir 's/^sym B = 32/sym B = 9223372036854775807/' big)"
expect "is not an integer from" inspect "$(ir '0,/ta=1/s//ta=99999999999999999999/' attr)"
expect "is out of its range" inspect "$(ir '0,/beta1=0.9/s//beta1=7/' range)"
python3 -c "print('sym B = ' + '(' * 50000 + 'B' + ')' * 50000)" > "$out/deep.ir"
expect "deep.ir:1:" inspect "$out/deep.ir"
mkdir -p "$out/dir.mtc" "$out/dir.onnx" "$out/cluster.d"
expect "it is a directory" inspect "$out/dir.mtc"
expect "it is a directory" inspect "$out/dir.onnx"
expect "it is a directory" plan "$mlp" --cluster "$out/cluster.d"
mkfifo "$out/fifo.mtc" "$out/fifo.json"
expect "it is not a regular file" inspect "$out/fifo.mtc"
expect "it is not a regular file" plan "$mlp" --cluster "$out/fifo.json"
echo '{"groups": [{"gpu": "H100", "count": 8, "intra_bw": 450}]}' > "$out/gbs.json"
expect '"intra_bw" is 450 bytes/s' plan "$gpt2" --cluster "$out/gbs.json"
echo '{"groups": [{"gpu": "H100", "count": 8}], "cross": 1}' > "$out/key.json"
expect 'unknown key "cross"' plan "$gpt2" --cluster "$out/key.json"

# ---- the output folder: never a folder of other files, never half a program
mkdir -p "$out/mine" && echo "keep me" > "$out/mine/notes.txt"
expect "is a folder mtc did not write" compile "$mlp" -o "$out/mine"
grep -q "keep me" "$out/mine/notes.txt" || { echo "FAIL: compile touched $out/mine"; fails=$((fails + 1)); }
echo x > "$out/afile"
expect "exists and is not a folder" compile "$mlp" -o "$out/afile"
"$mtc" compile "$mlp" -o "$out/prev" > /dev/null
expect "--lr nan is nan" compile "$mlp" -o "$out/prev" --lr nan
[ -f "$out/prev/model.c" ] || { echo "FAIL: a failed compile removed the previous program"; fails=$((fails + 1)); }
# a signal mid-compile leaves nothing: the planner of mixed48 on 64 GPUs, one set of variables
# per layer, runs for seconds (1.8 s here)
timeout -s INT 0.5 "$mtc" compile "$src/examples/mixed48.mtc" -o "$out/sig" --gpus 64 \
  --no-share -D C=1024 -D NH=16 -D V=50257 -D T=1024 > /dev/null 2>&1
if [ -e "$out/sig" ] || ls -a "$out" | grep -q "^\.sig\.mtc-"; then
  echo "FAIL: an interrupted compile left files: $(ls -a "$out" | grep sig)"
  fails=$((fails + 1))
fi
# GPT-3 175B compiles to a program of kilobytes: it draws its own weights (no weights.bin)
if ! "$mtc" compile "$gpt2" -o "$out/gpt3" -D L=96 -D C=12288 -D NH=96 -D V=50257 -D T=2048 \
    -D B=1 > /dev/null 2>&1 || [ -e "$out/gpt3/weights.bin" ] || [ "$(du -sk "$out/gpt3" | cut -f1)" -gt 4096 ]; then
  echo "FAIL: a 175B model's program: $(ls "$out/gpt3" 2> /dev/null | tr '\n' ' ')$(du -sh "$out/gpt3" 2> /dev/null)"
  fails=$((fails + 1))
fi

# ---- plans for another model, other dims, another cluster
"$mtc" plan "$gpt2" --gpus 2 --json "$out/gpt2.json" > /dev/null
expect 'is a plan for the model "gpt2", not "mlp"' compile "$mlp" -o "$out/c9" --plan "$out/gpt2.json"
expect "the plan is for T = 64, the model has T = 32" compile "$gpt2" -D T=32 -o "$out/c10" \
  --plan "$out/gpt2.json"
sed 's/"seq":\t64/"seq":\t999999999/' "$out/gpt2.json" > "$out/seq.json"
expect '"seq" is 999999999, the model' compile "$gpt2" -o "$out/c11" --plan "$out/seq.json"
python3 - "$out/gpt2.json" "$out/groups.json" << 'EOF_PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["groups"].append(dict(p["groups"][0], name="other"))
json.dump(p, open(sys.argv[2], "w"))
EOF_PY
expect "the groups have 4 GPUs, the blocks' mesh dp 2 x tp 1 runs on 2" compile "$gpt2" -o "$out/c12" --plan "$out/groups.json"

# ---- external data: inside the model's folder after symbolic links are followed
onnx=$src/tests/fixtures/parity/mlp/model_o17.onnx
mkdir -p "$out/ext/sub" "$out/secret"
"$edit" external "$onnx" "$out/ext/model.onnx"
mv "$out/ext/data.bin" "$out/secret/data.bin"
ln -s ../secret/data.bin "$out/ext/data.bin"
expect "outside the model's folder" compile "$out/ext/model.onnx" -o "$out/c13" -D B=16 \
  --loss cross-entropy
ln -sf "$out/secret/data.bin" "$out/ext/data.bin"
expect "outside the model's folder" compile "$out/ext/model.onnx" -o "$out/c14" -D B=16 \
  --loss cross-entropy
mv "$out/secret/data.bin" "$out/ext/sub/real.bin" && ln -sf sub/real.bin "$out/ext/data.bin"
"$mtc" compile "$out/ext/model.onnx" -o "$out/ext_ok" -D B=16 --loss cross-entropy > /dev/null ||
  { echo "FAIL: external data through a link inside the folder"; fails=$((fails + 1)); }
truncate -s 100 "$out/ext/sub/real.bin"
expect "has fewer than" compile "$out/ext/model.onnx" -o "$out/c15" -D B=16 --loss cross-entropy

for d in c1 c2 c3 c4 c5 c6 c7 c8 c9 c10 c11 c12 c13 c14 c15; do
  if [ -e "$out/$d" ]; then
    echo "FAIL: a failed compile wrote $out/$d"
    fails=$((fails + 1))
  fi
done
echo "hostile_cli: $n cases, $fails failures"
[ "$fails" -eq 0 ]
