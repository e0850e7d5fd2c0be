// The memory timeline rebuilt from a profile: allocated bytes per category and reserved bytes after
// every allocator event, the peak with what was live at that moment and which ops were running.
// Reports (terminal table, Chrome trace, HTML) are drawn from it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/core/memory_profile.h"

namespace ferry {

struct TimelinePoint {
  std::uint64_t time_ns = 0;  // since the profile started
  std::array<std::int64_t, kNumMemoryCategories> allocated{};
  std::int64_t reserved = 0;
  std::int64_t total() const;
};

struct MemoryTimeline {
  std::vector<TimelinePoint> points;  // the start, then one per event that changed allocated or reserved bytes
  std::size_t peak_index = 0;         // the first point with the most allocated bytes
  std::size_t peak_event_count = 0;   // the profile's events applied up to and including the peak
  std::int64_t peak_allocated = 0;
  std::int64_t peak_reserved = 0;
  std::array<std::int64_t, kNumMemoryCategories> category_peak{};  // each category's own maximum
  std::vector<LiveAllocation> live_at_peak;                         // largest first
  std::vector<OpMarker> ops_at_peak;                                // outermost first
  std::size_t out_of_memory_events = 0;

  const TimelinePoint& peak() const { return points[peak_index]; }
  const TimelinePoint& last() const { return points.back(); }
};

// Throws ProfileError when the events do not add up (an unknown free, a dropped event).
MemoryTimeline build_memory_timeline(const MemoryProfile& profile);

// At most `max_points` points for drawing: in each run of points the one with the most allocated
// bytes, so no local maximum (and never the peak) is lost.
std::vector<TimelinePoint> downsample_timeline(const MemoryTimeline& timeline, std::size_t max_points);

}  // namespace ferry
