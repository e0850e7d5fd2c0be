// A counter-based random generator: every number is a pure function of (key, index), where the key
// hashes (seed, step, layer, micro-batch, purpose). Dropout masks and initial weights are therefore
// reproducible in any order and on any thread, so a recompute replays exactly the same mask.
#pragma once

#include <cmath>
#include <cstdint>

// Compiled for the GPU too (models/kernels/cuda): the same key gives the same mask on both devices.
#ifdef __CUDACC__
#define FERRY_HOST_DEVICE __host__ __device__
#else
#define FERRY_HOST_DEVICE
#endif

namespace ferry::cpu {

FERRY_HOST_DEVICE constexpr std::uint64_t mix64(std::uint64_t x) {
  // splitmix64's finalizer: a bijection with good avalanche.
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct RandomKey {
  std::uint64_t value = 0;
  // A new key for a sub-purpose (a layer, a micro-batch, a tensor...).
  FERRY_HOST_DEVICE constexpr RandomKey derive(std::uint64_t salt) const { return RandomKey{mix64(value ^ mix64(salt))}; }
  FERRY_HOST_DEVICE constexpr std::uint64_t bits(std::uint64_t index) const { return mix64(value ^ mix64(index + 0x632be59bd9b4e019ull)); }
  // Uniform in [0, 1) with 24 bits.
  FERRY_HOST_DEVICE float uniform(std::uint64_t index) const { return static_cast<float>(bits(index) >> 40) * 0x1.0p-24f; }
  // Standard normal (Box-Muller over two independent uniforms).
  double normal(std::uint64_t index) const {
    const double u1 = (static_cast<double>(bits(2 * index) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(bits(2 * index + 1) >> 11) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

// Dropout keeps an element when its uniform draw is at least the drop probability.
FERRY_HOST_DEVICE inline bool dropout_keeps(RandomKey key, std::uint64_t index, float probability) {
  return key.uniform(index) >= probability;
}

}  // namespace ferry::cpu
