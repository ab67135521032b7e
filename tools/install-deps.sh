#!/usr/bin/env bash
# Installs the Debian packages mtc needs to build, test and run its demo,
# skipping any that are already there.
set -euo pipefail
pkgs=(build-essential cmake flex bison pkg-config)
pkgs+=(libcjson-dev python3-numpy)  # train's safetensors I/O (cJSON); tools/parity_check.py
pkgs+=(libglpk-dev)                 # the planner's integer programs (solver/; it reads and writes JSON with cJSON)
pkgs+=(libprotobuf-c-dev protobuf-c-compiler libonnx-dev)  # ONNX input: onnx.proto, protoc-c
pkgs+=(openmpi-bin libopenmpi-dev)  # runtime/comm_mpi.c and the multi-rank tests (mpicc, mpirun)
pkgs+=(clang libclang-rt-14-dev libomp-dev)  # tests/fuzz: libFuzzer, its sanitizers, OpenMP for clang
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
