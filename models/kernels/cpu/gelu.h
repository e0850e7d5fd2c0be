// GELU with GPT-2's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Backward accumulates into dinp.
#pragma once

#include <cstdint>

namespace ferry::cpu {

template <typename Real>
void gelu_forward(Real* out, const Real* inp, std::int64_t count);

template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, std::int64_t count);

}  // namespace ferry::cpu
