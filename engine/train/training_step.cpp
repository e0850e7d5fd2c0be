#include "engine/train/training_step.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/optim/data_parallel_optimizer.h"
#include "models/activation_memory.h"
#include "models/adamw_optimizer.h"
#include "models/kernel_backend.h"

namespace ferry {
namespace {

// Far beyond any model: a dry run measures, it does not enforce a limit.
constexpr std::size_t kDryRunCapacity = std::size_t{1} << 52;

}  // namespace

Tensor device_tokens(Device& device, const std::vector<std::int32_t>& values, std::int64_t batch, std::int64_t sequence,
                     const char* tag) {
  Tensor tensor = Tensor::empty(device, {batch, sequence}, DType::i32, MemoryCategory::activations, tag);
  tensor.copy_from_host(values.data());
  return tensor;
}

std::vector<ActivationKeep> activation_keeps(const RecomputePolicy& policy, std::int64_t layers) {
  std::vector<ActivationKeep> keeps;
  for (BlockRecompute block : policy.plan(layers)) {
    keeps.push_back(block == BlockRecompute::full        ? ActivationKeep::input_only
                    : block == BlockRecompute::selective ? ActivationKeep::selective
                                                         : ActivationKeep::all);
  }
  return keeps;
}

StepResult run_training_step(Device& device, GptModel& model, TrainingOptimizer& optimizer, DataLoader& loader,
                             const StepSettings& settings, std::int64_t step, double learning_rate,
                             const std::vector<ActivationKeep>& keeps, LossScaler* scaler) {
  optimizer.begin_step();
  std::vector<std::int32_t> inputs, targets;
  StepResult result;
  result.loss_scale = scaler != nullptr ? scaler->scale() : 1.0;
  const float dloss = static_cast<float>(result.loss_scale / static_cast<double>(settings.grad_accum));
  // Every rank reads the whole global batch, so the data position and shuffling stay those of one rank.
  const std::int64_t ranks = settings.data_parallel != nullptr ? settings.data_parallel->size() : 1;
  const std::int64_t rank = settings.data_parallel != nullptr ? settings.data_parallel->rank() : 0;
  for (std::int64_t global = 0; global < settings.grad_accum * ranks; ++global) {
    loader.next(inputs, targets);
    if (global / settings.grad_accum != rank) continue;
    const std::int64_t micro = global % settings.grad_accum;
    optimizer.begin_micro_batch(micro + 1 == settings.grad_accum);
    const Tensor input_tokens = device_tokens(device, inputs, settings.batch, settings.sequence, "tokens");
    const Tensor target_tokens = device_tokens(device, targets, settings.batch, settings.sequence, "targets");
    const MicroBatchKey key{settings.seed, static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(global)};
    result.loss += model.train_micro_batch(input_tokens, target_tokens, key, dloss, keeps);
  }
  optimizer.end_backward();
  result.loss /= static_cast<double>(settings.grad_accum);
  if (settings.data_parallel != nullptr) settings.data_parallel->all_reduce(&result.loss, 1, CommDataType::f64, ReduceOperation::average);
  if (!device.has_storage()) result.loss = std::nan("");  // a dry run computes no values
  check_loss(result, device.has_storage(), scaler, step);
  const double sum_of_squares = scaler != nullptr ? optimizer.unchecked_gradient_sum_of_squares(std::nullopt)
                                                  : optimizer.gradient_sum_of_squares(std::nullopt);
  return apply_optimizer_update(optimizer, result, sum_of_squares, scaler, step, learning_rate, settings.grad_clip);
}

void check_loss(const StepResult& result, bool values, const LossScaler* scaler, std::int64_t step) {
  if (values && !std::isfinite(result.loss) && scaler == nullptr) {
    throw std::runtime_error("the loss became " + std::to_string(result.loss) + " at step " + std::to_string(step + 1) +
                             "; lower --lr or enable --grad-clip (nothing was saved from this step)");
  }
}

StepResult apply_optimizer_update(TrainingOptimizer& optimizer, StepResult result, double sum_of_squares, LossScaler* scaler,
                                  std::int64_t step, double learning_rate, double grad_clip) {
  if (scaler == nullptr) {
    result.gradient_norm = std::sqrt(sum_of_squares);
    optimizer.step(static_cast<float>(learning_rate), clip_scale(result.gradient_norm, grad_clip));
    return result;
  }
  result.gradient_norm = std::sqrt(sum_of_squares) / result.loss_scale;
  const bool overflow = !std::isfinite(sum_of_squares) || !std::isfinite(result.loss);
  if (overflow && scaler->at_minimum()) {
    throw std::runtime_error("fp16: step " + std::to_string(step + 1) + " overflowed (loss " + std::to_string(result.loss) +
                             ") at the minimum loss scale " + std::to_string(scaler->scale()) +
                             "; the values overflow fp16 itself: train with --precision bf16, or lower --lr");
  }
  if (!scaler->update(overflow)) {
    result.skipped = true;
    return result;
  }
  const double unscale = 1.0 / result.loss_scale;
  optimizer.step(static_cast<float>(learning_rate), static_cast<float>(clip_scale(result.gradient_norm, grad_clip) * unscale));
  return result;
}

DryRun dry_run_step(const DryRunSetup& setup) {
  DeviceOptions options;
  options.kind = DeviceKind::meta;
  options.memory_limit = kDryRunCapacity;
  options.allocator_config = setup.allocator_config;
  options.meta_target = setup.kernels;
  const std::unique_ptr<Device> device = create_device(options);
  ops::stand_in_for(*device, setup.kernels);
  {
    const DryRunSetup::DataParallel& dp = setup.data_parallel;
    GptModel model(*device, setup.config, setup.dtype, setup.dropout,
                   setup.offload_optimizer || dp.active() ? GradientStorage::streamed : GradientStorage::whole, {},
                   dp.active() && dp.zero_stage == 3 ? ParameterResidence::provided : ParameterResidence::whole);
    model.set_loss_chunk(setup.loss_chunk);
    model.set_gradient_bucket_elements(setup.gradient_bucket_elements);
    model.set_weight_copy_elements(setup.weight_copy_elements);
    const std::unique_ptr<Communicator> group = make_dry_run_communicator(dp.rank, dp.size);
    const DataParallelSettings settings_dp{dp.zero_stage, setup.gradient_bucket_elements, dp.allgather_bucket_elements, dp.overlap, {},
                                           dp.tied_table, dp.gather,
                                           dp.offload_param ? std::optional(offload::ParameterOffloadSettings{}) : std::nullopt};
    const std::unique_ptr<TrainingOptimizer> optimizer =
        dp.active()               ? make_data_parallel_optimizer(model, {}, *group, settings_dp,
                                                                 setup.offload_optimizer ? std::optional(offload::ZeroOffloadSettings{}) : std::nullopt)
        : setup.offload_optimizer ? make_discarding_optimizer(model)
                                  : make_device_optimizer(model, {});
    DataLoader loader(*setup.data, setup.settings.batch, setup.settings.sequence, false, setup.settings.seed);
    StepSettings settings = setup.settings;
    settings.data_parallel = dp.active() ? group.get() : nullptr;
    run_training_step(*device, model, *optimizer, loader, settings, 0, 1e-3, activation_keeps(setup.policy, setup.config.layers));
  }
  DryRun result;
  result.statistics = device->allocator().statistics();
  result.peak_allocated = result.statistics.allocated_bytes.all().peak;
  result.peak_reserved = result.statistics.reserved_bytes.all().peak;
  return result;
}

double recompute_flops(const GptConfig& config, std::int64_t batch, std::int64_t sequence, const RecomputePolicy& policy) {
  double flops = 0;
  for (ActivationKeep keep : activation_keeps(policy, config.layers)) flops += block_recompute_flops(config, batch, sequence, keep);
  return flops;
}

PolicyChoice choose_recompute_policy(const GptConfig& config, std::int64_t batch, std::int64_t sequence, std::size_t memory_limit,
                                     const std::function<DryRun(const RecomputePolicy&)>& dry_run_of) {
  std::vector<std::pair<double, RecomputePolicy>> by_cost;  // stable: the candidates' order breaks ties
  for (const RecomputePolicy& candidate : recompute_candidates(config.layers)) {
    by_cost.emplace_back(recompute_flops(config, batch, sequence, candidate), candidate);
  }
  std::stable_sort(by_cost.begin(), by_cost.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  PolicyChoice smallest;
  smallest.dry_run.peak_reserved = std::numeric_limits<std::int64_t>::max();
  for (const auto& [flops, candidate] : by_cost) {
    const DryRun dry_run = dry_run_of(candidate);
    if (dry_run.peak_reserved <= static_cast<std::int64_t>(memory_limit)) return {candidate, dry_run, true};
    if (dry_run.peak_reserved < smallest.dry_run.peak_reserved) smallest = {candidate, dry_run, false};
  }
  return smallest;
}

PolicyChoice choose_recompute_policy(const DryRunSetup& setup, std::size_t memory_limit) {
  return choose_recompute_policy(setup.config, setup.settings.batch, setup.settings.sequence, memory_limit,
                                 [&](const RecomputePolicy& candidate) {
                                   DryRunSetup candidate_setup = setup;
                                   candidate_setup.policy = candidate;
                                   return dry_run_step(candidate_setup);
                                 });
}

}  // namespace ferry
