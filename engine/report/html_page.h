// Pieces shared by ferry's self-contained HTML reports (report.html, the bench memory chart): text
// escaping, one colour per memory category, round axis ticks, and the page shell with inline CSS and a
// render check (no network access, no external files).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "allocator/memory_category.h"

namespace ferry::html {

std::string escape(std::string_view text);
std::string_view category_color(MemoryCategory category);
// Up to about `count` round values from 0 to at least `maximum` (1, 2, 2.5, 5 x 10^k, or binary bytes).
std::vector<double> axis_ticks(double maximum, int count, bool bytes);
// A coordinate with one decimal, for SVG attributes.
std::string number(double value);
// "12.5 MiB" without trailing zeros, for axis labels.
std::string short_bytes(double bytes);
// A whole page: `body` inside, the shared CSS, and a script that marks <body data-rendered="ok"> once
// every <svg> has laid out with a non-empty box (data-error names any script error, from the <head> on), for
// headless tests.
std::string page(std::string_view title, std::string_view body);
// A legend of the categories given.
std::string category_legend(const std::vector<MemoryCategory>& categories);

}  // namespace ferry::html
