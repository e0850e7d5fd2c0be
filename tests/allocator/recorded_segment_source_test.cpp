// RecordedSegmentSource: segments at the recorded addresses while the requests match the recording, the
// inner source's after the first that does not; capacity counted once (a shadow segment in the inner
// source); a recorded range that overlaps a live segment is not handed out twice.
#include <gtest/gtest.h>

#include <cstdint>

#include "allocator/range_segment_source.h"
#include "allocator/recorded_segment_source.h"

namespace ferry {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

std::uintptr_t as_address(void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer); }

TEST(RecordedSegmentSource, FollowsTheRecordingWhileTheSizesMatch) {
  AddressSpaceSegmentSource inner(64 * kMiB, /*cuda_pages=*/true);
  const std::uintptr_t high = 0x7f0000000000ull, low = 0x7e0000000000ull;
  RecordedSegmentSource source(inner, {{high, 20 * kMiB}, {low, 2 * kMiB}, {0x7d0000000000ull, 2 * kMiB}});
  void* first = source.allocate_segment(20 * kMiB);
  void* second = source.allocate_segment(2 * kMiB);
  EXPECT_EQ(as_address(first), high);
  EXPECT_EQ(as_address(second), low);  // not increasing: where the traced program's cudaMalloc put it
  EXPECT_EQ(source.used_bytes(), 22 * kMiB);  // counted by the shadows in the inner source
  void* third = source.allocate_segment(4 * kMiB);  // the recording says 2 MiB: from here on, the inner source's
  EXPECT_NE(as_address(third), 0x7d0000000000ull);
  EXPECT_EQ(source.followed(), 2u);
  EXPECT_EQ(source.allocate_segment(64 * kMiB), nullptr);  // capacity is the inner source's
  source.free_segment(first, 20 * kMiB);
  source.free_segment(second, 2 * kMiB);
  source.free_segment(third, 4 * kMiB);
  EXPECT_EQ(source.used_bytes(), 0u);
}

TEST(RecordedSegmentSource, NeverHandsOutARangeThatIsLive) {
  AddressSpaceSegmentSource inner(64 * kMiB, /*cuda_pages=*/true);
  const std::uintptr_t address = 0x7f0000000000ull;
  RecordedSegmentSource source(inner, {{address, 2 * kMiB}, {address + kMiB, 2 * kMiB}});
  void* first = source.allocate_segment(2 * kMiB);
  void* second = source.allocate_segment(2 * kMiB);  // overlaps the first, still live
  EXPECT_EQ(as_address(first), address);
  EXPECT_NE(as_address(second), address + kMiB);
  EXPECT_EQ(source.followed(), 1u);
  source.free_segment(second, 2 * kMiB);
  source.free_segment(first, 2 * kMiB);
}

}  // namespace
}  // namespace ferry
