#include "engine/core/memory_timeline.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

namespace ferry {
namespace {

struct Replay {
  std::unordered_map<std::uintptr_t, LiveAllocation> live;
  TimelinePoint point;

  explicit Replay(const MemoryProfile& profile) {
    for (const LiveAllocation& each : profile.initial_allocations) add(each);
    point.reserved = profile.initial_reserved;
  }
  void add(const LiveAllocation& allocation) {
    point.allocated[category_index(allocation.category)] += static_cast<std::int64_t>(allocation.size);
    live[allocation.address] = allocation;
  }
  // Applies one event; returns whether allocated or reserved bytes changed.
  bool apply(const TraceEvent& event, const MemoryProfile& profile) {
    point.time_ns = event.time_ns - profile.start_ns;
    switch (event.action) {
      case TraceAction::alloc: {
        const auto tag = profile.tags.find(event.tag);
        add(LiveAllocation{event.address, event.size, event.category, tag == profile.tags.end() ? std::string() : tag->second,
                           event.stream});
        return true;
      }
      case TraceAction::free_requested: {
        const auto it = live.find(event.address);
        if (it == live.end()) {
          throw ProfileError("the profile frees address " + std::to_string(event.address) + " that it never saw allocated; "
                             "the profile is incomplete or corrupt, record it again");
        }
        point.allocated[category_index(it->second.category)] -= static_cast<std::int64_t>(it->second.size);
        live.erase(it);
        return true;
      }
      case TraceAction::segment_alloc:
      case TraceAction::segment_map:
        point.reserved += static_cast<std::int64_t>(event.size);
        return true;
      case TraceAction::segment_free:
      case TraceAction::segment_unmap:
        point.reserved -= static_cast<std::int64_t>(event.size);
        return true;
      case TraceAction::free_completed:
      case TraceAction::oom:
        return false;
    }
    return false;
  }
};

}  // namespace

std::int64_t TimelinePoint::total() const { return std::accumulate(allocated.begin(), allocated.end(), std::int64_t{0}); }

MemoryTimeline build_memory_timeline(const MemoryProfile& profile) {
  if (profile.dropped_events > 0) {
    throw ProfileError("the profile dropped its " + std::to_string(profile.dropped_events) +
                       " oldest allocator events (the buffer was full), so its timeline cannot be rebuilt; profile fewer steps");
  }
  MemoryTimeline timeline;
  Replay replay(profile);
  timeline.points.push_back(replay.point);
  std::size_t peak_event = 0;  // events applied before the peak point
  for (std::size_t i = 0; i < profile.events.size(); ++i) {
    const TraceEvent& event = profile.events[i];
    if (event.action == TraceAction::oom) ++timeline.out_of_memory_events;
    if (!replay.apply(event, profile)) continue;
    timeline.points.push_back(replay.point);
    const TimelinePoint& point = timeline.points.back();
    if (point.total() > timeline.peak().total()) {
      timeline.peak_index = timeline.points.size() - 1;
      peak_event = i + 1;
    }
    timeline.peak_reserved = std::max(timeline.peak_reserved, point.reserved);
  }
  timeline.peak_reserved = std::max(timeline.peak_reserved, timeline.points.front().reserved);
  timeline.peak_allocated = timeline.peak().total();
  timeline.peak_event_count = peak_event;
  for (const TimelinePoint& point : timeline.points) {
    for (std::size_t c = 0; c < kNumMemoryCategories; ++c) timeline.category_peak[c] = std::max(timeline.category_peak[c], point.allocated[c]);
  }

  Replay at_peak(profile);  // again, up to the peak, for what was live there
  for (std::size_t i = 0; i < peak_event; ++i) at_peak.apply(profile.events[i], profile);
  for (auto& [address, allocation] : at_peak.live) timeline.live_at_peak.push_back(std::move(allocation));
  std::sort(timeline.live_at_peak.begin(), timeline.live_at_peak.end(), [](const LiveAllocation& a, const LiveAllocation& b) {
    return a.size != b.size ? a.size > b.size : a.address < b.address;
  });

  const std::uint64_t peak_time = timeline.peak().time_ns + profile.start_ns;
  for (const OpMarker& op : profile.ops) {
    const std::uint64_t end = op.end_ns == 0 ? profile.end_ns : op.end_ns;
    if (op.start_ns <= peak_time && peak_time <= end) timeline.ops_at_peak.push_back(op);
  }
  std::stable_sort(timeline.ops_at_peak.begin(), timeline.ops_at_peak.end(),
                   [](const OpMarker& a, const OpMarker& b) { return a.depth < b.depth; });
  return timeline;
}

std::vector<TimelinePoint> downsample_timeline(const MemoryTimeline& timeline, std::size_t max_points) {
  const std::vector<TimelinePoint>& points = timeline.points;
  if (max_points < 2 || points.size() <= max_points) return points;
  const std::size_t run = (points.size() + max_points - 1) / max_points;
  std::vector<TimelinePoint> result;
  for (std::size_t start = 0; start < points.size(); start += run) {
    const std::size_t end = std::min(points.size(), start + run);
    std::size_t best = start;
    for (std::size_t i = start; i < end; ++i) {
      if (i == timeline.peak_index || (points[i].total() > points[best].total() && best != timeline.peak_index)) best = i;
    }
    result.push_back(points[best]);
  }
  if (result.back().time_ns != points.back().time_ns) result.push_back(points.back());
  return result;
}

}  // namespace ferry
