// The SVG timeline of one memory profile (see timeline_svg.h).
#include "engine/report/timeline_svg.h"

#include <algorithm>

#include "allocator/byte_size.h"
#include "engine/report/html_page.h"
#include "engine/report/memory_report.h"

namespace ferry {
namespace {

constexpr double kWidth = 1040, kLeft = 72, kRight = 24, kTop = 34, kPlotHeight = 300, kLaneHeight = 16;

std::string_view op_color(const std::string& kind) {
  if (kind == "forward") return "#6b9bd1";
  if (kind == "backward") return "#e39c5a";
  if (kind == "recompute") return "#c7548a";
  if (kind == "loss") return "#7a7a7a";
  if (kind == "optimizer") return "#5aa469";
  return "#bbbbbb";
}

struct Scale {
  double duration;  // ns
  double maximum;   // bytes
  double x(double time_ns) const { return kLeft + (kWidth - kLeft - kRight) * (duration > 0 ? time_ns / duration : 0.0); }
  double y(double bytes) const { return kTop + kPlotHeight * (1.0 - (maximum > 0 ? bytes / maximum : 0.0)); }
};

}  // namespace

TimelineAxes timeline_axes(const MemoryProfile& profile, const MemoryTimeline& timeline) {
  const double top = static_cast<double>(std::max(timeline.peak_reserved, timeline.peak_allocated));
  const bool show_limit = profile.memory_limit > 0 && static_cast<double>(profile.memory_limit) < 1.6 * top;
  return TimelineAxes{std::max(static_cast<double>(profile.end_ns - profile.start_ns), 1.0),
                      show_limit ? std::max(top, static_cast<double>(profile.memory_limit)) : top};
}

std::string timeline_svg(const MemoryProfile& profile, const MemoryTimeline& timeline, const TimelineAxes& axes) {
  const std::vector<TimelinePoint> points = downsample_timeline(timeline, 1500);
  const auto duration = static_cast<double>(profile.end_ns - profile.start_ns);
  const bool show_limit = profile.memory_limit > 0 && static_cast<double>(profile.memory_limit) <= axes.max_bytes;
  const std::vector<double> ticks = html::axis_ticks(axes.max_bytes, 6, true);
  const Scale scale{std::max(axes.duration_ns, 1.0), ticks.back()};
  const double lanes_top = kTop + kPlotHeight + 26;
  const double height = lanes_top + 2 * kLaneHeight + 12;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + html::number(kWidth) + "\" height=\"" + html::number(height) +
                    "\" viewBox=\"0 0 " + html::number(kWidth) + " " + html::number(height) + "\" role=\"img\" aria-label=\"memory timeline\">\n";
  for (double tick : ticks) {
    svg += "<line class=\"grid\" x1=\"" + html::number(kLeft) + "\" x2=\"" + html::number(kWidth - kRight) + "\" y1=\"" + html::number(scale.y(tick)) + "\" y2=\"" +
           html::number(scale.y(tick)) + "\"/><text x=\"" + html::number(kLeft - 6) + "\" y=\"" + html::number(scale.y(tick) + 4) + "\" text-anchor=\"end\">" +
           html::short_bytes(tick) + "</text>\n";
  }
  // Stacked areas, held flat between events (memory changes in steps).
  std::vector<double> lower(points.size(), 0.0);
  for (MemoryCategory category : kAllMemoryCategories) {
    const std::size_t c = category_index(category);
    if (timeline.category_peak[c] == 0) continue;
    std::string upper_path, lower_path;
    for (std::size_t i = 0; i < points.size(); ++i) {
      const double x0 = scale.x(static_cast<double>(points[i].time_ns));
      const double x1 = scale.x(i + 1 < points.size() ? static_cast<double>(points[i + 1].time_ns) : duration);
      const double upper = lower[i] + static_cast<double>(points[i].allocated[c]);
      upper_path += (i == 0 ? "M" : "L") + html::number(x0) + "," + html::number(scale.y(upper)) + "L" + html::number(x1) + "," + html::number(scale.y(upper));
      lower_path = "L" + html::number(x1) + "," + html::number(scale.y(lower[i])) + "L" + html::number(x0) + "," + html::number(scale.y(lower[i])) + lower_path;
      lower[i] = upper;
    }
    svg += "<path d=\"" + upper_path + lower_path + "Z\" fill=\"" + std::string(html::category_color(category)) +
           "\" fill-opacity=\"0.85\"><title>" + std::string(category_name(category)) + ": peak " +
           format_bytes(static_cast<std::size_t>(timeline.category_peak[c])) + "</title></path>\n";
  }
  std::string reserved_path;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const double x0 = scale.x(static_cast<double>(points[i].time_ns));
    const double x1 = scale.x(i + 1 < points.size() ? static_cast<double>(points[i + 1].time_ns) : duration);
    const double y = scale.y(static_cast<double>(points[i].reserved));
    reserved_path += (i == 0 ? "M" : "L") + html::number(x0) + "," + html::number(y) + "L" + html::number(x1) + "," + html::number(y);
  }
  svg += "<path d=\"" + reserved_path + "\" fill=\"none\" stroke=\"#222\" stroke-width=\"1.2\" stroke-dasharray=\"4 3\"><title>reserved: peak " +
         format_bytes(static_cast<std::size_t>(timeline.peak_reserved)) + "</title></path>\n";
  if (show_limit) {
    const double y = scale.y(static_cast<double>(profile.memory_limit));
    svg += "<line x1=\"" + html::number(kLeft) + "\" x2=\"" + html::number(kWidth - kRight) + "\" y1=\"" + html::number(y) + "\" y2=\"" + html::number(y) +
           "\" stroke=\"#c00\" stroke-dasharray=\"6 3\"/><text x=\"" + html::number(kLeft + 4) + "\" y=\"" + html::number(y - 4) +
           "\" style=\"fill:#c00\">device memory limit " + format_bytes(profile.memory_limit) + "</text>\n";
  }
  // The peak.
  const double peak_x = scale.x(static_cast<double>(timeline.peak().time_ns));
  const double peak_y = scale.y(static_cast<double>(timeline.peak_allocated));
  svg += "<line x1=\"" + html::number(peak_x) + "\" x2=\"" + html::number(peak_x) + "\" y1=\"" + html::number(kTop - 10) + "\" y2=\"" + html::number(kTop + kPlotHeight) +
         "\" stroke=\"#e8a33d\" stroke-width=\"1.5\"/><circle cx=\"" + html::number(peak_x) + "\" cy=\"" + html::number(peak_y) +
         "\" r=\"4\" fill=\"#e8a33d\" stroke=\"#000\"/><text x=\"" + html::number(std::min(peak_x + 6, kWidth - 260)) + "\" y=\"" + html::number(kTop - 14) +
         "\" style=\"font-weight:600\">peak " + format_bytes(static_cast<std::size_t>(timeline.peak_allocated)) + " allocated</text>\n";
  // Axes.
  svg += "<line class=\"axis\" x1=\"" + html::number(kLeft) + "\" x2=\"" + html::number(kWidth - kRight) + "\" y1=\"" + html::number(kTop + kPlotHeight) +
         "\" y2=\"" + html::number(kTop + kPlotHeight) + "\"/>\n";
  const std::vector<double> time_ticks = html::axis_ticks(scale.duration / 1e6, 8, false);  // milliseconds
  for (double tick : time_ticks) {
    if (tick * 1e6 > scale.duration * 1.001) break;
    const double x = scale.x(tick * 1e6);
    svg += "<text x=\"" + html::number(x) + "\" y=\"" + html::number(kTop + kPlotHeight + 15) + "\" text-anchor=\"middle\">" + html::number(tick) +
           " ms</text>\n";
  }
  // Lanes: steps, then the ops inside them.
  svg += "<text x=\"" + html::number(kLeft - 6) + "\" y=\"" + html::number(lanes_top + 12) + "\" text-anchor=\"end\">steps</text><text x=\"" + html::number(kLeft - 6) +
         "\" y=\"" + html::number(lanes_top + kLaneHeight + 12) + "\" text-anchor=\"end\">ops</text>\n";
  for (const OpMarker& op : profile.ops) {
    if (op.kind == "copy" || op.depth > 1) continue;
    const bool step = op.kind == "step";
    const double x0 = scale.x(static_cast<double>(op.start_ns - profile.start_ns));
    const double x1 = scale.x(static_cast<double>((op.end_ns == 0 ? profile.end_ns : op.end_ns) - profile.start_ns));
    const double y = lanes_top + (step ? 0 : kLaneHeight);
    const std::string label = step ? op.name : op.kind + " " + op.name;
    svg += "<rect x=\"" + html::number(x0) + "\" y=\"" + html::number(y) + "\" width=\"" + html::number(std::max(x1 - x0, 0.5)) + "\" height=\"" +
           html::number(kLaneHeight - 2) + "\" fill=\"" + std::string(step ? "#d9d9d9" : op_color(op.kind)) + "\"><title>" + html::escape(label) + " (" +
           format_duration_ns(op.end_ns - op.start_ns) + ")</title></rect>\n";
    if (step && x1 - x0 > 40) svg += "<text x=\"" + html::number(x0 + 4) + "\" y=\"" + html::number(y + 11) + "\">" + html::escape(op.name) + "</text>\n";
  }
  return svg + "</svg>\n";
}

}  // namespace ferry
