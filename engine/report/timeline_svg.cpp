// The SVG timeline of one memory profile (see timeline_svg.h).
#include "engine/report/timeline_svg.h"

#include <algorithm>

#include "allocator/byte_size.h"
#include "engine/report/html_page.h"
#include "engine/report/memory_report.h"

namespace ferry {
namespace {

constexpr double kWidth = 1040, kLeft = 72, kRight = 24, kTop = 34, kPlotHeight = 300, kLaneHeight = 16;
constexpr double kLanesTop = kTop + kPlotHeight + 26;
constexpr double kHeight = kLanesTop + 2 * kLaneHeight + 12;

struct Scale {
  double duration;  // ns
  double maximum;   // bytes
  double x(double time_ns) const { return kLeft + (kWidth - kLeft - kRight) * (duration > 0 ? time_ns / duration : 0.0); }
  double y(double bytes) const { return kTop + kPlotHeight * (1.0 - (maximum > 0 ? bytes / maximum : 0.0)); }
};

std::string attribute_times(double start_ns, double end_ns) {
  return " data-t=\"" + html::number(start_ns) + "\" data-t-end=\"" + html::number(end_ns) + "\"";
}

// Stacked areas, held flat between events (memory changes in steps), and reserved bytes as a line.
std::string data_paths(const MemoryProfile& profile, const MemoryTimeline& timeline, const Scale& scale) {
  const std::vector<TimelinePoint> points = downsample_timeline(timeline, 1500);
  const auto duration = static_cast<double>(profile.end_ns - profile.start_ns);
  const auto x_range = [&](std::size_t i) {
    return std::make_pair(scale.x(static_cast<double>(points[i].time_ns)),
                          scale.x(i + 1 < points.size() ? static_cast<double>(points[i + 1].time_ns) : duration));
  };
  std::string svg;
  std::vector<double> lower(points.size(), 0.0);
  for (MemoryCategory category : kAllMemoryCategories) {
    const std::size_t c = category_index(category);
    if (timeline.category_peak[c] == 0) continue;
    std::string upper_path, lower_path;
    for (std::size_t i = 0; i < points.size(); ++i) {
      const auto [x0, x1] = x_range(i);
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
    const auto [x0, x1] = x_range(i);
    const double y = scale.y(static_cast<double>(points[i].reserved));
    reserved_path += (i == 0 ? "M" : "L") + html::number(x0) + "," + html::number(y) + "L" + html::number(x1) + "," + html::number(y);
  }
  return svg + "<path d=\"" + reserved_path + "\" fill=\"none\" stroke=\"#222\" stroke-width=\"1.2\" stroke-dasharray=\"4 3\" vector-effect=\"non-scaling-stroke\">"
               "<title>reserved: peak " + format_bytes(static_cast<std::size_t>(timeline.peak_reserved)) + "</title></path>\n";
}

// Steps on the first lane, the ops inside them on the second; each label shown where it fits.
std::string op_lanes(const MemoryProfile& profile, const Scale& scale, const std::string& clip) {
  std::string svg = "<text x=\"" + html::number(kLeft - 6) + "\" y=\"" + html::number(kLanesTop + 12) + "\" text-anchor=\"end\">steps</text><text x=\"" +
                    html::number(kLeft - 6) + "\" y=\"" + html::number(kLanesTop + kLaneHeight + 12) + "\" text-anchor=\"end\">ops</text>\n";
  std::string rects, labels;
  for (const OpMarker& op : profile.ops) {
    if (op.kind == "copy" || op.kind == "communication" || op.depth > 1) continue;  // communication: trace.json's own track
    const bool step = op.kind == "step";
    const auto start = static_cast<double>(op.start_ns - profile.start_ns);
    const auto end = static_cast<double>((op.end_ns == 0 ? profile.end_ns : op.end_ns) - profile.start_ns);
    const double x0 = scale.x(start), x1 = scale.x(end);
    const double y = kLanesTop + (step ? 0 : kLaneHeight);
    const std::string label = step ? op.name : op.kind + " " + op.name;
    rects += "<rect x=\"" + html::number(x0) + "\" y=\"" + html::number(y) + "\" width=\"" + html::number(std::max(x1 - x0, 0.5)) + "\" height=\"" +
             html::number(kLaneHeight - 2) + "\" fill=\"" + std::string(step ? "#d9d9d9" : op_kind_color(op.kind)) + "\"><title>" + html::escape(label) +
             " (" + format_duration_ns(static_cast<std::uint64_t>(end - start)) + ")</title></rect>\n";
    labels += "<text class=\"lane-label\" x=\"" + html::number(x0 + 3) + "\" y=\"" + html::number(y + 11) + "\"" + attribute_times(start, end) +
              (x1 - x0 > 40 ? "" : " style=\"display:none\"") + ">" + html::escape(label) + "</text>\n";
  }
  return svg + "<g clip-path=\"url(#" + clip + ")\"><g class=\"zoom\">" + rects + "</g>" + labels + "</g>\n";
}

std::string time_axis(const Scale& scale) {
  std::string svg = "<line class=\"axis\" x1=\"" + html::number(kLeft) + "\" x2=\"" + html::number(kWidth - kRight) + "\" y1=\"" +
                    html::number(kTop + kPlotHeight) + "\" y2=\"" + html::number(kTop + kPlotHeight) + "\"/>\n<g class=\"time-axis\">";
  for (double tick : html::axis_ticks(scale.duration / 1e6, 8, false)) {  // milliseconds
    if (tick * 1e6 > scale.duration * 1.001) break;
    svg += "<text x=\"" + html::number(scale.x(tick * 1e6)) + "\" y=\"" + html::number(kTop + kPlotHeight + 15) + "\" text-anchor=\"middle\">" +
           html::number(tick) + " ms</text>";
  }
  return svg + "</g>\n";
}

}  // namespace

std::string_view op_kind_color(std::string_view kind) {
  if (kind == "forward") return "#6b9bd1";
  if (kind == "backward") return "#e39c5a";
  if (kind == "recompute") return "#c7548a";
  if (kind == "loss") return "#7a7a7a";
  if (kind == "optimizer") return "#5aa469";
  return "#bbbbbb";
}

TimelineAxes timeline_axes(const MemoryProfile& profile, const MemoryTimeline& timeline) {
  const double top = static_cast<double>(std::max(timeline.peak_reserved, timeline.peak_allocated));
  const bool show_limit = profile.memory_limit > 0 && static_cast<double>(profile.memory_limit) < 1.6 * top;
  return TimelineAxes{std::max(static_cast<double>(profile.end_ns - profile.start_ns), 1.0),
                      show_limit ? std::max(top, static_cast<double>(profile.memory_limit)) : top};
}

std::string timeline_svg(const MemoryProfile& profile, const MemoryTimeline& timeline, const TimelineAxes& axes, std::string_view id) {
  const std::vector<double> ticks = html::axis_ticks(axes.max_bytes, 6, true);
  const Scale scale{std::max(axes.duration_ns, 1.0), ticks.back()};
  const std::string clip = std::string(id) + "-clip";
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"" + std::string(id) + "\" class=\"timeline\" width=\"" + html::number(kWidth) +
                    "\" height=\"" + html::number(kHeight) + "\" viewBox=\"0 0 " + html::number(kWidth) + " " + html::number(kHeight) +
                    "\" role=\"img\" aria-label=\"memory timeline\" data-left=\"" + html::number(kLeft) + "\" data-width=\"" +
                    html::number(kWidth - kLeft - kRight) + "\" data-duration=\"" + html::number(scale.duration) + "\" data-plot-bottom=\"" +
                    html::number(kTop + kPlotHeight) + "\">\n<defs><clipPath id=\"" + clip + "\"><rect x=\"" + html::number(kLeft) + "\" y=\"0\" width=\"" +
                    html::number(kWidth - kLeft - kRight) + "\" height=\"" + html::number(kHeight) + "\"/></clipPath></defs>\n";
  for (double tick : ticks) {
    svg += "<line class=\"grid\" x1=\"" + html::number(kLeft) + "\" x2=\"" + html::number(kWidth - kRight) + "\" y1=\"" + html::number(scale.y(tick)) + "\" y2=\"" +
           html::number(scale.y(tick)) + "\"/><text x=\"" + html::number(kLeft - 6) + "\" y=\"" + html::number(scale.y(tick) + 4) + "\" text-anchor=\"end\">" +
           html::short_bytes(tick) + "</text>\n";
  }
  // The data layers zoom together; the peak's line inside them, its dot and label placed by time.
  const auto peak_t = static_cast<double>(timeline.peak().time_ns);
  const double peak_x = scale.x(peak_t);
  svg += "<g clip-path=\"url(#" + clip + ")\"><g class=\"zoom\">\n" + data_paths(profile, timeline, scale) + "<line x1=\"" + html::number(peak_x) +
         "\" x2=\"" + html::number(peak_x) + "\" y1=\"" + html::number(kTop - 10) + "\" y2=\"" + html::number(kTop + kPlotHeight) +
         "\" stroke=\"#e8a33d\" stroke-width=\"1.5\" vector-effect=\"non-scaling-stroke\"/></g>\n<circle cx=\"" + html::number(peak_x) + "\" cy=\"" +
         html::number(scale.y(static_cast<double>(timeline.peak_allocated))) + "\" r=\"4\" fill=\"#e8a33d\" stroke=\"#000\" data-t=\"" + html::number(peak_t) +
         "\"/>\n<line class=\"cursor\" x1=\"0\" x2=\"0\" y1=\"" + html::number(kTop) + "\" y2=\"" + html::number(kLanesTop + 2 * kLaneHeight) +
         "\" stroke=\"#000\" stroke-width=\"1\" style=\"display:none\"/></g>\n";
  svg += "<text x=\"" + html::number(std::min(peak_x + 6, kWidth - 260)) + "\" y=\"" + html::number(kTop - 14) + "\" style=\"font-weight:600\">peak " +
         format_bytes(static_cast<std::size_t>(timeline.peak_allocated)) + " allocated at " + format_duration_ns(timeline.peak().time_ns) + "</text>\n";
  if (profile.memory_limit > 0 && static_cast<double>(profile.memory_limit) <= axes.max_bytes) {
    const double y = scale.y(static_cast<double>(profile.memory_limit));
    svg += "<line x1=\"" + html::number(kLeft) + "\" x2=\"" + html::number(kWidth - kRight) + "\" y1=\"" + html::number(y) + "\" y2=\"" + html::number(y) +
           "\" stroke=\"#c00\" stroke-dasharray=\"6 3\"/><text x=\"" + html::number(kLeft + 4) + "\" y=\"" + html::number(y - 4) +
           "\" style=\"fill:#c00\">device memory limit " + format_bytes(profile.memory_limit) + "</text>\n";
  }
  return svg + time_axis(scale) + op_lanes(profile, scale, clip) + "</svg>\n";
}

}  // namespace ferry
