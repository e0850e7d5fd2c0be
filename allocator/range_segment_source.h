// Segment sources over one reserved address span with a capacity limit: HostSegmentSource (cpu
// device: real host memory, committed with mprotect) and AddressSpaceSegmentSource (meta device:
// addresses only, nothing behind them). Both support expandable segments by emulating the mapping
// of fixed-size pages, so their effect is tested and measured on every machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "allocator/address_range_allocator.h"
#include "allocator/segment_source.h"

namespace ferry {

class RangeSegmentSource : public SegmentSource {
 public:
  std::size_t capacity() const override { return capacity_; }
  std::size_t used_bytes() const override { return used_bytes_; }
  void* allocate_segment(std::size_t bytes) override;
  void free_segment(void* address, std::size_t bytes) override;

  bool supports_expandable_segments() const override { return true; }
  // Mapping is an mprotect (or nothing, on meta): pages of 64 KiB, in both pools, so the reserved bytes
  // follow the live ones closely; a meta source standing in for a GPU (trace replay) maps CUDA's 2 MiB
  // granules and PyTorch's pages (2 MiB small, 20 MiB large) instead.
  static constexpr std::size_t kHostPage = std::size_t{64} << 10;
  std::size_t page_granularity() const override { return cuda_pages_ ? SegmentSource::page_granularity() : kHostPage; }
  std::size_t expandable_page_bytes(bool small_pool) const override {
    return cuda_pages_ ? SegmentSource::expandable_page_bytes(small_pool) : page_granularity();
  }
  void* reserve_address_range(std::size_t bytes) override;
  void release_address_range(void* address, std::size_t bytes) override;
  bool map_pages(void* address, std::size_t bytes) override;
  void unmap_pages(void* address, std::size_t bytes) override;

 protected:
  // The span is kReserveFactor x capacity, so segments of mixed sizes never fail for want of a
  // contiguous address range while capacity remains, and expandable segments (each reserving the
  // capacity) fit for several streams and both pools.
  static constexpr std::size_t kReserveFactor = 8;
  static constexpr std::size_t kSegmentAlignment = 2u << 20;

  RangeSegmentSource(std::uintptr_t base, std::size_t capacity, bool cuda_pages = false);
  // Makes [address, address + bytes) usable memory, or releases it again.
  virtual void commit(std::uintptr_t address, std::size_t bytes) = 0;
  virtual void decommit(std::uintptr_t address, std::size_t bytes) = 0;

 private:
  bool take_capacity(std::size_t bytes);
  bool cuda_pages_;
  // Throws SegmentSourceError unless [address, address + bytes) is whole pages of page_granularity().
  void check_whole_pages(const char* call, void* address, std::size_t bytes) const;
  std::size_t capacity_;
  std::size_t used_bytes_ = 0;
  AddressRangeAllocator ranges_;
};

// Host memory behind a capacity limit: the cpu device's "device memory".
class HostSegmentSource final : public RangeSegmentSource {
 public:
  explicit HostSegmentSource(std::size_t capacity);
  ~HostSegmentSource() override;
  HostSegmentSource(const HostSegmentSource&) = delete;
  HostSegmentSource& operator=(const HostSegmentSource&) = delete;
  std::string name() const override { return "host"; }

 private:
  HostSegmentSource(void* span, std::size_t capacity);
  void commit(std::uintptr_t address, std::size_t bytes) override;
  void decommit(std::uintptr_t address, std::size_t bytes) override;
  void* span_;
  std::size_t span_bytes_;
};

// Address ranges with no memory behind them: the meta device. Same offsets as HostSegmentSource.
class AddressSpaceSegmentSource final : public RangeSegmentSource {
 public:
  // `cuda_pages`: expandable segments grow by PyTorch's CUDA pages (2 MiB small, 20 MiB large), as a
  // replay of a GPU's trace needs; otherwise by the cpu device's.
  explicit AddressSpaceSegmentSource(std::size_t capacity, bool cuda_pages = false);
  std::string name() const override { return "meta"; }

 private:
  // A fixed, never-dereferenced base: addresses are stable across runs and easy to read.
  static constexpr std::uintptr_t kBase = 0x100000000000ull;
  void commit(std::uintptr_t, std::size_t) override {}
  void decommit(std::uintptr_t, std::size_t) override {}
};

}  // namespace ferry
