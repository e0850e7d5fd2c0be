#include "engine/train/pipeline_step.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "models/adamw_optimizer.h"

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
double gradient_sum_of_squares(const PipelineRankExecutor& executor, TrainingOptimizer& optimizer) {
  const bool duplicate_table = executor.model().part().has_token_table() && !executor.holds_last_stage();
  return optimizer.gradient_sum_of_squares(duplicate_table ? std::optional<std::size_t>(GptParameters::kWteIndex) : std::nullopt);
}

// Sums the first and last stages' token-table gradients into both, slice by slice: the first stage sends
// its slice, the last adds it to its own and sends the sum back. The gradients are wherever the
// optimizer keeps them (the device's memory on cpu, host memory under ZeRO-Offload).
void sum_tied_gradient(PipelineRankExecutor& executor, TrainingOptimizer& optimizer, Communicator& communicator, int tag) {
  const PipelineSchedule& schedule = *executor.setup().schedule;
  const std::int32_t first = schedule.rank_of_stage(0), last = schedule.rank_of_stage(schedule.stages - 1);
  const std::int32_t rank = executor.setup().rank;
  if (first == last || (rank != first && rank != last)) return;
  const std::span<float> table = optimizer.host_gradient(GptParameters::kWteIndex);
  const std::size_t slice = kTiedGradientSliceBytes / sizeof(float);
  std::vector<float> received(rank == last ? std::min(slice, table.size()) : 0);  // host memory, beside the MPI library's own
  for (std::size_t start = 0; start < table.size(); start += slice) {
    const std::span<float> part = table.subspan(start, std::min(slice, table.size() - start));
    if (rank == first) {
      communicator.send(part.data(), part.size_bytes(), last, tag);
      communicator.receive(part.data(), part.size_bytes(), last, tag);
    } else {
      communicator.receive(received.data(), part.size_bytes(), first, tag);
      add_into(part, {received.data(), part.size()});
      communicator.send(part.data(), part.size_bytes(), first, tag);
    }
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

PipelineStepResult run_pipeline_step(PipelineRankExecutor& executor, TrainingOptimizer& optimizer, Communicator& communicator,
                                     const std::vector<MicroBatchTokens>& micro_batches, const PipelineStepSettings& settings) {
  optimizer.begin_step();
  executor.begin_step(settings.step, micro_batches);
  if (!executor.run()) throw std::logic_error("a pipeline rank stopped before the end of its actions at " + executor.waiting_at());
  executor.finish_step();
  const PipelineSchedule& schedule = *executor.setup().schedule;
  if (has_values(executor)) sum_tied_gradient(executor, optimizer, communicator, tied_gradient_tag(schedule.stages, schedule.micro_batches));
  double sums[2] = {gradient_sum_of_squares(executor, optimizer), executor.loss_sum()};
  communicator.all_reduce(sums, 2, CommDataType::f64, ReduceOperation::sum);
  return step_optimizer(optimizer, sums[0], sums[1], has_values(executor), schedule.micro_batches, settings);
}

PipelineStepResult run_pipeline_step_in_process(const std::vector<InProcessRank>& ranks, const std::vector<MicroBatchTokens>& micro_batches,
                                                const PipelineStepSettings& settings) {
  if (ranks.empty()) throw std::invalid_argument("a pipeline step needs at least one rank");
  for (const InProcessRank& rank : ranks) {
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
  const InProcessRank& first = ranks.at(static_cast<std::size_t>(schedule.rank_of_stage(0)));
  const InProcessRank& last = ranks.at(static_cast<std::size_t>(schedule.rank_of_stage(schedule.stages - 1)));
  const bool values = has_values(*first.executor);
  if (first.executor != last.executor && values) {
    const std::span<float> sum = last.optimizer->host_gradient(GptParameters::kWteIndex);
    const std::span<float> copy = first.optimizer->host_gradient(GptParameters::kWteIndex);
    add_into(sum, copy);
    std::copy(sum.begin(), sum.end(), copy.begin());
  }
  double sum_of_squares = 0, loss_sum = 0;
  for (const InProcessRank& rank : ranks) {
    sum_of_squares += gradient_sum_of_squares(*rank.executor, *rank.optimizer);
    loss_sum += rank.executor->loss_sum();
  }
  PipelineStepResult result;
  for (const InProcessRank& rank : ranks) {
    result = step_optimizer(*rank.optimizer, sum_of_squares, loss_sum, values, schedule.micro_batches, settings);
  }
  return result;
}

}  // namespace ferry
