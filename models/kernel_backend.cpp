#include "models/kernel_backend.h"

#include <stdexcept>
#include <string>

#include "models/cpu_kernel_backend.h"
#ifdef FERRY_HAVE_CUDA
#include "models/cuda_kernel_backend.h"
#endif

namespace ferry::ops {

namespace {
[[noreturn]] void no_bf16_matmuls() {
  throw std::logic_error("this device's kernels take no bf16 matmuls (sizes().matmul_takes_bf16() is false)");
}
}  // namespace

void KernelBackend::matmul_forward_bf16(void*, const void*, const void*, const void*, std::int64_t, std::int64_t, std::int64_t,
                                        WeightLayout, void*) {
  no_bf16_matmuls();
}

void KernelBackend::matmul_backward_bf16(void*, float*, float*, const void*, const void*, const void*, std::int64_t, std::int64_t,
                                         std::int64_t, WeightLayout, void*) {
  no_bf16_matmuls();
}

void KernelBackend::lm_head_logits_bf16(float*, std::int64_t, const void*, const void*, std::int64_t, std::int64_t, std::int64_t, void*) {
  no_bf16_matmuls();
}

void KernelBackend::lm_head_backward_bf16(float*, bool, float*, const void*, std::int64_t, const void*, const void*, std::int64_t,
                                          std::int64_t, std::int64_t, std::int64_t, std::int64_t, void*) {
  no_bf16_matmuls();
}

KernelBackend& kernel_backend(Device& device) {
  return device.attachment<KernelBackend>([&]() -> std::unique_ptr<KernelBackend> {
#ifdef FERRY_HAVE_CUDA
    if (device.kind() == DeviceKind::cuda) return make_cuda_kernel_backend(device);
#endif
    return std::make_unique<CpuKernelBackend>(kernel_sizes(DeviceKind::cpu));
  });
}

void stand_in_for(Device& meta, DeviceKind kind) {
  if (meta.kind() != DeviceKind::meta) {
    throw std::logic_error("only a meta device stands in for another kind (this one is " + std::string(device_kind_name(meta.kind())) + ")");
  }
  const KernelSizes& sizes = kernel_sizes(kind);
  // meta never computes: the cpu backend only answers its size questions, here with `kind`'s sizes.
  const KernelBackend& backend = meta.attachment<KernelBackend>([&]() -> std::unique_ptr<KernelBackend> {
    return std::make_unique<CpuKernelBackend>(sizes);
  });
  if (&backend.sizes() != &sizes) {
    throw std::logic_error("this meta device already allocates as another kind; stand_in_for must come before its first op");
  }
}

}  // namespace ferry::ops
