// The emulator's kernel launch, which models/kernels/cuda/kernel_launch.h calls in the emulated build:
// checks the configuration as the runtime does (cudaGetLastError reports a bad one), then runs every
// block once per schedule order and requires the same device memory, bit for bit, after each.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <stdexcept>

#include "cuda_emulation/runtime_api.h"

namespace ferry::cuda_emulation {

// A kernel that misbehaves under emulation: results that depend on the schedule order (a missing
// __syncthreads, a race), a deadlock, or a warp exchange with lanes that are not all there.
class EmulationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where a launch comes from, for the messages.
struct KernelSite {
  const char* kernel;
  const char* file;
  int line;
};

// One kernel argument's bytes: the device allocations a launch can reach are those that the pointers
// among its arguments' bytes (struct members included) point into.
struct ArgumentBytes {
  const void* data;
  std::size_t size;
};

// Runs `thread_body` (the kernel called with the launch's arguments) as every thread of the grid.
// Throws EmulationError; a configuration the runtime would refuse sets the last error instead.
void launch(const KernelSite& site, dim3 grid, dim3 block, std::size_t dynamic_shared_bytes, cudaStream_t stream,
            std::span<const ArgumentBytes> arguments, const std::function<void()>& thread_body);

}  // namespace ferry::cuda_emulation
