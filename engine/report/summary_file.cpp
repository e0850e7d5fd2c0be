#include "engine/report/summary_file.h"
#include "engine/core/bounded_json.h"

#include "engine/core/atomic_file.h"

namespace ferry {

void write_summary_file(const std::string& path, const nlohmann::json& summary) {
  write_file_atomically(path, json_text(summary, 2) + "\n");
}

nlohmann::json bytes_by_category(const std::array<std::int64_t, kNumMemoryCategories>& bytes) {
  nlohmann::json result = nlohmann::json::object();
  for (MemoryCategory category : kAllMemoryCategories) result[std::string(category_name(category))] = bytes[category_index(category)];
  return result;
}

std::array<std::int64_t, kNumMemoryCategories> category_peaks(const AllocatorStatistics& statistics) {
  std::array<std::int64_t, kNumMemoryCategories> peaks{};
  for (std::size_t c = 0; c < kNumMemoryCategories; ++c) peaks[c] = statistics.category_allocated_bytes[c].peak;
  return peaks;
}

}  // namespace ferry
