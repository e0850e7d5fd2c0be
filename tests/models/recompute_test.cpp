// Activation recompute: every policy gives bitwise the gradients of no recompute (dropout on), a
// recompute with another RNG key does not (so the equality can fail), each block keeps exactly the
// bytes models/activation_memory.h says, and the meta device predicts the cpu peaks under every policy.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <algorithm>

#include "models/activation_memory.h"
#include "models/gpt_model.h"
#include "tests/models/micro_batch_statistics.h"
#include "tests/models/random_tokens.h"
#include "engine/data/token_data.h"
#include "engine/train/training_step.h"
#include "schedule/recompute_policy.h"

namespace ferry {
namespace {

constexpr std::int64_t B = 2, T = 6;

GptConfig config() { return GptConfig{"recompute-test", 3, 16, 2, 13, 8}; }

Tensor tokens(Device& device, std::uint64_t seed) { return testing::random_tokens(device, seed, B, T, 13); }

struct TrainingRun {
  double loss;
  std::vector<float> gradients;
};

TrainingRun train(const std::vector<ActivationKeep>& keeps, DType dtype = DType::f32) {
  auto device = create_device(DeviceOptions{});
  GptModel model(*device, config(), dtype, GptDropout{0.1f, 0.2f, 0.1f});
  initialize_gpt_parameters(model.parameters(), config(), 3);
  model.zero_gradients();
  TrainingRun run;
  run.loss = model.train_micro_batch(tokens(*device, 1), tokens(*device, 2), MicroBatchKey{9, 4, 1}, 1.0f, keeps);
  for (const NamedTensor& each : model.gradients().named()) {
    const std::vector<float> values = copy_to_host_f32(*each.tensor);
    run.gradients.insert(run.gradients.end(), values.begin(), values.end());
  }
  return run;
}

TEST(Recompute, EveryPolicyGivesBitwiseTheGradientsOfNone) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const TrainingRun reference = train({}, dtype);
    for (const char* name : {"full", "selective", "every:2", "every:1", "every:3", "first:1", "none"}) {
      const TrainingRun run = train(activation_keeps(RecomputePolicy::parse(name), config().layers), dtype);
      EXPECT_EQ(run.loss, reference.loss) << name;
      EXPECT_EQ(run.gradients, reference.gradients) << name << " " << dtype_name(dtype);
    }
  }
}

TEST(Recompute, ARecomputeWithAnotherKeyGivesOtherGradients) {
  // The oracle above can fail: recompute a block under a different RNG key and the dropout masks differ.
  auto device = create_device(DeviceOptions{});
  GptModel model(*device, config(), DType::f32, GptDropout{0.0f, 0.3f, 0.3f});
  initialize_gpt_parameters(model.parameters(), config(), 3);
  const Tensor input = model.embedding_forward(tokens(*device, 1), cpu::RandomKey{1});
  auto gradient_of_input = [&](cpu::RandomKey forward_key, cpu::RandomKey backward_key, ActivationKeep keep) {
    model.zero_gradients();
    BlockActivations activations = model.block_forward(0, input, forward_key, keep);
    Tensor output_gradient = Tensor::empty(*device, input.shape(), DType::f32, MemoryCategory::workspace);
    std::vector<float> ones(static_cast<std::size_t>(input.numel()), 1.0f);
    output_gradient.copy_from_host(ones.data());
    return copy_to_host_f32(model.block_backward(0, std::move(activations), output_gradient, backward_key));
  };
  const cpu::RandomKey key{77}, other{78};
  EXPECT_EQ(gradient_of_input(key, key, ActivationKeep::input_only), gradient_of_input(key, key, ActivationKeep::all));
  EXPECT_NE(gradient_of_input(key, other, ActivationKeep::input_only), gradient_of_input(key, key, ActivationKeep::all));
  EXPECT_NE(gradient_of_input(key, other, ActivationKeep::selective), gradient_of_input(key, key, ActivationKeep::all));
}

TEST(Recompute, EachBlockKeepsExactlyTheBytesOfTheFormula) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (ActivationKeep keep : {ActivationKeep::all, ActivationKeep::selective, ActivationKeep::input_only}) {
      auto device = create_device(DeviceOptions{});
      GptModel model(*device, config(), dtype);
      const Tensor input = model.embedding_forward(tokens(*device, 1), cpu::RandomKey{});
      auto activation_bytes = [&] {
        return device->allocator().statistics().category_requested_bytes[category_index(MemoryCategory::activations)].current;
      };
      const std::int64_t before = activation_bytes();
      const BlockActivations kept = model.block_forward(1, input, cpu::RandomKey{}, keep);
      EXPECT_EQ(activation_bytes() - before,
                block_activation_bytes(config(), B, T, static_cast<std::int64_t>(dtype_size(dtype)), keep))
          << dtype_name(dtype) << " keep " << static_cast<int>(keep);
    }
  }
}

TEST(Recompute, MetaPredictsTheCpuPeaksUnderEveryPolicy) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
  for (const char* name : {"none", "full", "selective", "every:2"}) {
    std::int64_t peaks[2][2] = {};
    int index = 0;
    for (DeviceKind kind : {DeviceKind::cpu, DeviceKind::meta}) {
      auto device = testing::gibibyte_device(kind);
      const AllocatorStatistics stats = testing::micro_batch_statistics(
          *device, config(), dtype, GptDropout{0.1f, 0.1f, 0.1f}, activation_keeps(RecomputePolicy::parse(name), config().layers), B, T);
      peaks[index][0] = stats.allocated_bytes.all().peak;
      peaks[index][1] = stats.reserved_bytes.all().peak;
      ++index;
    }
    EXPECT_EQ(peaks[0][0], peaks[1][0]) << name << " " << dtype_name(dtype);
    EXPECT_EQ(peaks[0][1], peaks[1][1]) << name << " " << dtype_name(dtype);
  }
}

TEST(Recompute, PoliciesParseAndPlan) {
  EXPECT_EQ(RecomputePolicy::parse("every:2").plan(5),
            (std::vector<BlockRecompute>{BlockRecompute::none, BlockRecompute::full, BlockRecompute::none, BlockRecompute::full,
                                         BlockRecompute::none}));
  EXPECT_EQ(RecomputePolicy::parse("first:2").plan(4),
            (std::vector<BlockRecompute>{BlockRecompute::full, BlockRecompute::full, BlockRecompute::none, BlockRecompute::none}));
  EXPECT_EQ(RecomputePolicy::parse("first:2").name(), "first:2");
  EXPECT_THROW(RecomputePolicy::parse("first:0"), std::invalid_argument);
  EXPECT_EQ(RecomputePolicy::parse("selective").name(), "selective");
  EXPECT_THROW(RecomputePolicy::parse("every:0"), std::invalid_argument);
  EXPECT_THROW(RecomputePolicy::parse("partial"), std::invalid_argument);
  EXPECT_THROW(RecomputePolicy::parse("auto").plan(2), std::logic_error);
  const auto candidates = recompute_candidates(4);
  std::vector<std::string> names;
  for (const RecomputePolicy& candidate : candidates) names.push_back(candidate.name());
  EXPECT_EQ(names, (std::vector<std::string>{"none", "selective", "first:1", "first:2", "first:3", "full"}));
  names.clear();
  for (const RecomputePolicy& each : recompute_overview(48)) names.push_back(each.name());
  EXPECT_EQ(names, (std::vector<std::string>{"none", "selective", "first:12", "first:24", "first:36", "full"}));
}

// --checkpointing auto takes the least recomputed FLOPs that fits: at every limit between no recompute
// and full recompute, no policy that fits (first:N, every:K, selective, ...) recomputes fewer FLOPs
// than the chosen one; and the chosen one fits.
TEST(Recompute, AutoTakesTheLeastRecomputedFlopsThatFits) {
  const GptConfig shape{"auto-test", 8, 64, 4, 64, 64};
  const TokenDataset data = TokenDataset::embedded_corpus();
  DryRunSetup setup{shape, DType::f32, {}, &data, StepSettings{2, 64, 1, 0, 1.0}, {}, 0, AllocatorConfig{}};
  std::vector<std::pair<std::string, DryRun>> all;
  for (const char* name : {"none", "selective", "full", "every:1", "every:2", "every:3", "every:4", "every:5", "every:6", "every:7",
                           "every:8", "first:1", "first:2", "first:3", "first:4", "first:5", "first:6", "first:7"}) {
    setup.policy = RecomputePolicy::parse(name);
    all.emplace_back(name, dry_run_step(setup));
  }
  const auto flops = [&](const std::string& name) { return recompute_flops(shape, 2, 64, RecomputePolicy::parse(name)); };
  const std::int64_t none_peak = all.front().second.peak_reserved, full_peak = all[2].second.peak_reserved;
  ASSERT_LT(full_peak, none_peak);
  int every_beaten = 0;
  for (std::int64_t limit = full_peak; limit <= none_peak; limit += (none_peak - full_peak) / 40) {
    const PolicyChoice choice = choose_recompute_policy(setup, static_cast<std::size_t>(limit));
    ASSERT_TRUE(choice.fits) << limit;
    EXPECT_LE(choice.dry_run.peak_reserved, limit);
    for (const auto& [name, dry_run] : all) {
      if (dry_run.peak_reserved <= limit) {
        EXPECT_LE(flops(choice.policy.name()), flops(name)) << "limit " << limit << ": " << name;
      }
    }
    // What the choice among every:K alone would have cost at this limit.
    for (std::int64_t every = 8; every >= 1; --every) {
      const std::string name = "every:" + std::to_string(every);
      const auto found = std::find_if(all.begin(), all.end(), [&](const auto& each) { return each.first == name; });
      if (found->second.peak_reserved <= limit) {
        every_beaten += flops(choice.policy.name()) < flops(name) ? 1 : 0;
        break;
      }
    }
  }
  EXPECT_GT(every_beaten, 0);  // first:N saves what every:K does with fewer blocks recomputed somewhere in the sweep
}

// Activation gradients live in the compute dtype, as autocast keeps them: a bf16 or fp16 step's
// activation-gradient bytes (their own category) are exactly half an f32 step's, under every policy;
// parameter gradients stay f32 (the same bytes).
TEST(Recompute, ActivationGradientBytesHalveInSixteenBitSteps) {
  const GptConfig shape{"half-gradients", 4, 64, 4, 256, 64};
  const TokenDataset data = TokenDataset::embedded_corpus();
  for (const char* policy : {"none", "selective", "full"}) {
    DryRunSetup setup{shape, DType::f32, {0.1f, 0.1f, 0.1f}, &data, StepSettings{2, 64, 1, 0, 1.0}, RecomputePolicy::parse(policy), 0,
                      AllocatorConfig{}};
    const auto peak_of = [&](DType dtype, MemoryCategory category) {
      setup.dtype = dtype;
      return dry_run_step(setup).statistics.category_requested_bytes[category_index(category)].peak;
    };
    const std::int64_t f32 = peak_of(DType::f32, MemoryCategory::activation_gradients);
    EXPECT_GT(f32, 0) << policy;
    EXPECT_EQ(peak_of(DType::bf16, MemoryCategory::activation_gradients) * 2, f32) << policy;
    EXPECT_EQ(peak_of(DType::f16, MemoryCategory::activation_gradients) * 2, f32) << policy;
    EXPECT_EQ(peak_of(DType::bf16, MemoryCategory::gradients), peak_of(DType::f32, MemoryCategory::gradients)) << policy;
  }
}

}  // namespace
}  // namespace ferry
