// Rounding properties: monotonic, idempotent, at least the request, a multiple of 512; the
// power-of-two divisions and the segment sizes of each pool.
#include <gtest/gtest.h>

#include <random>

#include "allocator/size_rounding.h"

namespace ferry {
namespace {

void expect_rounding_properties(const AllocatorConfig& config) {
  std::mt19937_64 random(7);
  std::size_t previous_size = 0;
  std::size_t previous_rounded = 0;
  std::vector<std::size_t> sizes;
  for (int i = 0; i < 20000; ++i) sizes.push_back(std::size_t{1} << std::uniform_int_distribution<int>(0, 34)(random));
  for (int i = 0; i < 20000; ++i) sizes.push_back(std::uniform_int_distribution<std::size_t>(1, std::size_t{1} << 34)(random));
  for (std::size_t s = 1; s < 70000; s += 97) sizes.push_back(s);
  std::sort(sizes.begin(), sizes.end());
  for (std::size_t size : sizes) {
    const std::size_t rounded = round_size(size, config);
    ASSERT_GE(rounded, size);
    ASSERT_EQ(rounded % kMinBlockSize, 0u) << size;
    ASSERT_EQ(round_size(rounded, config), rounded) << "not idempotent at " << size;
    if (size >= previous_size) {
      ASSERT_GE(rounded, previous_rounded) << "not monotonic at " << size;
    }
    previous_size = size;
    previous_rounded = rounded;
  }
}

TEST(SizeRounding, PlainRoundingIs512Bytes) {
  AllocatorConfig config;
  EXPECT_EQ(round_size(1, config), 512u);
  EXPECT_EQ(round_size(512, config), 512u);
  EXPECT_EQ(round_size(513, config), 1024u);
  EXPECT_EQ(round_size(1200, config), 1536u);
  expect_rounding_properties(config);
}

TEST(SizeRounding, PowerOfTwoDivisions) {
  AllocatorConfig config = AllocatorConfig::parse("roundup_power2_divisions:4");
  EXPECT_EQ(round_size(1200, config), 1536u);  // not above 512 * 4: plain rounding
  EXPECT_EQ(round_size(2100, config), 2560u);  // 2048 + 512
  EXPECT_EQ(round_size(1200 << 10, config), 1280u << 10);  // 1.17 MiB -> 1.25 MiB
  EXPECT_EQ(round_size(std::size_t{1} << 30, config), std::size_t{1} << 30);  // powers of two stay
  expect_rounding_properties(config);
}

TEST(SizeRounding, PerBandDivisions) {
  AllocatorConfig config = AllocatorConfig::parse("roundup_power2_divisions:[256:1,512:2,>:8]");
  EXPECT_EQ(round_size((300u << 20) + 1, config), (300u << 20) + 512);  // 256 MiB band: plain
  EXPECT_EQ(round_size((600u << 20), config), 768u << 20);              // 512 MiB band: halves
  EXPECT_EQ(round_size((1100ull << 20), config), 1152ull << 20);        // above: eighths
  expect_rounding_properties(config);
}

TEST(SizeRounding, PoolsAndSegments) {
  EXPECT_TRUE(is_small_request(kSmallSize));
  EXPECT_FALSE(is_small_request(kSmallSize + 512));
  EXPECT_EQ(segment_size_for(512), 2u << 20);
  EXPECT_EQ(segment_size_for(kSmallSize), 2u << 20);
  EXPECT_EQ(segment_size_for(kSmallSize + 512), 20u << 20);
  EXPECT_EQ(segment_size_for((10u << 20) - 512), 20u << 20);
  EXPECT_EQ(segment_size_for(10u << 20), 10u << 20);
  EXPECT_EQ(segment_size_for((10u << 20) + 512), 12u << 20);
}

}  // namespace
}  // namespace ferry
