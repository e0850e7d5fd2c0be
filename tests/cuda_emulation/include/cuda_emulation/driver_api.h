// The CUDA driver API types and declarations allocator/cuda_segment_sources.cpp names (virtual memory for
// expandable segments). Declared only: the emulation cannot map device pages, so these are never called
// (cudaGetDriverEntryPointByVersion reports them missing) and never defined.
#pragma once

#include <cstddef>

enum CUresult : int { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2 };

using CUdeviceptr = unsigned long long;
using CUmemGenericAllocationHandle = unsigned long long;

enum CUmemAllocationType : int { CU_MEM_ALLOCATION_TYPE_INVALID = 0, CU_MEM_ALLOCATION_TYPE_PINNED = 1 };
enum CUmemLocationType : int { CU_MEM_LOCATION_TYPE_INVALID = 0, CU_MEM_LOCATION_TYPE_DEVICE = 1 };
enum CUmemAccess_flags : int { CU_MEM_ACCESS_FLAGS_PROT_NONE = 0, CU_MEM_ACCESS_FLAGS_PROT_READ = 1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 };
enum CUmemAllocationGranularity_flags : int { CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1 };

struct CUmemLocation {
  CUmemLocationType type;
  int id;
};

struct CUmemAllocationProp {
  CUmemAllocationType type;
  int requestedHandleTypes;
  CUmemLocation location;
  void* win32HandleMetaData;
  unsigned char allocFlags[8];
};

struct CUmemAccessDesc {
  CUmemLocation location;
  CUmemAccess_flags flags;
};

extern "C" {
CUresult cuMemAddressReserve(CUdeviceptr* address, std::size_t size, std::size_t alignment, CUdeviceptr start, unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr address, std::size_t size);
CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t size, const CUmemAllocationProp* properties, unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuMemMap(CUdeviceptr address, std::size_t size, std::size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr address, std::size_t size);
CUresult cuMemSetAccess(CUdeviceptr address, std::size_t size, const CUmemAccessDesc* descriptions, std::size_t count);
CUresult cuMemGetAllocationGranularity(std::size_t* granularity, const CUmemAllocationProp* properties,
                                       CUmemAllocationGranularity_flags option);
CUresult cuGetErrorString(CUresult error, const char** text);
}
