// Expandable segments against a ledger of what must be mapped: a million random mallocs, frees,
// record_streams, event completions, empty_caches and out-of-memory ladders on the host and meta sources.
// The ledger (PageLedgerSource) sees every map and unmap: each is whole pages, never maps a mapped page,
// never unmaps one that is unmapped or under a live allocation; after empty_cache exactly the pages under
// live allocations stay mapped; destroying the allocator with allocations still live gives every page
// and range back. And a release the source refuses (a failed madvise or driver call) is counted, keeps
// the memory cached and never ends the process.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "allocator/allocator_errors.h"
#include "allocator/size_rounding.h"
#include "allocator_test_support.h"
#include "page_ledger_source.h"

namespace ferry::testing {
namespace {

constexpr StreamId kStreams = 3;

struct PagesScenario {
  std::string name;
  std::string alloc_conf;
  bool host_memory;
  std::size_t capacity;
  int operations;
  int refuse_every;  // one empty_cache in this many refuses one release (0: never)
};

void PrintTo(const PagesScenario& scenario, std::ostream* out) { *out << scenario.name; }

std::unique_ptr<PageLedgerSource> ledger_over(const PagesScenario& scenario) {
  std::unique_ptr<SegmentSource> inner;
  if (scenario.host_memory) {
    inner = std::make_unique<HostSegmentSource>(scenario.capacity);
  } else {
    inner = std::make_unique<AddressSpaceSegmentSource>(scenario.capacity);
  }
  return std::make_unique<PageLedgerSource>(std::move(inner));
}

std::size_t random_size(std::mt19937_64& random) {
  const int kind = std::uniform_int_distribution<int>(0, 9)(random);
  if (kind < 5) return std::uniform_int_distribution<std::size_t>(1, kMiB)(random);
  if (kind < 8) return std::uniform_int_distribution<std::size_t>(kMiB + 1, 12 * kMiB)(random);
  if (kind < 9) return std::uniform_int_distribution<std::size_t>(12 * kMiB, 48 * kMiB)(random);
  return std::size_t{1} << std::uniform_int_distribution<int>(9, 24)(random);
}

// The live allocations, by address: what must stay mapped.
class LiveSet {
 public:
  void add(const Allocation& allocation) { live_.emplace(address_of(allocation), allocation); }
  Allocation take(std::size_t index) {
    auto it = std::next(live_.begin(), static_cast<std::ptrdiff_t>(index));
    const Allocation allocation = it->second;
    live_.erase(it);
    return allocation;
  }
  const Allocation& at(std::size_t index) const { return std::next(live_.begin(), static_cast<std::ptrdiff_t>(index))->second; }
  std::size_t size() const { return live_.size(); }
  bool overlaps(std::uintptr_t address, std::size_t bytes) const {
    auto it = live_.lower_bound(address);
    if (it != live_.end() && it->first < address + bytes) return true;
    if (it == live_.begin()) return false;
    --it;
    return it->first + it->second.size > address;
  }
  const std::map<std::uintptr_t, Allocation>& all() const { return live_; }

 private:
  std::map<std::uintptr_t, Allocation> live_;
};

// The ranges that must be mapped: each live allocation's pages on its segment's page grid (the
// source's expandable page of the segment's pool).
IntervalSet required_pages(const CachingAllocator& allocator, const LiveSet& live) {
  IntervalSet pages;
  const AllocatorSnapshot snapshot = allocator.snapshot();
  for (const auto& [address, allocation] : live.all()) {
    const SegmentSnapshot* segment = nullptr;
    for (const SegmentSnapshot& each : snapshot.segments) {
      if (each.address <= address && address < each.address + each.address_space) segment = &each;
    }
    if (segment == nullptr) {
      ADD_FAILURE() << "a live allocation outside every segment";
      continue;
    }
    const std::size_t page = allocator.source().expandable_page_bytes(segment->small_pool);
    const std::uintptr_t first = segment->address + (address - segment->address) / page * page;
    const std::uintptr_t end = segment->address + (address + allocation.size - segment->address + page - 1) / page * page;
    pages.insert(first, end - first);
  }
  return pages;
}

void run_pages_scenario(const PagesScenario& scenario, std::uint64_t seed) {
  SCOPED_TRACE(scenario.name + " seed " + std::to_string(seed));
  std::unique_ptr<PageLedgerSource> ledger = ledger_over(scenario);
  PageLedgerSource& source = *ledger;
  ManualEventSource events;
  auto allocator = std::make_unique<CachingAllocator>(source, events, AllocatorConfig::parse(scenario.alloc_conf));
  LiveSet live;
  source.live_overlaps = [&](std::uintptr_t address, std::size_t bytes) { return live.overlaps(address, bytes); };
  std::mt19937_64 random(seed);
  std::int64_t ooms = 0;
  int exact_checks = 0;
  std::uint64_t stamp = 0;

  for (int step = 0; step < scenario.operations; ++step) {
    const int action = std::uniform_int_distribution<int>(0, 999)(random);
    if (action < 480 || live.size() == 0) {
      const std::size_t bytes = random_size(random);
      const StreamId stream = std::uniform_int_distribution<StreamId>(0, kStreams - 1)(random);
      try {
        const Allocation allocation = allocator->malloc(bytes, stream, MemoryCategory::activations);
        ASSERT_TRUE(source.mapped_pages().covers(address_of(allocation), allocation.size)) << "an allocation on a page that is not mapped";
        if (scenario.host_memory) {  // a page left unmapped would fault here
          ++stamp;
          std::memcpy(allocation.address, &stamp, sizeof stamp);
          std::memcpy(static_cast<char*>(allocation.address) + allocation.size - sizeof stamp, &stamp, sizeof stamp);
        }
        live.add(allocation);
      } catch (const OutOfMemoryError&) {
        ++ooms;  // the ladder released what it could first
      }
    } else if (action < 800) {
      allocator->free(live.take(std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(random)));
    } else if (action < 900) {
      const Allocation& allocation = live.at(std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(random));
      allocator->record_stream(allocation, std::uniform_int_distribution<StreamId>(0, kStreams - 1)(random));
    } else if (action < 990) {
      events.complete_stream(std::uniform_int_distribution<StreamId>(0, kStreams - 1)(random));
    } else {
      const bool refuse = scenario.refuse_every > 0 && std::uniform_int_distribution<int>(0, scenario.refuse_every - 1)(random) == 0;
      if (refuse) source.refuse_releases(1);
      allocator->empty_cache();
      source.refuse_releases(0);
      if (!refuse) {  // exactly the pages under live allocations stay mapped
        ASSERT_TRUE(source.mapped_pages() == required_pages(*allocator, live));
        ++exact_checks;
      }
    }
    ASSERT_TRUE(source.violations().empty()) << source.violations().front();
    if (step % 4096 == 0) allocator->check_invariants();
    const AllocatorStatistics stats = allocator->statistics();
    ASSERT_EQ(static_cast<std::size_t>(stats.reserved_bytes.all().current), source.mapped_pages().bytes());
  }
  allocator->check_invariants();
  EXPECT_EQ(allocator->statistics().num_release_failures, source.refused());
  EXPECT_GT(exact_checks, 0);
  if (scenario.capacity < (std::size_t{1} << 30)) {
    EXPECT_GT(ooms, 0) << "the scenario never reached its capacity";
  }

  // Destroyed with allocations still live (split pieces of pages among them): every page and range goes back.
  ASSERT_GT(live.size(), 0u);
  source.live_overlaps = nullptr;
  allocator.reset();
  EXPECT_TRUE(source.violations().empty()) << source.violations().front();
  EXPECT_TRUE(source.mapped_pages().empty());
  EXPECT_EQ(source.ranges_reserved(), 0u);
  EXPECT_EQ(source.used_bytes(), 0u);
}

class ExpandablePages : public ::testing::TestWithParam<PagesScenario> {};

TEST_P(ExpandablePages, MapExactlyWhatLiveAllocationsNeed) {
  for (std::uint64_t seed : {11u, 12u}) {
    run_pages_scenario(GetParam(), seed);
    if (HasFatalFailure()) return;
  }
}

// 1e6 operations in all (two seeds each).
INSTANTIATE_TEST_SUITE_P(
    Sources, ExpandablePages,
    ::testing::Values(PagesScenario{"meta_tight", "expandable_segments:True", false, 200 * kMiB, 150000, 0},
                      PagesScenario{"meta_roomy", "expandable_segments:True,roundup_power2_divisions:4", false, std::size_t{4} << 30, 100000, 0},
                      PagesScenario{"meta_refusals", "expandable_segments:True", false, 200 * kMiB, 100000, 3},
                      PagesScenario{"host_tight", "expandable_segments:True", true, 180 * kMiB, 100000, 0},
                      PagesScenario{"host_refusals", "expandable_segments:True,max_split_size_mb:32", true, 180 * kMiB, 50000, 3}),
    [](const ::testing::TestParamInfo<PagesScenario>& param_info) { return param_info.param.name; });

struct LedgerAllocator {
  explicit LedgerAllocator(const std::string& alloc_conf, bool host_memory = true)
      : source(host_memory ? std::unique_ptr<SegmentSource>(std::make_unique<HostSegmentSource>(256 * kMiB))
                           : std::make_unique<AddressSpaceSegmentSource>(256 * kMiB)),
        allocator(std::make_unique<CachingAllocator>(source, events, AllocatorConfig::parse(alloc_conf))) {}
  PageLedgerSource source;
  ImmediateEventSource events;
  std::unique_ptr<CachingAllocator> allocator;
};

TEST(ExpandablePages, DestroyingWithSplitPiecesOfPagesUnmapsWholePages) {
  // Small blocks split a 2 MiB page; the destructor once unmapped each block on its own (512 bytes:
  // madvise EINVAL, an exception out of a destructor, SIGABRT at the end of every offloaded run).
  LedgerAllocator m("expandable_segments:True");
  for (int i = 0; i < 5; ++i) m.allocator->malloc(512, 0, MemoryCategory::activations);
  m.allocator->malloc(3 * kMiB, 0, MemoryCategory::activations);
  m.allocator.reset();
  EXPECT_TRUE(m.source.violations().empty()) << m.source.violations().front();
  EXPECT_TRUE(m.source.mapped_pages().empty());
  EXPECT_EQ(m.source.used_bytes(), 0u);
}

TEST(AllocatorReleaseFailures, ARefusedUnmapKeepsThePagesCachedAndIsCounted) {
  LedgerAllocator m("expandable_segments:True");
  const Allocation kept = m.allocator->malloc(kMiB / 2, 0, MemoryCategory::activations);
  const Allocation freed = m.allocator->malloc(30 * kMiB, 0, MemoryCategory::activations);
  m.allocator->free(freed);
  const AllocatorStatistics before = m.allocator->statistics();
  m.source.refuse_releases(1);
  ::testing::internal::CaptureStderr();
  m.allocator->empty_cache();
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("injected failure"), std::string::npos) << said;
  m.allocator->check_invariants();
  const AllocatorStatistics after = m.allocator->statistics();
  EXPECT_EQ(after.num_release_failures, 1);
  EXPECT_EQ(after.reserved_bytes.all().current, before.reserved_bytes.all().current);  // kept, as it was
  // The cached pages serve the next request without mapping more.
  const Allocation again = m.allocator->malloc(30 * kMiB, 0, MemoryCategory::activations);
  EXPECT_EQ(again.address, freed.address);
  EXPECT_EQ(m.allocator->statistics().reserved_bytes.all().current, before.reserved_bytes.all().current);
  m.allocator->free(again);
  m.allocator->free(kept);
  m.allocator->empty_cache();  // no refusal now: everything goes back
  EXPECT_EQ(m.allocator->statistics().reserved_bytes.all().current, 0);
  EXPECT_TRUE(m.source.violations().empty()) << m.source.violations().front();
}

TEST(AllocatorReleaseFailures, ARefusedSegmentFreeKeepsTheSegmentCached) {
  LedgerAllocator m("");
  const Allocation a = m.allocator->malloc(30 * kMiB, 0, MemoryCategory::activations);
  m.allocator->free(a);
  m.source.refuse_releases(1);
  ::testing::internal::CaptureStderr();
  m.allocator->empty_cache();
  ::testing::internal::GetCapturedStderr();
  m.allocator->check_invariants();
  EXPECT_EQ(m.allocator->statistics().num_release_failures, 1);
  EXPECT_EQ(m.allocator->statistics().reserved_bytes.all().current, static_cast<std::int64_t>(30 * kMiB));
  EXPECT_EQ(m.allocator->malloc(30 * kMiB, 0, MemoryCategory::activations).address, a.address);
}

TEST(AllocatorReleaseFailures, TheDestructorReportsRefusedReleasesAndGoesOn) {
  for (const char* conf : {"expandable_segments:True", ""}) {
    SCOPED_TRACE(conf);
    LedgerAllocator m(conf);
    m.allocator->malloc(512, 0, MemoryCategory::activations);
    m.allocator->malloc(30 * kMiB, 1, MemoryCategory::activations);
    m.source.refuse_releases(1);
    ::testing::internal::CaptureStderr();
    m.allocator.reset();  // would end the process if an exception left the destructor
    const std::string said = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find("injected failure"), std::string::npos) << said;
    EXPECT_EQ(m.source.refused(), 1);
  }
}

}  // namespace
}  // namespace ferry::testing
