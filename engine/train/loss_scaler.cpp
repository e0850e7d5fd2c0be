#include "engine/train/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

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

LossScaler::LossScaler(const LossScaleSettings& settings)
    : settings_(settings),
      scale_(settings.loss_scale > 0 ? settings.loss_scale : std::ldexp(1.0, settings.initial_scale_power)),
      hysteresis_left_(settings.hysteresis) {
  settings_.validate();
}

bool LossScaler::update(bool overflow) {
  if (!overflow) {
    ++steps_since_overflow_;
    if (dynamic() && steps_since_overflow_ % settings_.loss_scale_window == 0) {
      scale_ *= 2;
      ++scale_increases_;
      hysteresis_left_ = settings_.hysteresis;
    }
    return true;
  }
  ++skipped_steps_;
  steps_since_overflow_ = 0;
  if (!dynamic()) return false;
  if (hysteresis_left_ > 1) {
    --hysteresis_left_;  // tolerated: the step is skipped, the scale stays
    return false;
  }
  const double halved = std::max(scale_ / 2, settings_.min_loss_scale);
  if (halved < scale_) ++scale_decreases_;
  scale_ = halved;
  return false;
}

nlohmann::json LossScaler::describe() const {
  return {{"dynamic", dynamic()},
          {"scale", scale_},
          {"skipped_steps", skipped_steps_},
          {"scale_increases", scale_increases_},
          {"scale_decreases", scale_decreases_},
          {"initial_scale_power", settings_.initial_scale_power},
          {"loss_scale_window", settings_.loss_scale_window},
          {"hysteresis", settings_.hysteresis},
          {"min_loss_scale", settings_.min_loss_scale}};
}

}  // namespace ferry
