// The tensors of a GPT model under Hugging Face GPT-2 names (wte.weight, h.3.attn.c_attn.weight, ...),
// in HF layouts (Conv1D weights [in, out]). The same structure holds parameters and their gradients;
// every tensor comes from the device allocator with its category and its name as tag.
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"
#include "models/gpt_config.h"

namespace ferry {

struct GptBlockParameters {
  Tensor ln_1_weight, ln_1_bias;
  Tensor attn_c_attn_weight, attn_c_attn_bias;  // [C, 3C], [3C]
  Tensor attn_c_proj_weight, attn_c_proj_bias;  // [C, C], [C]
  Tensor ln_2_weight, ln_2_bias;
  Tensor mlp_c_fc_weight, mlp_c_fc_bias;      // [C, 4C], [4C]
  Tensor mlp_c_proj_weight, mlp_c_proj_bias;  // [4C, C], [C]

  static constexpr std::size_t kCount = 12;
  // Allocates one block's tensors (zeros); tags are `tag_prefix` + the HF name under h.`layer`.
  static GptBlockParameters allocate(Device& device, std::int64_t hidden, std::int64_t layer, DType dtype,
                                     MemoryCategory category, const std::string& tag_prefix = "");
  // The tensors in HF order with their names after "h.N." (ln_1.weight, ...).
  std::array<std::pair<const char*, const Tensor*>, kCount> fields() const;
};

struct NamedTensor {
  std::string name;
  const Tensor* tensor;
};

struct GptParameters {
  Tensor wte;  // [V, C], also the LM head (tied)
  Tensor wpe;  // [max_sequence, C]
  std::vector<GptBlockParameters> blocks;
  Tensor ln_f_weight, ln_f_bias;

  // Allocates every tensor (zeros) on `device`; tags are `tag_prefix` + the HF name.
  static GptParameters allocate(Device& device, const GptConfig& config, DType dtype, MemoryCategory category,
                                const std::string& tag_prefix = "");
  // Every tensor with its HF name, in the order HF files list them.
  std::vector<NamedTensor> named() const;
  std::int64_t numel() const;
  // Positions in named(): the embeddings first, then each block's kCount tensors, then ln_f.
  static constexpr std::size_t kWteIndex = 0;
  static constexpr std::size_t kWpeIndex = 1;
  static constexpr std::size_t block_index(std::int64_t layer) { return 2 + GptBlockParameters::kCount * static_cast<std::size_t>(layer); }
};

// Weight decay applies to 2-D weights only (embeddings and matrices), as GPT-2 training recipes do.
bool decays(const Tensor& parameter);

// GPT-2's initialization: N(0, 0.02) for embeddings and weights, N(0, 0.02/sqrt(2 layers)) for the
// residual projections (c_proj), zero biases, LayerNorm weight 1 and bias 0. Deterministic from seed.
void initialize_gpt_parameters(const GptParameters& parameters, const GptConfig& config, std::uint64_t seed);

}  // namespace ferry
