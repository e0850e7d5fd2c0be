#include <array>
#include <cctype>
#include <charconv>
#include <utility>

#include "schedule/pipeline_schedule.h"

namespace ferry {
namespace {

// Each type's code between the stage and the micro-batch, as PyTorch writes them.
constexpr std::array<std::pair<PipelineActionType, std::string_view>, 8> kTypeCodes{{
    {PipelineActionType::forward, "F"},
    {PipelineActionType::backward, "B"},
    {PipelineActionType::backward_input, "I"},
    {PipelineActionType::backward_weight, "W"},
    {PipelineActionType::send_forward, "SEND_F"},
    {PipelineActionType::receive_forward, "RECV_F"},
    {PipelineActionType::send_backward, "SEND_B"},
    {PipelineActionType::receive_backward, "RECV_B"},
}};

std::string_view type_code(PipelineActionType type) {
  for (const auto& [each, code] : kTypeCodes) {
    if (each == type) return code;
  }
  return "?";
}

// Reads a non-negative decimal number from the front of `text`; nullopt when there is none or it overflows.
std::optional<std::int32_t> take_number(std::string_view& text) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0) return std::nullopt;
  std::int32_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + digits, value);
  if (error != std::errc() || end != text.data() + digits) return std::nullopt;
  text.remove_prefix(digits);
  return value;
}

}  // namespace

std::string PipelineAction::to_string() const {
  return std::to_string(stage) + std::string(type_code(type)) + std::to_string(micro_batch);
}

PipelineAction PipelineAction::parse(std::string_view text) {
  const auto fail = [&]() {
    return ScheduleFormatError("'" + std::string(text) +
                               "' is not an action: expected STAGE TYPE MICRO_BATCH with TYPE one of F, B, I, W, "
                               "SEND_F, RECV_F, SEND_B, RECV_B (e.g. 0F1, 1B0, 2I3, 2W3, 0SEND_F1, 1RECV_B0)");
  };
  std::string_view rest = text;
  const std::optional<std::int32_t> stage = take_number(rest);
  if (!stage) throw fail();
  for (const auto& [type, code] : kTypeCodes) {
    if (!rest.starts_with(code)) continue;
    std::string_view after_code = rest.substr(code.size());
    const std::optional<std::int32_t> micro_batch = take_number(after_code);
    // "SEND_F1" also starts with "S..."; only a code followed by digits and nothing else is a match.
    if (micro_batch && after_code.empty()) return PipelineAction{*stage, type, *micro_batch};
  }
  throw fail();
}

bool PipelineAction::is_communication() const {
  switch (type) {
    case PipelineActionType::send_forward:
    case PipelineActionType::receive_forward:
    case PipelineActionType::send_backward:
    case PipelineActionType::receive_backward: return true;
    case PipelineActionType::forward:
    case PipelineActionType::backward:
    case PipelineActionType::backward_input:
    case PipelineActionType::backward_weight: return false;
  }
  return false;
}

bool PipelineSchedule::splits_backward() const {
  for (const RankActions& rank : actions) {
    for (const std::optional<PipelineAction>& action : rank) {
      if (action && (action->type == PipelineActionType::backward_input ||
                     action->type == PipelineActionType::backward_weight)) {
        return true;
      }
    }
  }
  return false;
}

bool PipelineSchedule::has_communication() const {
  for (const RankActions& rank : actions) {
    for (const std::optional<PipelineAction>& action : rank) {
      if (action && action->is_communication()) return true;
    }
  }
  return false;
}

}  // namespace ferry
