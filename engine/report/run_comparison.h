// Two runs' memory side by side (`ferry report --compare A B`): each run's peaks and its breakdown by
// category at its peak, the difference, and one HTML page with both timelines on the same axes. A run
// comes from a profile or a PyTorch snapshot (with a timeline) or a summary JSON (peaks only).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/memory_timeline.h"

namespace ferry {

struct RunMemory {
  std::string label;        // the path it came from
  std::string description;  // what ran
  std::int64_t peak_allocated = 0;
  std::int64_t peak_reserved = 0;
  std::array<std::int64_t, kNumMemoryCategories> at_peak{};  // by category, at the moment of peak allocated
  std::optional<MemoryProfile> profile;                      // with its timeline, when the run has one
  std::optional<MemoryTimeline> timeline;
};

RunMemory run_memory_from_profile(std::string label, MemoryProfile profile);
// A `--summary` JSON of ferry train (memory.peak_allocated, peak_reserved, at_peak); throws ProfileError
// naming the missing key.
RunMemory run_memory_from_summary(std::string label, const nlohmann::json& summary);

std::string comparison_table(const RunMemory& a, const RunMemory& b);
// {"a": {label, peak_allocated, peak_reserved, at_peak}, "b": {...}, "difference": {same keys, b - a}}.
nlohmann::json comparison_json(const RunMemory& a, const RunMemory& b);
std::string comparison_html(const RunMemory& a, const RunMemory& b);

}  // namespace ferry
