#include "engine/train/evaluation.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/train/training_step.h"

namespace ferry {

EvaluationResult evaluate_loss(Device& device, GptModel& model, const TokenDataset& data, std::int64_t batch, std::int64_t sequence,
                               std::int64_t batches) {
  DataLoader loader(data, batch, sequence, false, 0);
  EvaluationResult result;
  result.batches = batches == 0 ? loader.windows_per_epoch() : batches;
  std::vector<std::int32_t> inputs, targets;
  double total = 0;
  for (std::int64_t i = 0; i < result.batches; ++i) {
    loader.next(inputs, targets);
    total += model.evaluate(device_tokens(device, inputs, batch, sequence, "tokens"), device_tokens(device, targets, batch, sequence, "targets"));
  }
  result.loss = device.has_storage() ? total / static_cast<double>(result.batches) : std::nan("");
  return result;
}

}  // namespace ferry
