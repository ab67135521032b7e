#!/usr/bin/env bash
# --freeze REGEX: the parameters it names are not trained, as PyTorch's
# requires_grad=False leaves them. GPT-2 (fp32) compiled with and without
# --freeze, both from the same initial weights (--load): after 3 AdamW steps
# the frozen tensors are their initial values to the bit and every other
# tensor has moved; the first step's gradients of the parameters still trained
# equal the unfrozen program's to the bit (freezing removes the frozen ones'
# gradients and updates, nothing else), and the frozen ones have none; a
# bf16 program trains with the same freeze; bad patterns are refused.
#
#   tests/freeze.sh MTC MODEL OUT
set -euo pipefail
mtc=$1 model=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
rm -rf "$out"
mkdir -p "$out"
export OMP_NUM_THREADS=2
dims=(-D L=2 -D C=32 -D NH=2 -D T=16 -D V=96 -D B=2)
frozen='^(wpe|h\.0\.ln1_.|h\.1\.fc_w)$'
build_program "$mtc" "$model" "$out/all" "$out/all.log" "${dims[@]}"
build_program "$mtc" "$model" "$out/frz" "$out/frz.log" "${dims[@]}" --freeze "$frozen"
grep -q "^mtc: --freeze leaves 4 parameters (4672 elements) untrained: 'wpe', 'h.0.ln1_w', 'h.0.ln1_b', 'h.1.fc_w'$" \
  "$out/frz.log" || { cat "$out/frz.log"; echo "FAIL: compile's line on what --freeze froze"; exit 1; }
"$out/all/train" --steps 0 --save "$out/init.st" > /dev/null
for p in all frz; do
  "$out/$p/train" --load "$out/init.st" --steps 3 --save "$out/$p.st" > "$out/$p.run"
  "$out/$p/train" --load "$out/init.st" --steps 1 --dump-grads "$out/$p.grads.st" > /dev/null
done
# bf16 trains with the same freeze (the frozen tensors read through casts)
build_program "$mtc" "$model" "$out/bf16" "$out/bf16.log" "${dims[@]}" --precision bf16 --freeze "$frozen"
"$out/bf16/train" --load "$out/init.st" --steps 3 --save "$out/bf16.st" > "$out/bf16.run"
/usr/bin/python3 - "$here" "$out" "$frozen" <<'PY'
import re, sys
sys.dont_write_bytecode = True  # nothing written beside the sources
sys.path.insert(0, sys.argv[1])
from st_poke import tensors
out, frozen = sys.argv[2], re.compile(sys.argv[3])
init, after, bf16 = (tensors(f"{out}/{p}.st") for p in ("init", "frz", "bf16"))
ga, gf = tensors(f"{out}/all.grads.st"), tensors(f"{out}/frz.grads.st")
bad = []
names = sorted(k for k in init if frozen.search(k))
if len(names) != 4:
    bad.append(f"the pattern names {names}")
for label, saved in (("fp32", after), ("bf16", bf16)):
    if set(init) != set(saved):
        bad.append(f"{label}: saved tensors differ: {sorted(set(init) ^ set(saved))}")
    for k in init:
        if (saved.get(k) == init[k]) != bool(frozen.search(k)):
            bad.append(f"{label}: '{k}' " + ("moved" if frozen.search(k) else "did not move"))
for k in ga:
    if frozen.search(k) and k in gf:
        bad.append(f"frozen '{k}' has a gradient")
    if not frozen.search(k) and gf.get(k) != ga[k]:
        bad.append(f"the gradient of '{k}' differs from the unfrozen program's")
print(f"{len(names)} frozen of {len(init)} tensors, kept in fp32 and bf16; {len(gf)} gradients "
      "equal the unfrozen program's to the bit" if not bad else "\n".join("FAIL: " + b for b in bad))
sys.exit(1 if bad else 0)
PY
# bad patterns: one error each, no output folder
for c in "nomatch|matches none of the 28 parameters' names" "^|matches every parameter: nothing would train" \
  "w(|is not a regular expression"; do
  pat=${c%%|*} want=${c#*|}
  if "$mtc" compile "$model" "${dims[@]}" -o "$out/bad" --freeze "$pat" > "$out/bad.log" 2>&1; then
    echo "FAIL: --freeze '$pat' compiled"; exit 1
  fi
  grep -q -- "$want" "$out/bad.log" || { cat "$out/bad.log"; echo "FAIL: --freeze '$pat'"; exit 1; }
  [ ! -e "$out/bad" ] || { echo "FAIL: --freeze '$pat' left $out/bad"; exit 1; }
done
echo "ok: --freeze"
