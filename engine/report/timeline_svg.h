// The SVG timeline of one memory profile, as report.html and the comparison page draw it: allocated
// bytes stacked by category, reserved as a dashed line, the device limit, the peak marked, and lanes of
// the steps and ops that ran. Axes can be shared so two runs are drawn on the same scales.
#pragma once

#include <string>

#include "engine/core/memory_timeline.h"

namespace ferry {

struct TimelineAxes {
  double duration_ns = 1;  // the time axis runs from 0 to this
  double max_bytes = 0;    // the byte axis reaches at least this
};

// A profile's own axes: its duration, and its peak (or its device limit when that is near).
TimelineAxes timeline_axes(const MemoryProfile& profile, const MemoryTimeline& timeline);
std::string timeline_svg(const MemoryProfile& profile, const MemoryTimeline& timeline, const TimelineAxes& axes);

}  // namespace ferry
