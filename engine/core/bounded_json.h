// JSON from files a user hands ferry (configs, checkpoints, profiles, safetensors headers), parsed with
// its nesting bounded: a value nested a million levels deep is refused while parsing, so no later dump,
// copy or comparison recurses without bound (a stack overflow).
#pragma once

#include <string_view>

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

}  // namespace ferry
