#!/usr/bin/env bash
# Hostile command lines and inputs to mtc: each must end within 10 s with exit status 1 or 2
# and one error that says what is wrong (the text given), and `compile` must write nothing.
#
#   hostile_cli.sh MTC OUTDIR
set -uo pipefail
mtc=$1 out=$2
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
expect "--gpus takes a whole number from 1 to 1000000" plan "$gpt2" --gpus 1e9
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

for d in c1 c2 c3 c4 c5 c6; do
  if [ -e "$out/$d" ]; then
    echo "FAIL: a failed compile wrote $out/$d"
    fails=$((fails + 1))
  fi
done
echo "hostile_cli: $n cases, $fails failures"
[ "$fails" -eq 0 ]
