// Expandable segments on the emulated (host and meta) sources: pages map on demand, unmap on
// empty_cache, and freed memory never strands unusable slivers between segments.
#include <gtest/gtest.h>

#include <cstring>

#include "allocator/allocator_errors.h"
#include "allocator_test_support.h"

namespace ferry::testing {
namespace {

AllocatorConfig expandable() { return AllocatorConfig::parse("expandable_segments:True"); }

TEST(ExpandableSegments, GrowOnePageAtATimeInOneSegment) {
  MetaAllocator m(std::size_t{1} << 34, expandable());
  Allocation a = m.malloc(30 * kMiB);  // the host and meta sources' pages are 64 KiB in both pools
  EXPECT_EQ(m.reserved(), static_cast<std::int64_t>(30 * kMiB));
  Allocation b = m.malloc(31 * kMiB);  // more pages, right after
  EXPECT_EQ(m.reserved(), static_cast<std::int64_t>(61 * kMiB));
  EXPECT_EQ(address_of(b), address_of(a) + 30 * kMiB);  // contiguous in the same segment
  EXPECT_EQ(m.stats().segment.all().current, 1);
  Allocation small = m.malloc(1000);  // small pool: its own segment, one page
  EXPECT_EQ(m.reserved(), static_cast<std::int64_t>(61 * kMiB + 64 * 1024));
  m.free(a);
  m.free(b);
  m.free(small);
}

TEST(ExpandableSegments, EmptyCacheUnmapsFreePagesAndReleasesEmptySegments) {
  AllocatorConfig config = expandable();
  config.trace_entries = 100;
  MetaAllocator m(std::size_t{1} << 34, config);
  Allocation a = m.malloc(45 * kMiB);
  Allocation b = m.malloc(45 * kMiB);
  Allocation c = m.malloc(45 * kMiB);
  m.free(b);
  m.allocator.empty_cache();
  m.allocator.check_invariants();
  // b's hole is [45, 90) MiB, whole 64 KiB pages: it unmaps.
  EXPECT_EQ(m.reserved(), static_cast<std::int64_t>(90 * kMiB));
  bool saw_unmap = false;
  for (const TraceEvent& event : m.allocator.trace()) saw_unmap |= event.action == TraceAction::segment_unmap;
  EXPECT_TRUE(saw_unmap);
  Allocation again = m.malloc(45 * kMiB);  // maps the hole again
  EXPECT_EQ(again.address, b.address);
  m.free(a);
  m.free(c);
  m.free(again);
  m.allocator.empty_cache();
  EXPECT_EQ(m.reserved(), 0);
  EXPECT_EQ(m.stats().segment.all().current, 0);
  EXPECT_EQ(m.source.used_bytes(), 0u);
}

TEST(ExpandableSegments, GrowingRequestsExtendOneMappingInsteadOfNewSegments) {
  // Activations that grow every step (sequence length rising): fixed segments keep every old size
  // cached; an expandable segment maps pages next to the free tail and reuses it.
  auto peak_reserved = [](const AllocatorConfig& config) {
    MetaAllocator m(std::size_t{1} << 34, config);
    for (std::size_t step = 1; step <= 8; ++step) m.free(m.malloc(step * 6 * kMiB));
    return m.stats().reserved_bytes.all().peak;
  };
  // Fixed: 6..18 MiB share one 20 MiB segment, then 24 + 30 + 36 + 42 + 48 MiB segments.
  EXPECT_EQ(peak_reserved(AllocatorConfig{}), static_cast<std::int64_t>(200 * kMiB));
  // Expandable: the largest request's pages, reused by every smaller one.
  EXPECT_EQ(peak_reserved(expandable()), static_cast<std::int64_t>(48 * kMiB));
}

TEST(ExpandableSegments, MapFailureAtCapacityRaisesOutOfMemoryAndChangesNothing) {
  MetaAllocator m(60 * kMiB, expandable());
  Allocation a = m.malloc(40 * kMiB);
  EXPECT_THROW(m.allocator.malloc(30 * kMiB, 0, MemoryCategory::activations), OutOfMemoryError);
  m.allocator.check_invariants();
  EXPECT_EQ(m.reserved(), static_cast<std::int64_t>(40 * kMiB));
  Allocation b = m.malloc(20 * kMiB);
  EXPECT_EQ(m.reserved(), static_cast<std::int64_t>(60 * kMiB));
  m.free(a);
  m.free(b);
}

TEST(ExpandableSegments, WorkOnHostMemory) {
  HostSegmentSource source(128 * kMiB);
  ImmediateEventSource events;
  CachingAllocator allocator(source, events, expandable());
  Allocation a = allocator.malloc(50 * kMiB, 0, MemoryCategory::activations);
  std::memset(a.address, 0x5a, a.size);
  allocator.free(a);
  allocator.empty_cache();
  Allocation b = allocator.malloc(50 * kMiB, 0, MemoryCategory::activations);
  std::memset(b.address, 0xa5, b.size);  // remapped pages are writable again
  allocator.free(b);
  allocator.check_invariants();
}

TEST(ExpandableSegments, SourcesWithoutSupportAreRejectedByName) {
  struct FixedSource final : SegmentSource {
    std::string name() const override { return "fixed"; }
    std::size_t capacity() const override { return 1; }
    std::size_t used_bytes() const override { return 0; }
    void* allocate_segment(std::size_t) override { return nullptr; }
    void free_segment(void*, std::size_t) override {}
  } source;
  ImmediateEventSource events;
  try {
    CachingAllocator allocator(source, events, expandable());
    FAIL() << "expected AllocatorConfigError";
  } catch (const AllocatorConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("'fixed'"), std::string::npos);
  }
}

}  // namespace
}  // namespace ferry::testing
