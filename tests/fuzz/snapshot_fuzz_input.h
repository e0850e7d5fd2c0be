// One fuzz input through everything that reads a snapshot: the pickle reader, the snapshot decoder,
// the conversion to a profile and its timeline. Bad input must end in one of their typed errors;
// anything else (another exception, a crash, a sanitizer report) is a bug. Shared by the libFuzzer
// entry point (snapshot_fuzzer.cpp) and the mutation test that runs under g++.
#pragma once

#include <string_view>

#include "engine/core/memory_timeline.h"
#include "engine/snapshot/pickle_reader.h"
#include "engine/snapshot/snapshot_profile.h"

namespace ferry::fuzz {

// Returns whether the input was accepted as a snapshot.
inline bool read_snapshot_bytes(std::string_view data) {
  try {
    PickleLimits limits;
    limits.max_bytes = std::size_t{1} << 24;
    const PickleDocument document = read_pickle(data, "fuzz.pickle", limits);
    const MemoryProfile profile = snapshot_to_profile(decode_torch_snapshot(document, "fuzz.pickle"), "fuzz.pickle");
    build_memory_timeline(profile);
    return true;
  } catch (const PickleError&) {
  } catch (const SnapshotError&) {
  } catch (const ProfileError&) {
  }
  return false;
}

}  // namespace ferry::fuzz
