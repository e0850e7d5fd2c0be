// The two segment sources of a real GPU: cudaMalloc/cudaFree segments, and CUDA virtual memory
// (cuMemAddressReserve + cuMemCreate/cuMemMap) for expandable segments. Built only with CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "allocator/cuda_check.h"
#include "allocator/segment_source.h"

namespace ferry {

class CudaMallocSegmentSource final : public SegmentSource {
 public:
  // `capacity` 0: the device's total memory (cudaMemGetInfo).
  explicit CudaMallocSegmentSource(int device, std::size_t capacity = 0);
  std::string name() const override { return "cuda:" + std::to_string(device_); }
  std::size_t capacity() const override { return capacity_; }
  std::size_t used_bytes() const override { return used_bytes_; }
  void* allocate_segment(std::size_t bytes) override;
  void free_segment(void* address, std::size_t bytes) override;
  void synchronize_device() override;

 private:
  int device_;
  std::size_t capacity_;
  std::size_t used_bytes_ = 0;
};

class CudaVirtualMemorySource final : public SegmentSource {
 public:
  explicit CudaVirtualMemorySource(int device, std::size_t capacity = 0);
  ~CudaVirtualMemorySource() override;
  CudaVirtualMemorySource(const CudaVirtualMemorySource&) = delete;
  CudaVirtualMemorySource& operator=(const CudaVirtualMemorySource&) = delete;

  std::string name() const override { return "cuda-vmm:" + std::to_string(device_); }
  std::size_t capacity() const override { return capacity_; }
  std::size_t used_bytes() const override { return used_bytes_; }
  void* allocate_segment(std::size_t bytes) override;
  void free_segment(void* address, std::size_t bytes) override;

  bool supports_expandable_segments() const override { return true; }
  std::size_t page_granularity() const override { return granularity_; }
  void* reserve_address_range(std::size_t bytes) override;
  void release_address_range(void* address, std::size_t bytes) override;
  bool map_pages(void* address, std::size_t bytes) override;
  void unmap_pages(void* address, std::size_t bytes) override;
  void synchronize_device() override;

 private:
  int device_;
  std::size_t capacity_;
  std::size_t used_bytes_ = 0;
  std::size_t granularity_ = 0;
  CudaDriverApi driver_;
  std::map<std::uintptr_t, CUmemGenericAllocationHandle> pages_;  // one physical handle per granule
};

}  // namespace ferry
