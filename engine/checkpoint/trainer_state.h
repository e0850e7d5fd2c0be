// trainer_state.json, a checkpoint's run state: the step, the data position, the seed, the settings a
// resume must match, the optimizer's schedule and hyperparameters and the fp16 loss scaler's state.
// Written and parsed here with every value checked, apart from the tensors so the parser is fuzzed alone.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "engine/optim/loss_scaler.h"
#include "engine/optim/optimizer_settings.h"

namespace ferry {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TrainerState {
  std::int64_t step = 0;             // optimizer steps completed
  std::uint64_t data_position = 0;   // micro-batches read
  std::uint64_t seed = 0;
  nlohmann::json run;                // settings that must match on resume (batch, seq, precision, data, ...)
  OptimizerSettings optimizer;       // the schedule and hyperparameters the run was started with
  // Each --override-lr-schedule of the run: {"step", "from", "to"} (the optimizer settings before and after).
  nlohmann::json schedule_overrides = nlohmann::json::array();
  std::optional<LossScalerState> loss_scaler;  // fp16 runs
  std::int64_t optimizer_steps = 0;  // read from a checkpoint (AdamW's step count); saving takes the optimizer's
};

// The text of trainer_state.json for `state`, whose optimizer has taken `optimizer_steps` steps.
std::string trainer_state_text(const TrainerState& state, std::int64_t optimizer_steps);

// Parses trainer_state.json's text (of the checkpoint in `directory`, named in errors) and checks its
// values; throws CheckpointError saying what is wrong.
TrainerState parse_trainer_state(std::string_view text, const std::string& directory);

}  // namespace ferry
