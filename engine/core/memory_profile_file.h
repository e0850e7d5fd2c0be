// The memory profile's file: DIR/profile.json (format "ferry-memory-profile", version 1) written
// atomically and read back with every field checked, so a damaged or foreign file is a ProfileError
// naming it. Apart from the profiler so the reader builds (and is fuzzed) without a device.
#pragma once

#include <string>
#include <string_view>

#include "engine/core/memory_profile.h"

namespace ferry {

// DIR/profile.json, written atomically (the directory is created when missing).
void write_memory_profile(const std::string& directory, const MemoryProfile& profile);
MemoryProfile read_memory_profile(const std::string& directory);
// The profile in profile.json's text (`file` names it in errors).
MemoryProfile parse_memory_profile(std::string_view text, const std::string& file);

}  // namespace ferry
