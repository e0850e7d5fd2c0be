// A PyTorch memory snapshot as a ferry memory profile, so `ferry report` and `ferry replay` read it
// like one of ferry's own, and a ferry profile as a snapshot that memory_viz opens. What a snapshot's
// trace does not say (allocations live before it began, reserved bytes then) is rebuilt from its segments.
#pragma once

#include <string>

#include "engine/core/memory_profile.h"
#include "engine/snapshot/torch_snapshot.h"

namespace ferry {

// The device with the first non-empty trace (else 0). Times come from time_us (made non-decreasing);
// snapshots without them get 1 us per event. Throws SnapshotError for a free of an address that is not
// live (double free), an alloc over a live address, or segments that contradict the trace.
MemoryProfile snapshot_to_profile(const TorchSnapshot& snapshot, const std::string& file);

// The profile's events as device 0's trace, with a ferry frame (ferry/<category>, tag) on each alloc and
// free; segments and blocks as the allocator held them when the profile ended; the run's metadata and
// ops under "ferry".
TorchSnapshot profile_to_snapshot(const MemoryProfile& profile);

// A profile directory, or a snapshot file (looks_like_pickle_file), read as a profile.
MemoryProfile read_profile_or_snapshot(const std::string& path);

}  // namespace ferry
