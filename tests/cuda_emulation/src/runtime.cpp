// The emulated CUDA runtime API (cuda_emulation/runtime_api.h): one device, memory from DeviceMemory,
// copies and fills that run when they are issued, after what their stream deferred (streams and events:
// streams_and_events.cpp).
#include <cstdio>
#include <cstring>

#include "cuda_emulation/runtime_api.h"
#include "cuda_emulation/stream_work.h"
#include "device_memory.h"

namespace {

using ferry::cuda_emulation::DeviceMemory;
using ferry::cuda_emulation::finish_deferred_work;

// The runtime's per-thread "last error", as cudaGetLastError reports and clears it.
thread_local cudaError_t last_error = cudaSuccess;

cudaError_t report(cudaError_t error) {
  if (error != cudaSuccess) last_error = error;
  return error;
}

// Copies must stay inside device allocations on their device side (the runtime refuses other pointers).
bool valid_copy(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind kind) {
  const DeviceMemory& memory = DeviceMemory::instance();
  const bool to_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool from_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (to_device && !memory.contains(destination, bytes)) return false;
  if (from_device && !memory.contains(source, bytes)) return false;
  return kind != cudaMemcpyHostToHost || (destination != nullptr && source != nullptr);
}

}  // namespace

namespace ferry::cuda_emulation {
// For grid_launch.cpp: a refused launch configuration is reported like the runtime's.
void set_last_error(cudaError_t error) { report(error); }
}  // namespace ferry::cuda_emulation

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : report(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  if (device != 0) return report(cudaErrorInvalidDevice);
  *properties = cudaDeviceProp{};
  std::snprintf(properties->name, sizeof properties->name, "ferry host emulation of the CUDA execution model");
  properties->totalGlobalMem = DeviceMemory::kTotalBytes;
  properties->sharedMemPerBlock = 48 * 1024;
  properties->warpSize = 32;
  properties->maxThreadsPerBlock = 1024;
  properties->maxThreadsDim[0] = properties->maxThreadsDim[1] = 1024;
  properties->maxThreadsDim[2] = 64;
  properties->maxGridSize[0] = 0x7fffffff;
  properties->maxGridSize[1] = properties->maxGridSize[2] = 65535;
  properties->multiProcessorCount = 1;
  properties->major = 9;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  const cudaError_t error = last_error;
  last_error = cudaSuccess;
  return error;
}
cudaError_t cudaPeekAtLastError() { return last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

cudaError_t cudaMalloc(void** pointer, std::size_t bytes) {
  if (pointer == nullptr) return report(cudaErrorInvalidValue);
  *pointer = nullptr;
  if (bytes == 0) return cudaSuccess;
  *pointer = DeviceMemory::instance().allocate(bytes);
  return *pointer != nullptr ? cudaSuccess : report(cudaErrorMemoryAllocation);
}
cudaError_t cudaFree(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;
  ferry::cuda_emulation::finish_all_deferred_work();  // cudaFree synchronizes the device
  return DeviceMemory::instance().free(pointer) ? cudaSuccess : report(cudaErrorInvalidValue);
}
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  *total_bytes = DeviceMemory::kTotalBytes;
  *free_bytes = DeviceMemory::kTotalBytes - DeviceMemory::instance().used_bytes();
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(destination, source, bytes, kind, nullptr);
}
cudaError_t cudaMemcpyAsync(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  finish_deferred_work(stream);
  if (bytes == 0) return cudaSuccess;
  if (!valid_copy(destination, source, bytes, kind)) return report(cudaErrorInvalidValue);
  std::memmove(destination, source, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2D(void* destination, std::size_t destination_pitch, const void* source, std::size_t source_pitch,
                         std::size_t width_bytes, std::size_t rows, cudaMemcpyKind kind) {
  return cudaMemcpy2DAsync(destination, destination_pitch, source, source_pitch, width_bytes, rows, kind, nullptr);
}
cudaError_t cudaMemcpy2DAsync(void* destination, std::size_t destination_pitch, const void* source, std::size_t source_pitch,
                              std::size_t width_bytes, std::size_t rows, cudaMemcpyKind kind, cudaStream_t stream) {
  finish_deferred_work(stream);
  if (width_bytes == 0 || rows == 0) return cudaSuccess;
  if (width_bytes > destination_pitch || width_bytes > source_pitch) return report(cudaErrorInvalidValue);
  // Each side's whole span (rows - 1 pitches and one width) must be inside device memory where it is on the device.
  const std::size_t destination_span = (rows - 1) * destination_pitch + width_bytes, source_span = (rows - 1) * source_pitch + width_bytes;
  const DeviceMemory& memory = DeviceMemory::instance();
  if ((kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) && !memory.contains(destination, destination_span)) {
    return report(cudaErrorInvalidValue);
  }
  if ((kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) && !memory.contains(source, source_span)) {
    return report(cudaErrorInvalidValue);
  }
  for (std::size_t row = 0; row < rows; ++row) {
    std::memmove(static_cast<char*>(destination) + row * destination_pitch, static_cast<const char*>(source) + row * source_pitch, width_bytes);
  }
  return cudaSuccess;
}
cudaError_t cudaMemset(void* destination, int value, std::size_t bytes) { return cudaMemsetAsync(destination, value, bytes, nullptr); }
cudaError_t cudaMemsetAsync(void* destination, int value, std::size_t bytes, cudaStream_t stream) {
  finish_deferred_work(stream);
  if (bytes == 0) return cudaSuccess;
  if (!DeviceMemory::instance().contains(destination, bytes)) return report(cudaErrorInvalidValue);
  std::memset(destination, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaHostRegister(void* pointer, std::size_t, unsigned int) { return pointer != nullptr ? cudaSuccess : report(cudaErrorInvalidValue); }
cudaError_t cudaHostUnregister(void* pointer) { return pointer != nullptr ? cudaSuccess : report(cudaErrorInvalidValue); }
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* pointer) {
  if (attributes == nullptr) return report(cudaErrorInvalidValue);
  const bool device = pointer != nullptr && DeviceMemory::instance().contains(pointer, 1);
  *attributes = cudaPointerAttributes{device ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered, device ? 0 : -1,
                                      device ? const_cast<void*>(pointer) : nullptr, device ? nullptr : const_cast<void*>(pointer)};
  return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char*, void** function, unsigned int, unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  *function = nullptr;
  if (status != nullptr) *status = cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}
