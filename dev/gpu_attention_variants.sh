#!/usr/bin/env bash
# On the GPU machine, with build-gpu/bundle.tar.xz and build-gpu/variants (dev/attention_variants.sh) carried:
# each variant's attention kernel times on the gpt2 and gpt2-medium shapes, then Nsight Compute's summary
# of the engine's three bf16 kernels when ncu is there (a diagnosis: which unit or stall bounds them).
#   bash dev/gpu_attention_variants.sh
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=dev/gpu_bundle_env.sh
source dev/gpu_bundle_env.sh
for binary in build-gpu/variants/attention_benchmark_*; do
  for shape in "16 1024 768 12" "16 1024 1024 16"; do
    # shellcheck disable=SC2086
    echo "$(basename "$binary") $(timeout 60 "$binary" $shape 10 | grep bf16)"
  done
done | tee "$out/attention_variants.txt"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu /usr/local/NVIDIA-Nsight-Compute*/ncu 2>/dev/null | head -1)
if [ -z "$ncu" ]; then echo "no ncu on this machine"; exit 0; fi
for kernel in forward_bf16 key_value_gradient_bf16 query_gradient_bf16; do
  timeout 120 "$ncu" -k "regex:$kernel" -c 1 --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats \
    "$bundle/bin/attention_benchmark" 16 1024 768 12 2 > "$out/ncu_$kernel.txt" 2>&1
  grep -E "Duration|Throughput|Registers|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Issued Warp|No Eligible|Block Limit|Stall|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Dynamic|Static" "$out/ncu_$kernel.txt" | head -40
done
