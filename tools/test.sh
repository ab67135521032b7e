#!/usr/bin/env bash
# Build mtc and run the whole test suite with ctest; then build again with
# AddressSanitizer + UBSan and run the unit tests (the DSL error corpus, its
# mutation fuzz and the fuzz corpora among them) under it; then run each fuzz
# target (tests/fuzz) under libFuzzer for MTC_FUZZ_SECONDS (default 30).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DMTC_SANITIZE=ON > /dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -L unit -j"$jobs")
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DMTC_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug \
  -DMTC_FUZZ_SECONDS="${MTC_FUZZ_SECONDS:-30}" > /dev/null
cmake --build build-fuzz -j"$jobs" --target fuzz_targets
(cd build-fuzz && ctest --output-on-failure -L fuzz -j"$jobs")
