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
  // Positions in fields() of the LayerNorms' and projections' weights (each bias follows its weight).
  static constexpr std::size_t kLn1 = 0, kAttnCAttn = 2, kAttnCProj = 4, kLn2 = 6, kMlpCFc = 8, kMlpCProj = 10;
  // Allocates one block's tensors (zeros); tags are `tag_prefix` + the HF name under h.`layer`.
  static GptBlockParameters allocate(Device& device, std::int64_t hidden, std::int64_t layer, DType dtype, MemoryCategory category,
                                     const std::string& tag_prefix = "");
  // The shapes of a block's tensors of width `hidden`, in fields() order.
  static std::array<Shape, kCount> shapes(std::int64_t hidden);
  // The tensors in HF order with their names after "h.N." (ln_1.weight, ...).
  std::array<std::pair<const char*, const Tensor*>, kCount> fields() const;
  const Tensor& field(std::size_t index) const { return *fields().at(index).second; }
};

struct NamedTensor {
  std::string name;
  const Tensor* tensor;
  std::size_t index = 0;  // position among the whole model's tensors (kWteIndex, block_index(layer), ...)
};

// A parameter by name, shape and index, whether or not a tensor holds it on this rank (ZeRO stage 3
// keeps only a partition): what flat layouts and partitions are built from.
struct ParameterSpec {
  std::string name;
  Shape shape;
  std::size_t index = 0;  // as NamedTensor::index
  std::int64_t numel() const { return shape_numel(shape); }
};
// The specs of held tensors.
std::vector<ParameterSpec> specs_of(const std::vector<NamedTensor>& tensors);

// The tensors one object holds: all of them, or a pipeline stage's share (its blocks, the embeddings on
// the first stage, ln_f and the tied token table on the last; the table lives on both ends).
struct GptModelPart {
  std::vector<bool> blocks;  // [layer]; empty: every block
  bool embedding = true;     // wte and wpe, and the embedding layer
  bool head = true;          // ln_f and wte, and the LM head and loss

  // Blocks [first, end) of a model, with the embedding and/or the head.
  static GptModelPart layers(std::int64_t first, std::int64_t end, std::int64_t total_layers, bool embedding, bool head);
  bool has_block(std::int64_t layer) const { return blocks.empty() || blocks.at(static_cast<std::size_t>(layer)); }
  bool has_token_table() const { return embedding || head; }
  bool whole() const;
};

struct GptParameters {
  Tensor wte;  // [V, C], also the LM head (tied)
  Tensor wpe;  // [max_sequence, C]
  std::vector<GptBlockParameters> blocks;
  Tensor ln_f_weight, ln_f_bias;

  // Allocates the part's tensors (zeros) on `device`; the others stay undefined. Tags are `tag_prefix`
  // + the HF name.
  static GptParameters allocate(Device& device, const GptConfig& config, DType dtype, MemoryCategory category,
                                const std::string& tag_prefix = "", const GptModelPart& part = {});
  // Every allocated tensor with its HF name, in the order HF files list them.
  std::vector<NamedTensor> named() const;
  // The names of the whole model's tensors, those a part does not hold included.
  std::vector<std::string> whole_model_names() const;
  // Every tensor of the whole model of `config` with its HF name and shape, in named() order, without
  // allocating (what a checkpoint's files list).
  static std::vector<std::pair<std::string, Shape>> whole_model_shapes(const GptConfig& config);
  std::int64_t numel() const;
  // The tensor of whole-model index `index` (held or not: an undefined tensor where it is not).
  Tensor& tensor_at(std::size_t index);
  // The tensors a part of the model of `config` holds, in named() order, without allocating.
  static std::vector<ParameterSpec> part_specs(const GptConfig& config, const GptModelPart& part = {});
  // Positions in named(): the embeddings first, then each block's kCount tensors, then ln_f.
  static constexpr std::size_t kWteIndex = 0;
  static constexpr std::size_t kWpeIndex = 1;
  static constexpr std::size_t block_index(std::int64_t layer) { return 2 + GptBlockParameters::kCount * static_cast<std::size_t>(layer); }
};

// Weight decay applies to 2-D weights only (embeddings and matrices), as GPT-2 training recipes do.
bool decays(const Tensor& parameter);
bool decays(const Shape& parameter);

// GPT-2's initialization: N(0, 0.02) for embeddings and weights, N(0, 0.02/sqrt(2 layers)) for the
// residual projections (c_proj), zero biases, LayerNorm weight 1 and bias 0. Deterministic from seed.
void initialize_gpt_parameters(const GptParameters& parameters, const GptConfig& config, std::uint64_t seed);
// Elements [offset, offset + count) of parameter `spec`'s initial values, as initialize_gpt_parameters
// gives them (a ZeRO-3 rank initializes its partition without holding any whole parameter).
std::vector<float> initial_gpt_parameter_values(const ParameterSpec& spec, const GptConfig& config, std::uint64_t seed,
                                                std::int64_t offset, std::int64_t count);

}  // namespace ferry
