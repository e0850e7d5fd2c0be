// The ranks' agreement on the job: every setting that changes what a rank computes or sends is listed
// (a plan differing in it lists another value), files by content, and a mismatch names the first
// differing setting with each rank's value; settings that may differ by rank are left out.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <unistd.h>

#include "engine/train/job_agreement.h"
#include "engine/train/training_plan.h"

namespace ferry {
namespace {

TrainingPlan tiny_plan() {
  TrainOptions options;
  options.batch = 2;
  options.seq = 32;
  options.steps = 3;
  return make_training_plan(options, RankEnvironment{});
}

std::string mismatch_after(const std::function<void(TrainingPlan&)>& change) {
  const TrainingPlan base = tiny_plan();
  TrainingPlan other = base;
  change(other);
  return describe_job_mismatch({job_settings(base), job_settings(other)});
}

TEST(JobAgreement, EqualPlansAgree) {
  const TrainingPlan plan = tiny_plan();
  EXPECT_EQ(describe_job_mismatch({job_settings(plan), job_settings(plan), job_settings(plan)}), "");
  EXPECT_EQ(describe_job_mismatch({job_settings(plan)}), "");
}

TEST(JobAgreement, EachSettingThatChangesTheComputationIsCompared) {
  // The classes issue 29 found training silently wrong or failing with a raw MPI error.
  EXPECT_NE(mismatch_after([](TrainingPlan& p) { p.optimizer.lr = 2e-3; }).find("--lr is not given on rank 0 and 0.002 on rank 1"), std::string::npos);
  EXPECT_NE(mismatch_after([](TrainingPlan& p) { p.seed = 7; }).find("--seed is 1337 on rank 0 and 7 on rank 1"), std::string::npos);
  EXPECT_NE(mismatch_after([](TrainingPlan& p) { p.micro_batch = 4; }).find("--batch is 2 on rank 0 and 4 on rank 1"), std::string::npos);
  EXPECT_NE(mismatch_after([](TrainingPlan& p) { p.dropout.residual = 0.1f; }).find("--dropout"), std::string::npos);
  EXPECT_NE(mismatch_after([](TrainingPlan& p) { p.io.shuffle = false; }).find("--shuffle is true on rank 0 and false on rank 1"), std::string::npos);
  EXPECT_NE(mismatch_after([](TrainingPlan& p) { p.optimizer.weight_decay = 0.0; }).find("--weight-decay"), std::string::npos);
  EXPECT_NE(mismatch_after([](TrainingPlan& p) { p.model.layers = 3; }).find("--layers"), std::string::npos);
  EXPECT_NE(mismatch_after([](TrainingPlan& p) { p.model.hidden = 64; }).find("--hidden"), std::string::npos);
  EXPECT_NE(mismatch_after([](TrainingPlan& p) { p.precision = DType::bf16; }).find("--precision is f32 on rank 0 and bf16 on rank 1"), std::string::npos);
  EXPECT_NE(mismatch_after([](TrainingPlan& p) { p.reduce_bucket_elements = 64; }).find("--reduce-bucket-size"), std::string::npos);
  EXPECT_NE(mismatch_after([](TrainingPlan& p) { p.steps = 4; }).find("--steps is 3 on rank 0 and 4 on rank 1"), std::string::npos);
  EXPECT_NE(mismatch_after([](TrainingPlan& p) { p.micro_batches = 2; }).find("--micro-batches"), std::string::npos);
  EXPECT_NE(mismatch_after([](TrainingPlan& p) { p.io.save = "/tmp/other"; }).find("--save"), std::string::npos);
  // Doubles compare exactly: a rate one ulp away differs.
  EXPECT_NE(mismatch_after([](TrainingPlan& p) { p.optimizer.eps = 1e-8; }).find("--eps is not given on rank 0 and 1e-08 on rank 1"), std::string::npos);
}

TEST(JobAgreement, RankLocalSettingsMayDiffer) {
  EXPECT_EQ(mismatch_after([](TrainingPlan& p) {
              p.threads = 3;
              p.offload.nvme_path = "/mnt/other";
              p.io.metrics = "/tmp/metrics.jsonl";
              p.io.log_every = 1;
              p.io.profile = "/tmp/profile";
            }),
            "");
}

TEST(JobAgreement, DataAgreesByContentNotPath) {
  const std::filesystem::path directory = std::filesystem::temp_directory_path() / ("ferry_job_agreement_" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  const auto write = [&](const char* name, const char* text) {
    std::ofstream(directory / name) << text;
    return (directory / name).string();
  };
  const std::string a = write("a.txt", "the same words"), copy = write("copy.txt", "the same words"), other = write("other.txt", "other words");
  EXPECT_NE(mismatch_after([&](TrainingPlan& p) { p.io.data = a; }).find("--data is the built-in corpus on rank 0 and a file of XXH64"), std::string::npos);
  TrainingPlan first = tiny_plan(), second = tiny_plan();
  first.io.data = a;
  second.io.data = copy;
  EXPECT_EQ(describe_job_mismatch({job_settings(first), job_settings(second)}), "");
  second.io.data = other;
  EXPECT_NE(describe_job_mismatch({job_settings(first), job_settings(second)}).find("--data is a file of XXH64"), std::string::npos);
  second.io.data = (directory / "missing.txt").string();
  EXPECT_NE(describe_job_mismatch({job_settings(first), job_settings(second)}).find("missing.txt', which this rank cannot read on rank 1"),
            std::string::npos);
  std::filesystem::remove_all(directory);
}

TEST(JobAgreement, EachValueIsNamedWithItsRanks) {
  const TrainingPlan plan = tiny_plan();
  TrainingPlan other = plan;
  other.optimizer.lr = 0.5;
  const std::string message = describe_job_mismatch({job_settings(plan), job_settings(other), job_settings(plan), job_settings(plan),
                                                     job_settings(other)});
  EXPECT_NE(message.find("--lr is not given on ranks 0, 2, 3 and 0.5 on ranks 1, 4"), std::string::npos) << message;
  EXPECT_NE(message.find("settings that may differ by rank: --threads"), std::string::npos) << message;
}

TEST(JobAgreement, TheFirstDifferingSettingIsNamed) {
  const std::string message = mismatch_after([](TrainingPlan& p) {
    p.model.hidden = 64;  // listed before the learning rate
    p.optimizer.lr = 1.0;
  });
  EXPECT_NE(message.find("--hidden"), std::string::npos) << message;
  EXPECT_EQ(message.find("--lr"), std::string::npos) << message;
}

TEST(JobAgreement, SettingsTravelAsTextAndGarbleIsNamed) {
  const std::vector<JobSetting> settings = job_settings(tiny_plan());
  const std::vector<JobSetting> back = decode_job_settings(encode_job_settings(settings));
  ASSERT_EQ(back.size(), settings.size());
  for (std::size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].name, settings[i].name);
    EXPECT_EQ(back[i].value, settings[i].value);
  }
  EXPECT_THROW(decode_job_settings("[[1,2]]"), JobMismatchError);
  EXPECT_THROW(decode_job_settings("not json"), JobMismatchError);
  std::vector<JobSetting> fewer = settings;
  fewer.pop_back();
  EXPECT_NE(describe_job_mismatch({settings, fewer}).find("different ferry builds"), std::string::npos);
}

}  // namespace
}  // namespace ferry
