#include "models/kernel_backend.h"

#include "models/cpu_kernel_backend.h"
#ifdef FERRY_HAVE_CUDA
#include "models/cuda_kernel_backend.h"
#endif

namespace ferry::ops {

KernelBackend& kernel_backend(Device& device) {
  return device.attachment<KernelBackend>([&]() -> std::unique_ptr<KernelBackend> {
#ifdef FERRY_HAVE_CUDA
    if (device.kind() == DeviceKind::cuda) return make_cuda_kernel_backend(device);
#endif
    return std::make_unique<CpuKernelBackend>();
  });
}

}  // namespace ferry::ops
