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

# The flags the tests build programs with: the CPU build's (build_program), the GPU build's host
# code (make_program). -O1: the programs a test compares are built alike, and the suite's time
# went to compiling (-O3 -march=native takes 6 s a program, -O1 1.7 s); the numbers compared do
# not depend on it (-std=c11 contracts no a*b + c at any level).
MTC_TEST_CFLAGS="-O1 -fopenmp -std=c11 -Wall -Wextra -Werror"
MTC_TEST_GPU_CFLAGS="-O1 -std=c11 -Wall -Wextra -Werror"

# build_program MTC MODEL DIR LOG ARGS...: `mtc compile MODEL -o DIR --precision fp32 ARGS` (its
# output in LOG; ARGS may ask for bf16), then make_program with MTC_TEST_CFLAGS. Exits with the
# make output on failure.
build_program() {
  local mtc=$1 model=$2 dir=$3 log=$4
  shift 4
  "$mtc" compile "$model" -o "$dir" --precision fp32 "$@" > "$log"
  make_program "$dir" "$MTC_TEST_CFLAGS"
}

# prebuilt_runtime BUILD COMM FLAGS: the archive of the runtime for BUILD (cpu, gpu) and COMM
# (single, mpi) that tests/runtime_lib.sh built with FLAGS into $MTC_RT_LIBS, when there is one
# newer than every file of $MTC_RUNTIME_DIR (a runtime edited since falls back to its sources).
prebuilt_runtime() {
  local lib=${MTC_RT_LIBS:-}/$1-$2.a flags=$3
  [ -n "${MTC_RT_LIBS:-}" ] && [ -f "$lib" ] && [ -f "$lib.flags" ] &&
    [ "$(cat "$lib.flags")" = "$flags" ] &&
    [ -z "$(find "${MTC_RUNTIME_DIR:-/nonexistent}" -newer "$lib" -print -quit 2> /dev/null)" ] &&
    echo "$lib"
}

# make_program DIR CFLAGS: the emitted program's GPU build when this machine has nvcc
# (DIR/build/gpu/train; warnings are errors), then `make cpu` with CFLAGS (./train). With
# MTC_CUDA_LIB (CMake's build of the same CUDA sources) the GPU build links it rather than
# compiling them again, unless MTC_FULL_GPU_BUILD=1 (programs for several ranks link NCCL);
# with MTC_RT_LIBS (tests/runtime_lib.sh's archives of the runtime's host code) each build links
# the archive built with its flags rather than compiling the runtime for every program.
# Exits with the make output on failure.
make_program() {
  local dir=$1 cflags=$2 nvcc=${NVCC:-/usr/local/cuda/bin/nvcc} comm=single lib
  grep -q 'RT_COMM_MPI' "$dir/Makefile" && comm=mpi
  if [ -x "$nvcc" ]; then
    local objs=()
    if [ -n "${MTC_CUDA_LIB:-}" ] && [ "${MTC_FULL_GPU_BUILD:-0}" != 1 ]; then
      objs=(CUDA_OBJS="$MTC_CUDA_LIB")
      lib=$(prebuilt_runtime gpu "$comm" "$MTC_TEST_GPU_CFLAGS") && objs+=(GPU_RUNTIME="$lib")
    fi
    make -s -C "$dir" build/gpu/train NVCC="$nvcc" "${objs[@]}" \
      GPU_CFLAGS="$MTC_TEST_GPU_CFLAGS" \
      NVCCFLAGS="-O3 -std=c++17 --fmad=false --Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror" \
      > "$dir.gpu.log" 2>&1 || { cat "$dir.gpu.log"; echo "FAIL: the GPU build of $dir"; exit 1; }
  fi
  local cpu=()
  lib=$(prebuilt_runtime cpu "$comm" "$cflags") && cpu=(CPU_RUNTIME="$lib")
  make -s -C "$dir" cpu CFLAGS="$cflags" "${cpu[@]}" > "$dir.make.log" 2>&1 ||
    { cat "$dir.make.log"; exit 1; }
}
