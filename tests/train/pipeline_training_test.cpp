// Pipeline training in one process (every rank an executor with its own device, taking turns): each
// schedule gives the per-step losses of one rank with the same global batch; every rank's measured
// activation stash equals the simulator's prediction byte for byte; the split moves blocks when the
// cost-balanced one does not fit --device-memory; ZeRO-Offload works on every rank; --checkpointing auto
// and --init-from work per stage; bad setups fail with the fix.
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
#include "engine/train/pipeline_step.h"
#include "engine/train/trainer.h"
#include "models/gpt_model.h"
#include "models/gpt_weights.h"
#include "tests/train/tiny_training.h"

namespace ferry {
namespace {

TrainOptions tiny_run(std::int64_t layers) { return testing::tiny_training(layers); }

std::vector<double> losses(const nlohmann::json& summary) { return testing::step_losses(summary); }

void expect_same_losses(const std::vector<double>& expected, const std::vector<double>& actual, double relative, const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], relative * std::abs(expected[i])) << what << ", step " << i + 1;
  }
}

// One rank, grad-accum m: the reference a pipeline of m micro-batches must match.
std::vector<double> single_rank_losses(TrainOptions o, std::int64_t micro_batches) {
  o.grad_accum = micro_batches;
  return losses(run_training(o));
}

nlohmann::json pipeline_run(TrainOptions o, std::int32_t stages, std::int64_t micro_batches, const std::string& schedule) {
  o.pipeline_stages = stages;
  o.micro_batches = micro_batches;
  o.schedule = schedule;
  return run_training(o);
}

// Message tags grow with micro-batches x stages: past the communicator's bound (MPI guarantees only
// 32767) the run is refused before anything is built, instead of overflowing an int.
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

TEST(PipelineTraining, EverySchedulesLossesEqualOneRank) {
  const TrainOptions base = tiny_run(8);
  for (const std::int32_t stages : {2, 4}) {
    const std::int64_t micro_batches = 4;
    const std::vector<double> expected = single_rank_losses(base, micro_batches);
    for (const std::string schedule : {"gpipe", "1f1b", "1f1b-deep", "interleaved:2", "zb-h1"}) {
      const nlohmann::json summary = pipeline_run(base, stages, micro_batches, schedule);
      expect_same_losses(expected, losses(summary), 1e-5, schedule + " with --pp " + std::to_string(stages));
      EXPECT_EQ(summary["ranks"].size(), static_cast<std::size_t>(stages));
    }
  }
}

TEST(PipelineTraining, DropoutAndRecomputeGiveTheSameLossesAsOneRank) {
  TrainOptions o = tiny_run(4);
  o.dropout = 0.1f;
  o.checkpointing = "full";
  const std::vector<double> expected = single_rank_losses(o, 3);
  expect_same_losses(expected, losses(pipeline_run(o, 2, 3, "1f1b")), 1e-5, "1f1b with dropout and full recompute");
  o.checkpointing = "selective";
  expect_same_losses(expected, losses(pipeline_run(o, 4, 3, "gpipe")), 1e-5, "gpipe with dropout and selective recompute");
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

TEST(PipelineTraining, DryRunOnMetaMeasuresTheSameStash) {
  TrainOptions o = tiny_run(4);
  o.steps = 1;
  const nlohmann::json real = pipeline_run(o, 2, 4, "1f1b");
  o.device = "meta";
  const nlohmann::json dry = pipeline_run(o, 2, 4, "1f1b");
  EXPECT_TRUE(std::isnan(dry["steps"][0]["loss"].get<double>()));
  for (std::size_t rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(dry["ranks"][rank]["activation_stash"], real["ranks"][rank]["activation_stash"]);
    EXPECT_EQ(dry["ranks"][rank]["peak_allocated"], real["ranks"][rank]["peak_allocated"]);
  }
}

// ZeRO-Offload on every rank: each stage's gradients stream to its own host copy, the tied table's are
// summed between host copies, and the losses stay one rank's (with or without offload).
TEST(PipelineTraining, OffloadedOptimizerGivesTheSameLossesAsOneRank) {
  TrainOptions o = tiny_run(4);
  o.optimizer.grad_clip = 0.05;  // the clip scale depends on the global norm: every rank must see the same one
  const std::vector<double> expected = single_rank_losses(o, 4);
  o.offload_optimizer = "cpu";
  expect_same_losses(expected, single_rank_losses(o, 4), 1e-5, "one rank with offload");
  for (const std::string schedule : {"1f1b", "zb-h1", "interleaved:2"}) {
    const nlohmann::json summary = pipeline_run(o, 2, 4, schedule);
    expect_same_losses(expected, losses(summary), 1e-5, schedule + " with --offload-optimizer cpu");
    for (const nlohmann::json& rank : summary["ranks"]) {
      EXPECT_EQ(rank["optimizer"]["mode"], "cpu");
      EXPECT_GT(rank["optimizer"]["gradient_bytes_to_host"].get<std::int64_t>(), 0);
      // No gradient lives whole on the device: only one block's bucket at a time.
      EXPECT_LT(rank["max_by_category"]["gradients"].get<std::int64_t>(), rank["max_by_category"]["parameters"].get<std::int64_t>());
    }
  }
  o.offload_optimizer = "nvme";
  o.nvme_path = ::testing::TempDir() + "/pipeline_nvme." + std::to_string(::getpid());
  std::filesystem::remove_all(o.nvme_path);
  const nlohmann::json summary = pipeline_run(o, 2, 4, "1f1b");
  expect_same_losses(expected, losses(summary), 1e-5, "1f1b with --offload-optimizer nvme");
  // Each rank keeps its state in its own directory (the state file goes when the run ends).
  for (const std::string rank : {"rank-0", "rank-1"}) EXPECT_TRUE(std::filesystem::is_directory(std::filesystem::path(o.nvme_path) / rank)) << rank;
  std::int64_t nvme_bytes = 0;
  for (const nlohmann::json& rank : summary["ranks"]) {
    EXPECT_GT(rank["nvme_bytes"].get<std::int64_t>(), 0);
    nvme_bytes += rank["nvme_bytes"].get<std::int64_t>();
  }
  EXPECT_EQ(summary["memory"]["nvme_bytes"].get<std::int64_t>(), nvme_bytes);
  EXPECT_GT(nvme_bytes, 0);
  std::filesystem::remove_all(o.nvme_path);
}

// A stage that runs out of device memory mid-schedule, with activations still in the mailbox between
// the in-process ranks: the error names the allocation, and every tensor goes back to its allocator
// before the devices do (the sanitizer build catches a free into a destroyed allocator).
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
  }
}

// --checkpointing auto picks the least recompute whose fullest stage fits (a dry run of every stage per
// candidate); the losses stay one rank's. Nothing fitting is an error naming the smallest need.
TEST(PipelineTraining, AutomaticRecomputeFitsEveryStage) {
  TrainOptions o = tiny_run(4);
  o.steps = 2;
  const std::vector<double> expected = single_rank_losses(o, 16);
  o.checkpointing = "auto";
  o.device_memory = "2MiB";  // GPipe's 16 micro-batches need 4 MiB without recompute
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
  for (const nlohmann::json& rank : summary["ranks"]) EXPECT_LE(rank["peak_reserved"].get<std::int64_t>(), std::int64_t{2} << 20);
  expect_same_losses(expected, losses(summary), 1e-5, "gpipe with --checkpointing auto (" + chosen + ")");
  o.device_memory = "1MiB";
  try {
    pipeline_run(o, 2, 16, "gpipe");
    FAIL() << "a policy fitted 1 MiB";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("no recompute policy fits every stage"), std::string::npos) << error.what();
  }
}

// --init-from: each stage loads its own tensors from the whole model's file.
TEST(PipelineTraining, InitFromLoadsEachStagesShareOfTheWeights) {
  TrainOptions o = tiny_run(4);
  const std::string path = ::testing::TempDir() + "/pipeline_init." + std::to_string(::getpid()) + ".safetensors";
  {
    auto device = create_device(DeviceOptions{});
    const GptConfig config = resolve_model_config(o);
    GptModel model(*device, config, DType::f32);
    initialize_gpt_parameters(model.parameters(), config, 1234);  // not the run's --seed
    save_gpt_parameters(path, model.parameters());
  }
  o.init_from = path;  // the shape comes from the file (and --heads)
  o.layers.reset();
  o.hidden.reset();
  o.vocab.reset();
  const std::vector<double> expected = single_rank_losses(o, 4);
  expect_same_losses(expected, losses(pipeline_run(o, 4, 4, "1f1b")), 1e-5, "1f1b with --init-from");
  EXPECT_NE(single_rank_losses(tiny_run(4), 4).front(), expected.front()) << "the file's weights were not used";
  std::filesystem::remove(path);
}

// A large vocabulary: the LM head costs about ten blocks, so the cost-balanced split of 4 blocks is 3 + 1
// and stage 0 stashes 16 micro-batches of 3 blocks (GPipe): 8 MiB reserved, over --device-memory 6MiB.
// 2 + 2 fits both ranks in 6 MiB; the run takes it, trains as one rank does, and stays in the limit.
TEST(PipelineTraining, ThePartitionMovesBlocksWhenTheCostBalancedSplitDoesNotFit) {
  TrainOptions o = tiny_run(4);
  o.vocab = 4096;
  o.steps = 2;
  const std::vector<double> expected = single_rank_losses(o, 16);
  o.device_memory = "6MiB";
  ::testing::internal::CaptureStdout();
  const nlohmann::json summary = pipeline_run(o, 2, 16, "gpipe");
  const std::string printed = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(printed.find("the cost-balanced split does not fit --device-memory 6.00 MiB; blocks moved for memory"), std::string::npos) << printed;
  const nlohmann::json& choice = summary["pipeline"]["partition_choice"];
  EXPECT_EQ(choice["cost_balanced"], nlohmann::json::parse("[[0, 3], [3, 4]]"));
  EXPECT_EQ(summary["pipeline"]["partition"][0]["blocks"], nlohmann::json::parse("[0, 2]"));
  EXPECT_EQ(summary["pipeline"]["partition"][1]["blocks"], nlohmann::json::parse("[2, 4]"));
  EXPECT_EQ(choice["moved_for_memory"], true);
  EXPECT_EQ(choice["fits"], true);
  EXPECT_EQ(choice["splits_dry_run"], 2);
  EXPECT_EQ(choice["rank_peak_reserved"], nlohmann::json::parse("[6291456, 6291456]"));
  for (const nlohmann::json& rank : summary["ranks"]) {
    EXPECT_EQ(rank["peak_reserved"].get<std::int64_t>(), std::int64_t{6} << 20) << rank["rank"];  // the dry run's, exactly
    EXPECT_EQ(rank["num_ooms"], 0);
  }
  expect_same_losses(expected, losses(summary), 1e-5, "gpipe with blocks moved for memory");

  // Without --device-memory the split is by cost alone (no dry run); with room, the dry run keeps it.
  o.device_memory.clear();
  const nlohmann::json by_cost = pipeline_run(o, 2, 16, "gpipe");
  EXPECT_EQ(by_cost["pipeline"]["partition_choice"]["by"], "cost");
  EXPECT_EQ(by_cost["pipeline"]["partition"][0]["blocks"], nlohmann::json::parse("[0, 3]"));
  o.device_memory = "8MiB";
  const nlohmann::json roomy = pipeline_run(o, 2, 16, "gpipe");
  EXPECT_EQ(roomy["pipeline"]["partition_choice"]["moved_for_memory"], false);
  EXPECT_EQ(roomy["pipeline"]["partition_choice"]["splits_dry_run"], 1);
  EXPECT_EQ(roomy["pipeline"]["partition"][0]["blocks"], nlohmann::json::parse("[0, 3]"));
  EXPECT_EQ(roomy["pipeline"]["partition"][1]["blocks"], nlohmann::json::parse("[3, 4]"));

  // 5 MiB: no split fits (3 + 1 and 2 + 2 need 6 MiB; 1 + 3 gives rank 1 more than 2 + 2 did): said, and
  // the split whose fullest rank needs least runs out of memory.
  o.device_memory = "5MiB";
  ::testing::internal::CaptureStdout();
  EXPECT_THROW(pipeline_run(o, 2, 8, "gpipe"), std::exception);
  const std::string none = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(none.find("partition: no split fits --device-memory 5.00 MiB (2 dry-run, 1 ruled out)"), std::string::npos) << none;
}

TEST(PipelineTraining, BadSetupsNameTheFix) {
  const TrainOptions o = tiny_run(2);
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
