// One rank of a training grid: the loop every rank of every grid runs (one rank, dp ranks, pipeline
// ranks, each also simulated on meta), and the dry runs of a whole grid in one process that choose a
// pipeline's split and advise what would fit after an out-of-memory error.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grid/process_grid.h"
#include "engine/train/model_config.h"
#include "engine/train/pipeline_layout.h"
#include "engine/train/train_options.h"
#include "engine/train/training_plan.h"
#include "models/gpt_config.h"

namespace ferry {

// Trains this rank of `grid` as `plan` says (its only input); returns its summary with `ranks` holding
// its own entry. `layout`: a pipeline's, chosen once for a dry run of every rank (null: chosen here, the
// same on every rank).
nlohmann::json train_on_grid(const TrainingPlan& plan, const ProcessGrid& grid, const PipelineLayoutChoice* layout);

// Every rank of `plan`'s grid, one after the other in this process on meta (their groups move
// nothing): rank 0's summary with every rank's entry, the memory the fullest rank's.
nlohmann::json simulate_every_rank(const TrainingPlan& plan, const PipelineLayoutChoice* layout);

// A pipeline's recompute policy and split of the blocks into stages (pipeline_layout.h), by dry runs of
// every rank when --device-memory or --checkpointing auto asks for them.
PipelineLayoutChoice choose_grid_layout(const TrainingPlan& plan, bool prints);

// Every rank's entry of a dry run of `plan` on meta, without a limit (a pipeline's layout chosen as the
// run would choose it): peaks, categories and bytes sent per rank, what the planner judges a plan by.
nlohmann::json dry_run_every_rank(const TrainingPlan& plan);

// The peak reserved bytes of `plan`'s fullest rank, by a dry run of every rank on meta (a pipeline's
// layout chosen as the run would choose it): what out-of-memory advice measures each variant by.
std::int64_t fullest_rank_peak(const TrainingPlan& plan);

}  // namespace ferry
