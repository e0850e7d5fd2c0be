#include "models/gpt_parameters.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "models/kernels/cpu/counter_random.h"

namespace ferry {

GptBlockParameters GptBlockParameters::allocate(Device& device, std::int64_t hidden, std::int64_t layer, DType dtype,
                                                MemoryCategory category, const std::string& tag_prefix) {
  const std::array<Shape, kCount> block_shapes = shapes(hidden);
  const std::string prefix = tag_prefix + "h." + std::to_string(layer) + ".";
  GptBlockParameters block;
  const auto fields = block.fields();
  for (std::size_t i = 0; i < kCount; ++i) {
    // fields() lists this block's own members; they are written here, while the block is being built.
    *const_cast<Tensor*>(fields[i].second) = Tensor::zeros(device, block_shapes[i], dtype, category, prefix + fields[i].first);
  }
  return block;
}

std::array<Shape, GptBlockParameters::kCount> GptBlockParameters::shapes(std::int64_t hidden) {
  const std::int64_t C = hidden;
  return {{{C}, {C}, {C, 3 * C}, {3 * C}, {C, C}, {C}, {C}, {C}, {C, 4 * C}, {4 * C}, {4 * C, C}, {C}}};
}

std::array<std::pair<const char*, const Tensor*>, GptBlockParameters::kCount> GptBlockParameters::fields() const {
  return {{{"ln_1.weight", &ln_1_weight},
           {"ln_1.bias", &ln_1_bias},
           {"attn.c_attn.weight", &attn_c_attn_weight},
           {"attn.c_attn.bias", &attn_c_attn_bias},
           {"attn.c_proj.weight", &attn_c_proj_weight},
           {"attn.c_proj.bias", &attn_c_proj_bias},
           {"ln_2.weight", &ln_2_weight},
           {"ln_2.bias", &ln_2_bias},
           {"mlp.c_fc.weight", &mlp_c_fc_weight},
           {"mlp.c_fc.bias", &mlp_c_fc_bias},
           {"mlp.c_proj.weight", &mlp_c_proj_weight},
           {"mlp.c_proj.bias", &mlp_c_proj_bias}}};
}

GptModelPart GptModelPart::layers(std::int64_t first, std::int64_t end, std::int64_t total_layers, bool embedding, bool head) {
  if (first < 0 || end < first || end > total_layers) {
    throw std::invalid_argument("blocks [" + std::to_string(first) + ", " + std::to_string(end) + ") are not within a model of " +
                                std::to_string(total_layers) + " blocks");
  }
  GptModelPart part;
  part.blocks.assign(static_cast<std::size_t>(total_layers), false);
  for (std::int64_t layer = first; layer < end; ++layer) part.blocks[static_cast<std::size_t>(layer)] = true;
  part.embedding = embedding;
  part.head = head;
  return part;
}

bool GptModelPart::whole() const {
  return embedding && head && std::all_of(blocks.begin(), blocks.end(), [](bool held) { return held; });
}

GptParameters GptParameters::allocate(Device& device, const GptConfig& config, DType dtype, MemoryCategory category,
                                      const std::string& tag_prefix, const GptModelPart& part) {
  if (!part.blocks.empty() && static_cast<std::int64_t>(part.blocks.size()) != config.layers) {
    throw std::invalid_argument("a model part of " + std::to_string(part.blocks.size()) + " blocks for a model of " +
                                std::to_string(config.layers));
  }
  const std::int64_t C = config.hidden;
  auto make = [&](const std::string& name, const Shape& shape) {
    return Tensor::zeros(device, shape, dtype, category, tag_prefix + name);
  };
  GptParameters parameters;
  if (part.has_token_table()) parameters.wte = make("wte.weight", {config.vocab, C});
  if (part.embedding) parameters.wpe = make("wpe.weight", {config.max_sequence, C});
  parameters.blocks.resize(static_cast<std::size_t>(config.layers));
  for (std::int64_t layer = 0; layer < config.layers; ++layer) {
    if (part.has_block(layer)) {
      parameters.blocks[static_cast<std::size_t>(layer)] = GptBlockParameters::allocate(device, C, layer, dtype, category, tag_prefix);
    }
  }
  if (part.head) {
    parameters.ln_f_weight = make("ln_f.weight", {C});
    parameters.ln_f_bias = make("ln_f.bias", {C});
  }
  return parameters;
}

namespace {

// Calls visit(name, tensor, index) for every tensor of the whole model, held or not, in named() order.
template <typename Visit>
void visit_every_tensor(const GptParameters& parameters, Visit visit) {
  std::size_t index = 0;
  visit(std::string("wte.weight"), &parameters.wte, index++);
  visit(std::string("wpe.weight"), &parameters.wpe, index++);
  for (std::size_t layer = 0; layer < parameters.blocks.size(); ++layer) {
    const std::string prefix = "h." + std::to_string(layer) + ".";
    for (const auto& [name, tensor] : parameters.blocks[layer].fields()) visit(prefix + name, tensor, index++);
  }
  visit(std::string("ln_f.weight"), &parameters.ln_f_weight, index++);
  visit(std::string("ln_f.bias"), &parameters.ln_f_bias, index++);
}

}  // namespace

std::vector<NamedTensor> GptParameters::named() const {
  std::vector<NamedTensor> result;
  visit_every_tensor(*this, [&](std::string name, const Tensor* tensor, std::size_t index) {
    if (tensor->defined()) result.push_back({std::move(name), tensor, index});
  });
  return result;
}

std::vector<std::string> GptParameters::whole_model_names() const {
  std::vector<std::string> result;
  visit_every_tensor(*this, [&](std::string name, const Tensor*, std::size_t) { result.push_back(std::move(name)); });
  return result;
}

std::vector<std::pair<std::string, Shape>> GptParameters::whole_model_shapes(const GptConfig& config) {
  const std::int64_t C = config.hidden;
  std::vector<std::pair<std::string, Shape>> result = {{"wte.weight", {config.vocab, C}}, {"wpe.weight", {config.max_sequence, C}}};
  const std::array<Shape, GptBlockParameters::kCount> block_shapes = GptBlockParameters::shapes(C);
  const std::array<std::pair<const char*, const Tensor*>, GptBlockParameters::kCount> fields = GptBlockParameters{}.fields();
  for (std::int64_t layer = 0; layer < config.layers; ++layer) {
    for (std::size_t i = 0; i < GptBlockParameters::kCount; ++i) {
      result.emplace_back("h." + std::to_string(layer) + "." + fields[i].first, block_shapes[i]);
    }
  }
  result.emplace_back("ln_f.weight", Shape{C});
  result.emplace_back("ln_f.bias", Shape{C});
  return result;
}

Tensor& GptParameters::tensor_at(std::size_t index) {
  // named()'s order by arithmetic: a layer's every use looks its tensors up (ZeRO 3), so no walk of the model.
  if (index == kWteIndex) return wte;
  if (index == kWpeIndex) return wpe;
  const std::size_t layer = (index - block_index(0)) / GptBlockParameters::kCount;
  if (layer < blocks.size()) return const_cast<Tensor&>(blocks[layer].field((index - block_index(0)) % GptBlockParameters::kCount));  // a member of *this
  const std::size_t after = index - block_index(static_cast<std::int64_t>(blocks.size()));
  if (after == 0) return ln_f_weight;
  if (after == 1) return ln_f_bias;
  throw std::out_of_range("no GPT parameter has index " + std::to_string(index));
}

std::vector<ParameterSpec> GptParameters::part_specs(const GptConfig& config, const GptModelPart& part) {
  std::vector<ParameterSpec> result;
  const std::size_t ln_f = block_index(config.layers);
  std::size_t index = 0;
  for (auto& [name, shape] : whole_model_shapes(config)) {
    const bool held = index == kWteIndex   ? part.has_token_table()
                      : index == kWpeIndex ? part.embedding
                      : index >= ln_f      ? part.head
                                           : part.has_block(static_cast<std::int64_t>((index - 2) / GptBlockParameters::kCount));
    if (held) result.push_back({std::move(name), std::move(shape), index});
    ++index;
  }
  return result;
}

std::vector<ParameterSpec> specs_of(const std::vector<NamedTensor>& tensors) {
  std::vector<ParameterSpec> specs;
  for (const NamedTensor& each : tensors) specs.push_back({each.name, each.tensor->shape(), each.index});
  return specs;
}

std::int64_t GptParameters::numel() const {
  std::int64_t total = 0;
  for (const NamedTensor& each : named()) total += each.tensor->numel();
  return total;
}

bool decays(const Tensor& parameter) { return parameter.dim() == 2; }
bool decays(const Shape& parameter) { return parameter.size() == 2; }

std::vector<float> initial_gpt_parameter_values(const ParameterSpec& spec, const GptConfig& config, std::uint64_t seed,
                                                std::int64_t offset, std::int64_t count) {
  if (offset < 0 || count < 0 || offset + count > spec.numel()) {
    throw std::out_of_range("elements [" + std::to_string(offset) + ", " + std::to_string(offset + count) + ") of " + spec.name + " (" +
                            std::to_string(spec.numel()) + " elements)");
  }
  const cpu::RandomKey key = cpu::RandomKey{cpu::mix64(seed)}.derive(spec.index + 1);  // by position in the whole model: stages agree
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.layers));
  const bool is_bias = spec.name.ends_with(".bias");
  const bool is_layernorm = spec.name.find("ln_") != std::string::npos;
  const bool is_projection = spec.name.ends_with("c_proj.weight");
  std::vector<float> values(static_cast<std::size_t>(count));
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (is_layernorm) {
      values[i] = is_bias ? 0.0f : 1.0f;
    } else if (is_bias) {
      values[i] = 0.0f;
    } else {
      values[i] = static_cast<float>(key.normal(static_cast<std::uint64_t>(offset) + i) * (is_projection ? residual_std : 0.02));
    }
  }
  return values;
}

void initialize_gpt_parameters(const GptParameters& parameters, const GptConfig& config, std::uint64_t seed) {
  for (const NamedTensor& each : parameters.named()) {
    const Tensor& tensor = *each.tensor;
    if (!tensor.device().has_storage()) continue;
    const std::vector<float> values = initial_gpt_parameter_values({each.name, tensor.shape(), each.index}, config, seed, 0, tensor.numel());
    copy_from_host_f32(tensor, values.data());
  }
}

}  // namespace ferry
