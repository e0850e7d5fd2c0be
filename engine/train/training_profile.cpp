#include "engine/train/training_profile.h"

#include <algorithm>

namespace ferry {

TrainingProfile::TrainingProfile(Device& device, std::string directory, std::int64_t window_steps, nlohmann::json metadata)
    : profiler_(device), directory_(std::move(directory)), window_steps_(window_steps), metadata_(std::move(metadata)) {
  if (window_steps < 0) throw std::invalid_argument("--profile-steps must be >= 0, got " + std::to_string(window_steps));
  profiler_.start();
}

void TrainingProfile::write(MemoryProfile profile, const std::string& directory) {
  profile.metadata = metadata_;
  write_memory_profile(directory, profile);
}

void TrainingProfile::begin_step() {
  if (!profiler_.recording()) profiler_.start(step_capacity_);
}

void TrainingProfile::end_step(std::int64_t steps_done) {
  if (window_open_ && steps_done < window_steps_) return;
  MemoryProfile profile = profiler_.stop();
  // The next step's buffer: room for four times this one's events.
  step_capacity_ = std::max<std::size_t>(step_capacity_, 4 * profile.events.size() / static_cast<std::size_t>(window_open_ ? std::max<std::int64_t>(window_steps_, 1) : 1));
  if (window_open_) {
    window_open_ = false;
    metadata_["profiled_steps"] = steps_done;
    if (!directory_.empty()) {
      write(std::move(profile), directory_);
      written_ = directory_;
    }
  }
}

void TrainingProfile::finish() {
  if (!window_open_ || !profiler_.recording()) return;
  window_open_ = false;
  MemoryProfile profile = profiler_.stop();
  if (!directory_.empty()) {
    write(std::move(profile), directory_);
    written_ = directory_;
  }
}

std::string TrainingProfile::save_failure(const std::string& failure) {
  MemoryProfile profile = profiler_.stop();
  end_at_last_out_of_memory(profile);
  profile.failure = failure;
  const std::string directory = directory_.empty() ? kFailureDirectory : directory_;
  write(std::move(profile), directory);
  return directory;
}

}  // namespace ferry
