// A checkpoint written by every rank of a grid at once: each writes its own shard of the consolidated
// files in place (a data-parallel rank its partition, a pipeline rank its stages), so no rank gathers
// the model or its optimizer state, and the files are the same whatever the grid.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/checkpoint/trainer_state.h"
#include "engine/comm/communicator.h"
#include "engine/optim/training_optimizer.h"
#include "models/gpt_config.h"

namespace ferry {

// Every rank of `world` calls it together. Rank 0 stages the checkpoint of `step` under `root`
// (checkpoint_directory.h) and creates its files; every rank writes `shard` a piece at a time (leaving out `skipped`)
// and syncs; once all have reported, rank 0 writes DONE, names the directory and moves `latest`
// (pruning beyond `keep`). A failure on any rank fails the save on every rank with the same
// CheckpointError naming the rank, and the previous checkpoint stays. Returns the checkpoint's
// directory (on every rank).
std::string save_sharded_checkpoint(Communicator& world, const std::string& root, std::int64_t step, std::int64_t keep,
                                    const GptConfig& config, const ShardExport& shard, const std::vector<std::string>& skipped,
                                    const TrainerState& state);
// The same for a shard held whole.
std::string save_sharded_checkpoint(Communicator& world, const std::string& root, std::int64_t step, std::int64_t keep,
                                    const GptConfig& config, const OptimizerSnapshot& shard, const std::vector<std::string>& skipped,
                                    const TrainerState& state);

}  // namespace ferry
