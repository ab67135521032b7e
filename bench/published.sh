#!/usr/bin/env bash
# The planner against published training runs: each run's model, GPUs,
# batch and layout through `mtc plan` (the layout fixed with --dp/--tp/
# --zero/--micro-batches/--checkpoint, as the run had it), its step time
# beside the one the run's authors report.
#
#   bench/published.sh [--markdown] [MTC]
#
# MTC defaults to build/mtc. Prints one row per run: the published step
# (seconds), mtc's, their ratio (mtc / published; the target is 0.9-1.1),
# and the planner's split of its step. Nothing runs on a GPU: this checks
# the cost model's constants for the built-in GPUs against runs whose
# authors measured them.
#
# Each run is priced on the model its authors ran: Megatron-LM's GPT (the Megatron and ZeRO-3
# rows) as examples/gpt_megatron.mtc, which writes attention out as Megatron did then (the T x T
# scores through a causal softmax and dropout, dropout on both residual branches); llm.c's as
# examples/gpt2.mtc (fused attention, no dropout). Megatron-LM's GEMMs of 2021 did not add their
# biases (it fused each bias into the elementwise pass after: GELU, or dropout and the residual):
# its rows are priced --no-epilogue, a bias add and a GELU each a pass; llm.c's GEMMs add theirs
# in cuBLASLt's epilogue, as mtc's do.
#
# Sources (every figure is the authors'; the step is derived only where
# they give FLOP/s instead):
# - Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
#   Clusters Using Megatron-LM", SC'21, Table 1 (GPT, vocabulary 51,200,
#   sequence 2048, full activation recomputation, A100-80GB on Selene, 8 per
#   node, 8 x 200 Gb/s InfiniBand per node): the rows without pipeline
#   parallelism. Step = 96 B s l h^2 (1 + s/6h + V/16lh) FLOPs (the paper's
#   count, recomputation included) / (GPUs x the TFLOP/s per GPU it reports).
#   The micro-batch is not stated: 4 here. mtc's step moves with it: at 1.7B
#   3717, 3472 and 3169 ms for micro-batches of 2, 4 and 8; at 18.4B 8508,
#   8177 and 7795 (mtc plan examples/gpt_megatron.mtc with the row's flags,
#   -D B=2/4/8 and --micro-batches 8/4/2 and 16/8/4, 2026-12-07).
# - The same paper, Table 2: ZeRO-3 without model parallelism, 175B (96
#   layers, hidden 12288, 96 heads), batch 1536, micro-batch 4/2/1 at
#   384/768/1536 GPUs, 144/88/44 TFLOP/s per GPU; recomputation as above.
#   DeepSpeed's ZeRO-3 in fp16 reduces the fp16 gradients (its communication_data_type is the
#   parameters' type unless set): --grad-precision bf16, the same bytes.
# - llm.c's run scripts (karpathy/llm.c scripts/run_gpt2_{124M,350M,774M,
#   1558M}.sh): "steps in ~300ms/iter", "~820ms/iter", "~1.7s/iter" on 8 x
#   A100 80GB SXM, "2.80s/iter" on 8 x H100 80GB SXM; -b micro-batch, -t
#   1024, -d tokens per step, -z 1 (ZeRO-1), -r 0 (no recomputation), bf16,
#   vocabulary padded to 50304 (mtc's bf16 programs pad 50257 the same way); its gradients
#   are bf16 (floatX), reduced in bf16: --grad-precision bf16.
set -euo pipefail
cd "$(dirname "$0")/.."
cmdline="bench/published.sh${*:+ $*}"
mtc=build/mtc
markdown=0
while [ $# -gt 0 ]; do
  case $1 in
  --markdown) markdown=1; shift ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "bench/published.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  *) mtc=$1; shift ;;
  esac
done
[ -x "$mtc" ] || { echo "no $mtc: build first (cmake -S . -B build && cmake --build build)"; exit 1; }

# Megatron's FLOPs per step (its formula), for a published TFLOP/s per GPU:
# the step in seconds. Args: batch seq layers hidden vocab gpus tflops.
megatron_step() {
  awk -v B="$1" -v s="$2" -v l="$3" -v h="$4" -v V="$5" -v n="$6" -v t="$7" 'BEGIN {
    f = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    printf "%.4g", f / (n * t * 1e12) }'
}

gpt() {   # layers hidden heads vocab seq micro-batch: the dims of examples/gpt*.mtc
  echo "-D L=$1 -D C=$2 -D NH=$3 -D V=$4 -D T=$5 -D B=$6"
}
megatron=examples/gpt_megatron.mtc llmc=examples/gpt2.mtc

# name|source|published seconds|model|mtc plan arguments
runs=(
  "Megatron GPT 1.7B, 32 A100|SC'21 Table 1, 137 TFLOP/s|$(megatron_step 512 2048 24 2304 51200 32 137)|$megatron|$(gpt 24 2304 24 51200 2048 4) --gpu A100-80GB --dp 32 --micro-batches 4 --checkpoint all --no-epilogue"
  "Megatron GPT 3.6B, 64 A100, TP2|SC'21 Table 1, 138 TFLOP/s|$(megatron_step 512 2048 30 3072 51200 64 138)|$megatron|$(gpt 30 3072 32 51200 2048 4) --gpu A100-80GB --dp 32 --tp 2 --micro-batches 4 --checkpoint all --no-epilogue"
  "Megatron GPT 7.5B, 128 A100, TP4|SC'21 Table 1, 142 TFLOP/s|$(megatron_step 512 2048 36 4096 51200 128 142)|$megatron|$(gpt 36 4096 32 51200 2048 4) --gpu A100-80GB --dp 32 --tp 4 --micro-batches 4 --checkpoint all --no-epilogue"
  "Megatron GPT 18.4B, 256 A100, TP8|SC'21 Table 1, 135 TFLOP/s|$(megatron_step 1024 2048 40 6144 51200 256 135)|$megatron|$(gpt 40 6144 48 51200 2048 4) --gpu A100-80GB --dp 32 --tp 8 --micro-batches 8 --checkpoint all --no-epilogue"
  "ZeRO-3 GPT 175B, 384 A100|SC'21 Table 2, 144 TFLOP/s|$(megatron_step 1536 2048 96 12288 51200 384 144)|$megatron|$(gpt 96 12288 96 51200 2048 4) --gpu A100-80GB --dp 384 --zero 3 --checkpoint all --grad-precision bf16 --no-epilogue"
  "ZeRO-3 GPT 175B, 768 A100|SC'21 Table 2, 88 TFLOP/s|$(megatron_step 1536 2048 96 12288 51200 768 88)|$megatron|$(gpt 96 12288 96 51200 2048 2) --gpu A100-80GB --dp 768 --zero 3 --checkpoint all --grad-precision bf16 --no-epilogue"
  "ZeRO-3 GPT 175B, 1536 A100|SC'21 Table 2, 44 TFLOP/s|$(megatron_step 1536 2048 96 12288 51200 1536 44)|$megatron|$(gpt 96 12288 96 51200 2048 1) --gpu A100-80GB --dp 1536 --zero 3 --checkpoint all --grad-precision bf16 --no-epilogue"
  "llm.c GPT-2 124M, 8 A100|run_gpt2_124M.sh|0.30|$llmc|$(gpt 12 768 12 50257 1024 64) --gpu A100-80GB --dp 8 --zero 1 --grad-precision bf16"
  "llm.c GPT-2 350M, 8 A100|run_gpt2_350M.sh|0.82|$llmc|$(gpt 24 1024 16 50257 1024 64) --gpu A100-80GB --dp 8 --zero 1 --grad-precision bf16"
  "llm.c GPT-2 774M, 8 A100|run_gpt2_774M.sh|1.70|$llmc|$(gpt 36 1280 20 50257 1024 32) --gpu A100-80GB --dp 8 --zero 1 --micro-batches 2 --grad-precision bf16"
  "llm.c GPT-2 1558M, 8 H100|run_gpt2_1558M.sh|2.80|$llmc|$(gpt 48 1600 25 50257 1024 16) --gpu H100-80GB --dp 8 --zero 1 --micro-batches 8 --grad-precision bf16"
)

if [ $markdown = 1 ]; then
  echo "| run | source | published s | mtc s | mtc / published | mtc's split (ms) |"
  echo "|---|---|---|---|---|---|"
else
  printf "%-36s %12s %9s %7s  %s\n" run published mtc ratio "mtc's split (ms)"
fi
within=0
total=0
for r in "${runs[@]}"; do
  IFS='|' read -r name source pub model args <<<"$r"
  # shellcheck disable=SC2086
  out=$("$mtc" plan "$model" $args) || { echo "$name: mtc plan $model $args failed" >&2; exit 1; }
  step=$(sed -n 's/^step: \([0-9.e+-]*\) ms = \(.*\)/\1/p' <<<"$out")
  split=$(sed -n 's/^step: [0-9.e+-]* ms = //p' <<<"$out" | sed 's/ + /, /g')
  fits=$(sed -n 's/^memory per GPU: .*: //p' <<<"$out")
  [ -n "$step" ] || { echo "$name: no step in mtc's output:" >&2; echo "$out" >&2; exit 1; }
  read -r mtc_s ratio ok < <(awk -v m="$step" -v p="$pub" 'BEGIN {
    r = m / 1e3 / p; printf "%.4g %.2f %d\n", m / 1e3, r, (r >= 0.9 && r <= 1.1) }')
  [ "$fits" = fits ] || split="$split; $fits"
  within=$((within + ok))
  total=$((total + 1))
  if [ $markdown = 1 ]; then
    echo "| $name | $source | $pub | $mtc_s | $ratio | $split |"
  else
    printf "%-36s %12s %9s %7s  %s\n" "$name" "$pub" "$mtc_s" "$ratio" "$split"
  fi
done
echo
echo "$within of $total runs within 10% (ratio 0.9-1.1); $cmdline, $(date -u +%Y-%m-%d)"
