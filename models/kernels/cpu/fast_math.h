// exp and tanh for float written as plain arithmetic (range reduction, a degree-7 polynomial, an
// exponent built from bits), so loops using them vectorize; libm's versions do not without
// -ffast-math. Relative error about 1e-7 (a few ulp). Double keeps libm.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ferry::cpu {

inline float exp_vectorizable(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float rounding = 12582912.0f;  // 1.5 * 2^23: adding and subtracting rounds to an integer
  const float n = (x * 1.44269504088896341f + rounding) - rounding;
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;  // x - n ln 2, in two parts
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) * (1 << 23);
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

inline float tanh_vectorizable(float x) {
  const float e = exp_vectorizable(2.0f * x);
  return (e - 1.0f) / (e + 1.0f);
}

inline double tanh_vectorizable(double x) { return std::tanh(x); }

}  // namespace ferry::cpu
