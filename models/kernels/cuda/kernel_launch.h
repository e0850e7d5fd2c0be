// The one way ferry launches a cuda kernel, shared by the real build and the host emulation
// (tests/cuda_emulation): FERRY_LAUNCH_KERNEL runs <<<grid, block, shared, stream>>> and checks the launch,
// or hands the same kernel, sizes and arguments to the emulator, so the sizes under test are the real ones.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "models/kernels/cuda/launch_check.h"

// FERRY_LAUNCH_KERNEL(kernel, grid, block, shared_bytes, stream, arguments...): launches and checks
// (a bad configuration throws ferry::CudaError naming the kernel, file and line).
#define FERRY_LAUNCH_KERNEL(kernel, grid, block, shared_bytes, stream, ...) \
  ::ferry::cuda::launch_kernel(::ferry::cuda::KernelSite{#kernel, __FILE__, __LINE__}, kernel, grid, block, shared_bytes, stream, __VA_ARGS__)

// FERRY_SHARED(Type, name, Dimensions): a __shared__ variable, `__shared__ Type name Dimensions;`. Under
// emulation each block gets its own heap allocation of exactly its size, so AddressSanitizer sees overruns.
// FERRY_DYNAMIC_SHARED(Type, name): `extern __shared__ Type name[];`, the launch's shared_bytes (exactly
// that many bytes of heap under emulation).
#ifdef FERRY_CUDA_EMULATION
#define FERRY_SHARED(Type, name, Dimensions)        \
  using name##_shared_type = Type Dimensions;       \
  name##_shared_type& name = ::ferry::cuda_emulation::block_shared<name##_shared_type>([] {})
#define FERRY_DYNAMIC_SHARED(Type, name) Type* name = static_cast<Type*>(::ferry::cuda_emulation::dynamic_shared_memory())
#else
#define FERRY_SHARED(Type, name, Dimensions) __shared__ Type name Dimensions
#define FERRY_DYNAMIC_SHARED(Type, name) extern __shared__ Type name[]
#endif

namespace ferry::cuda {

struct KernelSite {
  const char* kernel;
  const char* file;
  int line;
};

template <typename... Parameters, typename... Arguments>
void launch_kernel(const KernelSite& site, void (*kernel)(Parameters...), dim3 grid, dim3 block, std::size_t shared_bytes,
                   cudaStream_t stream, const Arguments&... arguments) {
#ifdef FERRY_CUDA_EMULATION
  const ::ferry::cuda_emulation::ArgumentBytes argument_bytes[] = {{&arguments, sizeof(arguments)}...};
  ::ferry::cuda_emulation::launch(::ferry::cuda_emulation::KernelSite{site.kernel, site.file, site.line}, grid, block, shared_bytes,
                                  stream, argument_bytes, [&] { kernel(arguments...); });
#else
  kernel<<<grid, block, shared_bytes, stream>>>(arguments...);
#endif
  ::ferry::cuda_check(cudaGetLastError(), site.kernel, site.file, site.line);
}

}  // namespace ferry::cuda
