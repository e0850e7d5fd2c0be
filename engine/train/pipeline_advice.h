// What would let a pipeline that ran out of device memory fit, as for one rank: each alternative (the
// recompute policies, smaller micro-batches at the same tokens per step, optimizer offload) measured by
// dry runs of every stage on meta, judged by its fullest rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "engine/train/memory_advice.h"
#include "engine/train/training_plan.h"

namespace ferry {

// The fullest rank's peak reserved bytes of a pipeline run of `plan` (its own layout choice).
using PipelineMeasure = std::function<std::int64_t(const TrainingPlan& plan)>;

// Each alternative is `plan` with one setting changed (the recompute policy, the micro-batch geometry,
// the optimizer's offload), measured by `fullest_rank`.
MemoryAdvice advise_pipeline_memory(const TrainingPlan& plan, std::int64_t layers, std::size_t memory_limit,
                                    const PipelineMeasure& fullest_rank);

}  // namespace ferry
