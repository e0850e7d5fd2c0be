// `ferry report DIR`: reads DIR/profile.json, prints the per-category table (current, peak, the
// breakdown at the peak, the largest live allocations there with their tags) and writes DIR/trace.json
// (Chrome trace) and DIR/report.html (self-contained SVG timeline).
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/memory_timeline.h"

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

// Pieces of the report, also used by tests.
std::string format_duration_ns(std::uint64_t nanoseconds);
// "gpt2-tiny on cpu, fp32, batch 8 x seq 128 x grad-accum 1, checkpointing none".
std::string describe_run(const nlohmann::json& metadata);
// "55.93 MiB allocated at 12.3 ms, during step 1 > backward h.3; activations are 73.4% of it".
std::string describe_peak(const MemoryTimeline& timeline);
std::string memory_report_table(const MemoryProfile& profile, const MemoryTimeline& timeline, std::size_t largest);
nlohmann::json chrome_trace(const MemoryProfile& profile, const MemoryTimeline& timeline);
std::string report_html(const MemoryProfile& profile, const MemoryTimeline& timeline, std::size_t largest);

}  // namespace ferry
