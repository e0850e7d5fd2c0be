// Expandable segments: one large reserved address range per (stream, pool) that grows and shrinks by
// mapping and unmapping fixed-size pages, so freed memory never leaves unusable slivers between
// segments. Unmapped ranges are blocks with mapped == false, kept in the pool's unmapped set.
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/size_rounding.h"

namespace ferry {

namespace {

std::uintptr_t round_up_in_segment(std::uintptr_t address, const allocator_detail::Segment& segment) {
  const std::uintptr_t offset = address - segment.address;
  return segment.address + (offset + segment.page_size - 1) / segment.page_size * segment.page_size;
}

std::uintptr_t round_down_in_segment(std::uintptr_t address, const allocator_detail::Segment& segment) {
  const std::uintptr_t offset = address - segment.address;
  return segment.address + offset / segment.page_size * segment.page_size;
}

// True when the blocks from `start` on (free or unmapped, contiguous) cover `size` bytes.
bool run_covers(const allocator_detail::Block* start, std::size_t size) {
  std::size_t covered = 0;
  for (const auto* block = start; block != nullptr && covered < size; block = block->next) {
    if (!(block->is_free() || !block->mapped)) break;
    covered += block->size;
  }
  return covered >= size;
}

}  // namespace

CachingAllocator::Block* CachingAllocator::allocate_expandable_block(BlockPool& pool, StreamId stream,
                                                                     std::size_t size) {
  search_key_.stream = stream;
  search_key_.address = 0;
  for (auto it = pool.unmapped.lower_bound(&search_key_); it != pool.unmapped.end() && (*it)->stream == stream;
       ++it) {
    Block* start = *it;
    // A free mapped block just before the unmapped range lowers the pages that must be mapped.
    if (start->prev != nullptr && start->prev->is_free()) start = start->prev;
    if (run_covers(start, size)) return map_run(pool, start, size);
  }
  Block* fresh = create_expandable_segment(pool, stream);
  if (fresh == nullptr) return nullptr;
  Block* mapped = fresh->size >= size ? map_run(pool, fresh, size) : nullptr;
  if (mapped == nullptr) release_empty_expandable_segment(fresh->segment);  // leave no trace of the attempt
  return mapped;
}

CachingAllocator::Block* CachingAllocator::create_expandable_segment(BlockPool& pool, StreamId stream) {
  const std::size_t page = source_.expandable_page_bytes(pool.is_small);
  const std::size_t address_space = std::max(page, (source_.capacity() + page - 1) / page * page);
  void* address = source_.reserve_address_range(address_space);
  if (address == nullptr) return nullptr;

  Block* block = add_segment(pool, stream, address, address_space, page);
  pool.unmapped.insert(block);
  return block;
}

CachingAllocator::Block* CachingAllocator::map_run(BlockPool& pool, Block* start, std::size_t size) {
  Segment& segment = *start->segment;
  const std::uintptr_t target_end = start->address + size;
  const std::uintptr_t page_end = round_up_in_segment(target_end, segment);

  // Map first, restructure after: a failed map leaves the blocks untouched.
  std::vector<std::pair<std::uintptr_t, std::size_t>> ranges;
  Block* last = start;
  for (Block* block = start;; block = block->next) {
    if (!block->mapped) {
      const std::uintptr_t end = std::min(block->end(), page_end);
      ranges.emplace_back(block->address, end - block->address);
    }
    if (block->end() >= target_end) {
      last = block;
      break;
    }
  }
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    if (!source_.map_pages(reinterpret_cast<void*>(ranges[i].first), ranges[i].second)) {
      for (std::size_t j = 0; j < i; ++j) {  // undo: a range the source refuses to take back is counted and lost
        give_back("unmapping pages after a failed map", [&] { source_.unmap_pages(reinterpret_cast<void*>(ranges[j].first), ranges[j].second); });
      }
      return nullptr;
    }
  }

  for (Block* block = start;; block = block->next) {
    if (block->mapped) {
      remove_free(block);
    } else {
      pool.unmapped.erase(block);
    }
    if (block == last) break;
  }
  if (!last->mapped && page_end < last->end()) {
    // The rest of the last unmapped range stays unmapped.
    Block* rest = new_block();
    rest->address = page_end;
    rest->size = last->end() - page_end;
    rest->stream = last->stream;
    rest->pool = &pool;
    rest->segment = &segment;
    rest->mapped = false;
    rest->prev = last;
    rest->next = last->next;
    if (last->next != nullptr) last->next->prev = rest;
    last->next = rest;
    last->size = page_end - last->address;
    pool.unmapped.insert(rest);
  }
  while (start != last) {
    Block* next = start->next;
    const bool reached_last = next == last;
    absorb(start, next);
    if (reached_last) break;
  }
  start->mapped = true;
  merge_with(start, start->next);

  for (const auto& [address, bytes] : ranges) {
    segment.mapped_bytes += bytes;
    stats_.reserved_bytes.increase(pool.is_small, static_cast<std::int64_t>(bytes));
    ++stats_.num_device_alloc;
    record(TraceAction::segment_map, address, bytes, segment.stream);
  }
  return start;
}

void CachingAllocator::unmap_free_pages(Block* block) {
  Segment& segment = *block->segment;
  const std::uintptr_t low = round_up_in_segment(block->address, segment);
  const std::uintptr_t high = round_down_in_segment(block->end(), segment);
  if (high <= low) return;
  // Only whole pages inside the free block go back (a page it shares with a neighbour stays mapped);
  // the source is asked first, so a refusal leaves the blocks as they were.
  if (!give_back("unmapping free pages", [&] { source_.unmap_pages(reinterpret_cast<void*>(low), high - low); })) return;
  remove_free(block);

  Block* head = nullptr;
  Block* tail = nullptr;
  if (low > block->address) {
    head = new_block();
    head->address = block->address;
    head->size = low - block->address;
    head->stream = block->stream;
    head->pool = block->pool;
    head->segment = &segment;
    head->prev = block->prev;
    head->next = block;
    if (block->prev != nullptr) {
      block->prev->next = head;
    } else {
      segment.first = head;
    }
    block->prev = head;
  }
  if (high < block->end()) {
    tail = new_block();
    tail->address = high;
    tail->size = block->end() - high;
    tail->stream = block->stream;
    tail->pool = block->pool;
    tail->segment = &segment;
    tail->prev = block;
    tail->next = block->next;
    if (block->next != nullptr) block->next->prev = tail;
    block->next = tail;
  }
  block->address = low;
  block->size = high - low;
  block->mapped = false;

  segment.mapped_bytes -= high - low;
  stats_.reserved_bytes.decrease(block->pool->is_small, static_cast<std::int64_t>(high - low));
  ++stats_.num_device_free;
  record(TraceAction::segment_unmap, low, high - low, segment.stream);

  if (head != nullptr) insert_free(head);
  if (tail != nullptr) insert_free(tail);
  insert_unmapped(block);
}

void CachingAllocator::insert_unmapped(Block* block) {
  BlockPool& pool = *block->pool;
  for (Block* neighbour : {block->prev, block->next}) {
    if (neighbour == nullptr || neighbour->mapped) continue;
    pool.unmapped.erase(neighbour);
    absorb(block, neighbour);
  }
  pool.unmapped.insert(block);
}

void CachingAllocator::release_empty_expandable_segment(Segment* segment) {
  if (!give_back("releasing an empty expandable segment's address range",
                 [&] { source_.release_address_range(reinterpret_cast<void*>(segment->address), segment->address_space); })) {
    return;  // kept, empty: the next allocation on its stream may map pages in it again
  }
  Block* block = segment->first;
  block->pool->unmapped.erase(block);
  const bool small = segment->small_pool;
  stats_.segment.decrease(small, 1);
  recycle_block(block);
  segments_.erase(segment->address);
}

}  // namespace ferry
