#include "engine/report/html_page.h"

#include <cmath>
#include <cstdio>

namespace ferry::html {

std::string escape(std::string_view text) {
  std::string result;
  result.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': result += "&amp;"; break;
      case '<': result += "&lt;"; break;
      case '>': result += "&gt;"; break;
      case '"': result += "&quot;"; break;
      case '\'': result += "&#39;"; break;
      default: result += c;
    }
  }
  return result;
}

std::string_view category_color(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::parameters: return "#4e79a7";
    case MemoryCategory::gradients: return "#f28e2b";
    case MemoryCategory::optimizer_states: return "#59a14f";
    case MemoryCategory::activations: return "#e15759";
    case MemoryCategory::activation_gradients: return "#ff9d9a";
    case MemoryCategory::workspace: return "#b07aa1";
    case MemoryCategory::communication: return "#76b7b2";
    case MemoryCategory::staging: return "#edc948";
    case MemoryCategory::uncategorized: return "#9c9c9c";
  }
  return "#000000";
}

std::vector<double> axis_ticks(double maximum, int count, bool bytes) {
  if (!(maximum > 0)) return {0.0};
  const double raw = maximum / std::max(count, 1);
  double step = 0;
  if (bytes) {
    const double unit = std::pow(1024.0, std::floor(std::log(raw) / std::log(1024.0)));
    for (double m : {1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0}) {
      if (m * unit >= raw) {
        step = m * unit;
        break;
      }
    }
  } else {
    const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
      if (m * magnitude >= raw) {
        step = m * magnitude;
        break;
      }
    }
  }
  std::vector<double> ticks;
  for (double value = 0; value < maximum + step; value += step) ticks.push_back(value);
  return ticks;
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

std::string short_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.4g %s", bytes, kUnits[unit]);
  return text;
}

std::string category_legend(const std::vector<MemoryCategory>& categories) {
  std::string legend = "<div class=\"legend\">";
  for (MemoryCategory category : categories) {
    legend += "<span><i style=\"background:" + std::string(category_color(category)) + "\"></i>" +
              std::string(category_name(category)) + "</span>";
  }
  return legend + "</div>";
}

std::string page(std::string_view title, std::string_view body) {
  std::string text = R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>)";
  text += escape(title);
  text += R"(</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}
.meta{color:#555}.peak{background:#fff6e0;border-left:4px solid #e8a33d;padding:8px 12px;margin:12px 0}
table{border-collapse:collapse;margin:8px 0}th,td{padding:3px 10px;text-align:right;border-bottom:1px solid #e4e4e4}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}td.tag{text-align:left;font-family:ui-monospace,monospace}
.legend span{margin-right:14px;white-space:nowrap}.legend i{display:inline-block;width:11px;height:11px;margin-right:5px;vertical-align:-1px}
svg text{font:11px system-ui,sans-serif;fill:#333}svg .axis{stroke:#999;stroke-width:1}svg .grid{stroke:#eee;stroke-width:1}
</style>
<script>window.addEventListener('error', function (e) { document.body.dataset.error = String(e.message); });</script>
</head><body>
)";
  text += body;
  text += R"(
<script>
window.addEventListener('load', function () {
  var svgs = document.querySelectorAll('svg');
  var ok = svgs.length > 0;
  svgs.forEach(function (svg) { var box = svg.getBBox(); if (!(box.width > 0 && box.height > 0)) ok = false; });
  document.body.dataset.rendered = ok ? 'ok' : 'empty';
});
</script>
</body></html>
)";
  return text;
}

}  // namespace ferry::html
