// Fused causal self-attention on the GPU (FlashAttention-2 tiling), twin of models/kernels/cpu/attention.h:
// f32 in memory, products in f32 or bf16; tiles of queries and keys meet in shared memory under an online softmax, so the T x T scores and probabilities
// never exist in memory; the forward saves only each query row's log-sum-exp, from which the backward recomputes them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "models/kernels/cpu/attention.h"

namespace ferry::cuda {

// How the kernels multiply: f32 on the CUDA cores, or bf16 on the tensor cores (q, k, v, dout, the
// probabilities and the score gradients rounded to bf16 where they enter a product, f32 sums), as autocast's
// scaled_dot_product_attention. Both keep f32 in memory and the same masks.
enum class AttentionProducts : std::uint8_t { f32, bf16 };

// The largest head size (channels / heads) the kernels take.
inline constexpr std::int64_t kFlashAttentionMaxHeadSize = 128;

// qkv [B, T, 3C] (q, k, v each C wide, heads of C / NH) -> out [B, T, C], as cpu::attention_forward.
// logsumexp [B, NH, T]: the natural log of each query row's softmax denominator over its scaled, causal,
// undropped scores, kept for the backward. dropout in [0, 1) drops probabilities with the CPU twin's mask
// (same key, same indices) and scales the kept ones by 1 / (1 - dropout).
// Throws std::invalid_argument for a shape or dropout the kernels do not take (head size above 128...).
void flash_attention_forward(float* out, float* logsumexp, const float* qkv, cpu::AttentionShape shape, float dropout,
                             cpu::RandomKey key, AttentionProducts products, cudaStream_t stream);

// Floats of the backward's row_dot_scratch: B * NH * T (one rowsum(dout * out) per query row).
std::int64_t flash_attention_scratch_elements(cpu::AttentionShape shape);

// Overwrites dqkv [B, T, 3C] with the gradient of qkv, given dout and the forward's out and logsumexp, the
// same dropout and key. Deterministic: every gradient element is summed by one thread in a fixed order.
void flash_attention_backward(float* dqkv, float* row_dot_scratch, const float* dout, const float* out, const float* qkv,
                              const float* logsumexp, cpu::AttentionShape shape, float dropout, cpu::RandomKey key,
                              AttentionProducts products, cudaStream_t stream);

}  // namespace ferry::cuda
