// `ferry report DIR|SNAPSHOT.pickle`: reads DIR/profile.json (or each rank's, DIR/rank-R, of a pipeline)
// or a PyTorch memory snapshot, prints the per-category table and writes trace.json (Chrome trace) and
// report.html (engine/report/ renders them); --torch-snapshot writes the profile as a PyTorch snapshot;
// --compare A B puts two runs side by side (compare.html, compare.json).
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
  std::string output;         // where trace.json and report.html go; empty: the profile directory, or SNAPSHOT-report/
  std::string torch_snapshot;  // also write the profile as a PyTorch snapshot here
  std::vector<std::string> compare;  // two runs (profile, snapshot or summary JSON) to put side by side
  std::string summary;                // also write the peaks (bytes) as JSON here
};

void add_report_command(CLI::App& app, ReportOptions& options);
// A pipeline's profile directory holds one profile per rank: DIR/rank-0, DIR/rank-1, ... (empty: none).
std::vector<std::string> rank_profile_directories(const std::string& directory);
int run_report_command(const ReportOptions& options);

}  // namespace ferry
