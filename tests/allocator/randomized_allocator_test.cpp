// Randomized differential test: thousands of random mallocs, frees, record_streams, event
// completions and cache flushes against a reference model of the allocator's contract, with every
// structural invariant checked after every operation, for several seeds, streams and sources.
//
// The model knows what callers may rely on: live ranges never overlap; a block freed while other
// streams used it is not handed out again before their events complete; sizes, rounding and
// statistics agree with the live set; an out-of-memory error changes no live allocation.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <map>
#include <random>
#include <string>

#include "allocator/allocator_errors.h"
#include "allocator/size_rounding.h"
#include "allocator_test_support.h"

namespace ferry::testing {
namespace {

struct Scenario {
  std::string name;
  std::string alloc_conf;
  bool host_memory;       // real memory, filled and checked; otherwise meta
  std::size_t capacity;   // small capacities force the out-of-memory ladder
};

void PrintTo(const Scenario& scenario, std::ostream* out) { *out << scenario.name; }

constexpr StreamId kStreams = 3;

struct LiveAllocation {
  Allocation allocation;
  std::size_t requested;
  StreamId stream;
  std::uint64_t stamp;
  std::vector<StreamId> used_on = {};  // other streams named by record_stream
};

// A freed range that other streams used: it may not be handed out until each of those streams
// completed its work queued before the free (or the allocator synchronized every event).
struct PendingRange {
  std::uintptr_t address;
  std::size_t size;
  std::vector<StreamId> streams;
  std::array<std::uint64_t, kStreams> completions_at_free;
  std::uint64_t synchronizations_at_free;
};

class ReferenceModel {
 public:

  void expect_fresh_range(const Allocation& allocation) const {
    const auto start = address_of(allocation);
    const auto end = start + allocation.size;
    auto overlaps = [&](std::uintptr_t other, std::size_t size) { return start < other + size && other < end; };
    for (const auto& [address, live] : live_) {
      ASSERT_FALSE(overlaps(address, live.allocation.size)) << "overlaps a live allocation";
    }
    for (const PendingRange& pending : pending_) {
      if (!still_pending(pending)) continue;
      ASSERT_FALSE(overlaps(pending.address, pending.size))
          << "memory handed out before another stream's event completed";
    }
  }
  void add(const LiveAllocation& live) { live_.emplace(address_of(live.allocation), live); }
  LiveAllocation take(std::size_t index) {
    auto it = std::next(live_.begin(), static_cast<std::ptrdiff_t>(index));
    LiveAllocation live = it->second;
    live_.erase(it);
    return live;
  }
  void record_stream(std::size_t index, StreamId stream) {
    LiveAllocation& live = std::next(live_.begin(), static_cast<std::ptrdiff_t>(index))->second;
    if (stream != live.stream) live.used_on.push_back(stream);
  }
  void freed(const LiveAllocation& live) {
    if (live.used_on.empty()) return;
    pending_.push_back(PendingRange{address_of(live.allocation), live.allocation.size, live.used_on, completions_,
                                    synchronizations_});
  }
  void stream_completed(StreamId stream) { ++completions_[stream]; }
  void everything_synchronized() { ++synchronizations_; }
  void forget_completed() {
    std::erase_if(pending_, [&](const PendingRange& range) { return !still_pending(range); });
  }
  std::size_t size() const { return live_.size(); }
  const std::map<std::uintptr_t, LiveAllocation>& live() const { return live_; }

  void expect_statistics(const AllocatorStatistics& stats) const {
    std::int64_t allocated = 0;
    std::int64_t requested = 0;
    for (const auto& [address, live] : live_) {
      allocated += static_cast<std::int64_t>(live.allocation.size);
      requested += static_cast<std::int64_t>(live.requested);
    }
    ASSERT_EQ(stats.allocated_bytes.all().current, allocated);
    ASSERT_EQ(stats.requested_bytes.all().current, requested);
    ASSERT_EQ(stats.allocation.all().current, static_cast<std::int64_t>(live_.size()));
    ASSERT_LE(stats.allocated_bytes.all().current, stats.reserved_bytes.all().current);
  }

 private:
  bool still_pending(const PendingRange& range) const {
    if (synchronizations_ != range.synchronizations_at_free) return false;
    for (StreamId stream : range.streams) {
      if (completions_[stream] == range.completions_at_free[stream]) return true;
    }
    return false;
  }
  std::map<std::uintptr_t, LiveAllocation> live_;
  std::vector<PendingRange> pending_;
  std::array<std::uint64_t, kStreams> completions_{};
  std::uint64_t synchronizations_ = 0;
};

std::size_t random_size(std::mt19937_64& random) {
  std::uniform_int_distribution<int> kind(0, 9);
  const int k = kind(random);
  if (k < 5) return std::uniform_int_distribution<std::size_t>(1, kMiB)(random);          // small pool
  if (k < 8) return std::uniform_int_distribution<std::size_t>(kMiB + 1, 12 * kMiB)(random);
  if (k < 9) return std::uniform_int_distribution<std::size_t>(12 * kMiB, 48 * kMiB)(random);
  return std::size_t{1} << std::uniform_int_distribution<int>(9, 24)(random);           // powers of two
}

void stamp(const Scenario& scenario, const LiveAllocation& live) {
  if (!scenario.host_memory) return;
  std::memcpy(live.allocation.address, &live.stamp, sizeof live.stamp);
  std::memcpy(static_cast<char*>(live.allocation.address) + live.allocation.size - sizeof live.stamp, &live.stamp,
              sizeof live.stamp);
}

void expect_stamp(const Scenario& scenario, const LiveAllocation& live) {
  if (!scenario.host_memory) return;
  std::uint64_t head = 0;
  std::uint64_t tail = 0;
  std::memcpy(&head, live.allocation.address, sizeof head);
  std::memcpy(&tail, static_cast<char*>(live.allocation.address) + live.allocation.size - sizeof tail, sizeof tail);
  ASSERT_EQ(head, live.stamp) << "another allocation wrote into this one";
  ASSERT_EQ(tail, live.stamp) << "another allocation wrote into this one";
}

void run_scenario(const Scenario& scenario, std::uint64_t seed, int operations) {
  SCOPED_TRACE(scenario.name + " seed " + std::to_string(seed));
  const AllocatorConfig config = AllocatorConfig::parse(scenario.alloc_conf);
  std::unique_ptr<SegmentSource> source;
  if (scenario.host_memory) {
    source = std::make_unique<HostSegmentSource>(scenario.capacity);
  } else {
    source = std::make_unique<AddressSpaceSegmentSource>(scenario.capacity);
  }
  ManualEventSource events;
  CachingAllocator allocator(*source, events, config);
  ReferenceModel model;
  std::mt19937_64 random(seed);
  std::size_t synchronize_calls = 0;
  // The out-of-memory ladder may wait for every pending event; the model learns of it here.
  auto notice_synchronization = [&] {
    if (events.synchronize_calls() != synchronize_calls) {
      synchronize_calls = events.synchronize_calls();
      model.everything_synchronized();
    }
  };
  std::uint64_t next_stamp = 1;
  std::int64_t ooms = 0;

  for (int step = 0; step < operations; ++step) {
    const int action = std::uniform_int_distribution<int>(0, 99)(random);
    if (action < 50 || model.size() == 0) {
      const std::size_t bytes = random_size(random);
      const StreamId stream = std::uniform_int_distribution<StreamId>(0, kStreams - 1)(random);
      const AllocatorStatistics before = allocator.statistics();
      try {
        Allocation allocation = allocator.malloc(bytes, stream, MemoryCategory::activations);
        notice_synchronization();
        ASSERT_GE(allocation.size, round_size(bytes, config));
        ASSERT_EQ(address_of(allocation) % kMinBlockSize, 0u);
        model.expect_fresh_range(allocation);
        LiveAllocation live{allocation, bytes, stream, next_stamp++};
        stamp(scenario, live);
        model.add(live);
      } catch (const OutOfMemoryError&) {
        notice_synchronization();
        ++ooms;
        const AllocatorStatistics after = allocator.statistics();
        ASSERT_EQ(after.allocated_bytes.all().current, before.allocated_bytes.all().current);
        ASSERT_EQ(after.num_ooms, before.num_ooms + 1);
      }
    } else if (action < 85) {
      const std::size_t index = std::uniform_int_distribution<std::size_t>(0, model.size() - 1)(random);
      LiveAllocation live = model.take(index);
      expect_stamp(scenario, live);
      allocator.free(live.allocation);
      model.freed(live);
    } else if (action < 93) {
      const std::size_t index = std::uniform_int_distribution<std::size_t>(0, model.size() - 1)(random);
      const LiveAllocation& live = std::next(model.live().begin(), static_cast<std::ptrdiff_t>(index))->second;
      const StreamId stream = std::uniform_int_distribution<StreamId>(0, kStreams - 1)(random);
      allocator.record_stream(live.allocation, stream);
      model.record_stream(index, stream);
    } else if (action < 99) {
      const StreamId stream = std::uniform_int_distribution<StreamId>(0, kStreams - 1)(random);
      events.complete_stream(stream);
      model.stream_completed(stream);
    } else {
      allocator.empty_cache();
      notice_synchronization();
    }
    allocator.check_invariants();
    model.expect_statistics(allocator.statistics());
    model.forget_completed();
    if (::testing::Test::HasFatalFailure()) return;
  }

  // Free everything, let every event complete, empty the cache: nothing may remain reserved.
  while (model.size() > 0) {
    LiveAllocation live = model.take(0);
    expect_stamp(scenario, live);
    allocator.free(live.allocation);
  }
  events.complete_all();
  allocator.empty_cache();
  allocator.check_invariants();
  const AllocatorStatistics final_stats = allocator.statistics();
  EXPECT_EQ(final_stats.reserved_bytes.all().current, 0);
  EXPECT_EQ(final_stats.segment.all().current, 0);
  EXPECT_EQ(final_stats.active_bytes.all().current, 0);
  EXPECT_EQ(source->used_bytes(), 0u);
  EXPECT_EQ(final_stats.num_ooms, ooms);
  if (scenario.capacity < (std::size_t{1} << 30)) {
    EXPECT_GT(ooms, 0) << "the scenario never reached its capacity";
  }
}

class RandomizedAllocator : public ::testing::TestWithParam<Scenario> {};

TEST_P(RandomizedAllocator, AgreesWithTheReferenceModel) {
  for (std::uint64_t seed : {1u, 2u, 3u, 4u}) {
    run_scenario(GetParam(), seed, 2500);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sources, RandomizedAllocator,
    ::testing::Values(Scenario{"meta_unlimited", "", false, std::size_t{1} << 36},
                      Scenario{"meta_tight", "", false, 160 * kMiB},
                      Scenario{"meta_max_split", "max_split_size_mb:24", false, 200 * kMiB},
                      Scenario{"meta_roundup_gc", "roundup_power2_divisions:4,garbage_collection_threshold:0.6", false,
                               220 * kMiB},
                      Scenario{"meta_expandable", "expandable_segments:True", false, 200 * kMiB},
                      Scenario{"meta_expandable_unlimited", "expandable_segments:True,roundup_power2_divisions:[1:2,>:8]",
                               false, std::size_t{1} << 36},
                      Scenario{"host_tight", "", true, 160 * kMiB},
                      Scenario{"host_expandable", "expandable_segments:True,max_split_size_mb:32", true, 180 * kMiB}),
    [](const ::testing::TestParamInfo<Scenario>& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace ferry::testing
