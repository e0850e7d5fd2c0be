// The search behind out-of-memory advice: variants of a plan that combine one choice on each axis a user
// reaches with flags (micro-batch geometry, recompute policy, optimizer offload, gradient buckets, 16-bit
// weight copies, expandable segments, ZeRO stage), measured by dry runs in order of their predicted step
// time, the planner's model (step_time_model.h), until the few cheapest that fit are found; when none
// fits, the smallest peak seen and the flags that give it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/plan/cluster.h"
#include "engine/train/training_plan.h"

namespace ferry {

// One choice on an axis: the flags that make it (empty: the plan as it is) and its effect on a plan.
struct PlanChoice {
  std::string flags;
  std::function<void(TrainingPlan&)> apply;
};

// The choices of one setting, the plan's own first, then from the least saving (and cheapest) to the most.
struct SearchAxis {
  std::string name;
  std::vector<PlanChoice> choices;
};

// The axes a user can move for `plan`: micro-batches at the same tokens per step, recompute policies,
// offloading the optimizer to the host, smaller gradient buckets and weight copies where they act,
// expandable segments where they are off, a higher ZeRO stage on several data-parallel ranks.
std::vector<SearchAxis> memory_search_axes(const TrainingPlan& plan);

struct MemoryCandidate {
  std::string flags;
  double seconds = 0;           // predicted added step time (the model's, the variant's against the plan's)
  std::int64_t peak_reserved = 0;
  bool fits = false;
};

struct MemorySearch {
  std::int64_t current_peak = 0;             // the plan as it is
  std::vector<MemoryCandidate> fitting;      // the cheapest that fit, cheapest first
  std::optional<MemoryCandidate> smallest;   // when none fits: the smallest peak measured
  std::size_t measured = 0;
  std::size_t combinations = 0;
  std::string cost_model;                    // the cluster's figures the times come from
};

// Peak reserved bytes of a plan (its fullest rank), by a dry run.
using PeakMeasure = std::function<std::int64_t(const TrainingPlan&)>;
// Predicted seconds of a plan's step.
using StepSeconds = std::function<double(const TrainingPlan&)>;

// First each choice beside every other axis's last (most saving) choice: those that save no more than a
// cheaper choice of their axis are dropped, and the peaks measured are floors for what follows. Then
// combinations of one remaining choice per axis in order of their predicted step time (`step_seconds` of
// the variant beside the plan's), measured until `wanted` fit or `budget` dry runs are spent: those whose
// floor is over the limit, or that save no more on any axis than one measured too big, are passed over;
// those whose savings, added up, would not fit wait until the rest are measured; a fitting combination's
// costlier extensions are not tried. The answer: the cheapest of every measured combination that fits,
// then costlier ones that save more; when none fits, the smallest peak measured, with the --device-memory
// it would need.
MemorySearch search_memory(const TrainingPlan& plan, const std::vector<SearchAxis>& axes, std::size_t memory_limit,
                           const PeakMeasure& peak_reserved, const StepSeconds& step_seconds, std::size_t wanted = 3, std::size_t budget = 60);

// The search over memory_search_axes, each variant dry-run on meta and priced by predict_step_time on
// `cluster`.
MemorySearch advise_memory(const TrainingPlan& plan, std::size_t memory_limit, const ClusterSpec& cluster);

// The advice as lines for an error message: each fitting candidate's exact flags, its peak and its
// predicted cost, or the smallest --device-memory that would fit.
std::string describe_memory_advice(const MemorySearch& search, std::size_t memory_limit);

// What the trainer calls on running out of device memory (training_plan.h's MemoryAdvisor): advise_memory
// on the run's own cluster (cluster_of_run: this machine's cpu ranks with their GEMM rate measured now, or
// GPUs as the H100 preset), described.
std::string advise_out_of_memory(const TrainingPlan& plan, std::size_t memory_limit);

}  // namespace ferry
