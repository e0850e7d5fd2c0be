// The trainer's memory profile: the window --profile asks for (the first N steps, and the model's
// construction before them), written when it closes; after it, each step is recorded on its own, so
// an out-of-memory failure at any step saves the profile up to the failure.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/memory_profile.h"

namespace ferry {

class TrainingProfile {
 public:
  // Where a failure's profile goes when --profile was not given.
  static constexpr const char* kFailureDirectory = "ferry-oom-profile";

  // Starts recording at once. `directory` empty: the window is recorded but only written on failure.
  TrainingProfile(Device& device, std::string directory, std::int64_t window_steps, nlohmann::json metadata);

  void begin_step();
  // `steps_done`: steps this run has finished.
  void end_step(std::int64_t steps_done);
  // Closes the window if it is still open (a run shorter than it).
  void finish();
  // Stops recording, notes `failure` in the profile and writes it; returns the directory.
  std::string save_failure(const std::string& failure);

  // The directory the window was written to, empty if not (yet).
  const std::string& written() const { return written_; }

 private:
  void write(MemoryProfile profile, const std::string& directory);

  MemoryProfiler profiler_;
  std::string directory_;
  std::int64_t window_steps_;
  nlohmann::json metadata_;
  bool window_open_ = true;
  std::size_t step_capacity_ = 4096;
  std::string written_;
};

}  // namespace ferry
