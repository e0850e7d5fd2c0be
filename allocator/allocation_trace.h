// A bounded ring buffer of allocator events (alloc, frees, segment and page mapping changes, OOMs):
// the raw material of memory profiles and timelines. When full, the oldest events are dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "allocator/event_source.h"
#include "allocator/memory_category.h"

namespace ferry {

enum class TraceAction : std::uint8_t {
  alloc,
  free_requested,  // free() called; the block may still await stream events
  free_completed,  // the block is back in its pool
  segment_alloc,
  segment_free,
  segment_map,    // pages mapped into an expandable segment
  segment_unmap,  // pages unmapped from an expandable segment
  oom,
};

std::string_view trace_action_name(TraceAction action);
// The action named `name` (as trace_action_name writes it), or nothing.
std::optional<TraceAction> parse_trace_action(std::string_view name);

using TagId = std::uint32_t;  // interned tag naming the layer or op that asked; 0 = none

struct TraceEvent {
  TraceAction action;
  MemoryCategory category;
  TagId tag;
  std::uint64_t time_ns;  // steady clock
  std::uintptr_t address;
  std::size_t size;
  StreamId stream;
};

class AllocationTrace {
 public:
  explicit AllocationTrace(std::size_t capacity = 0) : capacity_(capacity) { events_.reserve(capacity); }

  bool enabled() const { return capacity_ > 0; }
  void record(const TraceEvent& event) {
    if (capacity_ == 0) return;
    if (events_.size() < capacity_) {
      events_.push_back(event);
    } else {
      events_[next_] = event;
      ++dropped_;
    }
    next_ = (next_ + 1) % capacity_;
  }
  // Events oldest first.
  std::vector<TraceEvent> events() const;
  std::size_t dropped() const { return dropped_; }
  std::size_t capacity() const { return capacity_; }
  void clear() {
    events_.clear();
    next_ = 0;
    dropped_ = 0;
  }

 private:
  std::size_t capacity_;
  std::size_t next_ = 0;
  std::size_t dropped_ = 0;
  std::vector<TraceEvent> events_;
};

}  // namespace ferry
