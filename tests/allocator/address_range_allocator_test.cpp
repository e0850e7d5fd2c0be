#include <gtest/gtest.h>

#include "allocator/address_range_allocator.h"
#include "allocator/allocator_errors.h"

namespace ferry {
namespace {

TEST(AddressRangeAllocator, FirstFitCoalescesAndRejectsDoubleFrees) {
  AddressRangeAllocator ranges(0x10000, 0x10000);
  auto a = ranges.allocate(0x4000, 0x1000);
  auto b = ranges.allocate(0x4000, 0x1000);
  auto c = ranges.allocate(0x4000, 0x1000);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, 0x10000u);
  EXPECT_EQ(*b, 0x14000u);
  EXPECT_FALSE(ranges.allocate(0x8000, 0x1000));
  ranges.free(*a, 0x4000);
  ranges.free(*b, 0x4000);
  EXPECT_EQ(*ranges.allocate(0x8000, 0x1000), 0x10000u);  // a and b merged
  EXPECT_THROW(ranges.free(*c + 0x4000, 0x4000), InvalidFreeError);  // already free
  EXPECT_THROW(ranges.free(0x1, 0x10), InvalidFreeError);             // outside the span
  ranges.free(*c, 0x4000);
  EXPECT_EQ(ranges.free_bytes(), 0x8000u);
}

TEST(AddressRangeAllocator, HonoursAlignment) {
  AddressRangeAllocator ranges(0x1000, 0x100000);
  auto a = ranges.allocate(0x100, 0x1000);
  auto b = ranges.allocate(0x100, 0x10000);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*b % 0x10000, 0u);
  ranges.free(*a, 0x100);
  ranges.free(*b, 0x100);
  EXPECT_EQ(ranges.free_bytes(), 0x100000u);
}

}  // namespace
}  // namespace ferry
