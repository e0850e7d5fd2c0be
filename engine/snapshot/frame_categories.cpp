#include "engine/snapshot/frame_categories.h"

#include <array>

namespace ferry {
namespace {

constexpr std::string_view kFerryPrefix = "ferry/";

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

bool is_optimizer(const TorchFrame& frame) { return contains(frame.filename, "torch/optim/") || contains(frame.filename, "/optim/"); }
bool is_backward(const TorchFrame& frame) {
  return contains(frame.name, "backward") || contains(frame.filename, "torch/autograd/");
}
bool is_parameter_load(const TorchFrame& frame) {
  static constexpr std::array<std::string_view, 6> kNames = {"load_state_dict", "_load_from_state_dict", "reset_parameters",
                                                             "_apply", "to", "cuda"};
  const bool module_file = contains(frame.filename, "torch/nn/modules/module.py") || contains(frame.filename, "torch/nn/init.py");
  for (std::string_view name : kNames) {
    if (frame.name == name && (module_file || name == "load_state_dict" || name == "_load_from_state_dict")) return true;
  }
  return contains(frame.filename, "torch/nn/init.py") || contains(frame.filename, "safetensors/");
}
bool is_forward(const TorchFrame& frame) { return frame.name == "forward" || frame.name == "_call_impl" || frame.name == "_wrapped_call_impl"; }

// User code: a Python file outside torch and the standard library.
bool is_user_frame(const TorchFrame& frame) {
  return frame.filename.ends_with(".py") && !contains(frame.filename, "torch/") && !contains(frame.filename, "/lib/python");
}

std::string frame_label(const TorchFrame& frame) {
  const std::size_t slash = frame.filename.rfind('/');
  return frame.filename.substr(slash == std::string::npos ? 0 : slash + 1) + ":" + std::to_string(frame.line) + " " + frame.name;
}

template <typename Match>
bool any_frame(const std::vector<TorchFrame>& frames, Match match) {
  for (const TorchFrame& frame : frames) {
    if (match(frame)) return true;
  }
  return false;
}

}  // namespace

std::string_view category_rule() {
  return "categories from the frames of each allocation, first rule that matches: a frame ferry wrote (ferry/<category>) gives "
         "its category; a frame in torch/optim/ -> optimizer_states; a frame named *backward* or in torch/autograd/ -> gradients; "
         "Module.to/cuda/_apply/load_state_dict, torch/nn/init.py or safetensors -> parameters; a frame named forward or "
         "_call_impl -> activations; anything else -> uncategorized (unknown). Tags: the innermost frame of user code.";
}

InferredCategory ferry_category(const std::vector<TorchFrame>& frames) {
  for (const TorchFrame& frame : frames) {
    if (!frame.filename.starts_with(kFerryPrefix)) continue;
    const std::optional<MemoryCategory> category = parse_memory_category(std::string_view(frame.filename).substr(kFerryPrefix.size()));
    if (category) return InferredCategory{*category, frame.name, true};
  }
  return InferredCategory{};
}

InferredCategory infer_category(const std::vector<TorchFrame>& frames) {
  if (InferredCategory ferry = ferry_category(frames); ferry.from_ferry) return ferry;
  InferredCategory result;
  if (any_frame(frames, is_optimizer)) {
    result.category = MemoryCategory::optimizer_states;
  } else if (any_frame(frames, is_backward)) {
    result.category = MemoryCategory::gradients;
  } else if (any_frame(frames, is_parameter_load)) {
    result.category = MemoryCategory::parameters;
  } else if (any_frame(frames, is_forward)) {
    result.category = MemoryCategory::activations;
  }
  for (const TorchFrame& frame : frames) {
    if (is_user_frame(frame)) {
      result.tag = frame_label(frame);
      break;
    }
  }
  return result;
}

TorchFrame ferry_frame(MemoryCategory category, const std::string& tag) {
  return TorchFrame{std::string(kFerryPrefix) + std::string(category_name(category)), 0, tag};
}

}  // namespace ferry
