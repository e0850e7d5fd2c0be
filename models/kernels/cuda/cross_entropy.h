// Softmax cross-entropy on the GPU, twin of models/kernels/cpu/cross_entropy.h: one block per token row;
// the training variant turns the logits into their gradient in place ((softmax - onehot) * dloss), so
// the LM head never holds a second [rows, vocab] buffer; the rows' softmax statistics can be kept and a
// slice of the vocabulary's gradient recomputed from them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "models/kernels/cpu/cross_entropy.h"

namespace ferry::cuda {

using cpu::SoftmaxRow;

// losses[row] = logsumexp(logits[row]) - logits[row, targets[row]]; rows row_stride apart (0: vocab).
void cross_entropy_forward(float* losses, const float* logits, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                           cudaStream_t stream, std::int64_t row_stride = 0);
// As forward, then logits[row] becomes (softmax(logits[row]) - onehot(target)) * dloss; with
// `softmax_rows` (device memory), each row's statistics are kept there.
void cross_entropy_forward_backward(float* logits, float* losses, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                                    float dloss, cudaStream_t stream, SoftmaxRow* softmax_rows = nullptr, std::int64_t row_stride = 0);
// `slice` [rows, count] holds columns [first, first + count) of the logits: they become their gradient
// from the saved statistics, as cpu::cross_entropy_backward_slice.
void cross_entropy_backward_slice(float* slice, const SoftmaxRow* softmax_rows, const std::int32_t* targets, std::int64_t rows,
                                  std::int64_t first, std::int64_t count, float dloss, cudaStream_t stream);

}  // namespace ferry::cuda
