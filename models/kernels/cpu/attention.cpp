#include "models/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>

#include "models/kernels/cpu/blas.h"

namespace ferry::cpu {
namespace {

// One (batch, head): pointers into the shared tensors and the geometry to walk them.
template <typename Real>
struct Head {
  std::int64_t T, C, hs;
  std::int64_t qkv_offset;    // of q for this head in qkv (k at + C, v at + 2C); rows of 3C
  std::int64_t out_offset;    // of this head in out / dout; rows of C
  std::int64_t square_offset; // of this head's T x T block in att / scratch
  std::uint64_t mask_offset;  // first dropout index of this head
};

template <typename Real>
Head<Real> head(const AttentionShape& shape, std::int64_t b, std::int64_t h) {
  const auto [B, T, C, NH] = shape;
  const std::int64_t hs = C / NH;
  return {T, C, hs, b * T * 3 * C + h * hs, b * T * C + h * hs, (b * NH + h) * T * T,
          static_cast<std::uint64_t>((b * NH + h) * T * T)};
}

// destination = probabilities with the dropout mask applied (kept entries scaled by 1/(1-p)).
template <typename Real>
void apply_dropout(Real* destination, const Real* probabilities, std::int64_t count, float dropout, RandomKey key,
                   std::uint64_t offset) {
  const Real keep_scale = Real(1) / (Real(1) - static_cast<Real>(dropout));
  for (std::int64_t i = 0; i < count; ++i) {
    destination[i] = dropout_keeps(key, offset + static_cast<std::uint64_t>(i), dropout) ? probabilities[i] * keep_scale : Real(0);
  }
}

}  // namespace

template <typename Real>
void attention_forward(Real* out, Real* att, Real* scratch, const Real* qkv, AttentionShape shape, float dropout,
                       RandomKey key) {
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(shape.channels / shape.heads));
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t b = 0; b < shape.batch; ++b) {
    for (std::int64_t h = 0; h < shape.heads; ++h) {
      const Head<Real> at = head<Real>(shape, b, h);
      const std::int64_t T = at.T, C = at.C;
      const Real* q = qkv + at.qkv_offset;
      Real* probabilities = att + at.square_offset;
      // Scores for every (t, t2); the causal softmax below reads only t2 <= t.
      gemm(false, true, T, T, at.hs, scale, q, 3 * C, q + C, 3 * C, Real(0), probabilities, T);
      for (std::int64_t t = 0; t < T; ++t) {
        Real* row = probabilities + t * T;
        Real maximum = row[0];
        for (std::int64_t t2 = 1; t2 <= t; ++t2) maximum = std::max(maximum, row[t2]);
        Real sum = 0;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          row[t2] = std::exp(row[t2] - maximum);
          sum += row[t2];
        }
        const Real inverse = Real(1) / sum;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) row[t2] *= inverse;
        std::fill(row + t + 1, row + T, Real(0));
      }
      const Real* weights = probabilities;
      if (dropout > 0) {
        Real* dropped = scratch + at.square_offset;
        apply_dropout(dropped, probabilities, T * T, dropout, key, at.mask_offset);
        weights = dropped;
      }
      gemm(false, false, T, at.hs, T, Real(1), weights, T, q + 2 * C, 3 * C, Real(0), out + at.out_offset, C);
    }
  }
}

template <typename Real>
void attention_backward(Real* dqkv, Real* scratch, const Real* dout, const Real* qkv, const Real* att,
                        AttentionShape shape, float dropout, RandomKey key) {
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(shape.channels / shape.heads));
  const Real keep_scale = dropout > 0 ? Real(1) / (Real(1) - static_cast<Real>(dropout)) : Real(1);
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t b = 0; b < shape.batch; ++b) {
    for (std::int64_t h = 0; h < shape.heads; ++h) {
      const Head<Real> at = head<Real>(shape, b, h);
      const std::int64_t T = at.T, C = at.C, hs = at.hs;
      const Real* q = qkv + at.qkv_offset;
      const Real* probabilities = att + at.square_offset;
      const Real* dy = dout + at.out_offset;
      Real* dq = dqkv + at.qkv_offset;
      Real* square = scratch + at.square_offset;
      // dV = P_dropped^T dY.
      const Real* weights = probabilities;
      if (dropout > 0) {
        apply_dropout(square, probabilities, T * T, dropout, key, at.mask_offset);
        weights = square;
      }
      gemm(true, false, T, hs, T, Real(1), weights, T, dy, C, Real(0), dq + 2 * C, 3 * C);
      // dP = dY V^T (through the dropout mask), then the softmax backward row by row.
      gemm(false, true, T, T, hs, Real(1), dy, C, q + 2 * C, 3 * C, Real(0), square, T);
      for (std::int64_t t = 0; t < T; ++t) {
        Real* row = square + t * T;
        const Real* p = probabilities + t * T;
        if (dropout > 0) {
          for (std::int64_t t2 = 0; t2 <= t; ++t2) {
            if (!dropout_keeps(key, at.mask_offset + static_cast<std::uint64_t>(t * T + t2), dropout)) row[t2] = 0;
            else row[t2] *= keep_scale;
          }
        }
        Real weighted = 0;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) weighted += p[t2] * row[t2];
        for (std::int64_t t2 = 0; t2 <= t; ++t2) row[t2] = p[t2] * (row[t2] - weighted) * scale;
        std::fill(row + t + 1, row + T, Real(0));
      }
      // dQ = dS K, dK = dS^T Q.
      gemm(false, false, T, hs, T, Real(1), square, T, q + C, 3 * C, Real(0), dq, 3 * C);
      gemm(true, false, T, hs, T, Real(1), square, T, q, 3 * C, Real(0), dq + C, 3 * C);
    }
  }
}

#define FERRY_INSTANTIATE(Real)                                                                                 \
  template void attention_forward<Real>(Real*, Real*, Real*, const Real*, AttentionShape, float, RandomKey);   \
  template void attention_backward<Real>(Real*, Real*, const Real*, const Real*, const Real*, AttentionShape,  \
                                         float, RandomKey);
FERRY_INSTANTIATE(float)
FERRY_INSTANTIATE(double)
#undef FERRY_INSTANTIATE

}  // namespace ferry::cpu
