#include "engine/train/pipeline_step.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "engine/train/training_step.h"

namespace ferry {
namespace {

// The tied table's gradient moves between the first and last stage in slices of this many bytes.
constexpr std::int64_t kTiedGradientSliceBytes = std::int64_t{8} << 20;

// sum[i] += addend[i], in f32 as the device's residual add.
void add_into(std::span<float> sum, std::span<const float> addend) {
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += addend[i];
}

bool has_values(const PipelineRankExecutor& executor) { return executor.model().device().has_storage(); }

// The sum of squares of a rank's gradients: the first stage's copy of the token table is left out when
// another rank holds the last stage (which counts the summed table once).
// Unchecked (fp16): inf or NaN when a gradient overflowed.
double gradient_sum_of_squares(const PipelineRankExecutor& executor, TrainingOptimizer& optimizer, bool unchecked) {
  const bool duplicate_table = executor.model().part().has_token_table() && !executor.holds_last_stage();
  const std::optional<std::size_t> excluded = duplicate_table ? std::optional<std::size_t>(GptParameters::kWteIndex) : std::nullopt;
  return unchecked ? optimizer.unchecked_gradient_sum_of_squares(excluded) : optimizer.gradient_sum_of_squares(excluded);
}

// Sums the first and last stages' token-table gradients into both, slice by slice through host memory:
// the first stage sends its slice, the last adds it to its own and sends the sum back. The gradients are
// wherever the optimizer keeps them (the device's memory, a GPU's too; host memory under ZeRO-Offload):
// slices are read from and written back there, so every device adds in f32 on the host alike. A dry run on
// meta sends the same messages without bytes (its group moves nothing).
void sum_tied_gradient(PipelineRankExecutor& executor, TrainingOptimizer& optimizer, Communicator& communicator, int tag) {
  const PipelineSchedule& schedule = *executor.setup().schedule;
  const std::int32_t first = schedule.rank_of_stage(0), last = schedule.rank_of_stage(schedule.stages - 1);
  const std::int32_t rank = executor.setup().rank;
  if (first == last || (rank != first && rank != last)) return;
  const bool values = has_values(executor);
  const GptConfig& config = executor.model().config();  // the table's shape, held whole or (ZeRO 3) partitioned
  const auto elements = static_cast<std::size_t>(config.vocab * config.hidden);
  const std::size_t slice = kTiedGradientSliceBytes / sizeof(float);
  // Host memory, beside the MPI library's own: this rank's slice, and the last stage's received one.
  std::vector<float> own(values ? std::min(slice, elements) : 0), received(rank == last && values ? std::min(slice, elements) : 0);
  for (std::size_t start = 0; start < elements; start += slice) {
    const std::size_t count = std::min(slice, elements - start);
    const std::span<float> part = values ? std::span<float>(own).first(count) : std::span<float>();  // meta: no bytes
    if (values) optimizer.read_gradient(GptParameters::kWteIndex, start, part);
    const std::size_t bytes = count * sizeof(float);
    if (rank == first) {
      communicator.send(part.data(), bytes, last, tag);
      communicator.receive(part.data(), bytes, last, tag);
    } else {
      communicator.receive(received.data(), bytes, first, tag);
      if (values) add_into(part, {received.data(), count});
      communicator.send(part.data(), bytes, first, tag);
    }
    if (values) optimizer.write_gradient(GptParameters::kWteIndex, start, part);
  }
}

}  // namespace

void check_pipeline_tags(std::int64_t stages, std::int64_t micro_batches, int max_tag) {
  const std::int64_t largest = 2 * micro_batches * stages;  // stages and micro-batches were checked positive and bounded
  if (largest > max_tag) {
    throw std::invalid_argument("a pipeline of " + std::to_string(stages) + " stages and " + std::to_string(micro_batches) +
                                " micro-batches tags its messages up to " + std::to_string(largest) + ", past the communicator's largest tag " +
                                std::to_string(max_tag) + " (MPI_TAG_UB under MPI): use at most " +
                                std::to_string(max_tag / (2 * stages)) + " micro-batches per step");
  }
}

int tied_gradient_tag(std::int64_t stages, std::int64_t micro_batches) { return static_cast<int>(2 * micro_batches * stages); }

StepResult run_pipeline_step(PipelineRankExecutor& executor, TrainingOptimizer& optimizer, Communicator& communicator,
                             const std::vector<MicroBatchTokens>& micro_batches, const PipelineStepSettings& settings, LossScaler* scaler) {
  StepResult result;
  result.loss_scale = scaler != nullptr ? scaler->scale() : 1.0;
  optimizer.begin_step();
  optimizer.accumulate_whole_step();
  executor.begin_step(settings.step, micro_batches, result.loss_scale);
  executor.run();
  executor.finish_step();
  const PipelineSchedule& schedule = *executor.setup().schedule;
  const bool values = has_values(executor);
  // Within each data-parallel replica, the first and last stages' tied-table gradients are summed; then
  // each stage's dp group reduces its own (DeepSpeed's order: tied gradients, then data parallelism).
  sum_tied_gradient(executor, optimizer, communicator, tied_gradient_tag(schedule.stages, schedule.micro_batches));
  optimizer.end_backward();
  // Every rank learns the loss (held by the last stage) and whether any gradient overflowed (fp16).
  double sums[2] = {gradient_sum_of_squares(executor, optimizer, scaler != nullptr), executor.loss_sum()};
  communicator.all_reduce(sums, 2, CommDataType::f64, ReduceOperation::sum);
  result.loss = sums[1] / static_cast<double>(schedule.micro_batches);
  if (settings.data_parallel != nullptr) settings.data_parallel->all_reduce(&result.loss, 1, CommDataType::f64, ReduceOperation::average);
  if (!values) result.loss = std::nan("");  // a dry run computes no values
  check_loss(result, values, scaler, settings.step);
  return apply_optimizer_update(optimizer, result, sums[0], scaler, settings.step, settings.learning_rate, settings.grad_clip);
}

}  // namespace ferry
