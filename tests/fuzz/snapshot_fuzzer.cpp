// libFuzzer entry point for the snapshot reader (built with clang only: -fsanitize=fuzzer). Seeds:
// tests/data/snapshots/*.pickle. Run: ./snapshot_fuzzer -max_len=65536 tests/data/snapshots
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/snapshot_fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ferry::fuzz::read_snapshot_bytes(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
