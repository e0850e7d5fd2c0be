// Every generator against the reference's oracles for p in {1,2,4,8} and m in {1, p-1, p, 2p, 4p}, compute
// only and lowered (progressing with buffered and with rendezvous sends), and the numbers the literature
// gives: 2(m+p-1) unit slots for GPipe and 1F1B, peak in-flight micro-batches, ZB-H1's third of 1F1B's
// bubble and interleaving's 1/V.
#include <gtest/gtest.h>

#include <set>

#include "schedule/pipeline_lowering.h"
#include "schedule/pipeline_simulator.h"
#include "schedule/pipeline_theory.h"
#include "schedule/pipeline_validator.h"

namespace ferry {
namespace {

const std::vector<std::string> kGenerators{"gpipe", "1f1b", "1f1b-deep", "interleaved:2", "interleaved:3", "zb-h1"};

std::vector<std::int32_t> micro_batch_counts(std::int32_t ranks) {
  std::set<std::int32_t> counts;
  for (std::int32_t count : {1, ranks - 1, ranks, 2 * ranks, 4 * ranks}) {
    if (count >= 1) counts.insert(count);
  }
  return {counts.begin(), counts.end()};
}

std::string joined(const std::vector<std::string>& problems) {
  std::string text;
  for (const std::string& problem : problems) text += "\n  " + problem;
  return text;
}

// The idle time of stage `stage`'s rank: the makespan less the busy time of all its stages.
double idle(const PipelineSimulation& simulation, std::size_t stage) {
  double busy = 0;
  for (const StageSimulation& each : simulation.stages) {
    if (each.rank == simulation.stages[stage].rank) busy += each.busy;
  }
  return simulation.makespan - busy;
}

TEST(PipelineGenerators, EveryScheduleMeetsTheOraclesComputeOnlyAndLowered) {
  for (const std::string& name : kGenerators) {
    for (std::int32_t ranks : {1, 2, 4, 8}) {
      for (std::int32_t micro_batches : micro_batch_counts(ranks)) {
        const std::string label = name + " p=" + std::to_string(ranks) + " m=" + std::to_string(micro_batches);
        if (name.starts_with("interleaved") && micro_batches % ranks != 0) {
          EXPECT_THROW(generate_pipeline_schedule(name, ranks, micro_batches), std::invalid_argument) << label;
          continue;
        }
        const PipelineSchedule compute = generate_pipeline_schedule(name, ranks, micro_batches);
        EXPECT_EQ(compute.name, name);
        EXPECT_EQ(compute.ranks, ranks);
        EXPECT_EQ(compute.micro_batches, micro_batches);
        EXPECT_EQ(compute.stages, ranks * (name == "interleaved:2" ? 2 : name == "interleaved:3" ? 3 : 1)) << label;
        EXPECT_FALSE(compute.has_communication()) << label;
        EXPECT_EQ(compute.splits_backward(), name == "zb-h1") << label;
        const ScheduleValidation compute_validation = validate_pipeline_schedule(compute);
        EXPECT_TRUE(compute_validation.ok()) << label << joined(compute_validation.problems);

        const PipelineSchedule lowered = lower_pipeline_communication(compute);
        EXPECT_EQ(lowered.has_communication(), ranks > 1) << label;
        for (const RankActions& rank : lowered.actions) {
          for (const std::optional<PipelineAction>& action : rank) EXPECT_TRUE(action.has_value()) << label << ": a bubble";
        }
        for (const SendSemantics semantics : {SendSemantics::buffered, SendSemantics::rendezvous}) {
          const ScheduleValidation validation = validate_pipeline_schedule(lowered, semantics);
          EXPECT_TRUE(validation.ok()) << label << " (" << send_semantics_name(semantics) << ")" << joined(validation.problems);
        }
        EXPECT_EQ(lower_pipeline_communication(lowered).actions, lowered.actions) << label << ": lowering twice";
        // Bubbles are only where a rank waits: placed at unit cost, the compute slots are the timeline.
        const PipelineSimulation simulation = simulate_pipeline_schedule(compute, unit_pipeline_costs(compute));
        for (std::size_t rank = 0; rank < compute.actions.size(); ++rank) {
          EXPECT_LE(static_cast<double>(compute.actions[rank].size()), simulation.makespan) << label;
          ASSERT_FALSE(compute.actions[rank].empty()) << label;
          EXPECT_TRUE(compute.actions[rank].back().has_value()) << label << ": trailing bubble on rank " << rank;
        }
      }
    }
  }
}

TEST(PipelineGenerators, GpipeAndOneForwardOneBackwardTakeTwoTimesMPlusPMinusOneUnitSlots) {
  const PipelineCosts unit{1, 1, 0, 0};
  for (const char* name : {"gpipe", "1f1b"}) {
    for (std::int32_t ranks : {1, 2, 4, 8}) {
      for (std::int32_t micro_batches : micro_batch_counts(ranks)) {
        const PipelineSchedule compute = generate_pipeline_schedule(name, ranks, micro_batches);
        for (const PipelineSchedule& schedule : {compute, lower_pipeline_communication(compute)}) {
          const PipelineSimulation simulation = simulate_pipeline_schedule(schedule, unit);
          const std::string label = std::string(name) + " p=" + std::to_string(ranks) + " m=" + std::to_string(micro_batches);
          EXPECT_EQ(simulation.makespan, 2 * (micro_batches + ranks - 1)) << label;
          for (std::size_t stage = 0; stage < simulation.stages.size(); ++stage) {
            EXPECT_EQ(simulation.stages[stage].busy, 2 * micro_batches) << label;
            EXPECT_EQ(idle(simulation, stage), 2 * (ranks - 1)) << label << " stage " << stage;
          }
          EXPECT_NEAR(simulation.bubble_fraction, theoretical_bubble(compute, unit)->fraction, 1e-12) << label;
        }
      }
    }
  }
}

TEST(PipelineGenerators, PeakInFlightMicroBatchesPerStage) {
  for (std::int32_t ranks : {1, 2, 4, 8}) {
    for (std::int32_t micro_batches : micro_batch_counts(ranks)) {
      for (const char* name : {"gpipe", "1f1b", "1f1b-deep", "zb-h1"}) {
        const PipelineSchedule compute = generate_pipeline_schedule(name, ranks, micro_batches);
        const PipelineSimulation simulation = simulate_pipeline_schedule(compute, unit_pipeline_costs(compute));
        for (std::int32_t stage = 0; stage < ranks; ++stage) {
          const std::string_view kind = name;
          const std::int32_t expected = kind == "gpipe"       ? micro_batches
                                        : kind == "1f1b-deep" ? std::min(micro_batches, 2 * (ranks - stage) - 1)
                                                              : std::min(micro_batches, ranks - stage);
          EXPECT_EQ(simulation.stages[static_cast<std::size_t>(stage)].peak_in_flight, expected)
              << name << " p=" << ranks << " m=" << micro_batches << " stage " << stage;
        }
      }
    }
  }
}

TEST(PipelineGenerators, ZeroBubbleH1IdlesAThirdOfOneForwardOneBackward) {
  // F = B = W = 1: 1F1B's full backward costs B + W = 2 and each rank idles (p-1)(F+B+W) = 3(p-1);
  // ZB-H1 idles (p-1)(F+B-W) = p-1 (Qi et al.). The formula is exact at unit costs once m >= p, so
  // the tolerance is zero; the fractions differ from 1/3 only because the makespans differ.
  const PipelineCosts costs{1, 1, 1, 0};
  for (const auto& [ranks, micro_batches] : {std::pair{4, 8}, std::pair{8, 32}, std::pair{4, 4}}) {
    const PipelineSchedule zero_bubble = generate_pipeline_schedule("zb-h1", ranks, micro_batches);
    const PipelineSchedule one_forward_one_backward = generate_pipeline_schedule("1f1b", ranks, micro_batches);
    const PipelineSimulation zb = simulate_pipeline_schedule(zero_bubble, costs);
    const PipelineSimulation baseline = simulate_pipeline_schedule(one_forward_one_backward, costs);
    const PipelineSimulation zb_lowered = simulate_pipeline_schedule(lower_pipeline_communication(zero_bubble, costs), costs);
    EXPECT_EQ(zb.makespan, 3 * micro_batches + ranks - 1);
    EXPECT_EQ(zb_lowered.makespan, zb.makespan) << "the receive-first order costs nothing here";
    EXPECT_EQ(baseline.makespan, 3 * (micro_batches + ranks - 1));
    for (std::size_t stage = 0; stage < zb.stages.size(); ++stage) {
      EXPECT_EQ(idle(zb, stage), ranks - 1) << "p=" << ranks << " stage " << stage;
      EXPECT_EQ(idle(baseline, stage), 3 * (ranks - 1)) << "p=" << ranks << " stage " << stage;
      EXPECT_DOUBLE_EQ(idle(zb, stage) / idle(baseline, stage), 1.0 / 3);
      // Same in-flight peak as 1F1B, and every stage holds at most p micro-batches (F done, W not).
      EXPECT_EQ(zb.stages[stage].peak_in_flight, baseline.stages[stage].peak_in_flight);
      EXPECT_LE(zb.stages[stage].peak_activation_bytes, ranks);
    }
    EXPECT_NEAR(zb.bubble_fraction, theoretical_bubble(zero_bubble, costs)->fraction, 1e-12);
  }
}

TEST(PipelineGenerators, InterleavingShrinksTheBubbleByTheChunkCount) {
  // A chunk is 1/V of a stage, so its F and B cost 1/V; each rank idles 2(p-1)/V instead of 1F1B's 2(p-1),
  // and the fraction is (p-1)/(Vm+p-1): Megatron's (1/V)(p-1)/m of the ideal time.
  for (const auto& [ranks, micro_batches] : {std::pair{4, 8}, std::pair{8, 16}, std::pair{2, 4}}) {
    const PipelineSimulation baseline =
        simulate_pipeline_schedule(generate_pipeline_schedule("1f1b", ranks, micro_batches), PipelineCosts{1, 1, 0, 0});
    for (const std::int32_t chunks : {2, 3}) {
      const PipelineSchedule interleaved =
          generate_pipeline_schedule("interleaved:" + std::to_string(chunks), ranks, micro_batches);
      const PipelineCosts chunk_costs{1.0 / chunks, 1.0 / chunks, 0, 0};
      const PipelineSimulation simulation = simulate_pipeline_schedule(interleaved, chunk_costs);
      for (std::size_t stage = 0; stage < simulation.stages.size(); ++stage) {
        EXPECT_NEAR(idle(simulation, stage), 2.0 * (ranks - 1) / chunks, 1e-9) << "V=" << chunks << " stage " << stage;
        EXPECT_NEAR(idle(simulation, stage) / idle(baseline, 0), 1.0 / chunks, 1e-9);
      }
      EXPECT_NEAR(simulation.bubble_fraction, double(ranks - 1) / (chunks * micro_batches + ranks - 1), 1e-12);
      EXPECT_LT(simulation.bubble_fraction, baseline.bubble_fraction);
    }
  }
}

TEST(PipelineGenerators, PrintTheClassicDiagrams) {
  EXPECT_EQ(format_pipeline_schedule(generate_pipeline_schedule("1f1b", 3, 4)),
            "# ferry pipeline schedule: name=1f1b ranks=3 stages=3 micro_batches=4\n"
            "rank 0: 0F0 0F1 0F2 -   -   0B0 0F3 0B1 -   0B2 -   0B3\n"
            "rank 1: -   1F0 1F1 -   1B0 1F2 1B1 1F3 1B2 -   1B3\n"
            "rank 2: -   -   2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3\n");
  // GPipe runs its backwards in micro-batch order 0..m-1, as PyTorch's ScheduleGPipe.
  EXPECT_EQ(format_pipeline_schedule(generate_pipeline_schedule("gpipe", 2, 3)),
            "# ferry pipeline schedule: name=gpipe ranks=2 stages=2 micro_batches=3\n"
            "rank 0: 0F0 0F1 0F2 -   -   0B0 0B1 0B2\n"
            "rank 1: -   1F0 1F1 1F2 1B0 1B1 1B2\n");
  EXPECT_EQ(format_pipeline_schedule(generate_pipeline_schedule("zb-h1", 2, 3)),
            "# ferry pipeline schedule: name=zb-h1 ranks=2 stages=2 micro_batches=3\n"
            "rank 0: 0F0 0F1 -   0I0 0W0 0F2 0I1 0W1 0I2 0W2\n"
            "rank 1: -   1F0 1I0 1F1 1I1 1W0 1F2 1I2 1W1 1W2\n");
}

TEST(PipelineGenerators, FewerMicroBatchesThanStagesStillRun) {
  // pytorch/torchtitan#775: 1F1B hung for m < p. Warm-up min(m, p-s) runs every forward first.
  const PipelineSchedule schedule = generate_pipeline_schedule("1f1b", 8, 3);
  const PipelineSchedule lowered = lower_pipeline_communication(schedule);
  EXPECT_TRUE(validate_pipeline_schedule(lowered, SendSemantics::rendezvous).ok());
  EXPECT_EQ(simulate_pipeline_schedule(lowered, PipelineCosts{1, 1, 0, 0}).makespan, 2 * (3 + 8 - 1));
}

// issue 29: lowering pp 64 x 4096 micro-batches took minutes. Its work per action must not grow with the
// ranks or the micro-batches: 1F1B's deadlocks (neighbours sending to each other) are repaired one pair
// at a time without a search over every rank, and a stuck rank is not tried again until woken.
TEST(PipelineGenerators, LoweringWorkIsLinearInTheActions) {
  for (const std::string name : {"1f1b", "interleaved:2", "zb-h1"}) {
    double most_per_action = 0, least_per_action = 1e9;
    for (const auto& [ranks, micro_batches] : {std::pair{8, 64}, std::pair{32, 64}, std::pair{32, 256}}) {
      const PipelineSchedule compute = generate_pipeline_schedule(name, ranks, micro_batches);
      PipelineLoweringWork work;
      const PipelineSchedule lowered = lower_pipeline_communication(compute, unit_pipeline_costs(compute), &work);
      EXPECT_TRUE(validate_pipeline_schedule(lowered, SendSemantics::rendezvous).ok()) << name;
      std::int64_t actions = 0;
      for (const RankActions& rank : lowered.actions) actions += static_cast<std::int64_t>(rank.size());
      const double per_action = static_cast<double>(work.progress_work) / static_cast<double>(actions);
      const std::string label = name + " p=" + std::to_string(ranks) + " m=" + std::to_string(micro_batches);
      EXPECT_GT(work.repairs, 0) << label;  // there were deadlocks to repair
      if (name == "1f1b") {
        EXPECT_EQ(work.searches, 0) << label;
      }
      EXPECT_LE(work.searches, 3 * ranks) << label;  // interleaved: a few ring-shaped deadlocks at the start
      most_per_action = std::max(most_per_action, per_action);
      least_per_action = std::min(least_per_action, per_action);
    }
    EXPECT_LE(most_per_action, 2.0) << name;
    EXPECT_LE(most_per_action, 1.25 * least_per_action) << name;
  }
}

TEST(PipelineGenerators, BadRequestsNameTheFix) {
  const auto message = [](std::string_view name, std::int32_t ranks, std::int32_t micro_batches) {
    try {
      generate_pipeline_schedule(name, ranks, micro_batches);
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("2f2b", 4, 8).find("unknown pipeline schedule '2f2b': choose one of gpipe, 1f1b, 1f1b-deep, interleaved:V, zb-h1"),
            std::string::npos);
  EXPECT_NE(message("1f1b", 0, 8).find("at least 1 rank"), std::string::npos);
  EXPECT_NE(message("1f1b", 4, 0).find("at least 1 micro-batch"), std::string::npos);
  EXPECT_NE(message("interleaved:1", 4, 8).find("V >= 2"), std::string::npos);
  EXPECT_NE(message("interleaved:x", 4, 8).find("V >= 2"), std::string::npos);
  EXPECT_NE(message("interleaved:2", 4, 6).find("multiple of the ranks (4)"), std::string::npos);
  EXPECT_NE(message("interleaved:2", 4, 6).find("--micro-batches 4 or 8"), std::string::npos);
  EXPECT_NE(message("interleaved:2", 4, 3).find("--micro-batches 4"), std::string::npos);
  EXPECT_EQ(pipeline_schedule_names(), (std::vector<std::string>{"gpipe", "1f1b", "1f1b-deep", "interleaved:V", "zb-h1"}));
}

}  // namespace
}  // namespace ferry
