#include "engine/report/memory_report.h"

#include <algorithm>
#include <cstdio>

#include "allocator/byte_size.h"
#include "engine/report/allocator_state.h"

namespace ferry {
namespace {

}  // namespace

std::string describe_run(const nlohmann::json& metadata) {
  std::string text = metadata.value("model", "?") + " on " + metadata.value("device", "?") + ", " + metadata.value("precision", "?");
  if (metadata.contains("micro_batch")) {
    text += ", batch " + metadata["micro_batch"].dump() + " x seq " + metadata.value("seq", nlohmann::json(0)).dump() +
            " x grad-accum " + metadata.value("grad_accum", nlohmann::json(1)).dump();
  }
  if (metadata.contains("checkpointing")) text += ", checkpointing " + metadata["checkpointing"].get<std::string>();
  return text;
}

namespace {

std::string percent(std::int64_t part, std::int64_t whole) {
  char text[16];
  std::snprintf(text, sizeof text, "%.1f%%", whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
  return text;
}

}  // namespace

std::string describe_memory_limit(std::size_t memory_limit) {
  return memory_limit > 0 ? "device memory limit " + format_bytes(memory_limit) : std::string("no device memory limit recorded");
}

std::string format_duration_ns(std::uint64_t nanoseconds) {
  char text[32];
  const double seconds = static_cast<double>(nanoseconds) * 1e-9;
  if (seconds >= 1.0) {
    std::snprintf(text, sizeof text, "%.3f s", seconds);
  } else {
    std::snprintf(text, sizeof text, "%.3f ms", seconds * 1e3);
  }
  return text;
}

std::string describe_peak(const MemoryTimeline& timeline) {
  const TimelinePoint& peak = timeline.peak();
  std::string text = format_bytes(static_cast<std::size_t>(timeline.peak_allocated)) + " allocated at " + format_duration_ns(peak.time_ns);
  if (!timeline.ops_at_peak.empty()) {
    text += ", during ";
    for (std::size_t i = 0; i < timeline.ops_at_peak.size(); ++i) {
      const OpMarker& op = timeline.ops_at_peak[i];
      if (i > 0) text += " > ";
      text += op.kind == "step" ? op.name : op.kind + " " + op.name;
    }
  }
  const auto largest = std::max_element(peak.allocated.begin(), peak.allocated.end());
  const auto category = static_cast<MemoryCategory>(largest - peak.allocated.begin());
  text += "; " + std::string(category_name(category)) + " are " + percent(*largest, timeline.peak_allocated) + " of it";
  return text;
}

std::string memory_report_table(const MemoryProfile& profile, const MemoryTimeline& timeline, std::size_t largest) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "memory profile: %s\n", describe_run(profile.metadata).c_str());
  out += line;
  std::snprintf(line, sizeof line, "  %zu allocator events and %zu ops over %s; %s\n", profile.events.size(), profile.ops.size(),
                format_duration_ns(profile.end_ns - profile.start_ns).c_str(), describe_memory_limit(profile.memory_limit).c_str());
  out += line;
  if (!profile.failure.empty()) out += "  the run failed here: " + profile.failure.substr(0, profile.failure.find('\n')) + "\n";
  if (profile.failure.empty() && timeline.out_of_memory_events > 0) {
    out += "  " + std::to_string(timeline.out_of_memory_events) + " allocation(s) ran out of memory (oom events) and the run went on\n";
  }
  std::snprintf(line, sizeof line, "\n  %-18s %12s %12s %12s %8s\n", "category", "current", "peak", "at peak", "share");
  out += line;
  for (MemoryCategory category : kAllMemoryCategories) {
    const std::size_t c = category_index(category);
    if (timeline.category_peak[c] == 0) continue;
    std::snprintf(line, sizeof line, "  %-18s %12s %12s %12s %8s\n", std::string(category_name(category)).c_str(),
                  format_bytes(static_cast<std::size_t>(timeline.last().allocated[c])).c_str(),
                  format_bytes(static_cast<std::size_t>(timeline.category_peak[c])).c_str(),
                  format_bytes(static_cast<std::size_t>(timeline.peak().allocated[c])).c_str(),
                  percent(timeline.peak().allocated[c], timeline.peak_allocated).c_str());
    out += line;
  }
  std::snprintf(line, sizeof line, "  %-18s %12s %12s %12s %8s\n", "allocated", format_bytes(static_cast<std::size_t>(timeline.last().total())).c_str(),
                format_bytes(static_cast<std::size_t>(timeline.peak_allocated)).c_str(),
                format_bytes(static_cast<std::size_t>(timeline.peak_allocated)).c_str(), "100.0%");
  out += line;
  std::snprintf(line, sizeof line, "  %-18s %12s %12s %12s\n", "reserved", format_bytes(static_cast<std::size_t>(timeline.last().reserved)).c_str(),
                format_bytes(static_cast<std::size_t>(timeline.peak_reserved)).c_str(),
                format_bytes(static_cast<std::size_t>(timeline.peak().reserved)).c_str());
  out += line;
  out += unallocated_by_segment_kind(allocator_layout_at(profile, timeline.peak_event_count));
  out += "\n  peak: " + describe_peak(timeline) + "\n";
  out += "  largest live allocations at the peak:\n";
  for (std::size_t i = 0; i < std::min(largest, timeline.live_at_peak.size()); ++i) {
    const LiveAllocation& each = timeline.live_at_peak[i];
    std::snprintf(line, sizeof line, "  %12s  %-18s %s\n", format_bytes(each.size).c_str(), std::string(category_name(each.category)).c_str(),
                  each.tag.empty() ? "(no tag)" : each.tag.c_str());
    out += line;
  }
  if (timeline.live_at_peak.size() > largest) {
    std::snprintf(line, sizeof line, "  ... and %zu more\n", timeline.live_at_peak.size() - largest);
    out += line;
  }
  return out;
}

nlohmann::json chrome_trace(const MemoryProfile& profile, const MemoryTimeline& timeline) {
  constexpr int kProcess = 1;
  auto microseconds = [](std::uint64_t nanoseconds) { return static_cast<double>(nanoseconds) / 1000.0; };
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", kProcess},
                    {"args", {{"name", "ferry " + profile.metadata.value("device", std::string("device")) + " memory"}}}});
  std::vector<StreamId> streams;
  for (const OpMarker& op : profile.ops) {
    if (std::find(streams.begin(), streams.end(), op.stream) == streams.end()) streams.push_back(op.stream);
  }
  for (StreamId stream : streams) {
    const bool communication = std::any_of(profile.ops.begin(), profile.ops.end(),
                                           [&](const OpMarker& op) { return op.stream == stream && op.kind == "communication"; });
    const std::string name = stream == 0       ? std::string("stream 0 (compute)")
                             : communication ? "stream " + std::to_string(stream) + " (communication)"
                                             : "stream " + std::to_string(stream);
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", kProcess}, {"tid", stream}, {"args", {{"name", name}}}});
  }
  // One counter track per category, plus reserved bytes: a sample wherever the value changes.
  std::array<std::int64_t, kNumMemoryCategories> last{};
  last.fill(-1);
  std::int64_t last_reserved = -1;
  for (const TimelinePoint& point : timeline.points) {
    for (MemoryCategory category : kAllMemoryCategories) {
      const std::size_t c = category_index(category);
      if (point.allocated[c] == last[c] || timeline.category_peak[c] == 0) continue;
      last[c] = point.allocated[c];
      events.push_back({{"ph", "C"}, {"name", std::string(category_name(category))}, {"pid", kProcess},
                        {"ts", microseconds(point.time_ns)}, {"args", {{"bytes", point.allocated[c]}}}});
    }
    if (point.reserved != last_reserved) {
      last_reserved = point.reserved;
      events.push_back({{"ph", "C"}, {"name", "reserved"}, {"pid", kProcess}, {"ts", microseconds(point.time_ns)},
                        {"args", {{"bytes", point.reserved}}}});
    }
  }
  for (const OpMarker& op : profile.ops) {
    const std::uint64_t start = op.start_ns - profile.start_ns;
    const std::uint64_t end = (op.end_ns == 0 ? profile.end_ns : op.end_ns) - profile.start_ns;
    events.push_back({{"ph", "X"}, {"name", op.kind == "step" || op.kind == "copy" ? op.name : op.kind + " " + op.name},
                      {"cat", op.kind}, {"pid", kProcess}, {"tid", op.stream}, {"ts", microseconds(start)},
                      {"dur", microseconds(end - start)}});
  }
  events.push_back({{"ph", "i"}, {"name", "peak allocated " + format_bytes(static_cast<std::size_t>(timeline.peak_allocated))},
                    {"s", "g"}, {"pid", kProcess}, {"tid", 0}, {"ts", microseconds(timeline.peak().time_ns)}});
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"},
          {"otherData",
           {{"generator", "ferry report"},
            {"run", profile.metadata},
            {"peak", describe_peak(timeline)},
            {"segments_at_peak", segments_by_kind(allocator_layout_at(profile, timeline.peak_event_count))}}}};
}

}  // namespace ferry
