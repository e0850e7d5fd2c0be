// LayerNorm over the last dimension: out = (x - mean) * rstd * weight + bias, with eps 1e-5 as GPT-2.
// Forward saves mean and rstd per row for backward; backward accumulates into dinp, dweight, dbias.
#pragma once

#include <cstdint>

namespace ferry::cpu {

inline constexpr double kLayerNormEpsilon = 1e-5;

template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight, const Real* bias,
                       std::int64_t rows, std::int64_t channels);

template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp, const Real* weight,
                        const Real* mean, const Real* rstd, std::int64_t rows, std::int64_t channels);

}  // namespace ferry::cpu
