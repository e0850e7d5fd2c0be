// Causal multi-head self-attention core on the host. qkv is [B, T, 3C] (q, k, v, each C wide, heads
// of C/NH); out is [B, T, C]. Forward saves the softmax probabilities att [B, NH, T, T] (before
// dropout); backward regenerates the dropout mask from its key instead of storing it.
#pragma once

#include <cstdint>

#include "models/kernels/cpu/counter_random.h"

namespace ferry::cpu {

struct AttentionShape {
  std::int64_t batch, sequence, channels, heads;
};

template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, AttentionShape shape, float dropout, RandomKey key);

// Overwrites dqkv. scratch holds batch * heads * sequence elements.
template <typename Real>
void attention_backward(Real* dqkv, Real* scratch, const Real* dout, const Real* qkv, const Real* att,
                        AttentionShape shape, float dropout, RandomKey key);

}  // namespace ferry::cpu
