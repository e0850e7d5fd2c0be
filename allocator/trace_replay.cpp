#include "allocator/trace_replay.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "allocator/caching_allocator.h"
#include "allocator/range_segment_source.h"

namespace ferry {

namespace {

constexpr std::size_t kMaxProblems = 10;

std::string hex(std::uintptr_t value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "0x%llx", static_cast<unsigned long long>(value));
  return buffer;
}

}  // namespace

ReplayResult replay_trace(const std::vector<RmmTraceRecord>& records, std::size_t capacity,
                          const AllocatorConfig& config, const std::vector<RecordedSegment>& segments) {
  AddressSpaceSegmentSource address_space(capacity, /*cuda_pages=*/true);  // traces come from GPUs (PyTorch, RMM)
  RecordedSegmentSource source(address_space, segments);
  ImmediateEventSource events;
  CachingAllocator allocator(source, events, config);
  ReplayResult result = replay_trace_through(allocator, records);
  result.capacity = capacity;
  result.segments_at_recorded_addresses = source.followed();
  return result;
}

ReplayResult replay_trace_through(CachingAllocator& allocator, const std::vector<RmmTraceRecord>& records) {
  ReplayResult result;
  result.capacity = allocator.source().capacity();
  std::unordered_map<std::uintptr_t, std::pair<Allocation, std::size_t>> live;
  std::size_t live_requested = 0;
  std::int64_t recorded_peak_allocated = 0;

  auto note = [&result](std::string problem) {
    if (result.problems.size() < kMaxProblems) result.problems.push_back(std::move(problem));
  };

  for (const RmmTraceRecord& record : records) {
    switch (record.action) {
      case RmmAction::allocate_failure:
        ++result.trace_failures;
        break;
      case RmmAction::allocate: {
        ++result.allocations;
        if (live.contains(record.pointer)) {
          note("line " + std::to_string(record.line) + ": pointer " + hex(record.pointer) +
               " allocated again while live; the earlier allocation is treated as freed");
          allocator.free(live[record.pointer].first);
          live_requested -= live[record.pointer].second;
          live.erase(record.pointer);
        }
        live_requested += record.size;
        result.peak_requested = std::max(result.peak_requested, live_requested);
        try {
          Allocation allocation =
              allocator.malloc(record.size, record.stream, MemoryCategory::uncategorized);
          live.emplace(record.pointer, std::make_pair(allocation, record.size));
        } catch (const OutOfMemoryError&) {
          live_requested -= record.size;
          note("line " + std::to_string(record.line) + ": out of memory allocating " + std::to_string(record.size) +
               " bytes");
        }
        const AllocatorStatistics stats = allocator.statistics();
        if (stats.allocated_bytes.all().current > recorded_peak_allocated) {
          recorded_peak_allocated = stats.allocated_bytes.all().current;
          const double reserved = static_cast<double>(stats.reserved_bytes.all().current);
          result.fragmentation_at_peak = 1.0 - static_cast<double>(stats.requested_bytes.all().current) / reserved;
          const FreeSpace free_space = allocator.free_space();
          result.largest_free_fraction_at_peak =
              free_space.cached_free_bytes == 0
                  ? 1.0
                  : static_cast<double>(free_space.largest_free_block) /
                        static_cast<double>(free_space.cached_free_bytes);
        }
        break;
      }
      case RmmAction::free: {
        ++result.frees;
        auto it = live.find(record.pointer);
        if (it == live.end()) {
          ++result.unknown_frees;
          note("line " + std::to_string(record.line) + ": free of unknown pointer " + hex(record.pointer));
          break;
        }
        allocator.free(it->second.first);
        live_requested -= it->second.second;
        live.erase(it);
        break;
      }
    }
  }
  const AllocatorStatistics stats = allocator.statistics();
  result.peak_allocated = static_cast<std::size_t>(stats.allocated_bytes.all().peak);
  result.peak_reserved = static_cast<std::size_t>(stats.reserved_bytes.all().peak);
  result.num_alloc_retries = stats.num_alloc_retries;
  result.num_ooms = stats.num_ooms;
  result.num_device_alloc = stats.num_device_alloc;
  for (auto& [pointer, allocation] : live) allocator.free(allocation.first);  // the allocator may outlive the replay
  return result;
}

std::size_t find_min_capacity(const std::vector<RmmTraceRecord>& records, const AllocatorConfig& config,
                              const std::vector<RecordedSegment>& segments) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  const ReplayResult unlimited = replay_trace(records, kUnlimitedReplayCapacity, config, segments);
  if (!unlimited.completed()) {
    throw std::invalid_argument("the trace does not fit even " + std::to_string(kUnlimitedReplayCapacity) + " bytes (" +
                                (unlimited.problems.empty() ? std::string("an allocation fails") : unlimited.problems.front()) +
                                "): no capacity is the minimum");
  }
  std::size_t high = (unlimited.peak_reserved + kMiB - 1) / kMiB * kMiB;
  if (high == 0) return 0;
  // Invariant: the trace completes at `high` and fails at `low` (or low is below any possible need).
  std::size_t low = unlimited.peak_requested / kMiB * kMiB;
  if (low > 0) low -= kMiB;
  if (!replay_trace(records, high, config, segments).completed()) {
    // Caching is not monotonic in capacity; widen until it completes.
    while (high < kUnlimitedReplayCapacity && !replay_trace(records, high, config, segments).completed()) high *= 2;
    high = std::min(high, kUnlimitedReplayCapacity);
  }
  while (high - low > kMiB) {
    const std::size_t middle = low + (high - low) / 2 / kMiB * kMiB;
    if (replay_trace(records, middle, config, segments).completed()) {
      high = middle;
    } else {
      low = middle;
    }
  }
  return high;
}

}  // namespace ferry
