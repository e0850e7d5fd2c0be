#include "models/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>

namespace ferry::cpu {
namespace {

template <typename Real>
Real dot(const Real* a, const Real* b, std::int64_t count) {
  Real sum = 0;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t i = 0; i < count; ++i) sum += a[i] * b[i];
  return sum;
}

template <typename Real>
void add_scaled(Real* destination, const Real* source, Real scale, std::int64_t count) {
#pragma omp simd
  for (std::int64_t i = 0; i < count; ++i) destination[i] += scale * source[i];
}

}  // namespace

template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, AttentionShape shape, float dropout, RandomKey key) {
  const auto [B, T, C, NH] = shape;
  const std::int64_t hs = C / NH;
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(hs));
  const Real keep_scale = dropout > 0 ? Real(1) / (Real(1) - static_cast<Real>(dropout)) : Real(1);
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < NH; ++h) {
      for (std::int64_t t = 0; t < T; ++t) {
        const Real* q = qkv + (b * T + t) * 3 * C + h * hs;
        Real* probabilities = att + ((b * NH + h) * T + t) * T;
        Real maximum = -INFINITY;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          const Real* k = qkv + (b * T + t2) * 3 * C + C + h * hs;
          probabilities[t2] = dot(q, k, hs) * scale;
          maximum = std::max(maximum, probabilities[t2]);
        }
        Real sum = 0;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          probabilities[t2] = std::exp(probabilities[t2] - maximum);
          sum += probabilities[t2];
        }
        const Real inverse = Real(1) / sum;
        for (std::int64_t t2 = 0; t2 < T; ++t2) probabilities[t2] = t2 <= t ? probabilities[t2] * inverse : Real(0);
        Real* o = out + (b * T + t) * C + h * hs;
        std::fill(o, o + hs, Real(0));
        const std::uint64_t row_index = static_cast<std::uint64_t>(((b * NH + h) * T + t) * T);
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          Real p = probabilities[t2];
          if (dropout > 0) p = dropout_keeps(key, row_index + static_cast<std::uint64_t>(t2), dropout) ? p * keep_scale : Real(0);
          add_scaled(o, qkv + (b * T + t2) * 3 * C + 2 * C + h * hs, p, hs);
        }
      }
    }
  }
}

template <typename Real>
void attention_backward(Real* dqkv, Real* scratch, const Real* dout, const Real* qkv, const Real* att,
                        AttentionShape shape, float dropout, RandomKey key) {
  const auto [B, T, C, NH] = shape;
  const std::int64_t hs = C / NH;
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(hs));
  const Real keep_scale = dropout > 0 ? Real(1) / (Real(1) - static_cast<Real>(dropout)) : Real(1);
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < NH; ++h) {
      Real* datt = scratch + (b * NH + h) * T;
      for (std::int64_t t = 0; t < T; ++t) {
        Real* row = dqkv + (b * T + t) * 3 * C + h * hs;
        std::fill(row, row + hs, Real(0));
        std::fill(row + C, row + C + hs, Real(0));
        std::fill(row + 2 * C, row + 2 * C + hs, Real(0));
      }
      for (std::int64_t t = 0; t < T; ++t) {
        const Real* probabilities = att + ((b * NH + h) * T + t) * T;
        const Real* dy = dout + (b * T + t) * C + h * hs;
        const std::uint64_t row_index = static_cast<std::uint64_t>(((b * NH + h) * T + t) * T);
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          Real mask = 1;
          if (dropout > 0) mask = dropout_keeps(key, row_index + static_cast<std::uint64_t>(t2), dropout) ? keep_scale : Real(0);
          const Real* v = qkv + (b * T + t2) * 3 * C + 2 * C + h * hs;
          datt[t2] = dot(dy, v, hs) * mask;
          add_scaled(dqkv + (b * T + t2) * 3 * C + 2 * C + h * hs, dy, probabilities[t2] * mask, hs);
        }
        Real weighted = 0;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) weighted += probabilities[t2] * datt[t2];
        const Real* q = qkv + (b * T + t) * 3 * C + h * hs;
        Real* dq = dqkv + (b * T + t) * 3 * C + h * hs;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          const Real dscore = probabilities[t2] * (datt[t2] - weighted) * scale;
          add_scaled(dq, qkv + (b * T + t2) * 3 * C + C + h * hs, dscore, hs);
          add_scaled(dqkv + (b * T + t2) * 3 * C + C + h * hs, q, dscore, hs);
        }
      }
    }
  }
}

#define FERRY_INSTANTIATE(Real)                                                                            \
  template void attention_forward<Real>(Real*, Real*, const Real*, AttentionShape, float, RandomKey);     \
  template void attention_backward<Real>(Real*, Real*, const Real*, const Real*, const Real*, AttentionShape, \
                                         float, RandomKey);
FERRY_INSTANTIATE(float)
FERRY_INSTANTIATE(double)
#undef FERRY_INSTANTIATE

}  // namespace ferry::cpu
