#include "engine/train/learning_rate.h"

#include <cmath>
#include <stdexcept>

namespace ferry {

double LearningRateSchedule::at(std::int64_t step) const {
  if (step < warmup_steps) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (kind == "constant") return peak;
  const std::int64_t decay_steps = total_steps - warmup_steps;
  if (decay_steps <= 1) return peak;
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps - 1));
  const double minimum = peak * min_ratio;
  return minimum + 0.5 * (peak - minimum) * (1.0 + std::cos(3.141592653589793 * progress));
}

void LearningRateSchedule::validate() const {
  if (kind != "constant" && kind != "cosine") throw std::invalid_argument("--lr-schedule '" + kind + "' is not one of constant, cosine");
  if (!(peak > 0)) throw std::invalid_argument("--lr must be positive");
  if (warmup_steps < 0) throw std::invalid_argument("--warmup-steps must be >= 0");
  if (!(min_ratio >= 0 && min_ratio <= 1)) throw std::invalid_argument("--min-lr-ratio must be in [0, 1]");
}

}  // namespace ferry
