// PyTorch memory snapshots (`ferry report/replay SNAPSHOT.pickle`): the pickle reader, the snapshot's
// decoding, its conversion to a profile and the profile's timeline (tests/fuzz/snapshot_fuzz_input.h).
#include "tests/fuzz/snapshot_fuzz_input.h"
#include "tests/fuzz/targets/fuzz_target.h"

namespace ferry::fuzz {

int fuzz_snapshot(const std::uint8_t* data, std::size_t size) {
  read_snapshot_bytes(text_of(data, size));
  return 0;
}

}  // namespace ferry::fuzz

FERRY_FUZZ_ENTRY(ferry::fuzz::fuzz_snapshot)
