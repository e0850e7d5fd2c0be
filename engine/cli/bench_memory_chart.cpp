// memory.html of `ferry bench memory`: one horizontal bar per configuration, stacked by the bytes
// each category held at the peak, with peak reserved marked; theory rows beside the measured ones.
#include <algorithm>
#include <cstdio>

#include "allocator/byte_size.h"
#include "engine/cli/bench_memory.h"
#include "engine/report/html_page.h"

namespace ferry {
namespace {

constexpr double kWidth = 1040, kLabel = 330, kRight = 30, kBar = 22, kGap = 10, kTop = 20;

}  // namespace

std::string bench_memory_html(const nlohmann::json& result) {
  const nlohmann::json& rows = result["rows"];
  double maximum = 0;
  for (const nlohmann::json& row : rows) {
    maximum = std::max({maximum, row["peak_allocated"].get<double>(), row.value("peak_reserved", 0.0)});
  }
  const std::vector<double> ticks = html::axis_ticks(maximum, 8, true);
  const double scale = (kWidth - kLabel - kRight) / ticks.back();
  const double height = kTop + static_cast<double>(rows.size()) * (kBar + kGap) + 30;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + html::number(kWidth) + "\" height=\"" + html::number(height) + "\" viewBox=\"0 0 " +
                    html::number(kWidth) + " " + html::number(height) + "\" role=\"img\" aria-label=\"peak memory per configuration\">\n";
  const double bottom = kTop + static_cast<double>(rows.size()) * (kBar + kGap);
  for (double tick : ticks) {
    const double x = kLabel + tick * scale;
    svg += "<line class=\"grid\" x1=\"" + html::number(x) + "\" x2=\"" + html::number(x) + "\" y1=\"" + html::number(kTop - 6) + "\" y2=\"" + html::number(bottom) +
           "\"/><text x=\"" + html::number(x) + "\" y=\"" + html::number(bottom + 14) + "\" text-anchor=\"middle\">" + html::short_bytes(tick) + "</text>\n";
  }
  double y = kTop;
  for (const nlohmann::json& row : rows) {
    const bool theory = row["kind"] == "theory";
    svg += "<text x=\"" + html::number(kLabel - 8) + "\" y=\"" + html::number(y + kBar * 0.7) + "\" text-anchor=\"end\"" +
           (theory ? " style=\"font-style:italic\"" : "") + ">" + html::escape(row["name"].get<std::string>()) + "</text>\n";
    double x = kLabel;
    for (MemoryCategory category : kAllMemoryCategories) {
      const double bytes = row["at_peak"][std::string(category_name(category))].get<double>();
      if (bytes <= 0) continue;
      svg += "<rect x=\"" + html::number(x) + "\" y=\"" + html::number(y) + "\" width=\"" + html::number(bytes * scale) + "\" height=\"" + html::number(kBar) +
             "\" fill=\"" + std::string(html::category_color(category)) + "\"" + (theory ? " fill-opacity=\"0.45\"" : "") + "><title>" +
             html::escape(row["name"].get<std::string>()) + ": " +
             (theory && category == MemoryCategory::optimizer_states ? std::string("model states") : std::string(category_name(category))) + " " +
             format_bytes(static_cast<std::size_t>(bytes)) + "</title></rect>\n";
      x += bytes * scale;
    }
    const double label_x = std::max(x, kLabel + row.value("peak_reserved", 0.0) * scale) + 6;
    svg += "<text x=\"" + html::number(label_x) + "\" y=\"" + html::number(y + kBar * 0.7) + "\">" +
           format_bytes(row["peak_allocated"].get<std::size_t>()) + "</text>\n";
    if (row.contains("peak_reserved")) {
      const double reserved_x = kLabel + row["peak_reserved"].get<double>() * scale;
      svg += "<line x1=\"" + html::number(reserved_x) + "\" x2=\"" + html::number(reserved_x) + "\" y1=\"" + html::number(y - 3) + "\" y2=\"" + html::number(y + kBar + 3) +
             "\" stroke=\"#222\" stroke-width=\"2\"><title>peak reserved " + format_bytes(row["peak_reserved"].get<std::size_t>()) +
             "</title></line>\n";
    }
    y += kBar + kGap;
  }
  svg += "</svg>\n";

  const nlohmann::json& model = result["model"];
  const nlohmann::json& run = result["run"];
  std::string body = "<h1>ferry bench memory: " + html::escape(model["name"].get<std::string>()) + "</h1>\n<p class=\"meta\">" +
                     std::to_string(model["parameters"].get<std::int64_t>()) + " parameters, " + run["precision"].get<std::string>() + ", batch " +
                     run["micro_batch"].dump() + " x seq " + run["seq"].dump() + " x grad-accum " + run["grad_accum"].dump() +
                     "; one training step per configuration as a dry run on the meta device (the allocator's exact peaks).</p>\n";
  body += html::category_legend({MemoryCategory::parameters, MemoryCategory::gradients, MemoryCategory::optimizer_states,
                                 MemoryCategory::activations, MemoryCategory::workspace});
  body += svg;
  body += "<p class=\"meta\">Bars: bytes per category at the moment of the peak; black tick: peak reserved. Faded rows: theory, "
          "ZeRO's 16 bytes per parameter for model states (drawn in the optimizer colour) plus Korthikanti et al.'s activations.</p>\n";
  body += "<h2>Table</h2>\n<table><tr><th>configuration</th><th>peak allocated</th><th>peak reserved</th><th>activation peak</th>"
          "<th>vs none</th><th>activations smaller by</th><th>extra FLOPs</th></tr>\n";
  for (const nlohmann::json& row : rows) {
    char ratio[32], reduction[32] = "", flops[32] = "";
    std::snprintf(ratio, sizeof ratio, "%.3fx", row["ratio_to_baseline"].get<double>());
    if (row.contains("activation_reduction")) std::snprintf(reduction, sizeof reduction, "%.2fx", row["activation_reduction"].get<double>());
    if (row.contains("recompute_flops_fraction")) std::snprintf(flops, sizeof flops, "+%.1f%%", 100.0 * row["recompute_flops_fraction"].get<double>());
    body += "<tr><td>" + html::escape(row["name"].get<std::string>()) + "</td><td>" + format_bytes(row["peak_allocated"].get<std::size_t>()) +
            "</td><td>" + (row.contains("peak_reserved") ? format_bytes(row["peak_reserved"].get<std::size_t>()) : "") + "</td><td>" +
            format_bytes(row["activation_peak"].get<std::size_t>()) + "</td><td>" + ratio + "</td><td>" + reduction + "</td><td>" + flops +
            "</td></tr>\n";
  }
  body += "</table>\n";
  return html::page("ferry bench memory: " + model["name"].get<std::string>(), body);
}

}  // namespace ferry
