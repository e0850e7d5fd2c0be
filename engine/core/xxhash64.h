// XXH64 (seed 0): the 64-bit content hash ferry writes beside what it must find again unchanged (NVMe
// chunks, training data identity, checkpoint files). Equal to `xxhsum -H1`, so a file checks by hand.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry {

std::uint64_t xxhash64(const void* data, std::size_t bytes);

}  // namespace ferry
