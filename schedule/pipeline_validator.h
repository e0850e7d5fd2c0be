// Validating a pipeline schedule under one model of sends (buffered or rendezvous). The declared
// validate_pipeline_schedule(schedule) checks both; this overload lets tests and tools name one.
#pragma once

#include "schedule/pipeline_progress.h"
#include "schedule/pipeline_schedule.h"

namespace ferry {

ScheduleValidation validate_pipeline_schedule(const PipelineSchedule& schedule, SendSemantics semantics);

}  // namespace ferry
