// Emulated build: stands in for <cublasLt.h>: the subset of cuBLASLt models/kernels/cuda/matmul.cu
// calls, with a host reference GEMM behind the same handles, descriptors and layouts.
#pragma once

#include <cuda_runtime.h>

#include "cuda_emulation/cublaslt_api.h"
