# Shared by the test scripts: failing, checking a refusal, reading losses, and compiling a model
# and building its program.

# fail MESSAGE: says it and ends the script (exit 1).
fail() { echo "FAIL: $*"; exit 1; }

# expect_exit STATUS TEXT COMMAND...: COMMAND exits with STATUS (error: any failure short of a
# signal) and says TEXT, on stdout or stderr; otherwise fail, showing what it said. What it
# said stays in $expect_said.
expect_exit() {
  local want=$1 text=$2 rc=0 ok=false
  shift 2
  expect_said=$("$@" 2>&1) || rc=$?
  case $want in
    error) [ "$rc" -eq 0 ] || [ "$rc" -ge 128 ] || ok=true ;;
    *) [ "$rc" != "$want" ] || ok=true ;;
  esac
  if ! $ok || ! grep -qF -- "$text" <<< "$expect_said"; then
    echo "$expect_said"
    fail "$*: exit $rc, want $want and '$text'"
  fi
}

# losses LOG: the loss of each step line of a training log, one a line.
losses() { awk -F'|' '/^step/ { sub(/ *loss /, "", $2); sub(/ +$/, "", $2); print $2 }' "$1"; }

# build_program MTC MODEL DIR LOG ARGS...: `mtc compile MODEL -o DIR --precision fp32 ARGS` (its
# output in LOG; ARGS may ask for bf16), then make_program at -O1 with -Werror. -O1: the programs a test compares are built alike, and
# the suite's time went to compiling (-O3 -march=native takes 6 s a program, -O1 1.7 s); the
# numbers compared do not depend on it. Exits with the make output on failure.
build_program() {
  local mtc=$1 model=$2 dir=$3 log=$4
  shift 4
  "$mtc" compile "$model" -o "$dir" --precision fp32 "$@" > "$log"
  make_program "$dir" "-O1 -fopenmp -std=c11 -Wall -Wextra -Werror"
}

# make_program DIR CFLAGS: the emitted program's GPU build when this machine has nvcc
# (DIR/build/gpu/train; warnings are errors), then `make cpu` with CFLAGS (./train). With
# MTC_CUDA_LIB (CMake's build of the same CUDA sources) the GPU build links it rather than
# compiling them again, unless MTC_FULL_GPU_BUILD=1 (programs for several ranks link NCCL).
# Exits with the make output on failure.
make_program() {
  local dir=$1 cflags=$2 nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
  if [ -x "$nvcc" ]; then
    local objs=()
    [ -n "${MTC_CUDA_LIB:-}" ] && [ "${MTC_FULL_GPU_BUILD:-0}" != 1 ] && objs=(CUDA_OBJS="$MTC_CUDA_LIB")
    make -s -C "$dir" build/gpu/train NVCC="$nvcc" "${objs[@]}" \
      GPU_CFLAGS="-O1 -std=c11 -Wall -Wextra -Werror" \
      NVCCFLAGS="-O3 -std=c++17 --fmad=false --Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror" \
      > "$dir.gpu.log" 2>&1 || { cat "$dir.gpu.log"; echo "FAIL: the GPU build of $dir"; exit 1; }
  fi
  make -s -C "$dir" cpu CFLAGS="$cflags" > "$dir.make.log" 2>&1 || { cat "$dir.make.log"; exit 1; }
}
