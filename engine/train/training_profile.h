// The trainer's memory profile: the window of steps --profile asks for (written when it closes; a
// window that starts at the run's first step also covers building the model), and outside the window
// each step is recorded on its own, so an out-of-memory failure at any step saves the profile up to
// the failure.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/memory_profile.h"

namespace ferry {

// --profile-steps: "N" (the first N steps this run takes) or "A-B" (steps A to B, as numbered in the
// progress lines). Throws std::invalid_argument naming the text.
struct ProfileSteps {
  std::int64_t first = 1, last = 3;
  bool from_run_start = true;  // "N": first and last count from the run's first step
  static ProfileSteps parse(const std::string& text);
};

class TrainingProfile {
 public:
  // Where a failure's profile goes when --profile was not given.
  static constexpr const char* kFailureDirectory = "ferry-oom-profile";

  // Starts recording at once. `directory` empty: the window is recorded but only written on failure, to
  // `failure_directory` (a pipeline rank's is kFailureDirectory/rank-R). `enabled` false: records
  // nothing, writes nothing, not even on failure.
  TrainingProfile(Device& device, std::string directory, ProfileSteps steps, nlohmann::json metadata,
                  std::string failure_directory = kFailureDirectory, bool enabled = true);

  // `step`: the step's number (1-based, as printed).
  void begin_step(std::int64_t step);
  void end_step(std::int64_t step);
  // Closes the window if it is still open (a run that ended inside it).
  void finish();
  // Stops recording, ends the profile at the failure, notes it and writes it; returns the directory
  // (empty when disabled).
  std::string save_failure(const std::string& failure);

  // The directory the window was written to, empty if not (yet).
  const std::string& written() const { return written_; }

 private:
  void close_window();

  MemoryProfiler profiler_;
  std::string directory_;
  std::string failure_directory_;
  ProfileSteps steps_;
  nlohmann::json metadata_;
  bool enabled_ = true;
  bool any_step_ = false;     // a step has begun
  bool window_open_ = false;  // recording the asked-for window
  bool window_done_ = false;
  std::size_t step_capacity_ = 4096;  // events buffer for one step outside the window
  std::string written_;
};

}  // namespace ferry
