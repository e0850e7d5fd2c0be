// `ferry train --plan auto`: plan the ranks this launch started as `ferry plan` plans a cluster of cpu
// ranks (its nodes x ranks per node, each with the run's --device-memory), on rank 0 alone, and train
// the fastest plan that fits. Every rank receives rank 0's choice, so the ranks agree on it by construction.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "engine/comm/communicator.h"
#include "engine/train/train_options.h"

namespace ferry {

struct AutoPlan {
  TrainOptions options;   // the run's options as the chosen plan sets them
  nlohmann::json record;  // rank 0: the plan as the summary's "plan" (settings, predicted peaks, step time); null elsewhere
  // Several ranks: the communicator that carried the choice. Keep it until training ends: its MPI
  // session is the process's, which the run's own communicator joins (MPI starts and ends once).
  std::unique_ptr<Communicator> world;
};

// The global batch is train_batch_size when the config gives it, else --batch x --grad-accum x the
// launched ranks (the sequences a step of plain data parallelism would take). Throws
// std::invalid_argument, on every rank with rank 0's text, when no plan fits or the run cannot be planned.
AutoPlan resolve_auto_plan(const TrainOptions& options);

}  // namespace ferry
