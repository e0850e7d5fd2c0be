// The allocator's state at the peak (engine/core/allocator_layout.h), shown as memory_viz shows its
// allocator state: each segment a bar of its blocks, allocated ones coloured by category and cached
// (reserved but unallocated) ones grey, so fragmentation is visible; and per segment kind, in words,
// how much of the reserved memory was unallocated.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/allocator_layout.h"

namespace ferry {

// {kind: [segments, reserved bytes, unallocated bytes]} for the kinds present, for trace.json.
nlohmann::json segments_by_kind(const AllocatorLayout& layout);
// Lines for the terminal table: per segment kind, segments, reserved and unallocated bytes.
std::string unallocated_by_segment_kind(const AllocatorLayout& layout);
// An SVG with one bar per segment, largest first (at most `max_segments`, the rest summed in a line).
std::string allocator_state_svg(const AllocatorLayout& layout, std::size_t max_segments = 40);

}  // namespace ferry
