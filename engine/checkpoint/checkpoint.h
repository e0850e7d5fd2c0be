// Training checkpoints: DIR/model.safetensors (Hugging Face names, f32 master weights), DIR/config.json
// (HF GPT-2 config), DIR/optimizer.safetensors (AdamW moments), DIR/trainer_state.json (step, seed,
// data position, run settings, the optimizer's settings and the fp16 loss scaler's state), and DIR/DONE
// last. The tensor files are consolidated (every tensor whole, under its HF name, whatever the grid) and
// written in place by the ranks that own each part, so a checkpoint resumes at any grid. Loading refuses
// a missing, partial (no DONE) or corrupt checkpoint with an error that says which.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/checkpoint/trainer_state.h"
#include "engine/optim/training_optimizer.h"
#include "models/gpt_model.h"

namespace ferry {

// Writing a checkpoint into a new directory, in three parts so the ranks of a grid share it:
// 1. (one rank) the directory and its two tensor files at full size, every tensor of the model of
//    `config` listed and zero; throws CheckpointError when `directory` already holds a checkpoint.
void create_checkpoint_files(const std::string& directory, const GptConfig& config, std::int64_t optimizer_steps);
// 2. (every rank) its shard's master weights and moments written in place a piece at a time and synced,
//    leaving out the parameters named in `skipped` (another rank writes them: a pipeline's second copy of
//    the tied table); the second form writes a shard held whole.
void write_checkpoint_shard(const std::string& directory, const ShardExport& shard, const std::vector<std::string>& skipped);
void write_checkpoint_shard(const std::string& directory, const OptimizerSnapshot& shard, const std::vector<std::string>& skipped);
// 3. (one rank, after every shard is written) config.json, trainer_state.json and DONE with each file's
//    checksum.
void finish_checkpoint(const std::string& directory, const GptConfig& config, const TrainerState& state, std::int64_t optimizer_steps);

// All three in one process, for a whole model whose optimizer holds all of its state (one rank). The
// optimizer's state is saved the same way wherever it lives (device, host memory or NVMe), so a
// checkpoint resumes under any --offload-optimizer mode.
void save_checkpoint(const std::string& directory, const GptModel& model, TrainingOptimizer& optimizer, const TrainerState& state);

// Empty when `directory` holds a complete checkpoint by its DONE marker (written last, atomically: the
// step, then every file's XXH64); otherwise why not: no DONE, an empty one (what a crash leaves on ext4),
// a garbled one, or one without every file's checksum. The files themselves are hashed on load.
std::string checkpoint_incomplete_reason(const std::string& directory);

// The trainer state of a complete checkpoint (trainer_state.json), without its tensors.
TrainerState read_trainer_state(const std::string& directory);

// Restores parameters, master weights and moments into model and optimizer; returns the trainer state.
TrainerState load_checkpoint(const std::string& directory, const GptModel& model, TrainingOptimizer& optimizer);

// The model shape recorded in a checkpoint (its config.json); validates that the checkpoint is complete.
GptConfig read_checkpoint_config(const std::string& directory);

}  // namespace ferry
