#include "engine/train/pipeline_advice.h"

#include <algorithm>
#include <string>

#include "schedule/recompute_policy.h"

namespace ferry {

MemoryAdvice advise_pipeline_memory(const TrainOptions& o, std::int64_t layers, std::size_t memory_limit,
                                    const PipelineMeasure& fullest_rank) {
  MemoryAdvice advice;
  advice.current.peak_reserved = fullest_rank(o);
  auto measure = [&](const std::string& flags, const TrainOptions& variant) {
    DryRun dry_run;
    dry_run.peak_reserved = fullest_rank(variant);
    if (dry_run.peak_reserved < advice.current.peak_reserved) {
      advice.options.push_back(memory_option(flags, dry_run, advice.current, memory_limit));
    }
    return !advice.options.empty() && advice.options.back().fits && advice.options.back().flags == flags;
  };
  for (const RecomputePolicy& policy : recompute_overview(layers)) {
    if (policy.name() == o.checkpointing) continue;
    TrainOptions variant = o;
    variant.checkpointing = policy.name();
    measure("--checkpointing " + policy.name(), variant);
  }
  // Smaller micro-batches, the same tokens per step: the largest that fits.
  const std::int64_t micro_batches = o.micro_batches.value_or(o.grad_accum);
  for (std::int64_t batch = o.batch / 2; batch >= 1; batch /= 2) {
    if (o.batch % batch != 0) continue;
    TrainOptions variant = o;
    variant.batch = batch;
    variant.micro_batches = micro_batches * (o.batch / batch);
    if (measure("--batch " + std::to_string(batch) + " --micro-batches " + std::to_string(*variant.micro_batches), variant)) break;
  }
  if (o.offload_optimizer == "none") {
    TrainOptions variant = o;
    variant.offload_optimizer = "cpu";
    measure("--offload-optimizer cpu", variant);
  }
  sort_memory_options(advice);
  return advice;
}

}  // namespace ferry
