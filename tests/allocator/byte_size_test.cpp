#include <gtest/gtest.h>

#include <stdexcept>

#include "allocator/byte_size.h"

namespace ferry {
namespace {

TEST(ByteSize, ParsesTheUnitsPeopleWrite) {
  EXPECT_EQ(parse_byte_size("1048576"), 1048576u);
  EXPECT_EQ(parse_byte_size("512MiB"), 512u << 20);
  EXPECT_EQ(parse_byte_size("2GiB"), 2ull << 30);
  EXPECT_EQ(parse_byte_size("80GB"), 80000000000ull);
  EXPECT_EQ(parse_byte_size("1.5GiB"), 1610612736ull);
  EXPECT_EQ(parse_byte_size("4K"), 4096u);
  EXPECT_THROW(parse_byte_size("lots"), std::invalid_argument);
  EXPECT_THROW(parse_byte_size("12XB"), std::invalid_argument);
  EXPECT_THROW(parse_byte_size(""), std::invalid_argument);
}

TEST(ByteSize, Formats) {
  EXPECT_EQ(format_bytes(100), "100 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(50u << 20), "50.00 MiB");
}

}  // namespace
}  // namespace ferry
