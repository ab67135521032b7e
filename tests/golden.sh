#!/usr/bin/env bash
# A golden IR test, as LLVM's FileCheck tests: IR text in, mtc's passes up to
# one, the IR after it checked against the test file's CHECK lines.
#
#   tests/golden.sh MTC tests/golden/NAME.ir
#
# The file's `# ARGS:` line gives `mtc inspect`'s flags (--dump-after PASS and
# the layout); its `# CHECK...:` lines are what tests/filecheck.py matches.
set -euo pipefail
mtc=$1 file=$2
here=$(cd "$(dirname "$0")" && pwd)
args=$(sed -n 's/^# ARGS: //p' "$file")
[ -n "$args" ] || { echo "FAIL: $file has no '# ARGS:' line"; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
read -r -a flags <<< "$args"
"$mtc" inspect "$file" "${flags[@]}" > "$out" 2>&1 || { cat "$out"; echo "FAIL: mtc inspect $file $args"; exit 1; }
/usr/bin/python3 "$here/filecheck.py" "$file" < "$out"
echo "ok: $(basename "$file") ($args)"
