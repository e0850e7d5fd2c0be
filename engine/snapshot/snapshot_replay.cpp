#include "engine/snapshot/snapshot_replay.h"

namespace ferry {

std::vector<RmmTraceRecord> profile_allocation_records(const MemoryProfile& profile) {
  std::vector<RmmTraceRecord> records;
  for (const LiveAllocation& each : profile.initial_allocations) {
    records.push_back(RmmTraceRecord{0, "start", RmmAction::allocate, each.address, each.size, each.stream, 0});
  }
  for (std::size_t i = 0; i < profile.events.size(); ++i) {
    const TraceEvent& event = profile.events[i];
    RmmAction action = RmmAction::allocate;
    if (event.action == TraceAction::free_requested) {
      action = RmmAction::free;
    } else if (event.action == TraceAction::oom) {
      action = RmmAction::allocate_failure;
    } else if (event.action != TraceAction::alloc) {
      continue;
    }
    records.push_back(RmmTraceRecord{0, std::to_string(event.time_ns - profile.start_ns), action, event.address, event.size, event.stream, i + 1});
  }
  return records;
}

std::vector<RecordedSegment> profile_segment_records(const MemoryProfile& profile) {
  std::vector<RecordedSegment> segments;
  if (profile.initial_reserved != 0) return segments;  // segments from before the trace: their order is unknown
  for (const TraceEvent& event : profile.events) {
    if (event.action == TraceAction::segment_alloc) segments.push_back(RecordedSegment{event.address, event.size});
  }
  return segments;
}

}  // namespace ferry
