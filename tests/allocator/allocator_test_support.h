// Shared fixtures for allocator tests: a meta-device allocator with a manual event source.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "allocator/caching_allocator.h"
#include "allocator/range_segment_source.h"

namespace ferry::testing {

inline constexpr std::size_t kMiB = std::size_t{1} << 20;

struct MetaAllocator {
  explicit MetaAllocator(std::size_t capacity = std::size_t{1} << 34, AllocatorConfig config = {})
      : source(capacity), allocator(source, events, config) {}
  AddressSpaceSegmentSource source;
  ManualEventSource events;
  CachingAllocator allocator;

  Allocation malloc(std::size_t bytes, StreamId stream = 0, MemoryCategory category = MemoryCategory::activations) {
    Allocation allocation = allocator.malloc(bytes, stream, category);
    allocator.check_invariants();
    return allocation;
  }
  void free(Allocation allocation) {
    allocator.free(allocation);
    allocator.check_invariants();
  }
  AllocatorStatistics stats() const { return allocator.statistics(); }
  std::int64_t reserved() const { return stats().reserved_bytes.all().current; }
  std::int64_t allocated() const { return stats().allocated_bytes.all().current; }
};

inline std::uintptr_t address_of(const Allocation& allocation) {
  return reinterpret_cast<std::uintptr_t>(allocation.address);
}

}  // namespace ferry::testing
