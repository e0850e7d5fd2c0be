#include "engine/train/model_config.h"

#include <stdexcept>
#include <string>

#include "engine/checkpoint/checkpoint.h"
#include "engine/core/safetensors.h"
#include "engine/train/resume_checks.h"
#include "models/gpt_weights.h"

namespace ferry {

GptConfig resolve_model_config(const TrainOptions& options) {
  GptConfig config;
  bool from_file = false;
  if (!options.init_from.empty()) {
    if (auto beside = read_hf_gpt_config_beside(options.init_from)) {
      config = *beside;
    } else {
      const SafetensorsFile file(options.init_from);
      if (!options.heads) {
        throw std::invalid_argument("'" + options.init_from + "' has no config.json beside it, so the head count is unknown; pass --heads");
      }
      config = infer_gpt_config(file, *options.heads);
    }
    from_file = true;
  } else {
    const auto preset = gpt_preset(options.model);
    if (!preset) {
      std::string names;
      for (const std::string& name : gpt_preset_names()) names += (names.empty() ? "" : ", ") + name;
      throw std::invalid_argument("unknown --model '" + options.model + "' (presets: " + names + ")");
    }
    config = *preset;
  }
  const bool reshaped = options.layers || options.hidden || options.heads || options.vocab;
  if (from_file && reshaped && (options.layers || options.hidden || options.vocab)) {
    throw std::invalid_argument("--layers/--hidden/--vocab cannot change the shape of weights loaded with --init-from");
  }
  if (options.layers) config.layers = *options.layers;
  if (options.hidden) config.hidden = *options.hidden;
  if (options.heads) config.heads = *options.heads;
  if (options.vocab) config.vocab = *options.vocab;
  if (reshaped && !from_file) config.name = "custom";
  if (options.seq && *options.seq > config.max_sequence) {
    if (from_file) {
      throw std::invalid_argument("--seq " + std::to_string(*options.seq) + " exceeds the " + std::to_string(config.max_sequence) +
                                  " positions of the weights in '" + options.init_from + "'");
    }
    config.max_sequence = *options.seq;
  }
  config.validate();
  return config;
}

RunShape run_shape(const TrainOptions& o) {
  RunShape shape{o.resume.empty() ? resolve_model_config(o) : read_checkpoint_config(o.resume), 0};
  if (!o.resume.empty()) check_shape_flags_against_checkpoint(o, shape.config);
  shape.sequence = o.seq.value_or(shape.config.max_sequence);
  if (shape.sequence > shape.config.max_sequence) {
    throw std::invalid_argument("--seq " + std::to_string(shape.sequence) + " exceeds the model's " + std::to_string(shape.config.max_sequence) +
                                " positions");
  }
  return shape;
}

}  // namespace ferry
