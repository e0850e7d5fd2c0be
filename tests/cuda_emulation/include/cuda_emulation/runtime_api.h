// The subset of the CUDA runtime API ferry calls, implemented on the host for the emulated build
// (tests/cuda_emulation): device memory is heap memory of exactly the requested size (so AddressSanitizer
// sees overruns), and streams run every operation when it is issued, in issue order, except the work they
// defer (stream_work.h: the emulated NCCL's operations), which completes when its peers' parts arrive.
#pragma once

#include <cstddef>
#include <cstdint>

// ---- types and constants, with the real runtime's names and values -------------------------------

enum cudaError_t : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind : int {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaDriverEntryPointQueryResult : int {
  cudaDriverEntryPointSuccess = 0,
  cudaDriverEntryPointSymbolNotFound = 1,
  cudaDriverEntryPointVersionNotSufficent = 2,
};

enum cudaDataType_t : int {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_16BF = 14,
};
using cudaDataType = cudaDataType_t;

inline constexpr unsigned int cudaStreamDefault = 0x0;
inline constexpr unsigned int cudaStreamNonBlocking = 0x1;
inline constexpr unsigned int cudaEventDefault = 0x0;
inline constexpr unsigned int cudaEventDisableTiming = 0x2;
inline constexpr unsigned int cudaHostRegisterDefault = 0x0;
inline constexpr unsigned long long cudaEnableDefault = 0x0;

struct uint3 {
  unsigned int x, y, z;
};

struct dim3 {
  unsigned int x = 1, y = 1, z = 1;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

struct CUstream_st;  // an emulated stream: what it deferred (stream_work.h); everything else runs when issued
struct CUevent_st;   // an emulated event: ready once the work its stream deferred before it completed
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
// The legacy default stream's handle, as the runtime defines it ((cudaStream_t)0x1).
inline CUstream_st* const cudaStreamLegacy = reinterpret_cast<CUstream_st*>(0x1);

enum cudaMemoryType : int {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};

struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};

struct cudaDeviceProp {
  char name[256];
  std::size_t totalGlobalMem;
  std::size_t sharedMemPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int multiProcessorCount;
  int major;
  int minor;
};

// ---- the functions -------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);

cudaError_t cudaMalloc(void** pointer, std::size_t bytes);
// The runtime's typed overload (cuda_runtime.h has it for C++).
template <typename T>
cudaError_t cudaMalloc(T** pointer, std::size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(pointer), bytes);
}
cudaError_t cudaFree(void* pointer);
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes);
cudaError_t cudaMemcpy(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemcpy2D(void* destination, std::size_t destination_pitch, const void* source, std::size_t source_pitch,
                         std::size_t width_bytes, std::size_t rows, cudaMemcpyKind kind);
cudaError_t cudaMemcpy2DAsync(void* destination, std::size_t destination_pitch, const void* source, std::size_t source_pitch,
                              std::size_t width_bytes, std::size_t rows, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* destination, int value, std::size_t bytes);
cudaError_t cudaMemsetAsync(void* destination, int value, std::size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaHostRegister(void* pointer, std::size_t bytes, unsigned int flags);
cudaError_t cudaHostUnregister(void* pointer);
// Device memory (inside a cudaMalloc allocation) or unregistered host memory, as the runtime says.
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* pointer);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
// Milliseconds between two recorded events: the host's clock when each was seen ready (an emulated stream's
// work has run when it is issued, but for what it deferred); refused, as by CUDA, for an event made with
// cudaEventDisableTiming or not recorded, and cudaErrorNotReady while either waits for deferred work.
cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t start, cudaEvent_t end);

// The virtual-memory driver calls cannot be emulated: this reports every symbol as not found, so
// CudaDriverApi::load() throws and the expandable-segments source is unavailable (its test skips).
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function, unsigned int version,
                                             unsigned long long flags, cudaDriverEntryPointQueryResult* status);
