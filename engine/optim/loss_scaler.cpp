#include "engine/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/core/bounded_json.h"

namespace ferry {

void LossScaleSettings::validate() const {
  if (!(loss_scale >= 0) || !std::isfinite(loss_scale)) {
    throw std::invalid_argument("fp16.loss_scale must be 0 (dynamic) or a positive scale, got " + std::to_string(loss_scale));
  }
  if (initial_scale_power < 0 || initial_scale_power > 127) {
    throw std::invalid_argument("fp16.initial_scale_power must be in [0, 127] (the scale starts at 2^power, an f32), got " +
                                std::to_string(initial_scale_power));
  }
  if (loss_scale_window < 1) throw std::invalid_argument("fp16.loss_scale_window must be >= 1 step, got " + std::to_string(loss_scale_window));
  if (hysteresis < 1) throw std::invalid_argument("fp16.hysteresis must be >= 1 overflow, got " + std::to_string(hysteresis));
  if (!(min_loss_scale > 0) || !std::isfinite(min_loss_scale)) {
    throw std::invalid_argument("fp16.min_loss_scale must be positive, got " + std::to_string(min_loss_scale));
  }
}

nlohmann::json LossScaleSettings::to_json() const {
  return {{"loss_scale", loss_scale},
          {"initial_scale_power", initial_scale_power},
          {"loss_scale_window", loss_scale_window},
          {"hysteresis", hysteresis},
          {"min_loss_scale", min_loss_scale}};
}

LossScaleSettings LossScaleSettings::from_json(const nlohmann::json& json) {
  LossScaleSettings settings;
  settings.loss_scale = json.at("loss_scale").get<double>();
  settings.initial_scale_power = json_integer<std::int32_t>(json.at("initial_scale_power"), "\"initial_scale_power\"");
  settings.loss_scale_window = json_integer<std::int32_t>(json.at("loss_scale_window"), "\"loss_scale_window\"");
  settings.hysteresis = json_integer<std::int32_t>(json.at("hysteresis"), "\"hysteresis\"");
  settings.min_loss_scale = json.at("min_loss_scale").get<double>();
  return settings;
}

nlohmann::json LossScalerState::to_json() const {
  return {{"scale", scale},
          {"hysteresis_left", hysteresis_left},
          {"steps_since_overflow", steps_since_overflow},
          {"skipped_steps", skipped_steps},
          {"scale_increases", scale_increases},
          {"scale_decreases", scale_decreases}};
}

LossScalerState LossScalerState::from_json(const nlohmann::json& json) {
  LossScalerState state;
  state.scale = json.at("scale").get<double>();
  state.hysteresis_left = json_integer<std::int32_t>(json.at("hysteresis_left"), "\"hysteresis_left\"");
  state.steps_since_overflow = json_integer<std::int64_t>(json.at("steps_since_overflow"), "\"steps_since_overflow\"");
  state.skipped_steps = json_integer<std::int64_t>(json.at("skipped_steps"), "\"skipped_steps\"");
  state.scale_increases = json_integer<std::int64_t>(json.at("scale_increases"), "\"scale_increases\"");
  state.scale_decreases = json_integer<std::int64_t>(json.at("scale_decreases"), "\"scale_decreases\"");
  if (!(state.scale > 0) || !std::isfinite(state.scale) || state.hysteresis_left < 1 || state.steps_since_overflow < 0 ||
      state.skipped_steps < 0 || state.scale_increases < 0 || state.scale_decreases < 0) {
    throw std::invalid_argument("loss_scaler state " + json.dump() + " is impossible (scale > 0 and finite, hysteresis_left >= 1, counts >= 0)");
  }
  return state;
}

LossScaler::LossScaler(const LossScaleSettings& settings) : settings_(settings) {
  settings_.validate();
  state_.scale = settings.loss_scale > 0 ? settings.loss_scale : std::ldexp(1.0, settings.initial_scale_power);
  state_.hysteresis_left = settings.hysteresis;
}

bool LossScaler::update(bool overflow) {
  if (!overflow) {
    ++state_.steps_since_overflow;
    if (dynamic() && state_.steps_since_overflow % settings_.loss_scale_window == 0) {
      state_.scale *= 2;
      ++state_.scale_increases;
      state_.hysteresis_left = settings_.hysteresis;
    }
    return true;
  }
  ++state_.skipped_steps;
  state_.steps_since_overflow = 0;
  if (!dynamic()) return false;
  if (state_.hysteresis_left > 1) {
    --state_.hysteresis_left;  // tolerated: the step is skipped, the scale stays
    return false;
  }
  const double halved = std::max(state_.scale / 2, settings_.min_loss_scale);
  if (halved < state_.scale) ++state_.scale_decreases;
  state_.scale = halved;
  return false;
}

nlohmann::json LossScaler::describe() const {
  return {{"dynamic", dynamic()},
          {"scale", state_.scale},
          {"skipped_steps", state_.skipped_steps},
          {"scale_increases", state_.scale_increases},
          {"scale_decreases", state_.scale_decreases},
          {"initial_scale_power", settings_.initial_scale_power},
          {"loss_scale_window", settings_.loss_scale_window},
          {"hysteresis", settings_.hysteresis},
          {"min_loss_scale", settings_.min_loss_scale}};
}

}  // namespace ferry
