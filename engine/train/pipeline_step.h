// One optimizer step of a pipeline rank: it runs its schedule's actions; then the tied token table's
// gradient is summed between the first and the last stage (both hold the table), the gradient norm and
// the loss are reduced over the pipeline's ranks, and the rank steps its optimizer over its parameters.
#pragma once

#include <vector>

#include "engine/comm/communicator.h"
#include "engine/optim/training_optimizer.h"
#include "engine/pipeline/pipeline_executor.h"
#include "engine/train/training_step.h"

namespace ferry {

struct PipelineStepSettings {
  std::int64_t step = 0;
  double learning_rate = 0;
  double grad_clip = 0;
  // A dp x pp grid: this stage's data-parallel group (the loss is averaged over it); null: dp 1.
  Communicator* data_parallel = nullptr;
};

// This process is one rank of the pipeline; the others are reached through `communicator`.
// A step's messages are tagged one per (micro-batch, receiving stage, direction), then one more for the
// tied table's gradient: tags 0 .. 2 * micro_batches * stages. Throws std::invalid_argument, before
// anything is built, when that passes the communicator's largest tag (MPI_TAG_UB under MPI).
void check_pipeline_tags(std::int64_t stages, std::int64_t micro_batches, int max_tag);
int tied_gradient_tag(std::int64_t stages, std::int64_t micro_batches);

// With a loss scaler (fp16) the backward runs on the scaled loss; every rank sees the same overflow (the
// sum of squares is reduced over the stages) and skips the same steps.
StepResult run_pipeline_step(PipelineRankExecutor& executor, TrainingOptimizer& optimizer, Communicator& communicator,
                             const std::vector<MicroBatchTokens>& micro_batches, const PipelineStepSettings& settings,
                             LossScaler* scaler = nullptr);

}  // namespace ferry
