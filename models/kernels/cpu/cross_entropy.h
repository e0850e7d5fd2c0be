// Softmax cross-entropy over the vocabulary, one row per token. The training variant turns the logits
// into their gradient in place ((softmax - onehot) * dloss), so the head never holds a second
// [rows, vocab] buffer.
#pragma once

#include <cstdint>

namespace ferry::cpu {

// losses[row] = logsumexp(logits[row]) - logits[row, targets[row]].
template <typename Real>
void cross_entropy_forward(Real* losses, const Real* logits, const std::int32_t* targets, std::int64_t rows,
                           std::int64_t vocab);

// As forward, then logits[row] becomes (softmax(logits[row]) - onehot(target)) * dloss.
template <typename Real>
void cross_entropy_forward_backward(Real* logits, Real* losses, const std::int32_t* targets, std::int64_t rows,
                                    std::int64_t vocab, Real dloss);

}  // namespace ferry::cpu
