// Softmax cross-entropy on the GPU, twin of models/kernels/cpu/cross_entropy.h: one block per token row;
// the training variant turns the logits into their gradient in place ((softmax - onehot) * dloss), so
// the LM head never holds a second [rows, vocab] buffer.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ferry::cuda {

// losses[row] = logsumexp(logits[row]) - logits[row, targets[row]].
void cross_entropy_forward(float* losses, const float* logits, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                           cudaStream_t stream);
// As forward, then logits[row] becomes (softmax(logits[row]) - onehot(target)) * dloss.
void cross_entropy_forward_backward(float* logits, float* losses, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                                    float dloss, cudaStream_t stream);

}  // namespace ferry::cuda
