// What a GPT block keeps for backward, in bytes and in recompute cost, per ActivationKeep: the
// formulas the recompute policies are judged by (tests check the allocator's measured bytes equal them).
#pragma once

#include <cstdint>

#include "models/gpt_config.h"
#include "models/gpt_model.h"

namespace ferry {

// Bytes of activations one block's forward leaves allocated (requested sizes) for micro-batch B,
// sequence T, hidden C, heads NH and activations of e bytes (4 f32, 2 bf16); mean and rstd are f32:
//   all:        16 BTC e + NH B T^2 e + 16 B T
//   selective:  10 BTC e + 16 B T          (no attention probabilities, GELU output or LayerNorm outputs)
//   input_only:  1 BTC e                   (its output, which is the next block's input)
// Korthikanti et al. count sbh(34 + 5as/h) for 16-bit Megatron with 1-byte dropout masks; ferry keeps
// no masks (they are regenerated) and no separate dropout outputs.
std::int64_t block_activation_bytes(const GptConfig& config, std::int64_t batch, std::int64_t sequence,
                                    std::int64_t element_bytes, ActivationKeep keep);

// Forward FLOPs (2 per multiply-add) that one block recomputes in backward under `keep`: all of its
// forward for input_only; softmax(Q K^T) and P V for selective (GELU and LayerNorm are elementwise).
double block_recompute_flops(const GptConfig& config, std::int64_t batch, std::int64_t sequence, ActivationKeep keep);

}  // namespace ferry
