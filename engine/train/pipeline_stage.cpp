#include "engine/train/pipeline_stage.h"

#include <cstdio>
#include <stdexcept>
#include <utility>

#include "engine/train/pipeline_step.h"
#include "schedule/pipeline_lowering.h"

namespace ferry {
namespace {

// The summary's simulation: a backward costs two forwards (input and weight gradients, one each), the
// same for every schedule so that their bubbles compare; Zero Bubble moves the weight part.
constexpr PipelineCosts kUnitCosts{1.0, 1.0, 1.0, 0.0};

}  // namespace

PipelineSchedulePlan plan_pipeline_schedule(const std::string& name, std::int32_t ranks, std::int32_t micro_batches, int max_tag) {
  check_pipeline_tags(std::int64_t{ranks} * pipeline_stages_per_rank(name), micro_batches, max_tag);
  PipelineSchedulePlan plan;
  plan.name = name;
  const PipelineSchedule compute = generate_pipeline_schedule(name, ranks, micro_batches);
  plan.costs = kUnitCosts;
  const double chunks = compute.stages_per_rank();
  plan.costs.forward /= chunks;
  plan.costs.backward /= chunks;
  plan.costs.weight /= chunks;
  plan.schedule = lower_pipeline_communication(compute, plan.costs);
  if (const ScheduleValidation validation = validate_pipeline_schedule(plan.schedule); !validation.ok()) {
    throw std::logic_error("the " + name + " schedule failed validation: " + validation.problems.front());
  }
  plan.simulation = simulate_pipeline_schedule(plan.schedule, plan.costs);
  return plan;
}

PipelineStage::PipelineStage(GptModel& model, Communicator& pipeline, const PipelineSchedulePlan& plan,
                             const std::vector<StageBlocks>& stage_blocks, const StepSettings& settings, std::vector<ActivationKeep> keeps)
    : pipeline_(pipeline),
      plan_(plan),
      settings_(settings),
      transport_(pipeline),
      executor_(model, transport_,
                PipelineRankSetup{&plan.schedule, pipeline.rank(), stage_blocks, settings.batch, settings.sequence, settings.seed,
                                  std::move(keeps),
                                  (settings.data_parallel != nullptr ? settings.data_parallel->rank() : 0) * settings.grad_accum}),
      tokens_(static_cast<std::size_t>(plan.schedule.micro_batches)) {}

StepResult PipelineStage::run_step(TrainingOptimizer& optimizer, DataLoader& loader, std::int64_t step, double learning_rate,
                                   LossScaler* scaler) {
  // Every rank reads the whole global batch, so the data position and shuffling stay those of one rank.
  const std::int64_t ranks = settings_.data_parallel != nullptr ? settings_.data_parallel->size() : 1;
  const std::int64_t rank = settings_.data_parallel != nullptr ? settings_.data_parallel->rank() : 0;
  MicroBatchTokens skipped;
  for (std::int64_t global = 0; global < settings_.grad_accum * ranks; ++global) {
    MicroBatchTokens& into = global / settings_.grad_accum == rank ? tokens_[static_cast<std::size_t>(global % settings_.grad_accum)] : skipped;
    loader.next(into.inputs, into.targets);
  }
  return run_pipeline_step(executor_, optimizer, pipeline_, tokens_, PipelineStepSettings{step, learning_rate, settings_.grad_clip, settings_.data_parallel}, scaler);
}

EvaluationResult PipelineStage::evaluate(const TokenDataset& data, std::int64_t batches) {
  return evaluate_pipeline_loss(executor_.model(), pipeline_, plan_.schedule, executor_.setup().stage_blocks, data, settings_.batch,
                                settings_.sequence, batches);
}

nlohmann::json PipelineStage::describe() const {
  const PipelineSchedule& schedule = plan_.schedule;
  const std::int32_t r = pipeline_.rank();
  nlohmann::json stages = nlohmann::json::array();
  for (std::int32_t stage = 0; stage < schedule.stages; ++stage) {
    if (schedule.rank_of_stage(stage) == r) stages.push_back(stage);
  }
  // The prediction: the simulator replays the rank's actions with what one micro-batch keeps on each of
  // its stages (measured on the stage's first F and W).
  const PipelineStashMeasure& stash = executor_.stash();
  const PipelineSimulation replay = simulate_pipeline_schedule(schedule, plan_.costs, stage_memory(stash, schedule.stages));
  nlohmann::json per_stage = nlohmann::json::array();
  for (const StageStashBytes& stage : stash.stages) {
    per_stage.push_back({{"stage", stage.stage}, {"forward", stage.forward}, {"kept_for_weight", stage.kept_for_weight}});
  }
  return {{"stage", stages.front()},
          {"stages", stages},
          {"activation_stash",
           {{"one_micro_batch", stash.after_first_forward}, {"peak", stash.peak},
            {"predicted_peak", replay.rank_peak_activation_bytes.at(static_cast<std::size_t>(r))}, {"stages", per_stage}}}};
}

nlohmann::json pipeline_summary(const PipelineSchedulePlan& plan, const std::vector<StageBlocks>& stage_blocks,
                                const nlohmann::json& partition_choice, int processes) {
  nlohmann::json partition = nlohmann::json::array();
  for (std::int32_t stage = 0; stage < plan.schedule.stages; ++stage) {
    const StageBlocks& blocks = stage_blocks[static_cast<std::size_t>(stage)];
    partition.push_back({{"stage", stage}, {"rank", plan.schedule.rank_of_stage(stage)}, {"blocks", {blocks.first, blocks.end}}});
  }
  return {{"pp", plan.schedule.ranks}, {"stages", plan.schedule.stages}, {"schedule", plan.name}, {"micro_batches", plan.schedule.micro_batches},
          {"processes", processes}, {"partition", partition}, {"partition_choice", partition_choice},
          {"unit_cost_simulation", {{"costs", "F=1 B=1 W=1 per rank's blocks"}, {"makespan", plan.simulation.makespan},
                                    {"bubble_fraction", plan.simulation.bubble_fraction}}}};
}

void print_pipeline_stages(const PipelineSchedulePlan& plan, const std::vector<StageBlocks>& stage_blocks) {
  for (std::int32_t stage = 0; stage < plan.schedule.stages; ++stage) {
    const StageBlocks& blocks = stage_blocks[static_cast<std::size_t>(stage)];
    std::printf("  stage %d on rank %d: blocks %lld..%lld%s%s\n", stage, plan.schedule.rank_of_stage(stage), static_cast<long long>(blocks.first),
                static_cast<long long>(blocks.end - 1), stage == 0 ? " + embedding" : "",
                stage == plan.schedule.stages - 1 ? " + LM head and loss" : "");
  }
}

}  // namespace ferry
