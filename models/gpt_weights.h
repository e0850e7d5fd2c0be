// GPT-2 weights in Hugging Face's safetensors files: reading config.json (n_layer, n_embd, n_head,
// n_positions, vocab_size), loading F32/F16/BF16 tensors with or without the "transformer." prefix
// into a model's parameters (a shape mismatch names the tensor), and saving parameters back.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/core/safetensors.h"
#include "models/gpt_config.h"
#include "models/gpt_parameters.h"

namespace ferry {

// The shape in an HF config.json; throws naming the file and the missing or bad key.
GptConfig read_hf_gpt_config(const std::string& path);
void write_hf_gpt_config(const std::string& path, const GptConfig& config);
std::string hf_gpt_config_json(const GptConfig& config);

// config.json beside a weights file, when present.
std::optional<GptConfig> read_hf_gpt_config_beside(const std::string& weights_path);

// The shape implied by the tensors (heads cannot be inferred: taken from `heads`).
GptConfig infer_gpt_config(const SafetensorsFile& file, std::int64_t heads);

// Copies every parameter from the file, converting to the parameter dtype (a pipeline stage's part
// takes its own from the whole model's file). Missing tensors, tensors the whole model does not have
// and shapes that disagree are SafetensorsErrors naming the tensor.
void load_gpt_parameters(const SafetensorsFile& file, const GptParameters& parameters);

// The same file read piece by piece, for a rank that holds only a partition of the parameters (ZeRO
// stage 3): the constructor checks the file against the whole model of `config` (the same errors);
// elements(spec, offset, count) reads elements [offset, offset + count) of one tensor as f32.
class GptParameterReader {
 public:
  GptParameterReader(const SafetensorsFile& file, const GptConfig& config);
  std::vector<float> elements(const ParameterSpec& spec, std::int64_t offset, std::int64_t count) const;

 private:
  const SafetensorsFile& file_;
};

// Writes the parameters with HF names as F32 (bf16 parameters are widened) to `path`, atomically.
void save_gpt_parameters(const std::string& path, const GptParameters& parameters);

}  // namespace ferry
