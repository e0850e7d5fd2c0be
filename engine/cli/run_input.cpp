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
      throw ProfileError(path + " is neither a PyTorch snapshot nor a summary JSON (" + describe_json_error(error) + ")");
    }
    return run_memory_from_summary(path, summary);
  }
  if (!rank_profile_directories(path).empty()) {
    throw ProfileError(path + " holds one profile per rank; compare one rank's: " + path + "/rank-R");
  }
  return run_memory_from_profile(path, read_profile_or_snapshot(path));
}

void prepare_output_directory(const std::filesystem::path& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error || !std::filesystem::is_directory(directory)) {
    throw ProfileError("cannot write the report into '" + directory.string() + "': " + (error ? error.message() : "it is not a directory") +
                       "; give --output a directory ferry can create");
  }
}

void write_comparison(const RunMemory& a, const RunMemory& b, const std::string& directory) {
  const std::filesystem::path folder(directory);
  prepare_output_directory(folder);  // before the table: a report that cannot be written fails before it prints
  std::fputs(comparison_table(a, b).c_str(), stdout);
  write_file_atomically((folder / "compare.json").string(), json_text(comparison_json(a, b), 1));
  write_file_atomically((folder / "compare.html").string(), comparison_html(a, b));
  std::printf("\n  wrote %s and %s\n", (folder / "compare.html").c_str(), (folder / "compare.json").c_str());
}

}  // namespace ferry
