#include "engine/train/pipeline_step.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "models/adamw_optimizer.h"
#include "models/kernels/cpu/adamw.h"
#include "models/tensor_ops.h"

namespace ferry {
namespace {

// The tied table's gradient moves between the first and last stage in slices of this many bytes.
constexpr std::int64_t kTiedGradientSliceBytes = std::int64_t{8} << 20;

bool has_values(const PipelineRankExecutor& executor) { return executor.model().device().has_storage(); }

// The first stage's copy of the token table is not counted when another rank holds the last stage.
bool counts_token_table(const PipelineRankExecutor& executor) { return executor.holds_last_stage(); }

// Sums the first and last stages' token-table gradients into both, slice by slice: the first stage sends
// its slice, the last adds it to its own and sends the sum back.
void sum_tied_gradient(PipelineRankExecutor& executor, Communicator& communicator, int tag) {
  const PipelineSchedule& schedule = *executor.setup().schedule;
  const std::int32_t first = schedule.rank_of_stage(0), last = schedule.rank_of_stage(schedule.stages - 1);
  const std::int32_t rank = executor.setup().rank;
  if (first == last || (rank != first && rank != last)) return;
  GptModel& model = executor.model();
  const Tensor& table = model.gradients().wte;
  const std::int64_t columns = table.size(1), rows = table.size(0);
  const std::int64_t slice_rows = std::max<std::int64_t>(1, kTiedGradientSliceBytes / (columns * static_cast<std::int64_t>(sizeof(float))));
  const Tensor staging = rank == last ? Tensor::empty(model.device(), {std::min(slice_rows, rows), columns}, DType::f32,
                                                      MemoryCategory::communication, "pipeline.tied_gradient")
                                      : Tensor();
  for (std::int64_t start = 0; start < rows; start += slice_rows) {
    const std::int64_t count = std::min(slice_rows, rows - start);
    const Tensor slice = table.narrow(0, start, count);
    if (rank == first) {
      communicator.send(slice.data(), slice.nbytes(), last, tag);
      communicator.receive(slice.data(), slice.nbytes(), last, tag);
    } else {
      const Tensor received = staging.narrow(0, 0, count);
      communicator.receive(received.data(), received.nbytes(), first, tag);
      ops::residual_forward(slice, slice, received);
      communicator.send(slice.data(), slice.nbytes(), first, tag);
    }
  }
}

void require_whole_gradients(const GptModel& model) {
  if (model.gradient_storage() != GradientStorage::whole) {
    throw std::invalid_argument("pipeline parallelism keeps gradients on the device; --offload-optimizer with --pp is not supported yet");
  }
}

PipelineStepResult step_optimizer(TrainingOptimizer& optimizer, double sum_of_squares, double loss_sum, bool values,
                                  std::int32_t micro_batches, const PipelineStepSettings& settings) {
  PipelineStepResult result;
  result.gradient_norm = std::sqrt(sum_of_squares);
  result.loss = values ? loss_sum / static_cast<double>(micro_batches) : std::nan("");
  if (values && !std::isfinite(result.loss)) {
    throw std::runtime_error("the loss became " + std::to_string(result.loss) + " at step " + std::to_string(settings.step + 1) +
                             "; lower --lr or enable --grad-clip (nothing was saved from this step)");
  }
  optimizer.step(static_cast<float>(settings.learning_rate), clip_scale(result.gradient_norm, settings.grad_clip));
  return result;
}

}  // namespace

double local_gradient_sum_of_squares(const GptModel& model, bool count_token_table) {
  require_whole_gradients(model);
  if (!model.device().has_storage()) return 0.0;
  double sum = 0;
  for (const NamedTensor& each : model.gradients().named()) {
    if (!count_token_table && each.index == GptParameters::kWteIndex) continue;
    sum += cpu::sum_of_squares(each.tensor->data_as<float>(), each.tensor->numel());
  }
  if (!std::isfinite(sum)) {
    throw std::runtime_error("a gradient became inf or NaN; lower --lr or enable --grad-clip (the optimizer state was not updated)");
  }
  return sum;
}

PipelineStepResult run_pipeline_step(PipelineRankExecutor& executor, TrainingOptimizer& optimizer, Communicator& communicator,
                                     const std::vector<MicroBatchTokens>& micro_batches, const PipelineStepSettings& settings) {
  require_whole_gradients(executor.model());
  optimizer.begin_step();
  executor.begin_step(settings.step, micro_batches);
  if (!executor.run()) throw std::logic_error("a pipeline rank stopped before the end of its actions at " + executor.waiting_at());
  executor.finish_step();
  const PipelineSchedule& schedule = *executor.setup().schedule;
  if (has_values(executor)) sum_tied_gradient(executor, communicator, 2 * schedule.micro_batches * schedule.stages);
  double sums[2] = {local_gradient_sum_of_squares(executor.model(), counts_token_table(executor)), executor.loss_sum()};
  communicator.all_reduce(sums, 2, CommDataType::f64, ReduceOperation::sum);
  return step_optimizer(optimizer, sums[0], sums[1], has_values(executor), schedule.micro_batches, settings);
}

PipelineStepResult run_pipeline_step_in_process(const std::vector<InProcessRank>& ranks, const std::vector<MicroBatchTokens>& micro_batches,
                                                const PipelineStepSettings& settings) {
  if (ranks.empty()) throw std::invalid_argument("a pipeline step needs at least one rank");
  for (const InProcessRank& rank : ranks) {
    require_whole_gradients(rank.executor->model());
    rank.optimizer->begin_step();
    rank.executor->begin_step(settings.step, micro_batches);
  }
  // Take turns until every list is done; a full round without progress is a deadlock.
  std::vector<bool> done(ranks.size(), false);
  for (bool all_done = false; !all_done;) {
    all_done = true;
    bool progressed = false;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (done[i]) continue;
      const std::string before = ranks[i].executor->waiting_at();
      done[i] = ranks[i].executor->run();
      progressed = progressed || done[i] || ranks[i].executor->waiting_at() != before;
      all_done = all_done && done[i];
    }
    if (!all_done && !progressed) {
      std::string waits;
      for (std::size_t i = 0; i < ranks.size(); ++i) waits += " rank " + std::to_string(i) + " at " + ranks[i].executor->waiting_at() + ";";
      throw std::logic_error("the pipeline schedule is not progressing:" + waits);
    }
  }
  for (const InProcessRank& rank : ranks) rank.executor->finish_step();

  const PipelineSchedule& schedule = *ranks.front().executor->setup().schedule;
  GptModel& first = ranks.at(static_cast<std::size_t>(schedule.rank_of_stage(0))).executor->model();
  GptModel& last = ranks.at(static_cast<std::size_t>(schedule.rank_of_stage(schedule.stages - 1))).executor->model();
  const bool values = first.device().has_storage();
  if (&first != &last && values) {
    const Tensor& sum = last.gradients().wte;
    ops::residual_forward(sum, sum, first.gradients().wte);
    std::memcpy(first.gradients().wte.data(), sum.data(), sum.nbytes());
  }
  double sum_of_squares = 0, loss_sum = 0;
  for (const InProcessRank& rank : ranks) {
    sum_of_squares += local_gradient_sum_of_squares(rank.executor->model(), counts_token_table(*rank.executor));
    loss_sum += rank.executor->loss_sum();
  }
  PipelineStepResult result;
  for (const InProcessRank& rank : ranks) {
    result = step_optimizer(*rank.optimizer, sum_of_squares, loss_sum, values, schedule.micro_batches, settings);
  }
  return result;
}

}  // namespace ferry
