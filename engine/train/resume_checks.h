// What a resumed run must share with the run that saved its checkpoint, for the resume to be exact:
// the contract stored in trainer_state.json (global batch in micro-batches, not grad-accum, so a
// checkpoint resumes at another grid; the data by its content), the model's shape, and where it stops.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/data/token_data.h"
#include "engine/train/train_options.h"
#include "engine/train/training_plan.h"
#include "models/gpt_config.h"

namespace ferry {

// Settings a resumed run must share with the run that saved.
nlohmann::json resume_contract(const TrainingPlan& plan, const TokenDataset& data);
// Throws std::invalid_argument naming the first setting of `current` the checkpoint in `directory`
// disagrees with, by its flag, and the flags and values that would resume (at this run's `dp`, another
// global batch in micro-batches names the --grad-accum that keeps it, or the ranks to launch).
void check_resume_contract(nlohmann::json saved, const nlohmann::json& current, const std::string& directory, int dp);
// A resume takes the model's shape from the checkpoint; shape flags may repeat it, not change it.
void check_shape_flags_against_checkpoint(const TrainOptions& o, const GptConfig& config);
// The last step this run takes: --steps, or earlier at the first multiple of --exit-interval after
// the step it starts from.
std::int64_t stopping_step(const TrainingPlan& plan, std::int64_t first_step);

}  // namespace ferry
