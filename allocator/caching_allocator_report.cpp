// What the caching allocator reports: statistics, snapshots, free space, the trace, the
// out-of-memory message, and the invariant check used by the tests.
#include <algorithm>
#include <sstream>

#include "allocator/allocator_errors.h"
#include "allocator/byte_size.h"
#include "allocator/caching_allocator.h"
#include "allocator/size_rounding.h"

namespace ferry {

std::string_view block_state_name(BlockState state) {
  switch (state) {
    case BlockState::active_allocated: return "active_allocated";
    case BlockState::active_awaiting_free: return "active_awaiting_free";
    case BlockState::inactive: return "inactive";
    case BlockState::unmapped: return "unmapped";
  }
  return "unknown";
}

AllocatorStatistics CachingAllocator::statistics() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

namespace {

// Calls `visit` on every Stat of the statistics.
template <typename Visit>
void for_each_stat(AllocatorStatistics& stats, Visit visit) {
  for (PoolStat* stat : {&stats.allocation, &stats.segment, &stats.active, &stats.inactive_split,
                         &stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes,
                         &stats.inactive_split_bytes, &stats.requested_bytes}) {
    for (Stat& pool : stat->pools) visit(pool);
  }
  for (Stat& stat : stats.category_allocated_bytes) visit(stat);
  for (Stat& stat : stats.category_requested_bytes) visit(stat);
}

}  // namespace

void CachingAllocator::reset_peak_statistics() {
  std::lock_guard lock(mutex_);
  for_each_stat(stats_, [](Stat& stat) { stat.reset_peak(); });
  for (std::size_t i = 0; i < kNumMemoryCategories; ++i) {
    stats_.category_allocated_at_peak[i] = stats_.category_allocated_bytes[i].current;
  }
}

void CachingAllocator::reset_accumulated_statistics() {
  std::lock_guard lock(mutex_);
  for_each_stat(stats_, [](Stat& stat) { stat.reset_accumulated(); });
  stats_.num_alloc_retries = stats_.num_ooms = stats_.num_sync_all_streams = 0;
  stats_.num_device_alloc = stats_.num_device_free = stats_.num_gc_freed_segments = stats_.num_release_failures = 0;
}

AllocatorSnapshot CachingAllocator::snapshot() const {
  std::lock_guard lock(mutex_);
  AllocatorSnapshot result;
  for (const auto& [address, segment] : segments_) {
    SegmentSnapshot entry{segment->address, segment->mapped_bytes, segment->address_space, segment->stream,
                          segment->small_pool, segment->expandable, 0, 0, 0, {}};
    for (const Block* block = segment->first; block != nullptr; block = block->next) {
      BlockState state = BlockState::inactive;
      if (!block->mapped) {
        state = BlockState::unmapped;
      } else if (block->allocated) {
        state = BlockState::active_allocated;
      } else if (block->event_count > 0) {
        state = BlockState::active_awaiting_free;
      }
      if (block->allocated) {
        entry.allocated_size += block->size;
        entry.requested_size += block->requested;
      }
      if (block->allocated || block->event_count > 0) entry.active_size += block->size;
      entry.blocks.push_back(BlockSnapshot{block->address, block->size, block->requested, state, block->category,
                                           tag_names_[block->tag]});
    }
    result.segments.push_back(std::move(entry));
  }
  return result;
}

FreeSpace CachingAllocator::free_space() const {
  std::lock_guard lock(mutex_);
  return free_space_locked();
}

FreeSpace CachingAllocator::free_space_locked() const {
  FreeSpace result;
  for (const BlockPool* pool : {&small_pool_, &large_pool_}) {
    for (const Block* block : pool->blocks) {
      result.cached_free_bytes += block->size;
      result.largest_free_block = std::max(result.largest_free_block, block->size);
    }
  }
  // Active blocks that are no longer allocated are the ones awaiting stream events.
  result.awaiting_event_bytes =
      static_cast<std::size_t>(stats_.active_bytes.all().current - stats_.allocated_bytes.all().current);
  return result;
}

std::vector<TraceEvent> CachingAllocator::trace() const {
  std::lock_guard lock(mutex_);
  return trace_.events();
}

std::size_t CachingAllocator::trace_dropped() const {
  std::lock_guard lock(mutex_);
  return trace_.dropped();
}

void CachingAllocator::set_trace_entries(std::size_t entries) {
  std::lock_guard lock(mutex_);
  trace_ = AllocationTrace(entries);
}

std::string CachingAllocator::out_of_memory_message(std::size_t bytes, std::size_t rounded, StreamId stream,
                                                    MemoryCategory category, TagId tag) const {
  const std::size_t capacity = source_.capacity();
  const std::size_t used = source_.used_bytes();
  const auto allocated = static_cast<std::size_t>(stats_.allocated_bytes.all().current);
  const auto reserved = static_cast<std::size_t>(stats_.reserved_bytes.all().current);
  const FreeSpace free_space = free_space_locked();
  std::ostringstream out;
  out << "out of memory: tried to allocate " << format_bytes(rounded) << " (" << bytes << " bytes asked) for "
      << category_name(category);
  if (tag != 0) out << " '" << tag_names_[tag] << "'";
  out << " on stream " << stream << ". The " << source_.name() << " device has a capacity of "
      << format_bytes(capacity) << ", of which " << format_bytes(capacity > used ? capacity - used : 0)
      << " is free. " << format_bytes(allocated) << " is allocated (";
  bool first = true;
  for (MemoryCategory each : kAllMemoryCategories) {
    const auto held = stats_.category_allocated_bytes[category_index(each)].current;
    if (held == 0) continue;
    out << (first ? "" : ", ") << category_name(each) << " " << format_bytes(static_cast<std::size_t>(held));
    first = false;
  }
  if (first) out << "nothing";
  out << ") and " << format_bytes(reserved - allocated) << " is reserved but unallocated (largest free block "
      << format_bytes(free_space.largest_free_block) << ").";
  const bool fragmented = reserved - allocated >= rounded || (reserved > 0 && reserved - allocated > reserved / 5);
  if (fragmented && !config_.expandable_segments && source_.supports_expandable_segments()) {
    out << " Reserved but unallocated memory is large: set FERRY_ALLOC_CONF=expandable_segments:True to avoid "
           "fragmentation.";
  } else if (fragmented && !config_.max_split_size_set() && rounded > kSmallSize) {
    out << " Reserved but unallocated memory is large: set FERRY_ALLOC_CONF=max_split_size_mb:N (N above the "
           "largest common request in MiB) to keep large blocks unsplit.";
  }
  out << " To need less memory: a smaller micro-batch, activation recompute (--checkpointing), optimizer "
         "offload (--offload-optimizer cpu), or more device memory (--device-memory).";
  return out.str();
}

namespace {
[[noreturn]] void violated(const std::string& what) {
  throw AllocatorError("allocator invariant violated: " + what);
}
}  // namespace

void CachingAllocator::check_invariants() const {
  std::lock_guard lock(mutex_);
  std::int64_t reserved[2] = {0, 0};
  std::int64_t allocated[2] = {0, 0};
  std::int64_t requested[2] = {0, 0};
  std::int64_t active[2] = {0, 0};
  std::int64_t allocation_count[2] = {0, 0};
  std::int64_t inactive_split[2] = {0, 0};
  std::int64_t segment_count[2] = {0, 0};
  std::size_t free_blocks[2] = {0, 0};
  std::size_t unmapped_blocks[2] = {0, 0};
  std::array<std::int64_t, kNumMemoryCategories> category_bytes{};
  std::uintptr_t previous_end = 0;
  for (const auto& [address, segment] : segments_) {
    const int pool_index = segment->small_pool ? 0 : 1;
    const BlockPool& pool = segment->small_pool ? small_pool_ : large_pool_;
    ++segment_count[pool_index];
    if (address != segment->address) violated("segment index key differs from its address");
    if (segment->address < previous_end) violated("segments overlap");
    previous_end = segment->address + segment->address_space;
    std::uintptr_t cursor = segment->address;
    std::size_t mapped = 0;
    const Block* previous = nullptr;
    if (segment->first == nullptr || segment->first->prev != nullptr) violated("segment has no first block");
    for (const Block* block = segment->first; block != nullptr; block = block->next) {
      if (block->prev != previous) violated("block list links are inconsistent");
      if (block->segment != segment.get() || block->pool != &pool) violated("block points at the wrong segment/pool");
      if (block->address != cursor) violated("blocks do not tile their segment");
      if (block->size == 0 || block->size % kMinBlockSize != 0 || block->address % kMinBlockSize != 0) {
        violated("block size or address not a multiple of 512");
      }
      if (block->stream != segment->stream) violated("block stream differs from its segment's");
      cursor += block->size;
      if (block->mapped) {
        mapped += block->size;
      } else {
        if (!segment->expandable) violated("unmapped block in a fixed segment");
        if (!pool.unmapped.contains(const_cast<Block*>(block))) violated("unmapped block missing from its index");
        if (block->allocated || block->event_count != 0) violated("unmapped block in use");
        if ((block->address - segment->address) % segment->page_size != 0 ||
            block->size % segment->page_size != 0) {
          violated("unmapped range not page aligned");
        }
        if (previous != nullptr && !previous->mapped) violated("two adjacent unmapped blocks");
        ++unmapped_blocks[pool_index];
      }
      if (block->allocated) {
        allocated[pool_index] += static_cast<std::int64_t>(block->size);
        requested[pool_index] += static_cast<std::int64_t>(block->requested);
        category_bytes[category_index(block->category)] += static_cast<std::int64_t>(block->size);
        ++allocation_count[pool_index];
        if (block->requested > block->size) violated("requested bytes exceed the block");
      }
      if (block->allocated || block->event_count > 0) active[pool_index] += static_cast<std::int64_t>(block->size);
      const bool in_index = block->mapped && pool.blocks.contains(const_cast<Block*>(block));
      if (block->is_free() != in_index) violated("free block index disagrees with block state");
      if (block->is_free()) {
        ++free_blocks[pool_index];
        if (block->is_split()) inactive_split[pool_index] += static_cast<std::int64_t>(block->size);
        if (previous != nullptr && previous->is_free()) violated("two adjacent free blocks were not merged");
      }
      previous = block;
    }
    if (cursor != segment->address + segment->address_space) violated("blocks do not cover their segment");
    if (mapped != segment->mapped_bytes) violated("segment mapped bytes disagree with its blocks");
    reserved[pool_index] += static_cast<std::int64_t>(mapped);
  }
  const BlockPool* pools[2] = {&small_pool_, &large_pool_};
  const StatPool stat_pools[2] = {StatPool::small, StatPool::large};
  for (int i = 0; i < 2; ++i) {
    if (pools[i]->blocks.size() != free_blocks[i]) violated("free index holds blocks that are not free");
    if (pools[i]->unmapped.size() != unmapped_blocks[i]) violated("unmapped index holds stale blocks");
    const StatPool p = stat_pools[i];
    if (stats_.reserved_bytes[p].current != reserved[i]) violated("reserved bytes != sum of segments");
    if (stats_.allocated_bytes[p].current != allocated[i]) violated("allocated bytes != sum of allocated blocks");
    if (stats_.requested_bytes[p].current != requested[i]) violated("requested bytes != sum of requests");
    if (stats_.active_bytes[p].current != active[i]) violated("active bytes != allocated + awaiting events");
    if (stats_.allocation[p].current != allocation_count[i]) violated("allocation count mismatch");
    if (stats_.inactive_split_bytes[p].current != inactive_split[i]) violated("inactive split bytes mismatch");
    if (stats_.segment[p].current != segment_count[i]) violated("segment count mismatch");
  }
  for (MemoryCategory category : kAllMemoryCategories) {
    if (stats_.category_allocated_bytes[category_index(category)].current != category_bytes[category_index(category)]) {
      violated("per-category allocated bytes mismatch for " + std::string(category_name(category)));
    }
  }
  const std::int64_t total_reserved = reserved[0] + reserved[1];
  if (stats_.reserved_bytes.all().current != total_reserved) violated("reserved total mismatch");
  if (static_cast<std::int64_t>(source_.used_bytes()) != total_reserved) {
    violated("segment source holds a different number of bytes than reserved");
  }
  for (const PoolStat* stat : {&stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
                               &stats_.requested_bytes, &stats_.inactive_split_bytes}) {
    for (const Stat& pool : stat->pools) {
      if (pool.current < 0 || pool.current > pool.peak) violated("a statistic is negative or above its peak");
    }
  }
}

}  // namespace ferry
