// Lowering planned for the costs a schedule will run under: where a receive must come before a send
// (rendezvous safety), the pair goes where the simulated compute-only timeline says it delays least.
// The declared lower_pipeline_communication(compute) plans with unit costs.
#pragma once

#include "schedule/pipeline_schedule.h"
#include "schedule/pipeline_simulator.h"

namespace ferry {

// The work a lowering did, to show it stays linear in the actions: rank steps tried and ranks looked at
// (PipelineProgress::work), receive-first repairs, and searches over every stuck rank (two ranks sending
// to each other, 1F1B's only deadlock, are repaired without one).
struct PipelineLoweringWork {
  std::int64_t progress_work = 0;
  std::int64_t repairs = 0;
  std::int64_t searches = 0;
};

PipelineSchedule lower_pipeline_communication(const PipelineSchedule& compute, const PipelineCosts& costs,
                                              PipelineLoweringWork* work = nullptr);

}  // namespace ferry
