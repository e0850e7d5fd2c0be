#include "engine/cli/report_command.h"
#include "engine/core/bounded_json.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "engine/cli/run_input.h"
#include "engine/core/atomic_file.h"
#include "engine/core/memory_profile_file.h"
#include "engine/report/memory_report.h"
#include "engine/report/run_comparison.h"
#include "engine/report/summary_file.h"
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
  report->add_option("--summary", options.summary,
                     "Also write the peaks as JSON here, in bytes: allocated (a PyTorch snapshot: requested, the sizes its trace "
                     "records), reserved and each category's, and the events read");
  report->add_option("--torch-snapshot", options.torch_snapshot, "Also write the profile as a PyTorch memory snapshot (opens in pytorch.org/memory_viz)");
}

std::vector<std::string> rank_profile_directories(const std::string& directory) {
  // Every rank-N below the directory (N a number), so a missing rank is named instead of ending the list.
  std::set<int> found;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("rank-") || !entry.is_directory()) continue;
    int rank = -1;
    const char* digits = name.c_str() + 5;
    const auto [end, parsed] = std::from_chars(digits, name.c_str() + name.size(), rank);
    if (parsed == std::errc() && end == name.c_str() + name.size() && rank >= 0 && name == "rank-" + std::to_string(rank)) found.insert(rank);
  }
  std::vector<std::string> ranks;
  std::string missing;
  for (int rank = 0; !found.empty() && rank <= *found.rbegin(); ++rank) {
    if (found.contains(rank)) {
      ranks.push_back((std::filesystem::path(directory) / ("rank-" + std::to_string(rank))).string());
    } else {
      missing += (missing.empty() ? "" : ", ") + std::string("rank-") + std::to_string(rank);
    }
  }
  if (!missing.empty()) {
    throw std::invalid_argument("'" + directory + "' holds the profiles of ranks up to rank-" + std::to_string(*found.rbegin()) + " but not " +
                                missing + ": copy the missing ranks' profiles back, or report one rank (ferry report " + directory +
                                "/rank-" + std::to_string(*found.rbegin()) + ")");
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
  write_file_atomically(trace_path.string(), json_text(nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}));
  std::printf("  wrote %s (every rank on one timeline: chrome://tracing, ui.perfetto.dev) and report.html in each rank's directory\n",
              trace_path.c_str());
  return 0;
}

// The same file or directory, however named (a relative path, a link).
bool same_path(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code error;
  if (std::filesystem::exists(a, error) && std::filesystem::exists(b, error)) return std::filesystem::equivalent(a, b, error);
  return std::filesystem::weakly_canonical(a, error) == std::filesystem::weakly_canonical(b, error);
}

// An output that names an input would overwrite what the report reads: refused before anything is read.
void refuse_output_over_input(const std::string& flag, const std::string& output, const std::vector<std::string>& inputs) {
  if (output.empty()) return;
  for (const std::string& input : inputs) {
    if (!input.empty() && same_path(output, input)) {
      throw ProfileError(flag + " '" + output + "' is the report's input '" + input + "': it would be overwritten; write to another path");
    }
  }
}

int compare_runs(const ReportOptions& options) {
  if (options.compare.size() != 2) {
    throw ProfileError("--compare takes two runs (profile directories, PyTorch snapshots or --summary files), got " +
                       std::to_string(options.compare.size()));
  }
  refuse_output_over_input("--output", options.output, options.compare);
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
  for (const auto& [flag, path] : {std::pair<const char*, std::string>{"--torch-snapshot", options.torch_snapshot}, {"--summary", options.summary},
                                   {"--output", options.output}}) {
    refuse_output_over_input(flag, path, {options.directory});
  }
  std::filesystem::path directory(options.directory);
  if (!options.output.empty()) {
    directory = options.output;
  } else if (snapshot_input) {
    directory = directory.parent_path() / (directory.stem().string() + "-report");
  }
  const MemoryProfile profile = read_profile_or_snapshot(options.directory);
  const MemoryTimeline timeline = build_memory_timeline(profile);
  prepare_output_directory(directory);
  std::fputs(memory_report_table(profile, timeline, options.largest).c_str(), stdout);
  if (profile.metadata.contains("category_rule")) std::printf("  %s\n", profile.metadata["category_rule"].get<std::string>().c_str());
  write_file_atomically((directory / "trace.json").string(), json_text(chrome_trace(profile, timeline)));
  write_file_atomically((directory / "report.html").string(), report_html(profile, timeline, options.largest));
  std::printf("\n  wrote %s (chrome://tracing, ui.perfetto.dev) and %s\n", (directory / "trace.json").c_str(),
              (directory / "report.html").c_str());
  if (!options.summary.empty()) {
    nlohmann::json summary = {{"source", options.directory},
                              {"events", profile.events.size()},
                              {"peak_reserved", timeline.peak_reserved},
                              {"category_peaks", bytes_by_category(timeline.category_peak)},
                              {"out_of_memory_events", timeline.out_of_memory_events}};
    // A PyTorch trace records each allocation's requested size; its allocator's whole blocks (allocated_bytes)
    // are what `ferry replay` of the trace gives.
    summary[snapshot_input ? "peak_requested" : "peak_allocated"] = timeline.peak_allocated;
    write_summary_file(options.summary, summary);
  }
  if (!options.torch_snapshot.empty()) {
    write_torch_snapshot_file(options.torch_snapshot, profile_to_snapshot(profile));
    std::printf("  wrote %s (a PyTorch memory snapshot: pytorch.org/memory_viz, ferry report)\n", options.torch_snapshot.c_str());
  }
  return 0;
}

}  // namespace ferry
