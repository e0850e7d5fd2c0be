// Emulated build: stands in for <cuda_bf16.h> (the bf16 type and conversions the kernels use).
#pragma once

#include "cuda_emulation/half_types.h"
