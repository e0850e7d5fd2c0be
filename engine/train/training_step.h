// One optimizer step (grad-accum micro-batches through the model with a recompute plan, global-norm
// clipping, AdamW) and the dry run built on it: the same step on a meta device, which makes the same
// allocations without memory or compute. The auto recompute policy is chosen by dry runs.
#pragma once

#include <functional>

#include <cstdint>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/device.h"
#include "engine/data/token_data.h"
#include "engine/grid/gather_policy.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/training_optimizer.h"
#include "models/gpt_model.h"
#include "schedule/recompute_policy.h"

namespace ferry {

struct StepSettings {
  std::int64_t batch = 1;
  std::int64_t sequence = 1;
  std::int64_t grad_accum = 1;  // micro-batches per step on this rank
  std::uint64_t seed = 0;
  double grad_clip = 0;
  // Data parallelism: of every step's grad_accum x dp micro-batches, rank r of this group takes
  // [r x grad_accum, (r + 1) x grad_accum), and the loss is averaged over the group (null: one rank).
  Communicator* data_parallel = nullptr;
};

struct StepResult {
  double loss = 0;  // mean over the step's micro-batches (NaN on meta)
  double gradient_norm = 0;  // of the unscaled gradients (inf or NaN on a skipped step)
  double loss_scale = 1;     // the scale this step's backward ran with
  bool skipped = false;      // fp16 overflow: the optimizer did not step
};

// Token ids [batch, sequence] as an i32 tensor on the device (category activations).
Tensor device_tokens(Device& device, const std::vector<std::int32_t>& values, std::int64_t batch, std::int64_t sequence,
                     const char* tag);

// The model's per-block keep list for a recompute plan.
std::vector<ActivationKeep> activation_keeps(const RecomputePolicy& policy, std::int64_t layers);

// With a loss scaler (fp16), the backward runs on the loss times its scale, gradients are unscaled in
// the optimizer step, and a step whose gradients overflowed is skipped.
StepResult run_training_step(Device& device, GptModel& model, TrainingOptimizer& optimizer, DataLoader& loader,
                             const StepSettings& settings, std::int64_t step, double learning_rate,
                             const std::vector<ActivationKeep>& keeps, LossScaler* scaler = nullptr);

// Throws, naming the step, when a step without loss scaling computed a loss that is not finite.
void check_loss(const StepResult& result, bool values, const LossScaler* scaler, std::int64_t step);

// The end of a step whose gradients are complete, given their (scaled) global sum of squares: without a
// scaler, clipping and the update; with one (fp16), an overflow lowers the scale and skips the update.
// `result` carries the loss and the scale the backward ran with.
StepResult apply_optimizer_update(TrainingOptimizer& optimizer, StepResult result, double sum_of_squares, LossScaler* scaler,
                                  std::int64_t step, double learning_rate, double grad_clip);

struct DryRun {
  std::int64_t peak_allocated = 0;
  std::int64_t peak_reserved = 0;
  AllocatorStatistics statistics;
};

// Everything a dry run of one training step depends on.
struct DryRunSetup {
  GptConfig config;
  DType dtype = DType::f32;
  GptDropout dropout;
  const TokenDataset* data = nullptr;
  StepSettings settings;
  RecomputePolicy policy;
  std::int64_t loss_chunk = 0;
  AllocatorConfig allocator_config;
  bool offload_optimizer = false;  // ZeRO-Offload: gradients stream off the device, no optimizer state on it
  DeviceKind kernels = DeviceKind::cpu;  // whose kernels' allocations the meta device makes (cpu or cuda)
  std::int64_t gradient_bucket_elements = 0;  // offload: streamed gradients' bucket bound (0: whole parameters)
  std::int64_t weight_copy_elements = 0;      // 16-bit weights' f32 copies for matmuls in slices of at most this (0: whole)
  // Data parallelism: this rank of a dp group of `size` with ZeRO `zero_stage` (size 1 and stage 0: none);
  // its collectives allocate their buffers and move nothing. Reduce buckets: gradient_bucket_elements.
  struct DataParallel {
    int rank = 0;
    int size = 1;
    int zero_stage = 0;
    std::int64_t allgather_bucket_elements = 0;
    bool overlap = true;
    TiedTableGradient tied_table = TiedTableGradient::as_computed;
    GatherPolicy gather{};              // ZeRO 3
    bool offload_param = false;         // ZeRO 3's partition off the device
    // The data-parallel runtime runs: more than one rank, or ZeRO-Infinity on one (its partition whole).
    bool active() const { return size > 1 || offload_param; }
  };
  DataParallel data_parallel{};
};

// One training step of the setup on a meta device: the allocations a real step makes on a device of
// kind setup.kernels, no compute.
DryRun dry_run_step(const DryRunSetup& setup);

struct PolicyChoice {
  RecomputePolicy policy;
  DryRun dry_run;
  bool fits = false;
};

// Forward FLOPs a step's backward recomputes per micro-batch under the policy (models' per-block formula).
double recompute_flops(const GptConfig& config, std::int64_t batch, std::int64_t sequence, const RecomputePolicy& policy);

// Of recompute_candidates, the one with the least recomputed FLOPs whose dry-run peak reserved fits
// `memory_limit` (ties: fewer recomputed blocks); when none fits, the one with the smallest peak and
// fits = false. (setup.policy is not used.)
PolicyChoice choose_recompute_policy(const DryRunSetup& setup, std::size_t memory_limit);
// The same choice over any measure of a candidate (a pipeline measures its fullest stage).
PolicyChoice choose_recompute_policy(const GptConfig& config, std::int64_t batch, std::int64_t sequence, std::size_t memory_limit,
                                     const std::function<DryRun(const RecomputePolicy&)>& dry_run_of);

}  // namespace ferry
