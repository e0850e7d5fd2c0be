#include "engine/core/memory_profile.h"

#include <algorithm>
#include <set>

#include "allocator/cleanup.h"

namespace ferry {

MemoryProfiler::~MemoryProfiler() {
  if (recording_) run_cleanup("stopping a memory profile", [&] { stop(); });
}

void MemoryProfiler::start(std::size_t event_capacity) {
  if (recording_) return;
  profile_ = MemoryProfile{};
  CachingAllocator& allocator = device_.allocator();
  for (const SegmentSnapshot& segment : allocator.snapshot().segments) {
    for (const BlockSnapshot& block : segment.blocks) {
      if (block.state != BlockState::active_allocated) continue;
      profile_.initial_allocations.push_back(LiveAllocation{block.address, block.size, block.category, block.tag, segment.stream});
    }
  }
  profile_.initial_reserved = allocator.statistics().reserved_bytes.all().current;
  profile_.memory_limit = device_.memory_limit();
  allocator.set_trace_entries(event_capacity > 0 ? event_capacity : event_capacity_);
  device_.op_recorder().clear();
  device_.op_recorder().set_enabled(true);
  profile_.start_ns = steady_now_ns();
  recording_ = true;
}

MemoryProfile MemoryProfiler::stop() {
  if (!recording_) return std::move(profile_);
  recording_ = false;
  CachingAllocator& allocator = device_.allocator();
  profile_.end_ns = steady_now_ns();
  profile_.events = allocator.trace();
  profile_.dropped_events = allocator.trace_dropped();
  allocator.set_trace_entries(0);
  std::set<TagId> used;
  for (const TraceEvent& event : profile_.events) used.insert(event.tag);
  for (TagId tag : used) {
    if (tag != 0) profile_.tags[tag] = allocator.tag_name(tag);
  }
  OpRecorder& recorder = device_.op_recorder();
  recorder.set_enabled(false);
  profile_.ops = recorder.markers();
  recorder.clear();
  // Ops timed by a stream's events (communication) may have begun before the profile did.
  for (OpMarker& op : profile_.ops) {
    op.start_ns = std::clamp(op.start_ns, profile_.start_ns, profile_.end_ns);
    if (op.end_ns != 0) op.end_ns = std::clamp(op.end_ns, op.start_ns, profile_.end_ns);
  }
  return std::move(profile_);
}

bool end_at_last_out_of_memory(MemoryProfile& profile) {
  const auto last = std::find_if(profile.events.rbegin(), profile.events.rend(),
                                 [](const TraceEvent& event) { return event.action == TraceAction::oom; });
  if (last == profile.events.rend()) return false;
  profile.end_ns = last->time_ns;
  profile.events.erase(last.base(), profile.events.end());
  std::erase_if(profile.ops, [&](const OpMarker& op) { return op.start_ns > profile.end_ns; });
  for (OpMarker& op : profile.ops) {
    if (op.end_ns == 0 || op.end_ns > profile.end_ns) op.end_ns = profile.end_ns;
  }
  return true;
}

}  // namespace ferry
