#include "engine/train/pipeline_layout.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>

#include "allocator/byte_size.h"
#include "engine/train/training_setup.h"
#include "engine/train/training_step.h"
#include "models/activation_memory.h"
#include "schedule/pipeline_partition_choice.h"

namespace ferry {
namespace {

// Splits dry-run at most per recompute policy, among at most this many cheapest candidates.
constexpr std::size_t kPartitionDryRuns = 16;
constexpr std::size_t kPartitionCandidates = 256;

// Each block's cost is its forward FLOPs (backward is proportional), the LM head's its logits GEMM; the
// embedding's is negligible.
std::vector<std::vector<StageBlocks>> partition_candidates(const PipelineShape& shape) {
  const GptConfig& config = shape.config;
  const double block = block_recompute_flops(config, 1, shape.sequence, ActivationKeep::input_only);
  const double head = 2.0 * static_cast<double>(shape.sequence) * static_cast<double>(config.hidden) * static_cast<double>(config.vocab);
  return pipeline_partitions_by_cost(std::vector<double>(static_cast<std::size_t>(config.layers), block), 0.0, head, shape.stages,
                                     kPartitionCandidates);
}

double slowest_stage(const std::vector<StageBlocks>& split) {
  double most = 0;
  for (const StageBlocks& stage : split) most = std::max(most, stage.cost);
  return most;
}

nlohmann::json blocks_json(const std::vector<StageBlocks>& split) {
  nlohmann::json result = nlohmann::json::array();
  for (const StageBlocks& stage : split) result.push_back({stage.first, stage.end});
  return result;
}

std::size_t fullest_rank(const std::vector<std::int64_t>& peaks) {
  return static_cast<std::size_t>(std::max_element(peaks.begin(), peaks.end()) - peaks.begin());
}

// The summary's account of a choice by dry runs, and its line on stdout.
nlohmann::json describe(const PartitionChoice& choice, const std::vector<StageBlocks>& balanced, std::size_t limit, bool prints) {
  const std::size_t rank = fullest_rank(choice.rank_peaks);
  const std::string need = format_bytes(static_cast<std::size_t>(choice.rank_peaks[rank]));
  const double slowdown = slowest_stage(choice.split) / slowest_stage(balanced);
  const bool moved = blocks_json(choice.split) != blocks_json(balanced);
  if (prints) {
    if (!choice.fits) {
      std::printf("  partition: no split fits --device-memory %s (%zu dry-run, %zu ruled out): the fullest rank of the one used, rank %zu, "
                  "reserves %s\n",
                  format_bytes(limit).c_str(), choice.measured, choice.skipped, rank, need.c_str());
    } else if (moved) {
      std::printf("  partition: the cost-balanced split does not fit --device-memory %s; blocks moved for memory (%zu dry-run, %zu ruled "
                  "out): the slowest stage costs %.2fx, the fullest rank reserves %s\n",
                  format_bytes(limit).c_str(), choice.measured, choice.skipped, slowdown, need.c_str());
    }
    std::fflush(stdout);
  }
  return {{"by", "cost and memory"}, {"fits", choice.fits}, {"device_memory_limit", limit}, {"cost_balanced", blocks_json(balanced)},
          {"moved_for_memory", moved}, {"slowest_stage_vs_balanced", slowdown}, {"splits_dry_run", choice.measured},
          {"splits_ruled_out", choice.skipped}, {"rank_peak_reserved", choice.rank_peaks}};
}

}  // namespace

PipelineLayoutChoice choose_pipeline_layout(const TrainingPlan& plan, const PipelineShape& shape, bool prints, const PipelineDryRun& dry_run) {
  const std::vector<std::vector<StageBlocks>> candidates = partition_candidates(shape);
  const bool automatic = plan.recompute.kind == RecomputeKind::automatic;
  if (plan.device_memory_limit == 0 && !automatic) {
    return {{plan.recompute, candidates.front()},
            {{"by", "cost"}, {"cost_balanced", blocks_json(candidates.front())}, {"moved_for_memory", false}}};
  }
  const std::size_t limit = make_training_device(plan.device, plan.device_memory_limit, plan.allocator, plan.kernels)->memory_limit();
  auto split_for = [&](const RecomputePolicy& policy) {
    return choose_pipeline_partition(candidates, shape.ranks, static_cast<std::int64_t>(limit),
                                     [&](const std::vector<StageBlocks>& split) { return dry_run({policy, split}); }, kPartitionDryRuns);
  };
  if (!automatic) {
    const RecomputePolicy& policy = plan.recompute;
    const PartitionChoice choice = split_for(policy);
    return {{policy, choice.split}, describe(choice, candidates.front(), limit, prints)};
  }
  // --checkpointing auto: per candidate policy, the split chosen for it; its fullest rank is the measure.
  std::map<std::string, PartitionChoice> splits;
  const PolicyChoice policy = choose_recompute_policy(shape.config, plan.micro_batch, shape.sequence, limit, [&](const RecomputePolicy& candidate) {
    const PartitionChoice& choice = splits[candidate.name()] = split_for(candidate);
    DryRun fullest;  // the fullest rank's reserved bytes: what the choice compares with the limit
    fullest.peak_reserved = *std::max_element(choice.rank_peaks.begin(), choice.rank_peaks.end());
    return fullest;
  });
  const std::string peak = format_bytes(static_cast<std::size_t>(policy.dry_run.peak_reserved));
  if (!policy.fits) {
    throw std::invalid_argument("--checkpointing auto: no recompute policy fits every stage in --device-memory " + format_bytes(limit) +
                                "; the smallest, " + policy.policy.name() + ", needs " + peak +
                                " on its fullest stage (raise --device-memory or --pp, lower --batch, --seq or --micro-batches)");
  }
  if (prints) {
    std::printf("  checkpointing auto: %s (dry run: the fullest stage reserves %s of %s)\n", policy.policy.name().c_str(), peak.c_str(),
                format_bytes(limit).c_str());
  }
  const PartitionChoice& choice = splits.at(policy.policy.name());
  return {{policy.policy, choice.split}, describe(choice, candidates.front(), limit, prints)};
}

DataParallelGradients::BucketCuts pipeline_buckets(const std::vector<ParameterSpec>& parameters, const std::vector<StageBlocks>& stage_blocks,
                                                        std::int64_t layers) {
  const auto last_stage = static_cast<std::int64_t>(stage_blocks.size()) - 1;
  const std::size_t first_block = GptParameters::block_index(0), past_blocks = GptParameters::block_index(layers);
  DataParallelGradients::BucketCuts buckets;
  buckets.pipeline = true;
  std::optional<std::int64_t> previous;
  for (const ParameterSpec& each : parameters) {
    std::int64_t stage = 0;  // the embeddings': the first stage's
    if (each.index >= past_blocks) {
      stage = last_stage;  // ln_f
    } else if (each.index >= first_block) {
      const auto layer = static_cast<std::int64_t>((each.index - first_block) / GptBlockParameters::kCount);
      while (stage < last_stage && stage_blocks[static_cast<std::size_t>(stage)].end <= layer) ++stage;
    }
    if (each.index == GptParameters::kWteIndex) {
      buckets.held = each.index;  // on the first and the last stage: summed between them
      continue;
    }
    if (previous && *previous != stage) buckets.stage_starts.push_back(each.index);
    previous = stage;
  }
  return buckets;
}

}  // namespace ferry
