#include "allocator/cuda_check.h"

namespace ferry {

void cuda_check(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
                  cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

void cuda_driver_check(CUresult status, const char* call, const char* file, int line) {
  if (status == CUDA_SUCCESS) return;
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed with CUresult " +
                  std::to_string(static_cast<int>(status)));
}

bool cuda_device_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return false;
  }
  return count > 0;
}

namespace {
template <typename Function>
void load_entry_point(const char* symbol, Function& function) {
  void* pointer = nullptr;
  cudaDriverEntryPointQueryResult result{};
  FERRY_CUDA_CHECK(cudaGetDriverEntryPointByVersion(symbol, &pointer, 12000, cudaEnableDefault, &result));
  if (result != cudaDriverEntryPointSuccess || pointer == nullptr) {
    throw CudaError(std::string("the CUDA driver does not provide ") + symbol +
                    "; expandable segments need a driver for CUDA 12 or newer");
  }
  function = reinterpret_cast<Function>(pointer);
}
}  // namespace

CudaDriverApi CudaDriverApi::load() {
  CudaDriverApi api;
  load_entry_point("cuMemAddressReserve", api.mem_address_reserve);
  load_entry_point("cuMemAddressFree", api.mem_address_free);
  load_entry_point("cuMemCreate", api.mem_create);
  load_entry_point("cuMemRelease", api.mem_release);
  load_entry_point("cuMemMap", api.mem_map);
  load_entry_point("cuMemUnmap", api.mem_unmap);
  load_entry_point("cuMemSetAccess", api.mem_set_access);
  load_entry_point("cuMemGetAllocationGranularity", api.mem_get_allocation_granularity);
  load_entry_point("cuGetErrorString", api.get_error_string);
  return api;
}

}  // namespace ferry
