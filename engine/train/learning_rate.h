// Learning-rate schedules: linear warmup, then constant or cosine decay to lr * min_ratio at the last step.
#pragma once

#include <cstdint>
#include <string>

namespace ferry {

struct LearningRateSchedule {
  std::string kind = "cosine";  // constant | cosine
  double peak = 1e-3;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  double min_ratio = 0.1;

  // The learning rate of step (0-based).
  double at(std::int64_t step) const;
  // Throws std::invalid_argument naming a bad setting.
  void validate() const;
};

}  // namespace ferry
