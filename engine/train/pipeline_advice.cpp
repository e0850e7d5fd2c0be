#include "engine/train/pipeline_advice.h"

#include <algorithm>
#include <string>

#include "schedule/recompute_policy.h"

namespace ferry {

MemoryAdvice advise_pipeline_memory(const TrainingPlan& plan, std::int64_t layers, std::size_t memory_limit,
                                    const PipelineMeasure& fullest_rank) {
  MemoryAdvice advice;
  advice.current.peak_reserved = fullest_rank(plan);
  auto measure = [&](const std::string& flags, const TrainingPlan& variant) {
    DryRun dry_run;
    dry_run.peak_reserved = fullest_rank(variant);
    if (dry_run.peak_reserved < advice.current.peak_reserved) {
      advice.options.push_back(memory_option(flags, dry_run, advice.current, memory_limit));
    }
    return !advice.options.empty() && advice.options.back().fits && advice.options.back().flags == flags;
  };
  for (const RecomputePolicy& policy : recompute_overview(layers)) {
    if (policy.name() == plan.recompute.name()) continue;
    TrainingPlan variant = plan;
    variant.recompute = policy;
    measure("--checkpointing " + policy.name(), variant);
  }
  // Smaller micro-batches, the same tokens per step: the largest that fits.
  for (std::int64_t batch = plan.micro_batch / 2; batch >= 1; batch /= 2) {
    if (plan.micro_batch % batch != 0) continue;
    TrainingPlan variant = plan;
    variant.micro_batch = batch;
    variant.micro_batches = plan.micro_batches * (plan.micro_batch / batch);
    if (measure("--batch " + std::to_string(batch) + " --micro-batches " + std::to_string(variant.micro_batches), variant)) break;
  }
  if (!plan.offload_optimizer) {
    TrainingPlan variant = plan;
    variant.offload_optimizer = offload::OffloadDevice::cpu;
    measure("--offload-optimizer cpu", variant);
  }
  sort_memory_options(advice);
  return advice;
}

}  // namespace ferry
