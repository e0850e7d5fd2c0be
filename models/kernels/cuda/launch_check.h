// Kernel-launch checking for the cuda kernels: FERRY_LAUNCH_KERNEL (kernel_launch.h) checks every launch
// so a bad configuration (too many threads, too much shared memory) fails at the launch with file and
// line, not at the next synchronization; FERRY_CUDA_LAUNCH_CHECK() does the same after any other call.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "allocator/cuda_check.h"

#define FERRY_CUDA_LAUNCH_CHECK() ::ferry::cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

namespace ferry::cuda {

// Blocks of `threads` that cover `count` items.
inline unsigned int blocks_for(std::int64_t count, int threads) {
  return static_cast<unsigned int>((count + threads - 1) / threads);
}

}  // namespace ferry::cuda
