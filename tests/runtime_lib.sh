#!/usr/bin/env bash
# The emitted programs' runtime, compiled once for the tests as each program's Makefile
# compiles it (runtime/runtime.mk's lists, the compiler and the flags tests/lib.sh builds with),
# as archives in OUTDIR that make_program links instead of compiling the runtime again for
# every program: cpu-single.a and cpu-mpi.a (the CPU build, one rank and several), and where
# nvcc is, gpu-single.a and gpu-mpi.a (the GPU build's host code; several ranks over NCCL).
# Each FILE.a has FILE.a.flags beside it: the flags it was built with.
#
#   runtime_lib.sh OUTDIR SOURCE_DIR
set -euo pipefail
out=$1 src=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
cuda=${CUDA:-/usr/local/cuda}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# archive NAME CC FLAGS LISTS: the sources of the runtime.mk variables LISTS, compiled by CC
# with FLAGS (-Iruntime and the build's defines added as the Makefile adds them)
archive() {
  local name=$1 cc=$2 flags=$3 lists=$4 defs=${5:-} vars="" f
  for f in $lists; do vars+=" \$($f)"; done
  local files
  files=$(printf 'all:\n\t@echo %s\n' "$vars" |
          env -u MAKEFLAGS -u MFLAGS make -s --no-print-directory -C "$src" -f runtime/runtime.mk \
            -f - all)
  mkdir -p "$tmp/$name"
  for f in $files; do
    # shellcheck disable=SC2086
    "$cc" $flags $defs -I"$src/runtime" -c "$src/$f" -o "$tmp/$name/$(basename "${f%.c}").o"
  done
  rm -f "$out/$name.a"
  ar rcs "$out/$name.a" "$tmp/$name"/*.o
  echo "$flags" > "$out/$name.a.flags"
}

archive cpu-single "${CC:-cc}" "$MTC_TEST_CFLAGS" "RT_SRC RT_COMM_SINGLE RT_CPU_SRC" &
pids=($!)
if command -v mpicc > /dev/null; then
  archive cpu-mpi mpicc "$MTC_TEST_CFLAGS" "RT_SRC RT_COMM_MPI RT_CPU_SRC" &
  pids+=($!)
fi
if [ -x "${NVCC:-$cuda/bin/nvcc}" ]; then
  archive gpu-single "${CC:-cc}" "$MTC_TEST_GPU_CFLAGS" "RT_SRC RT_COMM_SINGLE" &
  pids+=($!)
  if command -v mpicc > /dev/null; then
    archive gpu-mpi mpicc "$MTC_TEST_GPU_CFLAGS" "RT_SRC RT_COMM_MPI RT_COMM_NCCL" \
      "-DRT_COMM_NCCL -I$cuda/include" &
    pids+=($!)
  fi
fi
for p in "${pids[@]}"; do wait "$p"; done
