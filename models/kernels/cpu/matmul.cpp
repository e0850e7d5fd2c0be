#include "models/kernels/cpu/matmul.h"

#include "models/kernels/cpu/blas.h"
#include "models/kernels/cpu/column_blocks.h"

namespace ferry::cpu {

template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, std::int64_t rows,
                    std::int64_t in_features, std::int64_t out_features, WeightLayout layout) {
  Real beta = 0;
  if (bias != nullptr) {
#pragma omp parallel for schedule(static)
    for (std::int64_t row = 0; row < rows; ++row) {
      Real* destination = out + row * out_features;
      for (std::int64_t o = 0; o < out_features; ++o) destination[o] = bias[o];
    }
    beta = 1;
  }
  if (layout == WeightLayout::in_out) {
    gemm(false, false, rows, out_features, in_features, Real(1), inp, in_features, weight, out_features, beta, out, out_features);
  } else {
    gemm(false, true, rows, out_features, in_features, Real(1), inp, in_features, weight, in_features, beta, out, out_features);
  }
}

template <typename Real>
void matmul_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp, const Real* weight,
                     std::int64_t rows, std::int64_t in_features, std::int64_t out_features, WeightLayout layout) {
  const bool in_out = layout == WeightLayout::in_out;
  if (dinp != nullptr) {
    if (in_out) {
      gemm(false, true, rows, in_features, out_features, Real(1), dout, out_features, weight, out_features, Real(0), dinp, in_features);
    } else {
      gemm(false, false, rows, in_features, out_features, Real(1), dout, out_features, weight, in_features, Real(0), dinp, in_features);
    }
  }
  if (dweight != nullptr) {
    if (in_out) {
      gemm(true, false, in_features, out_features, rows, Real(1), inp, in_features, dout, out_features, Real(1), dweight, out_features);
    } else {
      gemm(true, false, out_features, in_features, rows, Real(1), dout, out_features, inp, in_features, Real(1), dweight, in_features);
    }
  }
  if (dbias != nullptr) {
    for_each_column_block(out_features, [&](std::int64_t first, std::int64_t last) {
      Real sums[kColumnBlock] = {};
      for (std::int64_t row = 0; row < rows; ++row) {
        const Real* source = dout + row * out_features;
        for (std::int64_t o = first; o < last; ++o) sums[o - first] += source[o];
      }
      for (std::int64_t o = first; o < last; ++o) dbias[o] += sums[o - first];
    });
  }
}

template <typename Real>
void matmul_backward_weight_rows(Real* dweight_rows, const Real* dout, const Real* inp, std::int64_t rows, std::int64_t in_features,
                                 std::int64_t out_features, std::int64_t first, std::int64_t count) {
  gemm(true, false, count, out_features, rows, Real(1), inp + first, in_features, dout, out_features, Real(1), dweight_rows, out_features);
}

template <typename Real>
void matmul_forward_rows(Real* out, const Real* inp, const Real* weight_rows, const Real* bias, std::int64_t rows, std::int64_t in_features,
                         std::int64_t out_features, std::int64_t first, std::int64_t count, bool accumulate) {
  gemm(false, false, rows, out_features, count, Real(1), inp + first, in_features, weight_rows, out_features, accumulate ? Real(1) : Real(0),
       out, out_features);
  if (accumulate || bias == nullptr) return;
  for (std::int64_t row = 0; row < rows; ++row) {
    Real* destination = out + row * out_features;
    for (std::int64_t o = 0; o < out_features; ++o) destination[o] += bias[o];
  }
}

template <typename Real>
void matmul_backward_input_rows(Real* dinp, const Real* dout, const Real* weight_rows, std::int64_t rows, std::int64_t in_features,
                                std::int64_t out_features, std::int64_t first, std::int64_t count) {
  gemm(false, true, rows, count, out_features, Real(1), dout, out_features, weight_rows, out_features, Real(0), dinp + first, in_features);
}

#define FERRY_INSTANTIATE(Real)                                                                                     \
  template void matmul_forward<Real>(Real*, const Real*, const Real*, const Real*, std::int64_t, std::int64_t,    \
                                     std::int64_t, WeightLayout);                                                  \
  template void matmul_backward<Real>(Real*, Real*, Real*, const Real*, const Real*, const Real*, std::int64_t,   \
                                      std::int64_t, std::int64_t, WeightLayout);                                  \
  template void matmul_backward_weight_rows<Real>(Real*, const Real*, const Real*, std::int64_t, std::int64_t,     \
                                                  std::int64_t, std::int64_t, std::int64_t);                      \
  template void matmul_forward_rows<Real>(Real*, const Real*, const Real*, const Real*, std::int64_t, std::int64_t, \
                                          std::int64_t, std::int64_t, std::int64_t, bool);                        \
  template void matmul_backward_input_rows<Real>(Real*, const Real*, const Real*, std::int64_t, std::int64_t,      \
                                                 std::int64_t, std::int64_t, std::int64_t);
FERRY_INSTANTIATE(float)
FERRY_INSTANTIATE(double)
#undef FERRY_INSTANTIATE

}  // namespace ferry::cpu
