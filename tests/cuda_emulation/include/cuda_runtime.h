// Emulated build: stands in for the CUDA toolkit's <cuda_runtime.h> (this folder comes first on the
// include path): the runtime API subset ferry uses, the device-side execution model (threadIdx,
// __syncthreads, warp shuffles...) and the kernel launcher the shared launch helper calls.
#pragma once

#include "cuda_emulation/runtime_api.h"
#include "cuda_emulation/device_functions.h"
#include "cuda_emulation/grid_launch.h"
