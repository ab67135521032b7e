#!/usr/bin/env bash
# The one-shot GPU check. A GPU is lent now and then, for minutes; this script
# splits the work so that everything that needs no GPU is done beforehand:
#
#   tools/gpu_check.sh prepare DIR   # here, without a GPU
#   tools/gpu_check.sh run DIR OUT   # on the GPU machine, from the repository root
#
# prepare builds mtc and the kernel twin test (tests/test_kernels_cuda.cu),
# compiles every test program (the parity fixtures: DSL, ONNX and Hugging Face
# exports) and builds each twice, with nvcc for sm_90 and for the CPU; runs
# the CPU builds for the references (first loss and gradients; 10 AdamW steps
# and the weights after them); compiles the benchmark programs (GPT-2 124M
# and 350M at T=1024, BENCH_RUNS; the programs draw their weights); and
# copies the shared libraries the binaries need that the device image lacks.
# DIR must be ignored by git, and DIR.txz too: prepare packs DIR into it
# (xz over the whole folder: the programs' binaries are nearly the same, 7 MB
# for 63), and that file travels as the carried path; run unpacks it when DIR
# is not there.
#
# run does, each stage under its own timeout, logging into OUT as it goes:
# nvidia-smi; the kernel twins; every program's GPU build against its CPU
# build and against PyTorch's reference (1e-4, fp32 with TF32 off; the _bf16
# cases against the CPU's bf16 build and PyTorch's bf16 autocast, with
# tests/parity_bf16.sh's tolerances), and its
# measured device memory against the planned; compute-sanitizer memcheck and
# racecheck on a small program; the program's start-up time; the benchmark
# (bench/gpu_gpt2.py); its first program's steps by op beside the planner's
# price (train --profile); mtc calibrate on the GPU (OUT/gpu_profile.json) and
# each benchmark program's measured step beside the planner's price on the
# built-in H100 and on that profile; the first program by kernel (Nsight
# Compute). It ends with a summary table (OUT/summary.txt) and OUT/logs.tgz.
#
#   tools/gpu_check.sh one MTC NAME OUTDIR   # one case, prepared and run (ctest's gpu tests)
#
# GPU_CHECK_ONLY=REGEX (prepare and run) keeps the cases whose names match;
# GPU_CHECK_TORCH=MODES the PyTorch runs of the benchmark (none: "none").
# GPU_CHECK_CASE_LIMIT=SECONDS (run) each case's time limit (60).
# GPU_CHECK_BENCH, _PROFILE, _CALIBRATE=0 (run) leave out that stage.
# GPU_CHECK_BENCH_RUNS="NAME|SIZE|B|PRECISION ..." (prepare) the benchmark programs.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fixtures=tests/fixtures/parity

# name|model|fixture, the model relative to the repository root
cases() {
  local c
  for c in "gpt2_dsl|examples/gpt2.mtc|gpt2_dsl" "llama_dsl|examples/llama.mtc|llama_dsl" \
    "mlp_dsl|$fixtures/mlp_dsl/mlp.mtc|mlp_dsl"; do
    echo "$c"
  done
  for m in gpt2 encoder mlp; do echo "${m}_o17|$fixtures/$m/model_o17.onnx|$m"; done
  for m in gpt2 gpt2_mask llama llama_mask bert_mlm bert_cls vit t5; do
    echo "hf_${m}_o17|$fixtures/hf_$m/model_o17.onnx|hf_$m"
  done
  echo "hf_t5_gated_o17_dyn|$fixtures/hf_t5_gated/model_o17_dyn.onnx|hf_t5_gated"
  # bf16 mixed precision (a name ending in _bf16), against the CPU's bf16 build and PyTorch's
  # bf16 autocast (the fixtures with ref_bf16.json)
  echo "gpt2_dsl_bf16|examples/gpt2.mtc|gpt2_dsl"
  for m in gpt2 encoder; do echo "${m}_o17_bf16|$fixtures/$m/model_o17.onnx|$m"; done
  echo "hf_llama_o17_bf16|$fixtures/hf_llama/model_o17.onnx|hf_llama"
  # offload (a name ending in _offload_grads): the optimizer state and the gradients in host
  # memory, the host's copies and sums in backward and its update
  echo "gpt2_dsl_offload_grads|examples/gpt2.mtc|gpt2_dsl"
  echo "gpt2_dsl_bf16_offload_grads|examples/gpt2.mtc|gpt2_dsl"
  # parameter offload (_offload_params: ZeRO-3's shard in host memory only, copied up before
  # each gather; _offload50_params: half of it, the gradients on the device)
  echo "gpt2_dsl_offload_params|examples/gpt2.mtc|gpt2_dsl"
  echo "gpt2_dsl_bf16_offload50_params|examples/gpt2.mtc|gpt2_dsl"
  # bf16 gradients (_grads16: --grad-precision bf16): the updates and the norm reading them
  echo "gpt2_dsl_bf16_grads16|examples/gpt2.mtc|gpt2_dsl"
  # activation swap (_swap: every layer's activations to host memory and back on the copy
  # stream, each waited for where passes/copies.c puts it)
  echo "gpt2_dsl_swap|examples/gpt2.mtc|gpt2_dsl"
}

# precision_of NAME: the precision a case compiles in; flags_of NAME: its layout's flags
precision_of() { case $1 in *_bf16 | *_bf16_*) echo bf16 ;; *) echo fp32 ;; esac; }
flags_of() {
  case $1 in
    *_offload_grads) echo --offload-grads ;;
    *_offload_params) echo --offload-params ;;
    *_offload50_params) echo --offload 0.5 --offload-params ;;
    *_grads16) echo --grad-precision bf16 ;;
    *_swap) echo --swap all ;;
  esac
}

selected_cases() { cases | grep -E "^(${GPU_CHECK_ONLY:-.*})\|" || true; }

# fixture variables: mtc_args, load, adamw_args (and dynamic_args for *_dyn models)
read_fixture() {  # read_fixture FIXTURE MODEL
  mtc_args="" load="" adamw_args="" sgd_args="" dynamic_args=""
  # shellcheck source=/dev/null
  source "$root/$fixtures/$1/parity.env"
  case $2 in *_dyn.onnx) mtc_args=$dynamic_args ;; esac
}

# train_case BIN FIXTURE LOG ARGS...: run a case's program on the fixture's batch and weights
train_case() {
  local bin=$1 fix=$2 log=$3
  shift 3
  local weights=()
  [ -n "$load" ] && weights=(--load "$root/$fixtures/$fix/$load")
  "$bin" --inputs "$root/$fixtures/$fix/batch.safetensors" "${weights[@]}" "$@" > "$log" 2>&1
}

die() { echo "gpu_check: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------
# prepare (no GPU)

# the shared libraries BIN needs that are not part of libc, libstdc++ or CUDA
copy_libs() {  # copy_libs DEST BIN...
  local dest=$1
  shift
  ldd "$@" | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
    case $(basename "$lib") in
      libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libstdc++* | \
        libgcc_s*) ;;
      libcu* | libnccl*) ;;  # the CUDA toolkit's, from the device's /usr/local/cuda
      libgomp*) [ "$(basename "$dest")" = mtc ] && cp -L "$lib" "$dest/" ;;  # torch has its own
      *) cp -L "$lib" "$dest/" ;;
    esac
  done
}

build_gpu() {  # build_gpu PROGDIR: the program's nvcc build for the H100 (sm_90)
  make -s -C "$1" build/gpu/train CUDA_ARCH="-gencode arch=compute_90,code=sm_90" \
    GPU_CFLAGS="-O2 -std=c11 -Wall -Wextra -Werror" > "$1.gpu.log" 2>&1 ||
    { cat "$1.gpu.log"; die "the GPU build of $1 failed"; }
}

prepare_case() {  # prepare_case DIR NAME MODEL FIXTURE
  local dir=$1 name=$2 model=$3 fix=$4
  local c=$dir/cases/$name
  read_fixture "$fix" "$model"
  rm -rf "$c"
  mkdir -p "$c"
  # shellcheck disable=SC2086
  "${MTC:-$dir/bin/mtc}" compile "$root/$model" -o "$c/prog" --precision "$(precision_of "$name")" $mtc_args $(flags_of "$name") \
    > "$c/compile.log" 2>&1 ||
    { cat "$c/compile.log"; die "mtc compile $model failed"; }
  build_gpu "$c/prog"
  make -s -C "$c/prog" cpu CFLAGS="-O2 -fopenmp -std=c11" > "$c/prog.make.log" 2>&1 ||
    { cat "$c/prog.make.log"; die "the CPU build of $model failed"; }
  cp "$c/prog/build/gpu/train" "$c/train_gpu"
  train_case "$c/prog/train" "$fix" "$c/grads_cpu.log" --steps 1 --lr 0 \
    --dump-grads "$c/grads_cpu.safetensors" || die "$name: the CPU program failed"
  # shellcheck disable=SC2086
  train_case "$c/prog/train" "$fix" "$c/adamw_cpu.log" --steps 10 $adamw_args ||
    die "$name: the CPU program failed"
  # shellcheck disable=SC2086
  train_case "$c/prog/train" "$fix" "$c/sgd_cpu.log" --steps 10 $sgd_args \
    --save "$c/w_cpu.safetensors" || die "$name: the CPU program failed"
  # the GPU binary finds weights.bin next to it (a model that gives its weights; the others
  # draw them); the rest is not needed there
  if [ -e "$c/prog/weights.bin" ]; then mv "$c/prog/weights.bin" "$c/weights.bin"; fi
  rm -rf "$c/prog"
  echo "$name|$model|$fix" >> "$dir/cases.txt"
}

# The benchmark programs: GPT-2 at T=1024, weights drawn by the program,
# compiled as a user compiles for one GPU (--gpus 1: the planner's plan,
# lowered with a block's parameters in one bucket and one update a bucket).
# name|size|B|precision: 124M at B=8 in bf16 and fp32, then bf16 at larger
# micro-batches and 350M (bench/gpu_gpt2.py's sizes)
BENCH_RUNS=${GPU_CHECK_BENCH_RUNS:-"gpt2_124M_bf16|124M|8|bf16 gpt2_124M_fp32|124M|8|fp32
  gpt2_124M_bf16_B32|124M|32|bf16 gpt2_350M_bf16_B16|350M|16|bf16"}
bench_dims() {  # bench_dims SIZE B: the -D flags of examples/gpt2.mtc
  case $1 in
    124M) echo "-D L=12 -D C=768 -D NH=12 -D V=50257 -D T=1024 -D B=$2" ;;
    350M) echo "-D L=24 -D C=1024 -D NH=16 -D V=50257 -D T=1024 -D B=$2" ;;
  esac
}
prepare_bench() {  # prepare_bench DIR
  local dir=$1 run name size b p dst
  mkdir -p "$dir/bench"
  for run in $BENCH_RUNS; do
    IFS='|' read -r name size b p <<< "$run"
    dst=$dir/bench/$name
    # shellcheck disable=SC2046
    "$dir/bin/mtc" compile "$root/examples/gpt2.mtc" $(bench_dims "$size" "$b") -o "$dst" \
      --precision "$p" --gpus 1 --lr 1e-4 --beta2 0.95 > "$dst.compile.log" ||
      die "mtc compile (bench) failed"
    build_gpu "$dst"
    cp "$dst/build/gpu/train" "$dst/train"
    rm -rf "$dst/weights.bin" "$dst/build"
    echo "$run" >> "$dir/bench.txt"
  done
}

prepare() {
  local dir=$1
  case $dir in /*) ;; *) dir=$root/$dir ;; esac
  mkdir -p "$dir"
  git -C "$root" check-ignore -q "$dir" || die "$dir is not ignored by git (add it to .gitignore)"
  rm -rf "$dir"
  mkdir -p "$dir/bin" "$dir/lib/mtc" "$dir/lib/prog" "$dir/cases"
  # a build folder of its own (Release), apart from the test suite's
  cmake -S "$root" -B "$root/build-gpucheck" -DCMAKE_BUILD_TYPE=Release > /dev/null ||
    die "cmake failed"
  cmake --build "$root/build-gpucheck" -j"$(nproc)" --target mtc test_kernels_cuda > /dev/null ||
    die "building mtc and test_kernels_cuda failed"
  cp "$root/build-gpucheck/mtc" "$root/build-gpucheck/tests/test_kernels_cuda" "$dir/bin/"
  # mtc calibrate's measuring program, the GPU build's (run measures the GPU with it)
  MTC_RUNTIME_DIR=$root/runtime "$dir/bin/mtc" calibrate --gpu \
    --build-only "$dir/bin/calibrate_gpu" --cuda-arch "-gencode arch=compute_90,code=sm_90" ||
    die "building the GPU calibration failed"
  local line name model fix
  for line in $(selected_cases); do
    IFS='|' read -r name model fix <<< "$line"
    echo "prepare: $name"
    prepare_case "$dir" "$name" "$model" "$fix"
  done
  echo "prepare: bench"
  prepare_bench "$dir"
  # apart, so that the programs' (libcjson) do not replace the device's own under Python
  copy_libs "$dir/lib/mtc" "$dir/bin/mtc"
  local bins=("$dir/bin/test_kernels_cuda") b
  for b in "$dir"/cases/*/train_gpu "$dir"/bench/*/train "$dir/bin/calibrate_gpu"; do
    [ -e "$b" ] && bins+=("$b")
  done
  copy_libs "$dir/lib/prog" "${bins[@]}"
  git -C "$root" check-ignore -q "$dir.txz" || die "$dir.txz is not ignored by git (add it to .gitignore)"
  tar -C "$(dirname "$dir")" -cf - "$(basename "$dir")" | xz -9 -T0 > "$dir.txz" ||
    die "packing $dir failed"
  du -sh "$dir" "$dir.txz"
}

# ---------------------------------------------------------------------------
# run (on the GPU machine)

summary=()
stage() {  # stage NAME TIMEOUT CMD...: run CMD under a timeout, its output into the log
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS rc
  timeout --kill-after=10 "$limit" bash -c '"$@"' stage "$@" > "$logs/$name.log" 2>&1
  rc=$?
  local verdict=ok
  [ "$rc" -eq 0 ] || verdict="FAIL (exit $rc)"
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && verdict="TIMEOUT (${limit}s)"
  summary+=("$(printf '%-28s %-18s %4ds' "$name" "$verdict" $((SECONDS - t0)))")
  printf '%s\n' "${summary[-1]}"
  tar -czf "$out/logs.tgz" -C "$logs" . 2> /dev/null
  return "$rc"
}

check() { python3 "$root/tools/parity_check.py" "$@"; }

# one case on the GPU: the same runs as prepare's on the CPU, then the comparisons
run_case() {  # run_case DIR NAME MODEL FIXTURE
  local dir=$1 name=$2 model=$3 fix=$4 c=$1/cases/$2 w=$logs/$2
  read_fixture "$fix" "$model"
  mkdir -p "$w"
  local status=0
  train_case "$c/train_gpu" "$fix" "$w/grads_gpu.log" --steps 1 --lr 0 \
    --dump-grads "$w/grads_gpu.safetensors" || { cat "$w/grads_gpu.log"; return 1; }
  # shellcheck disable=SC2086
  train_case "$c/train_gpu" "$fix" "$w/adamw_gpu.log" --steps 10 $adamw_args ||
    { cat "$w/adamw_gpu.log"; return 1; }
  # shellcheck disable=SC2086
  train_case "$c/train_gpu" "$fix" "$w/sgd_gpu.log" --steps 10 $sgd_args \
    --save "$w/w_gpu.safetensors" || { cat "$w/sgd_gpu.log"; return 1; }
  # Weights are compared after SGD, not AdamW: AdamW divides each gradient by
  # its own running size, so an element whose true gradient is 0 (a key bias:
  # softmax ignores a shift shared by all keys) moves by +-lr at the sign of
  # its rounding noise, different on any two machines; the losses still agree.
  if [ "$(precision_of "$name")" = bf16 ]; then
    # bf16 on two machines: the same values rounded after different float32 sums
    # (cuBLAS's order, atomics), so the checks are tests/parity_bf16.sh's
    echo "== bf16, against the CPU's bf16 build: first loss, gradients, 10 AdamW and 10 SGD steps"
    check logs "$c/grads_cpu.log" "$w/grads_gpu.log" --tol 1e-2 || status=1
    check cosine "$c/grads_cpu.safetensors" "$w/grads_gpu.safetensors" --min 0.999 || status=1
    check logs "$c/adamw_cpu.log" "$w/adamw_gpu.log" --tol 2e-2 || status=1
    check logs "$c/sgd_cpu.log" "$w/sgd_gpu.log" --tol 2e-2 || status=1
    check cosine "$c/w_cpu.safetensors" "$w/w_gpu.safetensors" --min 0.999 || status=1
    echo "== bf16, against PyTorch's bf16 autocast: first loss, gradients, 10 AdamW losses"
    check losses "$root/$fixtures/$fix/ref_bf16.json" loss "$w/grads_gpu.log" --tol 1e-2 || status=1
    check cosine "$root/$fixtures/$fix/grads_bf16.safetensors" "$w/grads_gpu.safetensors" \
      --min 0.999 || status=1
    check losses "$root/$fixtures/$fix/ref_bf16.json" adamw "$w/adamw_gpu.log" --tol 0.02 || status=1
  else
    echo "== against the CPU build: first loss, gradients, 10 AdamW and 10 SGD steps, weights"
    check logs "$c/grads_cpu.log" "$w/grads_gpu.log" --tol 1e-4 || status=1
    check grads "$c/grads_cpu.safetensors" "$w/grads_gpu.safetensors" --tol 1e-4 || status=1
    check logs "$c/adamw_cpu.log" "$w/adamw_gpu.log" --tol 1e-4 || status=1
    check logs "$c/sgd_cpu.log" "$w/sgd_gpu.log" --tol 1e-4 || status=1
    check grads "$c/w_cpu.safetensors" "$w/w_gpu.safetensors" --tol 1e-4 || status=1
    echo "== against PyTorch: first loss, gradients, 10 AdamW losses"
    check losses "$root/$fixtures/$fix/ref.json" loss "$w/grads_gpu.log" || status=1
    check grads "$root/$fixtures/$fix/grads.safetensors" "$w/grads_gpu.safetensors" || status=1
    check losses "$root/$fixtures/$fix/ref.json" adamw "$w/adamw_gpu.log" --steps 10 || status=1
  fi
  local planned measured beyond
  planned=$(sed -n 's/^device: .*| arena and workspace \([0-9]*\) bytes$/\1/p' "$w/adamw_gpu.log")
  measured=$(sed -n 's/.*(cudaMemGetInfo) \([0-9]*\) bytes.*/\1/p' "$w/adamw_gpu.log")
  beyond=$(sed -n 's/.*bytes (\([0-9]*\) beyond the arena.*/\1/p' "$w/adamw_gpu.log")
  echo "== device memory: planned ${planned:-?} bytes, measured ${measured:-?}," \
    "${beyond:-?} more since (CUDA's code, libraries)"
  # the measured step beside the planner's price of the program's layout
  echo "== $(grep -m1 '^timing:' "$w/adamw_gpu.log" || echo 'timing: not printed')"
  [ -n "$beyond" ] && [ "$beyond" -le $((16 << 20)) ] ||
    { echo "FAIL: more than 16 MiB taken beyond the arena"; status=1; }
  if [ -z "$planned" ] || [ -z "$measured" ]; then
    status=1
  else
    local granule=$((2 << 20))
    local rounded=$(((planned + granule - 1) / granule * granule))
    [ "$measured" -ge "$planned" ] && [ "$measured" -le "$rounded" ] ||
      { echo "FAIL: measured is not the planned (rounded up to 2 MiB: $rounded)"; status=1; }
  fi
  rm -f "$w"/*.safetensors
  return $status
}

# sanitize DIR TOOL CASE: compute-sanitizer on a GPT-2 DSL case (fp32 or bf16), 2 steps
sanitize() {
  local c=$1/cases/$3
  read_fixture gpt2_dsl examples/gpt2.mtc
  compute-sanitizer --tool "$2" --error-exitcode 3 "$c/train_gpu" \
    --inputs "$root/$fixtures/gpt2_dsl/batch.safetensors" --load "$root/$fixtures/gpt2_dsl/$load" \
    --steps 2
}

startup() {  # startup DIR CASE: wall time of one step of a small program, eager and lazy loading
  local c=$1/cases/$2 mode t0
  for mode in EAGER LAZY EAGER LAZY; do
    t0=$(date +%s%N)
    CUDA_MODULE_LOADING=$mode "$c/train_gpu" --steps 1 | grep -E "^(step|memory|device)"
    echo "CUDA_MODULE_LOADING=$mode: $((($(date +%s%N) - t0) / 1000000)) ms"
  done
}

# bench DIR: bench/gpu_gpt2.py for each size and micro-batch of the prepared
# programs, against PyTorch's bf16 modes (and eager fp32 beside an fp32 program)
bench() {
  local dir=$1 name size b p key keys=() progs modes
  while IFS='|' read -r name size b p; do
    key="$size|$b"
    [[ " ${keys[*]} " == *" $key "* ]] || keys+=("$key")
  done < "$dir/bench.txt"
  for key in "${keys[@]}"; do
    progs=() modes=eager-bf16,compile-bf16
    while IFS='|' read -r name size b p; do
      [ "$size|$b" = "$key" ] || continue
      progs+=(--mtc "$dir/bench/$name")
      [ "$p" = fp32 ] && modes=$modes,eager-fp32
    done < "$dir/bench.txt"
    python3 "$root/bench/gpu_gpt2.py" "${progs[@]}" --size "${key%|*}" --B "${key#*|}" --T 1024 \
      --steps 12 --rounds 1 --torch "$(echo "${GPU_CHECK_TORCH:-$modes}" | sed 's/^none$//')"
  done
}

# op_profile DIR: the first benchmark program's steps by IR op (train --profile, each op waited
# for), beside the planner's price of the same nodes on the H100 it was compiled for
op_profile() {
  local b
  b=$(find "$1/bench" -mindepth 1 -maxdepth 1 -type d | sort | head -1)
  (cd "$b" && ./train --steps 6 --profile --no-check-finite) | grep -E "^(timing|profile)"
}

# calibrate DIR: mtc calibrate on this GPU (with the measuring program prepare built), then each
# benchmark program's step as measured beside the planner's price of it on the built-in entry
# (H100-80GB) and on the measured profile (issue 27's predicted against measured, on a GPU)
calibrate() {
  local dir=$1 name size b p measured entry profiled
  local profile=$logs/gpu_profile.json
  LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$dir/lib/mtc "$dir/bin/mtc" calibrate \
    --program "$dir/bin/calibrate_gpu" -o "$profile" || return 1
  cp "$profile" "$out/"
  step_ms() {  # step_ms ARGS...: mtc plan's step time of the benchmark's model
    LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$dir/lib/mtc "$dir/bin/mtc" plan "$root/examples/gpt2.mtc" \
      --gpus 1 "$@" | sed -n 's/^step time \([0-9.]*\) ms.*/\1/p'
  }
  printf '%-22s %10s %10s %10s %8s %8s\n' program measured entry profile entry/m profile/m
  while IFS='|' read -r name size b p; do
    measured=$(cd "$dir/bench/$name" && ./train --steps 8 --no-check-finite |
      sed -n 's/^timing: median step \([0-9.]*\) ms.*/\1/p')
    # shellcheck disable=SC2046
    entry=$(step_ms $(bench_dims "$size" "$b") --precision "$p")
    # shellcheck disable=SC2046
    profiled=$(step_ms $(bench_dims "$size" "$b") --precision "$p" --device "$profile")
    awk -v n="$name" -v m="$measured" -v e="$entry" -v f="$profiled" 'BEGIN {
      printf "%-22s %10s %10s %10s %8.2f %8.2f\n", n, m, e, f, (m > 0 ? e / m : 0),
        (m > 0 ? f / m : 0) }'
  done < "$dir/bench.txt"
}

# profile DIR: one step of the first benchmark program under Nsight Compute,
# each kernel's time, summed by kernel name (the top of the table)
profile() {
  local b
  b=$(find "$1/bench" -mindepth 1 -maxdepth 1 -type d | sort | head -1)
  (cd "$b" && ncu --metrics gpu__time_duration.sum --csv --launch-count 3000 \
    ./train --steps 1 --no-check-finite > "$logs/ncu.csv" 2> "$logs/ncu.err") || return 1
  python3 - "$logs/ncu.csv" << 'EOF_PY'
import csv, collections, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, rows = rows[0], rows[1:]
k, u, v = head.index("Kernel Name"), head.index("Metric Unit"), head.index("Metric Value")
scale = {"ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0, "nsecond": 1e-6}
tot, cnt = collections.Counter(), collections.Counter()
for r in rows:
    name = r[k].split("(")[0][:60]
    tot[name] += float(r[v].replace(",", "")) * scale.get(r[u], 1e-6)
    cnt[name] += 1
all_ms = sum(tot.values())
print(f"{len(rows)} kernel launches, {all_ms:.1f} ms of kernel time in one step")
print(f"{'ms':>9} {'%':>6} {'calls':>6}  kernel")
for name, ms in tot.most_common(30):
    print(f"{ms:9.2f} {100 * ms / all_ms:5.1f}% {cnt[name]:6d}  {name}")
EOF_PY
}

run() {
  local dir=$1
  out=$2
  case $dir in /*) ;; *) dir=$root/$dir ;; esac
  if [ ! -d "$dir" ] && [ -f "$dir.txz" ]; then
    tar -C "$(dirname "$dir")" -xJf "$dir.txz" || die "unpacking $dir.txz failed"
  fi
  [ -f "$dir/cases.txt" ] || die "$dir: not prepared (tools/gpu_check.sh prepare $dir)"
  logs=$(mktemp -d)
  export logs
  mkdir -p "$out"
  export LD_LIBRARY_PATH=$dir/lib/prog${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OMP_NUM_THREADS=4
  stage nvidia_smi 30 eval 'nvidia-smi; nvcc --version | tail -2;
    python3 -c "import torch; print(\"torch\", torch.__version__, torch.cuda.get_device_name())"'
  local small  # the GPT-2 DSL cases prepared (GPU_CHECK_ONLY), for start-up and the sanitizers
  small=$(cd "$dir/cases" && ls -d gpt2_dsl gpt2_dsl_bf16 2> /dev/null)
  [ -n "$small" ] && stage startup 60 startup "$dir" "$(echo "$small" | head -1)"
  LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$dir/lib/mtc stage kernels_cuda 90 "$dir/bin/test_kernels_cuda"
  local line name model fix c
  while IFS='|' read -r name model fix; do
    [[ $name =~ ^(${GPU_CHECK_ONLY:-.*})$ ]] || continue
    stage "case_$name" "${GPU_CHECK_CASE_LIMIT:-60}" run_case "$dir" "$name" "$model" "$fix"
  done < "$dir/cases.txt"
  for c in $small; do stage "memcheck_$c" 90 sanitize "$dir" memcheck "$c"; done
  [ "${GPU_CHECK_BENCH:-1}" = 1 ] && stage bench "${GPU_CHECK_BENCH_LIMIT:-330}" bench "$dir"
  [ "${GPU_CHECK_PROFILE:-1}" = 1 ] && stage op_profile 60 op_profile "$dir"
  [ "${GPU_CHECK_CALIBRATE:-1}" = 1 ] && stage calibrate 150 calibrate "$dir"
  [ "${GPU_CHECK_PROFILE:-1}" = 1 ] && stage profile 150 profile "$dir"
  for c in $small; do stage "racecheck_$c" 90 sanitize "$dir" racecheck "$c"; done
  grep -E "^(\||GPT-2)" "$logs/bench.log" 2> /dev/null
  head -n 25 "$logs/op_profile.log" 2> /dev/null
  tail -n 8 "$logs/calibrate.log" 2> /dev/null
  head -n 25 "$logs/profile.log" 2> /dev/null
  printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
  tar -czf "$out/logs.tgz" -C "$logs" .
}

# one MTC NAME OUTDIR: the case NAME (of `cases`) with the given mtc, here;
# exits 77 (ctest: skipped) without nvcc or a CUDA device
one() {
  local line name model fix
  line=$(cases | grep "^$2|") || die "no case named $2"
  IFS='|' read -r name model fix <<< "$line"
  [ -x "${NVCC:-/usr/local/cuda/bin/nvcc}" ] || { echo "SKIP: no nvcc"; exit 77; }
  nvidia-smi -L > /dev/null 2>&1 || { echo "SKIP: no CUDA device (nvidia-smi -L)"; exit 77; }
  python3 -c 'import numpy' 2> /dev/null || { echo "SKIP: python3 has no numpy"; exit 77; }
  rm -rf "$3"
  mkdir -p "$3/cases" "$3/logs"
  logs=$3/logs
  MTC=$1 prepare_case "$3" "$name" "$model" "$fix"
  run_case "$3" "$name" "$model" "$fix" && echo "ok: $name: the GPU build matches the CPU build"
}

export -f run_case sanitize startup bench op_profile calibrate profile train_case read_fixture check \
  die precision_of bench_dims
export root fixtures logs out

case ${1:-} in
  prepare) [ $# -eq 2 ] || die "usage: gpu_check.sh prepare DIR"; prepare "$2" ;;
  run) [ $# -eq 3 ] || die "usage: gpu_check.sh run DIR OUT"; run "$2" "$3" ;;
  one) [ $# -eq 4 ] || die "usage: gpu_check.sh one MTC NAME OUTDIR"; one "$2" "$3" "$4" ;;
  *) die "usage: gpu_check.sh prepare DIR | run DIR OUT | one MTC NAME OUTDIR" ;;
esac
