// bf16/f16 conversions round to nearest, ties to even: checked against an exact reference (double
// arithmetic) on edge cases and random values, and f16 against the compiler's _Float16.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "engine/core/dtype.h"

namespace ferry {
namespace {

// Nearest of the two representable neighbours, ties to the even bit pattern.
template <typename Decode>
std::uint16_t reference_round(float value, std::uint16_t below, std::uint16_t above, Decode decode) {
  const double low = decode(below);
  const double high = decode(above);
  const double distance_low = std::abs(static_cast<double>(value) - low);
  const double distance_high = std::abs(high - static_cast<double>(value));
  if (distance_low < distance_high) return below;
  if (distance_high < distance_low) return above;
  return (below & 1u) == 0 ? below : above;
}

std::uint16_t reference_bf16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const auto truncated = static_cast<std::uint16_t>(bits >> 16);
  if ((bits & 0xffffu) == 0) return truncated;
  // Magnitude-wise neighbours share the sign, so truncated and truncated+1 bracket the value.
  return reference_round(value, truncated, static_cast<std::uint16_t>(truncated + 1), bf16_to_float);
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::u16), 2u);
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp32"), DType::f32);
  EXPECT_FALSE(parse_dtype("f64"));
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80u);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80u);  // tie, even stays
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82u);  // tie, odd rounds up
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81u);  // above tie
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80u);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80u);   // rounds to infinity
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::bit_cast<float>(0x7f800001u)))));  // signalling NaN
  std::mt19937 random(3);
  for (int i = 0; i < 2000000; ++i) {
    const float value = std::bit_cast<float>(static_cast<std::uint32_t>(random()));
    if (std::isnan(value) || std::abs(value) >= std::bit_cast<float>(0x7f7f8000u)) continue;
    ASSERT_EQ(float_to_bf16(value), reference_bf16(value)) << std::hexfloat << value;
  }
  for (std::uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const float value = bf16_to_float(static_cast<std::uint16_t>(bits));
    if (!std::isnan(value)) {
      ASSERT_EQ(float_to_bf16(value), bits);
    }
  }
}

TEST(DType, F16MatchesTheCompilersConversion) {
  auto compiler = [](float value) { return std::bit_cast<std::uint16_t>(static_cast<_Float16>(value)); };
  for (float value : {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 2.98e-8f, 5.96e-8f, 6.1e-5f,
                      -3.14159f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min()}) {
    EXPECT_EQ(float_to_f16(value), compiler(value)) << std::hexfloat << value;
  }
  std::mt19937 random(5);
  for (int i = 0; i < 2000000; ++i) {
    // Exponents around f16's range, where the interesting rounding happens.
    const std::uint32_t bits = (static_cast<std::uint32_t>(random()) & 0x807fffffu) |
                               (static_cast<std::uint32_t>(95 + random() % 50) << 23);
    const float value = std::bit_cast<float>(bits);
    ASSERT_EQ(float_to_f16(value), compiler(value)) << std::hexfloat << value;
  }
  for (std::uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const float value = f16_to_float(static_cast<std::uint16_t>(bits));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(value),
              std::bit_cast<std::uint32_t>(static_cast<float>(std::bit_cast<_Float16>(static_cast<std::uint16_t>(bits)))));
    if (!std::isnan(value)) {
      ASSERT_EQ(float_to_f16(value), bits);
    }
  }
}

TEST(DType, ArrayConversionsRoundTrip) {
  const float values[] = {1.5f, -2.25f, 1e-3f, 300.0f};
  std::uint16_t half[4];
  float back[4];
  convert_f32_to_f16(values, half, 4);
  convert_f16_to_f32(half, back, 4);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(back[i], values[i], std::abs(values[i]) * 1e-3);
  convert_f32_to_bf16(values, half, 4);
  convert_bf16_to_f32(half, back, 4);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(back[i], values[i], std::abs(values[i]) * 1e-2);
}

}  // namespace
}  // namespace ferry
