#include "engine/cli/run_input.h"
#include "engine/core/bounded_json.h"

#include <cstdio>
#include <filesystem>

#include "engine/cli/report_command.h"
#include "engine/core/atomic_file.h"
#include "engine/snapshot/snapshot_profile.h"
#include "engine/snapshot/torch_snapshot.h"

namespace ferry {

RunMemory load_run_memory(const std::string& path) {
  if (std::filesystem::is_regular_file(path) && !looks_like_pickle_file(path)) {
    nlohmann::json summary;
    try {
      summary = nlohmann::json::parse(read_text_file(path));
    } catch (const nlohmann::json::exception& error) {
      throw ProfileError(path + " is neither a PyTorch snapshot nor a summary JSON (" + error.what() + ")");
    }
    return run_memory_from_summary(path, summary);
  }
  if (!rank_profile_directories(path).empty()) {
    throw ProfileError(path + " holds one profile per rank; compare one rank's: " + path + "/rank-R");
  }
  return run_memory_from_profile(path, read_profile_or_snapshot(path));
}

void write_comparison(const RunMemory& a, const RunMemory& b, const std::string& directory) {
  std::fputs(comparison_table(a, b).c_str(), stdout);
  const std::filesystem::path folder(directory);
  std::filesystem::create_directories(folder);
  write_file_atomically((folder / "compare.json").string(), json_text(comparison_json(a, b), 1));
  write_file_atomically((folder / "compare.html").string(), comparison_html(a, b));
  std::printf("\n  wrote %s and %s\n", (folder / "compare.html").c_str(), (folder / "compare.json").c_str());
}

}  // namespace ferry
