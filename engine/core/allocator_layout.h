// The allocator's segments and their blocks at any moment of a memory profile, rebuilt from its events
// (segment_alloc/free, map/unmap, alloc, free): what memory_viz calls the allocator state, so reports can
// draw fragmentation at the peak and count reserved-but-unallocated bytes per segment kind, and so
// that a snapshot written from a profile holds every block memory_viz replays inside a segment. Segments
// from before the profile began are not in its events: they are drawn as far as the blocks seen in them
// reach (touching blocks join), and the rest of their bytes are counted apart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/memory_profile.h"

namespace ferry {

enum class SegmentKind : std::uint8_t {
  small,        // segment_alloc of at most 2 MiB (the small pool's segments)
  large,        // segment_alloc of more
  expandable,   // pages mapped with segment_map
  before_profile,  // the blocks seen in segments the profile never saw allocated (joined where they touch)
};

std::string_view segment_kind_name(SegmentKind kind);

struct LayoutBlock {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  bool allocated = false;  // false: cached (reserved, free in the allocator's pools)
  MemoryCategory category = MemoryCategory::uncategorized;
  std::string tag;
  StreamId stream = 0;
};

struct LayoutSegment {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  SegmentKind kind = SegmentKind::large;
  std::vector<LayoutBlock> blocks;  // tile the segment, by address
  std::size_t allocated_bytes() const;
};

struct AllocatorLayout {
  std::vector<LayoutSegment> segments;  // by address
  // Reserved bytes the events cannot place: segments from before the profile, less what their blocks
  // cover (0 when the profile saw every segment allocated).
  std::int64_t unplaced_reserved = 0;
  std::int64_t reserved() const;
  std::int64_t allocated() const;
};

// The layout after the first `events_applied` events of `profile` (events.size(): when it ended).
AllocatorLayout allocator_layout_at(const MemoryProfile& profile, std::size_t events_applied);

}  // namespace ferry
