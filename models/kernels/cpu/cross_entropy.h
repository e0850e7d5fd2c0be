// Softmax cross-entropy over the vocabulary, one row per token. The training variant turns the logits
// into their gradient in place ((softmax - onehot) * dloss), so the head never holds a second
// [rows, vocab] buffer; it can also keep each row's softmax statistics, from which any slice of the
// vocabulary's gradient is recomputed later bit for bit (the tied table's gradient, slice by slice).
#pragma once

#include <cstdint>

namespace ferry::cpu {

// A row's softmax: its largest logit and 1 / sum(exp(logit - maximum)), as the gradient uses them.
struct SoftmaxRow {
  double maximum;
  double inverse_sum;
};
// Floats a SoftmaxRow takes in an f32 device buffer.
inline constexpr std::int64_t kSoftmaxRowFloats = 4;

// losses[row] = logsumexp(logits[row]) - logits[row, targets[row]]. Row r starts at logits + r * row_stride
// (0: vocab, packed; a longer stride leaves the columns past vocab untouched, as padding).
template <typename Real>
void cross_entropy_forward(Real* losses, const Real* logits, const std::int32_t* targets, std::int64_t rows,
                           std::int64_t vocab, std::int64_t row_stride = 0);

// As forward, then logits[row] becomes (softmax(logits[row]) - onehot(target)) * dloss; with
// `softmax_rows`, each row's statistics are kept there.
template <typename Real>
void cross_entropy_forward_backward(Real* logits, Real* losses, const std::int32_t* targets, std::int64_t rows,
                                    std::int64_t vocab, Real dloss, SoftmaxRow* softmax_rows = nullptr, std::int64_t row_stride = 0);

// `slice` [rows, count] holds the logits' columns [first, first + count): they become their gradient
// (softmax - onehot(target)) * dloss from each row's saved statistics, bit for bit the values
// cross_entropy_forward_backward gave those columns.
void cross_entropy_backward_slice(float* slice, const SoftmaxRow* softmax_rows, const std::int32_t* targets, std::int64_t rows,
                                  std::int64_t first, std::int64_t count, float dloss);

}  // namespace ferry::cpu
