#!/usr/bin/env bash
# Runs every test: installs what is missing, builds with warnings as errors (with CUDA when nvcc is
# found) and runs the whole CTest suite, then builds with AddressSanitizer + UndefinedBehaviorSanitizer
# (CPU only) and runs the unit tests under them, then every cuda kernel and its tests on the host
# emulation of CUDA in that build (scripts/cuda_emulation.sh), then fuzzes every parser for 10 seconds
# (clang's libFuzzer; scripts/fuzz.sh 600 for a longer run).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's start and the minutes since the first, so a slow CI run says where its time went.
started=$SECONDS
stage() { echo "== [$(( (SECONDS - started) / 60 )) min] $*"; }
stage "setup"
bash scripts/setup.sh
jobs=$(nproc)

stage "build (warnings as errors)"
cmake -S . -B build -G Ninja -DFERRY_WERROR=ON
cmake --build build -j "$jobs"
stage "ctest"
ctest --test-dir build --output-on-failure -j "$jobs"

stage "sanitizer build"
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFERRY_WERROR=ON -DFERRY_SANITIZE=ON \
  -DFERRY_BUILD_BENCHMARKS=OFF
cmake --build build-sanitize -j "$jobs"
stage "sanitizer unit tests"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-sanitize --output-on-failure -j "$jobs" -L unit
stage "CUDA emulation"
bash scripts/cuda_emulation.sh

stage "fuzz"
bash scripts/fuzz.sh 10
stage "done"
