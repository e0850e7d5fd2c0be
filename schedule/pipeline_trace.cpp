// The simulated timeline as Chrome trace JSON (Perfetto, chrome://tracing): one process per rank, compute
// on thread 0 and sends/receives on thread 1; one time unit of the costs is 1000 us (1 ms).
#include <nlohmann/json.hpp>

#include "schedule/pipeline_simulator.h"

namespace ferry {
namespace {

constexpr double kMicrosecondsPerTimeUnit = 1000;

const char* category(PipelineActionType type) {
  switch (type) {
    case PipelineActionType::forward: return "forward";
    case PipelineActionType::backward: return "backward";
    case PipelineActionType::backward_input: return "backward_input";
    case PipelineActionType::backward_weight: return "backward_weight";
    default: return "communication";
  }
}

}  // namespace

std::string pipeline_simulation_trace(const PipelineSchedule& schedule, const PipelineSimulation& simulation) {
  nlohmann::json events = nlohmann::json::array();
  for (std::int32_t rank = 0; rank < schedule.ranks; ++rank) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", "compute"}}}});
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 1}, {"args", {{"name", "communication"}}}});
  }
  for (const SimulatedAction& each : simulation.timeline) {
    events.push_back({{"name", each.action.to_string()},
                      {"cat", category(each.action.type)},
                      {"ph", "X"},
                      {"pid", each.rank},
                      {"tid", each.action.is_communication() ? 1 : 0},
                      {"ts", each.start * kMicrosecondsPerTimeUnit},
                      {"dur", (each.end - each.start) * kMicrosecondsPerTimeUnit},
                      {"args", {{"stage", each.action.stage}, {"micro_batch", each.action.micro_batch}}}});
  }
  const nlohmann::json trace = {
      {"traceEvents", events},
      {"displayTimeUnit", "ms"},
      {"otherData", {{"schedule", schedule.name}, {"makespan", simulation.makespan}, {"bubble_fraction", simulation.bubble_fraction}}},
  };
  return trace.dump(1) + "\n";
}

}  // namespace ferry
