#include "engine/core/bounded_json.h"

#include <string>

namespace ferry {
namespace {

const std::string kDepthMessage = "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels (ferry reads at most " +
                                  std::to_string(kMaxJsonDepth) + ")";

}  // namespace

JsonDepthError::JsonDepthError() : nlohmann::json::exception(0, kDepthMessage.c_str()) {}

nlohmann::json parse_bounded_json(std::string_view text) {
  const nlohmann::json::parser_callback_t bound = [](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    if ((event == nlohmann::json::parse_event_t::object_start || event == nlohmann::json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth) {
      throw JsonDepthError();
    }
    return true;
  };
  return nlohmann::json::parse(text, bound);
}

std::string describe_json_error(const nlohmann::json::exception& error) {
  std::string text = error.what();
  if (text.starts_with("[json.exception.")) {
    const std::size_t end = text.find("] ");
    text = end == std::string::npos ? std::string() : text.substr(end + 2);
  }
  if (error.id >= 100 && error.id < 200) {  // parse errors
    if (text.starts_with("parse error at ")) text = "a syntax error at " + text.substr(15);
    else if (text.starts_with("parse error: ")) text = "a syntax error: " + text.substr(13);
    return text;
  }
  if (error.id >= 300 && error.id < 400) return "a value of the wrong type (" + text + ")";
  if (error.id >= 400 && error.id < 500) {
    if (text.starts_with("key '") && text.ends_with("' not found")) return "the key " + text.substr(4, text.size() - 4 - 10) + " is missing";
    return "a value out of range (" + text + ")";
  }
  return text;
}

std::string json_text(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ferry
