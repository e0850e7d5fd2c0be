#include "allocator/cuda_segment_sources.h"

#include <vector>

#include "allocator/allocator_errors.h"

namespace ferry {

namespace {

std::size_t device_total_memory(int device) {
  FERRY_CUDA_CHECK(cudaSetDevice(device));
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  FERRY_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return total_bytes;
}

CUmemAllocationProp device_allocation_properties(int device) {
  CUmemAllocationProp properties{};
  properties.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  properties.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  properties.location.id = device;
  return properties;
}

}  // namespace

CudaMallocSegmentSource::CudaMallocSegmentSource(int device, std::size_t capacity)
    : device_(device), capacity_(capacity != 0 ? capacity : device_total_memory(device)) {}

void* CudaMallocSegmentSource::allocate_segment(std::size_t bytes) {
  if (bytes > capacity_ - used_bytes_) return nullptr;
  FERRY_CUDA_CHECK(cudaSetDevice(device_));
  void* address = nullptr;
  const cudaError_t status = cudaMalloc(&address, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  FERRY_CUDA_CHECK(status);
  used_bytes_ += bytes;
  return address;
}

void CudaMallocSegmentSource::free_segment(void* address, std::size_t bytes) {
  FERRY_CUDA_CHECK(cudaSetDevice(device_));
  FERRY_CUDA_CHECK(cudaFree(address));
  used_bytes_ -= bytes;
}

void CudaMallocSegmentSource::synchronize_device() {
  FERRY_CUDA_CHECK(cudaSetDevice(device_));
  FERRY_CUDA_CHECK(cudaDeviceSynchronize());
}

CudaVirtualMemorySource::CudaVirtualMemorySource(int device, std::size_t capacity)
    : device_(device),
      capacity_(capacity != 0 ? capacity : device_total_memory(device)),
      driver_(CudaDriverApi::load()) {
  FERRY_CUDA_CHECK(cudaSetDevice(device_));
  FERRY_CUDA_CHECK(cudaFree(nullptr));  // creates the primary context the driver calls run in
  const CUmemAllocationProp properties = device_allocation_properties(device_);
  FERRY_CU_CHECK(driver_.mem_get_allocation_granularity(&granularity_, &properties,
                                                        CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
}

CudaVirtualMemorySource::~CudaVirtualMemorySource() {
  for (auto& [address, handle] : pages_) {
    driver_.mem_unmap(static_cast<CUdeviceptr>(address), granularity_);
    driver_.mem_release(handle);
  }
}

void* CudaVirtualMemorySource::reserve_address_range(std::size_t bytes) {
  CUdeviceptr address = 0;
  const CUresult status = driver_.mem_address_reserve(&address, bytes, 0, 0, 0);
  if (status == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
  FERRY_CU_CHECK(status);
  return reinterpret_cast<void*>(address);
}

void CudaVirtualMemorySource::release_address_range(void* address, std::size_t bytes) {
  FERRY_CU_CHECK(driver_.mem_address_free(reinterpret_cast<CUdeviceptr>(address), bytes));
}

bool CudaVirtualMemorySource::map_pages(void* address, std::size_t bytes) {
  if (bytes % granularity_ != 0) {
    throw SegmentSourceError("map of " + std::to_string(bytes) + " bytes is not a multiple of the granularity " +
                             std::to_string(granularity_));
  }
  if (bytes > capacity_ - used_bytes_) return false;
  const auto start = reinterpret_cast<std::uintptr_t>(address);
  const CUmemAllocationProp properties = device_allocation_properties(device_);
  std::vector<std::uintptr_t> mapped;
  auto roll_back = [&] {
    for (std::uintptr_t page : mapped) {
      driver_.mem_unmap(static_cast<CUdeviceptr>(page), granularity_);
      driver_.mem_release(pages_.at(page));
      pages_.erase(page);
    }
  };
  for (std::uintptr_t page = start; page < start + bytes; page += granularity_) {
    CUmemGenericAllocationHandle handle{};
    const CUresult status = driver_.mem_create(&handle, granularity_, &properties, 0);
    if (status == CUDA_ERROR_OUT_OF_MEMORY) {
      roll_back();
      return false;
    }
    FERRY_CU_CHECK(status);
    FERRY_CU_CHECK(driver_.mem_map(static_cast<CUdeviceptr>(page), granularity_, 0, handle, 0));
    pages_.emplace(page, handle);
    mapped.push_back(page);
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  FERRY_CU_CHECK(driver_.mem_set_access(static_cast<CUdeviceptr>(start), bytes, &access, 1));
  used_bytes_ += bytes;
  return true;
}

void CudaVirtualMemorySource::unmap_pages(void* address, std::size_t bytes) {
  const auto start = reinterpret_cast<std::uintptr_t>(address);
  if (start % granularity_ != 0 || bytes % granularity_ != 0) {
    throw SegmentSourceError("unmap of " + std::to_string(bytes) + " bytes at " + std::to_string(start) + " is not in whole pages of " +
                             std::to_string(granularity_) + " bytes");
  }
  for (std::uintptr_t page = start; page < start + bytes; page += granularity_) {
    if (pages_.find(page) == pages_.end()) throw SegmentSourceError("unmap of a page that was not mapped");
  }
  // Page by page, as each was mapped (cuMemUnmap takes whole mappings, as PyTorch's expandable segments
  // unmap them); a page is forgotten only once it is unmapped and released.
  for (std::uintptr_t page = start; page < start + bytes; page += granularity_) {
    auto it = pages_.find(page);
    FERRY_CU_CHECK(driver_.mem_unmap(static_cast<CUdeviceptr>(page), granularity_));
    FERRY_CU_CHECK(driver_.mem_release(it->second));
    pages_.erase(it);
    used_bytes_ -= granularity_;
  }
}

void* CudaVirtualMemorySource::allocate_segment(std::size_t bytes) {
  void* address = reserve_address_range(bytes);
  if (address == nullptr) return nullptr;
  if (!map_pages(address, bytes)) {
    release_address_range(address, bytes);
    return nullptr;
  }
  return address;
}

void CudaVirtualMemorySource::free_segment(void* address, std::size_t bytes) {
  unmap_pages(address, bytes);
  release_address_range(address, bytes);
}

void CudaVirtualMemorySource::synchronize_device() {
  FERRY_CUDA_CHECK(cudaSetDevice(device_));
  FERRY_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace ferry
