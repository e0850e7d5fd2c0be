#include "engine/train/metrics_file.h"
#include "engine/core/bounded_json.h"

#include <cerrno>
#include <cstring>

#include "engine/core/atomic_file.h"
#include "engine/report/summary_file.h"

namespace ferry {

MetricsFile::MetricsFile(const std::string& path) : path_(path) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) {
    throw FileError(path, 0, std::string("cannot open the --metrics file for appending: ") + std::strerror(errno));
  }
}

MetricsFile::~MetricsFile() {
  if (file_ != nullptr) std::fclose(file_);  // errors were reported by each append's flush
}

void MetricsFile::append(const nlohmann::json& step, const Device& device) {
  if (file_ == nullptr) return;
  const AllocatorStatistics statistics = device.allocator().statistics();
  std::array<std::int64_t, kNumMemoryCategories> current{};
  for (std::size_t c = 0; c < kNumMemoryCategories; ++c) current[c] = statistics.category_allocated_bytes[c].current;
  nlohmann::json line = step;
  line["memory"] = {{"allocated_by_category", bytes_by_category(current)},
                    {"max_by_category", bytes_by_category(category_peaks(statistics))},
                    {"peak_allocated", statistics.allocated_bytes.all().peak},
                    {"peak_reserved", statistics.reserved_bytes.all().peak}};
  const std::string text = json_text(line) + "\n";
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) {
    throw FileError(path_, 0, std::string("cannot append to the --metrics file: ") + std::strerror(errno));
  }
}

}  // namespace ferry
