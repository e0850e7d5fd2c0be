// CachingAllocator: the allocation policy of ferry, written once for every segment source. It caches
// freed blocks for reuse (best fit by stream, size, address), splits and merges them, defers reuse
// across streams until their events complete, runs an out-of-memory ladder before giving up, and keeps
// statistics per pool and per memory category. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "allocator/allocation_trace.h"
#include "allocator/allocator_config.h"
#include "allocator/allocator_snapshot.h"
#include "allocator/allocator_statistics.h"
#include "allocator/block_pool.h"
#include "allocator/event_source.h"
#include "allocator/memory_category.h"
#include "allocator/segment_source.h"

namespace ferry {

// A live allocation. Trivially copyable; free it exactly once with CachingAllocator::free.
struct Allocation {
  void* address = nullptr;
  std::size_t size = 0;  // rounded block size
  allocator_detail::Block* block = nullptr;
  explicit operator bool() const { return block != nullptr; }
};

struct FreeSpace {
  std::size_t cached_free_bytes = 0;   // free mapped bytes held in pools
  std::size_t largest_free_block = 0;  // largest of them
  std::size_t awaiting_event_bytes = 0;
};

class CachingAllocator {
 public:
  // `source` and `events` must outlive the allocator.
  CachingAllocator(SegmentSource& source, EventSource& events, AllocatorConfig config = {});
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Allocates at least `bytes` for work on `stream`. Zero bytes gives an empty Allocation.
  // Throws OutOfMemoryError when even the out-of-memory ladder cannot find memory.
  Allocation malloc(std::size_t bytes, StreamId stream, MemoryCategory category, TagId tag = 0);
  void free(Allocation allocation);
  // Frees by address (O(blocks in its segment)); InvalidFreeError when the address is not live.
  void free(void* address);
  // Marks the allocation as used by `stream` too: after free() it is reused only once the work
  // queued on `stream` so far has completed.
  void record_stream(Allocation allocation, StreamId stream);

  // Returns every cached block (and unused expandable pages) to the source.
  void empty_cache();
  void reset_peak_statistics();
  void reset_accumulated_statistics();

  AllocatorStatistics statistics() const;
  AllocatorSnapshot snapshot() const;
  FreeSpace free_space() const;
  std::vector<TraceEvent> trace() const;
  std::size_t trace_dropped() const;
  // Starts (entries > 0) or stops recording the allocation trace; clears what was recorded.
  void set_trace_entries(std::size_t entries);

  TagId intern_tag(std::string_view tag);
  std::string tag_name(TagId tag) const;

  std::size_t capacity() const { return source_.capacity(); }
  const AllocatorConfig& config() const { return config_; }
  const SegmentSource& source() const { return source_; }

  // Verifies every structural invariant (tiling, coalescing, index consistency, statistics equal to
  // the blocks); throws AllocatorError naming the first violation. O(blocks); meant for tests.
  void check_invariants() const;

 private:
  using Block = allocator_detail::Block;
  using Segment = allocator_detail::Segment;
  using BlockPool = allocator_detail::BlockPool;

  // Allocation path (caching_allocator.cpp).
  Block* find_free_block(BlockPool& pool, StreamId stream, std::size_t size);
  Block* allocate_new_block(BlockPool& pool, StreamId stream, std::size_t size);
  Block* allocate_segment_block(BlockPool& pool, StreamId stream, std::size_t size);
  // Registers a segment of `bytes` at `address` with one block covering it: mapped for a fixed
  // segment (page_size 0), unmapped for an expandable one.
  Block* add_segment(BlockPool& pool, StreamId stream, void* address, std::size_t bytes, std::size_t page_size);
  void split_block(Block* block, std::size_t size);
  void free_block(Block* block);
  // Merges a free neighbour into `block` (merge_with), or any adjacent neighbour already taken out
  // of its index (absorb): relinks the list and recycles the neighbour.
  void merge_with(Block* block, Block* neighbour);
  void absorb(Block* block, Block* neighbour);
  void process_events();
  void synchronize_and_free_events();
  void insert_free(Block* block);
  void remove_free(Block* block);
  Block* new_block();
  void recycle_block(Block* block);
  BlockPool& pool_for(bool small) { return small ? small_pool_ : large_pool_; }
  void record(TraceAction action, std::uintptr_t address, std::size_t size, StreamId stream,
              MemoryCategory category = MemoryCategory::uncategorized, TagId tag = 0);
  [[noreturn]] void raise_out_of_memory(std::size_t bytes, std::size_t rounded, StreamId stream,
                                        MemoryCategory category, TagId tag);

  // Expandable segments (expandable_segments.cpp).
  Block* allocate_expandable_block(BlockPool& pool, StreamId stream, std::size_t size);
  Block* create_expandable_segment(BlockPool& pool, StreamId stream);
  Block* map_run(BlockPool& pool, Block* start, std::size_t size);
  void unmap_free_pages(Block* block);  // a refused unmap leaves the block cached, mapped
  void insert_unmapped(Block* block);

  // Releasing cached memory (caching_allocator_release.cpp).
  // Runs a call that gives memory back to the source; a failure (an error of the source: a driver or
  // madvise error) is counted in num_release_failures and said on stderr, and false returned, so the
  // caller keeps the memory cached and the allocator's state as it was.
  bool give_back(const char* what, const std::function<void()>& call);
  bool release_oversize_blocks(BlockPool& pool, StreamId stream, std::size_t size);
  bool release_cached_blocks();
  void release_pool(BlockPool& pool);
  bool release_segment_block(Block* block);  // false: the source refused, the block stays cached
  void release_empty_expandable_segment(Segment* segment);
  void collect_garbage();

  // Reporting (caching_allocator_report.cpp).
  FreeSpace free_space_locked() const;
  std::string out_of_memory_message(std::size_t bytes, std::size_t rounded, StreamId stream,
                                    MemoryCategory category, TagId tag) const;

  SegmentSource& source_;
  EventSource& events_;
  const AllocatorConfig config_;
  mutable std::mutex mutex_;

  BlockPool small_pool_{true};
  BlockPool large_pool_{false};
  std::map<std::uintptr_t, std::unique_ptr<Segment>> segments_;
  std::vector<std::unique_ptr<Block>> block_storage_;
  std::vector<Block*> recycled_blocks_;
  std::vector<std::pair<EventId, Block*>> pending_events_;
  Block search_key_;

  AllocatorStatistics stats_;
  AllocationTrace trace_;
  std::vector<std::string> tag_names_{""};
  std::unordered_map<std::string, TagId> tag_ids_;
};

}  // namespace ferry
