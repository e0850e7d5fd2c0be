// A memory profile as `ferry report DIR` shows it (the command: engine/cli/report_command.h): the
// per-category table (current, peak, the breakdown at the peak, the largest live allocations there with
// their tags), the Chrome trace (trace.json) and the self-contained SVG timeline (report.html).
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/memory_timeline.h"

namespace ferry {

// Pieces of the report, also used by tests.
std::string format_duration_ns(std::uint64_t nanoseconds);
// "gpt2-tiny on cpu, fp32, batch 8 x seq 128 x grad-accum 1, checkpointing none".
std::string describe_run(const nlohmann::json& metadata);
// "device memory limit 2.00 GiB", or "no device memory limit recorded" (0: a PyTorch snapshot's).
std::string describe_memory_limit(std::size_t memory_limit);
// "55.93 MiB allocated at 12.3 ms, during step 1 > backward h.3; activations are 73.4% of it".
std::string describe_peak(const MemoryTimeline& timeline);
std::string memory_report_table(const MemoryProfile& profile, const MemoryTimeline& timeline, std::size_t largest);
nlohmann::json chrome_trace(const MemoryProfile& profile, const MemoryTimeline& timeline);
std::string report_html(const MemoryProfile& profile, const MemoryTimeline& timeline, std::size_t largest);

}  // namespace ferry
