// Giving cached memory back to the segment source: oversize blocks, every cached block (the last rung
// of the out-of-memory ladder and empty_cache), and garbage collection of old unused segments.
#include <algorithm>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/size_rounding.h"

namespace ferry {

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  release_cached_blocks();
}

bool CachingAllocator::release_segment_block(Block* block) {
  Segment* segment = block->segment;
  if (!give_back("freeing a cached segment", [&] { source_.free_segment(reinterpret_cast<void*>(segment->address), segment->address_space); })) {
    return false;
  }
  remove_free(block);
  const bool small = segment->small_pool;
  stats_.segment.decrease(small, 1);
  stats_.reserved_bytes.decrease(small, static_cast<std::int64_t>(segment->address_space));
  ++stats_.num_device_free;
  record(TraceAction::segment_free, segment->address, segment->address_space, segment->stream);
  segments_.erase(segment->address);
  recycle_block(block);
  return true;
}

bool CachingAllocator::release_oversize_blocks(BlockPool& pool, StreamId stream, std::size_t size) {
  if (!config_.max_split_size_set() || pool.is_small) return false;
  search_key_.stream = stream;
  search_key_.size = std::max(size, config_.max_split_size);
  search_key_.address = 0;
  auto it = pool.blocks.lower_bound(&search_key_);
  if (it != pool.blocks.end() && (*it)->stream == stream && !(*it)->is_split() &&
      !(*it)->segment->expandable) {
    return release_segment_block(*it);
  }
  // No single oversize block is large enough: release oversize blocks from the largest down.
  std::vector<Block*> oversize;
  for (Block* block : pool.blocks) {
    if (block->stream == stream && block->size >= config_.max_split_size && !block->is_split() &&
        !block->segment->expandable) {
      oversize.push_back(block);
    }
  }
  std::sort(oversize.begin(), oversize.end(), [](const Block* a, const Block* b) { return a->size > b->size; });
  std::size_t released = 0;
  for (Block* block : oversize) {
    if (released >= size) break;
    if (release_segment_block(block)) released += block->size;
  }
  return released >= size;
}

void CachingAllocator::release_pool(BlockPool& pool) {
  const std::vector<Block*> cached(pool.blocks.begin(), pool.blocks.end());
  bool synchronized = false;
  for (Block* block : cached) {
    if (!block->segment->expandable) {
      if (!block->is_split()) release_segment_block(block);
      continue;
    }
    if (!synchronized) {
      source_.synchronize_device();  // pages may only be unmapped once no work uses them
      synchronized = true;
    }
    unmap_free_pages(block);
  }
  std::vector<Segment*> empty;
  for (auto& [address, segment] : segments_) {
    if (segment->expandable && segment->small_pool == pool.is_small && segment->mapped_bytes == 0 &&
        segment->first->next == nullptr) {
      empty.push_back(segment.get());
    }
  }
  for (Segment* segment : empty) release_empty_expandable_segment(segment);
}

bool CachingAllocator::release_cached_blocks() {
  synchronize_and_free_events();
  release_pool(large_pool_);
  release_pool(small_pool_);
  return true;
}

void CachingAllocator::collect_garbage() {
  const auto limit = static_cast<std::int64_t>(config_.garbage_collection_threshold *
                                               static_cast<double>(source_.capacity()));
  const std::int64_t reserved = stats_.reserved_bytes.all().current;
  if (reserved <= limit) return;
  const std::int64_t target = reserved - limit;

  BlockPool& pool = large_pool_;
  std::vector<Block*> freeable;
  double total_age = 0;
  for (Block* block : pool.blocks) {
    if (!block->is_split() && !block->segment->expandable) {
      freeable.push_back(block);
      total_age += static_cast<double>(pool.search_count - block->gc_count_base);
    }
  }
  // Free the blocks at least as old as the mean age, until enough is reclaimed.
  std::int64_t reclaimed = 0;
  bool freed_any = true;
  while (reclaimed < target && freed_any && !freeable.empty()) {
    const double mean_age = total_age / static_cast<double>(freeable.size());
    freed_any = false;
    for (auto it = freeable.begin(); it != freeable.end() && reclaimed < target;) {
      Block* block = *it;
      const auto age = static_cast<double>(pool.search_count - block->gc_count_base);
      if (age >= mean_age) {
        const auto size = static_cast<std::int64_t>(block->size);
        total_age -= age;
        if (release_segment_block(block)) {
          reclaimed += size;
          ++stats_.num_gc_freed_segments;
          freed_any = true;
        }
        it = freeable.erase(it);
      } else {
        ++it;
      }
    }
  }
}

}  // namespace ferry
