// The SVG timeline of one memory profile, as report.html and the comparison page draw it: allocated
// bytes stacked by category, reserved as a dashed line, the device limit, the peak marked, and lanes of
// the steps and ops that ran. Axes can be shared so two runs are drawn on the same scales. The drawing
// is ready for timeline_interaction's script: the data layers zoom as one group, and the labels that
// must not stretch carry the time they belong to (data-t, data-t-end).
#pragma once

#include <string>
#include <string_view>

#include "engine/core/memory_timeline.h"

namespace ferry {

struct TimelineAxes {
  double duration_ns = 1;  // the time axis runs from 0 to this
  double max_bytes = 0;    // the byte axis reaches at least this
};

// A profile's own axes: its duration, and its peak (or its device limit when that is near).
TimelineAxes timeline_axes(const MemoryProfile& profile, const MemoryTimeline& timeline);
// `id` names the <svg> (unique in the page).
std::string timeline_svg(const MemoryProfile& profile, const MemoryTimeline& timeline, const TimelineAxes& axes, std::string_view id);
// The colour of an op lane's kind (forward, backward, recompute, loss, optimizer; others grey).
std::string_view op_kind_color(std::string_view kind);

}  // namespace ferry
