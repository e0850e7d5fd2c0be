#!/usr/bin/env bash
# Packs what a GPU machine without ferry's build dependencies needs to run ferry's GPU checks (the
# device tool's machines have CUDA, CMake and PyTorch but no apt packages and no network): an -O2 CUDA
# build (sm_90, RelWithDebInfo as the CPU benchmarks, debug info stripped) of `ferry`, `cuda_tests` and
# `allocator_benchmark` (its cudaMalloc / cudaMallocAsync rows run only on a GPU), `attention_benchmark` with the shared
# libraries they load beyond glibc, libstdc++ and CUDA's own, and Open MPI's mpirun (scripts/pack_openmpi.sh),
# in build-gpu/bundle.tar.xz (the tool carries 64 MiB at most).
#   [BUILD=build] bash scripts/gpu_bundle.sh   # here, on the build machine (BUILD: reuse a build folder of
#       the same settings, as the default `build` is, instead of a build-gpu of its own)
#   bash scripts/gpu_check.sh [benchmark PART...]   # there, with build-gpu/bundle.tar.xz carried
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${BUILD:-build-gpu}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_WERROR=ON -DFERRY_BUILD_BENCHMARKS=ON
cmake --build "$build" -j "$(nproc)" --target ferry cuda_tests allocator_benchmark attention_benchmark
if ! ldd "$build/ferry" | grep -q libcublasLt; then
  echo "gpu_bundle.sh: $build has no CUDA (nvcc not found under /usr/local/cuda): nothing to run on a GPU" >&2
  exit 1
fi

stage=build-gpu/bundle
rm -rf "$stage" build-gpu/bundle.tar.xz
mkdir -p "$stage/bin" "$stage/lib"
strip -o "$stage/bin/ferry" "$build/ferry"
strip -o "$stage/bin/cuda_tests" "$build/tests/cuda_tests"
strip -o "$stage/bin/allocator_benchmark" "$build/benchmarks/allocator_benchmark"
strip -o "$stage/bin/attention_benchmark" "$build/benchmarks/attention_benchmark"
# The kernel timer of dev/gpu_kernel_times.sh (a CUPTI injection library) with the CUPTI it was built against.
cuda_root=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
g++ -std=c++20 -O2 -shared -fPIC -I"$cuda_root/include" -o "$stage/lib/cuda_kernel_timer.so" dev/cuda_kernel_timer.cpp \
  -L"$cuda_root/lib" -L"$cuda_root/lib64" -lcupti
cp -L "$(ls "$cuda_root"/lib/libcupti.so.13 "$cuda_root"/lib64/libcupti.so.13 2>/dev/null | head -1)" "$stage/lib/"
# The machine's own glibc, libstdc++ (newer there) and CUDA libraries are used; the rest travels.
ldd "$stage"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u | while read -r library; do
  case "$(basename "$library")" in
    libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | libstdc++* | libgcc_s* | libcu* | libnccl*) ;;
    *) cp -L "$library" "$stage/lib/" ;;
  esac
done
# Open MPI's runtime for scripts/gpu_grid_check.sh's two ranks (the GPU machine has no mpirun).
bash scripts/pack_openmpi.sh "$stage/openmpi"
tar -C build-gpu -cJf build-gpu/bundle.tar.xz bundle
bytes=$(stat -c %s build-gpu/bundle.tar.xz)
echo "build-gpu/bundle.tar.xz: $((bytes >> 20)) MiB ($(ls "$stage/lib" | wc -l) libraries: $(ls "$stage/lib" | tr '\n' ' '))"
if [ "$bytes" -gt $((60 << 20)) ]; then
  echo "gpu_bundle.sh: the bundle is over 60 MiB; the device tool carries 64 MiB at most" >&2
  exit 1
fi
