#!/usr/bin/env bash
# GEMM epilogues (passes/epilogue.c) on GPT-2 (examples/gpt2.mtc, L=2):
#   - the loss and its gradient fuse (cross_entropy_fused, in forward), no cross_entropy or
#     cross_entropy_bwd left; each layer's attention residual and the norm after it
#     (add_layernorm; the layer's first norm reads the previous layer's residual, in another
#     block); the fp32 and bf16 comparisons below cover both;
#   - each layer's four linear layers fuse: matmul_bias for qkv, the attention's projection and
#     the MLP's output, and with act=1 (its GELU) for the MLP's input; no add of a bias and no
#     GELU is left in the forward; backward, each bias's gradient joins its weight's GEMM
#     (matmul_bgrad), leaving one sum_to (the position embedding's); --no-epilogue leaves none
#     fused;
#   - under tp 2 the row-parallel layers (attention's projection, the MLP's output: their
#     products all-reduced before the bias) stay a matmul and an add, the column-parallel fuse;
#   - fp32: the fused program's losses and final weights equal --no-epilogue's bit for bit (the
#     GEMM's float32 sums plus the bias, gelu_f, and reduce_sum's sums of the bias gradients, as
#     the separate kernels compute them);
#   - bf16: the fused program (one rounding of each sum) trains within bf16's rounding of the
#     unfused one (relative 2e-2 on every loss).
#
#   epilogue.sh MTC MODEL OUTDIR
set -euo pipefail
mtc=$1 model=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib.sh
source "$here/lib.sh"
rm -rf "$out"
mkdir -p "$out"
dims=(-D L=2)

count() {   # OP FILE: the nodes of op in an IR dump
  grep -c "= $1(" "$2" || true
}
forward() {   # FILE: the dump's forward nodes (before the first gradient)
  sed -n '/= matmul_bias\|= matmul(/,$p' "$1" | sed '/%d\./,$d'
}

"$mtc" inspect "$model" "${dims[@]}" --dump-after epilogue > "$out/fused.ir"
"$mtc" inspect "$model" "${dims[@]}" --no-epilogue --dump-after epilogue > "$out/plain.ir"
forward "$out/fused.ir" > "$out/fused.fwd"
fail=0
expect() {   # WHAT GOT WANT
  if [ "$2" != "$3" ]; then
    echo "FAIL: $1: $2, expected $3"
    fail=1
  else
    echo "ok: $1: $2"
  fi
}
expect "matmul_bias nodes" "$(count matmul_bias "$out/fused.ir")" 8
expect "of them with GELU" "$(grep -c "= matmul_bias(.*act=1" "$out/fused.ir" || true)" 2
expect "matmul_bias nodes in the forward extract" "$(count matmul_bias "$out/fused.fwd")" 8
expect "GELUs left in forward" "$(count gelu "$out/fused.fwd")" 0
expect "matmul_bgrad nodes" "$(count matmul_bgrad "$out/fused.ir")" 8
expect "sum_to nodes left" "$(count sum_to "$out/fused.ir")" 1
expect "matmul_bias and matmul_bgrad nodes, --no-epilogue" \
  "$(($(count matmul_bias "$out/plain.ir") + $(count matmul_bgrad "$out/plain.ir")))" 0
expect "cross_entropy_fused nodes" "$(count cross_entropy_fused "$out/fused.ir")" 1
expect "the first node to make a gradient is cross_entropy_fused" \
  "$(grep -m1 '%d\.' "$out/fused.ir" | grep -c '= cross_entropy_fused(' || true)" 1
expect "cross_entropy and cross_entropy_bwd nodes left" \
  "$(($(count cross_entropy "$out/fused.ir") + $(count cross_entropy_bwd "$out/fused.ir")))" 0
expect "cross_entropy_fused nodes, --no-epilogue" "$(count cross_entropy_fused "$out/plain.ir")" 0
expect "add_layernorm nodes (each layer's second norm)" "$(count add_layernorm "$out/fused.ir")" 2
expect "layernorm nodes left (each layer's first, the last)" "$(count layernorm "$out/fused.ir")" 3
expect "add_layernorm nodes, --no-epilogue" "$(count add_layernorm "$out/plain.ir")" 0

"$mtc" compile "$model" "${dims[@]}" --tp 2 --gpus 2 --dump-after epilogue -o "$out/tp2" \
  > "$out/tp2.ir"
expect "matmul_bias nodes under tp 2 (qkv, MLP input)" "$(count matmul_bias "$out/tp2.ir")" 4

for prec in fp32 bf16; do
  for f in fused plain; do
    flag=()
    [ $f = plain ] && flag=(--no-epilogue)
    "$mtc" compile "$model" "${dims[@]}" --precision $prec "${flag[@]}" -o "$out/$prec-$f" \
      > "$out/$prec-$f.log"
    make_program "$out/$prec-$f" "$MTC_TEST_CFLAGS"
    (cd "$out/$prec-$f" && ./train --steps 8 --save final.safetensors > train.log)
    sed -n 's/^step \([0-9]*\)\/[0-9]* | loss \([^ ]*\) .*/\1 \2/p' "$out/$prec-$f/train.log" \
      > "$out/$prec-$f.loss"
  done
done
if cmp -s "$out/fp32-fused.loss" "$out/fp32-plain.loss" &&
    cmp -s "$out/fp32-fused/final.safetensors" "$out/fp32-plain/final.safetensors"; then
  echo "ok: fp32: 8 steps' losses and the final weights equal --no-epilogue's bit for bit"
else
  echo "FAIL: fp32: fused and unfused programs differ"
  paste "$out/fp32-fused.loss" "$out/fp32-plain.loss"
  fail=1
fi
if awk 'NR == FNR { want[$1] = $2; next }
        { d = $2 - want[$1]; if (d < 0) d = -d; if (d > 2e-2 * want[$1]) bad = 1; n++ }
        END { exit bad || n != 8 }' "$out/bf16-plain.loss" "$out/bf16-fused.loss"; then
  echo "ok: bf16: 8 steps' losses within 2e-2 of --no-epilogue's"
else
  echo "FAIL: bf16: fused and unfused losses differ beyond bf16's rounding"
  paste "$out/bf16-fused.loss" "$out/bf16-plain.loss"
  fail=1
fi
exit $fail
