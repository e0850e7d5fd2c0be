#include "engine/report/allocator_state.h"

#include <algorithm>
#include <array>
#include <cstdio>

#include "allocator/byte_size.h"
#include "engine/report/html_page.h"

namespace ferry {
namespace {

constexpr double kWidth = 1040, kLabel = 190, kRight = 120, kBar = 14, kGap = 4, kTop = 6;
constexpr std::array<SegmentKind, 4> kKinds = {SegmentKind::small, SegmentKind::large, SegmentKind::expandable, SegmentKind::before_profile};

struct KindTotals {
  std::size_t segments = 0;
  std::int64_t reserved = 0;
  std::int64_t allocated = 0;
};

std::array<KindTotals, kKinds.size()> totals_by_kind(const AllocatorLayout& layout) {
  std::array<KindTotals, kKinds.size()> totals{};
  for (const LayoutSegment& segment : layout.segments) {
    KindTotals& each = totals[static_cast<std::size_t>(segment.kind)];
    ++each.segments;
    each.reserved += static_cast<std::int64_t>(segment.size);
    each.allocated += static_cast<std::int64_t>(segment.allocated_bytes());
  }
  totals[static_cast<std::size_t>(SegmentKind::before_profile)].reserved += layout.unplaced_reserved;
  return totals;
}

std::string percent(std::int64_t part, std::int64_t whole) {
  char text[16];
  std::snprintf(text, sizeof text, "%.1f%%", whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
  return text;
}

}  // namespace

nlohmann::json segments_by_kind(const AllocatorLayout& layout) {
  nlohmann::json result = nlohmann::json::object();
  const auto totals = totals_by_kind(layout);
  for (SegmentKind kind : kKinds) {
    const KindTotals& each = totals[static_cast<std::size_t>(kind)];
    if (each.reserved > 0) result[std::string(segment_kind_name(kind))] = {each.segments, each.reserved, each.reserved - each.allocated};
  }
  return result;
}

std::string unallocated_by_segment_kind(const AllocatorLayout& layout) {
  std::string out = "  reserved but unallocated at the peak, by segment kind:\n";
  char line[256];
  const auto totals = totals_by_kind(layout);
  for (SegmentKind kind : kKinds) {
    const KindTotals& each = totals[static_cast<std::size_t>(kind)];
    if (each.reserved == 0) continue;
    const std::int64_t unallocated = each.reserved - each.allocated;
    std::snprintf(line, sizeof line, "  %-18s %4zu segments %12s reserved %12s unallocated (%s)\n", std::string(segment_kind_name(kind)).c_str(),
                  each.segments, format_bytes(static_cast<std::size_t>(each.reserved)).c_str(),
                  format_bytes(static_cast<std::size_t>(unallocated)).c_str(), percent(unallocated, each.reserved).c_str());
    out += line;
  }
  return out;
}

std::string allocator_state_svg(const AllocatorLayout& layout, std::size_t max_segments) {
  std::vector<const LayoutSegment*> order;
  for (const LayoutSegment& segment : layout.segments) order.push_back(&segment);
  std::stable_sort(order.begin(), order.end(), [](const LayoutSegment* a, const LayoutSegment* b) { return a->size > b->size; });
  const std::size_t shown = std::min(order.size(), max_segments);
  const double largest = order.empty() ? 1.0 : static_cast<double>(order.front()->size);
  const double scale = (kWidth - kLabel - kRight) / largest;
  const double height = kTop + static_cast<double>(shown + 1) * (kBar + kGap) + 8;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"allocator-state\" width=\"" + html::number(kWidth) + "\" height=\"" +
                    html::number(height) + "\" viewBox=\"0 0 " + html::number(kWidth) + " " + html::number(height) +
                    "\" role=\"img\" aria-label=\"allocator state at the peak\">\n";
  for (std::size_t row = 0; row < shown; ++row) {
    const LayoutSegment& segment = *order[row];
    const double y = kTop + static_cast<double>(row) * (kBar + kGap);
    svg += "<text x=\"" + html::number(kLabel - 6) + "\" y=\"" + html::number(y + kBar - 3) + "\" text-anchor=\"end\">" +
           std::string(segment_kind_name(segment.kind)) + " " + html::short_bytes(static_cast<double>(segment.size)) + "</text>\n";
    for (const LayoutBlock& block : segment.blocks) {
      const double x = kLabel + static_cast<double>(block.address - segment.address) * scale;
      const std::string what = block.allocated ? std::string(category_name(block.category)) + (block.tag.empty() ? "" : " " + block.tag)
                                               : std::string("cached (reserved, unallocated)");
      svg += "<rect x=\"" + html::number(x) + "\" y=\"" + html::number(y) + "\" width=\"" + html::number(std::max(static_cast<double>(block.size) * scale, 0.5)) +
             "\" height=\"" + html::number(kBar) + "\" fill=\"" + std::string(block.allocated ? html::category_color(block.category) : "#e2e2e2") +
             "\" stroke=\"#fff\" stroke-width=\"0.5\"><title>" + html::escape(what) + ": " + format_bytes(block.size) + "</title></rect>\n";
    }
    const auto unallocated = static_cast<std::int64_t>(segment.size - segment.allocated_bytes());
    svg += "<text x=\"" + html::number(kLabel + static_cast<double>(segment.size) * scale + 6) + "\" y=\"" + html::number(y + kBar - 3) + "\">" +
           percent(unallocated, static_cast<std::int64_t>(segment.size)) + " unallocated</text>\n";
  }
  std::string rest;
  if (order.size() > shown) rest = std::to_string(order.size() - shown) + " smaller segments not drawn. ";
  if (layout.unplaced_reserved > 0) {
    rest += format_bytes(static_cast<std::size_t>(layout.unplaced_reserved)) + " reserved before the profile began, in segments its events do not show.";
  }
  if (!rest.empty()) {
    svg += "<text x=\"" + html::number(kLabel) + "\" y=\"" + html::number(kTop + static_cast<double>(shown) * (kBar + kGap) + kBar - 3) + "\">" +
           html::escape(rest) + "</text>\n";
  }
  return svg + "</svg>\n";
}

}  // namespace ferry
