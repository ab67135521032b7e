#!/usr/bin/env bash
# mtc plan with a layout (--dp, --tp, --zero, --micro-batches, --checkpoint, --swap)
# prices that layout instead of choosing one: its step split as the planner
# splits it, and its memory against the usable memory. The price is the one
# compile prints for the same flags (and the program beside its measured
# step); a layout that does not fit is reported, not refused; a cluster of
# another size, and --json beside a layout, are refused. A plan file compiled with --cluster
# is priced for those groups.
#
#   tests/plan_price.sh MTC EXAMPLES_DIR OUT
set -euo pipefail
mtc=$1 examples=$2 out=$3
rm -rf "$out"
mkdir -p "$out"
model=$examples/gpt2.mtc
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# dp 2 x tp 2, ZeRO-1, 3 micro-batches, the first layer checkpointed
flags=(--dp 2 --tp 2 --zero 1 --micro-batches 3 --checkpoint 1)
"$mtc" plan "$model" "${flags[@]}" > "$out/plan.txt"
cat "$out/plan.txt"
grep -q "^layout: dp 2 x tp 2, ZeRO-1, offload 0%, 3 micro-batches per replica, checkpointing the first layer, on 4 x H100-80GB$" \
  "$out/plan.txt" || fail "the layout line"
step=$(sed -n 's/^step: \([0-9.e+-]*\) ms = .*/\1/p' "$out/plan.txt")
parts=$(sed -n 's/^step: [0-9.e+-]* ms = //p' "$out/plan.txt")
# the split: every category, summing to the step (each printed to 4 digits)
awk -v s="$step" -v p="$parts" 'BEGIN {
  n = split(p, t, " [+] "); sum = 0;
  for (i = 1; i <= n; i++) { split(t[i], kv, " "); sum += kv[2] }
  exit !(n == 7 && sum > 0 && (sum - s) / s < 2e-3 && (s - sum) / s < 2e-3) }' ||
  fail "the split ($parts) does not sum to the step ($step ms)"
for part in recompute tensor_parallel data_parallel; do
  grep -Eq "$part [0-9.]*[1-9]" <<<"$parts" || fail "no $part in the split: $parts"
done
grep -q "^memory per GPU: [0-9.]* MiB of 78.0 GiB usable: fits$" "$out/plan.txt" ||
  fail "the memory line"
# compile prices the same layout alike (it prints 3 digits)
"$mtc" compile "$model" "${flags[@]}" -o "$out/prog" > "$out/compile.txt"
cstep=$(sed -n 's/^mtc: the planner prices a step of this layout at \([0-9.e+-]*\) ms on H100-80GB$/\1/p' \
  "$out/compile.txt")
awk -v a="$step" -v b="$cstep" 'BEGIN { exit !(b > 0 && (a - b) / b < 5e-3 && (b - a) / b < 5e-3) }' ||
  fail "plan prices $step ms, compile $cstep ms"
# activation swap: said, its copies priced as offload, compile prices it alike
sw=(--dp 2 --swap 1 --checkpoint 1)
"$mtc" plan "$model" "${sw[@]}" > "$out/swap.txt"
grep -q "^layout: dp 2 x tp 1, ZeRO-0, offload 0%, 1 micro-batch per replica, the first layer's activations swapped, checkpointing the first layer after them, on 2 x H100-80GB$" \
  "$out/swap.txt" || fail "the swap layout line: $(head -1 "$out/swap.txt")"
grep -Eq "offload [0-9.]*[1-9]" "$out/swap.txt" || fail "no offload time for swap: $(cat "$out/swap.txt")"
"$mtc" compile "$model" "${sw[@]}" -o "$out/swap" > "$out/swapc.txt"
a=$(sed -n 's/^step: \([0-9.e+-]*\) ms = .*/\1/p' "$out/swap.txt")
b=$(sed -n 's/^mtc: the planner prices a step of this layout at \([0-9.e+-]*\) ms on H100-80GB$/\1/p' \
  "$out/swapc.txt")
awk -v a="$a" -v b="$b" 'BEGIN { exit !(b > 0 && (a - b) / b < 5e-3 && (b - a) / b < 5e-3) }' ||
  fail "swap: plan prices $a ms, compile $b ms"
# a layout that does not fit: said, exit 0
"$mtc" plan "$model" -D L=48 -D C=1600 -D NH=25 -D T=1024 -D V=50257 -D B=16 --dp 8 \
  --gpu L4-24GB > "$out/big.txt" || fail "a layout that does not fit exits $?"
grep -q "^memory per GPU: [0-9.]* GiB of 20.5 GiB usable: does not fit$" "$out/big.txt" ||
  fail "no 'does not fit': $(cat "$out/big.txt")"
# refusals
if "$mtc" plan "$model" --dp 2 --gpus 8 > "$out/gpus.txt" 2>&1 ||
  ! grep -q "the layout runs on 2 GPUs; the cluster has 8" "$out/gpus.txt"; then
  fail "--dp 2 --gpus 8: $(cat "$out/gpus.txt")"
fi
if "$mtc" plan "$model" --tp 2 --json - > "$out/json.txt" 2>&1 ||
  ! grep -q "make plan price that one layout" "$out/json.txt"; then
  fail "--tp 2 --json -: $(cat "$out/json.txt")"
fi
# the solver's plan with per-block meshes (dp 2 x tp 2 for the embedding and head, the layers
# data parallel over those 4 ranks), as compile writes it (with the lowering's TP dim), applied
# again: the same layout and price
big=(-D L=8 -D C=64 -D NH=4 -D T=128 -D V=16384 -D B=8 --precision fp32)
"$mtc" compile "$model" "${big[@]}" --gpus 4 --gpu-mem 56MB --host-mem 0 -o "$out/mesh" \
  > "$out/mesh.txt" || fail "compile --gpus 4 --gpu-mem 56MB: $?"
"$mtc" compile "$model" "${big[@]}" --plan "$out/mesh/plan.json" -o "$out/mesh2" \
  > "$out/mesh2.txt" 2>&1 || fail "compile --plan of compile's plan.json: $(cat "$out/mesh2.txt")"
grep -qE '"dp":[[:space:]]*4,' "$out/mesh/plan.json" &&
  grep -qE '"tp":[[:space:]]*2,' "$out/mesh/plan.json" ||
  fail "compile's plan.json has no block data parallel over tp beside tp 2"
p1=$(grep "prices a step" "$out/mesh.txt") p2=$(grep "prices a step" "$out/mesh2.txt")
[ -n "$p1" ] && [ "$p1" = "$p2" ] || fail "prices differ: '$p1', '$p2'"
# the solver's plan for an H100 and an L4 (ZeRO-2, micro-batches of 3 and 1 sequences, the
# program built with B=3) applied again with --cluster: the same price, for those groups; a
# cluster of another size is refused
two=(-D L=2 -D C=256 -D NH=4 -D T=32 -D V=256 --precision fp32)
cluster=$(dirname "$0")/solver/h100_l4_zero2.json
"$mtc" compile "$model" "${two[@]}" -D B=1 --batch 8 --cluster "$cluster" -o "$out/two" \
  > "$out/two.txt" 2>&1 || fail "compile --cluster: $(cat "$out/two.txt")"
grep -qE '"micro":[[:space:]]*3,' "$out/two/plan.json" ||
  fail "compile --cluster: no micro-batch of 3"
grep -q "note: the groups' micro-batches are of their own sizes: the model is built with B=3" \
  "$out/two.txt" || fail "compile --cluster: no note of B=3: $(cat "$out/two.txt")"
"$mtc" compile "$model" "${two[@]}" -D B=3 --plan "$out/two/plan.json" --cluster "$cluster" \
  -o "$out/two2" > "$out/two2.txt" 2>&1 || fail "compile --plan --cluster: $(cat "$out/two2.txt")"
p1=$(grep "prices a step" "$out/two.txt") p2=$(grep "prices a step" "$out/two2.txt")
[ -n "$p1" ] && [ "$p1" = "$p2" ] && grep -q "on H100-80GB+L4-24GB$" <<< "$p2" ||
  fail "--plan --cluster: '$p2', compile --cluster '$p1'"
if "$mtc" compile "$model" "${two[@]}" -D B=3 --plan "$out/two/plan.json" \
    --cluster "$(dirname "$0")/solver/mixed.json" -o "$out/two3" > "$out/two3.txt" 2>&1 ||
    ! grep -q "plan.json runs on 2 ranks and .*mixed.json has 16 GPUs" "$out/two3.txt" ||
    [ -e "$out/two3" ]; then
  fail "--plan on a cluster of 16: $(cat "$out/two3.txt")"
fi
[ $fails = 0 ] && echo "plan_price: ok"
exit $((fails > 0))
