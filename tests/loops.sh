#!/usr/bin/env bash
# Identical blocks are written as loops: `mtc compile` of GPT-2 at L=4 and
# L=12, and of a lowered plan (dp 2 x tp 2, ZeRO-3), each writes forward,
# backward and update with one loop over the layers (3 loops, no block
# written out; under ZeRO-3 the last block of forward and of backward, which
# start no gather of a next block), and the 12-layer model.c is about the size of the 4-layer
# one (within 25%; before loops it was 2.8 times). The buffers' constant
# strides cost little memory: each arena is within 10% of its peak of live
# bytes. ALBERT (tests/fixtures/parity/hf_albert_mlm: one shared layer run three times)
# runs its layer's uses as loops too: forward over uses 0 to 2, backward over 1 to 0 (use 2,
# the first in backward, makes the weights' gradients that the others add to), in under 1,500
# lines (1,873 written out). The programs build with -Werror. That the loops compute what the
# unrolled code did is what every e2e, parity and mpi test checks: they all run looped programs.
#
#   tests/loops.sh MTC OUT
set -euo pipefail
mtc=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
rm -rf "$out"
mkdir -p "$out"
small="-D C=64 -D NH=4 -D T=16 -D V=256"
ok=0
check() { # DIR [OUT]: 3 loops, OUT blocks written out (default none)
  local loops blocks want=${2:-0}
  loops=$(grep -c "^  for (int l = " "$1/model.c" || true)
  blocks=$(grep -c "^  // ---- block [0-9]" "$1/model.c" || true)
  local arena peak
  arena=$(sed -n 's/.*\.arena_bytes = \([0-9]*\),/\1/p' "$1/model.c")
  peak=$(sed -n 's/.*\.peak_live_bytes = \([0-9]*\),/\1/p' "$1/model.c")
  echo "$(basename "$1"): $loops loops, $blocks blocks written out, $(wc -l < "$1/model.c") lines;" \
    "arena $arena bytes for a peak of $peak"
  [ "$loops" -eq 3 ] && [ "$blocks" -eq "$want" ] ||
    { echo "FAIL: $1: want 3 loops and $want blocks written out"; ok=1; }
  [ $((arena * 100)) -le $((peak * 110)) ] || { echo "FAIL: $1: the arena is more than 10% over the peak"; ok=1; }
}
build_program "$mtc" "$here/../examples/gpt2.mtc" "$out/l4" "$out/l4.log" -D L=4 $small
build_program "$mtc" "$here/../examples/gpt2.mtc" "$out/l12" "$out/l12.log" -D L=12 $small
build_program "$mtc" "$here/../examples/gpt2.mtc" "$out/zero3_dp2_tp2" "$out/z.log" -D L=4 $small \
  --dp 2 --tp 2 --zero 3
for d in l4 l12; do check "$out/$d"; done
# (ZeRO-3 gathers each block's parameters as the block before it runs: the last block of forward
# and of backward starts no gather, and is written out)
check "$out/zero3_dp2_tp2" 2
n4=$(wc -l < "$out/l4/model.c") n12=$(wc -l < "$out/l12/model.c")
[ $((n12 * 4)) -le $((n4 * 5)) ] || { echo "FAIL: 12 layers take $n12 lines, 4 layers $n4"; ok=1; }
build_program "$mtc" "$here/fixtures/parity/hf_albert_mlm/model_o17.onnx" "$out/albert" "$out/a.log"
a=$out/albert/model.c
echo "albert: $(grep -c "^  for (int l = " "$a") loops, $(wc -l < "$a") lines"
grep -q "^  // ---- block 1, its shared layers' uses 0 to 2: one loop" "$a" &&
  grep -q "^  // ---- block 1, its shared layers' uses 1 to 0: one loop" "$a" ||
  { echo "FAIL: albert: want loops over uses 0 to 2 (forward) and 1 to 0 (backward)"; ok=1; }
[ "$(wc -l < "$a")" -lt 1500 ] || { echo "FAIL: albert: $(wc -l < "$a") lines"; ok=1; }
[ $ok -eq 0 ] && echo "PASS"
exit $ok
