// fp16 loss scaling with DeepSpeed's fp16 keys: a static scale (loss_scale > 0) or a dynamic one that
// starts at 2^initial_scale_power, halves (not below min_loss_scale) after `hysteresis` overflowing steps,
// which are skipped, and doubles after loss_scale_window steps in a row without overflow.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

namespace ferry {

struct LossScaleSettings {
  double loss_scale = 0;  // 0: dynamic; > 0: this scale always
  std::int32_t initial_scale_power = 16;
  std::int32_t loss_scale_window = 1000;
  std::int32_t hysteresis = 2;
  double min_loss_scale = 1;

  // Throws std::invalid_argument naming the key and the fix.
  void validate() const;
  nlohmann::json to_json() const;
  // Throws nlohmann::json::exception on a missing key or a wrong type.
  static LossScaleSettings from_json(const nlohmann::json& json);
};

// Where a dynamic scale stands between steps: what a checkpoint keeps so that a resumed run scales,
// skips and grows exactly as the uninterrupted one.
struct LossScalerState {
  double scale = 1;
  std::int32_t hysteresis_left = 1;
  std::int64_t steps_since_overflow = 0;  // the growth tracker: the scale doubles at each loss_scale_window
  std::int64_t skipped_steps = 0;
  std::int64_t scale_increases = 0;
  std::int64_t scale_decreases = 0;

  nlohmann::json to_json() const;
  // Throws std::invalid_argument on a value no scaler could have had (a corrupt checkpoint).
  static LossScalerState from_json(const nlohmann::json& json);
};

class LossScaler {
 public:
  explicit LossScaler(const LossScaleSettings& settings);

  // The factor the loss gradient is multiplied by in this step's backward.
  double scale() const { return state_.scale; }
  bool dynamic() const { return settings_.loss_scale == 0; }
  // A dynamic scale that an overflow now could not lower: at min_loss_scale with no hysteresis left.
  // (A static scale skips overflowing steps, as DeepSpeed's does.)
  bool at_minimum() const { return dynamic() && state_.scale <= settings_.min_loss_scale && state_.hysteresis_left <= 1; }
  // After the step's backward: whether its gradients overflowed (inf or NaN). Returns true when the
  // optimizer should step with them, false when the step is skipped; adjusts the scale for the next.
  bool update(bool overflow);

  std::int64_t skipped_steps() const { return state_.skipped_steps; }
  nlohmann::json describe() const;

  const LossScalerState& state() const { return state_; }
  void restore(const LossScalerState& state) { state_ = state; }

 private:
  LossScaleSettings settings_;
  LossScalerState state_;
};

}  // namespace ferry
