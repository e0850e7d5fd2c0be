// The bubble the literature predicts for each generated schedule (GPipe and 1F1B, Megatron's
// interleaved 1F1B, Zero Bubble's ZB-H1), to print and test beside the simulated one.
#pragma once

#include <optional>
#include <string>

#include "schedule/pipeline_schedule.h"
#include "schedule/pipeline_simulator.h"

namespace ferry {

struct BubbleTheory {
  double fraction = 0;  // idle share of the whole time, all ranks together
  std::string formula;  // how it was computed, for the reader
};

// nullopt for a schedule no generator made (a hand-edited "custom" one). Communication costs nothing here.
std::optional<BubbleTheory> theoretical_bubble(const PipelineSchedule& schedule, const PipelineCosts& costs);

}  // namespace ferry
