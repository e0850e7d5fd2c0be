// Matrix multiply forward and backward on the host through OpenBLAS: out = inp x W (+ bias) for
// Hugging Face Conv1D weights stored [in, out], or out = inp x W^T for weights stored [out, in]
// (the tied LM head). Backward overwrites dinp and accumulates into dweight and dbias.
#pragma once

#include <cstdint>

namespace ferry::cpu {

enum class WeightLayout : std::uint8_t { in_out, out_in };

// out[rows, out_features] = inp[rows, in_features] x W + bias (bias may be null).
template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, std::int64_t rows,
                    std::int64_t in_features, std::int64_t out_features, WeightLayout layout);

// dinp = dout x W^T (dinp may be null); dweight += inp^T x dout (in the weight's layout; dweight may be
// null); dbias += column sums of dout (dbias may be null). Zero Bubble's split backward calls it twice:
// once for dinp alone, later for dweight and dbias: the same results as one call.
template <typename Real>
void matmul_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp, const Real* weight,
                     std::int64_t rows, std::int64_t in_features, std::int64_t out_features, WeightLayout layout);

// Rows [first, first + count) of an in_out weight's gradient: dweight_rows[count, out_features] +=
// inp[:, first:first+count]^T x dout, read in place (strided). The same sums as matmul_backward's rows.
template <typename Real>
void matmul_backward_weight_rows(Real* dweight_rows, const Real* dout, const Real* inp, std::int64_t rows, std::int64_t in_features,
                                 std::int64_t out_features, std::int64_t first, std::int64_t count);

// The same products over rows [first, first + count) of an in_out weight, so a 16-bit weight can be
// converted to f32 one row slice at a time: out[rows, out_features] (= or +=) inp[:, first:first+count]
// x weight_rows (+ bias when it is the first slice, not accumulating), and dinp[:, first:first+count] =
// dout x weight_rows^T. inp and dinp are read and written in place (strided).
template <typename Real>
void matmul_forward_rows(Real* out, const Real* inp, const Real* weight_rows, const Real* bias, std::int64_t rows, std::int64_t in_features,
                         std::int64_t out_features, std::int64_t first, std::int64_t count, bool accumulate);
template <typename Real>
void matmul_backward_input_rows(Real* dinp, const Real* dout, const Real* weight_rows, std::int64_t rows, std::int64_t in_features,
                                std::int64_t out_features, std::int64_t first, std::int64_t count);

}  // namespace ferry::cpu
