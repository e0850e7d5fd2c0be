// What the flash attention kernels share (flash_attention.cu's fp32 kernels and flash_attention_bf16.cu's
// tensor-core ones): one call's sizes, where a (batch, head) lives, the dropout mask, the backward's recomputed
// entries, and the launches of the tensor-core kernels. Internal to models/kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "models/kernels/cpu/attention.h"

namespace ferry::cuda::flash {

// Sizes and constants of one call, passed by value to the kernels.
struct Problem {
  int sequence;       // T
  int channels;       // C
  int heads;          // NH
  int head_size;      // C / NH
  float scale;        // 1 / sqrt(head size), as the CPU twin computes it
  float dropout;      // probability of dropping an attention weight
  float keep_scale;   // 1 / (1 - dropout)
  cpu::RandomKey key;
};

// Where one (batch, head) lives in the tensors.
struct HeadView {
  std::int64_t qkv_offset;        // of its q in qkv and dqkv (k at + C, v at + 2C); rows of 3C
  std::int64_t out_offset;        // of its slice in out and dout; rows of C
  std::int64_t statistics_offset; // of its T rows in logsumexp and row_dot
  std::uint64_t mask_offset;      // its first dropout index: (b * NH + h) * T * T, as the CPU twin
};

__device__ inline HeadView head_view(const Problem& problem, int batch_head) {
  const std::int64_t batch = batch_head / problem.heads, head = batch_head % problem.heads;
  const std::int64_t sequence = problem.sequence, channels = problem.channels;
  return {batch * sequence * 3 * channels + head * problem.head_size, batch * sequence * channels + head * problem.head_size,
          batch_head * sequence, static_cast<std::uint64_t>(batch_head) * sequence * sequence};
}

// tile[r][d] = source[(first_row + r) * row_stride + d], zero past the sequence's end and past the head size.

// Max and sum over the `lanes` adjacent threads of a tile row (a butterfly: every lane gets the same bits).
template <int Lanes>
__device__ inline float row_max(float value) {
  for (int offset = Lanes / 2; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}
template <int Lanes>
__device__ inline float row_sum(float value) {
  for (int offset = Lanes / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// What dropout multiplies probability (query, key) by: 0 when dropped, 1 / (1 - p) when kept. The index is
// the CPU twin's: the head's offset plus query * T + key in its T x T block.
__device__ inline float dropout_factor(const Problem& problem, const HeadView& head, int query, int key) {
  if (problem.dropout <= 0.0f) return 1.0f;
  const std::uint64_t index = head.mask_offset + static_cast<std::uint64_t>(query) * static_cast<std::uint64_t>(problem.sequence) +
                              static_cast<std::uint64_t>(key);
  return cpu::dropout_keeps(problem.key, index, problem.dropout) ? problem.keep_scale : 0.0f;
}

// One entry (query, key) of the backward, recomputed from the saved log-sum-exp: the dropped probability
// (for dV) and the score gradient dS = P * (dP - D) * scale (for dQ and dK); both 0 under the causal mask.
struct EntryGradient {
  float dropped_probability;
  float score_gradient;
};

// probability: the entry's undropped softmax probability; dout_value: the output gradient's and value's dot product.
__device__ inline EntryGradient entry_gradient_of_probability(const Problem& problem, const HeadView& head, int query, int key,
                                                               float probability, float dout_value, float row_dot) {
  if (key > query || query >= problem.sequence) return {0.0f, 0.0f};
  const float factor = dropout_factor(problem, head, query, key);
  // The gradient of the undropped probability: that of the dropped one through the same mask and scale.
  const float probability_gradient = dout_value * factor;
  return {probability * factor, probability * (probability_gradient - row_dot) * problem.scale};
}

// query_key: the query's and key's dot product, from which the probability is recomputed.
__device__ inline EntryGradient entry_gradient(const Problem& problem, const HeadView& head, int query, int key, float query_key, float dout_value,
                                        float row_logsumexp, float row_dot) {
  if (key > query || query >= problem.sequence) return {0.0f, 0.0f};
  return entry_gradient_of_probability(problem, head, query, key, expf(problem.scale * query_key - row_logsumexp), dout_value, row_dot);
}

// The tensor-core kernels with bf16 operands of flash_attention_bf16.cu, for heads of up to 128 floats.
void launch_bf16_forward(float* out, float* logsumexp, const float* qkv, const cpu::AttentionShape& shape, const Problem& problem,
                         cudaStream_t stream);
// Needs row_dot filled (flash_attention.cu's row_dot_kernel) first.
void launch_bf16_backward(float* dqkv, const float* dout, const float* qkv, const float* logsumexp, const float* row_dot,
                          const cpu::AttentionShape& shape, const Problem& problem, cudaStream_t stream);

}  // namespace ferry::cuda::flash
