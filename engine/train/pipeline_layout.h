// How a pipeline run is laid out before it starts: its recompute policy and each stage's blocks, chosen
// by the cost model and by dry runs of every stage on meta. A split is the cheapest (slowest stage by
// FLOPs) whose every rank fits --device-memory; --checkpointing auto takes the least recompute for which
// some split fits.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grid/data_parallel_gradients.h"
#include "engine/train/training_plan.h"
#include "models/gpt_config.h"
#include "models/gpt_parameters.h"
#include "schedule/pipeline_partition.h"
#include "schedule/recompute_policy.h"

namespace ferry {

struct PipelineLayout {
  RecomputePolicy policy;
  std::vector<StageBlocks> stage_blocks;  // [stage]
};

// Each rank's peak reserved bytes in a dry run of every stage of `layout` on meta.
using PipelineDryRun = std::function<std::vector<std::int64_t>(const PipelineLayout& layout)>;

struct PipelineLayoutChoice {
  PipelineLayout layout;
  nlohmann::json partition;  // how the split was chosen, for the summary
};

struct PipelineShape {
  GptConfig config;
  std::int64_t sequence = 0;
  std::int32_t stages = 1;  // ranks x virtual stages
  std::int32_t ranks = 1;
};

// Without --device-memory (and without --checkpointing auto) the cost-balanced split, no dry run; with
// it, the cheapest split whose every rank fits (at most a few dry runs), or, when none does, the one
// whose fullest rank needs least (said on stdout when `prints`, and in `partition`). --checkpointing
// auto: the fewest recomputed FLOPs for which some split fits (throws std::invalid_argument naming the smallest
// need when none does).
PipelineLayoutChoice choose_pipeline_layout(const TrainingPlan& plan, const PipelineShape& shape, bool prints, const PipelineDryRun& dry_run);

// How a pipeline rank's data-parallel gradient buckets are cut (ZeRO 2): the tied token table alone,
// held for the stages' sum, and no bucket across two of the rank's stages (an interleaved schedule's
// rank holds several), so each stage's backward completes its own buckets. `parameters`: the rank's.
DataParallelGradients::BucketCuts pipeline_buckets(const std::vector<ParameterSpec>& parameters, const std::vector<StageBlocks>& stage_blocks,
                                                        std::int64_t layers);

}  // namespace ferry
