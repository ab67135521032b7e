#!/usr/bin/env bash
# The demo: build mtc, compile examples/gpt2.mtc (small config) into a C
# training program, build it with `make cpu` and train it for 40 steps on
# one fixed synthetic batch; the loss falls from ln(512) ~ 6.24.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j"$(nproc)" --target mtc
./build/mtc compile examples/gpt2.mtc -o build/gpt2.out
make -s -C build/gpt2.out cpu
cd build/gpt2.out && ./train --steps 40
