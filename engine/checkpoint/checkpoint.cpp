#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_directory.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "engine/core/atomic_file.h"
#include "engine/core/file_hash.h"
#include "engine/core/safetensors.h"
#include "engine/core/safetensors_fill.h"
#include "engine/core/xxhash64.h"
#include "models/gpt_weights.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kConfigFile = "config.json";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kDoneFile = "DONE";
constexpr std::array<const char*, 4> kCheckedFiles = {kModelFile, kConfigFile, kOptimizerFile, kStateFile};

std::string in(const std::string& directory, const char* file) { return (fs::path(directory) / file).string(); }

// DONE's text parsed: "step N", then "HASH  FILE" for each checked file, in order, and nothing else.
// Empty when it is not (a crash leaves a zero-length DONE on ext4): done_marker_problem says why.
struct DoneMarker {
  std::int64_t step = -1;
  std::array<std::string, kCheckedFiles.size()> hashes;
};

std::optional<DoneMarker> parse_done_marker(const std::string& text, std::string& problem) {
  std::istringstream lines(text);
  std::string line;
  DoneMarker marker;
  if (text.empty()) {
    problem = "its DONE marker is empty (a save interrupted by a crash)";
    return std::nullopt;
  }
  if (!std::getline(lines, line) || line.rfind("step ", 0) != 0 || line.size() == 5 ||
      line.find_first_not_of("0123456789", 5) != std::string::npos || line.size() > 5 + 18) {
    problem = "its DONE marker is garbled (it does not start with the step)";
    return std::nullopt;
  }
  marker.step = std::stoll(line.substr(5));
  for (std::size_t i = 0; i < kCheckedFiles.size(); ++i) {
    const std::string suffix = std::string("  ") + kCheckedFiles[i];
    if (!std::getline(lines, line) || line.size() != 16 + suffix.size() || line.compare(16, std::string::npos, suffix) != 0 ||
        line.find_first_not_of("0123456789abcdef") < 16) {
      problem = std::string("its DONE marker lacks the checksum of ") + kCheckedFiles[i] + " (garbled, or saved by a ferry without checksums)";
      return std::nullopt;
    }
    marker.hashes[i] = line.substr(0, 16);
  }
  if (std::getline(lines, line) || !text.ends_with('\n')) {
    problem = "its DONE marker is garbled (text after the checksums)";
    return std::nullopt;
  }
  return marker;
}

// Each file's XXH64 against the one DONE recorded. Throws CheckpointError naming the file, the
// expected and the found hash.
void verify_checksums(const std::string& directory) {
  std::string problem;
  const std::optional<DoneMarker> marker = parse_done_marker(read_text_file(in(directory, kDoneFile)), problem);
  if (!marker) throw CheckpointError("checkpoint '" + directory + "' is partial: " + problem + "; " + intact_checkpoints_hint(directory));
  for (std::size_t i = 0; i < kCheckedFiles.size(); ++i) {
    const std::string found = xxhash64_text(xxhash64_of_file(in(directory, kCheckedFiles[i])));
    if (found != marker->hashes[i]) {
      throw CheckpointError("checkpoint is corrupt: " + in(directory, kCheckedFiles[i]) + " has XXH64 " + found + ", but DONE recorded " +
                            marker->hashes[i] + " when it was saved (a changed or damaged file); " + intact_checkpoints_hint(directory));
    }
  }
}

void require_complete(const std::string& directory) {
  if (!fs::is_directory(directory)) {
    throw CheckpointError("checkpoint '" + directory + "' does not exist (or is not a directory); check --resume");
  }
  if (fs::is_empty(directory)) {
    throw CheckpointError("'" + directory + "' is not a checkpoint (it is empty): give --resume a --save directory (it has `latest`) "
                          "or one of its step-N directories");
  }
  if (const std::string problem = checkpoint_incomplete_reason(directory); !problem.empty()) {
    throw CheckpointError("checkpoint '" + directory + "' is partial: " + problem + "; " + intact_checkpoints_hint(directory));
  }
  for (const char* file : {kModelFile, kConfigFile, kOptimizerFile, kStateFile}) {
    if (!fs::exists(in(directory, file))) throw CheckpointError("checkpoint '" + directory + "' is corrupt: " + file + " is missing");
  }
}

// Reads elements [first, first + count) of tensor `name` (F32, of `shape`) into `destination`.
void load_f32(const SafetensorsFile& file, const std::string& name, const Shape& shape, std::int64_t first, std::int64_t count,
              float* destination) {
  const SafetensorsEntry* entry = file.find(name);
  if (entry == nullptr) throw CheckpointError("checkpoint file '" + file.path() + "' is corrupt: tensor '" + name + "' is missing");
  if (entry->dtype != DType::f32 || entry->shape != shape) {
    throw CheckpointError("checkpoint file '" + file.path() + "': tensor '" + name + "' is " +
                          std::string(safetensors_dtype_name(entry->dtype)) + " " + shape_to_string(entry->shape) + ", expected F32 " +
                          shape_to_string(shape) + " (a checkpoint of another model?)");
  }
  file.read_elements(*entry, first, count, destination);
}

}  // namespace

std::string checkpoint_incomplete_reason(const std::string& directory) {
  std::error_code error;
  const fs::path done = fs::path(directory) / kDoneFile;
  if (!fs::exists(fs::symlink_status(done, error))) return "it has no DONE marker, so its save was interrupted";
  if (!fs::is_regular_file(fs::symlink_status(done, error))) return "its DONE is not a file ferry wrote";
  if (fs::file_size(done, error) > 4096 || error) return "its DONE marker is garbled (too large)";
  std::string problem;
  try {
    parse_done_marker(read_text_file(done.string()), problem);
  } catch (const std::exception& read_error) {
    problem = std::string("its DONE marker cannot be read: ") + read_error.what();
  }
  return problem;
}

void create_checkpoint_files(const std::string& directory, const GptConfig& config, std::int64_t optimizer_steps) {
  if (fs::exists(in(directory, kDoneFile)) || fs::exists(in(directory, kModelFile))) {
    throw CheckpointError("'" + directory + "' already holds a checkpoint; a checkpoint is written into a new directory");
  }
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) throw CheckpointError("cannot create checkpoint directory '" + directory + "': " + error.message());
  std::vector<SafetensorsEntry> masters, moments;
  for (const auto& [name, shape] : GptParameters::whole_model_shapes(config)) {
    masters.push_back({name, DType::f32, shape});  // f32 master weights
    moments.push_back({"exp_avg." + name, DType::f32, shape});
    moments.push_back({"exp_avg_sq." + name, DType::f32, shape});
  }
  create_sized_safetensors(in(directory, kModelFile), masters, {{"format", "pt"}});
  create_sized_safetensors(in(directory, kOptimizerFile), moments, {{"optimizer", "AdamW"}, {"steps", std::to_string(optimizer_steps)}});
}

void write_checkpoint_shard(const std::string& directory, const ShardExport& shard, const std::vector<std::string>& skipped) {
  SafetensorsFiller masters(in(directory, kModelFile));
  SafetensorsFiller moments(in(directory, kOptimizerFile));
  const OptimizerSnapshot& outline = shard.outline;
  shard.pieces([&](std::int64_t first, std::int64_t count, const float* master, const float* first_moment, const float* second_moment) {
    // One range, or the rank's shard of each unit; a piece may cross tensors and ranges.
    for_each_tensor_piece(outline, first, count, [&](std::size_t tensor, std::int64_t element, std::int64_t elements, std::int64_t at) {
      const std::string& name = outline.names[tensor];
      if (std::find(skipped.begin(), skipped.end(), name) != skipped.end()) return;
      masters.write(name, DType::f32, element, elements, master + at);
      moments.write("exp_avg." + name, DType::f32, element, elements, first_moment + at);
      moments.write("exp_avg_sq." + name, DType::f32, element, elements, second_moment + at);
    });
  });
  masters.sync();
  moments.sync();
}

void write_checkpoint_shard(const std::string& directory, const OptimizerSnapshot& shard, const std::vector<std::string>& skipped) {
  write_checkpoint_shard(directory, export_of(shard), skipped);
}

void finish_checkpoint(const std::string& directory, const GptConfig& config, const TrainerState& state, std::int64_t optimizer_steps) {
  write_file_atomically(in(directory, kConfigFile), hf_gpt_config_json(config));
  write_file_atomically(in(directory, kStateFile), trainer_state_text(state, optimizer_steps));
  // DONE names the step and each file's XXH64 (as `xxhsum -H1` prints it), checked on resume.
  std::string done = "step " + std::to_string(state.step) + "\n";
  for (const char* file : kCheckedFiles) done += xxhash64_text(xxhash64_of_file(in(directory, file))) + "  " + file + "\n";
  write_file_atomically(in(directory, kDoneFile), done);
}

void save_checkpoint(const std::string& directory, const GptModel& model, TrainingOptimizer& optimizer, const TrainerState& state) {
  const ShardExport shard = optimizer.export_shard();
  if (!(shard.outline.share == FlatShards(FlatRange{0, model.parameters().numel()})) || !model.part().whole()) {
    throw std::logic_error("save_checkpoint writes a whole model from one process; a grid's ranks save together (save_sharded_checkpoint)");
  }
  create_checkpoint_files(directory, model.config(), shard.outline.steps);
  write_checkpoint_shard(directory, shard, {});
  finish_checkpoint(directory, model.config(), state, shard.outline.steps);
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
  return parse_trainer_state(read_text_file(in(directory, kStateFile)), directory);
}

TrainerState load_checkpoint(const std::string& directory, const GptModel& model, TrainingOptimizer& optimizer) {
  verify_checksums(directory);
  const TrainerState state = read_trainer_state(directory);
  // Only the rank's share of the state is read (a data-parallel rank's partition, of each tensor the
  // elements in it), a piece at a time into where the optimizer keeps it; the optimizer's restore fills
  // in the rest of the parameters.
  const OptimizerSnapshot outline = shard_outline(model, optimizer.state_range());
  try {
    const SafetensorsFile weights(in(directory, kModelFile));
    const SafetensorsFile moments(in(directory, kOptimizerFile));
    optimizer.restore_by_pieces(model, state.optimizer_steps,
                                [&](std::int64_t first, std::int64_t count, float* master, float* first_moment, float* second_moment) {
                                  for_each_tensor_piece(outline, first, count,
                                                        [&](std::size_t tensor, std::int64_t element, std::int64_t elements, std::int64_t at) {
                                                          const std::string& name = outline.names[tensor];
                                                          const Shape& shape = outline.shapes[tensor];
                                                          load_f32(weights, name, shape, element, elements, master + at);
                                                          load_f32(moments, "exp_avg." + name, shape, element, elements, first_moment + at);
                                                          load_f32(moments, "exp_avg_sq." + name, shape, element, elements, second_moment + at);
                                                        });
                                });
  } catch (const SafetensorsError& error) {
    throw CheckpointError(std::string("checkpoint '") + directory + "' is corrupt: " + error.what());
  } catch (const FileError& error) {
    throw CheckpointError(std::string("checkpoint '") + directory + "' is corrupt: " + error.what());
  }
  return state;
}

}  // namespace ferry
