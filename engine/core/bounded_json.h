// JSON from files a user hands ferry (configs, checkpoints, profiles, safetensors headers), parsed with
// its nesting bounded: a value nested a million levels deep is refused while parsing, so no later dump,
// copy or comparison recurses without bound (a stack overflow). And JSON text that never throws on a
// string that is not UTF-8 (a path a user gave), so no output is lost at the end of a run.
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

// value.dump(indent), with bytes that are not UTF-8 written as U+FFFD instead of throwing (a file name
// in another encoding is still named, and the file still written).
std::string json_text(const nlohmann::json& value, int indent = -1);

}  // namespace ferry
