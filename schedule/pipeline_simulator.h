// Simulates a pipeline schedule in time: each rank runs its actions in order, an action starts when
// its rank is free and its inputs have arrived. Gives the makespan, each stage's bubble fraction and
// its peak in-flight micro-batches and activation bytes, each rank's peak activation bytes (its stages
// together, in its action order), and a Chrome trace of the timeline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/pipeline_schedule.h"

namespace ferry {

// Per-action costs in any time unit. A full backward B costs backward + weight (Zero Bubble's B is the
// input-gradient part, W the weight-gradient part). Communication costs `transfer` on the receiving side.
struct PipelineCosts {
  double forward = 1;
  double backward = 1;
  double weight = 0;
  double transfer = 0;
  // "F,B,W" (W optional); throws std::invalid_argument on anything else or a negative cost.
  static PipelineCosts parse(const std::string& text);
  // The time `action` computes: forward, backward + weight (B), backward (I), weight (W); 0 for sends and receives.
  double duration(const PipelineAction& action) const;
};

// One time unit per compute action: F = B = 1, W = 1 when the schedule splits its backward (else 0, so a
// full B costs 1), no transfer time. The generators place actions in these unit slots.
PipelineCosts unit_pipeline_costs(const PipelineSchedule& schedule);

// Bytes one micro-batch keeps on a stage between its F and its B (or I), and between its I and its W
// (the inputs and output gradients the weight gradient needs): per stage, since the stages (an
// interleaved rank's chunks) differ. Empty: 1 byte per micro-batch (so the peak bytes count micro-batches).
struct StageMemory {
  std::vector<std::int64_t> activation_bytes;     // [stage]
  std::vector<std::int64_t> weight_stash_bytes;   // [stage] (Zero Bubble only)
};

struct StageSimulation {
  std::int32_t stage = 0;
  std::int32_t rank = 0;
  double busy = 0;                 // time spent computing this stage's actions
  double bubble_fraction = 0;      // idle share of the rank's makespan (reported per stage's rank)
  std::int32_t peak_in_flight = 0; // most micro-batches with F done and B (or I) not yet done
  std::int64_t peak_activation_bytes = 0;
};

struct SimulatedAction {
  std::int32_t rank = 0;
  PipelineAction action;
  double start = 0;
  double end = 0;
};

struct PipelineSimulation {
  double makespan = 0;
  double bubble_fraction = 0;              // idle share over all ranks: 1 - busy / (ranks * makespan)
  std::vector<StageSimulation> stages;     // [stage]
  // [rank]: the most bytes the rank's stages hold at once after any of its actions (every micro-batch
  // between its F and its B or I, and between its I and its W, at its stage's StageMemory bytes).
  std::vector<std::int64_t> rank_peak_activation_bytes;
  std::vector<SimulatedAction> timeline;   // compute and communication actions with their times
};

// Throws std::runtime_error "schedule is not progressing" (naming each rank's blocked action) when the
// schedule deadlocks. Accepts compute-only and lowered schedules.
PipelineSimulation simulate_pipeline_schedule(const PipelineSchedule& schedule, const PipelineCosts& costs,
                                              const StageMemory& memory = {});

// The timeline as Chrome trace JSON (one process per rank, one slice per action), for Perfetto.
std::string pipeline_simulation_trace(const PipelineSchedule& schedule, const PipelineSimulation& simulation);

}  // namespace ferry
