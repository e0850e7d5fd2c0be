#include "engine/cli/report_command.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "engine/cli/run_input.h"
#include "engine/core/atomic_file.h"
#include "engine/report/memory_report.h"
#include "engine/report/run_comparison.h"
#include "engine/snapshot/snapshot_profile.h"

namespace ferry {

void add_report_command(CLI::App& app, ReportOptions& options) {
  CLI::App* report = app.add_subcommand(
      "report", "Report a memory profile (ferry train --profile DIR) or a PyTorch memory snapshot: table, trace.json, report.html");
  report->add_option("directory", options.directory, "The profile directory, or a PyTorch snapshot (torch.cuda.memory._dump_snapshot)");
  report->add_option("--largest", options.largest, "Live allocations at the peak to list (default 10)");
  report->add_option("--output", options.output, "Directory for trace.json and report.html (default: the profile's, or SNAPSHOT-report)");
  report->add_option("--compare", options.compare, "Two runs side by side: each a profile directory, a PyTorch snapshot or a --summary JSON")
      ->expected(2);
  report->add_option("--torch-snapshot", options.torch_snapshot, "Also write the profile as a PyTorch memory snapshot (opens in pytorch.org/memory_viz)");
}

std::vector<std::string> rank_profile_directories(const std::string& directory) {
  std::vector<std::string> ranks;
  for (int rank = 0;; ++rank) {
    const std::filesystem::path path = std::filesystem::path(directory) / ("rank-" + std::to_string(rank));
    if (!std::filesystem::is_directory(path)) break;
    ranks.push_back(path.string());
  }
  return ranks;
}

namespace {

// A pipeline's profile: each rank's table and report.html, and one trace with a process per rank, its
// events shifted onto a common clock (the ranks' monotonic clocks are the machine's).
int report_pipeline_profiles(const ReportOptions& options, const std::vector<std::string>& ranks) {
  std::vector<MemoryProfile> profiles;
  for (const std::string& directory : ranks) profiles.push_back(read_memory_profile(directory));
  std::uint64_t origin = profiles.front().clock_start_ns;
  for (const MemoryProfile& profile : profiles) origin = std::min(origin, profile.clock_start_ns);
  nlohmann::json events = nlohmann::json::array();
  for (std::size_t rank = 0; rank < profiles.size(); ++rank) {
    const MemoryTimeline timeline = build_memory_timeline(profiles[rank]);
    std::printf("rank %zu (%s):\n", rank, ranks[rank].c_str());
    std::fputs(memory_report_table(profiles[rank], timeline, options.largest).c_str(), stdout);
    std::printf("\n");
    write_file_atomically((std::filesystem::path(ranks[rank]) / "report.html").string(), report_html(profiles[rank], timeline, options.largest));
    const double shift = static_cast<double>(profiles[rank].clock_start_ns - origin) / 1000.0;
    const nlohmann::json trace = chrome_trace(profiles[rank], timeline);
    for (nlohmann::json event : trace["traceEvents"]) {
      event["pid"] = rank;
      if (event.contains("ts")) event["ts"] = event["ts"].get<double>() + shift;
      if (event["ph"] == "M" && event["name"] == "process_name") event["args"]["name"] = "rank " + std::to_string(rank) + ": " + event["args"]["name"].get<std::string>();
      events.push_back(std::move(event));
    }
  }
  const std::filesystem::path trace_path = std::filesystem::path(options.directory) / "trace.json";
  write_file_atomically(trace_path.string(), nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump());
  std::printf("  wrote %s (every rank on one timeline: chrome://tracing, ui.perfetto.dev) and report.html in each rank's directory\n",
              trace_path.c_str());
  return 0;
}

int compare_runs(const ReportOptions& options) {
  write_comparison(load_run_memory(options.compare[0]), load_run_memory(options.compare[1]),
                   options.output.empty() ? "ferry-compare" : options.output);
  return 0;
}

}  // namespace

int run_report_command(const ReportOptions& options) {
  if (!options.compare.empty()) return compare_runs(options);
  if (options.directory.empty()) throw ProfileError("ferry report needs a profile directory or a PyTorch snapshot (or --compare A B)");
  if (const std::vector<std::string> ranks = rank_profile_directories(options.directory); !ranks.empty()) {
    return report_pipeline_profiles(options, ranks);
  }
  const bool snapshot_input = std::filesystem::is_regular_file(options.directory) && looks_like_pickle_file(options.directory);
  const MemoryProfile profile = read_profile_or_snapshot(options.directory);
  const MemoryTimeline timeline = build_memory_timeline(profile);
  std::fputs(memory_report_table(profile, timeline, options.largest).c_str(), stdout);
  if (profile.metadata.contains("category_rule")) std::printf("  %s\n", profile.metadata["category_rule"].get<std::string>().c_str());
  std::filesystem::path directory(options.directory);
  if (!options.output.empty()) {
    directory = options.output;
  } else if (snapshot_input) {
    directory = directory.parent_path() / (directory.stem().string() + "-report");
  }
  std::filesystem::create_directories(directory);
  write_file_atomically((directory / "trace.json").string(), chrome_trace(profile, timeline).dump());
  write_file_atomically((directory / "report.html").string(), report_html(profile, timeline, options.largest));
  std::printf("\n  wrote %s (chrome://tracing, ui.perfetto.dev) and %s\n", (directory / "trace.json").c_str(),
              (directory / "report.html").c_str());
  if (!options.torch_snapshot.empty()) {
    write_torch_snapshot_file(options.torch_snapshot, profile_to_snapshot(profile));
    std::printf("  wrote %s (a PyTorch memory snapshot: pytorch.org/memory_viz, ferry report)\n", options.torch_snapshot.c_str());
  }
  return 0;
}

}  // namespace ferry
