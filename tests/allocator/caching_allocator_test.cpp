// Behaviour of the caching allocator's policy: rounding into segments, best fit, split and merge,
// max_split_size, streams and events, the out-of-memory ladder, garbage collection, statistics.
#include <gtest/gtest.h>

#include <cstring>

#include "allocator/allocator_errors.h"
#include "allocator/size_rounding.h"
#include "allocator_test_support.h"

namespace ferry::testing {
namespace {

TEST(CachingAllocator, SmallRequestRoundsTo512AndTakesATwoMiBSegment) {
  MetaAllocator m;
  Allocation a = m.malloc(1);
  EXPECT_EQ(a.size, 512u);
  EXPECT_EQ(m.reserved(), static_cast<std::int64_t>(2 * kMiB));
  const AllocatorStatistics stats = m.stats();
  EXPECT_EQ(stats.requested_bytes.all().current, 1);
  EXPECT_EQ(stats.allocated_bytes[StatPool::small].current, 512);
  EXPECT_EQ(stats.segment[StatPool::small].current, 1);
  EXPECT_EQ(stats.inactive_split_bytes.all().current, static_cast<std::int64_t>(2 * kMiB - 512));
  m.free(a);
  EXPECT_EQ(m.stats().inactive_split_bytes.all().current, 0);  // merged back into one block
}

TEST(CachingAllocator, SegmentSizesFollowTheRequest) {
  MetaAllocator m;
  Allocation medium = m.malloc(3 * kMiB);  // < 10 MiB: 20 MiB segment
  EXPECT_EQ(m.reserved(), static_cast<std::int64_t>(20 * kMiB));
  Allocation second = m.malloc(3 * kMiB);  // the 17 MiB remainder serves it
  EXPECT_EQ(m.reserved(), static_cast<std::int64_t>(20 * kMiB));
  EXPECT_EQ(address_of(second), address_of(medium) + 3 * kMiB);
  Allocation fits_rest = m.malloc(11 * kMiB + 1);  // the 14 MiB remainder, split again
  EXPECT_EQ(m.reserved(), static_cast<std::int64_t>(20 * kMiB));
  EXPECT_EQ(address_of(fits_rest), address_of(medium) + 6 * kMiB);
  Allocation large = m.malloc(15 * kMiB + 1);  // >= 10 MiB: a segment rounded up to a 2 MiB multiple
  EXPECT_EQ(m.reserved(), static_cast<std::int64_t>(36 * kMiB));
  EXPECT_EQ(large.size, 16 * kMiB);  // the 1 MiB - 512 remainder is too small to split off
  m.free(medium);
  m.free(second);
  m.free(fits_rest);
  m.free(large);
}

TEST(CachingAllocator, FreedBlockIsReusedWithoutNewSegments) {
  MetaAllocator m;
  Allocation first = m.malloc(64 * 1024);
  m.free(first);
  const auto device_allocs = m.stats().num_device_alloc;
  Allocation again = m.malloc(64 * 1024);
  EXPECT_EQ(again.address, first.address);
  EXPECT_EQ(m.stats().num_device_alloc, device_allocs);
  m.free(again);
}

TEST(CachingAllocator, BestFitTakesTheSmallestFittingBlockThenTheLowestAddress) {
  MetaAllocator m;
  Allocation a = m.malloc(8192);
  Allocation b = m.malloc(512);
  Allocation c = m.malloc(4096);
  Allocation d = m.malloc(512);
  Allocation e = m.malloc(4096);
  Allocation f = m.malloc(512);
  m.free(a);  // free 8 KiB at a
  m.free(c);  // free 4 KiB at c
  m.free(e);  // free 4 KiB at e
  Allocation fits_four = m.malloc(3000);
  EXPECT_EQ(fits_four.address, c.address);  // 4 KiB beats 8 KiB; c beats e by address
  Allocation fits_eight = m.malloc(6000);
  EXPECT_EQ(fits_eight.address, a.address);
  for (Allocation x : {b, d, f, fits_four, fits_eight}) m.free(x);
  EXPECT_EQ(m.allocator.snapshot().segments.at(0).blocks.size(), 1u);
}

TEST(CachingAllocator, FreeMergesWithBothNeighbours) {
  MetaAllocator m;
  Allocation a = m.malloc(kMiB / 4);
  Allocation b = m.malloc(kMiB / 4);
  Allocation c = m.malloc(kMiB / 4);
  m.free(a);
  m.free(c);
  EXPECT_EQ(m.allocator.snapshot().segments.at(0).blocks.size(), 3u);
  m.free(b);
  const AllocatorSnapshot snapshot = m.allocator.snapshot();
  ASSERT_EQ(snapshot.segments.at(0).blocks.size(), 1u);
  EXPECT_EQ(snapshot.segments[0].blocks[0].state, BlockState::inactive);
  EXPECT_EQ(snapshot.segments[0].blocks[0].size, 2 * kMiB);
}

TEST(CachingAllocator, LargePoolSplitsOnlyWhenTheRemainderExceedsOneMiB) {
  MetaAllocator m;
  Allocation a = m.malloc(19 * kMiB + 512);  // remainder 1 MiB - 512: not split
  EXPECT_EQ(a.size, 20 * kMiB);
  EXPECT_EQ(m.stats().allocated_bytes.all().current, static_cast<std::int64_t>(20 * kMiB));
  EXPECT_EQ(m.stats().requested_bytes.all().current, static_cast<std::int64_t>(19 * kMiB + 512));
  m.free(a);
}

TEST(CachingAllocator, MaxSplitSizeKeepsOversizeBlocksWhole) {
  AllocatorConfig config = AllocatorConfig::parse("max_split_size_mb:40");
  MetaAllocator m(std::size_t{1} << 34, config);
  Allocation big = m.malloc(100 * kMiB);
  m.free(big);
  Allocation small = m.malloc(30 * kMiB);  // below max_split: must not take the 100 MiB block
  EXPECT_NE(small.address, big.address);
  Allocation near = m.malloc(90 * kMiB);  // >= max_split and 100 < 90 + 20: takes it, unsplit
  EXPECT_EQ(near.address, big.address);
  EXPECT_EQ(near.size, 100 * kMiB);
  m.free(near);
  Allocation far = m.malloc(60 * kMiB);  // 100 >= 60 + 20: a new segment
  EXPECT_NE(far.address, big.address);
  m.free(small);
  m.free(far);
}

TEST(CachingAllocator, BlocksAreReusedOnlyOnTheirOwnStream) {
  MetaAllocator m;
  Allocation on_one = m.malloc(4096, 1);
  m.free(on_one);
  Allocation on_two = m.malloc(4096, 2);
  EXPECT_NE(on_two.address, on_one.address);
  EXPECT_EQ(m.stats().segment.all().current, 2);
  m.free(on_two);
}

TEST(CachingAllocator, RecordStreamDefersReuseUntilTheEventCompletes) {
  MetaAllocator m;
  Allocation a = m.malloc(4096, 0);
  m.allocator.record_stream(a, 7);
  m.free(a);
  EXPECT_EQ(m.stats().active_bytes.all().current, 4096);  // awaiting its event
  EXPECT_EQ(m.stats().allocated_bytes.all().current, 0);
  Allocation b = m.malloc(4096, 0);
  EXPECT_NE(b.address, a.address);
  EXPECT_EQ(m.allocator.snapshot().segments[0].blocks[0].state, BlockState::active_awaiting_free);
  m.events.complete_stream(7);
  m.free(b);
  Allocation c = m.malloc(4096, 0);  // events polled at malloc: a's block is back
  EXPECT_EQ(c.address, a.address);
  m.free(c);
}

TEST(CachingAllocator, ABlockAwaitingSeveralStreamsCountsOnce) {
  MetaAllocator m;
  Allocation a = m.malloc(4096, 0);
  m.allocator.record_stream(a, 1);
  m.allocator.record_stream(a, 2);
  m.free(a);
  EXPECT_EQ(m.allocator.free_space().awaiting_event_bytes, 4096u);
  m.events.complete_stream(1);
  m.free(m.malloc(512, 0));  // polls events: stream 2 still pending
  EXPECT_EQ(m.allocator.free_space().awaiting_event_bytes, 4096u);
  m.events.complete_stream(2);
  m.free(m.malloc(512, 0));
  EXPECT_EQ(m.allocator.free_space().awaiting_event_bytes, 0u);
}

TEST(CachingAllocator, OutOfMemoryLadderFreesCachedSegmentsAndRetries) {
  MetaAllocator m(40 * kMiB);
  Allocation a = m.malloc(20 * kMiB);
  m.free(a);  // 20 MiB cached
  Allocation b = m.malloc(30 * kMiB);
  EXPECT_EQ(m.stats().num_alloc_retries, 1);
  EXPECT_EQ(m.reserved(), static_cast<std::int64_t>(30 * kMiB));
  m.free(b);
}

TEST(CachingAllocator, LadderWaitsForPendingEventsBeforeGivingUp) {
  MetaAllocator m(40 * kMiB);
  Allocation a = m.malloc(30 * kMiB);
  m.allocator.record_stream(a, 3);
  m.free(a);
  Allocation b = m.malloc(30 * kMiB);  // only possible after synchronizing stream 3's event
  EXPECT_EQ(m.stats().num_sync_all_streams, 1);
  EXPECT_EQ(m.events.pending_count(), 0u);
  m.free(b);
}

// A miss waits for blocks awaiting their events before it takes a new segment: memory never grows because
// a copy on another stream is still running (a dry run's events complete at once). Which free block a hit
// takes can still depend on timing: see docs/benchmarks.md, the GPU section's offloaded run.
TEST(CachingAllocator, MemoryNeverGrowsWhileAFreedBlockAwaitsItsEvent) {
  MetaAllocator m;
  Allocation a = m.malloc(30 * kMiB);
  m.allocator.record_stream(a, 3);
  m.free(a);
  Allocation b = m.malloc(30 * kMiB);
  EXPECT_EQ(b.address, a.address);
  EXPECT_EQ(m.reserved(), static_cast<std::int64_t>(30 * kMiB));
  EXPECT_EQ(m.stats().num_sync_all_streams, 1);
  Allocation small = m.malloc(4096);  // a hit: nothing is awaited
  EXPECT_EQ(m.stats().num_sync_all_streams, 1);
  m.free(small);
  m.free(b);
}

TEST(CachingAllocator, OutOfMemoryIsTypedExplainsAndChangesNothing) {
  MetaAllocator m(64 * kMiB);
  Allocation held = m.malloc(30 * kMiB, 0, MemoryCategory::parameters);
  const AllocatorSnapshot before = m.allocator.snapshot();
  try {
    m.allocator.malloc(50 * kMiB, 0, MemoryCategory::activations, m.allocator.intern_tag("h.0.mlp"));
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& error) {
    const std::string message = error.what();
    EXPECT_EQ(error.requested_bytes(), 50 * kMiB);
    EXPECT_NE(message.find("tried to allocate 50.00 MiB"), std::string::npos) << message;
    EXPECT_NE(message.find("capacity of 64.00 MiB"), std::string::npos) << message;
    EXPECT_NE(message.find("parameters 30.00 MiB"), std::string::npos) << message;
    EXPECT_NE(message.find("'h.0.mlp'"), std::string::npos) << message;
    EXPECT_NE(message.find("--checkpointing"), std::string::npos) << message;
  }
  m.allocator.check_invariants();
  EXPECT_EQ(m.stats().num_ooms, 1);
  const AllocatorSnapshot after = m.allocator.snapshot();
  ASSERT_EQ(after.segments.size(), before.segments.size());
  EXPECT_EQ(after.segments[0].blocks.size(), before.segments[0].blocks.size());
  EXPECT_EQ(after.segments[0].allocated_size, before.segments[0].allocated_size);
  Allocation smaller = m.malloc(20 * kMiB);  // a smaller request afterwards succeeds
  m.free(smaller);
  m.free(held);
}

TEST(CachingAllocator, OutOfMemoryMessageSuggestsExpandableSegmentsWhenFragmented) {
  MetaAllocator m(60 * kMiB);
  std::vector<Allocation> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(m.malloc(4 * kMiB));  // one 20 MiB segment, split
  for (int i = 0; i < 2; ++i) blocks.push_back(m.malloc(19 * kMiB));
  m.free(blocks[0]);
  m.free(blocks[2]);  // 4 + 8 MiB free but split: cannot be returned
  try {
    m.allocator.malloc(13 * kMiB, 0, MemoryCategory::activations);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& error) {
    EXPECT_NE(std::string(error.what()).find("expandable_segments:True"), std::string::npos) << error.what();
  }
  for (std::size_t i : {1u, 3u, 4u}) m.free(blocks[i]);
}

TEST(CachingAllocator, GarbageCollectionReleasesOldCachedSegmentsAboveTheThreshold) {
  AllocatorConfig config = AllocatorConfig::parse("garbage_collection_threshold:0.5");
  MetaAllocator m(100 * kMiB, config);
  Allocation a = m.malloc(30 * kMiB);
  Allocation b = m.malloc(12 * kMiB);
  Allocation c = m.malloc(16 * kMiB);
  m.free(a);
  m.free(b);
  m.free(c);
  EXPECT_EQ(m.reserved(), static_cast<std::int64_t>(58 * kMiB));
  EXPECT_EQ(m.stats().num_gc_freed_segments, 0);
  // No cached block fits 40 MiB and 58 MiB reserved is above 50: collect before asking for more.
  Allocation d = m.malloc(40 * kMiB);
  EXPECT_EQ(m.stats().num_gc_freed_segments, 1);  // the 12 MiB block alone brings it under 50 MiB
  EXPECT_EQ(m.reserved(), static_cast<std::int64_t>(86 * kMiB));
  EXPECT_EQ(m.stats().num_alloc_retries, 0);
  m.free(d);
}

TEST(CachingAllocator, EmptyCacheReturnsEverythingOnceAllIsFree) {
  MetaAllocator m;
  std::vector<Allocation> live;
  for (std::size_t bytes : {512ul, 100000ul, 3 * kMiB, 50 * kMiB}) live.push_back(m.malloc(bytes));
  for (Allocation a : live) m.free(a);
  EXPECT_GT(m.reserved(), 0);
  m.allocator.empty_cache();
  m.allocator.check_invariants();
  EXPECT_EQ(m.reserved(), 0);
  EXPECT_EQ(m.stats().segment.all().current, 0);
  EXPECT_TRUE(m.allocator.snapshot().segments.empty());
  EXPECT_EQ(m.source.used_bytes(), 0u);
}

TEST(CachingAllocator, PeaksResetToCurrent) {
  MetaAllocator m;
  Allocation a = m.malloc(8 * kMiB);
  Allocation b = m.malloc(8 * kMiB);
  m.free(b);
  EXPECT_EQ(m.stats().allocated_bytes.all().peak, static_cast<std::int64_t>(16 * kMiB));
  m.allocator.reset_peak_statistics();
  EXPECT_EQ(m.stats().allocated_bytes.all().peak, static_cast<std::int64_t>(8 * kMiB));
  m.free(a);
}

TEST(CachingAllocator, StatisticsArePerCategory) {
  MetaAllocator m;
  Allocation p = m.malloc(3000, 0, MemoryCategory::parameters);
  Allocation g = m.malloc(5 * kMiB, 0, MemoryCategory::gradients);
  const AllocatorStatistics stats = m.stats();
  EXPECT_EQ(stats.category_allocated(MemoryCategory::parameters).current, 3072);
  EXPECT_EQ(stats.category_requested_bytes[category_index(MemoryCategory::parameters)].current, 3000);
  EXPECT_EQ(stats.category_allocated(MemoryCategory::gradients).current, static_cast<std::int64_t>(5 * kMiB));
  m.free(p);
  EXPECT_EQ(m.stats().category_allocated(MemoryCategory::parameters).current, 0);
  EXPECT_EQ(m.stats().category_allocated(MemoryCategory::parameters).peak, 3072);
  m.free(g);
}

TEST(CachingAllocator, TraceRecordsEventsInOrderAndIsBounded) {
  AllocatorConfig config;
  config.trace_entries = 4;
  MetaAllocator m(std::size_t{1} << 34, config);
  const TagId tag = m.allocator.intern_tag("h.3.attn.qkv");
  Allocation a = m.allocator.malloc(1000, 0, MemoryCategory::activations, tag);
  m.free(a);
  std::vector<TraceEvent> events = m.allocator.trace();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].action, TraceAction::segment_alloc);
  EXPECT_EQ(events[1].action, TraceAction::alloc);
  EXPECT_EQ(events[1].tag, tag);
  EXPECT_EQ(events[1].size, 1024u);
  EXPECT_EQ(events[2].action, TraceAction::free_requested);
  EXPECT_EQ(events[3].action, TraceAction::free_completed);
  EXPECT_LE(events[0].time_ns, events[3].time_ns);
  m.allocator.empty_cache();
  events = m.allocator.trace();
  EXPECT_EQ(events.back().action, TraceAction::segment_free);
  EXPECT_EQ(events.front().action, TraceAction::alloc);  // oldest dropped
  EXPECT_EQ(m.allocator.trace_dropped(), 1u);
  EXPECT_EQ(m.allocator.tag_name(tag), "h.3.attn.qkv");
}

TEST(CachingAllocator, SnapshotSumsEqualStatistics) {
  MetaAllocator m;
  std::vector<Allocation> live;
  for (std::size_t bytes : {700ul, 3 * kMiB, 12 * kMiB, 40000ul}) live.push_back(m.malloc(bytes));
  m.free(live[1]);
  std::size_t allocated = 0;
  std::size_t reserved = 0;
  for (const SegmentSnapshot& segment : m.allocator.snapshot().segments) {
    allocated += segment.allocated_size;
    reserved += segment.total_size;
  }
  EXPECT_EQ(static_cast<std::int64_t>(allocated), m.allocated());
  EXPECT_EQ(static_cast<std::int64_t>(reserved), m.reserved());
  for (std::size_t i : {0u, 2u, 3u}) m.free(live[i]);
}

TEST(CachingAllocator, InvalidFreesAreReported) {
  MetaAllocator m;
  Allocation a = m.malloc(4096);
  EXPECT_THROW(m.allocator.free(reinterpret_cast<void*>(address_of(a) + 512)), InvalidFreeError);
  m.allocator.free(a.address);
  EXPECT_THROW(m.allocator.free(a), InvalidFreeError);
  EXPECT_THROW(m.allocator.free(reinterpret_cast<void*>(std::uintptr_t{0x1234})), InvalidFreeError);
  m.allocator.check_invariants();
}

TEST(CachingAllocator, ZeroBytesGivesAnEmptyAllocation) {
  MetaAllocator m;
  Allocation a = m.malloc(0);
  EXPECT_FALSE(a);
  m.free(a);
  EXPECT_EQ(m.reserved(), 0);
}

TEST(HostSegmentSource, MemoryIsWritableAndCapacityIsEnforced) {
  HostSegmentSource source(64 * kMiB);
  ImmediateEventSource events;
  CachingAllocator allocator(source, events);
  Allocation a = allocator.malloc(30 * kMiB, 0, MemoryCategory::activations);
  std::memset(a.address, 0xab, a.size);
  EXPECT_EQ(static_cast<unsigned char*>(a.address)[a.size - 1], 0xab);
  Allocation b = allocator.malloc(30 * kMiB, 0, MemoryCategory::activations);
  EXPECT_THROW(allocator.malloc(10 * kMiB, 0, MemoryCategory::activations), OutOfMemoryError);
  allocator.free(a);
  allocator.free(b);
  allocator.check_invariants();
}

TEST(HostSegmentSource, HandsOutTheSameOffsetsAsTheMetaSource) {
  HostSegmentSource host(256 * kMiB);
  AddressSpaceSegmentSource meta(256 * kMiB);
  ImmediateEventSource events;
  CachingAllocator on_host(host, events);
  CachingAllocator on_meta(meta, events);
  std::vector<std::pair<Allocation, Allocation>> live;
  const std::size_t sizes[] = {3 * kMiB, 100, 25 * kMiB, 7000, 12 * kMiB, 60 * kMiB};
  for (std::size_t bytes : sizes) {
    live.emplace_back(on_host.malloc(bytes, 0, MemoryCategory::workspace),
                      on_meta.malloc(bytes, 0, MemoryCategory::workspace));
  }
  on_host.free(live[2].first);
  on_meta.free(live[2].second);
  Allocation host_again = on_host.malloc(20 * kMiB, 0, MemoryCategory::workspace);
  Allocation meta_again = on_meta.malloc(20 * kMiB, 0, MemoryCategory::workspace);
  const auto host_base = address_of(live[0].first);
  const auto meta_base = address_of(live[0].second);
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (i == 2) continue;
    EXPECT_EQ(address_of(live[i].first) - host_base, address_of(live[i].second) - meta_base) << i;
  }
  EXPECT_EQ(address_of(host_again) - host_base, address_of(meta_again) - meta_base);
  EXPECT_EQ(on_host.statistics().reserved_bytes.all().peak, on_meta.statistics().reserved_bytes.all().peak);
}

}  // namespace
}  // namespace ferry::testing
