// CUDA error checking (runtime and driver API) that reports file, line and the call, and access to
// the driver's virtual-memory functions through the runtime's entry points, so nothing links
// libcuda and CPU-only machines run every binary. Built only with CUDA.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace ferry {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void cuda_check(cudaError_t status, const char* call, const char* file, int line);
void cuda_driver_check(CUresult status, const char* call, const char* file, int line);

#define FERRY_CUDA_CHECK(call) ::ferry::cuda_check((call), #call, __FILE__, __LINE__)
#define FERRY_CU_CHECK(call) ::ferry::cuda_driver_check((call), #call, __FILE__, __LINE__)

// True when a CUDA driver and at least one GPU are present.
bool cuda_device_available();

// The driver functions the virtual-memory segment source needs.
struct CudaDriverApi {
  decltype(&::cuMemAddressReserve) mem_address_reserve = nullptr;
  decltype(&::cuMemAddressFree) mem_address_free = nullptr;
  decltype(&::cuMemCreate) mem_create = nullptr;
  decltype(&::cuMemRelease) mem_release = nullptr;
  decltype(&::cuMemMap) mem_map = nullptr;
  decltype(&::cuMemUnmap) mem_unmap = nullptr;
  decltype(&::cuMemSetAccess) mem_set_access = nullptr;
  decltype(&::cuMemGetAllocationGranularity) mem_get_allocation_granularity = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;

  // Loads the entry points; throws CudaError when the driver lacks one.
  static CudaDriverApi load();
};

}  // namespace ferry
