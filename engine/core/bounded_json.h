// JSON from files a user hands ferry (configs, checkpoints, profiles, safetensors headers), parsed with
// its nesting bounded: a value nested a million levels deep is refused while parsing, so no later dump,
// copy or comparison recurses without bound (a stack overflow). And JSON text that never throws on a
// string that is not UTF-8 (a path a user gave), so no output is lost at the end of a run.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace ferry {

// The deepest nesting ferry reads: its own files nest a few levels.
inline constexpr int kMaxJsonDepth = 64;

// A nlohmann::json::exception, so that callers' handlers for bad JSON name their file as for any other.
class JsonDepthError : public nlohmann::json::exception {
 public:
  JsonDepthError();
};

// nlohmann::json::parse(text), throwing JsonDepthError past kMaxJsonDepth levels of arrays and objects.
nlohmann::json parse_bounded_json(std::string_view text);

// `node` as the integer type T: a whole JSON number within T's range. nlohmann's get<T>() truncates 2.7,
// wraps 4294967297 and is undefined past the range for 1e30; this throws std::invalid_argument naming
// `what` (a key, a field), the value and the range instead.
template <typename T>
T json_integer(const nlohmann::json& node, const std::string& what);

// What went wrong in ferry's words, without nlohmann's "[json.exception.parse_error.101]" prefix: "a
// syntax error at line 1, column 3 (...)", "a value of the wrong type (type must be number, but is
// string)", "the key 'step' is missing", or the depth bound's message.
std::string describe_json_error(const nlohmann::json::exception& error);

// value.dump(indent), with bytes that are not UTF-8 written as U+FFFD instead of throwing (a file name
// in another encoding is still named, and the file still written).
std::string json_text(const nlohmann::json& value, int indent = -1);

template <typename T>
T json_integer(const nlohmann::json& node, const std::string& what) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  const auto out_of_range = [&](const char* how) {
    return std::invalid_argument(what + " is " + json_text(node) + how + ": it must be a whole number from " +
                                 std::to_string(std::numeric_limits<T>::min()) + " to " + std::to_string(std::numeric_limits<T>::max()));
  };
  if (node.is_number_unsigned()) {
    const auto value = node.get<std::uint64_t>();
    if (value > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) throw out_of_range(", out of range");
    return static_cast<T>(value);
  }
  if (node.is_number_integer()) {
    const auto value = node.get<std::int64_t>();
    if (value < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
        (value > 0 && static_cast<std::uint64_t>(value) > static_cast<std::uint64_t>(std::numeric_limits<T>::max()))) {
      throw out_of_range(", out of range");
    }
    return static_cast<T>(value);
  }
  throw out_of_range("");
}

}  // namespace ferry
