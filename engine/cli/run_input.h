// Runs compared on the command line (`ferry report --compare A B`, `ferry bench memory --baseline RUN`):
// each a profile directory, a PyTorch memory snapshot or a --summary JSON, read into engine/report's
// RunMemory; and the comparison's outputs (the table on stdout, compare.json and compare.html).
#pragma once

#include <filesystem>
#include <string>

#include "engine/report/run_comparison.h"

namespace ferry {

// Throws ProfileError (or the snapshot reader's errors) naming `path` when it is none of them.
RunMemory load_run_memory(const std::string& path);
// Prints comparison_table(a, b) and writes DIRECTORY/compare.json and DIRECTORY/compare.html.
void write_comparison(const RunMemory& a, const RunMemory& b, const std::string& directory);

// Creates the directory a report writes into, before the report prints anything; throws ProfileError
// naming it and the fix when it cannot be made.
void prepare_output_directory(const std::filesystem::path& directory);

}  // namespace ferry
