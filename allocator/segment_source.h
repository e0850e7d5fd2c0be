// SegmentSource: where the caching allocator's raw memory comes from (cudaMalloc, CUDA virtual memory,
// capacity-limited host memory, or bare address ranges for the meta device). The allocator's policy
// is written once against this interface and never knows which source it runs on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry {

class SegmentSource {
 public:
  virtual ~SegmentSource() = default;

  virtual std::string name() const = 0;
  // Bytes the source can hand out at most (device memory, or the configured limit).
  virtual std::size_t capacity() const = 0;
  // Bytes currently handed out (segments plus mapped pages).
  virtual std::size_t used_bytes() const = 0;

  // A whole segment of `bytes` (a multiple of 2 MiB), or nullptr when the source is out of memory.
  // Other failures throw SegmentSourceError.
  virtual void* allocate_segment(std::size_t bytes) = 0;
  virtual void free_segment(void* address, std::size_t bytes) = 0;

  // Expandable segments: reserve address space first, then map and unmap physical pages in it.
  virtual bool supports_expandable_segments() const { return false; }
  // Mapping granularity: every map/unmap offset and size is a multiple of it.
  virtual std::size_t page_granularity() const { return 2u << 20; }
  // The page an expandable segment of a pool grows and shrinks by (a multiple of the granularity):
  // PyTorch's 2 MiB (small pool) and 20 MiB (large pool), rounded up to the granularity, where mapping
  // is a driver call; the host and meta sources map the granularity in both pools.
  virtual std::size_t expandable_page_bytes(bool small_pool) const;
  // Reserves `bytes` of address space with nothing mapped; nullptr when no address space is left.
  virtual void* reserve_address_range(std::size_t bytes);
  virtual void release_address_range(void* address, std::size_t bytes);
  // Maps physical memory at [address, address + bytes); false when the source is out of memory.
  virtual bool map_pages(void* address, std::size_t bytes);
  virtual void unmap_pages(void* address, std::size_t bytes);
  // Waits for all outstanding device work (needed before unmapping on a real GPU).
  virtual void synchronize_device() {}
};

}  // namespace ferry
