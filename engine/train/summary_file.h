// Writes a summary JSON file atomically (temporary file, fsync, rename), so a reader never sees a
// half-written summary.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace ferry {

void write_summary_file(const std::string& path, const nlohmann::json& summary);

}  // namespace ferry
