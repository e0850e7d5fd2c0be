#include "engine/checkpoint/trainer_state.h"

#include <filesystem>

#include "engine/core/bounded_json.h"

namespace ferry {
namespace {

constexpr int kFormatVersion = 2;  // 2: the optimizer settings and the loss scaler state
constexpr std::int64_t kMostSteps = std::int64_t{1} << 40;  // as --steps
constexpr const char* kStateFile = "trainer_state.json";

std::string in(const std::string& directory, const char* file) { return (std::filesystem::path(directory) / file).string(); }

}  // namespace

std::string trainer_state_text(const TrainerState& state, std::int64_t optimizer_steps) {
  nlohmann::json trainer = {{"format_version", kFormatVersion}, {"step", state.step}, {"data_position", state.data_position},
                             {"seed", state.seed}, {"optimizer_steps", optimizer_steps}, {"run", state.run},
                             {"optimizer", state.optimizer.to_json()}};
  if (state.loss_scaler) trainer["loss_scaler"] = state.loss_scaler->to_json();
  if (!state.schedule_overrides.empty()) trainer["schedule_overrides"] = state.schedule_overrides;
  return json_text(trainer, 2) + "\n";
}

TrainerState parse_trainer_state(std::string_view text, const std::string& directory) {
  TrainerState state;
  try {
    const nlohmann::json trainer = parse_bounded_json(text);
    if (!trainer.is_object()) throw CheckpointError("checkpoint is corrupt: " + in(directory, kStateFile) + " is not a JSON object");
    if (trainer.at("format_version") != kFormatVersion) {
      throw CheckpointError("checkpoint '" + directory + "' has format version " + json_text(trainer.at("format_version")) +
                            "; this ferry resumes version " + std::to_string(kFormatVersion) +
                            " (version 1 lacks the optimizer settings); start a new run from its weights with --init-from " +
                            in(directory, "model.safetensors"));
    }
    state.step = json_integer<std::int64_t>(trainer.at("step"), "\"step\"");
    if (state.step < 0 || state.step > kMostSteps) {
      throw CheckpointError("checkpoint is corrupt: " + in(directory, kStateFile) + " says step " + std::to_string(state.step) +
                            ", expected 0 to " + std::to_string(kMostSteps));
    }
    state.data_position = json_integer<std::uint64_t>(trainer.at("data_position"), "\"data_position\"");
    state.seed = json_integer<std::uint64_t>(trainer.at("seed"), "\"seed\"");
    state.run = trainer.at("run");
    if (!state.run.is_object()) throw CheckpointError("checkpoint is corrupt: " + in(directory, kStateFile) + ": \"run\" is not an object");
    state.optimizer = OptimizerSettings::from_json(trainer.at("optimizer"));
    if (trainer.contains("loss_scaler")) state.loss_scaler = LossScalerState::from_json(trainer.at("loss_scaler"));
    if (trainer.contains("schedule_overrides")) {
      state.schedule_overrides = trainer.at("schedule_overrides");
      if (!state.schedule_overrides.is_array()) throw CheckpointError("checkpoint is corrupt: " + in(directory, kStateFile) + ": \"schedule_overrides\" is not a list");
      for (const nlohmann::json& entry : state.schedule_overrides) {
        json_integer<std::int64_t>(entry.at("step"), "\"schedule_overrides\" step");
        OptimizerSettings::from_json(entry.at("from"));
        OptimizerSettings::from_json(entry.at("to"));
      }
    }
    state.optimizer_steps = json_integer<std::int64_t>(trainer.at("optimizer_steps"), "\"optimizer_steps\"");
    if (state.optimizer_steps < 0 || state.optimizer_steps > state.step) {
      throw CheckpointError("checkpoint is corrupt: " + in(directory, kStateFile) + " says the optimizer took " +
                            std::to_string(state.optimizer_steps) + " steps, expected 0 to the run's step " + std::to_string(state.step));
    }
  } catch (const nlohmann::json::exception& error) {
    throw CheckpointError("checkpoint '" + directory + "' is corrupt: " + kStateFile + ": " + describe_json_error(error));
  } catch (const std::invalid_argument& error) {
    throw CheckpointError("checkpoint '" + directory + "' is corrupt: " + kStateFile + ": " + error.what());
  }
  return state;
}

}  // namespace ferry
