// Writing direction: a ferry MemoryProfile -> a PyTorch snapshot (trace, segments at the end, and the
// run's metadata and ops under "ferry"), such that snapshot_to_profile gives the same profile back.
#include <algorithm>
#include <map>

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

// Address ranges [start, end) the allocator held when the profile ended, from its segment events.
class ReservedRanges {
 public:
  void add(std::uint64_t start, std::uint64_t size) {
    std::uint64_t end = start + size;
    remove(start, size);
    // Join a neighbour that ends where this starts or starts where this ends (mapped pages of one segment).
    if (auto before = ranges_.lower_bound(start); before != ranges_.begin() && std::prev(before)->second == start) {
      start = std::prev(before)->first;
      ranges_.erase(std::prev(before));
    }
    if (auto after = ranges_.find(end); after != ranges_.end()) {
      end = after->second;
      ranges_.erase(after);
    }
    ranges_[start] = end;
  }
  void remove(std::uint64_t start, std::uint64_t size) {
    const std::uint64_t end = start + size;
    auto it = ranges_.lower_bound(start);
    if (it != ranges_.begin() && std::prev(it)->second > start) --it;
    while (it != ranges_.end() && it->first < end) {
      const auto [low, high] = *it;
      it = ranges_.erase(it);
      if (low < start) ranges_[low] = start;
      if (high > end) ranges_[end] = high;
    }
  }
  const std::map<std::uint64_t, std::uint64_t>& ranges() const { return ranges_; }

 private:
  std::map<std::uint64_t, std::uint64_t> ranges_;
};

TorchSegment make_segment(std::uint64_t address, std::uint64_t size, StreamId stream) {
  TorchSegment segment;
  segment.address = address;
  segment.total_size = size;
  segment.stream = stream;
  segment.segment_type = size <= kSmallSegment ? "small" : "large";
  return segment;
}

void add_free_block(TorchSegment& segment, std::uint64_t from, std::uint64_t to) {
  if (to > from) segment.blocks.push_back(TorchBlock{from, to - from, 0, "inactive", {}});
}

// The segments when the profile ended: each reserved range with its live allocations as allocated blocks
// and the gaps as free ones; allocations outside every known range (their segments predate the profile)
// get segments of their own size, and what is left of the reserved bytes one free segment.
std::vector<TorchSegment> final_segments(const MemoryProfile& profile) {
  std::map<std::uint64_t, LiveAllocation> live;
  for (const LiveAllocation& each : profile.initial_allocations) live[each.address] = each;
  ReservedRanges reserved;
  std::int64_t reserved_bytes = profile.initial_reserved;
  for (const TraceEvent& event : profile.events) {
    const auto tag = profile.tags.find(event.tag);
    switch (event.action) {
      case TraceAction::alloc:
        live[event.address] = LiveAllocation{event.address, event.size, event.category, tag == profile.tags.end() ? "" : tag->second, event.stream};
        break;
      case TraceAction::free_requested: live.erase(event.address); break;
      case TraceAction::segment_alloc:
      case TraceAction::segment_map:
        reserved.add(event.address, event.size);
        reserved_bytes += static_cast<std::int64_t>(event.size);
        break;
      case TraceAction::segment_free:
      case TraceAction::segment_unmap:
        reserved.remove(event.address, event.size);
        reserved_bytes -= static_cast<std::int64_t>(event.size);
        break;
      default: break;
    }
  }
  std::vector<TorchSegment> segments;
  std::uint64_t highest = 0;
  for (const auto& [start, end] : reserved.ranges()) {
    TorchSegment segment = make_segment(start, end - start, 0);
    std::uint64_t cursor = start;
    for (auto it = live.lower_bound(start); it != live.end() && it->first < end;) {
      const LiveAllocation& each = it->second;
      add_free_block(segment, cursor, each.address);
      segment.blocks.push_back(TorchBlock{each.address, each.size, each.size, "active_allocated", {ferry_frame(each.category, each.tag)}});
      segment.stream = each.stream;
      cursor = each.address + each.size;
      it = live.erase(it);
    }
    add_free_block(segment, cursor, end);
    reserved_bytes -= static_cast<std::int64_t>(segment.total_size);
    highest = std::max(highest, end);
    segments.push_back(std::move(segment));
  }
  for (const auto& [address, each] : live) {
    TorchSegment segment = make_segment(address, each.size, each.stream);
    segment.blocks.push_back(TorchBlock{address, each.size, each.size, "active_allocated", {ferry_frame(each.category, each.tag)}});
    reserved_bytes -= static_cast<std::int64_t>(each.size);
    highest = std::max<std::uint64_t>(highest, address + each.size);
    segments.push_back(std::move(segment));
  }
  if (reserved_bytes > 0) {
    const std::uint64_t address = (highest / kSmallSegment + 1) * kSmallSegment;
    TorchSegment segment = make_segment(address, static_cast<std::uint64_t>(reserved_bytes), 0);
    add_free_block(segment, address, address + segment.total_size);
    segments.push_back(std::move(segment));
  }
  std::sort(segments.begin(), segments.end(), [](const TorchSegment& a, const TorchSegment& b) { return a.address < b.address; });
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
