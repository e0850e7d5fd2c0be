#include "engine/optim/learning_rate.h"

#include <cmath>
#include <stdexcept>

namespace ferry {

LearningRateKind parse_learning_rate_kind(const std::string& text) {
  if (text == "constant") return LearningRateKind::constant;
  if (text == "cosine") return LearningRateKind::cosine;
  throw std::invalid_argument("--lr-schedule '" + text + "' is not one of constant, cosine");
}

const char* learning_rate_kind_name(LearningRateKind kind) { return kind == LearningRateKind::constant ? "constant" : "cosine"; }

double LearningRateSchedule::at(std::int64_t step) const {
  if (step < warmup_steps) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (kind == LearningRateKind::constant) return peak;
  const std::int64_t decaying = decay_steps - warmup_steps;
  if (decaying <= 1) return peak;
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decaying - 1));
  const double minimum = peak * min_ratio;
  return minimum + 0.5 * (peak - minimum) * (1.0 + std::cos(3.141592653589793 * progress));
}

void LearningRateSchedule::validate() const {
  if (!(peak > 0) || !std::isfinite(peak)) throw std::invalid_argument("--lr must be a positive finite number, got " + std::to_string(peak));
  if (warmup_steps < 0) throw std::invalid_argument("--warmup-steps must be >= 0, got " + std::to_string(warmup_steps));
  if (decay_steps < 1) throw std::invalid_argument("--lr-decay-steps must be >= 1, got " + std::to_string(decay_steps));
  if (!(min_ratio >= 0 && min_ratio <= 1)) throw std::invalid_argument("--min-lr-ratio must be in [0, 1], got " + std::to_string(min_ratio));
}

}  // namespace ferry
