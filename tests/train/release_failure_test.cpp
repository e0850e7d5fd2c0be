// A training run whose device refuses to take memory back (a failed madvise or driver call at every
// release): each refusal is reported on stderr and counted, the memory stays cached, the losses are
// those of a run without failures, and the device's teardown ends normally. Once, expandable segments
// with an offloaded optimizer ended every such run with SIGABRT at teardown.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "allocator/range_segment_source.h"
#include "engine/core/cpu_device.h"
#include "engine/data/token_data.h"
#include "engine/optim/training_optimizer.h"
#include "engine/train/training_step.h"
#include "models/gpt_model.h"
#include "tests/allocator/page_ledger_source.h"

namespace ferry {
namespace {

struct RunResult {
  std::vector<double> losses;
  std::int64_t release_failures = 0;
  std::string said;
};

RunResult train_three_steps(int refusals) {
  auto ledger = std::make_unique<testing::PageLedgerSource>(std::make_unique<HostSegmentSource>(std::size_t{256} << 20));
  testing::PageLedgerSource& source = *ledger;
  RunResult result;
  ::testing::internal::CaptureStderr();
  {
    auto device = std::make_unique<HostDevice>(DeviceKind::cpu, std::move(ledger), AllocatorConfig::parse("expandable_segments:True"));
    const GptConfig config{"release-failures", 2, 32, 2, 256, 16};
    GptModel model(*device, config, DType::bf16, {}, GradientStorage::streamed);
    initialize_gpt_parameters(model.parameters(), config, 3);
    offload::ZeroOffloadSettings offload;
    offload.device = offload::OffloadDevice::cpu;
    const std::unique_ptr<TrainingOptimizer> optimizer = make_offload_optimizer(model, cpu::AdamWHyperparameters{}, offload);
    const TokenDataset data = TokenDataset::embedded_corpus();
    DataLoader loader(data, 2, 16, false, 0);
    const StepSettings settings{2, 16, 1, 7, 1.0};
    source.refuse_releases(refusals);
    for (std::int64_t step = 0; step < 3; ++step) {
      result.losses.push_back(run_training_step(*device, model, *optimizer, loader, settings, step, 1e-3, {}).loss);
      Tensor::empty(*device, {std::int64_t{30} << 18}, DType::f32, MemoryCategory::workspace, "scratch");  // 30 MiB, freed at once
      device->allocator().empty_cache();  // every cached page is asked back, and refused
    }
    result.release_failures = device->allocator().statistics().num_release_failures;
    EXPECT_TRUE(source.violations().empty()) << source.violations().front();
  }  // the device's teardown (and its source's): every page given back, or the refusal said
  result.said = ::testing::internal::GetCapturedStderr();
  return result;
}

TEST(ReleaseFailures, ARunWhoseReleasesAreRefusedTrainsAsUsualAndEndsNormally) {
  const RunResult clean = train_three_steps(0);
  EXPECT_EQ(clean.release_failures, 0);
  EXPECT_EQ(clean.said.find("warning"), std::string::npos) << clean.said;
  const RunResult refused = train_three_steps(1000);
  EXPECT_EQ(refused.losses, clean.losses);
  EXPECT_GT(refused.release_failures, 0);
  EXPECT_NE(refused.said.find("the memory stays cached and the run goes on"), std::string::npos) << refused.said;
  EXPECT_NE(refused.said.find("ignored in a destructor"), std::string::npos) << refused.said;  // the teardown said it too
}

}  // namespace
}  // namespace ferry
