// The GPT input encoder on the GPU, twin of models/kernels/cpu/encoder.h: out[b, t] = wte[token] +
// wpe[t]; backward accumulates each gradient element in the CPU's order (positions in order), so the
// two devices agree bit for bit and repeated tokens never race.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ferry::cuda {

void encoder_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, std::int64_t batch, std::int64_t sequence,
                     std::int64_t channels, cudaStream_t stream);
// The token table in bf16 (bit patterns): only the rows the tokens use are read.
void encoder_forward_bf16_table(float* out, const std::int32_t* tokens, const std::uint16_t* wte, const float* wpe, std::int64_t batch,
                                std::int64_t sequence, std::int64_t channels, cudaStream_t stream);
// dwte may be null: only dwpe accumulates.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, std::int64_t batch, std::int64_t sequence,
                      std::int64_t channels, cudaStream_t stream);
// The token table's gradient rows [first, first + count) only, as cpu::encoder_backward_token_rows.
void encoder_backward_token_rows(float* table_rows, const float* dout, const std::int32_t* tokens, std::int64_t positions,
                                 std::int64_t channels, std::int64_t first, std::int64_t count, cudaStream_t stream);

}  // namespace ferry::cuda
