// The GPT input encoder: out[b, t] = wte[token[b, t]] + wpe[t]. Backward accumulates into dwte and
// dwpe, channel blocks in parallel so repeated tokens never race and the sums are deterministic.
#pragma once

#include <cstdint>

namespace ferry::cpu {

template <typename Real>
void encoder_forward(Real* out, const std::int32_t* tokens, const Real* wte, const Real* wpe, std::int64_t batch,
                     std::int64_t sequence, std::int64_t channels);

// The same with the token table in bf16 (bit patterns): only the rows the tokens use are converted,
// so a bf16 model never holds an f32 copy of its whole vocabulary table.
void encoder_forward_bf16_table(float* out, const std::int32_t* tokens, const std::uint16_t* wte, const float* wpe,
                                std::int64_t batch, std::int64_t sequence, std::int64_t channels);

// dwte may be null: only dwpe accumulates (the token rows go elsewhere, e.g. to a gradient sink).
template <typename Real>
void encoder_backward(Real* dwte, Real* dwpe, const Real* dout, const std::int32_t* tokens, std::int64_t batch,
                      std::int64_t sequence, std::int64_t channels);

// The token table's gradient rows [first, first + count) only: table_rows[token - first] += dout[position]
// for every position whose token is in the range, positions in order (each element sums as in
// encoder_backward). A table's gradient built slice by slice this way equals encoder_backward's.
void encoder_backward_token_rows(float* table_rows, const float* dout, const std::int32_t* tokens, std::int64_t positions,
                                 std::int64_t channels, std::int64_t first, std::int64_t count);

}  // namespace ferry::cpu
