// The mean loss of a model over the first micro-batches of a data set, in file order: `ferry eval`
// and the validation loss that `ferry train --eval-every N --eval-data FILE` reports (llm.c's val loss).
#pragma once

#include <cstdint>

#include "engine/core/device.h"
#include "engine/train/token_data.h"
#include "models/gpt_model.h"

namespace ferry {

struct EvaluationResult {
  double loss = 0;  // NaN on meta, which computes nothing
  std::int64_t batches = 0;
};

// batches 0: every micro-batch of the data.
EvaluationResult evaluate_loss(Device& device, GptModel& model, const TokenDataset& data, std::int64_t batch, std::int64_t sequence,
                               std::int64_t batches);

}  // namespace ferry
