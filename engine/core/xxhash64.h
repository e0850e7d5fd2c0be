// XXH64 (seed 0): the 64-bit content hash ferry writes beside what it must find again unchanged (NVMe
// chunks, training data identity, checkpoint files). Equal to `xxhsum -H1`, so a file checks by hand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry {

std::uint64_t xxhash64(const void* data, std::size_t bytes);
// A hash as xxhsum prints it: 16 lowercase hex digits.
std::string xxhash64_text(std::uint64_t hash);

}  // namespace ferry
