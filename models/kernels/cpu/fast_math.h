// exp and tanh for float written as plain arithmetic (range reduction, a degree-7 polynomial, an
// exponent built from bits), so loops using them vectorize; libm's versions do not without
// -ffast-math. Relative error about 1e-7 (a few ulp). exp for double the same way (a degree-12
// polynomial; relative error about 1e-15) where libm's scalar exp would dominate a loop (cross-entropy).
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

inline double exp_vectorizable(double x) {
  x = std::min(std::max(x, -708.0), 709.0);
  const double shifter = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer held in the low bits
  const double shifted = x * 1.4426950408889634 + shifter;
  const double n = shifted - shifter;
  const double r = (x - n * 6.93147180369123816490e-01) - n * 1.90821492927058770002e-10;  // x - n ln 2, in two parts
  double p = 1.0 / 479001600.0;  // Taylor to r^12: |r| <= ln 2 / 2 leaves about 2e-16
  for (const double inverse_factorial : {1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0,
                                         1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0}) {
    p = p * r + inverse_factorial;
  }
  std::int64_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  bits = (bits - std::int64_t{0x4338000000000000} + 1023) << 52;  // 2^n
  double scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

inline float tanh_vectorizable(float x) {
  const float e = exp_vectorizable(2.0f * x);
  return (e - 1.0f) / (e + 1.0f);
}

inline double tanh_vectorizable(double x) { return std::tanh(x); }

}  // namespace ferry::cpu
