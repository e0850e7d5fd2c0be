// The simulator: costs parsed from "F,B,W", transfer time on the receiving side, peak activation bytes as
// in-flight micro-batches times their bytes (plus Zero Bubble's weight stashes), a rank's peak over its
// chunks in its action order, a Chrome trace with one slice per action, and a clear error for a
// schedule that deadlocks.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "schedule/pipeline_simulator.h"

namespace ferry {
namespace {

TEST(PipelineCosts, ParsesTwoOrThreeNonNegativeNumbers) {
  const PipelineCosts three = PipelineCosts::parse("1,2,0.5");
  EXPECT_EQ(three.forward, 1);
  EXPECT_EQ(three.backward, 2);
  EXPECT_EQ(three.weight, 0.5);
  EXPECT_EQ(three.transfer, 0);
  const PipelineCosts two = PipelineCosts::parse("2,3");
  EXPECT_EQ(two.forward, 2);
  EXPECT_EQ(two.backward, 3);
  EXPECT_EQ(two.weight, 0);
  for (const char* bad : {"", "1", "1,2,3,4", "a,b", "-1,1", "1,,1", "1,nan", "1,inf", "1,2,", " 1,2"}) {
    try {
      PipelineCosts::parse(bad);
      ADD_FAILURE() << "'" << bad << "' parsed";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find("are not F,B or F,B,W"), std::string::npos) << error.what();
    }
  }
}

TEST(PipelineSimulator, ATransferCostsTimeOnTheReceivingSideOnly) {
  // Two stages, one micro-batch: F, transfer, F, B, transfer, B.
  const PipelineSchedule compute = generate_pipeline_schedule("1f1b", 2, 1);
  const PipelineCosts costs{1, 2, 0, 0.5};
  for (const PipelineSchedule& schedule : {compute, lower_pipeline_communication(compute)}) {
    const PipelineSimulation simulation = simulate_pipeline_schedule(schedule, costs);
    EXPECT_EQ(simulation.makespan, 1 + 0.5 + 1 + 2 + 0.5 + 2);
    EXPECT_EQ(simulation.stages[0].busy, 3);
    EXPECT_EQ(simulation.stages[1].busy, 3);
    EXPECT_NEAR(simulation.bubble_fraction, 1 - 6.0 / (2 * 7), 1e-12);
  }
}

TEST(PipelineSimulator, PeakActivationBytesAreInFlightTimesBytes) {
  const PipelineSchedule schedule = generate_pipeline_schedule("1f1b", 4, 8);
  const PipelineSimulation simulation =
      simulate_pipeline_schedule(schedule, PipelineCosts{1, 2, 0, 0}, StageMemory{{100, 200, 300, 400}, {}});
  for (std::size_t stage = 0; stage < 4; ++stage) {
    EXPECT_EQ(simulation.stages[stage].peak_in_flight, 4 - static_cast<std::int32_t>(stage));
    EXPECT_EQ(simulation.stages[stage].peak_activation_bytes, simulation.stages[stage].peak_in_flight * 100 * std::int64_t(stage + 1));
  }
  // GPipe holds every micro-batch at once.
  const PipelineSimulation gpipe = simulate_pipeline_schedule(generate_pipeline_schedule("gpipe", 4, 8), PipelineCosts{},
                                                              StageMemory{{7, 7, 7, 7}, {}});
  for (const StageSimulation& stage : gpipe.stages) EXPECT_EQ(stage.peak_activation_bytes, 8 * 7);
}

TEST(PipelineSimulator, ZeroBubbleStashesAreCountedBetweenIAndW) {
  // ZB-H1 stage s defers its first s W's: after 1 I done and its W pending, the last stage of four holds
  // one micro-batch in flight and up to 4 stashes; with stashes costing nothing the peak is the in-flight one.
  const PipelineSchedule schedule = generate_pipeline_schedule("zb-h1", 4, 8);
  const PipelineCosts costs{1, 1, 1, 0};
  const PipelineSimulation activations_only = simulate_pipeline_schedule(schedule, costs, StageMemory{{10, 10, 10, 10}, {0, 0, 0, 0}});
  const PipelineSimulation stashes_only = simulate_pipeline_schedule(schedule, costs, StageMemory{{0, 0, 0, 0}, {1, 1, 1, 1}});
  const PipelineSimulation both = simulate_pipeline_schedule(schedule, costs);
  for (std::size_t stage = 0; stage < 4; ++stage) {
    EXPECT_EQ(activations_only.stages[stage].peak_activation_bytes, 10 * activations_only.stages[stage].peak_in_flight);
    EXPECT_EQ(stashes_only.stages[stage].peak_activation_bytes, static_cast<std::int64_t>(stage) + 1) << stage;
    EXPECT_EQ(both.stages[stage].peak_activation_bytes, 4) << stage;
  }
  EXPECT_THROW(simulate_pipeline_schedule(schedule, costs, StageMemory{{1, 2}, {}}), std::invalid_argument);
}

// An interleaved rank holds two chunks of different sizes: its peak is the most its chunks hold together
// after any of its actions, in its own order (rank 0: 0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 ...).
TEST(PipelineSimulator, ARanksPeakAddsItsChunksInItsActionOrder) {
  const PipelineSchedule interleaved = lower_pipeline_communication(generate_pipeline_schedule("interleaved:2", 2, 4));
  const PipelineCosts costs = unit_pipeline_costs(interleaved);
  const PipelineSimulation light_first = simulate_pipeline_schedule(interleaved, costs, StageMemory{{10, 1, 100, 1000}, {}});
  EXPECT_EQ(light_first.rank_peak_activation_bytes, (std::vector<std::int64_t>{230, 1002}));  // 0F2: 3 x 10 + 2 x 100
  const PipelineSimulation heavy_first = simulate_pipeline_schedule(interleaved, costs, StageMemory{{100, 1, 10, 1000}, {}});
  EXPECT_EQ(heavy_first.rank_peak_activation_bytes[0], 410);  // 0F3: 4 x 100 + 1 x 10
  // Zero Bubble: a micro-batch keeps 10 bytes from F to I and 3 from I to W. Rank 1 (1F0 1I0 1F1 1I1
  // 1W0 1F2 ...) peaks at 13 after 1F1; rank 0 (0F0 0F1 0I0 0W0 0F2 ...) at 20 after 0F1.
  const PipelineSchedule zero_bubble = generate_pipeline_schedule("zb-h1", 2, 3);
  const PipelineSimulation stashes = simulate_pipeline_schedule(zero_bubble, unit_pipeline_costs(zero_bubble), StageMemory{{10, 10}, {3, 3}});
  EXPECT_EQ(stashes.rank_peak_activation_bytes, (std::vector<std::int64_t>{20, 13}));
  for (std::size_t rank = 0; rank < 2; ++rank) EXPECT_EQ(stashes.rank_peak_activation_bytes[rank], stashes.stages[rank].peak_activation_bytes);
}

TEST(PipelineSimulator, TraceHasOneSlicePerActionInMicroseconds) {
  const PipelineSchedule lowered = lower_pipeline_communication(generate_pipeline_schedule("1f1b", 4, 8));
  const PipelineSimulation simulation = simulate_pipeline_schedule(lowered, PipelineCosts{1, 2, 0, 0.25});
  const nlohmann::json trace = nlohmann::json::parse(pipeline_simulation_trace(lowered, simulation));
  std::size_t actions = 0;
  for (const RankActions& rank : lowered.actions) actions += rank.size();
  std::size_t slices = 0, process_names = 0;
  for (const nlohmann::json& event : trace.at("traceEvents")) {
    if (event.at("ph") == "M" && event.at("name") == "process_name") {
      EXPECT_EQ(event.at("args").at("name"), "rank " + std::to_string(event.at("pid").get<int>()));
      ++process_names;
    }
    if (event.at("ph") != "X") continue;
    ++slices;
    const PipelineAction action = PipelineAction::parse(event.at("name").get<std::string>());
    EXPECT_EQ(event.at("pid").get<int>(), lowered.rank_of_stage(action.stage));
    if (action == PipelineAction{0, PipelineActionType::forward, 0}) {
      EXPECT_EQ(event.at("ts").get<double>(), 0);
      EXPECT_EQ(event.at("dur").get<double>(), 1000);
    }
    if (action == PipelineAction{3, PipelineActionType::backward, 0}) {
      EXPECT_EQ(event.at("dur").get<double>(), 2000);
    }
  }
  EXPECT_EQ(slices, actions);
  EXPECT_EQ(slices, simulation.timeline.size());
  EXPECT_EQ(process_names, 4u);
}

TEST(PipelineSimulator, ADeadlockSaysWhereEachRankWaits) {
  const PipelineSchedule deadlock = parse_pipeline_schedule("rank 0: 0F0 0B0 0F1 0B1\nrank 1: 1F1 1B1 1F0 1B0\n");
  try {
    simulate_pipeline_schedule(deadlock, PipelineCosts{});
    FAIL() << "a deadlock simulated";
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(std::string(error.what()),
              "schedule is not progressing: rank 0 waits at 0B0 for 1B0 on rank 1; rank 1 waits at 1F1 for 0F1 on rank 0");
  }
  const PipelineSchedule lost_gradient =
      parse_pipeline_schedule("rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0\n");
  try {
    simulate_pipeline_schedule(lost_gradient, PipelineCosts{});
    FAIL() << "a receive without its send simulated";
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(std::string(error.what()), "schedule is not progressing: rank 0 waits at 0RECV_B0 for 1SEND_B0, which no rank runs");
  }
}

}  // namespace
}  // namespace ferry
