#include "models/gpt_weights.h"
#include "engine/core/bounded_json.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "engine/core/atomic_file.h"
#include "models/kernels/cpu/layernorm.h"

namespace ferry {
namespace {

constexpr std::string_view kPrefix = "transformer.";
constexpr std::int64_t kMostLayers = std::int64_t{1} << 20;  // block numbers in tensor names

bool is_ignored_buffer(std::string_view name) {
  return name == "lm_head.weight" || name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

std::string strip_prefix(std::string_view name) {
  return std::string(name.starts_with(kPrefix) ? name.substr(kPrefix.size()) : name);
}

}  // namespace

GptConfig read_hf_gpt_config(const std::string& path) {
  nlohmann::json json;
  try {
    json = parse_bounded_json(read_text_file(path));
  } catch (const nlohmann::json::exception& error) {
    throw std::invalid_argument("'" + path + "' is not valid JSON: " + describe_json_error(error));
  }
  if (!json.is_object()) throw std::invalid_argument("'" + path + "' holds " + std::string(json.type_name()) + ", not a JSON object (a Hugging Face GPT-2 config.json)");
  if (json.contains("_name_or_path") && !json["_name_or_path"].is_string()) {
    throw std::invalid_argument("'" + path + "': \"_name_or_path\" must be a string, got " + std::string(json["_name_or_path"].type_name()));
  }
  auto field = [&](const char* key) -> std::int64_t {
    if (!json.contains(key) || !json[key].is_number_integer()) {
      throw std::invalid_argument("'" + path + "': missing integer key \"" + key + "\" (a Hugging Face GPT-2 config.json)");
    }
    return json[key].get<std::int64_t>();
  };
  GptConfig config;
  config.name = json.value("_name_or_path", std::string("custom"));
  if (config.name.empty()) config.name = "custom";
  config.layers = field("n_layer");
  config.hidden = field("n_embd");
  config.heads = field("n_head");
  config.max_sequence = field("n_positions");
  config.vocab = field("vocab_size");
  config.validate();
  // Keys whose values change the model: ferry computes GPT-2's, and any other value would train a
  // model the config does not describe.
  const auto refuse = [&](const std::string& key, const std::string& what) {
    throw std::invalid_argument("'" + path + "': \"" + key + "\" is " + json[key].dump() + ", but ferry computes " + what +
                                " (GPT-2's); it would train another model than this config describes");
  };
  if (json.contains("activation_function") &&
      !(json["activation_function"] == "gelu_new" || json["activation_function"] == "gelu_pytorch_tanh")) {
    refuse("activation_function", "the tanh GELU (\"gelu_new\")");
  }
  if (json.contains("layer_norm_epsilon") &&
      !(json["layer_norm_epsilon"].is_number() && std::abs(json["layer_norm_epsilon"].get<double>() - cpu::kLayerNormEpsilon) <= 1e-12)) {
    refuse("layer_norm_epsilon", "LayerNorm with epsilon 1e-05");
  }
  if (json.contains("n_inner") && !json["n_inner"].is_null() && json["n_inner"] != 4 * config.hidden) {
    refuse("n_inner", "an MLP of 4 x n_embd = " + std::to_string(4 * config.hidden) + " (null)");
  }
  if (json.contains("tie_word_embeddings") && json["tie_word_embeddings"] != true) refuse("tie_word_embeddings", "a head tied to the token table (true)");
  if (json.contains("scale_attn_weights") && json["scale_attn_weights"] != true) refuse("scale_attn_weights", "attention scaled by 1/sqrt(head size) (true)");
  if (json.contains("scale_attn_by_inverse_layer_idx") && json["scale_attn_by_inverse_layer_idx"] != false) {
    refuse("scale_attn_by_inverse_layer_idx", "attention without a per-layer scale (false)");
  }
  if (json.contains("add_cross_attention") && json["add_cross_attention"] != false) refuse("add_cross_attention", "no cross-attention (false)");
  return config;
}

std::string hf_gpt_config_json(const GptConfig& config) {
  const nlohmann::json json = {{"model_type", "gpt2"},          {"architectures", {"GPT2LMHeadModel"}},
                               {"_name_or_path", config.name},  {"n_layer", config.layers},
                               {"n_embd", config.hidden},       {"n_head", config.heads},
                               {"n_positions", config.max_sequence}, {"n_ctx", config.max_sequence},
                               {"vocab_size", config.vocab},    {"activation_function", "gelu_new"},
                               {"layer_norm_epsilon", 1e-5},    {"tie_word_embeddings", true}};
  return json.dump(2) + "\n";
}

void write_hf_gpt_config(const std::string& path, const GptConfig& config) {
  write_file_atomically(path, hf_gpt_config_json(config));
}

std::optional<GptConfig> read_hf_gpt_config_beside(const std::string& weights_path) {
  const std::filesystem::path config_path = std::filesystem::path(weights_path).parent_path() / "config.json";
  if (!std::filesystem::exists(config_path)) return std::nullopt;
  return read_hf_gpt_config(config_path.string());
}

GptConfig infer_gpt_config(const SafetensorsFile& file, std::int64_t heads) {
  GptConfig config;
  std::set<std::int64_t> layers;
  for (const SafetensorsEntry& entry : file.entries()) {
    const std::string name = strip_prefix(entry.name);
    if (name == "wte.weight" && entry.shape.size() == 2) {
      config.vocab = entry.shape[0];
      config.hidden = entry.shape[1];
    } else if (name == "wpe.weight" && entry.shape.size() == 2) {
      config.max_sequence = entry.shape[0];
    } else if (name.starts_with("h.")) {
      const std::string index = name.substr(2, name.find('.', 2) - 2);
      std::int64_t layer = -1;
      const auto [end, error] = std::from_chars(index.data(), index.data() + index.size(), layer);
      if (error != std::errc() || end != index.data() + index.size() || layer < 0 || layer >= kMostLayers) {
        throw SafetensorsError("'" + file.path() + "': tensor '" + entry.name + "' names block '" + index +
                               "', expected a block number from 0 to " + std::to_string(kMostLayers - 1));
      }
      layers.insert(layer);
    }
  }
  if (config.vocab == 0 || config.max_sequence == 0) {
    throw SafetensorsError("'" + file.path() + "' has no wte.weight / wpe.weight: not GPT-2 weights");
  }
  config.layers = static_cast<std::int64_t>(layers.size());
  config.heads = heads;
  return config;
}

namespace {

// Every tensor of the file must belong to the model of `names` (those it ignores aside).
void require_only_model_tensors(const SafetensorsFile& file, const std::vector<std::string>& names) {
  const std::set<std::string> expected(names.begin(), names.end());
  for (const SafetensorsEntry& entry : file.entries()) {
    const std::string name = strip_prefix(entry.name);
    if (!expected.contains(name) && !is_ignored_buffer(name)) {
      throw SafetensorsError("'" + file.path() + "' holds tensor '" + entry.name +
                             "' that this model does not have (check --layers or the file's config.json)");
    }
  }
}

// The file's entry for parameter `name` of `shape`, with or without the prefix.
const SafetensorsEntry& model_entry(const SafetensorsFile& file, const std::string& name, const Shape& shape) {
  const SafetensorsEntry* entry = file.find(name);
  if (entry == nullptr) entry = file.find(std::string(kPrefix) + name);
  if (entry == nullptr) throw SafetensorsError("'" + file.path() + "' has no tensor '" + name + "'");
  if (entry->shape != shape) {
    throw SafetensorsError("'" + file.path() + "' tensor '" + entry->name + "' has shape " + shape_to_string(entry->shape) +
                           " but the model expects " + shape_to_string(shape) +
                           " (the model's shape comes from config.json beside the file, --model or the shape flags)");
  }
  return *entry;
}

}  // namespace

void load_gpt_parameters(const SafetensorsFile& file, const GptParameters& parameters) {
  // A pipeline stage's part loads its own tensors from the whole model's file.
  require_only_model_tensors(file, parameters.whole_model_names());
  for (const NamedTensor& each : parameters.named()) {
    const SafetensorsEntry& entry = model_entry(file, each.name, each.tensor->shape());
    if (!each.tensor->device().has_storage()) continue;
    copy_from_host_f32(*each.tensor, file.read_f32(entry).data());
  }
}

GptParameterReader::GptParameterReader(const SafetensorsFile& file, const GptConfig& config) : file_(file) {
  std::vector<std::string> names;
  for (const ParameterSpec& each : GptParameters::part_specs(config)) {
    model_entry(file, each.name, each.shape);  // every tensor present, in its shape
    names.push_back(each.name);
  }
  require_only_model_tensors(file, names);
}

std::vector<float> GptParameterReader::elements(const ParameterSpec& spec, std::int64_t offset, std::int64_t count) const {
  const SafetensorsEntry& entry = model_entry(file_, spec.name, spec.shape);
  std::vector<std::byte> raw(static_cast<std::size_t>(count) * dtype_size(entry.dtype));
  file_.read_elements(entry, offset, count, raw.data());
  std::vector<float> values(static_cast<std::size_t>(count));
  convert_to_f32(raw.data(), values.data(), entry.dtype, values.size());
  return values;
}

void save_gpt_parameters(const std::string& path, const GptParameters& parameters) {
  const std::vector<NamedTensor> tensors = parameters.named();
  std::vector<std::vector<float>> host;  // each stays put while the writer holds its pointer
  host.reserve(tensors.size());
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  for (const NamedTensor& each : tensors) {
    host.push_back(copy_to_host_f32(*each.tensor));
    writer.add(each.name, DType::f32, each.tensor->shape(), host.back().data());
  }
  writer.write(path);
}

}  // namespace ferry
