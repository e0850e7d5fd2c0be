#include "models/kernel_backend.h"

#include <stdexcept>

#include "models/cpu_kernel_backend.h"
#ifdef FERRY_HAVE_CUDA
#include "models/cuda_kernel_backend.h"
#endif

namespace ferry::ops {

void KernelBackend::matmul_forward_bf16(void*, const void*, const void*, const void*, std::int64_t, std::int64_t, std::int64_t,
                                        WeightLayout, void*) {
  throw std::logic_error("this device's kernels take no bf16 matmuls (matmul_takes_bf16() is false)");
}

KernelBackend& kernel_backend(Device& device) {
  return device.attachment<KernelBackend>([&]() -> std::unique_ptr<KernelBackend> {
#ifdef FERRY_HAVE_CUDA
    if (device.kind() == DeviceKind::cuda) return make_cuda_kernel_backend(device);
#endif
    return std::make_unique<CpuKernelBackend>();
  });
}

}  // namespace ferry::ops
