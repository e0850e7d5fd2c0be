// Memory categories: every allocation says what it holds, so statistics, profiles and out-of-memory
// messages can say where every byte went. The list is part of the summary-JSON contract.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ferry {

enum class MemoryCategory : std::uint8_t {
  parameters,
  gradients,
  optimizer_states,
  activations,
  activation_gradients,  // gradients of activations in backward (the compute dtype, as autocast keeps them)
  workspace,
  communication,
  staging,
  uncategorized,  // allocations that did not say (for example, replayed foreign traces)
};

inline constexpr std::size_t kNumMemoryCategories = 9;

inline constexpr std::array<MemoryCategory, kNumMemoryCategories> kAllMemoryCategories = {
    MemoryCategory::parameters,           MemoryCategory::gradients, MemoryCategory::optimizer_states,
    MemoryCategory::activations,          MemoryCategory::activation_gradients, MemoryCategory::workspace,
    MemoryCategory::communication,        MemoryCategory::staging,   MemoryCategory::uncategorized};

constexpr std::string_view category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::parameters: return "parameters";
    case MemoryCategory::gradients: return "gradients";
    case MemoryCategory::optimizer_states: return "optimizer_states";
    case MemoryCategory::activations: return "activations";
    case MemoryCategory::activation_gradients: return "activation_gradients";
    case MemoryCategory::workspace: return "workspace";
    case MemoryCategory::communication: return "communication";
    case MemoryCategory::staging: return "staging";
    case MemoryCategory::uncategorized: return "uncategorized";
  }
  return "unknown";
}

constexpr std::size_t category_index(MemoryCategory category) {
  return static_cast<std::size_t>(category);
}

std::optional<MemoryCategory> parse_memory_category(std::string_view name);

}  // namespace ferry
