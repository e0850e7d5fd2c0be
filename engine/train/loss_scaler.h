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
};

class LossScaler {
 public:
  explicit LossScaler(const LossScaleSettings& settings);

  // The factor the loss gradient is multiplied by in this step's backward.
  double scale() const { return scale_; }
  bool dynamic() const { return settings_.loss_scale == 0; }
  // A dynamic scale that an overflow now could not lower: at min_loss_scale with no hysteresis left.
  // (A static scale skips overflowing steps, as DeepSpeed's does.)
  bool at_minimum() const { return dynamic() && scale_ <= settings_.min_loss_scale && hysteresis_left_ <= 1; }
  // After the step's backward: whether its gradients overflowed (inf or NaN). Returns true when the
  // optimizer should step with them, false when the step is skipped; adjusts the scale for the next.
  bool update(bool overflow);

  std::int64_t skipped_steps() const { return skipped_steps_; }
  nlohmann::json describe() const;

 private:
  LossScaleSettings settings_;
  double scale_;
  std::int32_t hysteresis_left_;
  std::int64_t steps_since_overflow_ = 0;
  std::int64_t skipped_steps_ = 0;
  std::int64_t scale_increases_ = 0;
  std::int64_t scale_decreases_ = 0;
};

}  // namespace ferry
