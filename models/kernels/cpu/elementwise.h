// Element-wise host kernels of the residual stream: residual add and dropout (mask drawn from a
// counter-based key, so backward and recompute regenerate it instead of storing it).
#pragma once

#include <cstdint>

#include "models/kernels/cpu/counter_random.h"

namespace ferry::cpu {

// out = a + b (out may alias a or b).
template <typename Real>
void residual_forward(Real* out, const Real* a, const Real* b, std::int64_t count);

// out = inp * mask / (1 - p); out may alias inp. p = 0 copies.
template <typename Real>
void dropout_forward(Real* out, const Real* inp, std::int64_t count, float probability, RandomKey key);

// dinp += dout * mask / (1 - p).
template <typename Real>
void dropout_backward(Real* dinp, const Real* dout, std::int64_t count, float probability, RandomKey key);

}  // namespace ferry::cpu
