// The whole model on the cuda device against the cpu device: one micro-batch's loss and every parameter
// gradient (f32 and bf16), an AdamW step, recompute bitwise-equal to no recompute on the GPU too, and
// `ferry train --device cuda` (with and without ZeRO-Offload) giving the cpu's losses. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/train/trainer.h"
#include "engine/train/training_step.h"
#include "models/adamw_optimizer.h"
#include "models/gpt_model.h"
#include "schedule/recompute_policy.h"
#include "tests/cuda/twin_comparison.h"
#include "tests/models/random_tokens.h"
#include "tests/train/tiny_training.h"

namespace ferry {
namespace {

constexpr std::int64_t B = 2, T = 24, V = 97;

// Hidden 64 in 4 heads of 16: the fused attention's tiles see ragged sequence ends (T = 24).
GptConfig config() { return GptConfig{"cuda-training-test", 2, 64, 4, V, 32}; }

struct ModelRun {
  double loss = 0;
  std::vector<std::vector<float>> gradients;   // per parameter, in named() order
  std::vector<std::vector<float>> parameters;  // after one AdamW step
};

std::unique_ptr<Device> make(DeviceKind kind) {
  DeviceOptions options;
  options.kind = kind;
  return create_device(options);
}

ModelRun train_one_step(DeviceKind kind, DType dtype, const std::vector<ActivationKeep>& keeps, GptDropout dropout = {}) {
  const std::unique_ptr<Device> device = make(kind);
  GptModel model(*device, config(), dtype, dropout);
  initialize_gpt_parameters(model.parameters(), config(), 5);
  model.zero_gradients();
  ModelRun run;
  run.loss = model.train_micro_batch(testing::random_tokens(*device, 1, B, T, V), testing::random_tokens(*device, 2, B, T, V),
                                     MicroBatchKey{11, 1, 0}, 1.0f, keeps);
  for (const NamedTensor& each : model.gradients().named()) run.gradients.push_back(copy_to_host_f32(*each.tensor));
  AdamWHyperparameters hyperparameters;
  hyperparameters.learning_rate = 1e-2f;
  hyperparameters.weight_decay = 0.1f;
  AdamWOptimizer optimizer(model.parameters(), model.gradients(), hyperparameters);
  optimizer.step(1e-2f, 1.0f);
  for (const NamedTensor& each : model.parameters().named()) run.parameters.push_back(copy_to_host_f32(*each.tensor));
  return run;
}

void expect_close(const ModelRun& gpu, const ModelRun& cpu, double tolerance, const std::string& what) {
  EXPECT_NEAR(gpu.loss, cpu.loss, tolerance * std::abs(cpu.loss)) << what;
  ASSERT_EQ(gpu.gradients.size(), cpu.gradients.size());
  for (std::size_t i = 0; i < cpu.gradients.size(); ++i) {
    EXPECT_LT(testing::max_relative_error(gpu.gradients[i], cpu.gradients[i]), tolerance) << what << ": gradient " << i;
    EXPECT_LT(testing::max_relative_error(gpu.parameters[i], cpu.parameters[i]), tolerance) << what << ": parameter " << i;
  }
}

#define FERRY_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no GPU on this machine"

TEST(CudaTraining, F32LossGradientsAndStepMatchTheCpuDevice) {
  FERRY_REQUIRE_GPU();
  // The kernels meet 1e-5 one by one; through two blocks, the head and AdamW (whose first step moves every
  // parameter by about lr, sign(g)) the whole model is held to 1e-4.
  expect_close(train_one_step(DeviceKind::cuda, DType::f32, {}), train_one_step(DeviceKind::cpu, DType::f32, {}), 1e-4, "f32");
  const GptDropout dropout{0.1f, 0.1f, 0.1f};
  expect_close(train_one_step(DeviceKind::cuda, DType::f32, {}, dropout), train_one_step(DeviceKind::cpu, DType::f32, {}, dropout), 1e-4,
               "f32 with dropout (the same masks on both devices)");
}

TEST(CudaTraining, Bf16LossGradientsAndStepMatchTheCpuDevice) {
  FERRY_REQUIRE_GPU();
  expect_close(train_one_step(DeviceKind::cuda, DType::bf16, {}), train_one_step(DeviceKind::cpu, DType::bf16, {}), 1e-2, "bf16");
}

TEST(CudaTraining, EveryRecomputePolicyGivesBitwiseTheGradientsOfNone) {
  FERRY_REQUIRE_GPU();
  const GptDropout dropout{0.1f, 0.2f, 0.1f};
  for (DType dtype : {DType::f32, DType::bf16}) {
    const ModelRun reference = train_one_step(DeviceKind::cuda, dtype, {}, dropout);
    for (const char* policy : {"full", "selective", "every:2", "first:1"}) {
      const ModelRun run = train_one_step(DeviceKind::cuda, dtype, activation_keeps(RecomputePolicy::parse(policy), config().layers), dropout);
      EXPECT_EQ(run.loss, reference.loss) << policy;
      EXPECT_EQ(run.gradients, reference.gradients) << policy << " " << dtype_name(dtype);
    }
  }
}

TEST(CudaTraining, AttentionKeepsLogSumExpsNotProbabilities) {
  FERRY_REQUIRE_GPU();
  // The fused kernels' saved state is [B, NH, T] f32 whatever the activations' dtype; the cpu's the
  // [B, NH, T, T] probabilities.
  const std::unique_ptr<Device> gpu = make(DeviceKind::cuda);
  GptModel model(*gpu, config(), DType::bf16);
  initialize_gpt_parameters(model.parameters(), config(), 5);
  const Tensor input = model.embedding_forward(testing::random_tokens(*gpu, 1, B, T, V), cpu::RandomKey{});
  const BlockActivations kept = model.block_forward(0, input, cpu::RandomKey{}, ActivationKeep::all);
  EXPECT_EQ(kept.att.shape(), (Shape{B, config().heads, T}));
  EXPECT_EQ(kept.att.dtype(), DType::f32);
}

TrainOptions tiny_run(const std::string& device) {
  TrainOptions o = testing::tiny_training(2, 64, 4);
  o.seq = 32;
  o.device = device;
  return o;
}

std::vector<double> losses(const nlohmann::json& summary) { return testing::step_losses(summary); }

TEST(CudaTraining, TrainCommandGivesTheCpuLossesWithAndWithoutOffload) {
  FERRY_REQUIRE_GPU();
  for (const std::string offload : {"none", "cpu"}) {
    TrainOptions gpu = tiny_run("cuda"), host = tiny_run("cpu");
    gpu.offload_optimizer = host.offload_optimizer = offload;
    const std::vector<double> expected = losses(run_training(host));
    const nlohmann::json summary = run_training(gpu);
    const std::vector<double> actual = losses(summary);
    ASSERT_EQ(actual.size(), expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-4 * expected[i]) << offload << " step " << i + 1;
    // cuBLASLt's 32 MiB workspace is the allocator's (category workspace), so the tiny model's peak holds it.
    EXPECT_GE(summary["memory"]["peak_allocated"].get<double>(), 32.0 * 1024 * 1024) << offload;
  }
}

}  // namespace
}  // namespace ferry
