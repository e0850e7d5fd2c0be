// `--metrics FILE`: one JSON line per optimizer step, appended and flushed as training goes (step, loss,
// lr, grad norm, tokens/s, loss scale, eval loss, and the device's memory by category), so a crashed run
// keeps its history up to its last step and a resumed one continues the same file.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/core/device.h"

namespace ferry {

class MetricsFile {
 public:
  // Empty path: a file that writes nothing. Opening fails before training starts, naming the path.
  explicit MetricsFile(const std::string& path);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;

  // Appends `step` (the summary's entry for the step) with the device's memory, and flushes.
  void append(const nlohmann::json& step, const Device& device);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace ferry
