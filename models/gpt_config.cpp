#include "models/gpt_config.h"

#include <array>
#include <stdexcept>

namespace ferry {
namespace {

struct Preset {
  const char* name;
  std::int64_t layers, hidden, heads, vocab, max_sequence;
};

// GPT-2 sizes from the released checkpoints; GPT-3 from Brown et al. (2020), table 2.1, with heads
// chosen so the head size divides the width; gpt3-30b borrows OPT-30B's shape (48 x 7168, 56 heads).
constexpr std::array kPresets = {
    Preset{"gpt2-tiny", 4, 128, 4, 256, 128},
    Preset{"gpt2", 12, 768, 12, 50257, 1024},
    Preset{"gpt2-medium", 24, 1024, 16, 50257, 1024},
    Preset{"gpt2-large", 36, 1280, 20, 50257, 1024},
    Preset{"gpt2-xl", 48, 1600, 25, 50257, 1024},
    Preset{"gpt3-small", 12, 768, 12, 50257, 2048},
    Preset{"gpt3-medium", 24, 1024, 16, 50257, 2048},
    Preset{"gpt3-large", 24, 1536, 16, 50257, 2048},
    Preset{"gpt3-xl", 24, 2048, 16, 50257, 2048},
    Preset{"gpt3-2.7b", 32, 2560, 32, 50257, 2048},
    Preset{"gpt3-6.7b", 32, 4096, 32, 50257, 2048},
    Preset{"gpt3-13b", 40, 5120, 40, 50257, 2048},
    Preset{"gpt3-30b", 48, 7168, 56, 50257, 2048},
    Preset{"gpt3-175b", 96, 12288, 96, 50257, 2048},
};

}  // namespace

std::int64_t GptConfig::parameter_count() const {
  const std::int64_t C = hidden;
  const std::int64_t per_layer = 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * 4 * C + 4 * C) + (4 * C * C + C);
  return vocab * C + max_sequence * C + layers * per_layer + 2 * C;
}

void GptConfig::validate() const {
  auto positive = [](std::int64_t value, const char* field, const char* flag) {
    if (value <= 0) {
      throw std::invalid_argument(std::string("model ") + field + " must be positive (got " + std::to_string(value) +
                                  "); set it with " + flag + " or choose a --model preset");
    }
  };
  positive(layers, "layers", "--layers");
  positive(hidden, "hidden width", "--hidden");
  positive(heads, "heads", "--heads");
  positive(vocab, "vocabulary", "--vocab");
  positive(max_sequence, "sequence length", "--seq");
  if (hidden % heads != 0) {
    throw std::invalid_argument("hidden width " + std::to_string(hidden) + " is not divisible by heads " +
                                std::to_string(heads) + "; choose --heads dividing --hidden");
  }
  if (vocab > (std::int64_t{1} << 31) - 1) throw std::invalid_argument("vocabulary " + std::to_string(vocab) + " is too large");
}

std::optional<GptConfig> gpt_preset(std::string_view name) {
  for (const Preset& preset : kPresets) {
    if (name == preset.name) {
      return GptConfig{preset.name, preset.layers, preset.hidden, preset.heads, preset.vocab, preset.max_sequence};
    }
  }
  return std::nullopt;
}

std::vector<std::string> gpt_preset_names() {
  std::vector<std::string> names;
  for (const Preset& preset : kPresets) names.emplace_back(preset.name);
  return names;
}

}  // namespace ferry
