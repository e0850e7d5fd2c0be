// The mean loss of a model over the first micro-batches of a data set, in file order: `ferry eval`
// and the validation loss that `ferry train --eval-every N --eval-data FILE` reports (llm.c's val loss),
// on one rank or through a pipeline's stages.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/device.h"
#include "engine/data/token_data.h"
#include "models/gpt_model.h"
#include "schedule/pipeline_partition.h"
#include "schedule/pipeline_schedule.h"

namespace ferry {

struct EvaluationResult {
  double loss = 0;  // NaN on meta, which computes nothing
  std::int64_t batches = 0;
};

// batches 0: every micro-batch of the data.
EvaluationResult evaluate_loss(Device& device, GptModel& model, const TokenDataset& data, std::int64_t batch, std::int64_t sequence,
                               std::int64_t batches);

// The same through a pipeline, called by every rank of the pipeline group with its part of the model:
// each micro-batch passes the stages in order (forward only; a stage's output is sent on and nothing is
// kept), and every rank returns the last stage's mean loss. Between steps only: its messages take tag 0.
EvaluationResult evaluate_pipeline_loss(GptModel& model, Communicator& pipeline, const PipelineSchedule& schedule,
                                        const std::vector<StageBlocks>& stage_blocks, const TokenDataset& data, std::int64_t batch,
                                        std::int64_t sequence, std::int64_t batches);

}  // namespace ferry
