// Statistics kept as PyTorch's caching allocator keeps them (current, peak, allocated and freed
// totals per {all, small pool, large pool}), plus per memory category, so every byte is attributed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "allocator/memory_category.h"

namespace ferry {

struct Stat {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;  // running total of increases
  std::int64_t freed = 0;      // running total of decreases

  void increase(std::int64_t amount) {
    current += amount;
    allocated += amount;
    if (current > peak) peak = current;
  }
  void decrease(std::int64_t amount) {
    current -= amount;
    freed += amount;
  }
  void reset_peak() { peak = current; }
  void reset_accumulated() { allocated = freed = 0; }
};

enum class StatPool : std::uint8_t { all = 0, small = 1, large = 2 };
inline constexpr std::size_t kNumStatPools = 3;

// One Stat per StatPool.
struct PoolStat {
  std::array<Stat, kNumStatPools> pools{};
  const Stat& operator[](StatPool pool) const { return pools[static_cast<std::size_t>(pool)]; }
  Stat& operator[](StatPool pool) { return pools[static_cast<std::size_t>(pool)]; }
  void increase(bool small_pool, std::int64_t amount) {
    pools[0].increase(amount);
    pools[small_pool ? 1 : 2].increase(amount);
  }
  void decrease(bool small_pool, std::int64_t amount) {
    pools[0].decrease(amount);
    pools[small_pool ? 1 : 2].decrease(amount);
  }
  const Stat& all() const { return pools[0]; }
};

struct AllocatorStatistics {
  // Counts.
  PoolStat allocation;      // live allocations
  PoolStat segment;         // segments held from the source
  PoolStat active;          // allocated or awaiting their stream events
  PoolStat inactive_split;  // free blocks that are part of a split segment
  // Bytes.
  PoolStat allocated_bytes;       // rounded sizes of live allocations
  PoolStat reserved_bytes;        // bytes held from the source (mapped pages for expandable segments)
  PoolStat active_bytes;          // allocated or awaiting events
  PoolStat inactive_split_bytes;  // free bytes in split segments
  PoolStat requested_bytes;       // sizes as asked, before rounding
  // Per memory category: rounded and requested bytes of live allocations.
  std::array<Stat, kNumMemoryCategories> category_allocated_bytes{};
  std::array<Stat, kNumMemoryCategories> category_requested_bytes{};
  // Allocated bytes per category at the moment allocated_bytes (all pools) last reached its peak.
  std::array<std::int64_t, kNumMemoryCategories> category_allocated_at_peak{};

  std::int64_t num_alloc_retries = 0;      // mallocs that succeeded only after freeing every cached block
  std::int64_t num_ooms = 0;               // out-of-memory errors raised
  std::int64_t num_sync_all_streams = 0;   // times every pending event was waited on
  std::int64_t num_device_alloc = 0;       // segments allocated or pages mapped at the source
  std::int64_t num_device_free = 0;        // segments freed or pages unmapped at the source
  std::int64_t num_gc_freed_segments = 0;  // segments released by the garbage collector
  std::int64_t num_release_failures = 0;   // segments or pages the source failed to take back (kept cached)

  // Call after allocated_bytes grew: a new peak snapshots the per-category bytes.
  void note_allocated_peak() {
    const Stat& all = allocated_bytes.all();
    if (all.current != all.peak) return;
    for (std::size_t i = 0; i < kNumMemoryCategories; ++i) category_allocated_at_peak[i] = category_allocated_bytes[i].current;
  }
  const Stat& category_allocated(MemoryCategory category) const {
    return category_allocated_bytes[category_index(category)];
  }
};

}  // namespace ferry
