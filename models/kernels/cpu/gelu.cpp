#include "models/kernels/cpu/gelu.h"

#include "models/kernels/cpu/fast_math.h"

namespace ferry::cpu {
namespace {
constexpr double kSqrtTwoOverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;
}  // namespace

template <typename Real>
void gelu_forward(Real* out, const Real* inp, std::int64_t count) {
  const Real a = static_cast<Real>(kSqrtTwoOverPi);
  const Real c = static_cast<Real>(kCubic);
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < count; ++i) {
    const Real x = inp[i];
    out[i] = Real(0.5) * x * (Real(1) + tanh_vectorizable(a * (x + c * x * x * x)));
  }
}

template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, std::int64_t count) {
  const Real a = static_cast<Real>(kSqrtTwoOverPi);
  const Real c = static_cast<Real>(kCubic);
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < count; ++i) {
    const Real x = inp[i];
    const Real tanh_out = tanh_vectorizable(a * (x + c * x * x * x));
    const Real sech_squared = Real(1) - tanh_out * tanh_out;
    const Real local = Real(0.5) * (Real(1) + tanh_out) + Real(0.5) * x * sech_squared * a * (Real(1) + Real(3) * c * x * x);
    dinp[i] += local * dout[i];
  }
}

template void gelu_forward<float>(float*, const float*, std::int64_t);
template void gelu_forward<double>(double*, const double*, std::int64_t);
template void gelu_backward<float>(float*, const float*, const float*, std::int64_t);
template void gelu_backward<double>(double*, const double*, const double*, std::int64_t);

}  // namespace ferry::cpu
