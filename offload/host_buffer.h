// HostBuffer: one owned block of host memory for offloaded state, either pinned (page-locked, from the
// PinnedHostAllocator, counted in its statistics under a category) or pageable (aligned new, for
// pin_memory: false). Freed when the buffer goes.
#pragma once

#include <cstddef>
#include <span>

#include "allocator/memory_category.h"
#include "allocator/pinned_host_allocator.h"

namespace ferry::offload {

class HostBuffer {
 public:
  HostBuffer() = default;
  // pinned == nullptr: pageable memory aligned to `alignment`; else pinned (page-aligned) memory.
  HostBuffer(PinnedHostAllocator* pinned, std::size_t bytes, MemoryCategory category, std::size_t alignment = 4096);
  ~HostBuffer();
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  std::span<std::byte> span() const { return {static_cast<std::byte*>(data_), bytes_}; }

 private:
  void release();
  PinnedHostAllocator* pinned_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t alignment_ = 0;
};

}  // namespace ferry::offload
