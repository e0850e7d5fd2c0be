// Causal multi-head self-attention core on the host. qkv is [B, T, 3C] (q, k, v, each C wide, heads
// of C/NH); out is [B, T, C]. Per (batch, head) the products are GEMMs (scores Q K^T, output P V, and
// their backward), the causal softmax a row loop. Forward saves the softmax probabilities att
// [B, NH, T, T] (before dropout); the dropout mask is regenerated from its key, never stored.
#pragma once

#include <cstdint>

#include "models/kernels/cpu/counter_random.h"

namespace ferry::cpu {

struct AttentionShape {
  std::int64_t batch, sequence, channels, heads;
};

// scratch: batch * heads * sequence * sequence elements, needed only when dropout > 0 (else may be null).
template <typename Real>
void attention_forward(Real* out, Real* att, Real* scratch, const Real* qkv, AttentionShape shape, float dropout,
                       RandomKey key);

// Overwrites dqkv. scratch holds batch * heads * sequence * sequence elements.
template <typename Real>
void attention_backward(Real* dqkv, Real* scratch, const Real* dout, const Real* qkv, const Real* att,
                        AttentionShape shape, float dropout, RandomKey key);

}  // namespace ferry::cpu
