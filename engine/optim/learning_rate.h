// Learning-rate schedules: linear warmup, then constant or cosine decay to lr * min_ratio at step
// decay_steps (warmup included, as DeepSpeed's total_num_steps and Megatron's lr-decay-iters); past it
// the rate stays at the minimum.
#pragma once

#include <cstdint>
#include <string>

namespace ferry {

enum class LearningRateKind { constant, cosine };

// "constant" | "cosine"; throws std::invalid_argument naming the choices.
LearningRateKind parse_learning_rate_kind(const std::string& text);
const char* learning_rate_kind_name(LearningRateKind kind);

struct LearningRateSchedule {
  LearningRateKind kind = LearningRateKind::cosine;
  double peak = 1e-3;
  std::int64_t warmup_steps = 0;
  std::int64_t decay_steps = 1;
  double min_ratio = 0.1;

  // The learning rate of step (0-based).
  double at(std::int64_t step) const;
  // Throws std::invalid_argument naming a bad setting.
  void validate() const;
};

}  // namespace ferry
