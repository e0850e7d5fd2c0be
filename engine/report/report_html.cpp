// report.html: one self-contained page with an SVG stacked-area timeline of allocated memory by
// category (reserved as a line, the peak marked), a lane of the ops that ran, the peak explained,
// and the breakdown tables.
#include <algorithm>
#include <cstdio>

#include "allocator/byte_size.h"
#include "engine/report/allocator_state.h"
#include "engine/report/html_page.h"
#include "engine/report/memory_report.h"
#include "engine/report/timeline_interaction.h"

namespace ferry {
namespace {

std::string breakdown_table(const MemoryTimeline& timeline) {
  std::string table = "<table><tr><th>category</th><th>current</th><th>peak</th><th>at the peak</th><th>share at the peak</th></tr>\n";
  for (MemoryCategory category : kAllMemoryCategories) {
    const std::size_t c = category_index(category);
    if (timeline.category_peak[c] == 0) continue;
    char share[16];
    std::snprintf(share, sizeof share, "%.1f%%", 100.0 * static_cast<double>(timeline.peak().allocated[c]) / static_cast<double>(std::max<std::int64_t>(timeline.peak_allocated, 1)));
    table += "<tr><td><i style=\"display:inline-block;width:10px;height:10px;margin-right:6px;background:" +
             std::string(html::category_color(category)) + "\"></i>" + std::string(category_name(category)) + "</td><td>" +
             format_bytes(static_cast<std::size_t>(timeline.last().allocated[c])) + "</td><td>" +
             format_bytes(static_cast<std::size_t>(timeline.category_peak[c])) + "</td><td>" +
             format_bytes(static_cast<std::size_t>(timeline.peak().allocated[c])) + "</td><td>" + share + "</td></tr>\n";
  }
  table += "<tr><th>allocated</th><th>" + format_bytes(static_cast<std::size_t>(timeline.last().total())) + "</th><th>" +
           format_bytes(static_cast<std::size_t>(timeline.peak_allocated)) + "</th><th>" +
           format_bytes(static_cast<std::size_t>(timeline.peak_allocated)) + "</th><th>100%</th></tr>\n";
  table += "<tr><td>reserved</td><td>" + format_bytes(static_cast<std::size_t>(timeline.last().reserved)) + "</td><td>" +
           format_bytes(static_cast<std::size_t>(timeline.peak_reserved)) + "</td><td>" +
           format_bytes(static_cast<std::size_t>(timeline.peak().reserved)) + "</td><td></td></tr>\n";
  return table + "</table>\n";
}

}  // namespace

std::string report_html(const MemoryProfile& profile, const MemoryTimeline& timeline, std::size_t largest) {
  const nlohmann::json& run = profile.metadata;
  std::string body = "<h1>ferry memory profile: " + html::escape(run.value("model", std::string("?"))) + "</h1>\n<p class=\"meta\">" +
                     html::escape(describe_run(run)) +
                     "<br>" + std::to_string(profile.events.size()) + " allocator events, " + std::to_string(profile.ops.size()) + " ops over " +
                     format_duration_ns(profile.end_ns - profile.start_ns) + "; " + describe_memory_limit(profile.memory_limit) + "</p>\n";
  if (!profile.failure.empty()) body += "<p class=\"peak\"><b>The run failed here:</b> " + html::escape(profile.failure) + "</p>\n";
  body += "<div class=\"peak\"><b>Peak:</b> " + html::escape(describe_peak(timeline)) + ".</div>\n";
  std::vector<MemoryCategory> shown;
  for (MemoryCategory category : kAllMemoryCategories) {
    if (timeline.category_peak[category_index(category)] > 0) shown.push_back(category);
  }
  body += html::category_legend(shown) + "\n" + timeline_figure(profile, timeline, timeline_axes(profile, timeline), "timeline");
  body += "<p class=\"meta\">Stacked: allocated bytes by category. Dashed: reserved bytes (segments held by the caching allocator). "
          "Lanes: steps, and the forward, backward, recompute, loss and optimizer ops inside them.</p>\n";
  body += "<h2>Breakdown</h2>\n" + breakdown_table(timeline);
  body += "<h2>Allocator state at the peak</h2>\n<p class=\"meta\">Each segment the allocator held, largest first: allocated blocks "
          "by category, cached blocks (reserved but unallocated: fragmentation) in grey.</p>\n" +
          allocator_state_svg(allocator_layout_at(profile, timeline.peak_event_count));
  body += timeline_script();
  body += "<h2>Largest live allocations at the peak</h2>\n<table><tr><th>tag</th><th>category</th><th>size</th></tr>\n";
  for (std::size_t i = 0; i < std::min(largest, timeline.live_at_peak.size()); ++i) {
    const LiveAllocation& each = timeline.live_at_peak[i];
    body += "<tr><td class=\"tag\">" + html::escape(each.tag.empty() ? "(no tag)" : each.tag) + "</td><td>" +
            std::string(category_name(each.category)) + "</td><td>" + format_bytes(each.size) + "</td></tr>\n";
  }
  body += "</table>\n";
  return html::page("ferry memory profile: " + run.value("model", std::string("?")), body);
}

}  // namespace ferry
