// A memory profile: the allocator's events and the op markers of a window of work, plus the
// allocations already live when the window opened, so the memory timeline can be rebuilt exactly.
// MemoryProfiler records one on a device; the profile is stored as DIR/profile.json.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "allocator/allocation_trace.h"
#include "engine/core/device.h"
#include "engine/core/op_recorder.h"

namespace ferry {

// A profile directory or file that cannot be read: names the file and what is wrong.
class ProfileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LiveAllocation {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  MemoryCategory category = MemoryCategory::uncategorized;
  std::string tag;
  StreamId stream = 0;
};

struct MemoryProfile {
  nlohmann::json metadata = nlohmann::json::object();  // what ran: model, device, settings
  std::size_t memory_limit = 0;
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  // The machine's monotonic clock when recording started (0 when unknown): lines up the profiles of a
  // pipeline's ranks, which run as processes on one machine.
  std::uint64_t clock_start_ns = 0;
  std::vector<LiveAllocation> initial_allocations;  // live when recording started
  std::int64_t initial_reserved = 0;
  std::vector<TraceEvent> events;  // oldest first
  std::map<TagId, std::string> tags;
  std::vector<OpMarker> ops;
  std::size_t dropped_events = 0;  // > 0: the event buffer overflowed and the timeline is incomplete
  std::string failure;             // the error that ended the window (an out-of-memory message), if any
};

// Records a window on one device: start() snapshots the live allocations and turns on the allocator
// trace and the op recorder; stop() turns them off and returns what was recorded.
class MemoryProfiler {
 public:
  static constexpr std::size_t kDefaultEventCapacity = std::size_t{1} << 21;

  explicit MemoryProfiler(Device& device, std::size_t event_capacity = kDefaultEventCapacity)
      : device_(device), event_capacity_(event_capacity) {}
  ~MemoryProfiler();
  MemoryProfiler(const MemoryProfiler&) = delete;
  MemoryProfiler& operator=(const MemoryProfiler&) = delete;

  // `event_capacity` 0: the one given to the constructor.
  void start(std::size_t event_capacity = 0);
  MemoryProfile stop();
  bool recording() const { return recording_; }

 private:
  Device& device_;
  std::size_t event_capacity_;
  bool recording_ = false;
  MemoryProfile profile_;
};

// Ends the profile at its last out-of-memory event, so it shows the moment of the failure and not the
// frees of the unwinding after it. Returns false (and changes nothing) when it has none.
bool end_at_last_out_of_memory(MemoryProfile& profile);

// Its file, DIR/profile.json: memory_profile_file.h.

}  // namespace ferry
