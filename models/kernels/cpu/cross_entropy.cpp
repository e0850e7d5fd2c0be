#include "models/kernels/cpu/cross_entropy.h"

#include <cmath>

namespace ferry::cpu {
namespace {

struct RowStatistics {
  double maximum;
  double sum;  // of exp(logit - maximum)
};

template <typename Real>
RowStatistics row_statistics(const Real* row, std::int64_t vocab) {
  Real maximum = row[0];
  for (std::int64_t i = 1; i < vocab; ++i) maximum = row[i] > maximum ? row[i] : maximum;
  double sum = 0;
  for (std::int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i] - maximum));
  return {static_cast<double>(maximum), sum};
}

}  // namespace

template <typename Real>
void cross_entropy_forward(Real* losses, const Real* logits, const std::int32_t* targets, std::int64_t rows,
                           std::int64_t vocab) {
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < rows; ++row) {
    const Real* values = logits + row * vocab;
    const RowStatistics statistics = row_statistics(values, vocab);
    losses[row] = static_cast<Real>(std::log(statistics.sum) + statistics.maximum - static_cast<double>(values[targets[row]]));
  }
}

template <typename Real>
void cross_entropy_forward_backward(Real* logits, Real* losses, const std::int32_t* targets, std::int64_t rows,
                                    std::int64_t vocab, Real dloss) {
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < rows; ++row) {
    Real* values = logits + row * vocab;
    const RowStatistics statistics = row_statistics(values, vocab);
    const std::int32_t target = targets[row];
    losses[row] = static_cast<Real>(std::log(statistics.sum) + statistics.maximum - static_cast<double>(values[target]));
    const double inverse_sum = 1.0 / statistics.sum;
    for (std::int64_t i = 0; i < vocab; ++i) {
      const double probability = std::exp(static_cast<double>(values[i]) - statistics.maximum) * inverse_sum;
      values[i] = static_cast<Real>((probability - (i == target ? 1.0 : 0.0)) * static_cast<double>(dloss));
    }
  }
}

template void cross_entropy_forward<float>(float*, const float*, const std::int32_t*, std::int64_t, std::int64_t);
template void cross_entropy_forward<double>(double*, const double*, const std::int32_t*, std::int64_t, std::int64_t);
template void cross_entropy_forward_backward<float>(float*, float*, const std::int32_t*, std::int64_t, std::int64_t, float);
template void cross_entropy_forward_backward<double>(double*, double*, const std::int32_t*, std::int64_t, std::int64_t, double);

}  // namespace ferry::cpu
