// Training checkpoints: DIR/model.safetensors (Hugging Face names, f32 master weights), DIR/config.json
// (HF GPT-2 config), DIR/optimizer.safetensors (AdamW moments), DIR/trainer_state.json (step, seed,
// data position, run settings, the optimizer's settings and the fp16 loss scaler's state), each written
// atomically, and DIR/DONE last. Loading refuses a missing, partial (no DONE) or corrupt checkpoint with
// an error that says which.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/train/trainer_state.h"
#include "engine/train/training_optimizer.h"
#include "models/gpt_model.h"

namespace ferry {

// The optimizer's state is saved the same way wherever it lives (device, host memory or NVMe), so a
// checkpoint resumes under any --offload-optimizer mode.
void save_checkpoint(const std::string& directory, const GptModel& model, TrainingOptimizer& optimizer, const TrainerState& state);
// The same from a snapshot of the whole model's state (a pipeline's stages gathered in one).
void save_checkpoint(const std::string& directory, const GptConfig& config, const OptimizerSnapshot& snapshot, const TrainerState& state);

// The trainer state of a complete checkpoint (trainer_state.json), without its tensors.
TrainerState read_trainer_state(const std::string& directory);

// Restores parameters, master weights and moments into model and optimizer; returns the trainer state.
TrainerState load_checkpoint(const std::string& directory, const GptModel& model, TrainingOptimizer& optimizer);

// The model shape recorded in a checkpoint (its config.json); validates that the checkpoint is complete.
GptConfig read_checkpoint_config(const std::string& directory);

}  // namespace ferry
