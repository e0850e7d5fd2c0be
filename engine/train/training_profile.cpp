#include "engine/train/training_profile.h"

#include <algorithm>
#include <charconv>
#include <stdexcept>

#include "engine/core/memory_profile_file.h"

namespace ferry {
namespace {

std::int64_t parse_step_number(std::string_view digits, const std::string& text) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size() || value < 1) {
    throw std::invalid_argument("--profile-steps '" + text + "' is not N (the first N steps) or A-B (steps A to B), with N, A, B >= 1");
  }
  return value;
}

}  // namespace

ProfileSteps ProfileSteps::parse(const std::string& text) {
  const auto dash = text.find('-');
  if (dash == std::string::npos) return {1, parse_step_number(text, text), true};
  ProfileSteps steps{parse_step_number(std::string_view(text).substr(0, dash), text),
                     parse_step_number(std::string_view(text).substr(dash + 1), text), false};
  if (steps.last < steps.first) throw std::invalid_argument("--profile-steps '" + text + "' ends before it starts");
  return steps;
}

TrainingProfile::TrainingProfile(Device& device, std::string directory, ProfileSteps steps, nlohmann::json metadata,
                                 std::string failure_directory, bool enabled)
    : profiler_(device),
      directory_(std::move(directory)),
      failure_directory_(std::move(failure_directory)),
      steps_(steps),
      metadata_(std::move(metadata)),
      enabled_(enabled) {
  if (enabled_) profiler_.start();  // building the model belongs to a window that opens at the run's first step
}

void TrainingProfile::begin_step(std::int64_t step) {
  if (!enabled_) return;
  if (!any_step_ && steps_.from_run_start) {
    steps_.last = step + steps_.last - steps_.first;
    steps_.first = step;
  }
  const bool first_of_run = !any_step_;
  any_step_ = true;
  if (!window_done_ && step == steps_.first) {
    if (!first_of_run && profiler_.recording()) profiler_.stop();
    if (!profiler_.recording()) profiler_.start();
    window_open_ = true;
    return;
  }
  if (window_open_) return;
  // Outside the window: this step alone, for a failure.
  if (profiler_.recording()) {
    const MemoryProfile previous = profiler_.stop();
    step_capacity_ = std::max(step_capacity_, 4 * previous.events.size());
  }
  profiler_.start(step_capacity_);
}

void TrainingProfile::end_step(std::int64_t step) {
  if (!enabled_) return;
  if (window_open_ && step >= steps_.last) close_window();
}

void TrainingProfile::close_window() {
  MemoryProfile profile = profiler_.stop();
  window_open_ = false;
  window_done_ = true;
  step_capacity_ = std::max(step_capacity_, 4 * profile.events.size() / static_cast<std::size_t>(steps_.last - steps_.first + 1));
  if (directory_.empty()) return;
  profile.metadata = metadata_;
  profile.metadata["profiled_steps"] = {steps_.first, steps_.last};
  write_memory_profile(directory_, profile);
  written_ = directory_;
}

void TrainingProfile::finish() {
  if (window_open_) close_window();
}

std::string TrainingProfile::save_failure(const std::string& failure) {
  if (!enabled_) return {};
  MemoryProfile profile = profiler_.stop();
  end_at_last_out_of_memory(profile);
  profile.failure = failure;
  profile.metadata = metadata_;
  const std::string directory = directory_.empty() ? failure_directory_ : directory_;
  write_memory_profile(directory, profile);
  return directory;
}

}  // namespace ferry
