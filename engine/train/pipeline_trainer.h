// `ferry train --pp P`: the model's blocks split into P contiguous stages (pipeline_layout.h), a schedule's
// actions run by one executor per rank (one process per rank under mpirun, or all ranks in this process
// taking turns, one device each), and a summary that lists every rank's memory beside the prediction.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/train/train_options.h"

namespace ferry {

// --pp above 1, or launched as several ranks.
bool pipeline_requested(const TrainOptions& options);

// Runs the training; returns the summary on the rank that writes it (rank 0), null on the others.
nlohmann::json run_pipeline_training(const TrainOptions& options);

}  // namespace ferry
