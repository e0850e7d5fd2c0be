// Replays an RMM allocation trace through the caching allocator on an address-only (meta) source, or a
// device's own allocator:
// peak requested/allocated/reserved, fragmentation at the peak, retries, OOMs; and the smallest
// capacity at which the whole trace completes, found by bisection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "allocator/allocator_config.h"
#include "allocator/caching_allocator.h"
#include "allocator/recorded_segment_source.h"
#include "allocator/rmm_trace.h"

namespace ferry {

struct ReplayResult {
  std::size_t capacity = 0;
  std::size_t peak_requested = 0;  // peak of live requested bytes in the trace itself
  std::size_t peak_allocated = 0;
  std::size_t peak_reserved = 0;
  // At the moment live allocated bytes peaked (the highest demand): 1 - requested/reserved, and the
  // largest free block over all free cached bytes (1 when nothing is free).
  double fragmentation_at_peak = 0.0;
  double largest_free_fraction_at_peak = 1.0;
  std::int64_t num_alloc_retries = 0;
  std::int64_t num_ooms = 0;
  std::int64_t num_device_alloc = 0;
  std::size_t allocations = 0;
  std::size_t frees = 0;
  std::size_t trace_failures = 0;  // "allocate failure" records, skipped
  std::size_t unknown_frees = 0;   // frees of pointers not live in the replay
  std::size_t segments_at_recorded_addresses = 0;  // of the trace's recorded segments (RecordedSegmentSource)
  std::vector<std::string> problems;  // the first few unknown frees and OOMs, with line numbers
  bool completed() const { return num_ooms == 0; }
};

// Capacity of "unlimited" replays: large enough for any trace, only address space on meta.
inline constexpr std::size_t kUnlimitedReplayCapacity = std::size_t{1} << 42;  // 4 TiB

// `segments`: where the traced program's segments were (a PyTorch snapshot's segment_alloc events, in
// order): the replay puts its segments there while it asks for the same sizes (RecordedSegmentSource).
ReplayResult replay_trace(const std::vector<RmmTraceRecord>& records, std::size_t capacity,
                          const AllocatorConfig& config, const std::vector<RecordedSegment>& segments = {});

// The same replay through `allocator` (a device's: a cuda device's takes real segments, cudaMalloc or
// virtual memory, wherever the driver puts them). Live allocations are freed at the end; the statistics
// are the allocator's since its last reset.
ReplayResult replay_trace_through(CachingAllocator& allocator, const std::vector<RmmTraceRecord>& records);

// Smallest capacity (a multiple of 1 MiB) at which the trace replays without an OOM, by bisection
// between the trace's peak requested bytes and the unlimited replay's peak reserved bytes.
std::size_t find_min_capacity(const std::vector<RmmTraceRecord>& records, const AllocatorConfig& config,
                              const std::vector<RecordedSegment>& segments = {});

}  // namespace ferry
