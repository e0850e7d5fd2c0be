// Warp-level sums shared by the cuda kernels: every lane ends with the sum of all 32 lanes' values,
// combined in the same butterfly order on every call (deterministic).
#pragma once

namespace ferry::cuda {

constexpr int kWarpSize = 32;

__device__ inline float warp_sum(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ inline double warp_sum(double value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ inline float warp_max(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

}  // namespace ferry::cuda
