#include "engine/train/summary_file.h"

#include "engine/core/atomic_file.h"

namespace ferry {

void write_summary_file(const std::string& path, const nlohmann::json& summary) {
  write_file_atomically(path, summary.dump(2) + "\n");
}

}  // namespace ferry
