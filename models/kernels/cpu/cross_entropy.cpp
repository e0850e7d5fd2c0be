#include "models/kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "models/kernels/cpu/fast_math.h"

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

// f32 rows: the same expressions with the vectorizable double exp (within about 1e-15 of libm's, so
// the statistics stay the GPU twin's to 1e-12), compiled for AVX-512 and AVX2 beside the baseline and
// chosen when the program loads: one machine always runs one of them, so a gradient recomputed later
// from the saved statistics is bit for bit the first.
[[gnu::target_clones("avx512f", "avx2", "default")]] RowStatistics row_statistics(const float* row, std::int64_t vocab) {
  float maximum = row[0];
#pragma omp simd reduction(max : maximum)
  for (std::int64_t i = 1; i < vocab; ++i) maximum = std::max(maximum, row[i]);
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t i = 0; i < vocab; ++i) sum += exp_vectorizable(static_cast<double>(row[i] - maximum));
  return {static_cast<double>(maximum), sum};
}

// Logits [0, count) of a row become their gradient (softmax - onehot(target)) * dloss: the same
// expression wherever it is computed.
template <typename Real>
void logit_gradients(Real* values, std::int64_t count, const SoftmaxRow& row, std::int64_t target, Real dloss) {
  for (std::int64_t j = 0; j < count; ++j) {
    const double probability = std::exp(static_cast<double>(values[j]) - row.maximum) * row.inverse_sum;
    values[j] = static_cast<Real>((probability - (j == target ? 1.0 : 0.0)) * static_cast<double>(dloss));
  }
}

[[gnu::target_clones("avx512f", "avx2", "default")]] void logit_gradients(float* values, std::int64_t count, const SoftmaxRow& row,
                                                                         std::int64_t target, float dloss) {
  const double maximum = row.maximum, inverse_sum = row.inverse_sum, scale = static_cast<double>(dloss);
#pragma omp simd
  for (std::int64_t j = 0; j < count; ++j) {
    const double probability = exp_vectorizable(static_cast<double>(values[j]) - maximum) * inverse_sum;
    values[j] = static_cast<float>((probability - (j == target ? 1.0 : 0.0)) * scale);
  }
}

}  // namespace

template <typename Real>
void cross_entropy_forward(Real* losses, const Real* logits, const std::int32_t* targets, std::int64_t rows,
                           std::int64_t vocab, std::int64_t row_stride) {
  const std::int64_t stride = row_stride > 0 ? row_stride : vocab;
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < rows; ++row) {
    const Real* values = logits + row * stride;
    const RowStatistics statistics = row_statistics(values, vocab);
    losses[row] = static_cast<Real>(std::log(statistics.sum) + statistics.maximum - static_cast<double>(values[targets[row]]));
  }
}

template <typename Real>
void cross_entropy_forward_backward(Real* logits, Real* losses, const std::int32_t* targets, std::int64_t rows,
                                    std::int64_t vocab, Real dloss, SoftmaxRow* softmax_rows, std::int64_t row_stride) {
  const std::int64_t stride = row_stride > 0 ? row_stride : vocab;
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < rows; ++row) {
    Real* values = logits + row * stride;
    const RowStatistics statistics = row_statistics(values, vocab);
    const std::int32_t target = targets[row];
    losses[row] = static_cast<Real>(std::log(statistics.sum) + statistics.maximum - static_cast<double>(values[target]));
    const SoftmaxRow softmax{statistics.maximum, 1.0 / statistics.sum};
    if (softmax_rows != nullptr) softmax_rows[row] = softmax;
    logit_gradients(values, vocab, softmax, target, dloss);
  }
}

void cross_entropy_backward_slice(float* slice, const SoftmaxRow* softmax_rows, const std::int32_t* targets, std::int64_t rows,
                                  std::int64_t first, std::int64_t count, float dloss) {
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < rows; ++row) {
    float* values = slice + row * count;
    const std::int64_t target = targets[row] - first;  // outside [0, count) when the target is not in the slice
    logit_gradients(values, count, softmax_rows[row], target, dloss);
  }
}

template void cross_entropy_forward<float>(float*, const float*, const std::int32_t*, std::int64_t, std::int64_t, std::int64_t);
template void cross_entropy_forward<double>(double*, const double*, const std::int32_t*, std::int64_t, std::int64_t, std::int64_t);
template void cross_entropy_forward_backward<float>(float*, float*, const std::int32_t*, std::int64_t, std::int64_t, float, SoftmaxRow*,
                                                    std::int64_t);
template void cross_entropy_forward_backward<double>(double*, double*, const std::int32_t*, std::int64_t, std::int64_t, double,
                                                     SoftmaxRow*, std::int64_t);

}  // namespace ferry::cpu
