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

// One logit's gradient: the same expression wherever it is computed.
template <typename Real>
Real logit_gradient(Real logit, const SoftmaxRow& row, bool target, double dloss) {
  const double probability = std::exp(static_cast<double>(logit) - row.maximum) * row.inverse_sum;
  return static_cast<Real>((probability - (target ? 1.0 : 0.0)) * dloss);
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
                                    std::int64_t vocab, Real dloss, SoftmaxRow* softmax_rows) {
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < rows; ++row) {
    Real* values = logits + row * vocab;
    const RowStatistics statistics = row_statistics(values, vocab);
    const std::int32_t target = targets[row];
    losses[row] = static_cast<Real>(std::log(statistics.sum) + statistics.maximum - static_cast<double>(values[target]));
    const SoftmaxRow softmax{statistics.maximum, 1.0 / statistics.sum};
    if (softmax_rows != nullptr) softmax_rows[row] = softmax;
    for (std::int64_t i = 0; i < vocab; ++i) values[i] = logit_gradient(values[i], softmax, i == target, static_cast<double>(dloss));
  }
}

void cross_entropy_backward_slice(float* slice, const SoftmaxRow* softmax_rows, const std::int32_t* targets, std::int64_t rows,
                                  std::int64_t first, std::int64_t count, float dloss) {
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < rows; ++row) {
    float* values = slice + row * count;
    const std::int64_t target = targets[row] - first;  // outside [0, count) when the target is not in the slice
    for (std::int64_t j = 0; j < count; ++j) values[j] = logit_gradient(values[j], softmax_rows[row], j == target, static_cast<double>(dloss));
  }
}

template void cross_entropy_forward<float>(float*, const float*, const std::int32_t*, std::int64_t, std::int64_t);
template void cross_entropy_forward<double>(double*, const double*, const std::int32_t*, std::int64_t, std::int64_t);
template void cross_entropy_forward_backward<float>(float*, float*, const std::int32_t*, std::int64_t, std::int64_t, float, SoftmaxRow*);
template void cross_entropy_forward_backward<double>(double*, double*, const std::int32_t*, std::int64_t, std::int64_t, double,
                                                     SoftmaxRow*);

}  // namespace ferry::cpu
