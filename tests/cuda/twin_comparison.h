// How the cuda tests compare a kernel with its CPU twin: random inputs from a fixed seed, and one
// error measure with one bound for fp32 (the 1e-5), shared by every twin test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace ferry::testing {

// The bound, and the measure: max over entries of |gpu - cpu| / max(|cpu|, kScaleFloor * max |cpu|):
// relative error for the entries that carry the tensor, and error relative to a tenth of the tensor's
// scale for entries near zero, where fp32 sums taken in another order differ by more than 1e-5 of
// their own size (the float CPU twin is itself off its double version by ~2e-5 with a floor of 1%).
constexpr double kTwinTolerance = 1e-5;
constexpr double kScaleFloor = 0.1;

inline double max_relative_error(const std::vector<float>& actual, const std::vector<float>& expected) {
  if (actual.size() != expected.size()) return INFINITY;
  double scale = 0;
  for (const float value : expected) scale = std::max(scale, std::abs(static_cast<double>(value)));
  const double floor = std::max(kScaleFloor * scale, 1e-30);
  double worst = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (!std::isfinite(actual[i])) return INFINITY;
    const double difference = std::abs(static_cast<double>(actual[i]) - static_cast<double>(expected[i]));
    worst = std::max(worst, difference / std::max(std::abs(static_cast<double>(expected[i])), floor));
  }
  return worst;
}

// N(0, scale^2) values from a fixed seed.
inline std::vector<float> random_values(std::size_t count, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(count);
  for (float& value : values) value = normal(generator);
  return values;
}

}  // namespace ferry::testing
