#include "allocator/allocator_config.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "allocator/allocator_errors.h"

namespace ferry {

namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

[[noreturn]] void bad_value(std::string_view key, std::string_view value, std::string_view expected) {
  throw AllocatorConfigError("FERRY_ALLOC_CONF: bad value '" + std::string(value) + "' for " + std::string(key) +
                             ": expected " + std::string(expected));
}

std::size_t parse_unsigned(std::string_view key, std::string_view value, std::string_view expected) {
  value = trim(value);
  std::size_t result = 0;
  auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), result);
  if (error != std::errc() || end != value.data() + value.size() || value.empty()) {
    bad_value(key, value, expected);
  }
  return result;
}

std::size_t parse_divisions(std::string_view key, std::string_view value) {
  const std::string expected = "a power of two from 1 to " + std::to_string(kMaxRoundupDivisions) + ", such as 1, 2, 4 or 8";
  const std::size_t divisions = parse_unsigned(key, value, expected);
  if ((divisions != 0 && !std::has_single_bit(divisions)) || divisions > kMaxRoundupDivisions) bad_value(key, value, expected);
  return divisions;
}

std::size_t band_of_megabytes(std::string_view key, std::string_view value, std::size_t megabytes) {
  if (megabytes == 0 || !std::has_single_bit(megabytes)) {
    bad_value(key, value, "band sizes in MiB that are powers of two, such as [256:1,512:2,>:8]");
  }
  const std::size_t band = static_cast<std::size_t>(std::bit_width(megabytes) - 1);
  return std::min(band, kRoundupPowerOfTwoBands - 1);
}

void parse_roundup_power2_divisions(std::string_view key, std::string_view value, AllocatorConfig& config) {
  value = trim(value);
  if (value.empty() || value.front() != '[') {
    config.roundup_power2_divisions.fill(parse_divisions(key, value));
    return;
  }
  if (value.back() != ']') bad_value(key, value, "a list such as [256:1,512:2,>:8]");
  std::string_view list = value.substr(1, value.size() - 2);
  std::size_t last_band = 0;
  std::size_t last_divisions = 0;
  bool any = false;
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    std::string_view entry = trim(list.substr(0, comma));
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    const std::size_t colon = entry.find(':');
    if (colon == std::string_view::npos) bad_value(key, entry, "entries band_mb:divisions");
    std::string_view band_text = trim(entry.substr(0, colon));
    const std::size_t divisions = parse_divisions(key, entry.substr(colon + 1));
    if (band_text == ">") {
      for (std::size_t band = any ? last_band + 1 : 0; band < kRoundupPowerOfTwoBands; ++band) {
        config.roundup_power2_divisions[band] = divisions;
      }
      last_band = kRoundupPowerOfTwoBands - 1;
    } else {
      const std::size_t band =
          band_of_megabytes(key, entry, parse_unsigned(key, band_text, "a band size in MiB"));
      // Bands below the first listed one take its divisions; gaps take the previous entry's.
      for (std::size_t gap = any ? last_band + 1 : 0; gap < band; ++gap) {
        config.roundup_power2_divisions[gap] = any ? last_divisions : divisions;
      }
      config.roundup_power2_divisions[band] = divisions;
      last_band = band;
    }
    last_divisions = divisions;
    any = true;
  }
  for (std::size_t band = last_band + 1; band < kRoundupPowerOfTwoBands; ++band) {
    config.roundup_power2_divisions[band] = last_divisions;
  }
}

bool parse_bool(std::string_view key, std::string_view value) {
  value = trim(value);
  if (value == "True" || value == "true" || value == "1") return true;
  if (value == "False" || value == "false" || value == "0") return false;
  bad_value(key, value, "True or False");
}

// Splits on commas that are not inside brackets.
std::vector<std::string_view> split_entries(std::string_view text) {
  std::vector<std::string_view> entries;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      std::string_view entry = trim(text.substr(start, i - start));
      if (!entry.empty()) entries.push_back(entry);
      start = i + 1;
    } else if (text[i] == '[') {
      ++depth;
    } else if (text[i] == ']') {
      --depth;
    }
  }
  return entries;
}

}  // namespace

AllocatorConfig AllocatorConfig::parse(std::string_view text) {
  AllocatorConfig config;
  for (std::string_view entry : split_entries(text)) {
    const std::size_t colon = entry.find(':');
    if (colon == std::string_view::npos) {
      throw AllocatorConfigError("FERRY_ALLOC_CONF: entry '" + std::string(entry) + "' is not key:value");
    }
    const std::string_view key = trim(entry.substr(0, colon));
    const std::string_view value = entry.substr(colon + 1);
    if (key == "expandable_segments") {
      config.expandable_segments = parse_bool(key, value);
      config.expandable_segments_set = true;
    } else if (key == "max_split_size_mb") {
      const std::string expected = "a size in MiB greater than 20 (the large-segment size) and at most " + std::to_string(kMaxManagedBytes >> 20);
      const std::size_t megabytes = parse_unsigned(key, value, expected);
      if (megabytes <= 20 || megabytes > (kMaxManagedBytes >> 20)) bad_value(key, value, expected);
      config.max_split_size = megabytes << 20;
    } else if (key == "garbage_collection_threshold") {
      const std::string value_text(trim(value));
      char* end = nullptr;
      const double threshold = std::strtod(value_text.c_str(), &end);
      if (value_text.empty() || end != value_text.c_str() + value_text.size() || !(threshold > 0.0) ||
          !(threshold < 1.0)) {
        bad_value(key, value, "a fraction strictly between 0 and 1, such as 0.8");
      }
      config.garbage_collection_threshold = threshold;
    } else if (key == "roundup_power2_divisions") {
      parse_roundup_power2_divisions(key, value, config);
    } else if (key == "trace_entries") {
      const std::string expected = "a number of trace entries from 0 to " + std::to_string(kMaxTraceEntries);
      config.trace_entries = parse_unsigned(key, value, expected);
      if (config.trace_entries > kMaxTraceEntries) bad_value(key, value, expected);
    } else {
      throw AllocatorConfigError("FERRY_ALLOC_CONF: unknown key '" + std::string(key) +
                                 "' (known: expandable_segments, max_split_size_mb, garbage_collection_threshold, "
                                 "roundup_power2_divisions, trace_entries)");
    }
  }
  return config;
}

AllocatorConfig AllocatorConfig::from_environment() {
  const char* text = std::getenv("FERRY_ALLOC_CONF");
  return text ? parse(text) : AllocatorConfig{};
}

std::string AllocatorConfig::to_string() const {
  std::ostringstream out;
  out << "expandable_segments:" << (expandable_segments ? "True" : "False");
  if (max_split_size_set()) out << ",max_split_size_mb:" << (max_split_size >> 20);
  if (garbage_collection_threshold > 0) out << ",garbage_collection_threshold:" << garbage_collection_threshold;
  const bool any_divisions = std::any_of(roundup_power2_divisions.begin(), roundup_power2_divisions.end(),
                                         [](std::size_t divisions) { return divisions > 1; });
  if (!any_divisions) {
    if (trace_entries > 0) out << ",trace_entries:" << trace_entries;
    return out.str();
  }
  out << ",roundup_power2_divisions:[";
  for (std::size_t band = 0; band < kRoundupPowerOfTwoBands; ++band) {
    if (band > 0) out << ',';
    if (band + 1 == kRoundupPowerOfTwoBands) {
      out << ">:";
    } else {
      out << (std::size_t{1} << band) << ':';
    }
    out << roundup_power2_divisions[band];
  }
  out << ']';
  if (trace_entries > 0) out << ",trace_entries:" << trace_entries;
  return out.str();
}

}  // namespace ferry
