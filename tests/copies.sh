#!/usr/bin/env bash
# Where passes/copies.c starts and finishes the copies between device and host memory and
# ZeRO-3's gathers, read
# from `mtc inspect --dump-after copies` of GPT-2 (3 layers):
#   - every copy has a slot, and one copy_wait of that slot follows it in its phase;
#   - --swap all: each swapped activation's wait is in its layer's stretch, and most have
#     compute between the start and the wait (the copy runs beside it);
#   - --offload-grads with 2 micro-batches: each layer's gradient bucket waits in the next
#     block's backward (the block before it), and the host's sum of it comes right after;
#   - --zero 3: each layer's gather starts in the stretch before its own (a block ahead);
#   - with 5 layers the swap, ZeRO-3 and gradient-offload programs keep their loops over the
#     layers (the emitted model.c; the gathered parameters and the gradient buckets in flight
#     in two buffers taken in turn) and train as the program without (with the same
#     micro-batches): 5 AdamW losses to 1e-5, the weights to 1e-4.
# That the places are right (nothing reads a copy's output or writes its input before its
# wait) is what every offload and swap test against one rank checks: the CPU build makes each
# copy at its wait.
# usage: copies.sh MTC OUTDIR
set -euo pipefail
mtc=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
model="$here/../examples/gpt2.mtc"
dims=(-D L=3 -D C=64 -D NH=4 -D T=16 -D V=256 -D B=4)
mkdir -p "$out"
ok=0

# the copies and waits of a dump: "PHASE LINE OP SLOT BLOCK NODES" per line (BLOCK 0: outside
# any; NODES: the other nodes before it)
copies() {
  awk '/^(forward|backward|update)$/ { phase = $1; next }
       /= (to_host|from_host)\(|^  (to_device|copy_wait)\(/ {
         op = $0; sub(/\(.*/, "", op); sub(/.*= /, "", op); sub(/^ +/, "", op)
         slot = $0; sub(/.* slot=/, "", slot); sub(/ .*/, "", slot)
         if ($0 !~ / slot=/) slot = "none"
         block = 0; if (match($0, / #[0-9]+/)) block = substr($0, RSTART + 2, RLENGTH - 2)
         print phase, NR, op, slot, block, nodes; next }
       phase && /^  / { nodes++ }' "$1"
}

# each start's wait: "SLOT START_LINE WAIT_LINE START_BLOCK WAIT_BLOCK OP NODES_BETWEEN",
# failing on a copy without a slot, a slot without one wait after its start in its phase
pairs() {
  awk '$3 != "copy_wait" {
         if ($4 == "none") { print "FAIL: a copy without a slot at line " $2; exit 1 }
         start[$4] = $2; sblock[$4] = $5; sphase[$4] = $1; sop[$4] = $3; snodes[$4] = $6; next }
       { if (!($4 in start) || $4 in done || sphase[$4] != $1) {
           print "FAIL: copy_wait slot " $4 " at line " $2 " finishes no copy of its phase"
           exit 1 }
         done[$4] = 1; print $4, start[$4], $2, sblock[$4], $5, sop[$4], $6 - snodes[$4] }
       END { for (s in start)
               if (!(s in done)) { print "FAIL: slot " s " is never waited for"; exit 1 } }'
}

"$mtc" inspect "$model" "${dims[@]}" --swap all --dump-after copies > "$out/swap.ir"
copies "$out/swap.ir" | pairs > "$out/swap.pairs" || { cat "$out/swap.pairs"; exit 1; }
read -r starts beside same <<< "$(awk '$6 == "to_host" { n++; if ($7 > 0) b++; if ($4 == $5) s++ }
  END { print n + 0, b + 0, s + 0 }' "$out/swap.pairs")"
echo "--swap all: $starts activations to the host, $beside with compute before their wait," \
  "$same waited in their layer"
[ "$starts" -gt 0 ] && [ "$same" = "$starts" ] ||
  { echo "FAIL: a swapped activation waits outside its layer"; ok=1; }
[ $((2 * beside)) -gt "$starts" ] ||
  { echo "FAIL: most swap copies should run beside compute"; ok=1; }

"$mtc" inspect "$model" "${dims[@]}" --offload-grads --micro-batches 2 --dump-after copies \
  > "$out/grads.ir"
copies "$out/grads.ir" | pairs > "$out/grads.pairs" || { cat "$out/grads.pairs"; exit 1; }
# a layer's bucket (block b > 1) waits in block b - 1; the host's sum follows its wait
read -r layers next <<< "$(awk '$6 == "to_host" && $4 > 1 { n++; if ($5 == $4 - 1) m++ }
  END { print n + 0, m + 0 }' "$out/grads.pairs")"
echo "--offload-grads: $layers layers' gradient buckets after the first," \
  "$next waited in the next block"
[ "$layers" = 2 ] && [ "$next" = 2 ] ||
  { echo "FAIL: want 2 buckets waited in the next block"; ok=1; }
summed=$(awk '/^  copy_wait\(/ { w = 1; next } w && /^  accumulate\(%grads\.host/ { n++ } { w = 0 }
  END { print n + 0 }' "$out/grads.ir")
[ "$summed" = 4 ] || { echo "FAIL: want the host's 4 sums right after their waits, $summed"; ok=1; }

# ZeRO-3 gathers a block's parameters while the block before it runs: forward's all-gather of
# block k in block k - 1's stretch, backward's in block k + 1's (its wait in its own)
"$mtc" inspect "$model" "${dims[@]}" --zero 3 --dump-after copies > "$out/zero3.ir"
read -r gathers ahead <<< "$(awk '/^(forward|backward|update)$/ { phase = $1 }
  /^  all_gather\(%[a-z]+\.(fwd|bwd)\.b[0-9]+\)/ {
    k = $0; sub(/^[^)]*\.b/, "", k); sub(/\).*/, "", k); k += 0
    b = 0; if (match($0, / #[0-9]+/)) b = substr($0, RSTART + 2, RLENGTH - 2) + 0
    if (phase == "forward" && k >= 2) { n++; m += b == k - 1 }
    if (phase == "backward" && k >= 1 && k <= 2) { n++; m += b == k + 1 } }
  END { print n + 0, m + 0 }' "$out/zero3.ir")"
echo "--zero 3: $gathers layers' gathers after the first of their phase, $ahead a block ahead"
[ "$gathers" = 4 ] && [ "$ahead" = 4 ] || { echo "FAIL: want 4 gathers a block ahead"; ok=1; }

# 5 layers: the loops run 4 and 5 blocks (backward's gradient buckets in two buffers taken in
# turn), and each program trains as its reference without offload or swap does (RUN|FLAGS|REF)
. "$here/lib.sh"
export OMP_NUM_THREADS=1
check="/usr/bin/python3 $here/../tools/parity_check.py"
for run in "none||" "swap|--swap all|none" "zero3|--zero 3|none" \
           "micro|-D B=2 --micro-batches 2|" \
           "grads|--offload-grads -D B=2 --micro-batches 2|micro"; do
  IFS='|' read -r name flags ref <<< "$run"
  # shellcheck disable=SC2086
  build_program "$mtc" "$model" "$out/$name" "$out/$name.log" "${dims[@]}" -D L=5 $flags
  "$out/$name/train" --optimizer adamw --seed 7 --steps 5 --save "$out/$name.safetensors" \
    > "$out/$name.train.log"
  [ -z "$ref" ] && continue
  loops=$(grep -c "one loop" "$out/$name/model.c" || true)
  turns=$(grep -c "(l & 1) \*" "$out/$name/model.c" || true)
  echo "$name: $loops loops over the layers, $turns calls on buffers taken in turn"
  [ "$loops" -ge 3 ] || { echo "FAIL: $name lost a loop over the layers"; ok=1; }
  [ "$name" != zero3 ] || [ "$turns" -gt 0 ] ||
    { echo "FAIL: the gathered parameters should take two buffers in turn"; ok=1; }
  $check logs "$out/$ref.train.log" "$out/$name.train.log" --tol 1e-5 | tail -1 || ok=1
  $check grads "$out/$ref.safetensors" "$out/$name.safetensors" --tol 1e-4 | tail -1 || ok=1
done
[ "$turns" -gt 0 ] || { echo "FAIL: the gradient buckets should take two buffers in turn"; ok=1; }
[ $ok = 0 ] && echo "copies: ok"
exit $ok
