// The GPT input encoder: out[b, t] = wte[token[b, t]] + wpe[t]. Backward accumulates into dwte and
// dwpe, channel blocks in parallel so repeated tokens never race and the sums are deterministic.
#pragma once

#include <cstdint>

namespace ferry::cpu {

template <typename Real>
void encoder_forward(Real* out, const std::int32_t* tokens, const Real* wte, const Real* wpe, std::int64_t batch,
                     std::int64_t sequence, std::int64_t channels);

template <typename Real>
void encoder_backward(Real* dwte, Real* dwpe, const Real* dout, const std::int32_t* tokens, std::int64_t batch,
                      std::int64_t sequence, std::int64_t channels);

}  // namespace ferry::cpu
