#include "allocator/allocation_trace.h"

namespace ferry {

std::optional<TraceAction> parse_trace_action(std::string_view name) {
  for (TraceAction action : {TraceAction::alloc, TraceAction::free_requested, TraceAction::free_completed, TraceAction::segment_alloc,
                             TraceAction::segment_free, TraceAction::segment_map, TraceAction::segment_unmap, TraceAction::oom}) {
    if (trace_action_name(action) == name) return action;
  }
  return std::nullopt;
}

std::string_view trace_action_name(TraceAction action) {
  switch (action) {
    case TraceAction::alloc: return "alloc";
    case TraceAction::free_requested: return "free_requested";
    case TraceAction::free_completed: return "free_completed";
    case TraceAction::segment_alloc: return "segment_alloc";
    case TraceAction::segment_free: return "segment_free";
    case TraceAction::segment_map: return "segment_map";
    case TraceAction::segment_unmap: return "segment_unmap";
    case TraceAction::oom: return "oom";
  }
  return "unknown";
}

std::vector<TraceEvent> AllocationTrace::events() const {
  if (events_.size() < capacity_) return events_;
  std::vector<TraceEvent> ordered;
  ordered.reserve(events_.size());
  for (std::size_t i = 0; i < events_.size(); ++i) ordered.push_back(events_[(next_ + i) % events_.size()]);
  return ordered;
}

}  // namespace ferry
