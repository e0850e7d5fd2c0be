// First-fit allocator of address ranges inside one reserved span. The host and meta segment sources
// share it, so both hand out segments at the same offsets and a dry run on meta makes exactly the
// choices a cpu run makes (best fit breaks ties by address).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>

namespace ferry {

class AddressRangeAllocator {
 public:
  AddressRangeAllocator(std::uintptr_t base, std::size_t size);

  // Lowest-addressed free range of `bytes` aligned to `alignment` (a power of two), or nullopt.
  std::optional<std::uintptr_t> allocate(std::size_t bytes, std::size_t alignment);
  void free(std::uintptr_t address, std::size_t bytes);

  std::uintptr_t base() const { return base_; }
  std::size_t size() const { return size_; }
  std::size_t free_bytes() const { return free_bytes_; }

 private:
  std::uintptr_t base_;
  std::size_t size_;
  std::size_t free_bytes_;
  std::map<std::uintptr_t, std::size_t> free_ranges_;  // start -> length, disjoint, coalesced
};

}  // namespace ferry
