// A snapshot of the allocator's segments and their blocks with states, as PyTorch's
// memory_snapshot() reports them; its sums equal the statistics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "allocator/event_source.h"
#include "allocator/memory_category.h"

namespace ferry {

enum class BlockState : std::uint8_t {
  active_allocated,
  active_awaiting_free,  // freed, waiting for events on other streams
  inactive,              // free, in a pool
  unmapped,              // address space of an expandable segment with no pages behind it
};

std::string_view block_state_name(BlockState state);

struct BlockSnapshot {
  std::uintptr_t address;
  std::size_t size;
  std::size_t requested_size;
  BlockState state;
  MemoryCategory category;
  std::string tag;
};

struct SegmentSnapshot {
  std::uintptr_t address;
  std::size_t total_size;     // reserved bytes (mapped bytes for an expandable segment)
  std::size_t address_space;  // reserved address range (equals total_size unless expandable)
  StreamId stream;
  bool small_pool;
  bool expandable;
  std::size_t allocated_size;
  std::size_t active_size;
  std::size_t requested_size;
  std::vector<BlockSnapshot> blocks;
};

struct AllocatorSnapshot {
  std::vector<SegmentSnapshot> segments;  // ordered by address
};

}  // namespace ferry
