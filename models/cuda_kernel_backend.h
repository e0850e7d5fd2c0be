// The cuda device's kernel backend: models/kernels/cuda queued on the device's compute stream, matmuls
// through one cuBLASLt handle per device; host results (losses, norms) wait for the stream. Defined
// only in CUDA builds.
#pragma once

#include <memory>

#include "models/kernel_backend.h"

namespace ferry::ops {

// `device` must be a CudaDevice.
std::unique_ptr<KernelBackend> make_cuda_kernel_backend(Device& device);

}  // namespace ferry::ops
