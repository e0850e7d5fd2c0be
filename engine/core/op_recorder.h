// Op markers for memory profiles: named spans of work (a block's forward, backward or recompute, the
// loss, the optimizer step, a copy) with the stream each ran on, timed on the same steady clock as
// the allocator's trace so a profile can say which op held the memory at its peak.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "allocator/event_source.h"

namespace ferry {

class Device;

struct OpMarker {
  std::string kind;  // forward, backward, recompute, loss, optimizer, copy, step
  std::string name;  // e.g. "h.3", "lm_head", "copy host_to_device 4.0 KiB"
  StreamId stream = 0;
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::int32_t depth = 0;  // nesting level on its stream when it began
};

// Nanoseconds on the steady clock (the allocator trace's clock).
std::uint64_t steady_now_ns();

// Collects markers while enabled; a disabled recorder costs one branch per op.
class OpRecorder {
 public:
  bool enabled() const { return enabled_; }
  void set_enabled(bool enabled) { enabled_ = enabled; }
  // Returns the marker's index, for end().
  std::size_t begin(std::string_view kind, std::string name, StreamId stream);
  void end(std::size_t index);
  // A span timed elsewhere (a stream's own work, timed by its events and put on the steady clock): kept
  // as given, at depth 0, while enabled.
  void add(OpMarker marker);
  const std::vector<OpMarker>& markers() const { return markers_; }
  void clear();

 private:
  bool enabled_ = false;
  std::vector<OpMarker> markers_;
  std::vector<std::size_t> open_;  // markers begun and not ended
};

// Marks the work done during its lifetime as one op on `device`'s recorder (when enabled).
class OpScope {
 public:
  OpScope(Device& device, std::string_view kind, std::string name, StreamId stream = 0);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpRecorder* recorder_ = nullptr;
  std::size_t index_ = 0;
};

}  // namespace ferry
