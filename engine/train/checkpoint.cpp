#include "engine/train/checkpoint.h"
#include "engine/core/bounded_json.h"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "engine/core/atomic_file.h"
#include "engine/core/file_hash.h"
#include "engine/core/safetensors.h"
#include "models/gpt_weights.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kConfigFile = "config.json";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kDoneFile = "DONE";
constexpr int kFormatVersion = 2;  // 2: the optimizer settings and the loss scaler state
constexpr std::array<const char*, 4> kCheckedFiles = {kModelFile, kConfigFile, kOptimizerFile, kStateFile};
constexpr std::int64_t kMostSteps = std::int64_t{1} << 40;  // as --steps

std::string hex64(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::string in(const std::string& directory, const char* file) { return (fs::path(directory) / file).string(); }

// Each file's XXH64 against the one DONE recorded (checkpoints saved before checksums have none to
// check). Throws CheckpointError naming the file, the expected and the found hash.
void verify_checksums(const std::string& directory) {
  const std::string done = read_text_file(in(directory, kDoneFile));
  for (const char* file : kCheckedFiles) {
    const std::size_t at = done.find(std::string("  ") + file + "\n");
    if (at == std::string::npos) continue;
    if (at < 16) throw CheckpointError("checkpoint '" + directory + "' is corrupt: its DONE marker is garbled (" + file + ")");
    const std::string expected = done.substr(at - 16, 16);
    const std::string found = hex64(xxhash64_of_file(in(directory, file)));
    if (found != expected) {
      throw CheckpointError("checkpoint is corrupt: " + in(directory, file) + " has XXH64 " + found + ", but DONE recorded " + expected +
                            " when it was saved (a changed or damaged file); resume from another checkpoint");
    }
  }
}

void require_complete(const std::string& directory) {
  if (!fs::is_directory(directory)) {
    throw CheckpointError("checkpoint '" + directory + "' does not exist (or is not a directory); check --resume");
  }
  if (!fs::exists(in(directory, kDoneFile))) {
    throw CheckpointError("checkpoint '" + directory + "' is partial: it has no DONE marker, so its save was interrupted; "
                          "resume from another checkpoint or start without --resume");
  }
  for (const char* file : {kModelFile, kConfigFile, kOptimizerFile, kStateFile}) {
    if (!fs::exists(in(directory, file))) throw CheckpointError("checkpoint '" + directory + "' is corrupt: " + file + " is missing");
  }
}

// Reads tensor `name` (F32, of `shape`) into `destination`.
void load_f32(const SafetensorsFile& file, const std::string& name, const Shape& shape, float* destination) {
  const SafetensorsEntry* entry = file.find(name);
  if (entry == nullptr) throw CheckpointError("checkpoint file '" + file.path() + "' is corrupt: tensor '" + name + "' is missing");
  if (entry->dtype != DType::f32 || entry->shape != shape) {
    throw CheckpointError("checkpoint file '" + file.path() + "': tensor '" + name + "' is " +
                          std::string(safetensors_dtype_name(entry->dtype)) + " " + shape_to_string(entry->shape) + ", expected F32 " +
                          shape_to_string(shape) + " (a checkpoint of another model?)");
  }
  file.read_raw(*entry, destination);
}

}  // namespace

void save_checkpoint(const std::string& directory, const GptModel& model, TrainingOptimizer& optimizer, const TrainerState& state) {
  save_checkpoint(directory, model.config(), optimizer.snapshot(), state);
}

void save_checkpoint(const std::string& directory, const GptConfig& config, const OptimizerSnapshot& snapshot, const TrainerState& state) {
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) throw CheckpointError("cannot create checkpoint directory '" + directory + "': " + error.message());
  SafetensorsWriter masters, moments;
  masters.set_metadata("format", "pt");
  moments.set_metadata("optimizer", "AdamW");
  moments.set_metadata("steps", std::to_string(snapshot.steps));
  for (std::size_t i = 0; i < snapshot.names.size(); ++i) {
    const auto at = static_cast<std::size_t>(snapshot.offsets[i]);
    masters.add(snapshot.names[i], DType::f32, snapshot.shapes[i], snapshot.master.data() + at);  // f32 master weights
    moments.add("exp_avg." + snapshot.names[i], DType::f32, snapshot.shapes[i], snapshot.first_moment.data() + at);
    moments.add("exp_avg_sq." + snapshot.names[i], DType::f32, snapshot.shapes[i], snapshot.second_moment.data() + at);
  }
  // Every file is written and fsynced under a temporary name first; only then does the old
  // checkpoint lose its DONE marker and the new files take their names, DONE last. A crash while
  // writing leaves the previous checkpoint intact; one during the renames leaves no DONE (partial).
  AtomicFileWriter model_file(in(directory, kModelFile));
  masters.write(model_file);
  AtomicFileWriter config_file(in(directory, kConfigFile));
  config_file.write(hf_gpt_config_json(config));
  AtomicFileWriter optimizer_file(in(directory, kOptimizerFile));
  moments.write(optimizer_file);
  nlohmann::json trainer = {{"format_version", kFormatVersion}, {"step", state.step}, {"data_position", state.data_position},
                             {"seed", state.seed}, {"optimizer_steps", snapshot.steps}, {"run", state.run},
                             {"optimizer", state.optimizer.to_json()}};
  if (state.loss_scaler) trainer["loss_scaler"] = state.loss_scaler->to_json();
  AtomicFileWriter state_file(in(directory, kStateFile));
  state_file.write(json_text(trainer, 2) + "\n");
  const std::array<AtomicFileWriter*, 4> files = {&model_file, &config_file, &optimizer_file, &state_file};
  for (AtomicFileWriter* file : files) file->sync();

  if (fs::exists(in(directory, kDoneFile))) {
    fs::remove(in(directory, kDoneFile));
    sync_directory(directory);
  }
  for (AtomicFileWriter* file : files) file->commit();
  // DONE names the step and each file's XXH64 (as `xxhsum -H1` prints it), checked on resume.
  std::string done = "step " + std::to_string(state.step) + "\n";
  for (const char* file : kCheckedFiles) done += hex64(xxhash64_of_file(in(directory, file))) + "  " + file + "\n";
  write_file_atomically(in(directory, kDoneFile), done);
}

GptConfig read_checkpoint_config(const std::string& directory) {
  require_complete(directory);
  try {
    return read_hf_gpt_config(in(directory, kConfigFile));
  } catch (const std::exception& error) {
    throw CheckpointError(std::string("checkpoint is corrupt: ") + error.what());
  }
}

TrainerState read_trainer_state(const std::string& directory) {
  require_complete(directory);
  TrainerState state;
  try {
    const nlohmann::json trainer = parse_bounded_json(read_text_file(in(directory, kStateFile)));
    if (trainer.at("format_version").get<int>() != kFormatVersion) {
      throw CheckpointError("checkpoint '" + directory + "' has format version " + trainer.at("format_version").dump() +
                            "; this ferry resumes version " + std::to_string(kFormatVersion) +
                            " (version 1 lacks the optimizer settings); start a new run from its weights with --init-from " +
                            in(directory, kModelFile));
    }
    state.step = trainer.at("step").get<std::int64_t>();
    if (state.step < 0 || state.step > kMostSteps) {
      throw CheckpointError("checkpoint is corrupt: " + in(directory, kStateFile) + " says step " + std::to_string(state.step) +
                            ", expected 0 to " + std::to_string(kMostSteps));
    }
    state.data_position = trainer.at("data_position").get<std::uint64_t>();
    state.seed = trainer.at("seed").get<std::uint64_t>();
    state.run = trainer.at("run");
    state.optimizer = OptimizerSettings::from_json(trainer.at("optimizer"));
    if (trainer.contains("loss_scaler")) state.loss_scaler = LossScalerState::from_json(trainer.at("loss_scaler"));
    state.optimizer_steps = trainer.at("optimizer_steps").get<std::int64_t>();
    if (state.optimizer_steps < 0 || state.optimizer_steps > state.step) {
      throw CheckpointError("checkpoint is corrupt: " + in(directory, kStateFile) + " says the optimizer took " +
                            std::to_string(state.optimizer_steps) + " steps, expected 0 to the run's step " + std::to_string(state.step));
    }
  } catch (const nlohmann::json::exception& error) {
    throw CheckpointError("checkpoint '" + directory + "' is corrupt: " + kStateFile + ": " + error.what());
  } catch (const std::invalid_argument& error) {
    throw CheckpointError("checkpoint '" + directory + "' is corrupt: " + kStateFile + ": " + error.what());
  }
  return state;
}

TrainerState load_checkpoint(const std::string& directory, const GptModel& model, TrainingOptimizer& optimizer) {
  verify_checksums(directory);
  const TrainerState state = read_trainer_state(directory);
  OptimizerSnapshot snapshot = snapshot_layout(model);
  snapshot.steps = state.optimizer_steps;
  try {
    const SafetensorsFile weights(in(directory, kModelFile));
    const SafetensorsFile moments(in(directory, kOptimizerFile));
    for (std::size_t i = 0; i < snapshot.names.size(); ++i) {
      const auto at = static_cast<std::size_t>(snapshot.offsets[i]);
      load_f32(weights, snapshot.names[i], snapshot.shapes[i], snapshot.master.data() + at);
      load_f32(moments, "exp_avg." + snapshot.names[i], snapshot.shapes[i], snapshot.first_moment.data() + at);
      load_f32(moments, "exp_avg_sq." + snapshot.names[i], snapshot.shapes[i], snapshot.second_moment.data() + at);
    }
  } catch (const SafetensorsError& error) {
    throw CheckpointError(std::string("checkpoint '") + directory + "' is corrupt: " + error.what());
  } catch (const FileError& error) {
    throw CheckpointError(std::string("checkpoint '") + directory + "' is corrupt: " + error.what());
  }
  optimizer.restore(snapshot);
  return state;
}

}  // namespace ferry
