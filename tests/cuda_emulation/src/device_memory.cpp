#include "device_memory.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>

namespace ferry::cuda_emulation {

DeviceMemory& DeviceMemory::instance() {
  static DeviceMemory memory;
  return memory;
}

DeviceMemory::~DeviceMemory() {
  for (auto& [address, bytes] : allocations_) ::operator delete(address, std::align_val_t{kAlignment});
}

void* DeviceMemory::allocate(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (bytes > kTotalBytes - used_bytes_) return nullptr;
  auto* address = static_cast<std::byte*>(::operator new(bytes, std::align_val_t{kAlignment}, std::nothrow));
  if (address == nullptr) return nullptr;
  std::memset(address, 0xff, bytes);  // like fresh device memory, not zeros: NaN floats expose reads before writes
  allocations_.emplace(address, bytes);
  used_bytes_ += bytes;
  return address;
}

bool DeviceMemory::free(void* address) {
  std::lock_guard lock(mutex_);
  auto found = allocations_.find(static_cast<std::byte*>(address));
  if (found == allocations_.end()) return false;
  used_bytes_ -= found->second;
  ::operator delete(found->first, std::align_val_t{kAlignment});
  allocations_.erase(found);
  return true;
}

std::size_t DeviceMemory::used_bytes() const {
  std::lock_guard lock(mutex_);
  return used_bytes_;
}

bool DeviceMemory::contains(const void* address, std::size_t bytes) const {
  std::lock_guard lock(mutex_);
  const auto* start = static_cast<const std::byte*>(address);
  auto after = allocations_.upper_bound(const_cast<std::byte*>(start));
  if (after == allocations_.begin()) return false;
  const auto& [base, size] = *std::prev(after);
  const auto offset = static_cast<std::size_t>(start - base);
  return offset <= size && bytes <= size - offset;
}

void DeviceMemory::add_allocations_pointed_to(const void* bytes, std::size_t size, std::vector<Allocation>& allocations) const {
  std::lock_guard lock(mutex_);
  for (std::size_t offset = 0; offset + sizeof(void*) <= size; offset += alignof(void*)) {
    std::byte* word = nullptr;
    std::memcpy(&word, static_cast<const std::byte*>(bytes) + offset, sizeof word);
    auto after = allocations_.upper_bound(word);
    if (after == allocations_.begin()) continue;
    const auto& [base, length] = *std::prev(after);
    if (word >= base + length) continue;
    const Allocation allocation{base, length};
    if (std::find(allocations.begin(), allocations.end(), allocation) == allocations.end()) allocations.push_back(allocation);
  }
}

void DeviceMemory::take(const std::vector<Allocation>& allocations, Snapshot& snapshot) const {
  snapshot.allocations = allocations;
  snapshot.contents.resize(allocations.size());
  for (std::size_t i = 0; i < allocations.size(); ++i) {
    snapshot.contents[i].resize(allocations[i].bytes);
    std::memcpy(snapshot.contents[i].data(), allocations[i].address, allocations[i].bytes);
  }
}

void DeviceMemory::restore(const Snapshot& snapshot) {
  for (std::size_t i = 0; i < snapshot.allocations.size(); ++i) {
    std::memcpy(snapshot.allocations[i].address, snapshot.contents[i].data(), snapshot.allocations[i].bytes);
  }
}

std::optional<std::string> DeviceMemory::first_difference(const Snapshot& snapshot) const {
  for (std::size_t i = 0; i < snapshot.allocations.size(); ++i) {
    std::byte* const address = snapshot.allocations[i].address;
    const std::vector<std::byte>& bytes = snapshot.contents[i];
    if (std::memcmp(address, bytes.data(), bytes.size()) == 0) continue;
    std::size_t offset = 0;
    while (address[offset] == bytes[offset]) ++offset;
    const std::size_t word = offset / 4 * 4;
    std::uint32_t now = 0, before = 0;
    if (word + sizeof now <= bytes.size()) {
      std::memcpy(&now, address + word, sizeof now);
      std::memcpy(&before, bytes.data() + word, sizeof before);
    }
    char text[320];
    std::snprintf(text, sizeof text, "byte %zu of the %zu-byte allocation at %p (its word 0x%08x, as a float %.9g, against 0x%08x, %.9g)",
                  offset, bytes.size(), static_cast<void*>(address), now, static_cast<double>(std::bit_cast<float>(now)), before,
                  static_cast<double>(std::bit_cast<float>(before)));
    return std::string(text);
  }
  return std::nullopt;
}

}  // namespace ferry::cuda_emulation
