#include "engine/comm/environment_variables.h"

#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

namespace ferry {
namespace {

const char* read_process_environment(const char* name) { return std::getenv(name); }

}  // namespace

EnvironmentReader::EnvironmentReader(EnvironmentLookup lookup)
    : lookup_(lookup != nullptr ? lookup : read_process_environment) {}

std::optional<std::int64_t> EnvironmentReader::integer(const char* name) const {
  const char* value = lookup_(name);
  if (value == nullptr) return std::nullopt;
  const std::string_view text(value);
  std::int64_t parsed = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), parsed);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    throw std::invalid_argument(describe(name) + " is not an integer");
  }
  return parsed;
}

std::string EnvironmentReader::describe(const char* name) const {
  const char* value = lookup_(name);
  if (value == nullptr) return std::string(name) + " (unset)";
  return std::string(name) + "='" + value + "'";
}

}  // namespace ferry
