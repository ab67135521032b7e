#!/usr/bin/env bash
# mtc calibrate's measuring program as the GPU build makes it, run on the CPU by the CUDA
# emulation at its smallest (--tiny): it measures through device memory (a stage put to the
# arena, clocks read after the device), prints a profile that names the GPU as CUDA does
# (the emulation's "NVIDIA H100 80GB HBM3"), with the float32 and bf16 kernels' figures, and
# mtc calibrate --program reads it as the planner's H100-80GB with the measured rates.
#
#   tests/calibrate_gpu_emu.sh MTC CALIBRATE_GPU_EMU EXAMPLES_DIR OUT
set -euo pipefail
mtc=$1 prog=$2 examples=$3 out=$4
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib.sh
source "$here/lib.sh"
rm -rf "$out"
mkdir -p "$out"

"$prog" 1 --tiny > "$out/raw.json" 2> "$out/raw.err" ||
  fail "the emulated run: $(cat "$out/raw.err")"
grep -q '"gpu": "NVIDIA H100 80GB HBM3 (emulated)", "count": 1, "gpus_per_node": 1, "sms": 2,' \
  "$out/raw.json" || fail "the profile's GPU: $(head -6 "$out/raw.json")"
# no CPU's keys, no links measured by one rank
! grep -Eq '"(cores|threads|intra_bw|inter_bw)"' "$out/raw.json" ||
  fail "a GPU profile with a CPU's keys: $(head -12 "$out/raw.json")"
# the ops' float32 and bf16 seconds per element, attention's four rates, GEMMs of two types
grep -Eq '^ *"layernorm": \[\[65536, [0-9.e+-]+, [0-9.e+-]+\]\],$' "$out/raw.json" ||
  fail "the profile's ops: $(grep -A3 '"ops"' "$out/raw.json")"
grep -Eq '^ *\[64, 32(, [0-9.e+-]+){4}\]$' "$out/raw.json" ||
  fail "the profile's attention: $(grep -A2 '"attention"' "$out/raw.json")"
grep -Eq '^ *\[128, 128, 128, [0-9.e+-]+, [0-9.e+-]+\]$' "$out/raw.json" ||
  fail "the profile's GEMMs: $(grep -A2 '"gemm"' "$out/raw.json")"

# mtc calibrate with it (at its smallest: a program that runs it so): read as the built-in
# entry, the measured rates in its place. The emulation's GEMMs run at the CPU's speed of a
# reference GEMM (under the sanitizers, 64 MFLOP/s), below any GPU's peak that a profile may
# give: its peaks are scaled by 1e4 first.
cat > "$out/tiny" << EOF
#!/bin/sh
"$prog" "\$1" --tiny | python3 -c '
import json, sys
p = json.load(sys.stdin)
for k in ("flops_fp32", "flops_bf16"):
    p["groups"][0][k] *= 1e4
json.dump(p, sys.stdout, indent=1)'
EOF
chmod +x "$out/tiny"
"$mtc" calibrate --program "$out/tiny" -o "$out/gpu.json" 2> "$out/gpu.err" ||
  fail "calibrate --program: $(cat "$out/gpu.err")"
summary="^mtc calibrate: NVIDIA H100 80GB HBM3 (emulated* (the planner.s H100-80GB), 1 rank: "
grep -q "${summary}GEMMs up to [0-9.]* TFLOP/s" "$out/gpu.err" ||
  fail "calibrate's summary of a GPU: $(cat "$out/gpu.err")"
"$mtc" plan "$examples/gpt2.mtc" --device "$out/gpu.json" --gpus 2 > "$out/plan.txt" 2>&1 ||
  fail "plan on the GPU profile: $(cat "$out/plan.txt")"
grep -q "^cluster: 2 x H100-80GB (80.0 GiB" "$out/plan.txt" ||
  fail "the plan's cluster: $(head -3 "$out/plan.txt")"
echo "ok: calibrate_gpu_emu"
