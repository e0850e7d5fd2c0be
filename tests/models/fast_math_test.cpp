// The vectorizable exp and tanh (models/kernels/cpu/fast_math.h) against libm over their whole useful
// range: float exp within a few ulp (on [-80, 80]), double exp within 1e-15 (what keeps the cross-entropy's softmax
// statistics the GPU twin's to 1e-12), clamped at the ends instead of overflowing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "models/kernels/cpu/fast_math.h"

namespace ferry::cpu {
namespace {

TEST(FastMath, DoubleExpIsWithinOneEMinusFifteenOfLibm) {
  double worst = 0;
  for (std::int64_t i = -700000; i <= 700000; ++i) {
    const double x = static_cast<double>(i) * 1e-3 + 1e-7 * static_cast<double>(i % 7);
    const double expected = std::exp(x);
    worst = std::max(worst, std::abs(exp_vectorizable(x) - expected) / expected);
  }
  EXPECT_LT(worst, 1e-15);
  EXPECT_EQ(exp_vectorizable(0.0), 1.0);
  EXPECT_TRUE(std::isfinite(exp_vectorizable(1e6)));  // clamped at 709
  EXPECT_GT(exp_vectorizable(-1e6), 0.0);              // clamped at -708: no denormal or zero
}

TEST(FastMath, FloatExpAndTanhAreWithinAFewUlp) {
  float worst_exp = 0, worst_tanh = 0;
  for (int i = -80000; i <= 80000; ++i) {  // past +-80 the result nears the denormals or the overflow and loses bits
    const float x = static_cast<float>(i) * 1e-3f;
    const float expected = std::exp(x);
    worst_exp = std::max(worst_exp, std::abs(exp_vectorizable(x) - expected) / expected);
  }
  for (int i = -9000; i <= 9000; ++i) {
    const float x = static_cast<float>(i) * 1e-3f;
    worst_tanh = std::max(worst_tanh, std::abs(tanh_vectorizable(x) - std::tanh(x)));
  }
  EXPECT_LT(worst_exp, 5e-7f);
  EXPECT_LT(worst_tanh, 1e-6f);
}

}  // namespace
}  // namespace ferry::cpu
