// Element-wise cuda kernels, twins of models/kernels/cpu/{elementwise,gelu}.h and of the dtype
// conversions: residual add, dropout (the same counter-based mask as the CPU's, bit for bit), GPT-2's
// tanh GELU, and f32 <-> bf16/f16 rounding. Each launcher takes the stream it runs on.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "models/kernels/cpu/counter_random.h"

namespace ferry::cuda {

// out = a + b (out may alias a or b).
void residual_forward(float* out, const float* a, const float* b, std::int64_t count, cudaStream_t stream);
// out = inp * mask / (1 - p); out may alias inp. p = 0 copies.
void dropout_forward(float* out, const float* inp, std::int64_t count, float probability, cpu::RandomKey key, cudaStream_t stream);
// dinp += dout * mask / (1 - p).
void dropout_backward(float* dinp, const float* dout, std::int64_t count, float probability, cpu::RandomKey key, cudaStream_t stream);
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); backward accumulates into dinp.
void gelu_forward(float* out, const float* inp, std::int64_t count, cudaStream_t stream);
void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t count, cudaStream_t stream);

// Round to nearest even, NaN kept NaN (as engine/core/dtype.h's host conversions); 16-bit values are
// bit patterns.
void convert_f32_to_bf16(const float* source, std::uint16_t* destination, std::int64_t count, cudaStream_t stream);
void convert_bf16_to_f32(const std::uint16_t* source, float* destination, std::int64_t count, cudaStream_t stream);
void convert_f32_to_f16(const float* source, std::uint16_t* destination, std::int64_t count, cudaStream_t stream);
void convert_f16_to_f32(const std::uint16_t* source, float* destination, std::int64_t count, cudaStream_t stream);

}  // namespace ferry::cuda
