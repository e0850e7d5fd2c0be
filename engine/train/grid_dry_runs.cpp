#include <algorithm>

#include "engine/checkpoint/checkpoint.h"
#include "engine/train/rank_training.h"
#include "engine/train/run_summary.h"
#include "schedule/pipeline_schedule.h"

namespace ferry {
namespace {

// `plan` dry-run on meta, every rank in this process, without a limit (a dry run measures): two steps
// (past a resumed checkpoint's), since a second step can reserve more than the first (it allocates among
// the blocks the first left cached) and the steps after it repeat the second; no output, nothing written.
TrainingPlan dry_run_plan(const TrainingPlan& plan) {
  TrainingPlan dry = plan;
  dry.steps = (plan.io.resume.empty() ? 0 : read_trainer_state(plan.io.resume).step) + 2;
  dry.exit_interval.reset();
  dry.io.quiet = true;
  dry.io.profile.clear();
  dry.io.memory_profile = false;  // no limit to fail at: the allocator's statistics are the answer
  dry.io.metrics.clear();
  dry.io.save.clear();
  dry.io.save_every = 0;
  dry.io.eval_data.clear();
  dry.io.eval_every = 0;
  dry.device = DeviceKind::meta;
  dry.device_memory_limit = std::size_t{1} << 50;
  dry.dry_run = true;
  dry.world = 1;
  dry.notes.clear();
  if (dry.offload_optimizer == offload::OffloadDevice::nvme) dry.offload_optimizer = offload::OffloadDevice::cpu;  // the same device memory, nothing written
  dry.offload.nvme_path.clear();
  return dry;
}

}  // namespace

nlohmann::json simulate_every_rank(const TrainingPlan& plan, const PipelineLayoutChoice* layout) {
  nlohmann::json summary;
  nlohmann::json ranks = nlohmann::json::array();
  for (int rank = plan.grid.world() - 1; rank >= 0; --rank) {  // rank 0 last: its lines close the output
    nlohmann::json rank_summary = train_on_grid(plan, ProcessGrid::dry_run(plan.grid, rank), layout);
    ranks.insert(ranks.begin(), rank_summary["ranks"][0]);
    if (rank == 0) summary = std::move(rank_summary);
  }
  merge_rank_entries(summary, std::move(ranks));
  return summary;
}

namespace {

// Each rank's entry of a dry run of `plan` with `layout` (every rank computes the same).
nlohmann::json dry_run_ranks(const TrainingPlan& plan, const PipelineLayout& layout) {
  TrainingPlan dry_plan = dry_run_plan(plan);
  dry_plan.recompute = layout.policy;
  const PipelineLayoutChoice given{layout, nullptr};
  return simulate_every_rank(dry_plan, &given)["ranks"];
}

}  // namespace

PipelineLayoutChoice choose_grid_layout(const TrainingPlan& plan, bool prints) {
  const std::int32_t stages = plan.grid.pp * pipeline_stages_per_rank(plan.pipeline_schedule);
  return choose_pipeline_layout(plan, PipelineShape{plan.model, plan.sequence, stages, plan.grid.pp}, prints, [&](const PipelineLayout& candidate) {
    // Each pipeline rank's peak: the fullest of the dp (and tp) ranks that hold its stages.
    std::vector<std::int64_t> peaks(static_cast<std::size_t>(plan.grid.pp), 0);
    for (const nlohmann::json& rank : dry_run_ranks(plan, candidate)) {
      std::int64_t& peak = peaks.at(rank["pp"].get<std::size_t>());
      peak = std::max(peak, rank["peak_reserved"].get<std::int64_t>());
    }
    return peaks;
  });
}

nlohmann::json dry_run_every_rank(const TrainingPlan& plan) {
  if (plan.grid.pp > 1) return dry_run_ranks(plan, choose_grid_layout(plan, false).layout);
  return simulate_every_rank(dry_run_plan(plan), nullptr)["ranks"];
}

std::int64_t fullest_rank_peak(const TrainingPlan& plan) {
  std::int64_t peak = 0;
  for (const nlohmann::json& rank : dry_run_every_rank(plan)) peak = std::max(peak, rank["peak_reserved"].get<std::int64_t>());
  return peak;
}

}  // namespace ferry
