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

EvaluationResult evaluate_pipeline_loss(GptModel& model, Communicator& pipeline, const PipelineSchedule& schedule,
                                        const std::vector<StageBlocks>& stage_blocks, const TokenDataset& data, std::int64_t batch,
                                        std::int64_t sequence, std::int64_t batches) {
  constexpr int kTag = 0;  // the step's messages have all arrived: pairs of ranks exchange these in order
  Device& device = model.device();
  const bool values = device.has_storage();
  const std::int32_t rank = pipeline.rank();
  DataLoader loader(data, batch, sequence, false, 0);
  EvaluationResult result;
  result.batches = batches == 0 ? loader.windows_per_epoch() : batches;
  const Shape shape{batch, sequence, model.config().hidden};
  std::vector<std::int32_t> inputs, targets;
  double total = 0;
  for (std::int64_t i = 0; i < result.batches; ++i) {
    loader.next(inputs, targets);  // every rank reads, so that all take the same micro-batches
    Tensor x;                      // the output of this rank's last stage, when the next is here too
    for (std::int32_t stage = 0; stage < schedule.stages; ++stage) {
      if (schedule.rank_of_stage(stage) != rank) continue;
      if (stage == 0) {
        x = model.evaluate_embedding(device_tokens(device, inputs, batch, sequence, "tokens"));
      } else if (schedule.rank_of_stage(stage - 1) != rank) {
        x = Tensor::empty(device, shape, model.parameter_dtype(), MemoryCategory::activations, "pipeline.eval.input");
        pipeline.receive(x.data(), x.nbytes(), schedule.rank_of_stage(stage - 1), kTag);
      }
      const StageBlocks& blocks = stage_blocks[static_cast<std::size_t>(stage)];
      x = model.evaluate_blocks(std::move(x), blocks.first, blocks.end);
      if (stage == schedule.stages - 1) {
        total += model.evaluate_head(x, device_tokens(device, targets, batch, sequence, "targets"));
      } else if (schedule.rank_of_stage(stage + 1) != rank) {
        pipeline.send(x.data(), x.nbytes(), schedule.rank_of_stage(stage + 1), kTag);
      }
    }
  }
  pipeline.all_reduce(&total, 1, CommDataType::f64, ReduceOperation::sum);  // only the last stage's rank adds
  result.loss = values ? total / static_cast<double>(result.batches) : std::nan("");
  return result;
}

}  // namespace ferry
