// The whole GPT model on the host: parameter gradients of train_micro_batch against finite differences
// of evaluate(), the dry-run promise (meta allocates exactly what cpu allocates), bf16 training next to
// f32, and dropout keyed by the micro-batch (reproducible, regenerated in backward, off in evaluate).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"
#include "models/gpt_model.h"
#include "models/gpt_parameters.h"
#include "models/kernels/cpu/compute_threads.h"
#include "tests/models/micro_batch_statistics.h"
#include "tests/models/tiny_gpt_config.h"

namespace ferry {
namespace {

constexpr std::int64_t kBatch = 2, kSequence = 5;

GptConfig tiny_config() { return testing::tiny_gpt_config(); }

std::vector<std::int32_t> random_tokens(std::uint64_t seed, std::int64_t vocab) {
  std::mt19937_64 generator(seed);
  std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(kBatch * kSequence));
  for (auto& token : tokens) token = pick(generator);
  return tokens;
}

Tensor token_tensor(Device& device, const std::vector<std::int32_t>& values) {
  Tensor tensor = Tensor::empty(device, {kBatch, kSequence}, DType::i32, MemoryCategory::activations, "tokens");
  tensor.copy_from_host(values.data());
  return tensor;
}

std::vector<float> to_host(const Tensor& tensor) {
  EXPECT_EQ(tensor.dtype(), DType::f32);
  std::vector<float> values(static_cast<std::size_t>(tensor.numel()));
  tensor.copy_to_host(values.data());
  return values;
}

const Tensor& named(const GptParameters& parameters, const std::string& name) {
  for (const NamedTensor& each : parameters.named()) {
    if (each.name == name) return *each.tensor;
  }
  throw std::invalid_argument("no parameter " + name);
}

// Every gradient, concatenated in named() order.
std::vector<float> all_gradients(const GptModel& model) {
  std::vector<float> result;
  for (const NamedTensor& each : model.gradients().named()) {
    const std::vector<float> values = to_host(*each.tensor);
    result.insert(result.end(), values.begin(), values.end());
  }
  return result;
}

// GPT-2's initialization, then weights scaled up and LayerNorm/bias parameters spread out, so that the
// gradients are large next to the finite-difference tolerance (at std 0.02 most are tiny).
void initialize_for_gradient_checks(const GptModel& model, std::uint64_t seed) {
  initialize_gpt_parameters(model.parameters(), model.config(), seed);
  std::mt19937_64 generator(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const NamedTensor& each : model.parameters().named()) {
    std::vector<float> values = to_host(*each.tensor);
    const bool is_bias = each.name.ends_with(".bias");
    const bool is_layernorm = each.name.find("ln_") != std::string::npos;
    for (float& value : values) {
      if (is_bias) {
        value = 0.1f * normal(generator);
      } else if (is_layernorm) {
        value = 1.0f + 0.2f * normal(generator);
      } else {
        value *= 15.0f;
      }
    }
    each.tensor->copy_from_host(values.data());
  }
}

struct Batch {
  Tensor tokens, targets;
};

Batch make_batch(Device& device, std::uint64_t seed, std::int64_t vocab) {
  return {token_tensor(device, random_tokens(seed, vocab)), token_tensor(device, random_tokens(seed + 1000, vocab))};
}

// Central difference of `loss` in element `index` of the f32 parameter `tensor`, with step h.
template <typename Loss>
double finite_difference(const Tensor& tensor, std::size_t index, float h, Loss&& loss) {
  std::vector<float> values = to_host(tensor);
  const float saved = values[index];
  const float up = saved + h;
  const float down = saved - h;
  values[index] = up;
  tensor.copy_from_host(values.data());
  const double plus = loss();
  values[index] = down;
  tensor.copy_from_host(values.data());
  const double minus = loss();
  values[index] = saved;
  tensor.copy_from_host(values.data());
  return (plus - minus) / (static_cast<double>(up) - static_cast<double>(down));
}

const std::vector<std::string> kCheckedParameters = {
    "wte.weight",          "wpe.weight",         "h.0.ln_1.weight", "h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias",
    "h.0.attn.c_proj.weight", "h.1.ln_2.bias",   "h.1.mlp.c_fc.weight", "h.1.mlp.c_fc.bias", "h.1.mlp.c_proj.weight",
    "ln_f.weight",         "ln_f.bias"};

// Checks five random elements of each checked parameter: analytic (the model's gradients) against
// central differences of loss(); returns how many elements had a clearly non-zero gradient.
template <typename Loss>
int check_parameter_gradients(GptModel& model, Loss&& loss, std::uint64_t seed) {
  constexpr float kStep = 1e-2f;
  constexpr double kAbsolute = 2e-3, kRelative = 2e-2;
  std::mt19937_64 generator(seed);
  int significant = 0;
  for (const std::string& name : kCheckedParameters) {
    const Tensor& parameter = named(model.parameters(), name);
    const std::vector<float> gradient = to_host(named(model.gradients(), name));
    std::uniform_int_distribution<std::size_t> pick(0, gradient.size() - 1);
    for (int sample = 0; sample < 5; ++sample) {
      const std::size_t index = pick(generator);
      const double analytic = gradient[index];
      const double numeric = finite_difference(parameter, index, kStep, loss);
      EXPECT_NEAR(numeric, analytic, kAbsolute + kRelative * std::abs(analytic)) << name << "[" << index << "]";
      if (std::abs(analytic) > 10 * kAbsolute) ++significant;
    }
  }
  return significant;
}

// tensor_at(i) is the tensor named() lists at index i, for the whole model and a pipeline stage's part.
TEST(GptParameters, TensorAtIsNamedsIndex) {
  DeviceOptions meta;
  meta.kind = DeviceKind::meta;
  const auto device = create_device(meta);
  for (const GptModelPart& part : {GptModelPart{}, GptModelPart::layers(1, 2, 2, false, true)}) {
    GptParameters parameters = GptParameters::allocate(*device, tiny_config(), DType::f32, MemoryCategory::parameters, "", part);
    const std::size_t whole = parameters.whole_model_names().size();
    std::size_t held = 0;
    for (const NamedTensor& each : parameters.named()) {
      EXPECT_EQ(&parameters.tensor_at(each.index), each.tensor) << each.name;
      ++held;
    }
    EXPECT_EQ(held, part.whole() ? whole : 1 + GptBlockParameters::kCount + 2);  // the tied table, h.1, ln_f
    if (!part.whole()) {
      EXPECT_FALSE(parameters.tensor_at(GptParameters::kWpeIndex).defined());  // held by the first stage
    }
    EXPECT_THROW(parameters.tensor_at(whole), std::out_of_range);
  }
}

TEST(GptModel, ParameterGradientsMatchFiniteDifferencesOfEvaluate) {
  auto device = create_device(DeviceOptions{});
  const GptConfig config = tiny_config();
  GptModel model(*device, config, DType::f32);
  initialize_for_gradient_checks(model, 1234);
  const Batch batch = make_batch(*device, 1, config.vocab);

  model.zero_gradients();
  const double train_loss = model.train_micro_batch(batch.tokens, batch.targets, MicroBatchKey{}, 1.0f);
  const double eval_loss = model.evaluate(batch.tokens, batch.targets);
  EXPECT_TRUE(std::isfinite(train_loss));
  EXPECT_NEAR(train_loss, eval_loss, 1e-6);
  EXPECT_GT(train_loss, 0.5);  // not a degenerate model

  const int significant = check_parameter_gradients(model, [&] { return model.evaluate(batch.tokens, batch.targets); }, 99);
  // The comparison is meaningful: most sampled gradients are far above the absolute tolerance.
  EXPECT_GE(significant, 30) << "of " << 5 * kCheckedParameters.size();
}

TEST(GptModel, GradientsAccumulateAndScaleWithDloss) {
  auto device = create_device(DeviceOptions{});
  const GptConfig config = tiny_config();
  GptModel model(*device, config, DType::f32);
  initialize_for_gradient_checks(model, 5);
  const Batch batch = make_batch(*device, 2, config.vocab);
  model.zero_gradients();
  const double loss = model.train_micro_batch(batch.tokens, batch.targets, MicroBatchKey{}, 1.0f);
  const std::vector<float> once = all_gradients(model);
  // Accumulates: a second call adds the same gradients again.
  EXPECT_EQ(model.train_micro_batch(batch.tokens, batch.targets, MicroBatchKey{}, 1.0f), loss);
  const std::vector<float> twice = all_gradients(model);
  ASSERT_EQ(once.size(), twice.size());
  for (std::size_t i = 0; i < once.size(); ++i) {
    ASSERT_NEAR(twice[i], 2.0f * once[i], 1e-5f * std::max(1.0f, std::abs(once[i]))) << i;
  }
  // dloss scales the gradients (a power of two: exactly), not the returned loss.
  model.zero_gradients();
  for (float value : all_gradients(model)) ASSERT_EQ(value, 0.0f);
  EXPECT_EQ(model.train_micro_batch(batch.tokens, batch.targets, MicroBatchKey{}, 2.0f), loss);
  const std::vector<float> doubled = all_gradients(model);
  for (std::size_t i = 0; i < once.size(); ++i) ASSERT_EQ(doubled[i], 2.0f * once[i]) << i;
}

// The dry-run promise: the meta device allocates exactly what the cpu device allocates.
void expect_meta_allocates_as_cpu(DType dtype, GptDropout dropout) {
  const GptConfig config = tiny_config();
  auto cpu = create_device(DeviceOptions{DeviceKind::cpu});
  auto meta = create_device(DeviceOptions{DeviceKind::meta});
  std::vector<AllocatorStatistics> statistics;
  for (Device* device : {cpu.get(), meta.get()}) {
    GptModel model(*device, config, dtype, dropout);
    initialize_gpt_parameters(model.parameters(), config, 3);
    const Batch batch = make_batch(*device, 3, config.vocab);
    model.train_micro_batch(batch.tokens, batch.targets, MicroBatchKey{1, 2, 3}, 1.0f);
    model.evaluate(batch.tokens, batch.targets);
    statistics.push_back(device->allocator().statistics());
  }
  const AllocatorStatistics& on_cpu = statistics[0];
  const AllocatorStatistics& on_meta = statistics[1];
  EXPECT_GT(on_cpu.allocated_bytes.all().peak, 0);
  EXPECT_EQ(on_meta.allocated_bytes.all().peak, on_cpu.allocated_bytes.all().peak);
  EXPECT_EQ(on_meta.allocated_bytes.all().current, on_cpu.allocated_bytes.all().current);
  for (MemoryCategory category : kAllMemoryCategories) {
    const std::size_t i = category_index(category);
    EXPECT_EQ(on_meta.category_allocated_bytes[i].peak, on_cpu.category_allocated_bytes[i].peak) << category_name(category);
    EXPECT_EQ(on_meta.category_allocated_at_peak[i], on_cpu.category_allocated_at_peak[i]) << category_name(category);
  }
  for (MemoryCategory category : {MemoryCategory::parameters, MemoryCategory::gradients, MemoryCategory::activations,
                                  MemoryCategory::workspace}) {
    EXPECT_GT(on_cpu.category_allocated_bytes[category_index(category)].peak, 0) << category_name(category);
  }
}

TEST(GptModel, MetaAllocatesExactlyAsCpuF32) { expect_meta_allocates_as_cpu(DType::f32, {}); }
TEST(GptModel, MetaAllocatesExactlyAsCpuBf16WithDropout) { expect_meta_allocates_as_cpu(DType::bf16, {0.1f, 0.1f, 0.1f}); }

TEST(GptModel, Bf16TrainsCloseToF32) {
  auto device = create_device(DeviceOptions{});
  const GptConfig config = tiny_config();
  GptModel f32(*device, config, DType::f32);
  GptModel bf16(*device, config, DType::bf16);
  // The same weights in both (rounded to bf16 in one), far enough from uniform that the loss depends on them.
  initialize_for_gradient_checks(f32, 42);
  const auto source = f32.parameters().named();
  const auto destination = bf16.parameters().named();
  for (std::size_t i = 0; i < source.size(); ++i) {
    const std::vector<float> values = to_host(*source[i].tensor);
    std::vector<std::uint16_t> bits(values.size());
    convert_f32_to_bf16(values.data(), bits.data(), values.size());
    destination[i].tensor->copy_from_host(bits.data());
  }
  EXPECT_EQ(bf16.parameters().wte.dtype(), DType::bf16);
  EXPECT_EQ(bf16.gradients().wte.dtype(), DType::f32);
  const Batch batch = make_batch(*device, 4, config.vocab);
  const double loss32 = f32.train_micro_batch(batch.tokens, batch.targets, MicroBatchKey{}, 1.0f);
  const double loss16 = bf16.train_micro_batch(batch.tokens, batch.targets, MicroBatchKey{}, 1.0f);
  ASSERT_TRUE(std::isfinite(loss16));
  EXPECT_NEAR(loss16, loss32, 0.02 * loss32);
  EXPECT_NEAR(bf16.evaluate(batch.tokens, batch.targets), loss16, 1e-6);
  // The gradients point the same way.
  const std::vector<float> g32 = all_gradients(f32), g16 = all_gradients(bf16);
  double dot = 0, norm32 = 0, norm16 = 0;
  for (std::size_t i = 0; i < g32.size(); ++i) {
    ASSERT_TRUE(std::isfinite(g16[i])) << i;
    dot += static_cast<double>(g32[i]) * g16[i];
    norm32 += static_cast<double>(g32[i]) * g32[i];
    norm16 += static_cast<double>(g16[i]) * g16[i];
  }
  EXPECT_GT(norm16, 0.0);
  EXPECT_GT(dot / std::sqrt(norm32 * norm16), 0.99);
}

TEST(GptModel, DropoutIsKeyedByTheMicroBatchAndOffInEvaluate) {
  auto device = create_device(DeviceOptions{});
  const GptConfig config = tiny_config();
  GptModel model(*device, config, DType::f32, GptDropout{0.1f, 0.1f, 0.1f});
  GptModel plain(*device, config, DType::f32);
  initialize_for_gradient_checks(model, 77);
  initialize_for_gradient_checks(plain, 77);
  const Batch batch = make_batch(*device, 5, config.vocab);
  const MicroBatchKey key{7, 3, 1};

  model.zero_gradients();
  const double loss1 = model.train_micro_batch(batch.tokens, batch.targets, key, 1.0f);
  const std::vector<float> first = all_gradients(model);
  model.zero_gradients();
  const double loss2 = model.train_micro_batch(batch.tokens, batch.targets, key, 1.0f);
  const std::vector<float> second = all_gradients(model);
  EXPECT_EQ(loss1, loss2);
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0) << "same key, different gradients";

  MicroBatchKey other = key;
  other.micro_batch = 2;
  model.zero_gradients();
  const double loss3 = model.train_micro_batch(batch.tokens, batch.targets, other, 1.0f);
  const std::vector<float> third = all_gradients(model);
  EXPECT_NE(loss3, loss1);
  EXPECT_NE(std::memcmp(first.data(), third.data(), first.size() * sizeof(float)), 0) << "another micro-batch, same mask";

  // Dropout did something in training, and nothing in evaluate.
  const double plain_loss = plain.train_micro_batch(batch.tokens, batch.targets, key, 1.0f);
  EXPECT_NE(plain_loss, loss1);
  EXPECT_EQ(model.evaluate(batch.tokens, batch.targets), plain.evaluate(batch.tokens, batch.targets));
  EXPECT_NEAR(plain.evaluate(batch.tokens, batch.targets), plain_loss, 1e-6);
}

// The whole-model version of the attention kernel's dropout check: the gradients of a training step
// with dropout are the derivatives of that step's loss (same key), so backward replays every mask.
TEST(GptModel, DropoutGradientsMatchFiniteDifferencesOfTheSameKey) {
  auto device = create_device(DeviceOptions{});
  const GptConfig config = tiny_config();
  GptModel model(*device, config, DType::f32, GptDropout{0.1f, 0.1f, 0.1f});
  initialize_for_gradient_checks(model, 2024);
  const Batch batch = make_batch(*device, 6, config.vocab);
  const MicroBatchKey key{11, 4, 2};
  model.zero_gradients();
  model.train_micro_batch(batch.tokens, batch.targets, key, 1.0f);
  // Gradients of the step are now fixed; later calls only accumulate into them, so take a copy.
  GptModel probe(*device, config, DType::f32, GptDropout{0.1f, 0.1f, 0.1f});
  initialize_for_gradient_checks(probe, 2024);
  const int significant = check_parameter_gradients(model, [&] {
    // Same parameters as `model` (the perturbation is applied to model's tensors), so copy them over.
    const auto source = model.parameters().named();
    const auto destination = probe.parameters().named();
    for (std::size_t i = 0; i < source.size(); ++i) destination[i].tensor->copy_from(*source[i].tensor);
    return probe.train_micro_batch(batch.tokens, batch.targets, key, 1.0f);
  }, 7);
  EXPECT_GE(significant, 30);
}

// A vocabulary of 2^20 makes the head compute logits in chunks of 8 rows, so the 10 rows of this
// micro-batch take two chunks; the gradients across the chunk boundary still match finite differences.
TEST(GptModel, ChunkedHeadGradientsMatchFiniteDifferences) {
  auto device = create_device(DeviceOptions{});
  GptConfig config = tiny_config();
  config.layers = 1;
  config.vocab = std::int64_t{1} << 20;
  GptModel model(*device, config, DType::f32);
  // Cheap deterministic parameters (16M normals would dominate the test's time).
  std::mt19937_64 generator(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const NamedTensor& each : model.parameters().named()) {
    std::vector<float> values(static_cast<std::size_t>(each.tensor->numel()));
    const bool is_bias = each.name.ends_with(".bias");
    const bool is_layernorm = each.name.find("ln_") != std::string::npos;
    std::uint64_t state = 12345;
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (each.name == "wte.weight") {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        values[i] = static_cast<float>(static_cast<std::int64_t>(state >> 40) - (std::int64_t{1} << 23)) * 0x1.0p-23f;
      } else if (is_bias) {
        values[i] = 0.1f * normal(generator);
      } else if (is_layernorm) {
        values[i] = 1.0f + 0.2f * normal(generator);
      } else {
        values[i] = 0.3f * normal(generator);
      }
    }
    each.tensor->copy_from_host(values.data());
  }
  std::vector<std::int32_t> inputs = random_tokens(8, 1000), targets = random_tokens(9, 1000);
  targets[9] = static_cast<std::int32_t>(config.vocab - 1);
  const Tensor tokens = token_tensor(*device, inputs), target_tensor = token_tensor(*device, targets);
  const double loss = model.train_micro_batch(tokens, target_tensor, MicroBatchKey{}, 1.0f);
  EXPECT_NEAR(model.evaluate(tokens, target_tensor), loss, 1e-6);
  // One directional derivative over ln_f (which gathers every row's gradient) and the wte row of the
  // last target (only the second chunk's logits touch it as a target): two evaluations of 2^20 logits.
  const std::vector<Tensor> parameters = {model.parameters().ln_f_weight, model.parameters().ln_f_bias,
                                          model.parameters().wte.narrow(0, config.vocab - 1, 1)};
  const std::vector<Tensor> gradients = {model.gradients().ln_f_weight, model.gradients().ln_f_bias,
                                         model.gradients().wte.narrow(0, config.vocab - 1, 1)};
  std::vector<std::vector<float>> saved, direction;
  double analytic = 0;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    saved.push_back(to_host(parameters[i]));
    const std::vector<float> gradient = to_host(gradients[i]);
    direction.emplace_back(gradient.size());
    for (std::size_t j = 0; j < gradient.size(); ++j) {
      direction[i][j] = normal(generator);
      analytic += static_cast<double>(direction[i][j]) * gradient[j];
    }
  }
  auto evaluate_at = [&](float h) {
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      std::vector<float> moved = saved[i];
      for (std::size_t j = 0; j < moved.size(); ++j) moved[j] += h * direction[i][j];
      parameters[i].copy_from_host(moved.data());
    }
    return model.evaluate(tokens, target_tensor);
  };
  constexpr float kStep = 1e-2f;
  const double numeric = (evaluate_at(kStep) - evaluate_at(-kStep)) / (2.0 * kStep);
  EXPECT_NEAR(numeric, analytic, 2e-3 + 2e-2 * std::abs(analytic));
  EXPECT_GT(std::abs(analytic), 0.05);
}

// --loss-chunk: one token per chunk up to all of them; the loss and every gradient equal the
// unchunked ones within f32 rounding, and the largest logits buffer is chunk x vocab.
TEST(GptModel, LossChunkChangesRoundingOnlyAndBoundsTheLogits) {
  auto device = create_device(DeviceOptions{});
  const GptConfig config = tiny_config();
  GptModel model(*device, config, DType::f32);
  initialize_for_gradient_checks(model, 21);
  const Batch batch = make_batch(*device, 22, config.vocab);
  const std::int64_t tokens = kBatch * kSequence;
  auto run = [&](std::int64_t chunk) {
    model.set_loss_chunk(chunk);
    model.zero_gradients();
    device->allocator().set_trace_entries(1 << 16);
    const double loss = model.train_micro_batch(batch.tokens, batch.targets, MicroBatchKey{}, 1.0f);
    const TagId logits = device->allocator().intern_tag("lm_head.logits");
    std::vector<std::size_t> logits_sizes;
    for (const TraceEvent& event : device->allocator().trace()) {
      if (event.action == TraceAction::alloc && event.tag == logits) logits_sizes.push_back(event.size);
    }
    const std::int64_t chunk_tokens = std::min(chunk, tokens);
    const auto chunk_bytes = static_cast<std::size_t>(chunk_tokens * config.vocab) * sizeof(float);
    EXPECT_EQ(static_cast<std::int64_t>(logits_sizes.size()), (tokens + chunk_tokens - 1) / chunk_tokens) << chunk;
    EXPECT_GE(*std::max_element(logits_sizes.begin(), logits_sizes.end()), chunk_bytes) << chunk;
    EXPECT_LT(*std::max_element(logits_sizes.begin(), logits_sizes.end()), chunk_bytes + 512) << chunk;
    return std::pair{loss, all_gradients(model)};
  };
  const auto [whole_loss, whole] = run(tokens);
  for (std::int64_t chunk : {std::int64_t{1}, std::int64_t{3}, tokens - 1, tokens + 5}) {
    const auto [loss, gradients] = run(chunk);
    EXPECT_NEAR(loss, whole_loss, 1e-6 * std::abs(whole_loss)) << chunk;
    ASSERT_EQ(gradients.size(), whole.size());
    for (std::size_t i = 0; i < whole.size(); ++i) EXPECT_NEAR(gradients[i], whole[i], 1e-6f + 1e-5f * std::abs(whole[i])) << chunk << " " << i;
    EXPECT_EQ(model.loss_chunk(tokens), std::min(chunk, tokens));
  }
  EXPECT_THROW(model.set_loss_chunk(-1), std::invalid_argument);
  model.set_loss_chunk(0);
  EXPECT_EQ(model.loss_chunk(tokens), tokens);  // 32 MiB of logits hold every token of this batch
}

TEST(GptModel, AutomaticLossChunkHoldsTheDeviceKindsLogitsBytes) {
  // GPT-2's vocabulary: 32 MiB of f32 logits are 166 tokens (cpu), 128 MiB 667 (cuda, where each chunk's
  // pass over the f32 table gradient bounds short chunks by bandwidth); meta chunks as the kind it stands in for.
  GptConfig config = tiny_config();
  config.vocab = 50257;
  for (const auto& [kernels, tokens] : {std::pair{DeviceKind::cpu, std::int64_t{166}}, std::pair{DeviceKind::cuda, std::int64_t{667}}}) {
    auto device = testing::gibibyte_device(DeviceKind::meta, kernels);
    const GptModel model(*device, config, DType::bf16);
    EXPECT_EQ(model.loss_chunk(std::int64_t{1} << 20), tokens) << device_kind_name(kernels);
    EXPECT_EQ(model.loss_chunk(100), 100) << "a micro-batch of fewer tokens is one chunk";
  }
}

// A step is deterministic on 2 threads (the other tests run on one), and agrees with the one-thread
// step to rounding (OpenBLAS may order a GEMM's sums differently on another thread count).
TEST(GptModelThreads, TwoThreadStepIsDeterministicAndMatchesOneThread) {
  auto device = create_device(DeviceOptions{});
  const GptConfig config = tiny_config();
  const Batch batch = make_batch(*device, 12, config.vocab);
  const int threads = cpu::compute_threads();
  std::vector<std::vector<float>> gradients;
  std::vector<double> losses;
  for (int count : {1, 2, 2}) {
    cpu::set_compute_threads(count);
    GptModel model(*device, config, DType::f32, GptDropout{0.1f, 0.1f, 0.1f});
    initialize_for_gradient_checks(model, 8);
    losses.push_back(model.train_micro_batch(batch.tokens, batch.targets, MicroBatchKey{1, 1, 1}, 1.0f));
    gradients.push_back(all_gradients(model));
  }
  cpu::set_compute_threads(threads);
  EXPECT_EQ(losses[1], losses[2]);
  ASSERT_EQ(gradients[1].size(), gradients[2].size());
  EXPECT_EQ(std::memcmp(gradients[1].data(), gradients[2].data(), gradients[1].size() * sizeof(float)), 0);
  EXPECT_NEAR(losses[0], losses[1], 1e-5);
  for (std::size_t i = 0; i < gradients[0].size(); ++i) {
    ASSERT_NEAR(gradients[0][i], gradients[1][i], 1e-5f * std::max(1.0f, std::abs(gradients[1][i]))) << i;
  }
}

}  // namespace
}  // namespace ferry
