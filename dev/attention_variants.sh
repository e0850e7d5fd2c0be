#!/usr/bin/env bash
# Builds benchmarks/attention_benchmark with other tile sizes of the bf16 attention kernels (warps a block,
# staged rows a step), to time them beside the engine's on a GPU (dev/gpu_attention_variants.sh there). Here,
# after the CUDA build (`cmake --build build --target attention_benchmark`):
#   bash dev/attention_variants.sh [BUILD]   # -> build-gpu/variants/attention_benchmark_w<W>_f<F>_b<B>
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=build-gpu/variants
rm -rf "$out"
mkdir -p "$out"
nvcc=(/usr/local/cuda/bin/nvcc -forward-unknown-to-host-compiler -DFERRY_HAVE_CUDA=1 -I"$PWD" -O2 -DNDEBUG
      --generate-code=arch=compute_90,code=sm_90 --expt-relaxed-constexpr -std=c++20)
libraries=("$build/models/libferry_models.a" "$build/engine/core/libferry_core.a" "$build/allocator/libferry_allocator.a"
           -lhwloc -lgomp /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so /usr/local/cuda/lib/libcudart_static.a
           /usr/local/cuda/lib/libcublasLt.so -L/usr/local/cuda/targets/x86_64-linux/lib -ldl -lrt -lpthread)
# WARPS FORWARD_ROWS BACKWARD_ROWS
for variant in "4 64 32" "4 64 16" "4 32 32"; do
  read -r warps forward backward <<< "$variant"
  name=attention_benchmark_w${warps}_f${forward}_b${backward}
  defines=(-DFERRY_ATTENTION_WARPS="$warps" -DFERRY_ATTENTION_FORWARD_STAGED_ROWS="$forward" -DFERRY_ATTENTION_BACKWARD_STAGED_ROWS="$backward")
  objects=()
  for source in models/kernels/cuda/flash_attention.cu models/kernels/cuda/flash_attention_bf16.cu; do
    object=$out/$name.$(basename "$source").o
    "${nvcc[@]}" "${defines[@]}" -x cu -c "$source" -o "$object"
    objects+=("$object")
  done
  # The variant's kernels come first: the archive's copies of those objects are then never pulled in.
  g++ -O2 -std=c++20 -I"$PWD" -I/usr/local/cuda/include -DFERRY_HAVE_CUDA=1 benchmarks/attention_benchmark.cpp "${objects[@]}" \
    "${libraries[@]}" -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -o "$out/$name"
  strip "$out/$name"
  rm -f "${objects[@]}"
  echo "$out/$name"
done
