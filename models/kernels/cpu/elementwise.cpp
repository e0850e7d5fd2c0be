#include "models/kernels/cpu/elementwise.h"

namespace ferry::cpu {

template <typename Real>
void residual_forward(Real* out, const Real* a, const Real* b, std::int64_t count) {
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

template <typename Real>
void dropout_forward(Real* out, const Real* inp, std::int64_t count, float probability, RandomKey key) {
  const Real keep_scale = Real(1) / (Real(1) - static_cast<Real>(probability));
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < count; ++i) {
    out[i] = probability > 0 ? (dropout_keeps(key, static_cast<std::uint64_t>(i), probability) ? inp[i] * keep_scale : Real(0))
                             : inp[i];
  }
}

template <typename Real>
void dropout_backward(Real* dinp, const Real* dout, std::int64_t count, float probability, RandomKey key) {
  const Real keep_scale = Real(1) / (Real(1) - static_cast<Real>(probability));
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < count; ++i) {
    dinp[i] += probability > 0 ? (dropout_keeps(key, static_cast<std::uint64_t>(i), probability) ? dout[i] * keep_scale : Real(0))
                               : dout[i];
  }
}

#define FERRY_INSTANTIATE(Real)                                                                        \
  template void residual_forward<Real>(Real*, const Real*, const Real*, std::int64_t);                \
  template void dropout_forward<Real>(Real*, const Real*, std::int64_t, float, RandomKey);            \
  template void dropout_backward<Real>(Real*, const Real*, std::int64_t, float, RandomKey);
FERRY_INSTANTIATE(float)
FERRY_INSTANTIATE(double)
#undef FERRY_INSTANTIATE

}  // namespace ferry::cpu
