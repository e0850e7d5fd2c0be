// XXH64 (seed 0): the 64-bit content hash ferry writes beside what it must find again unchanged (NVMe
// chunks, training data identity, checkpoint files). Equal to `xxhsum -H1`, so a file checks by hand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry {

std::uint64_t xxhash64(const void* data, std::size_t bytes);

// The same hash over bytes given in pieces of any size (a file read a chunk at a time): update() with each
// piece in order, then digest() equals xxhash64 of them all end to end.
class Xxhash64Stream {
 public:
  void update(const void* data, std::size_t bytes);
  std::uint64_t digest() const;

 private:
  void consume_stripe(const unsigned char* stripe);

  std::uint64_t lanes_[4] = {0x9E3779B185EBCA87ULL + 0xC2B2AE3D27D4EB4FULL, 0xC2B2AE3D27D4EB4FULL, 0, 0 - 0x9E3779B185EBCA87ULL};
  unsigned char pending_[32] = {};  // bytes of a stripe not yet full
  std::size_t pending_bytes_ = 0;
  std::uint64_t total_bytes_ = 0;
};
// A hash as xxhsum prints it: 16 lowercase hex digits.
std::string xxhash64_text(std::uint64_t hash);

}  // namespace ferry
