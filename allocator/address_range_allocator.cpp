#include "allocator/address_range_allocator.h"

#include <iterator>
#include <string>

#include "allocator/allocator_errors.h"

namespace ferry {

AddressRangeAllocator::AddressRangeAllocator(std::uintptr_t base, std::size_t size)
    : base_(base), size_(size), free_bytes_(size) {
  if (size > 0) free_ranges_.emplace(base, size);
}

std::optional<std::uintptr_t> AddressRangeAllocator::allocate(std::size_t bytes, std::size_t alignment) {
  for (auto it = free_ranges_.begin(); it != free_ranges_.end(); ++it) {
    const std::uintptr_t start = it->first;
    const std::uintptr_t end = start + it->second;
    const std::uintptr_t aligned = (start + alignment - 1) & ~(static_cast<std::uintptr_t>(alignment) - 1);
    if (aligned > end || end - aligned < bytes) continue;
    free_ranges_.erase(it);
    if (aligned > start) free_ranges_.emplace(start, aligned - start);
    if (aligned + bytes < end) free_ranges_.emplace(aligned + bytes, end - (aligned + bytes));
    free_bytes_ -= bytes;
    return aligned;
  }
  return std::nullopt;
}

void AddressRangeAllocator::free(std::uintptr_t address, std::size_t bytes) {
  if (address < base_ || address + bytes > base_ + size_) {
    throw InvalidFreeError("address range " + std::to_string(address) + " +" + std::to_string(bytes) +
                           " lies outside the reserved span");
  }
  auto next = free_ranges_.lower_bound(address);
  if (next != free_ranges_.end() && next->first < address + bytes) {
    throw InvalidFreeError("address range " + std::to_string(address) + " is already free");
  }
  std::uintptr_t start = address;
  std::size_t length = bytes;
  if (next != free_ranges_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second > address) {
      throw InvalidFreeError("address range " + std::to_string(address) + " is already free");
    }
    if (previous->first + previous->second == address) {
      start = previous->first;
      length += previous->second;
      free_ranges_.erase(previous);
    }
  }
  if (next != free_ranges_.end() && next->first == address + bytes) {
    length += next->second;
    free_ranges_.erase(next);
  }
  free_ranges_.emplace(start, length);
  free_bytes_ += bytes;
}

}  // namespace ferry
