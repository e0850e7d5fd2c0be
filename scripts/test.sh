#!/usr/bin/env bash
# Runs every test: installs what is missing, builds with warnings as errors (with CUDA when nvcc is
# found) and runs the whole CTest suite, then builds with AddressSanitizer + UndefinedBehaviorSanitizer
# (CPU only) and runs the unit tests under them, then every cuda kernel and its tests on the host
# emulation of CUDA in that build (scripts/cuda_emulation.sh), then fuzzes every parser for 10 seconds
# (clang's libFuzzer; scripts/fuzz.sh 600 for a longer run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc)

cmake -S . -B build -G Ninja -DFERRY_WERROR=ON
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"

cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFERRY_WERROR=ON -DFERRY_SANITIZE=ON \
  -DFERRY_BUILD_BENCHMARKS=OFF
cmake --build build-sanitize -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-sanitize --output-on-failure -j "$jobs" -L unit
bash scripts/cuda_emulation.sh

bash scripts/fuzz.sh 10
