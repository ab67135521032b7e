#!/usr/bin/env bash
# The IR text round trip, after every pass, for every example and ONNX fixture:
# `mtc inspect MODEL --dump-after PASS` prints IR text that reads back as the
# same graph (inspecting it again after PASS prints it unchanged), and that the
# rest of the pipeline turns into exactly what `mtc inspect MODEL` prints (the
# IR after the last pass and the memory plan).
#
#   ir_roundtrip.sh MTC OUTDIR MODEL...
#
# An ONNX fixture's NAME.ref gives the -D bindings and options it needs.
set -euo pipefail
mtc=$1 out=$2
shift 2
rm -rf "$out"
mkdir -p "$out"
passes=(shapes fusion autodiff optimizer recompute lower swap memplan)
fails=0 checked=0
for model in "$@"; do
  opts=()
  ref=${model%.onnx}.ref
  if [[ $model == *.onnx && -f $ref ]]; then
    read -ra opts <<< "$(awk '/^dim/ {printf " -D %s=%s", $2, $3} /^option/ {$1 = ""; printf " %s", $0}' "$ref")"
  fi
  name=$(basename "$model")
  "$mtc" inspect "$model" "${opts[@]}" > "$out/$name.txt"
  for pass in "${passes[@]}"; do
    ir=$out/$name.$pass.ir
    "$mtc" inspect "$model" "${opts[@]}" --dump-after "$pass" > "$ir"
    checked=$((checked + 1))
    if ! "$mtc" inspect "$ir" --dump-after "$pass" > "$ir.again" 2> "$ir.err"; then
      echo "FAIL $name after $pass: the printed IR does not read back: $(head -3 "$ir.err")"
      fails=$((fails + 1))
      continue
    fi
    if ! cmp -s "$ir" "$ir.again"; then
      echo "FAIL $name after $pass: print(parse(print)) differs:"
      diff "$ir" "$ir.again" | head -10
      fails=$((fails + 1))
    fi
    if ! "$mtc" inspect "$ir" > "$ir.rest" 2> "$ir.err"; then
      echo "FAIL $name after $pass: the passes after it fail on the IR text: $(head -3 "$ir.err")"
      fails=$((fails + 1))
    elif ! cmp -s "$out/$name.txt" "$ir.rest"; then
      echo "FAIL $name after $pass: the passes after it give another graph than from $model:"
      diff "$out/$name.txt" "$ir.rest" | head -10
      fails=$((fails + 1))
    fi
  done
done
echo "ir_roundtrip: $checked dumps of $# models, $fails failures"
[ "$fails" -eq 0 ]
