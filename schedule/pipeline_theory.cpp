#include "schedule/pipeline_theory.h"

#include <algorithm>

namespace ferry {

std::optional<BubbleTheory> theoretical_bubble(const PipelineSchedule& schedule, const PipelineCosts& costs) {
  const double p = schedule.ranks;
  const double m = schedule.micro_batches;
  const std::string& name = schedule.name;
  if (name == "gpipe" || name == "1f1b" || name == "1f1b-deep") {
    return BubbleTheory{(p - 1) / (m + p - 1), "(p-1)/(m+p-1)"};
  }
  if (name.starts_with("interleaved:")) {
    const double chunks = schedule.stages_per_rank();
    return BubbleTheory{(p - 1) / (chunks * m + p - 1),
                        "(p-1)/(V*m+p-1): Megatron's (1/V)(p-1)/m of the ideal time, as a share of the whole"};
  }
  if (name == "zb-h1") {
    // Qi et al.: ZB-H1 idles (p-1)(F+B-W) per rank, beside m(F+B+W) of work.
    const double idle = (p - 1) * std::max(0.0, costs.forward + costs.backward - costs.weight);
    const double work = m * (costs.forward + costs.backward + costs.weight);
    return BubbleTheory{idle + work > 0 ? idle / (idle + work) : 0.0, "(p-1)(F+B-W)/(m(F+B+W)+(p-1)(F+B-W))"};
  }
  return std::nullopt;
}

}  // namespace ferry
