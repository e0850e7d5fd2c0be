// The shape of a GPT model (layers, hidden width, heads, vocabulary, maximum sequence) and the named
// presets users ask for: the GPT-2 family from gpt2-tiny (tests and demos) to gpt2-xl, and GPT-3
// shapes up to 13B and 30B for dry runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

struct GptConfig {
  std::string name = "custom";
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t vocab = 0;
  std::int64_t max_sequence = 0;  // learned positions (n_positions)

  std::int64_t head_size() const { return hidden / heads; }
  std::int64_t parameter_count() const;
  // Throws std::invalid_argument naming the bad field and the fix.
  void validate() const;
};

std::optional<GptConfig> gpt_preset(std::string_view name);
std::vector<std::string> gpt_preset_names();

}  // namespace ferry
