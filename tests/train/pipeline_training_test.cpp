// Pipelines dry-run in one process (every rank of the grid on meta, one after the other, over groups that
// move nothing): every rank's measured activation stash equals the simulator's prediction byte for byte;
// the split moves blocks when the cost-balanced one does not fit --device-memory; --checkpointing auto
// fits every stage; out of memory names the fix; bad setups fail with the fix. Losses with values (every
// schedule, dropout, recompute, offload, --init-from, checkpoints) run under mpirun: cli/pipeline_test.sh.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>

#include "engine/train/model_config.h"
#include "engine/train/pipeline_layout.h"
#include "engine/train/pipeline_step.h"
#include "engine/train/trainer.h"
#include "models/gpt_model.h"
#include "models/gpt_weights.h"
#include "tests/train/tiny_training.h"

namespace ferry {
namespace {

TrainOptions tiny_run(std::int64_t layers) { return testing::tiny_training(layers); }

// A dry run of every rank of the pipeline on meta.
nlohmann::json pipeline_run(TrainOptions o, std::int32_t stages, std::int64_t micro_batches, const std::string& schedule) {
  o.device = "meta";
  o.pipeline_stages = stages;
  o.micro_batches = micro_batches;
  o.schedule = schedule;
  return run_training(o);
}

// Message tags grow with micro-batches x stages: past the communicator's bound (MPI guarantees only
// 32767) the run is refused before anything is built, instead of overflowing an int.
// ZeRO 2's buckets on a pipeline rank: the tied table alone (held for the stages' sum), and a cut where
// each of the rank's stages starts (interleaved:2 on 2 ranks: rank 0 holds stages 0 and 2, rank 1
// stages 1 and 3), so no bucket waits on two stages' backwards.
TEST(PipelineBuckets, HoldTheTiedTableAndCutAtEachOfTheRanksStages) {
  const GptConfig config{"tiny", 4, 8, 2, 11, 4};
  const std::vector<StageBlocks> stages = {{0, 1, 0}, {1, 2, 0}, {2, 3, 0}, {3, 4, 0}};
  auto specs = [&](std::vector<bool> blocks, bool embedding, bool head) {
    GptModelPart part;
    part.blocks = std::move(blocks);
    part.embedding = embedding;
    part.head = head;
    return GptParameters::part_specs(config, part);
  };
  const auto first = pipeline_buckets(specs({true, false, true, false}, true, false), stages, config.layers);
  EXPECT_EQ(first.held, std::optional<std::size_t>(GptParameters::kWteIndex));
  EXPECT_EQ(first.stage_starts, std::vector<std::size_t>{GptParameters::block_index(2)});
  const auto second = pipeline_buckets(specs({false, true, false, true}, false, true), stages, config.layers);
  EXPECT_EQ(second.held, std::optional<std::size_t>(GptParameters::kWteIndex));
  EXPECT_EQ(second.stage_starts, std::vector<std::size_t>{GptParameters::block_index(3)});
  // 1f1b: one stage per rank, no cut.
  const std::vector<StageBlocks> halves = {{0, 2, 0}, {2, 4, 0}};
  EXPECT_TRUE(pipeline_buckets(specs({true, true, false, false}, true, false), halves, config.layers).stage_starts.empty());
  EXPECT_TRUE(pipeline_buckets(specs({false, false, true, true}, false, true), halves, config.layers).stage_starts.empty());
}

TEST(PipelineTags, AreCheckedAgainstTheCommunicatorsLargestTag) {
  EXPECT_NO_THROW(check_pipeline_tags(2, 8191, 32767));
  EXPECT_EQ(tied_gradient_tag(2, 8191), 32764);
  try {
    check_pipeline_tags(2, 8192, 32767);
    FAIL() << "tag 32768 accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("tags its messages up to 32768, past the communicator's largest tag 32767"), std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("use at most 8191 micro-batches"), std::string::npos) << error.what();
  }
  EXPECT_THROW(check_pipeline_tags(100000, 100000, std::numeric_limits<int>::max()), std::invalid_argument);  // no int overflow
  TrainOptions o = testing::tiny_training(2);
  o.pipeline_stages = 2;
  o.micro_batches = 600000000;
  o.device = "meta";
  EXPECT_THROW(run_training(o), std::invalid_argument);
}

// GPipe keeps every micro-batch on every stage; early backward keeps min(m, p - s) on stage s
// (1f1b-deep min(m, 2(p - s) - 1)); the measured stash peak equals that many micro-batches' stashes.
TEST(PipelineTraining, MeasuredActivationStashEqualsTheInFlightMicroBatches) {
  TrainOptions o = tiny_run(4);
  o.steps = 1;
  const std::int32_t p = 4;
  const std::int64_t m = 8;
  for (const std::string schedule : {"gpipe", "1f1b", "1f1b-deep"}) {
    const nlohmann::json summary = pipeline_run(o, p, m, schedule);
    for (std::int32_t stage = 0; stage < p; ++stage) {
      const nlohmann::json& stash = summary["ranks"][static_cast<std::size_t>(stage)]["activation_stash"];
      const std::int64_t one = stash["one_micro_batch"].get<std::int64_t>();
      const std::int64_t in_flight = schedule == "gpipe" ? m : schedule == "1f1b" ? std::min<std::int64_t>(m, p - stage)
                                                                                  : std::min<std::int64_t>(m, 2 * (p - stage) - 1);
      EXPECT_GT(one, 0);
      EXPECT_EQ(stash["peak"].get<std::int64_t>(), in_flight * one) << schedule << " stage " << stage;
      EXPECT_EQ(stash["predicted_peak"], stash["peak"]) << schedule << " stage " << stage;
    }
  }
}

// Every schedule, every rank: the simulator's replay of the rank's actions with each chunk's bytes (a
// micro-batch's stash from F to B or I, and what W keeps from I) predicts the measured peak byte for
// byte: interleaved ranks hold chunks of different sizes (the embedding's tokens on the first, the head's
// input on the last), Zero Bubble keeps its weight-gradient inputs between I and W (with residual
// dropout, the branch gradients too).
TEST(PipelineTraining, EveryRanksPredictedStashEqualsTheMeasuredOne) {
  for (const float dropout : {0.0f, 0.1f}) {
    TrainOptions o = tiny_run(8);
    o.steps = 1;
    o.dropout = dropout;
    for (const std::int32_t p : {2, 4}) {
      for (const std::string schedule : {"gpipe", "1f1b", "1f1b-deep", "interleaved:2", "zb-h1"}) {
        const nlohmann::json summary = pipeline_run(o, p, 4, schedule);
        for (const nlohmann::json& rank : summary["ranks"]) {
          const nlohmann::json& stash = rank["activation_stash"];
          const std::string label = schedule + " --pp " + std::to_string(p) + " dropout " + std::to_string(dropout) + " rank " + rank["rank"].dump();
          EXPECT_GT(stash["peak"].get<std::int64_t>(), 0) << label;
          EXPECT_EQ(stash["predicted_peak"], stash["peak"]) << label;
        }
      }
    }
  }
}

// ZeRO-Offload on every rank: no gradient lives whole on the device, only a block's bucket at a time.
TEST(PipelineTraining, OffloadedOptimizerKeepsNoWholeGradientOnAnyRank) {
  TrainOptions o = tiny_run(4);
  o.offload_optimizer = "cpu";
  for (const std::string schedule : {"1f1b", "zb-h1", "interleaved:2"}) {
    const nlohmann::json summary = pipeline_run(o, 2, 4, schedule);
    for (const nlohmann::json& rank : summary["ranks"]) {
      EXPECT_LT(rank["max_by_category"]["gradients"].get<std::int64_t>(), rank["max_by_category"]["parameters"].get<std::int64_t>())
          << schedule << " rank " << rank["rank"];
      EXPECT_EQ(rank["max_by_category"]["optimizer_states"].get<std::int64_t>(), 0) << schedule << " rank " << rank["rank"];
    }
  }
}

// A stage that runs out of device memory mid-schedule: the error names the allocation and the rank, and
// every tensor goes back to its allocator before the device does (the sanitizer build catches a free
// into a destroyed allocator).
TEST(PipelineTraining, OutOfMemoryMidScheduleIsReportedAndCleanedUp) {
  TrainOptions o = tiny_run(4);
  o.steps = 1;
  o.device_memory = "2MiB";  // GPipe's 16 stashed micro-batches do not fit
  try {
    pipeline_run(o, 2, 16, "gpipe");
    FAIL() << "16 micro-batches of GPipe fitted in 2 MiB";
  } catch (const std::exception& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("out of memory"), std::string::npos) << message;
    EXPECT_NE(message.find("activations 'h."), std::string::npos) << message;
    EXPECT_NE(message.find("out of device memory on rank 1 in step 1"), std::string::npos) << message;  // ranks dry-run last to first
  }
}

// --checkpointing auto picks the least recompute whose fullest stage fits (a dry run of every stage per
// candidate); the losses stay one rank's. Nothing fitting is an error naming the smallest need.
TEST(PipelineTraining, AutomaticRecomputeFitsEveryStage) {
  TrainOptions o = tiny_run(4);
  o.steps = 2;
  o.checkpointing = "auto";
  o.device_memory = "1MiB";  // GPipe's 16 micro-batches need 2.9 MiB without recompute, 0.9 MiB with full
  o.metrics = ::testing::TempDir() + "/pipeline_auto_metrics." + std::to_string(::getpid()) + ".jsonl";
  std::filesystem::remove(o.metrics);
  const nlohmann::json summary = pipeline_run(o, 2, 16, "gpipe");
  std::ifstream metrics(o.metrics);
  const auto lines = std::count(std::istreambuf_iterator<char>(metrics), std::istreambuf_iterator<char>(), '\n');
  EXPECT_EQ(lines, 2) << "one line per step of the run, none from its dry runs";
  std::filesystem::remove(o.metrics);
  o.metrics.clear();
  const std::string chosen = summary["run"]["checkpointing"].get<std::string>();
  EXPECT_NE(chosen, "none");
  EXPECT_NE(chosen, "auto");
  EXPECT_EQ(summary["run"]["checkpointing_requested"], "auto");
  for (const nlohmann::json& rank : summary["ranks"]) EXPECT_LE(rank["peak_reserved"].get<std::int64_t>(), std::int64_t{1} << 20);
  o.device_memory = "640KiB";
  try {
    pipeline_run(o, 2, 16, "gpipe");
    FAIL() << "a policy fitted 1 MiB";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("no recompute policy fits every stage"), std::string::npos) << error.what();
  }
}

// A large vocabulary: the LM head costs about ten blocks, so the cost-balanced split of 4 blocks is 3 + 1
// and stage 0 stashes 32 micro-batches of 3 blocks (GPipe): 9.3 MiB reserved, over --device-memory 8MiB.
// 2 + 2 fits both ranks in 8 MiB (6.9 and 7.4 MiB); the run takes it and stays in the limit (its losses:
// cli.pipeline).
TEST(PipelineTraining, ThePartitionMovesBlocksWhenTheCostBalancedSplitDoesNotFit) {
  TrainOptions o = tiny_run(4);
  o.vocab = 4096;
  o.steps = 2;
  o.device_memory = "8MiB";
  ::testing::internal::CaptureStdout();
  const nlohmann::json summary = pipeline_run(o, 2, 32, "gpipe");
  const std::string printed = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(printed.find("the cost-balanced split does not fit --device-memory 8.00 MiB; blocks moved for memory"), std::string::npos) << printed;
  const nlohmann::json& choice = summary["pipeline"]["partition_choice"];
  EXPECT_EQ(choice["cost_balanced"], nlohmann::json::parse("[[0, 3], [3, 4]]"));
  EXPECT_EQ(summary["pipeline"]["partition"][0]["blocks"], nlohmann::json::parse("[0, 2]"));
  EXPECT_EQ(summary["pipeline"]["partition"][1]["blocks"], nlohmann::json::parse("[2, 4]"));
  EXPECT_EQ(choice["moved_for_memory"], true);
  EXPECT_EQ(choice["fits"], true);
  EXPECT_EQ(choice["splits_dry_run"], 2);
  EXPECT_EQ(choice["rank_peak_reserved"], nlohmann::json::parse("[7274496, 7798784]"));
  for (const nlohmann::json& rank : summary["ranks"]) {
    EXPECT_EQ(rank["peak_reserved"], choice["rank_peak_reserved"][rank["rank"].get<std::size_t>()]) << rank["rank"];  // the dry run's, exactly
    EXPECT_EQ(rank["num_ooms"], 0);
  }

  // Without --device-memory the split is by cost alone (no dry run); with room, the dry run keeps it.
  o.device_memory.clear();
  const nlohmann::json by_cost = pipeline_run(o, 2, 32, "gpipe");
  EXPECT_EQ(by_cost["pipeline"]["partition_choice"]["by"], "cost");
  EXPECT_EQ(by_cost["pipeline"]["partition"][0]["blocks"], nlohmann::json::parse("[0, 3]"));
  o.device_memory = "10MiB";
  const nlohmann::json roomy = pipeline_run(o, 2, 32, "gpipe");
  EXPECT_EQ(roomy["pipeline"]["partition_choice"]["moved_for_memory"], false);
  EXPECT_EQ(roomy["pipeline"]["partition_choice"]["splits_dry_run"], 1);
  EXPECT_EQ(roomy["pipeline"]["partition"][0]["blocks"], nlohmann::json::parse("[0, 3]"));
  EXPECT_EQ(roomy["pipeline"]["partition"][1]["blocks"], nlohmann::json::parse("[3, 4]"));

  // 7 MiB: no split fits (3 + 1 and 2 + 2 need more; 1 + 3 is ruled out by cost): said, and
  // the split whose fullest rank needs least runs out of memory.
  o.device_memory = "7MiB";
  ::testing::internal::CaptureStdout();
  EXPECT_THROW(pipeline_run(o, 2, 32, "gpipe"), std::exception);
  const std::string none = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(none.find("partition: no split fits --device-memory 7.00 MiB (2 dry-run, 1 ruled out)"), std::string::npos) << none;
}

TEST(PipelineTraining, BadSetupsNameTheFix) {
  TrainOptions o = tiny_run(2);
  o.device = "meta";
  auto message = [&](TrainOptions options) {
    try {
      run_training(options);
    } catch (const std::exception& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  TrainOptions too_many_stages = o;
  too_many_stages.pipeline_stages = 4;
  EXPECT_NE(message(too_many_stages).find("fewer than the 4 pipeline stages"), std::string::npos) << message(too_many_stages);
  TrainOptions disagreeing = o;
  disagreeing.pipeline_stages = 2;
  disagreeing.grad_accum = 2;
  disagreeing.micro_batches = 3;
  EXPECT_NE(message(disagreeing).find("disagree"), std::string::npos) << message(disagreeing);
  TrainOptions unknown = o;
  unknown.pipeline_stages = 2;
  unknown.schedule = "fastest";
  EXPECT_NE(message(unknown).find("fastest"), std::string::npos) << message(unknown);
}

}  // namespace
}  // namespace ferry
