#!/usr/bin/env bash
# End to end for every ONNX fixture: mtc compile (with the dims and options
# of NAME.ref), make cpu and the GPU build where nvcc is (warnings are errors), train for STEPS steps on the
# synthetic batch; the last loss must be finite and below the first. Built at -O1, as
# tests/lib.sh's build_program builds: the fixtures train in milliseconds and -O2 took 8 s a
# program to compile.
#
#   e2e_onnx.sh MTC FIXTURE_DIR OUT_DIR STEPS [NAME...]
set -euo pipefail
mtc=$1 dir=$2 out=$3 steps=$4
shift 4
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for ref in "$dir"/*.ref; do names+=("$(basename "$ref" .ref)"); done
fi
mkdir -p "$out"
fail=0
for name in "${names[@]}"; do
  ref="$dir/$name.ref"
  # shellcheck disable=SC2207
  opts=($(awk '/^dim/ { printf "-D %s=%s ", $2, $3 } /^option/ { printf "%s ", $2 }' "$ref"))
  o="$out/$name.out"
  rm -rf "$o"
  if ! "$mtc" compile "$dir/$name.onnx" -o "$o" --precision fp32 "${opts[@]}" > "$out/$name.log" 2>&1 ||
     ! (make_program "$o" "$MTC_TEST_CFLAGS") >> "$out/$name.log" 2>&1 ||
     ! (cd "$o" && ./train --steps "$steps" --seed 7) >> "$out/$name.log" 2>&1; then
    echo "FAIL $name: see $out/$name.log"; tail -5 "$out/$name.log"; fail=1; continue
  fi
  losses=$(awk -F'|' '/^step/ { sub(/ *loss /, "", $2); sub(/ +$/, "", $2); print $2 }' "$out/$name.log")
  l0=$(echo "$losses" | head -1) l1=$(echo "$losses" | tail -1)
  if awk -v a="$l0" -v b="$l1" 'BEGIN { exit !(b == b && b < a) }'; then
    echo "ok   $name: loss $l0 -> $l1 in $steps steps"
  else
    echo "FAIL $name: loss $l0 -> $l1 in $steps steps"; fail=1
  fi
done
exit $fail
