// LayerNorm on the GPU, twin of models/kernels/cpu/layernorm.h: forward saves mean and rstd per row;
// backward accumulates into dinp, dweight and dbias. One warp per row; the weight and bias gradients
// sum rows in a fixed order (no atomics), so results repeat bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ferry::cuda {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       std::int64_t rows, std::int64_t channels, cudaStream_t stream);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                        const float* mean, const float* rstd, std::int64_t rows, std::int64_t channels, cudaStream_t stream);

}  // namespace ferry::cuda
