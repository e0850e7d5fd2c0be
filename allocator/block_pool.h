// Internal bookkeeping of the caching allocator: blocks that tile a segment as a doubly linked list,
// segments, and pools whose free blocks are ordered by (stream, size, address) for O(log n) best fit.
// Each block keeps the tree node it last occupied, so a cache hit allocates nothing from the heap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

#include "allocator/allocation_trace.h"
#include "allocator/event_source.h"
#include "allocator/memory_category.h"

namespace ferry::allocator_detail {

struct Block;
struct Segment;
struct BlockPool;

struct BySizeOrder {
  bool operator()(const Block* a, const Block* b) const;
};
struct ByAddressOrder {
  bool operator()(const Block* a, const Block* b) const;
};
using FreeBlockSet = std::set<Block*, BySizeOrder>;
using UnmappedBlockSet = std::set<Block*, ByAddressOrder>;

struct Block {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t requested = 0;
  StreamId stream = 0;
  Segment* segment = nullptr;
  BlockPool* pool = nullptr;
  Block* prev = nullptr;  // neighbours in the segment, by address
  Block* next = nullptr;
  bool allocated = false;
  bool mapped = true;     // false: address space of an expandable segment with no pages
  int event_count = 0;    // stream events still pending after free()
  MemoryCategory category = MemoryCategory::uncategorized;
  TagId tag = 0;
  std::uint64_t gc_count_base = 0;   // pool's search count when the block entered the pool
  std::vector<StreamId> stream_uses; // other streams that used the block (record_stream)
  FreeBlockSet::node_type node;      // the free-set node this block last occupied, for reuse

  bool is_split() const { return prev != nullptr || next != nullptr; }
  // A block that is in (or may enter) its pool's free set.
  bool is_free() const { return !allocated && event_count == 0 && mapped; }
  std::uintptr_t end() const { return address + size; }
};

struct Segment {
  std::uintptr_t address = 0;
  std::size_t address_space = 0;  // bytes reserved; equals mapped_bytes unless expandable
  std::size_t mapped_bytes = 0;
  StreamId stream = 0;
  bool small_pool = false;
  bool expandable = false;
  std::size_t page_size = 0;  // expandable segments map and unmap in these units
  Block* first = nullptr;
};

struct BlockPool {
  explicit BlockPool(bool small) : is_small(small) {}
  FreeBlockSet blocks;        // free, mapped, event-free blocks
  UnmappedBlockSet unmapped;  // unmapped ranges of expandable segments
  bool is_small;
  std::uint64_t search_count = 0;  // best-fit searches so far: the clock of block ages for GC
};

inline bool BySizeOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->address < b->address;
}

inline bool ByAddressOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  return a->address < b->address;
}

}  // namespace ferry::allocator_detail
