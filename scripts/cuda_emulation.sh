#!/usr/bin/env bash
# Runs every cuda kernel without a GPU: the sanitizer build (ASan + UBSan, CPU only) with
# FERRY_CUDA_EMULATION=ON compiles models/kernels/cuda/*.cu as C++ on the host emulation of CUDA
# (tests/cuda_emulation), reusing the build's CPU libraries, and runs tests/cuda's twin and whole-model
# tests on it, each launch in forward, reverse and seeded random thread orders.
# Then the NCCL backend (engine/comm/nccl_*.cpp) on NCCL emulated over MPI (tests/cuda_emulation/src/nccl.cpp):
# tests/comm/nccl_communicator_test.cpp under mpirun with 2 and 3 ranks, each with an emulated GPU.
# Usage: scripts/cuda_emulation.sh [gtest arguments...]; FERRY_CUDA_EMULATION_ORDERS=forward,reverse,random
# and FERRY_CUDA_EMULATION_SEED=1 choose the orders and the random one's seed.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-sanitize
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFERRY_WERROR=ON -DFERRY_SANITIZE=ON -DFERRY_BUILD_BENCHMARKS=OFF \
  -DFERRY_CUDA_EMULATION=ON >/dev/null
cmake --build "$build" -j "${FERRY_JOBS:-$(nproc)}" --target ferry_cuda_emulation_tests ferry_nccl_emulation_tests nccl_failure_probe
# Passive OpenMP waits: the cpu twins' threads would otherwise spin beside the single-threaded emulator.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 OMP_WAIT_POLICY=passive \
  "$build/tests/cuda_emulation/ferry_cuda_emulation_tests" "$@"
# Open MPI keeps what MPI_Init allocates until exit, from plugins whose frames LeakSanitizer cannot name
# (no frame pointers): leaks are not checked here; overruns and use after free are.
for ranks in 2 3; do
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    mpirun --allow-run-as-root --oversubscribe -np "$ranks" -x ASAN_OPTIONS -x UBSAN_OPTIONS \
    "$build/tests/cuda_emulation/ferry_nccl_emulation_tests" --gtest_brief=1
done
# A rank that fails, or never joins an NCCL all-reduce, ends the job with an error naming it, never a hang.
ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  SILENT_ERROR="error: rank 0: all_reduce (sum) of 1024 f32 (4096 bytes) over 2 ranks (NCCL, device 0) did not complete within 1000 ms" \
  bash tests/comm/rank_failure_test.sh "$build/tests/cuda_emulation/nccl_failure_probe" \
  mpirun --allow-run-as-root --oversubscribe -np 2 -x ASAN_OPTIONS -x UBSAN_OPTIONS
# The ferry command itself on the emulated CUDA and NCCL: --device cuda on one rank and on dp 2.
cmake --build "$build" -j "${FERRY_JOBS:-$(nproc)}" --target ferry_emulated
FERRY="$build/ferry-emulated" bash tests/cli/cuda_emulated_test.sh
