#include "models/kernels/cpu/layernorm.h"

#include <cmath>

#include "models/kernels/cpu/column_blocks.h"

namespace ferry::cpu {

template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight, const Real* bias,
                       std::int64_t rows, std::int64_t channels) {
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < rows; ++row) {
    const Real* x = inp + row * channels;
    Real sum = 0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t c = 0; c < channels; ++c) sum += x[c];
    const Real m = sum / static_cast<Real>(channels);
    Real variance = 0;
#pragma omp simd reduction(+ : variance)
    for (std::int64_t c = 0; c < channels; ++c) variance += (x[c] - m) * (x[c] - m);
    variance /= static_cast<Real>(channels);
    const Real s = Real(1) / std::sqrt(variance + static_cast<Real>(kLayerNormEpsilon));
    Real* y = out + row * channels;
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c) y[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[row] = m;
    rstd[row] = s;
  }
}

template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp, const Real* weight,
                        const Real* mean, const Real* rstd, std::int64_t rows, std::int64_t channels) {
  // Rows in parallel for dinp.
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < rows; ++row) {
    const Real* dy = dout + row * channels;
    const Real* x = inp + row * channels;
    const Real m = mean[row];
    const Real s = rstd[row];
    Real dnorm_mean = 0;
    Real dnorm_norm_mean = 0;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
    for (std::int64_t c = 0; c < channels; ++c) {
      const Real dnorm = weight[c] * dy[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * (x[c] - m) * s;
    }
    dnorm_mean /= static_cast<Real>(channels);
    dnorm_norm_mean /= static_cast<Real>(channels);
    Real* dx = dinp + row * channels;
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c) {
      const Real norm = (x[c] - m) * s;
      dx[c] += (weight[c] * dy[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
  // Channel blocks in parallel for dweight and dbias.
  for_each_column_block(channels, [&](std::int64_t first, std::int64_t last) {
    Real weight_sums[kColumnBlock] = {};
    Real bias_sums[kColumnBlock] = {};
    for (std::int64_t row = 0; row < rows; ++row) {
      const Real* dy = dout + row * channels;
      const Real* x = inp + row * channels;
      const Real m = mean[row];
      const Real s = rstd[row];
      for (std::int64_t c = first; c < last; ++c) {
        weight_sums[c - first] += (x[c] - m) * s * dy[c];
        bias_sums[c - first] += dy[c];
      }
    }
    for (std::int64_t c = first; c < last; ++c) {
      dweight[c] += weight_sums[c - first];
      dbias[c] += bias_sums[c - first];
    }
  });
}

#define FERRY_INSTANTIATE(Real)                                                                                        \
  template void layernorm_forward<Real>(Real*, Real*, Real*, const Real*, const Real*, const Real*, std::int64_t,    \
                                        std::int64_t);                                                                \
  template void layernorm_backward<Real>(Real*, Real*, Real*, const Real*, const Real*, const Real*, const Real*,    \
                                         const Real*, std::int64_t, std::int64_t);
FERRY_INSTANTIATE(float)
FERRY_INSTANTIATE(double)
#undef FERRY_INSTANTIATE

}  // namespace ferry::cpu
