#include "engine/core/memory_timeline.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <numeric>
#include <string>
#include <unordered_map>

namespace ferry {
namespace {

[[noreturn]] void corrupt(std::size_t index, const std::string& what) {
  throw ProfileError("event " + std::to_string(index) + " of the profile " + what + ": the profile is corrupt (events repeated, reordered "
                     "or edited?); record it again");
}

// Replays the events, checking that each is possible: an allocation of a live address, a free of one
// not live, a mapping over mapped memory or an unmapping of memory never mapped is refused with the
// event's index (a profile with its events repeated reported 120 MiB for a 1 MiB run).
struct Replay {
  std::unordered_map<std::uintptr_t, LiveAllocation> live;
  TimelinePoint point;
  std::map<std::uintptr_t, std::uintptr_t> mapped;  // [start, end) of the memory the window's events mapped
  std::int64_t unattributed = 0;                    // reserved before the window, at addresses the profile does not list

  explicit Replay(const MemoryProfile& profile) {
    for (const LiveAllocation& each : profile.initial_allocations) add(each);
    point.reserved = profile.initial_reserved;
    unattributed = profile.initial_reserved;
  }
  void add(const LiveAllocation& allocation) {
    point.allocated[category_index(allocation.category)] += static_cast<std::int64_t>(allocation.size);
    live[allocation.address] = allocation;
  }
  void map(std::size_t index, std::uintptr_t start, std::size_t size) {
    const std::uintptr_t end = start + size;
    auto next = mapped.lower_bound(start);
    if ((next != mapped.end() && next->first < end) || (next != mapped.begin() && std::prev(next)->second > start)) {
      corrupt(index, "maps " + std::to_string(size) + " bytes at " + std::to_string(start) + ", which are mapped already");
    }
    mapped[start] = end;
  }
  // Removes [start, start + size) from the mapped ranges; what no range covers was reserved before the window.
  void unmap(std::size_t index, std::uintptr_t start, std::size_t size) {
    const std::uintptr_t end = start + size;
    std::uint64_t covered = 0;
    auto it = mapped.upper_bound(start);
    if (it != mapped.begin()) --it;
    while (it != mapped.end() && it->first < end) {
      const std::uintptr_t from = std::max(it->first, start), to = std::min(it->second, end);
      if (from >= to) {
        ++it;
        continue;
      }
      covered += to - from;
      const std::uintptr_t range_start = it->first, range_end = it->second;
      it = mapped.erase(it);
      if (range_start < from) mapped[range_start] = from;
      if (to < range_end) it = mapped.emplace(to, range_end).first;
    }
    unattributed -= static_cast<std::int64_t>(size - covered);
    if (unattributed < 0) corrupt(index, "unmaps " + std::to_string(size) + " bytes at " + std::to_string(start) + " that it never mapped");
  }
  // Applies event `index`; returns whether allocated or reserved bytes changed.
  bool apply(std::size_t index, const TraceEvent& event, const MemoryProfile& profile) {
    point.time_ns = event.time_ns - profile.start_ns;
    switch (event.action) {
      case TraceAction::alloc: {
        if (live.contains(event.address)) {
          corrupt(index, "allocates address " + std::to_string(event.address) + ", which is live (allocated and not freed)");
        }
        const auto tag = profile.tags.find(event.tag);
        add(LiveAllocation{event.address, event.size, event.category, tag == profile.tags.end() ? std::string() : tag->second,
                           event.stream});
        return true;
      }
      case TraceAction::free_requested: {
        const auto it = live.find(event.address);
        if (it == live.end()) corrupt(index, "frees address " + std::to_string(event.address) + ", which it never saw allocated");
        point.allocated[category_index(it->second.category)] -= static_cast<std::int64_t>(it->second.size);
        live.erase(it);
        return true;
      }
      case TraceAction::segment_alloc:
      case TraceAction::segment_map:
        map(index, event.address, event.size);
        point.reserved += static_cast<std::int64_t>(event.size);
        return true;
      case TraceAction::segment_free:
      case TraceAction::segment_unmap:
        unmap(index, event.address, event.size);
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
    if (!replay.apply(i, event, profile)) continue;
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
  for (std::size_t i = 0; i < peak_event; ++i) at_peak.apply(i, profile.events[i], profile);
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
