#!/usr/bin/env bash
# The GPU build of an emitted program against its CPU build (label gpu): the
# same model, weights and batch (FIXTURE from tests/fixtures/parity), each
# build's first loss and every gradient after one backward, then 10 AdamW
# steps: the losses and the weights after them. Every relative error must be
# within 1e-4 (fp32 on both, TF32 off). Then the device memory the program
# measured (cudaMemGetInfo) must be what it planned: the arena and the
# workspace, to the allocator's 2 MiB granularity.
#
#   gpu_program.sh MTC MODEL FIXTURE OUTDIR
#
# Exits 77 (ctest: skipped) without nvcc, without a CUDA device, or without
# numpy.
set -euo pipefail
mtc=$1 model=$2 fix=$3 out=$4
# shellcheck source=tests/numpy.sh
source "$(dirname "$0")/numpy.sh"
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
check() { "$python" "$tools/parity_check.py" "$@"; }

nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
[ -x "$nvcc" ] || { echo "SKIP: no nvcc at $nvcc"; exit 77; }
if ! nvidia-smi -L > /dev/null 2>&1; then
  echo "SKIP: no CUDA device (nvidia-smi -L)"
  exit 77
fi

# shellcheck disable=SC2034  # sgd_args is read by nothing here
mtc_args="" load="" adamw_args="" sgd_args=""
# shellcheck source=/dev/null
source "$fix/parity.env"

rm -rf "$out"
mkdir -p "$out"
# shellcheck disable=SC2086
"$mtc" compile "$model" -o "$out/prog" $mtc_args > "$out/compile.log"
make_program "$out/prog" "-O2 -fopenmp -std=c11 -Wall -Wextra -Werror"
cp "$out/prog/build/gpu/train" "$out/train_gpu"
cp "$out/prog/train" "$out/train_cpu"

run() {  # run KIND LOG ARGS...
  local kind=$1 log=$2
  shift 2
  local weights=()
  [ -n "$load" ] && weights=(--load "$fix/$load")
  (cd "$out/prog" && "$out/train_$kind" --inputs "$fix/batch.safetensors" "${weights[@]}" "$@") \
    > "$out/$log" 2>&1 || { cat "$out/$log"; echo "FAIL: train_$kind $*"; exit 1; }
}

status=0
for kind in cpu gpu; do
  run "$kind" "grads_$kind.log" --steps 1 --lr 0 --dump-grads "$out/grads_$kind.safetensors"
  # shellcheck disable=SC2086
  run "$kind" "adamw_$kind.log" --steps 10 $adamw_args --save "$out/w_$kind.safetensors"
done
echo "first loss and gradients (GPU against CPU):"
check logs "$out/grads_cpu.log" "$out/grads_gpu.log" --tol 1e-4 || status=1
check grads "$out/grads_cpu.safetensors" "$out/grads_gpu.safetensors" --tol 1e-4 || status=1
echo "10 AdamW steps: losses and weights:"
check logs "$out/adamw_cpu.log" "$out/adamw_gpu.log" --tol 1e-4 || status=1
check grads "$out/w_cpu.safetensors" "$out/w_gpu.safetensors" --tol 1e-4 || status=1

# "device: NAME | arena and workspace N bytes" and "measured: ... (cudaMemGetInfo) M bytes"
planned=$(sed -n 's/^device: .*| arena and workspace \([0-9]*\) bytes$/\1/p' "$out/adamw_gpu.log")
measured=$(sed -n 's/.*(cudaMemGetInfo) \([0-9]*\) bytes.*/\1/p' "$out/adamw_gpu.log")
if [ -z "$planned" ] || [ -z "$measured" ]; then
  echo "FAIL: no planned or measured device memory in the GPU program's output"
  status=1
else
  granule=$((2 << 20))
  rounded=$(( (planned + granule - 1) / granule * granule ))
  echo "device memory: planned $planned bytes ($rounded in 2 MiB pages), measured $measured"
  if [ "$measured" -lt "$planned" ] || [ "$measured" -gt "$rounded" ]; then
    echo "FAIL: measured device memory is not the planned arena and workspace"
    status=1
  fi
fi
[ "$status" -eq 0 ] && echo "ok: $model: the GPU build matches the CPU build"
exit "$status"
