// A meta device standing in for the cuda kernels allocates what they need, on any machine: attention
// keeps [B, NH, T] f32 log-sum-exps instead of the cpu's [B, NH, T, T] probabilities (the difference in
// kept activations is exact), each matmul takes cuBLASLt's workspace, and the LM head's slices and the
// losses take their scratch. stand_in_for refuses what it cannot honour.
#include <gtest/gtest.h>

#include "engine/train/training_step.h"
#include "models/gpt_model.h"
#include "models/kernel_backend.h"
#include "models/kernel_sizes.h"
#include "schedule/recompute_policy.h"
#include "tests/models/micro_batch_statistics.h"

namespace ferry {
namespace {

constexpr std::int64_t B = 2, T = 8;

GptConfig config() { return GptConfig{"kernel-sizes-test", 3, 16, 2, 13, 8}; }

struct Peaks {
  std::int64_t activations = 0;
  std::int64_t workspace = 0;
  std::int64_t allocated = 0;
};

// One micro-batch (policy none, no dropout) on a meta device standing in for `kind`.
Peaks micro_batch_peaks(DeviceKind kind, DType dtype) {
  auto device = testing::gibibyte_device(DeviceKind::meta, kind);
  const AllocatorStatistics stats = testing::micro_batch_statistics(
      *device, config(), dtype, {}, activation_keeps(RecomputePolicy::parse("none"), config().layers), B, T);
  return {stats.category_requested_bytes[category_index(MemoryCategory::activations)].peak,
          stats.category_requested_bytes[category_index(MemoryCategory::workspace)].peak, stats.allocated_bytes.all().peak};
}

TEST(KernelSizes, MetaStandingInForCudaKeepsLogSumExpsAndTakesTheMatmulWorkspace) {
  const std::int64_t L = config().layers, NH = config().heads;
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Peaks cpu = micro_batch_peaks(DeviceKind::cpu, dtype);
    const Peaks cuda = micro_batch_peaks(DeviceKind::cuda, dtype);
    const auto element = static_cast<std::int64_t>(dtype_size(dtype));
    // Every block keeps its attention state: probabilities in the activations' dtype, or f32 log-sum-exps.
    EXPECT_EQ(cpu.activations - cuda.activations, L * (B * NH * T * T * element - B * NH * T * 4)) << dtype_name(dtype);
    EXPECT_GE(cuda.workspace, static_cast<std::int64_t>(ops::kernel_sizes(DeviceKind::cuda).matmul_workspace_bytes()));
    EXPECT_LT(cpu.workspace, std::int64_t{1} << 20);
  }
}

TEST(KernelSizes, DryRunsAndTheirPlansFollowTheKernels) {
  // gpt2's blocks at T = 1024: the cpu's T x T probabilities dominate the activations, the cuda's don't.
  const GptConfig gpt2{"gpt2", 12, 768, 12, 50257, 1024};
  const TokenDataset data = TokenDataset::embedded_corpus();
  DryRunSetup setup{gpt2, DType::bf16, {}, &data, StepSettings{8, 1024, 1, 0, 1.0}, RecomputePolicy::parse("none"), 0, {}, false};
  const DryRun cpu = dry_run_step(setup);
  setup.kernels = DeviceKind::cuda;
  const DryRun cuda = dry_run_step(setup);
  const std::int64_t probabilities = 12 * std::int64_t{8} * 12 * 1024 * 1024 * 2;  // L x B x NH x T x T bf16
  const std::int64_t log_sum_exps = 12 * std::int64_t{8} * 12 * 1024 * 4;
  const auto activations = [](const DryRun& run) {
    return run.statistics.category_requested_bytes[category_index(MemoryCategory::activations)].peak;
  };
  EXPECT_EQ(activations(cpu) - activations(cuda), probabilities - log_sum_exps);
  // A limit the cuda step fits without recompute is one the cpu's needs recompute for.
  const std::size_t limit = static_cast<std::size_t>(cuda.peak_reserved);
  setup.kernels = DeviceKind::cpu;
  EXPECT_NE(choose_recompute_policy(setup, limit).policy.name(), "none");
  setup.kernels = DeviceKind::cuda;
  EXPECT_EQ(choose_recompute_policy(setup, limit).policy.name(), "none");
}

TEST(KernelSizes, StandInForRefusesWhatItCannotHonour) {
  auto cpu = create_device(DeviceOptions{});
  EXPECT_THROW(ops::stand_in_for(*cpu, DeviceKind::cuda), std::logic_error);  // only meta stands in
  DeviceOptions options;
  options.kind = DeviceKind::meta;
  auto meta = create_device(options);
  EXPECT_THROW(ops::stand_in_for(*meta, DeviceKind::meta), std::invalid_argument);  // meta has no kernels of its own
  ops::stand_in_for(*meta, DeviceKind::cpu);
  ops::stand_in_for(*meta, DeviceKind::cpu);  // the same kind again is fine
  EXPECT_THROW(ops::stand_in_for(*meta, DeviceKind::cuda), std::logic_error);
  auto used = create_device(options);
  (void)ops::kernel_backend(*used);  // a first op takes the default, the cpu's sizes
  EXPECT_THROW(ops::stand_in_for(*used, DeviceKind::cuda), std::logic_error);
}

}  // namespace
}  // namespace ferry
