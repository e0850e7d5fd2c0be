// A memory profile's profile.json (`ferry report`, `ferry compare`, snapshots from profiles): format
// and version, the allocator's events, tags, op markers; what is accepted is written again.
#include <stdexcept>

#include "engine/core/memory_profile_file.h"
#include "tests/fuzz/targets/fuzz_target.h"

namespace ferry::fuzz {

int fuzz_profile(const std::uint8_t* data, std::size_t size) {
  try {
    const MemoryProfile profile = parse_memory_profile(text_of(data, size), "fuzz/profile.json");
    (void)profile.events.size();
  } catch (const ProfileError& error) {
    require_own_words(error, text_of(data, size));
  }
  return 0;
}

}  // namespace ferry::fuzz

FERRY_FUZZ_ENTRY(ferry::fuzz::fuzz_profile)
