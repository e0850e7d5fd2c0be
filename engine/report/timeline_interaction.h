// What makes a timeline interactive in a self-contained page: the figure (a legend of the op lanes,
// the SVG, the allocations as JSON for the page to replay, a panel for the moment clicked) and one
// script for the page (scroll to zoom, drag to pan, double-click to reset, the time axis redrawn, step
// and op labels shown where they fit, a click lists what was live then by category and tag, and the ops
// running). No network, no libraries.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "engine/report/timeline_svg.h"

namespace ferry {

// Profiles with more allocator events than this carry no click data (the page says so).
inline constexpr std::size_t kMaxClickableEvents = 400'000;

std::string timeline_figure(const MemoryProfile& profile, const MemoryTimeline& timeline, const TimelineAxes& axes, std::string_view id);
// The <script> for every timeline figure on the page; include it once, after them.
std::string_view timeline_script();

}  // namespace ferry
