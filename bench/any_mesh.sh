#!/usr/bin/env bash
# Which plans of `mtc plan --any-mesh` does `mtc compile --plan` run? GPT-2 774M on L4s and GPT-2
# 1.5B with 32 heads on H100s (also under --seq-parallel), on 8 to 64 GPUs of 2 to 4.5 GiB with
# no host memory: a row per plan that fits (its blocks' layouts, its step, and compile's
# refusal if any), then how many compile.
#
#   bench/any_mesh.sh MTC   (from the repository root; about a minute on 2 cores)
set -uo pipefail
mtc=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
models=(
  "GPT-2 774M|-D L=36 -D C=1280 -D NH=20 -D V=50257 -D T=1024 --gpu L4-24GB"
  "GPT-2 1.5B|-D L=48 -D C=1600 -D NH=32 -D V=50257 -D T=1024 --gpu H100-80GB"
  "GPT-2 1.5B SP|-D L=48 -D C=1600 -D NH=32 -D V=50257 -D T=1024 --gpu H100-80GB --seq-parallel"
)
echo "| model | GPUs | memory | layouts | step (ms) | mtc compile --plan |"
echo "|---|---:|---:|---|---:|---|"
plans=0 runs=0
for m in "${models[@]}"; do
  IFS='|' read -r name flags <<< "$m"
  for gpus in 8 16 32 64; do
    for mem in 2GiB 2500MiB 3GiB 3500MiB 4GiB 4500MiB; do
      # shellcheck disable=SC2086
      "$mtc" plan examples/gpt2.mtc $flags --gpus "$gpus" --gpu-mem "$mem" --host-mem 0 \
        --any-mesh --json "$tmp/plan.json" > "$tmp/plan.txt" 2>&1 || continue
      plans=$((plans + 1))
      layouts=$(/usr/bin/python3 -c "
import json
p = json.load(open('$tmp/plan.json'))
print(', '.join(sorted({'%d x %s' % (b['dp'], '2D %dx%d' % (b['q'], b['q']) if b['q'] > 1
                        else 'TP%d' % b['tp'] if b['tp'] > 1 else 'DP') for b in p['blocks']})))")
      step=$(sed -n 's/^step time \([0-9.]*\) ms.*/\1/p' "$tmp/plan.txt")
      dims=$(grep -o -- '-D [^ ]*' <<< "$flags" | tr '\n' ' ')
      rm -rf "$tmp/prog"
      # shellcheck disable=SC2086
      if "$mtc" compile examples/gpt2.mtc $dims --plan "$tmp/plan.json" -o "$tmp/prog" \
          > "$tmp/compile.txt" 2>&1; then
        runs=$((runs + 1))
        verdict="runs"
      else
        verdict="refused: $(grep -m1 -o 'error: .*' "$tmp/compile.txt" | cut -c8-110)"
      fi
      echo "| $name | $gpus | $mem | $layouts | $step | $verdict |"
    done
  done
done
echo
echo "$runs of $plans plans compile"
