#include "engine/report/run_comparison.h"
#include "engine/core/bounded_json.h"

#include <cstdio>
#include <cstdlib>

#include "allocator/byte_size.h"
#include "engine/report/memory_report.h"
#include "engine/report/summary_file.h"

namespace ferry {
namespace {

std::string signed_bytes(std::int64_t bytes) {
  return (bytes > 0 ? "+" : bytes < 0 ? "-" : "") + format_bytes(static_cast<std::size_t>(std::llabs(bytes)));
}

std::string ratio(std::int64_t b, std::int64_t a) {
  if (a <= 0) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.3fx", static_cast<double>(b) / static_cast<double>(a));
  return text;
}

nlohmann::json run_json(const RunMemory& run) {
  return {{"label", run.label}, {"description", run.description}, {"peak_allocated", run.peak_allocated},
          {"peak_reserved", run.peak_reserved}, {"at_peak", bytes_by_category(run.at_peak)}};
}

}  // namespace

RunMemory run_memory_from_profile(std::string label, MemoryProfile profile) {
  RunMemory run;
  run.label = std::move(label);
  run.description = describe_run(profile.metadata);
  MemoryTimeline timeline = build_memory_timeline(profile);
  run.peak_allocated = timeline.peak_allocated;
  run.peak_reserved = timeline.peak_reserved;
  run.at_peak = timeline.peak().allocated;
  run.profile = std::move(profile);
  run.timeline = std::move(timeline);
  return run;
}

RunMemory run_memory_from_summary(std::string label, const nlohmann::json& summary) {
  RunMemory run;
  run.label = std::move(label);
  try {
    const nlohmann::json& memory = summary.at("memory");
    run.peak_allocated = memory.at("peak_allocated").get<std::int64_t>();
    run.peak_reserved = memory.at("peak_reserved").get<std::int64_t>();
    for (MemoryCategory category : kAllMemoryCategories) {
      run.at_peak[category_index(category)] = memory.at("at_peak").value(std::string(category_name(category)), std::int64_t{0});
    }
    const nlohmann::json model = summary.value("model", nlohmann::json::object());
    const nlohmann::json settings = summary.value("run", nlohmann::json::object());
    run.description = "summary: " + model.value("name", std::string("?")) + " on " + settings.value("device", std::string("?")) + ", " +
                      settings.value("precision", std::string("?"));
  } catch (const nlohmann::json::exception& error) {
    throw ProfileError(run.label + " is not a ferry summary with memory.peak_allocated, peak_reserved and at_peak (" + describe_json_error(error) + ")");
  }
  return run;
}

std::string comparison_table(const RunMemory& a, const RunMemory& b) {
  std::string out = "memory comparison\n  A  " + a.label + ": " + a.description + "\n  B  " + b.label + ": " + b.description + "\n\n";
  char line[256];
  const auto row = [&](const std::string& name, std::int64_t x, std::int64_t y) {
    std::snprintf(line, sizeof line, "  %-22s %12s %12s %13s %9s\n", name.c_str(), format_bytes(static_cast<std::size_t>(x)).c_str(),
                  format_bytes(static_cast<std::size_t>(y)).c_str(), signed_bytes(y - x).c_str(), ratio(y, x).c_str());
    out += line;
  };
  std::snprintf(line, sizeof line, "  %-22s %12s %12s %13s %9s\n", "", "A", "B", "B - A", "B / A");
  out += line;
  row("peak allocated", a.peak_allocated, b.peak_allocated);
  row("peak reserved", a.peak_reserved, b.peak_reserved);
  out += "  at each run's peak:\n";
  for (MemoryCategory category : kAllMemoryCategories) {
    const std::size_t c = category_index(category);
    if (a.at_peak[c] == 0 && b.at_peak[c] == 0) continue;
    row("  " + std::string(category_name(category)), a.at_peak[c], b.at_peak[c]);
  }
  return out;
}

nlohmann::json comparison_json(const RunMemory& a, const RunMemory& b) {
  nlohmann::json difference = {{"peak_allocated", b.peak_allocated - a.peak_allocated}, {"peak_reserved", b.peak_reserved - a.peak_reserved}};
  std::array<std::int64_t, kNumMemoryCategories> at_peak{};
  for (std::size_t c = 0; c < kNumMemoryCategories; ++c) at_peak[c] = b.at_peak[c] - a.at_peak[c];
  difference["at_peak"] = bytes_by_category(at_peak);
  return {{"a", run_json(a)}, {"b", run_json(b)}, {"difference", difference}};
}

}  // namespace ferry
