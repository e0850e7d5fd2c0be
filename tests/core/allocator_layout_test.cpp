// The allocator's layout rebuilt from a profile's events equals the allocator's own snapshot taken at
// that moment (segments, allocated blocks with their categories and tags, cached blocks between them),
// with and without expandable segments; segments from before the profile are drawn apart.
#include <gtest/gtest.h>

#include "engine/core/allocator_layout.h"
#include "engine/core/memory_timeline.h"
#include "engine/core/tensor.h"

namespace ferry {
namespace {

constexpr std::int64_t kMiB = 1 << 20;

Tensor bytes(Device& device, std::int64_t count, MemoryCategory category, const char* tag) {
  return Tensor::empty(device, {count / 2}, DType::u16, category, tag);
}

void expect_layout_equals_snapshot(const AllocatorLayout& layout, const AllocatorSnapshot& snapshot) {
  std::vector<BlockSnapshot> allocated;
  std::size_t reserved = 0;
  for (const SegmentSnapshot& segment : snapshot.segments) {
    reserved += segment.total_size;
    for (const BlockSnapshot& block : segment.blocks) {
      if (block.state == BlockState::active_allocated) allocated.push_back(block);
    }
  }
  EXPECT_EQ(layout.reserved(), static_cast<std::int64_t>(reserved));
  EXPECT_EQ(layout.unplaced_reserved, 0);
  std::vector<LayoutBlock> layout_allocated;
  for (const LayoutSegment& segment : layout.segments) {
    EXPECT_NE(segment.kind, SegmentKind::before_profile);
    std::uintptr_t cursor = segment.address;
    for (const LayoutBlock& block : segment.blocks) {
      EXPECT_EQ(block.address, cursor) << "blocks tile the segment";
      cursor += block.size;
      if (block.allocated) layout_allocated.push_back(block);
    }
    EXPECT_EQ(cursor, segment.address + segment.size);
  }
  ASSERT_EQ(layout_allocated.size(), allocated.size());
  for (std::size_t i = 0; i < allocated.size(); ++i) {
    EXPECT_EQ(layout_allocated[i].address, allocated[i].address);
    EXPECT_EQ(layout_allocated[i].size, allocated[i].size);
    EXPECT_EQ(layout_allocated[i].category, allocated[i].category);
    EXPECT_EQ(layout_allocated[i].tag, allocated[i].tag);
  }
}

class AllocatorLayoutTest : public ::testing::TestWithParam<bool> {};

TEST_P(AllocatorLayoutTest, EqualsTheAllocatorsSnapshotAtThePeak) {
  DeviceOptions options;
  options.memory_limit = 256 * kMiB;
  options.allocator_config.expandable_segments = GetParam();
  auto device = create_device(options);
  MemoryProfiler profiler(*device);
  profiler.start();
  AllocatorSnapshot at_peak;
  {
    Tensor weight = bytes(*device, 30 * kMiB, MemoryCategory::parameters, "weight");
    Tensor small = bytes(*device, 4096, MemoryCategory::workspace, "small");
    Tensor gone = bytes(*device, 12 * kMiB, MemoryCategory::activations, "gone");
    gone = Tensor();  // leaves a cached hole
    Tensor first = bytes(*device, 6 * kMiB, MemoryCategory::activations, "first");
    Tensor second = bytes(*device, 20 * kMiB, MemoryCategory::activations, "second");
    at_peak = device->allocator().snapshot();
  }
  device->allocator().empty_cache();
  const MemoryProfile profile = profiler.stop();
  const MemoryTimeline timeline = build_memory_timeline(profile);
  const AllocatorLayout layout = allocator_layout_at(profile, timeline.peak_event_count);
  expect_layout_equals_snapshot(layout, at_peak);
  EXPECT_EQ(layout.allocated(), timeline.peak_allocated);
  const AllocatorLayout end = allocator_layout_at(profile, profile.events.size());
  EXPECT_EQ(end.reserved(), device->allocator().statistics().reserved_bytes.all().current);
  EXPECT_EQ(end.allocated(), 0);
}

INSTANTIATE_TEST_SUITE_P(Segments, AllocatorLayoutTest, ::testing::Values(false, true),
                         [](const auto& param_info) { return param_info.param ? "expandable" : "fixed"; });

TEST(AllocatorLayout, SegmentsFromBeforeTheProfileAreDrawnApart) {
  MemoryProfile profile;
  profile.initial_reserved = 20 * kMiB;
  profile.initial_allocations = {{0x100000, 4 * kMiB, MemoryCategory::parameters, "wte", 0}};
  const AllocatorLayout layout = allocator_layout_at(profile, 0);
  ASSERT_EQ(layout.segments.size(), 1u);
  EXPECT_EQ(layout.segments[0].kind, SegmentKind::before_profile);
  EXPECT_EQ(layout.unplaced_reserved, 16 * kMiB);
  EXPECT_EQ(layout.reserved(), 20 * kMiB);
}

// Every block ever seen in a segment from before the profile stays inside a drawn segment, also after
// it was freed, unless its segment was released: what memory_viz needs to replay a written snapshot.
TEST(AllocatorLayout, BlocksSeenInEarlierSegmentsStayCovered) {
  MemoryProfile profile;
  profile.initial_reserved = 20 * kMiB;
  profile.initial_allocations = {{0x100000, 2 * kMiB, MemoryCategory::parameters, "wte", 0}};
  const auto event = [](TraceAction action, std::uintptr_t address, std::size_t size) {
    return TraceEvent{action, MemoryCategory::activations, 0, 0, address, size, 0};
  };
  profile.events = {event(TraceAction::alloc, 0x100000 + 2 * kMiB, 1 * kMiB),        // touches wte: one segment
                    event(TraceAction::free_requested, 0x100000 + 2 * kMiB, 1 * kMiB),
                    event(TraceAction::free_requested, 0x100000, 2 * kMiB),
                    event(TraceAction::alloc, 0x900000, 4 * kMiB),                    // another earlier segment
                    event(TraceAction::segment_free, 0x900000 - kMiB, 8 * kMiB)};      // ... released, blocks and all
  const AllocatorLayout end = allocator_layout_at(profile, profile.events.size());
  ASSERT_EQ(end.segments.size(), 1u);
  EXPECT_EQ(end.segments[0].address, 0x100000u);
  EXPECT_EQ(end.segments[0].size, static_cast<std::size_t>(3 * kMiB));
  EXPECT_EQ(end.segments[0].allocated_bytes(), 0u);
  EXPECT_EQ(end.unplaced_reserved, 20 * kMiB - 8 * kMiB - 3 * kMiB);
  EXPECT_EQ(end.reserved(), 12 * kMiB);
  const AllocatorLayout before_release = allocator_layout_at(profile, 4);
  ASSERT_EQ(before_release.segments.size(), 2u);
  EXPECT_EQ(before_release.allocated(), 4 * kMiB);
}

}  // namespace
}  // namespace ferry
