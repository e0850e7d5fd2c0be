#include "engine/train/checkpoint.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "engine/core/atomic_file.h"
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
constexpr int kFormatVersion = 1;

std::string in(const std::string& directory, const char* file) { return (fs::path(directory) / file).string(); }

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

void load_f32(const SafetensorsFile& file, const std::string& name, const Tensor& tensor) {
  const SafetensorsEntry* entry = file.find(name);
  if (entry == nullptr) throw CheckpointError("checkpoint file '" + file.path() + "' is corrupt: tensor '" + name + "' is missing");
  if (entry->dtype != DType::f32 || entry->shape != tensor.shape()) {
    throw CheckpointError("checkpoint file '" + file.path() + "': tensor '" + name + "' is " +
                          std::string(safetensors_dtype_name(entry->dtype)) + " " + shape_to_string(entry->shape) + ", expected F32 " +
                          shape_to_string(tensor.shape()) + " (a checkpoint of another model?)");
  }
  if (!tensor.device().has_storage()) return;
  std::vector<float> values(static_cast<std::size_t>(tensor.numel()));
  file.read_raw(*entry, values.data());
  tensor.copy_from_host(values.data());
}

}  // namespace

void save_checkpoint(const std::string& directory, const GptModel& model, const AdamWOptimizer& optimizer,
                     const TrainerState& state) {
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) throw CheckpointError("cannot create checkpoint directory '" + directory + "': " + error.message());
  // Every file is written and fsynced under a temporary name first; only then does the old
  // checkpoint lose its DONE marker and the new files take their names, DONE last. A crash while
  // writing leaves the previous checkpoint intact; one during the renames leaves no DONE (partial).
  AtomicFileWriter model_file(in(directory, kModelFile));
  write_safetensors_f32(model_file, optimizer.master_weights(), {{"format", "pt"}});  // f32 master weights
  AtomicFileWriter config_file(in(directory, kConfigFile));
  config_file.write(hf_gpt_config_json(model.config()));
  std::vector<NamedTensor> moments;
  for (const OptimizerState& each : optimizer.states()) {
    moments.push_back({"exp_avg." + each.name, &each.first_moment});
    moments.push_back({"exp_avg_sq." + each.name, &each.second_moment});
  }
  AtomicFileWriter optimizer_file(in(directory, kOptimizerFile));
  write_safetensors_f32(optimizer_file, moments, {{"optimizer", "AdamW"}, {"steps", std::to_string(optimizer.steps_taken())}});
  const nlohmann::json trainer = {{"format_version", kFormatVersion}, {"step", state.step}, {"data_position", state.data_position},
                                  {"seed", state.seed}, {"optimizer_steps", optimizer.steps_taken()}, {"run", state.run}};
  AtomicFileWriter state_file(in(directory, kStateFile));
  state_file.write(trainer.dump(2) + "\n");
  const std::array<AtomicFileWriter*, 4> files = {&model_file, &config_file, &optimizer_file, &state_file};
  for (AtomicFileWriter* file : files) file->sync();

  if (fs::exists(in(directory, kDoneFile))) {
    fs::remove(in(directory, kDoneFile));
    sync_directory(directory);
  }
  for (AtomicFileWriter* file : files) file->commit();
  write_file_atomically(in(directory, kDoneFile), "step " + std::to_string(state.step) + "\n");
}

GptConfig read_checkpoint_config(const std::string& directory) {
  require_complete(directory);
  try {
    return read_hf_gpt_config(in(directory, kConfigFile));
  } catch (const std::exception& error) {
    throw CheckpointError(std::string("checkpoint is corrupt: ") + error.what());
  }
}

TrainerState load_checkpoint(const std::string& directory, const GptModel& model, AdamWOptimizer& optimizer) {
  require_complete(directory);
  TrainerState state;
  try {
    const nlohmann::json trainer = nlohmann::json::parse(read_text_file(in(directory, kStateFile)));
    if (trainer.at("format_version").get<int>() != kFormatVersion) {
      throw CheckpointError("checkpoint '" + directory + "' has format version " + trainer.at("format_version").dump() +
                            "; this ferry reads version " + std::to_string(kFormatVersion));
    }
    state.step = trainer.at("step").get<std::int64_t>();
    state.data_position = trainer.at("data_position").get<std::uint64_t>();
    state.seed = trainer.at("seed").get<std::uint64_t>();
    state.run = trainer.at("run");
    optimizer.set_steps_taken(trainer.at("optimizer_steps").get<std::int64_t>());
  } catch (const nlohmann::json::exception& error) {
    throw CheckpointError("checkpoint '" + directory + "' is corrupt: " + kStateFile + ": " + error.what());
  }
  try {
    const SafetensorsFile weights(in(directory, kModelFile));
    const std::vector<NamedTensor> masters = optimizer.master_weights();
    for (const NamedTensor& each : masters) load_f32(weights, each.name, *each.tensor);
    // bf16 parameters are the rounded master weights, exactly as after the optimizer step that saved them.
    const std::vector<NamedTensor> parameters = model.parameters().named();
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      const Tensor& parameter = *parameters[i].tensor;
      if (parameter.dtype() == DType::bf16 && parameter.device().has_storage()) {
        convert_f32_to_bf16(masters[i].tensor->data_as<float>(), parameter.data_as<std::uint16_t>(), static_cast<std::size_t>(parameter.numel()));
      }
    }
    const SafetensorsFile moments(in(directory, kOptimizerFile));
    for (const OptimizerState& each : optimizer.states()) {
      load_f32(moments, "exp_avg." + each.name, each.first_moment);
      load_f32(moments, "exp_avg_sq." + each.name, each.second_moment);
    }
  } catch (const SafetensorsError& error) {
    throw CheckpointError(std::string("checkpoint '") + directory + "' is corrupt: " + error.what());
  } catch (const FileError& error) {
    throw CheckpointError(std::string("checkpoint '") + directory + "' is corrupt: " + error.what());
  }
  return state;
}

}  // namespace ferry
