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

std::string json_text(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ferry
