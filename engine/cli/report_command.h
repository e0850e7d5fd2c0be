// `ferry report DIR`: reads DIR/profile.json (or each rank's, DIR/rank-R, of a pipeline), prints the
// per-category table and writes DIR/trace.json (Chrome trace) and DIR/report.html (engine/report/ renders them).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace ferry {

struct ReportOptions {
  std::string directory;
  std::size_t largest = 10;  // live allocations listed at the peak
};

void add_report_command(CLI::App& app, ReportOptions& options);
// A pipeline's profile directory holds one profile per rank: DIR/rank-0, DIR/rank-1, ... (empty: none).
std::vector<std::string> rank_profile_directories(const std::string& directory);
int run_report_command(const ReportOptions& options);

}  // namespace ferry
