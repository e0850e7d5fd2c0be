// The search behind out-of-memory advice (and the planner to come): variants of a plan that combine one
// choice on each axis a user reaches with flags (micro-batch geometry, recompute policy, optimizer
// offload, gradient buckets, 16-bit weight copies, expandable segments, ZeRO stage), measured by dry runs
// in order of their predicted step cost until the few cheapest that fit are found; when none fits, the
// smallest peak seen and the flags that give it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/train/training_plan.h"

namespace ferry {

// The rates the cost model divides by: the device's compute and memory, its link to the host.
struct StepCostRates {
  double flops = 0;             // FLOP/s the device sustains
  double device_bytes = 0;      // bytes/s of its memory
  double host_link_bytes = 0;   // bytes/s between it and pinned host memory
  double launch_seconds = 0;    // fixed cost of one more collective or kernel call
  static StepCostRates for_device(DeviceKind kind);
  std::string describe() const;
};

// One choice on an axis: the flags that make it (empty: the plan as it is), the step time it is
// predicted to add, and its effect on a plan.
struct PlanChoice {
  std::string flags;
  double seconds = 0;
  std::function<void(TrainingPlan&)> apply;
};

// The choices of one setting, the plan's own first, then in increasing cost.
struct SearchAxis {
  std::string name;
  std::vector<PlanChoice> choices;
};

// The axes a user can move for `plan`: micro-batches at the same tokens per step, recompute policies,
// offloading the optimizer to the host, smaller gradient buckets and weight copies where they act,
// expandable segments where they are off, a higher ZeRO stage on several data-parallel ranks.
std::vector<SearchAxis> memory_search_axes(const TrainingPlan& plan, const StepCostRates& rates);

struct MemoryCandidate {
  std::string flags;
  double seconds = 0;           // predicted added step time
  std::int64_t peak_reserved = 0;
  bool fits = false;
};

struct MemorySearch {
  std::int64_t current_peak = 0;             // the plan as it is
  std::vector<MemoryCandidate> fitting;      // the cheapest that fit, cheapest first
  std::optional<MemoryCandidate> smallest;   // when none fits: the smallest peak measured
  std::size_t measured = 0;
  std::size_t combinations = 0;
  std::string cost_model;                    // StepCostRates::describe()
};

// Peak reserved bytes of a plan (its fullest rank), by a dry run.
using PeakMeasure = std::function<std::int64_t(const TrainingPlan&)>;

// First each choice beside every other axis's last (most saving) choice: those that save no more than a
// cheaper choice of their axis are dropped. Then combinations of one remaining choice per axis, cheapest
// first (costs add), measured until `wanted` fit or `budget` dry runs are spent; a fitting combination's
// costlier extensions are not tried. When none fits, the most saving combination is the answer if it
// fits, else the smallest peak measured, with the --device-memory it would need.
MemorySearch search_memory(const TrainingPlan& plan, const std::vector<SearchAxis>& axes, std::size_t memory_limit,
                           const PeakMeasure& peak_reserved, std::size_t wanted = 3, std::size_t budget = 60);

// The search over memory_search_axes with the device's rates.
MemorySearch advise_memory(const TrainingPlan& plan, std::size_t memory_limit, const PeakMeasure& peak_reserved);

// The advice as lines for an error message: each fitting candidate's exact flags, its peak and its
// predicted cost, or the smallest --device-memory that would fit.
std::string describe_memory_advice(const MemorySearch& search, std::size_t memory_limit);

}  // namespace ferry
