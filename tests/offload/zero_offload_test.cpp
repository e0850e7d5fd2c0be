// ZeRO-Offload end to end on the cpu device: gradients streamed bucket by bucket to host memory equal
// the gradients a model holds whole (bitwise), the host adds the buckets in the order they came even
// though it adds them late (after their copies), the device then holds one bucket of gradients and no
// optimizer state, and training with the state in pinned host memory or on NVMe tracks AdamW on the
// device step for step (bitwise with one micro-batch and no clipping; within 1e-5 otherwise). An
// injected NVMe failure stops the step with the file named and the optimizer refuses to go on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <random>

#include "engine/train/training_step.h"
#include "models/gpt_model.h"
#include "tests/models/random_tokens.h"
#include "offload/host_gradients.h"
#include "offload/zero_offload_optimizer.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t B = 2, T = 6;

GptConfig config() { return GptConfig{"offload-test", 2, 16, 2, 13, 8}; }

std::string scratch_directory(const std::string& name) {
  const fs::path path = fs::path(::testing::TempDir()) / (name + "." + std::to_string(::getpid()));
  fs::remove_all(path);
  return path.string();
}

Tensor tokens(Device& device, std::uint64_t seed) { return testing::random_tokens(device, seed, B, T, 13); }

std::vector<float> flatten(const GptParameters& gradients) {
  std::vector<float> flat;
  for (const NamedTensor& each : gradients.named()) {
    const std::vector<float> values = copy_to_host_f32(*each.tensor);
    flat.insert(flat.end(), values.begin(), values.end());
  }
  return flat;
}

std::vector<std::int64_t> numels(const GptModel& model) {
  std::vector<std::int64_t> result;
  for (const NamedTensor& each : model.parameters().named()) result.push_back(each.tensor->numel());
  return result;
}

// One micro-batch with dropout, whole or streamed; the gradients flat on the host.
std::vector<float> micro_batch_gradients(GradientStorage storage, DType dtype, std::int64_t vocab_slice, std::int64_t loss_chunk,
                                        std::int64_t bucket_elements = 0) {
  auto device = create_device(DeviceOptions{});
  GptModel model(*device, config(), dtype, GptDropout{0.1f, 0.2f, 0.1f}, storage);
  model.set_vocab_slice(vocab_slice);
  model.set_gradient_bucket_elements(bucket_elements);
  model.set_loss_chunk(loss_chunk);
  initialize_gpt_parameters(model.parameters(), config(), 3);
  offload::HostGradients host(*device, numels(model), nullptr);
  if (storage == GradientStorage::streamed) model.set_gradient_sink(&host);
  model.zero_gradients();
  for (std::uint64_t micro = 0; micro < 2; ++micro) {  // two micro-batches accumulate
    model.train_micro_batch(tokens(*device, 1 + micro), tokens(*device, 2 + micro), MicroBatchKey{9, 4, micro}, 0.5f);
  }
  if (storage == GradientStorage::whole) return flatten(model.gradients());
  return {host.all().begin(), host.all().end()};
}

TEST(ZeroOffload, StreamedGradientsEqualWholeOnes) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (const auto& [slice, bucket] : {std::pair<std::int64_t, std::int64_t>{0, 0}, {4, 0}, {13, 0}, {0, 100}, {4, 7}}) {
      const std::vector<float> whole = micro_batch_gradients(GradientStorage::whole, dtype, slice, 0);
      const std::vector<float> streamed = micro_batch_gradients(GradientStorage::streamed, dtype, slice, 0, bucket);
      ASSERT_EQ(whole.size(), streamed.size());
      // Two micro-batches: the host adds the second bucket to the first, the device's GEMM adds
      // inside the product; the values agree to f32 rounding (and bitwise for one micro-batch below).
      for (std::size_t i = 0; i < whole.size(); ++i) {
        ASSERT_NEAR(streamed[i], whole[i], 1e-6f * (1.0f + std::fabs(whole[i])))
            << dtype_name(dtype) << " slice " << slice << " bucket " << bucket << " at " << i;
      }
    }
  }
}

TEST(ZeroOffload, OneMicroBatchStreamsBitwiseTheSameGradients) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    auto device = create_device(DeviceOptions{});
    auto gradients_of = [&](GradientStorage storage, std::int64_t bucket_elements) {
      GptModel model(*device, config(), dtype, GptDropout{0.1f, 0.2f, 0.1f}, storage);
      model.set_vocab_slice(5);
      model.set_gradient_bucket_elements(bucket_elements);
      initialize_gpt_parameters(model.parameters(), config(), 3);
      offload::HostGradients host(*device, numels(model), nullptr);
      model.set_gradient_sink(&host);
      model.zero_gradients();
      model.train_micro_batch(tokens(*device, 1), tokens(*device, 2), MicroBatchKey{9, 4, 0}, 1.0f);
      return storage == GradientStorage::whole ? flatten(model.gradients()) : std::vector<float>(host.all().begin(), host.all().end());
    };
    // Whole parameters per bucket. (Row slices of a weight are other GEMMs, whose blocking may round
    // differently: StreamedGradientsEqualWholeOnes holds them to f32 rounding.)
    EXPECT_EQ(gradients_of(GradientStorage::streamed, 0), gradients_of(GradientStorage::whole, 0)) << dtype_name(dtype);
  }
}

Tensor f32_tensor(Device& device, const Shape& shape, const std::vector<float>& values) {
  Tensor tensor = Tensor::empty(device, shape, DType::f32, MemoryCategory::gradients);
  copy_from_host_f32(tensor, values.data());
  return tensor;
}

TEST(ZeroOffload, HostGradientsAddBucketsInTheOrderTheyCame) {
  // Sums whose value depends on the order of f32 additions (1e8 + 1 - 1e8 != 1e8 - 1e8 + 1), handed
  // over as more buckets than there are staging slots: the deferred additions keep the order.
  auto device = create_device(DeviceOptions{});
  offload::HostGradients host(*device, {3, 4 * 2}, nullptr);  // a vector of 3, a table of 4 rows of 2
  const std::vector<std::vector<float>> pieces = {{1e8f, 1.0f, 0.5f}, {1.0f, 2.0f, 3.0f}, {-1e8f, 0.25f, -4.0f}, {7.0f, -1e8f, 1e8f}};
  std::vector<float> expected(3 + 8, 0.0f);
  for (const std::vector<float>& piece : pieces) {
    host.accumulate(0, 0, f32_tensor(*device, {3}, piece));
    for (std::size_t i = 0; i < 3; ++i) expected[i] += piece[i];
    EXPECT_LE(host.buckets_in_flight(), offload::HostGradients::kStagingSlots);
  }
  host.accumulate(0, 1, f32_tensor(*device, {2}, {1e8f, -1e8f}));
  expected[1] += 1e8f;
  expected[2] -= 1e8f;
  // Rows in the order given, a row id twice.
  Tensor ids = Tensor::empty(*device, {3}, DType::i32, MemoryCategory::activations);
  const std::vector<std::int32_t> id_values = {3, 0, 3};
  ids.copy_from_host(id_values.data());
  const std::vector<float> rows = {1e8f, 1.0f, 2.0f, 3.0f, -1e8f, 1.0f};
  host.accumulate_rows(1, ids, f32_tensor(*device, {3, 2}, rows));
  for (std::size_t r = 0; r < 3; ++r) {
    for (std::size_t c = 0; c < 2; ++c) expected[3 + static_cast<std::size_t>(id_values[r]) * 2 + c] += rows[r * 2 + c];
  }
  EXPECT_EQ(host.buckets_in_flight(), offload::HostGradients::kStagingSlots);  // the last buckets still wait
  const std::span<float> all = host.all();
  EXPECT_EQ(host.buckets_in_flight(), 0u);
  EXPECT_EQ(std::vector<float>(all.begin(), all.end()), expected);
  EXPECT_EQ(host.bytes_received(), (4 * 3 + 2 + 3 * 2) * 4 + 3 * 4);
  // A row id outside the table is refused when its bucket is added, naming the id; the bucket's good
  // rows before it are not added either.
  const std::vector<std::int32_t> bad = {1, 4};
  Tensor bad_id = Tensor::empty(*device, {2}, DType::i32, MemoryCategory::activations);
  bad_id.copy_from_host(bad.data());
  host.accumulate_rows(1, bad_id, f32_tensor(*device, {2, 2}, {1.0f, 1.0f, 1.0f, 1.0f}));
  EXPECT_THROW(
      try { host.all(); } catch (const std::out_of_range& error) {
        EXPECT_NE(std::string(error.what()).find("row id 4 outside the table of 4 rows"), std::string::npos) << error.what();
        throw;
      },
      std::out_of_range);
  EXPECT_EQ(host.buckets_in_flight(), 0u);
  const std::span<float> after = host.all();
  EXPECT_EQ(std::vector<float>(after.begin(), after.end()), expected);
  EXPECT_THROW(host.accumulate(0, 2, f32_tensor(*device, {2}, {1.0f, 1.0f})), std::invalid_argument);  // past the end
}

TEST(ZeroOffload, HostGradientsStageInSlotsThatGrowToTheirLargestPiece) {
  // Pinned host bytes, exactly: the f32 gradients, and per staging slot the largest piece it held
  // (slots alternate; a slot that grows gives its old buffer back before taking the new one).
  auto device = create_device(DeviceOptions{});
  PinnedHostAllocator pinned(PinnedHostAllocator::Options{-1, false});
  offload::HostGradients host(*device, {1000, 10}, &pinned);
  const auto staging = [&] { return pinned.statistics().category_allocated_bytes[category_index(MemoryCategory::staging)]; };
  for (std::int64_t count : {100, 300, 50, 200}) host.accumulate(0, 0, f32_tensor(*device, {count}, std::vector<float>(count, 1.0f)));
  EXPECT_EQ(staging().current, (100 + 300) * 4);  // slot 0: 100 then 50; slot 1: 300 then 200
  host.accumulate(0, 0, f32_tensor(*device, {500}, std::vector<float>(500, 1.0f)));
  EXPECT_EQ(staging().current, (500 + 300) * 4);
  EXPECT_EQ(staging().peak, (500 + 300) * 4);
  EXPECT_EQ(pinned.statistics().category_allocated_bytes[category_index(MemoryCategory::gradients)].current, 1010 * 4);
  EXPECT_EQ(host.of(0)[0], 5.0f);
  EXPECT_EQ(host.of(0)[250], 2.0f);  // the pieces of 300 and 500
  EXPECT_EQ(host.of(0)[499], 1.0f);
}

TEST(ZeroOffload, TheDeviceHoldsThreeBoundedGradientBucketsAndNoOptimizerState) {
  // gpt2's shape on meta: whole gradients are 4 bytes per parameter; streamed, a bucket is one parameter
  // (the largest: the MLP's [768, 3072] weights) or one vocabulary slice of the table; with a bound, row
  // slices of at most that many elements, the table's slices too. The device holds the bucket landing and
  // the two before it (their staging slots hold them until the host adds them, on every device kind).
  const GptConfig gpt2{"gpt2", 12, 768, 12, 50257, 1024};
  const TokenDataset data = TokenDataset::embedded_corpus();
  DryRunSetup setup{gpt2, DType::bf16, {}, &data, StepSettings{1, 64, 1, 0, 1.0}, RecomputePolicy::parse("none"), 0, {}, false};
  const DryRun whole = dry_run_step(setup);
  setup.offload_optimizer = true;
  const DryRun streamed = dry_run_step(setup);
  setup.gradient_bucket_elements = 1 << 20;
  const DryRun bounded = dry_run_step(setup);
  const auto largest = [](const DryRun& run, MemoryCategory category) { return run.statistics.category_allocated_bytes[category_index(category)].peak; };
  const std::int64_t C = 768;
  EXPECT_GE(largest(whole, MemoryCategory::gradients), gpt2.parameter_count() * 4);
  static_assert(offload::HostGradients::kStagingSlots == 2);
  const std::int64_t mlp_weight = 4 * C * C * 4;
  EXPECT_GT(largest(streamed, MemoryCategory::gradients), 2 * mlp_weight);  // both MLP weights held while a table slice lands
  EXPECT_LE(largest(streamed, MemoryCategory::gradients), 3 * mlp_weight);
  EXPECT_EQ(largest(bounded, MemoryCategory::gradients), 3 * ((1 << 20) / C * C * 4));  // 1365 rows of 768: the largest slice under 2^20
  for (const DryRun* run : {&streamed, &bounded}) {
    EXPECT_EQ(largest(*run, MemoryCategory::optimizer_states), 0);
    EXPECT_EQ(largest(*run, MemoryCategory::parameters), largest(whole, MemoryCategory::parameters));
    EXPECT_LT(run->peak_reserved, whole.peak_reserved / 3);
  }
  EXPECT_LT(bounded.peak_allocated, streamed.peak_allocated);
}

struct Trajectory {
  std::vector<double> losses;
  std::vector<float> parameters;
};

// `steps` optimizer steps of the tiny model on the embedded corpus (byte tokens).
Trajectory train(const std::string& mode, std::int64_t grad_accum, double grad_clip, std::int64_t steps = 3) {
  GptConfig shape = config();
  shape.vocab = 256;
  auto device = create_device(DeviceOptions{});
  const bool offloaded = mode != "none";
  GptModel model(*device, shape, DType::bf16, GptDropout{0.1f, 0.1f, 0.1f}, offloaded ? GradientStorage::streamed : GradientStorage::whole);
  model.set_vocab_slice(100);
  initialize_gpt_parameters(model.parameters(), shape, 5);
  const cpu::AdamWHyperparameters hyperparameters{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
  offload::ZeroOffloadSettings settings;
  settings.nvme_path = scratch_directory("trajectory");
  settings.sub_group_elements = 1000;  // several sub-groups, parameters split across them
  settings.buffer_count = 3;
  settings.chunk_bytes = 4096;
  settings.adam.threads = 2;
  std::unique_ptr<TrainingOptimizer> optimizer;
  if (offloaded) {
    settings.device = offload::parse_offload_device(mode);
    optimizer = make_offload_optimizer(model, hyperparameters, settings);
  } else {
    optimizer = make_device_optimizer(model, hyperparameters);
  }
  const TokenDataset data = TokenDataset::embedded_corpus();
  DataLoader loader(data, B, T, true, 7);
  const StepSettings step_settings{B, T, grad_accum, 11, grad_clip};
  Trajectory trajectory;
  for (std::int64_t step = 0; step < steps; ++step) {
    trajectory.losses.push_back(run_training_step(*device, model, *optimizer, loader, step_settings, step, 1e-2, {}).loss);
  }
  trajectory.parameters = flatten(model.parameters());
  fs::remove_all(settings.nvme_path);
  return trajectory;
}

TEST(ZeroOffload, TrainsBitwiseLikeDeviceAdamWWithOneMicroBatch) {
  const Trajectory reference = train("none", 1, 0.0);
  for (const char* mode : {"cpu", "nvme"}) {
    const Trajectory offloaded = train(mode, 1, 0.0);
    EXPECT_EQ(offloaded.losses, reference.losses) << mode;
    EXPECT_EQ(offloaded.parameters, reference.parameters) << mode;
  }
}

TEST(ZeroOffload, TracksDeviceAdamWWithAccumulationAndClipping) {
  const Trajectory reference = train("none", 2, 1.0, 4);
  for (const char* mode : {"cpu", "nvme"}) {
    const Trajectory offloaded = train(mode, 2, 1.0, 4);
    ASSERT_EQ(offloaded.losses.size(), reference.losses.size());
    for (std::size_t step = 0; step < reference.losses.size(); ++step) {
      EXPECT_NEAR(offloaded.losses[step], reference.losses[step], 1e-5 * std::fabs(reference.losses[step])) << mode << " step " << step;
    }
    EXPECT_NE(offloaded.losses.front(), offloaded.losses.back());  // it trained
  }
}

TEST(ZeroOffload, AnNvmeFailureStopsTheStepAndTheOptimizer) {
  auto device = create_device(DeviceOptions{});
  GptModel model(*device, config(), DType::bf16, {}, GradientStorage::streamed);
  initialize_gpt_parameters(model.parameters(), config(), 5);
  std::vector<offload::OffloadedParameter> parameters;
  for (const NamedTensor& each : model.parameters().named()) parameters.push_back({each.name, each.tensor, decays(*each.tensor)});
  offload::ZeroOffloadSettings settings;
  settings.device = offload::OffloadDevice::nvme;
  settings.nvme_path = scratch_directory("failure");
  settings.sub_group_elements = 500;
  settings.chunk_bytes = 4096;
  offload::ZeroOffloadOptimizer optimizer(*device, parameters, {}, settings);
  model.set_gradient_sink(&optimizer.gradients());
  optimizer.begin_step();
  model.train_micro_batch(tokens(*device, 1), tokens(*device, 2), MicroBatchKey{1, 0, 0}, 1.0f);
  optimizer.step(1e-3f, 1.0f);  // a good step
  std::vector<float> saved_master, saved_first, saved_second;  // what a checkpoint after step 1 holds
  optimizer.export_state(saved_master, saved_first, saved_second);
  const auto device_parameters = [&] {
    std::vector<float> values;
    for (const NamedTensor& each : model.parameters().named()) {
      const std::vector<float> part = copy_to_host_f32(*each.tensor);
      values.insert(values.end(), part.begin(), part.end());
    }
    return values;
  };
  const std::vector<float> before = device_parameters();

  int writes = 0;
  optimizer.set_nvme_fault_injector([&](offload::IoDirection direction, const std::string&, std::uint64_t, std::size_t) {
    if (direction == offload::IoDirection::write && ++writes == 2) return std::optional<offload::IoFault>(offload::IoFault{EIO, 0});
    return std::optional<offload::IoFault>();
  });
  optimizer.begin_step();
  model.train_micro_batch(tokens(*device, 1), tokens(*device, 2), MicroBatchKey{1, 1, 0}, 1.0f);
  try {
    optimizer.step(1e-3f, 1.0f);
    FAIL() << "an injected EIO went unnoticed";
  } catch (const offload::NvmeError& error) {
    EXPECT_NE(std::string(error.what()).find("optimizer_states.bin"), std::string::npos) << error.what();
    EXPECT_EQ(error.error_number(), EIO);
  }
  // The failed step changed neither the model nor the step count ...
  EXPECT_EQ(device_parameters(), before);
  EXPECT_EQ(optimizer.steps_taken(), 1);
  std::vector<float> master, first, second;
  EXPECT_THROW(optimizer.export_state(master, first, second), offload::NvmeError);  // no stale state handed out
  EXPECT_THROW(optimizer.step(1e-3f, 1.0f), offload::NvmeError);
  model.set_gradient_sink(nullptr);

  // ... and the run goes on from its last checkpoint: a fresh optimizer with the saved state takes the
  // step again and lands where an optimizer that never failed does.
  const auto step_two = [&](offload::ZeroOffloadOptimizer& fresh) {
    fresh.import_state(saved_master, saved_first, saved_second);
    fresh.set_steps_taken(1);
    model.set_gradient_sink(&fresh.gradients());
    fresh.begin_step();
    model.train_micro_batch(tokens(*device, 1), tokens(*device, 2), MicroBatchKey{1, 1, 0}, 1.0f);
    fresh.step(1e-3f, 1.0f);
    model.set_gradient_sink(nullptr);
    std::vector<float> result, unused_first, unused_second;
    fresh.export_state(result, unused_first, unused_second);
    return std::pair(result, device_parameters());
  };
  offload::ZeroOffloadSettings again = settings;
  again.nvme_path = scratch_directory("failure_resumed");
  offload::ZeroOffloadOptimizer resumed(*device, parameters, {}, again);
  const auto resumed_result = step_two(resumed);
  offload::ZeroOffloadSettings on_host = settings;
  on_host.device = offload::OffloadDevice::cpu;
  offload::ZeroOffloadOptimizer reference(*device, parameters, {}, on_host);
  EXPECT_EQ(step_two(reference), resumed_result);
  EXPECT_EQ(resumed.steps_taken(), 2);
  fs::remove_all(settings.nvme_path);
  fs::remove_all(again.nvme_path);
}

}  // namespace
}  // namespace ferry
