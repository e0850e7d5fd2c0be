#include "engine/core/allocator_layout.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace ferry {
namespace {

constexpr std::size_t kSmallSegmentBytes = std::size_t{2} << 20;

// Reserved address ranges [start, end) with the kind of segment each came from. Mapped pages that
// touch join into one range, as the pages of one expandable segment do, and so do the blocks seen in
// segments from before the profile.
class ReservedRanges {
 public:
  struct Range {
    std::uintptr_t end;
    SegmentKind kind;
  };
  void add(std::uintptr_t start, std::size_t size, SegmentKind kind) {
    std::uintptr_t end = start + size;
    remove(start, size);
    if (kind == SegmentKind::expandable || kind == SegmentKind::before_profile) {
      if (auto before = ranges_.lower_bound(start); before != ranges_.begin() && std::prev(before)->second.end == start &&
                                                    std::prev(before)->second.kind == kind) {
        start = std::prev(before)->first;
        ranges_.erase(std::prev(before));
      }
      if (auto after = ranges_.find(end); after != ranges_.end() && after->second.kind == kind) {
        end = after->second.end;
        ranges_.erase(after);
      }
    }
    ranges_[start] = Range{end, kind};
  }
  void remove(std::uintptr_t start, std::size_t size) {
    const std::uintptr_t end = start + size;
    auto it = ranges_.lower_bound(start);
    if (it != ranges_.begin() && std::prev(it)->second.end > start) --it;
    while (it != ranges_.end() && it->first < end) {
      const std::uintptr_t low = it->first;
      const Range range = it->second;
      it = ranges_.erase(it);
      if (low < start) ranges_[low] = Range{start, range.kind};
      if (range.end > end) ranges_[end] = Range{range.end, range.kind};
    }
  }
  bool contains(std::uintptr_t start, std::size_t size) const {
    auto it = ranges_.upper_bound(start);
    return it != ranges_.begin() && std::prev(it)->second.end >= start + size;
  }
  const std::map<std::uintptr_t, Range>& ranges() const { return ranges_; }

 private:
  std::map<std::uintptr_t, Range> ranges_;
};

LayoutBlock block_of(const LiveAllocation& each) { return LayoutBlock{each.address, each.size, true, each.category, each.tag, each.stream}; }

void add_cached(LayoutSegment& segment, std::uintptr_t from, std::uintptr_t to) {
  if (to > from) segment.blocks.push_back(LayoutBlock{from, to - from, false, MemoryCategory::uncategorized, {}, 0});
}

}  // namespace

std::string_view segment_kind_name(SegmentKind kind) {
  switch (kind) {
    case SegmentKind::small: return "small";
    case SegmentKind::large: return "large";
    case SegmentKind::expandable: return "expandable";
    case SegmentKind::before_profile: return "before the profile";
  }
  return "?";
}

std::size_t LayoutSegment::allocated_bytes() const {
  std::size_t bytes = 0;
  for (const LayoutBlock& block : blocks) bytes += block.allocated ? block.size : 0;
  return bytes;
}

std::int64_t AllocatorLayout::reserved() const {
  return std::accumulate(segments.begin(), segments.end(), unplaced_reserved,
                         [](std::int64_t sum, const LayoutSegment& segment) { return sum + static_cast<std::int64_t>(segment.size); });
}

std::int64_t AllocatorLayout::allocated() const {
  return std::accumulate(segments.begin(), segments.end(), std::int64_t{0},
                         [](std::int64_t sum, const LayoutSegment& segment) { return sum + static_cast<std::int64_t>(segment.allocated_bytes()); });
}

// A segment of `range` holding the live allocations that start inside it (taken out of `live`), and
// cached blocks between them.
LayoutSegment segment_with_blocks(std::uintptr_t start, const ReservedRanges::Range& range, std::map<std::uintptr_t, LiveAllocation>& live) {
  LayoutSegment segment{start, range.end - start, range.kind, {}};
  std::uintptr_t cursor = start;
  for (auto it = live.lower_bound(start); it != live.end() && it->first < range.end;) {
    add_cached(segment, cursor, it->first);
    segment.blocks.push_back(block_of(it->second));
    cursor = it->first + it->second.size;
    it = live.erase(it);
  }
  add_cached(segment, cursor, range.end);
  return segment;
}

AllocatorLayout allocator_layout_at(const MemoryProfile& profile, std::size_t events_applied) {
  std::map<std::uintptr_t, LiveAllocation> live;
  ReservedRanges reserved;  // segments the events allocated or mapped
  ReservedRanges earlier;   // blocks seen outside them: in segments from before the profile
  const auto seen = [&](std::uintptr_t address, std::size_t size) {
    if (!reserved.contains(address, size)) earlier.add(address, size, SegmentKind::before_profile);
  };
  for (const LiveAllocation& each : profile.initial_allocations) {
    live[each.address] = each;
    seen(each.address, each.size);
  }
  std::int64_t reserved_bytes = profile.initial_reserved;
  for (std::size_t i = 0; i < std::min(events_applied, profile.events.size()); ++i) {
    const TraceEvent& event = profile.events[i];
    switch (event.action) {
      case TraceAction::alloc: {
        const auto tag = profile.tags.find(event.tag);
        live[event.address] = LiveAllocation{event.address, event.size, event.category, tag == profile.tags.end() ? "" : tag->second, event.stream};
        seen(event.address, event.size);
        break;
      }
      case TraceAction::free_requested: live.erase(event.address); break;
      case TraceAction::segment_alloc:
      case TraceAction::segment_map:
        reserved.add(event.address, event.size,
                     event.action == TraceAction::segment_map ? SegmentKind::expandable
                     : event.size <= kSmallSegmentBytes       ? SegmentKind::small
                                                              : SegmentKind::large);
        reserved_bytes += static_cast<std::int64_t>(event.size);
        break;
      case TraceAction::segment_free:
      case TraceAction::segment_unmap:
        reserved.remove(event.address, event.size);
        earlier.remove(event.address, event.size);  // a segment from before the profile, released
        reserved_bytes -= static_cast<std::int64_t>(event.size);
        break;
      default: break;
    }
  }
  AllocatorLayout layout;
  for (const ReservedRanges* ranges : {&reserved, &earlier}) {
    for (const auto& [start, range] : ranges->ranges()) {
      layout.segments.push_back(segment_with_blocks(start, range, live));
      reserved_bytes -= static_cast<std::int64_t>(layout.segments.back().size);
    }
  }
  layout.unplaced_reserved = std::max<std::int64_t>(reserved_bytes, 0);
  std::sort(layout.segments.begin(), layout.segments.end(), [](const LayoutSegment& a, const LayoutSegment& b) { return a.address < b.address; });
  return layout;
}

}  // namespace ferry
