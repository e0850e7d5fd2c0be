// A pipeline's checkpoint is one model: every stage's optimizer snapshot (its parameters' master
// weights and moments) gathered on the pipeline group's rank 0 into one snapshot in stage order, the
// tied token table (held by the first and the last stage, equal on both) once.
#pragma once

#include "engine/comm/communicator.h"
#include "engine/train/training_optimizer.h"

namespace ferry {

// Every rank of `pipeline` calls it together; rank 0 returns the whole model's snapshot, the others an
// empty one. Snapshots that disagree on the step count are an error (std::logic_error).
OptimizerSnapshot gather_stage_snapshots(Communicator& pipeline, OptimizerSnapshot local);

}  // namespace ferry
