// Writes a summary JSON file atomically (temporary file, fsync, rename), so a reader never sees a
// half-written summary; and the per-category byte maps summaries share.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <string>

#include "allocator/allocator_statistics.h"

namespace ferry {

void write_summary_file(const std::string& path, const nlohmann::json& summary);

// {category name: bytes} for every category.
nlohmann::json bytes_by_category(const std::array<std::int64_t, kNumMemoryCategories>& bytes);
// Each category's own peak of allocated bytes.
std::array<std::int64_t, kNumMemoryCategories> category_peaks(const AllocatorStatistics& statistics);

}  // namespace ferry
