// What would let a pipeline that ran out of device memory fit, as for one rank: each alternative (the
// recompute policies, smaller micro-batches at the same tokens per step, optimizer offload) measured by
// dry runs of every stage on meta, judged by its fullest rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "engine/train/memory_advice.h"
#include "engine/train/train_options.h"

namespace ferry {

// The fullest rank's peak reserved bytes of a pipeline run of `options` (its own layout choice).
using PipelineMeasure = std::function<std::int64_t(const TrainOptions& options)>;

MemoryAdvice advise_pipeline_memory(const TrainOptions& options, std::int64_t layers, std::size_t memory_limit,
                                    const PipelineMeasure& fullest_rank);

}  // namespace ferry
