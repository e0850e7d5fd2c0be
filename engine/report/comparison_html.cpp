// The comparison page of `ferry report --compare A B`: the peaks and each run's breakdown at its peak as
// a table and as two stacked bars on one scale, then both timelines drawn on the same axes (time and
// bytes), one above the other. Self-contained like report.html.
#include <algorithm>

#include "allocator/byte_size.h"
#include "engine/report/html_page.h"
#include "engine/report/run_comparison.h"
#include "engine/report/timeline_interaction.h"

namespace ferry {
namespace {

constexpr double kWidth = 1040, kLabel = 60, kRight = 30, kBar = 26, kGap = 12, kTop = 12;

std::string bytes_cell(std::int64_t bytes) { return "<td>" + format_bytes(static_cast<std::size_t>(std::max<std::int64_t>(bytes, 0))) + "</td>"; }

std::string difference_cell(std::int64_t bytes) {
  const std::string sign = bytes > 0 ? "+" : bytes < 0 ? "-" : "";
  return "<td>" + sign + format_bytes(static_cast<std::size_t>(bytes < 0 ? -bytes : bytes)) + "</td>";
}

std::string peaks_table(const RunMemory& a, const RunMemory& b) {
  std::string table = "<table><tr><th></th><th>A</th><th>B</th><th>B - A</th></tr>\n";
  const auto row = [&](const std::string& name, std::int64_t x, std::int64_t y) {
    table += "<tr><td>" + name + "</td>" + bytes_cell(x) + bytes_cell(y) + difference_cell(y - x) + "</tr>\n";
  };
  row("<b>peak allocated</b>", a.peak_allocated, b.peak_allocated);
  row("<b>peak reserved</b>", a.peak_reserved, b.peak_reserved);
  for (MemoryCategory category : kAllMemoryCategories) {
    const std::size_t c = category_index(category);
    if (a.at_peak[c] == 0 && b.at_peak[c] == 0) continue;
    row("<i style=\"display:inline-block;width:10px;height:10px;margin-right:6px;background:" + std::string(html::category_color(category)) +
            "\"></i>" + std::string(category_name(category)) + " at the peak",
        a.at_peak[c], b.at_peak[c]);
  }
  return table + "</table>\n";
}

// Two bars, A over B, each stacked by its breakdown at its peak, with its peak reserved as a tick.
std::string breakdown_bars(const RunMemory& a, const RunMemory& b) {
  const std::vector<double> ticks =
      html::axis_ticks(static_cast<double>(std::max({a.peak_allocated, b.peak_allocated, a.peak_reserved, b.peak_reserved})), 8, true);
  const double scale = (kWidth - kLabel - kRight) / std::max(ticks.back(), 1.0);
  const double bottom = kTop + 2 * (kBar + kGap);
  const double height = bottom + 22;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + html::number(kWidth) + "\" height=\"" + html::number(height) + "\" viewBox=\"0 0 " +
                    html::number(kWidth) + " " + html::number(height) + "\" role=\"img\" aria-label=\"breakdown at each run's peak\">\n";
  for (double tick : ticks) {
    const double x = kLabel + tick * scale;
    svg += "<line class=\"grid\" x1=\"" + html::number(x) + "\" x2=\"" + html::number(x) + "\" y1=\"" + html::number(kTop) + "\" y2=\"" + html::number(bottom) +
           "\"/><text x=\"" + html::number(x) + "\" y=\"" + html::number(bottom + 14) + "\" text-anchor=\"middle\">" + html::short_bytes(tick) + "</text>\n";
  }
  const RunMemory* runs[] = {&a, &b};
  for (int r = 0; r < 2; ++r) {
    const RunMemory& run = *runs[r];
    const double y = kTop + r * (kBar + kGap);
    svg += "<text x=\"" + html::number(kLabel - 8) + "\" y=\"" + html::number(y + kBar / 2 + 4) + "\" text-anchor=\"end\" style=\"font-weight:600\">" +
           std::string(r == 0 ? "A" : "B") + "</text>\n";
    double x = kLabel;
    for (MemoryCategory category : kAllMemoryCategories) {
      const std::int64_t bytes = run.at_peak[category_index(category)];
      if (bytes <= 0) continue;
      const double width = static_cast<double>(bytes) * scale;
      svg += "<rect x=\"" + html::number(x) + "\" y=\"" + html::number(y) + "\" width=\"" + html::number(width) + "\" height=\"" + html::number(kBar) +
             "\" fill=\"" + std::string(html::category_color(category)) + "\"><title>" + std::string(r == 0 ? "A" : "B") + " " +
             std::string(category_name(category)) + ": " + format_bytes(static_cast<std::size_t>(bytes)) + "</title></rect>\n";
      x += width;
    }
    const double reserved_x = kLabel + static_cast<double>(run.peak_reserved) * scale;
    svg += "<line x1=\"" + html::number(reserved_x) + "\" x2=\"" + html::number(reserved_x) + "\" y1=\"" + html::number(y - 3) + "\" y2=\"" +
           html::number(y + kBar + 3) + "\" stroke=\"#222\" stroke-width=\"2\" stroke-dasharray=\"3 2\"><title>peak reserved " +
           format_bytes(static_cast<std::size_t>(run.peak_reserved)) + "</title></line>\n";
  }
  return svg + "</svg>\n";
}

}  // namespace

std::string comparison_html(const RunMemory& a, const RunMemory& b) {
  std::string body = "<h1>ferry memory comparison</h1>\n<p class=\"meta\"><b>A</b> " + html::escape(a.label) + ": " + html::escape(a.description) +
                     "<br><b>B</b> " + html::escape(b.label) + ": " + html::escape(b.description) + "</p>\n";
  std::vector<MemoryCategory> shown;
  for (MemoryCategory category : kAllMemoryCategories) {
    const std::size_t c = category_index(category);
    if (a.at_peak[c] > 0 || b.at_peak[c] > 0 || (a.timeline && a.timeline->category_peak[c] > 0) || (b.timeline && b.timeline->category_peak[c] > 0)) {
      shown.push_back(category);
    }
  }
  body += "<h2>Peaks, and the breakdown at each run's peak</h2>\n" + peaks_table(a, b) + html::category_legend(shown) + "\n" + breakdown_bars(a, b);
  // Both timelines on the same axes: the longer run's duration, the larger run's bytes.
  TimelineAxes axes{1, 0};
  for (const RunMemory* run : {&a, &b}) {
    if (!run->timeline) continue;
    const TimelineAxes own = timeline_axes(*run->profile, *run->timeline);
    axes.duration_ns = std::max(axes.duration_ns, own.duration_ns);
    axes.max_bytes = std::max(axes.max_bytes, own.max_bytes);
  }
  body += "<h2>Timelines on the same axes</h2>\n";
  for (const RunMemory* run : {&a, &b}) {
    body += "<h3>" + std::string(run == &a ? "A" : "B") + ": " + html::escape(run->label) + "</h3>\n";
    body += run->timeline ? timeline_figure(*run->profile, *run->timeline, axes, run == &a ? "timeline-a" : "timeline-b")
                          : "<p class=\"meta\">No timeline: a summary JSON holds the peaks only.</p>\n";
  }
  body += timeline_script();
  return html::page("ferry memory comparison: " + a.label + " vs " + b.label, body);
}

}  // namespace ferry
