#include "engine/optim/optimizer_settings.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <utility>

#include "engine/core/bounded_json.h"

namespace ferry {
namespace {

std::string text_of(double value) {
  std::ostringstream text;
  text.precision(17);
  text << value;
  return text.str();
}
std::string text_of(float value) {  // the shortest text that reads back as the same float
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}
std::string text_of(const std::pair<float, float>& betas) { return text_of(betas.first) + "," + text_of(betas.second); }
std::string text_of(std::int64_t value) { return std::to_string(value); }
std::string text_of(std::int32_t value) { return std::to_string(value); }
std::string text_of(const std::string& value) { return value; }

// Applies one requested value over the base; on resume a different request is refused.
class Resolver {
 public:
  explicit Resolver(const std::string* checkpoint) : checkpoint_(checkpoint) {}

  template <typename T, typename U>
  void take(const std::optional<T>& requested, U& target, const char* flag, const std::function<U(const T&)>& convert) {
    if (!requested) return;
    const U value = convert(*requested);
    if (checkpoint_ != nullptr && !(value == target)) {
      const bool schedule = std::string_view(flag) == "--lr" || std::string_view(flag) == "--lr-schedule" ||
                            std::string_view(flag) == "--warmup-steps" || std::string_view(flag) == "--lr-decay-steps" ||
                            std::string_view(flag) == "--min-lr-ratio";
      throw std::invalid_argument(std::string(flag) + " " + text_of(*requested) + " contradicts the checkpoint '" + *checkpoint_ +
                                  "', which was trained with " + flag + " " + describe(target) +
                                  ": drop the flag (or its config key) to resume with the checkpoint's value, " +
                                  (schedule ? "add --override-lr-schedule to take the learning-rate schedule from the flags, " : "") +
                                  "or start a new run from its weights with --init-from " + *checkpoint_ + "/model.safetensors");
    }
    target = value;
  }
  template <typename T>
  void take(const std::optional<T>& requested, T& target, const char* flag) {
    take<T, T>(requested, target, flag, [](const T& value) { return value; });
  }

 private:
  template <typename U>
  static std::string describe(const U& value) {
    if constexpr (std::is_same_v<U, LearningRateKind>) return learning_rate_kind_name(value);
    else return text_of(value);
  }
  const std::string* checkpoint_;
};

OptimizerSettings resolve(const OptimizerRequest& request, OptimizerSettings settings, const std::string* checkpoint) {
  Resolver resolver(checkpoint);
  LearningRateSchedule& schedule = settings.schedule;
  resolver.take(request.lr, schedule.peak, "--lr");
  resolver.take<std::string, LearningRateKind>(request.lr_schedule, schedule.kind, "--lr-schedule", parse_learning_rate_kind);
  resolver.take(request.warmup_steps, schedule.warmup_steps, "--warmup-steps");
  resolver.take(request.lr_decay_steps, schedule.decay_steps, "--lr-decay-steps");
  resolver.take(request.min_lr_ratio, schedule.min_ratio, "--min-lr-ratio");
  std::pair<float, float> betas{settings.beta1, settings.beta2};
  resolver.take<std::string, std::pair<float, float>>(request.betas, betas, "--betas", parse_betas);
  std::tie(settings.beta1, settings.beta2) = betas;
  resolver.take(request.eps, settings.eps, "--eps");
  resolver.take(request.weight_decay, settings.weight_decay, "--weight-decay");
  resolver.take(request.grad_clip, settings.grad_clip, "--grad-clip");
  LossScaleSettings& scaling = settings.loss_scaling;
  resolver.take(request.loss_scale, scaling.loss_scale, "--loss-scale");
  resolver.take(request.initial_scale_power, scaling.initial_scale_power, "--initial-scale-power");
  resolver.take(request.loss_scale_window, scaling.loss_scale_window, "--loss-scale-window");
  resolver.take(request.hysteresis, scaling.hysteresis, "--hysteresis");
  resolver.take(request.min_loss_scale, scaling.min_loss_scale, "--min-loss-scale");
  settings.validate();
  return settings;
}

}  // namespace

void OptimizerSettings::validate() const {
  schedule.validate();
  if (!(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1)) {
    throw std::invalid_argument("--betas must be two numbers in [0, 1), got " + text_of(beta1) + "," + text_of(beta2));
  }
  if (!(eps > 0) || !std::isfinite(eps)) throw std::invalid_argument("--eps must be a positive finite number, got " + text_of(eps));
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay)) {
    throw std::invalid_argument("--weight-decay must be a finite number >= 0, got " + text_of(weight_decay));
  }
  if (!(grad_clip >= 0) || !std::isfinite(grad_clip)) {
    throw std::invalid_argument("--grad-clip must be a finite number >= 0 (0 disables clipping), got " + text_of(grad_clip));
  }
  loss_scaling.validate();
}

AdamWHyperparameters OptimizerSettings::adamw() const {
  return {static_cast<float>(schedule.peak), beta1, beta2, static_cast<float>(eps), static_cast<float>(weight_decay)};
}

nlohmann::json OptimizerSettings::to_json() const {
  return {{"lr", schedule.peak},
          {"lr_schedule", learning_rate_kind_name(schedule.kind)},
          {"warmup_steps", schedule.warmup_steps},
          {"lr_decay_steps", schedule.decay_steps},
          {"min_lr_ratio", schedule.min_ratio},
          {"betas", {beta1, beta2}},
          {"eps", eps},
          {"weight_decay", weight_decay},
          {"grad_clip", grad_clip},
          {"loss_scaling", loss_scaling.to_json()}};
}

OptimizerSettings OptimizerSettings::from_json(const nlohmann::json& json) {
  OptimizerSettings settings;
  settings.schedule.peak = json.at("lr").get<double>();
  settings.schedule.kind = parse_learning_rate_kind(json.at("lr_schedule").get<std::string>());
  settings.schedule.warmup_steps = json_integer<std::int64_t>(json.at("warmup_steps"), "\"warmup_steps\"");
  settings.schedule.decay_steps = json_integer<std::int64_t>(json.at("lr_decay_steps"), "\"lr_decay_steps\"");
  settings.schedule.min_ratio = json.at("min_lr_ratio").get<double>();
  const nlohmann::json& betas = json.at("betas");
  if (!betas.is_array() || betas.size() != 2) throw std::invalid_argument("betas must be two numbers, got " + betas.dump());
  settings.beta1 = betas[0].get<float>();
  settings.beta2 = betas[1].get<float>();
  settings.eps = json.at("eps").get<double>();
  settings.weight_decay = json.at("weight_decay").get<double>();
  settings.grad_clip = json.at("grad_clip").get<double>();
  settings.loss_scaling = LossScaleSettings::from_json(json.at("loss_scaling"));
  settings.validate();
  return settings;
}

OptimizerSettings resolve_new_run_settings(const OptimizerRequest& request, std::int64_t steps) {
  OptimizerSettings defaults;
  defaults.schedule.decay_steps = std::max<std::int64_t>(steps, 1);
  return resolve(request, defaults, nullptr);
}

OptimizerSettings resolve_resumed_settings(const OptimizerRequest& request, const OptimizerSettings& saved, const std::string& checkpoint,
                                           std::optional<std::int64_t> override_schedule_steps) {
  if (!override_schedule_steps) return resolve(request, saved, &checkpoint);
  // The schedule from the request (over the checkpoint's), then every other value checked as usual.
  OptimizerRequest schedule_only;
  schedule_only.lr = request.lr;
  schedule_only.lr_schedule = request.lr_schedule;
  schedule_only.warmup_steps = request.warmup_steps;
  schedule_only.lr_decay_steps = request.lr_decay_steps.value_or(std::max<std::int64_t>(*override_schedule_steps, 1));
  schedule_only.min_lr_ratio = request.min_lr_ratio;
  const OptimizerSettings rescheduled = resolve(schedule_only, saved, nullptr);
  OptimizerRequest rest = request;
  rest.lr = rest.min_lr_ratio = std::nullopt;
  rest.lr_schedule = std::nullopt;
  rest.warmup_steps = rest.lr_decay_steps = std::nullopt;
  return resolve(rest, rescheduled, &checkpoint);
}

std::pair<float, float> parse_betas(const std::string& text) {
  const auto comma = text.find(',');
  try {
    if (comma == std::string::npos) throw std::invalid_argument("no comma");
    std::size_t used1 = 0, used2 = 0;
    const float beta1 = std::stof(text.substr(0, comma), &used1);
    const float beta2 = std::stof(text.substr(comma + 1), &used2);
    if (used1 != comma || used2 != text.size() - comma - 1) throw std::invalid_argument("trailing text");
    if (!(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1)) throw std::invalid_argument("range");
    return {beta1, beta2};
  } catch (const std::exception&) {
    throw std::invalid_argument("--betas '" + text + "' must be two numbers in [0, 1) as B1,B2 (e.g. 0.9,0.95)");
  }
}

}  // namespace ferry
