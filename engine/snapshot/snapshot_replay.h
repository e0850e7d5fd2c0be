// A profile's allocations (a PyTorch snapshot read as one) as the records of an allocation trace, so
// `ferry replay SNAPSHOT.pickle` runs them through the caching allocator exactly as it runs an RMM CSV.
#pragma once

#include <vector>

#include "allocator/recorded_segment_source.h"
#include "allocator/rmm_trace.h"
#include "engine/core/memory_profile.h"

namespace ferry {

// The allocations live at the start first (line 0), then per event: alloc -> allocate, free_requested
// -> free, oom -> allocate failure (line: the event's index + 1). Segment events are the replaying
// allocator's own business and are left out.
std::vector<RmmTraceRecord> profile_allocation_records(const MemoryProfile& profile);

// Where the traced allocator put its segments (segment_alloc events, in order), for a replay to put its
// own there (RecordedSegmentSource): only a profile that starts with nothing reserved has them all.
std::vector<RecordedSegment> profile_segment_records(const MemoryProfile& profile);

}  // namespace ferry
