// `ferry train` and `ferry eval`: the plan of the run, its launch (one rank, every rank of a grid under
// mpirun, or every rank simulated on meta in this process, each running rank_training.h's loop), and
// the summary JSON of ARCHITECTURE.md's contract.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/train/train_options.h"
#include "engine/train/training_plan.h"

namespace ferry {

// `advisor`: what a rank that runs out of device memory says would fit (the command line's is engine/plan's
// search; empty: the error names no changes).
nlohmann::json run_training(const TrainOptions& options, const MemoryAdvisor& advisor = {});
nlohmann::json run_evaluation(const EvalOptions& options);

}  // namespace ferry
