// A pipeline rank inside the grid trainer: the schedule lowered for the pipeline group (the same on
// every rank), this rank's transport and executor over its part of the model, and the summary's account
// of the schedule and of the rank's activation stash beside the simulator's prediction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/comm/communicator.h"
#include "engine/pipeline/pipeline_transports.h"
#include "engine/train/evaluation.h"
#include "engine/train/training_step.h"
#include "schedule/pipeline_schedule.h"
#include "schedule/pipeline_simulator.h"

namespace ferry {

struct PipelineSchedulePlan {
  std::string name;               // --schedule
  PipelineSchedule schedule;      // lowered: receives placed where they delay least
  PipelineCosts costs;            // unit costs per rank's blocks (a virtual stage costs 1/V)
  PipelineSimulation simulation;  // of the unit costs, for the summary's bubble
};

// Schedule `name` for `ranks` pipeline ranks and `micro_batches` per step, lowered and validated.
// Throws std::invalid_argument, before anything is built, when its message tags pass `max_tag`.
PipelineSchedulePlan plan_pipeline_schedule(const std::string& name, std::int32_t ranks, std::int32_t micro_batches, int max_tag);

class PipelineStage {
 public:
  // `settings`: this rank's micro-batches per step (the schedule's), its dp group and the shapes.
  PipelineStage(GptModel& model, Communicator& pipeline, const PipelineSchedulePlan& plan, const std::vector<StageBlocks>& stage_blocks,
                const StepSettings& settings, std::vector<ActivationKeep> keeps);

  // One optimizer step: reads the global batch (keeping this dp rank's share) and runs the schedule.
  StepResult run_step(TrainingOptimizer& optimizer, DataLoader& loader, std::int64_t step, double learning_rate, LossScaler* scaler);

  // The validation loss through the pipeline (every rank of the group calls it; every rank gets it).
  EvaluationResult evaluate(const TokenDataset& data, std::int64_t batches);

  // This rank's stages and its activation stash beside the simulator's prediction, for its `ranks` entry.
  nlohmann::json describe() const;

 private:
  Communicator& pipeline_;
  const PipelineSchedulePlan& plan_;
  StepSettings settings_;
  CommunicatorTransport transport_;
  PipelineRankExecutor executor_;
  std::vector<MicroBatchTokens> tokens_;
};

// The summary's `pipeline` section: the schedule, the split of the blocks and how it was chosen.
nlohmann::json pipeline_summary(const PipelineSchedulePlan& plan, const std::vector<StageBlocks>& stage_blocks,
                                const nlohmann::json& partition_choice, int processes);

// "stage S on rank R: blocks A..B (+ embedding) (+ LM head and loss)" for every stage.
void print_pipeline_stages(const PipelineSchedulePlan& plan, const std::vector<StageBlocks>& stage_blocks);

}  // namespace ferry
