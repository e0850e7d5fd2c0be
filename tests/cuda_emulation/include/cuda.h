// Emulated build: the CUDA driver API's types that ferry's headers name (allocator/cuda_check.h), declared
// and never defined: the virtual-memory calls cannot be emulated, and nothing links them.
#pragma once

#include <cuda_runtime.h>

#include "cuda_emulation/driver_api.h"
