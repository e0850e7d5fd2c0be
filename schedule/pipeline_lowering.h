// Lowering planned for the costs a schedule will run under: where a receive must come before a send
// (rendezvous safety), the pair goes where the simulated compute-only timeline says it delays least.
// The declared lower_pipeline_communication(compute) plans with unit costs.
#pragma once

#include "schedule/pipeline_schedule.h"
#include "schedule/pipeline_simulator.h"

namespace ferry {

PipelineSchedule lower_pipeline_communication(const PipelineSchedule& compute, const PipelineCosts& costs);

}  // namespace ferry
