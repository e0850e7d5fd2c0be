#include "allocator/byte_size.h"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <utility>

namespace ferry {

std::size_t parse_byte_size(std::string_view text) {
  const std::string original(text);
  std::size_t position = 0;
  while (position < text.size() && (std::isdigit(static_cast<unsigned char>(text[position])) || text[position] == '.')) {
    ++position;
  }
  const std::string number(text.substr(0, position));
  std::string_view unit = text.substr(position);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  static constexpr std::array<std::pair<std::string_view, double>, 16> kUnits = {{
      {"", 1.0},          {"B", 1.0},        {"KB", 1e3},       {"MB", 1e6},
      {"GB", 1e9},        {"TB", 1e12},      {"KiB", 1024.0},   {"MiB", 1048576.0},
      {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"K", 1024.0}, {"M", 1048576.0},
      {"G", 1073741824.0}, {"T", 1099511627776.0}, {"k", 1024.0}, {"m", 1048576.0},
  }};
  double multiplier = -1;
  for (const auto& [name, value] : kUnits) {
    if (unit == name) multiplier = value;
  }
  char* end = nullptr;
  const double value = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (multiplier < 0 || number.empty() || end != number.c_str() + number.size() || value < 0) {
    throw std::invalid_argument("'" + original + "' is not a byte size (write e.g. 512MiB, 2GiB, 80GB or 1048576)");
  }
  const double bytes = std::round(value * multiplier);
  if (bytes > static_cast<double>(std::numeric_limits<std::size_t>::max() / 2)) {
    throw std::invalid_argument("'" + original + "' is too large a byte size");
  }
  return static_cast<std::size_t>(bytes);
}

std::string format_bytes(std::size_t bytes) {
  static constexpr std::array<const char*, 5> kNames = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < kNames.size()) {
    value /= 1024.0;
    ++unit;
  }
  char buffer[64];
  if (unit == 0) {
    std::snprintf(buffer, sizeof buffer, "%zu B", bytes);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.2f %s", value, kNames[unit]);
  }
  return buffer;
}

std::string format_seconds(double seconds) {
  char text[32];
  if (seconds < 1e-3) {
    std::snprintf(text, sizeof text, "%.0f us", seconds * 1e6);
  } else if (seconds < 1) {
    std::snprintf(text, sizeof text, "%.1f ms", seconds * 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.2f s", seconds);
  }
  return text;
}

}  // namespace ferry
