// The whole model on the cuda device against the cpu device: one micro-batch's loss and every parameter
// gradient (f32 and bf16), an AdamW step, recompute bitwise-equal to no recompute on the GPU too, and
// `ferry train --device cuda` (with and without ZeRO-Offload) giving the cpu's losses. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
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
constexpr float kLearningRate = 1e-2f;

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
  hyperparameters.learning_rate = kLearningRate;
  hyperparameters.weight_decay = 0.1f;
  AdamWOptimizer optimizer(model.parameters(), model.gradients(), hyperparameters);
  optimizer.step(kLearningRate, 1.0f);
  for (const NamedTensor& each : model.parameters().named()) run.parameters.push_back(copy_to_host_f32(*each.tensor));
  return run;
}

// How two devices' results are compared: the loss and every gradient within `tolerance` (twin_comparison.h's
// measure), and the parameters after one AdamW step. That step moves each parameter by lr g / (|g| + eps), a
// sign, so where the cpu's gradient is within `unresolved` of zero (relative to the tensor's largest) the two
// devices' summation orders pick the sign (the key bias's gradient is zero but for rounding): there the step
// is held to its bound (the devices differ by at most 2 lr), everywhere else to `tolerance`.
struct Tolerances {
  double tolerance;
  double unresolved;
};

// The worst errors seen go into the test's record (--gtest_output json), so a GPU run shows how much of
// each tolerance it used.
void expect_close(const ModelRun& gpu, const ModelRun& cpu, Tolerances bounds, const std::string& what) {
  EXPECT_NEAR(gpu.loss, cpu.loss, bounds.tolerance * std::abs(cpu.loss)) << what;
  ASSERT_EQ(gpu.gradients.size(), cpu.gradients.size());
  double worst_gradient = 0, worst_parameter = 0, worst_unresolved_step = 0;
  for (std::size_t i = 0; i < cpu.gradients.size(); ++i) {
    const double gradient_error = testing::max_relative_error(gpu.gradients[i], cpu.gradients[i]);
    worst_gradient = std::max(worst_gradient, gradient_error);
    EXPECT_LT(gradient_error, bounds.tolerance) << what << ": gradient " << i;
    const std::vector<float>& gradient = cpu.gradients[i];
    double largest = 0;
    for (const float value : gradient) largest = std::max(largest, static_cast<double>(std::abs(value)));
    std::vector<float> resolved_gpu, resolved_cpu;
    for (std::size_t j = 0; j < gradient.size(); ++j) {
      if (std::abs(gradient[j]) >= bounds.unresolved * largest) {
        resolved_gpu.push_back(gpu.parameters[i][j]);
        resolved_cpu.push_back(cpu.parameters[i][j]);
      } else {
        const float step_difference = std::abs(gpu.parameters[i][j] - cpu.parameters[i][j]);
        worst_unresolved_step = std::max(worst_unresolved_step, static_cast<double>(step_difference) / kLearningRate);
        EXPECT_LE(step_difference, 2.01f * kLearningRate) << what << ": parameter " << i << "[" << j << "]";
      }
    }
    const double parameter_error = testing::max_relative_error(resolved_gpu, resolved_cpu);
    worst_parameter = std::max(worst_parameter, parameter_error);
    EXPECT_LT(parameter_error, bounds.tolerance) << what << ": parameter " << i;
    EXPECT_FALSE(resolved_cpu.empty()) << what << ": parameter " << i << " has no gradient above the noise";
  }
  const double loss_error = std::abs(gpu.loss - cpu.loss) / std::abs(cpu.loss);
  std::printf("  %s: loss error %.3g, worst gradient error %.3g, worst resolved step error %.3g (tolerance %.3g), "
              "worst unresolved step difference %.3g lr (bound 2)\n",
              what.c_str(), loss_error, worst_gradient, worst_parameter, bounds.tolerance, worst_unresolved_step);
  std::string key = what.substr(0, what.find(" ("));  // "f32", "f32 with dropout", "bf16" as f32_with_dropout
  std::replace(key.begin(), key.end(), ' ', '_');
  ::testing::Test::RecordProperty(key + "_loss_error", std::to_string(loss_error));
  ::testing::Test::RecordProperty(key + "_worst_gradient_error", std::to_string(worst_gradient));
  ::testing::Test::RecordProperty(key + "_worst_step_error", std::to_string(worst_parameter));
  ::testing::Test::RecordProperty(key + "_worst_unresolved_step_lr", std::to_string(worst_unresolved_step));
}

#define FERRY_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no GPU on this machine"

TEST(CudaTraining, F32LossGradientsAndStepMatchTheCpuDevice) {
  FERRY_REQUIRE_GPU();
  // The kernels meet 1e-5 one by one; through two blocks and the head the whole model is held to 2e-5 (an
  // H200 gave at most 6.2e-6 on gradients and 6.4e-7 on the step, the emulation 6.7e-6: 3x margin), and
  // AdamW's step wherever the gradient stands 1e-3 of its tensor's largest above zero (100 times the noise).
  const Tolerances f32{2e-5, 1e-3};
  expect_close(train_one_step(DeviceKind::cuda, DType::f32, {}), train_one_step(DeviceKind::cpu, DType::f32, {}), f32, "f32");
  const GptDropout dropout{0.1f, 0.1f, 0.1f};
  expect_close(train_one_step(DeviceKind::cuda, DType::f32, {}, dropout), train_one_step(DeviceKind::cpu, DType::f32, {}, dropout), f32,
               "f32 with dropout (the same masks on both devices)");
}

TEST(CudaTraining, Bf16LossGradientsAndStepMatchTheCpuDevice) {
  FERRY_REQUIRE_GPU();
  // Activations round to bf16 at other places on the two devices (cuda's matmuls take and give bf16, the cpu's
  // run in f32: KernelSizes::matmul_takes_bf16), so gradients differ by a bf16 rounding or two of their
  // tensor's largest value: 2 x 2^-8 of it, 0.08 at twin_comparison.h's floor of a tenth (an H200 gave 0.052
  // with fp32 products, 0.057 with the TF32 products a 16-bit model takes); attention's bf16 products
  // (AttentionProducts::bf16) gave 0.0677 on the H200 and 0.0718 on the emulation (TF32 attention gave 0.072
  // and 0.0855), held to 0.1. The step is held where the
  // gradient stands 1e-2 of the largest above zero (a few such roundings); below that the H200 used the
  // whole 2 lr bound: noise-level gradients of opposite signs on the two devices.
  expect_close(train_one_step(DeviceKind::cuda, DType::bf16, {}), train_one_step(DeviceKind::cpu, DType::bf16, {}), Tolerances{1e-1, 1e-2},
               "bf16");
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
