// `--metrics FILE`: one JSON line per optimizer step, appended and flushed as training goes (step, loss,
// lr, grad norm, tokens/s, loss scale, eval loss, and the device's memory by category), so a crashed run
// keeps its history up to its last step and a resumed one continues the same file. Each line is written
// whole or not at all: a write that fails (a full disk) is cut back to the last whole line, the file
// stops, and the run goes on after saying so once (its summary keeps every step).
#pragma once

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

  // Appends `step` (the summary's entry for the step) with the device's memory, in one write.
  void append(const nlohmann::json& step, const Device& device);
  // Why the file stopped taking lines (empty while it takes them).
  const std::string& stopped() const { return stopped_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::string stopped_;
};

}  // namespace ferry
