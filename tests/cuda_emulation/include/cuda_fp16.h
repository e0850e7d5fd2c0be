// Emulated build: stands in for <cuda_fp16.h> (the f16 type and conversions the kernels use).
#pragma once

#include "cuda_emulation/half_types.h"
