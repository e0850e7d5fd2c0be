// Writing direction: a ferry MemoryProfile -> a PyTorch snapshot (trace, segments at the end, and the
// run's metadata and ops under "ferry"), such that snapshot_to_profile gives the same profile back.
#include <algorithm>

#include "engine/core/allocator_layout.h"

#include "engine/snapshot/frame_categories.h"
#include "engine/snapshot/snapshot_profile.h"

namespace ferry {
namespace {

constexpr std::uint64_t kSmallSegment = std::uint64_t{2} << 20;

std::optional<TorchAction> torch_action(TraceAction action) {
  switch (action) {
    case TraceAction::alloc: return TorchAction::alloc;
    case TraceAction::free_requested: return TorchAction::free_requested;
    case TraceAction::free_completed: return TorchAction::free_completed;
    case TraceAction::segment_alloc: return TorchAction::segment_alloc;
    case TraceAction::segment_free: return TorchAction::segment_free;
    case TraceAction::segment_map: return TorchAction::segment_map;
    case TraceAction::segment_unmap: return TorchAction::segment_unmap;
    case TraceAction::oom: return TorchAction::oom;
  }
  return std::nullopt;
}

// The segments when the profile ended (allocator_layout_at), as PyTorch's segments and blocks; what the
// events cannot place (segments from before the profile) as one free segment above the others.
std::vector<TorchSegment> final_segments(const MemoryProfile& profile) {
  const AllocatorLayout layout = allocator_layout_at(profile, profile.events.size());
  std::vector<TorchSegment> segments;
  std::uint64_t highest = 0;
  for (const LayoutSegment& each : layout.segments) {
    TorchSegment segment;
    segment.address = each.address;
    segment.total_size = each.size;
    segment.segment_type = each.kind == SegmentKind::small ? "small" : "large";
    segment.is_expandable = each.kind == SegmentKind::expandable;
    for (const LayoutBlock& block : each.blocks) {
      if (block.allocated) {
        segment.stream = block.stream;
        segment.blocks.push_back(TorchBlock{block.address, block.size, block.size, "active_allocated", {ferry_frame(block.category, block.tag)}});
      } else {
        segment.blocks.push_back(TorchBlock{block.address, block.size, 0, "inactive", {}});
      }
    }
    highest = std::max<std::uint64_t>(highest, each.address + each.size);
    segments.push_back(std::move(segment));
  }
  if (layout.unplaced_reserved > 0) {
    TorchSegment segment;
    segment.address = (highest / kSmallSegment + 1) * kSmallSegment;
    segment.total_size = static_cast<std::uint64_t>(layout.unplaced_reserved);
    segment.segment_type = "large";
    segment.blocks.push_back(TorchBlock{segment.address, segment.total_size, 0, "inactive", {}});
    segments.push_back(std::move(segment));
  }
  return segments;
}

}  // namespace

TorchSnapshot profile_to_snapshot(const MemoryProfile& profile) {
  TorchSnapshot snapshot;
  std::vector<TorchTraceEntry>& trace = snapshot.device_traces.emplace_back();
  for (const TraceEvent& event : profile.events) {
    const std::optional<TorchAction> action = torch_action(event.action);
    if (!action) continue;
    TorchTraceEntry entry{*action, event.address, event.size, event.stream, static_cast<double>(event.time_ns - profile.start_ns) / 1000.0, {}, {}};
    if (event.action == TraceAction::alloc || event.action == TraceAction::free_requested || event.action == TraceAction::oom) {
      const auto tag = profile.tags.find(event.tag);
      entry.frames.push_back(ferry_frame(event.category, tag == profile.tags.end() ? "" : tag->second));
    }
    if (event.action == TraceAction::oom) entry.device_free = 0;
    trace.push_back(std::move(entry));
  }
  snapshot.segments = final_segments(profile);
  nlohmann::json ops = nlohmann::json::array();
  for (const OpMarker& op : profile.ops) {
    const std::uint64_t end = op.end_ns == 0 ? profile.end_ns : op.end_ns;
    ops.push_back({op.kind, op.name, op.stream, op.start_ns - profile.start_ns, end - profile.start_ns, op.depth});
  }
  snapshot.ferry = {{"format", "ferry-profile-in-snapshot"}, {"version", 1},
                    {"metadata", profile.metadata},          {"memory_limit", profile.memory_limit},
                    {"duration_ns", profile.end_ns - profile.start_ns}, {"failure", profile.failure},
                    {"ops_columns", {"kind", "name", "stream", "start_ns", "end_ns", "depth"}}, {"ops", ops}};
  return snapshot;
}

}  // namespace ferry
