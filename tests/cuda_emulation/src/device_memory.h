// The emulated GPU's memory: every cudaMalloc is a heap allocation of exactly its size (AddressSanitizer
// reports a kernel that runs past one), tracked so that a launch can be rerun from the same memory in
// another schedule order and the results compared byte for byte.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ferry::cuda_emulation {

class DeviceMemory {
 public:
  static constexpr std::size_t kTotalBytes = std::size_t{16} << 30;  // what cudaMemGetInfo reports
  static constexpr std::size_t kAlignment = 256;                     // as cudaMalloc's

  // The process's emulated device memory (one device, like the GPU a process sees): shared state by
  // nature, guarded by its mutex.
  static DeviceMemory& instance();
  ~DeviceMemory();

  void* allocate(std::size_t bytes);  // null when the emulated device is full
  bool free(void* address);           // false for an address cudaMalloc did not return
  std::size_t used_bytes() const;
  // Whether [address, address + bytes) lies inside one allocation.
  bool contains(const void* address, std::size_t bytes) const;

  // The allocations that the pointer-sized, pointer-aligned words of `bytes` point into.
  struct Allocation {
    std::byte* address;
    std::size_t bytes;
    bool operator==(const Allocation&) const = default;
  };
  void add_allocations_pointed_to(const void* bytes, std::size_t size, std::vector<Allocation>& allocations) const;

  // The bytes of some allocations; its buffers are reused from one snapshot to the next.
  struct Snapshot {
    std::vector<Allocation> allocations;
    std::vector<std::vector<std::byte>> contents;
  };
  void take(const std::vector<Allocation>& allocations, Snapshot& snapshot) const;
  void restore(const Snapshot& snapshot);
  // The first byte where memory differs from `snapshot`, described; nothing when equal.
  std::optional<std::string> first_difference(const Snapshot& snapshot) const;

 private:
  DeviceMemory() = default;
  mutable std::mutex mutex_;
  std::map<std::byte*, std::size_t> allocations_;
  std::size_t used_bytes_ = 0;
};

}  // namespace ferry::cuda_emulation
