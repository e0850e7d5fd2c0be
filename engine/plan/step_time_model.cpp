#include "engine/plan/step_time_model.h"

#include <algorithm>
#include <cmath>

#include "engine/core/dtype.h"
#include "schedule/recompute_policy.h"

namespace ferry {
namespace {

double block_matmul_flops(const GptConfig& model) { return 2.0 * 12.0 * static_cast<double>(model.hidden) * static_cast<double>(model.hidden); }
double attention_flops(const GptConfig& model, std::int64_t sequence) { return 4.0 * static_cast<double>(sequence) * static_cast<double>(model.hidden); }
double head_flops(const GptConfig& model) { return 2.0 * static_cast<double>(model.vocab) * static_cast<double>(model.hidden); }

// A rank's share of the blocks (the pipeline splits them about evenly; the last stage adds the head).
double stage_blocks(const TrainingPlan& plan) { return static_cast<double>(plan.model.layers) / std::max(plan.grid.pp, 1); }

double ceil_div(double a, double b) { return std::ceil(a / std::max(b, 1.0)); }

// The calls a step makes, each at its fixed cost: op calls per micro-batch (a recomputed block's forward
// again), a collective or host copy per gradient bucket (each micro-batch's at ZeRO 2 and 3 and when
// offloaded, the step's last otherwise; without a bound one per parameter when offloaded on one rank),
// a gather per bucket of updated parameters (ZeRO 1 and 2), and on the cpu kernels each row slice of a
// 16-bit weight's f32 copy, in forward and in backward's input gradient.
double fixed_call_costs(const TrainingPlan& plan, const ClusterSpec& cluster, double psi) {
  const GptConfig& model = plan.model;
  const auto micro_batches = static_cast<double>(plan.micro_batches);
  const double blocks = stage_blocks(plan);
  // Recompute calls a full block's forward again (a third of its calls), a selective block's attention.
  double recomputed = 0;
  for (const BlockRecompute block : plan.recompute.plan(model.layers)) {
    recomputed += block == BlockRecompute::full ? kOpCallsPerBlock / 3 : block == BlockRecompute::selective ? 1.0 : 0.0;
  }
  const double ops = blocks * kOpCallsPerBlock + kOpCallsOutsideBlocks + recomputed / std::max(plan.grid.pp, 1);
  double seconds = micro_batches * ops * cluster.call_seconds;

  const bool offloaded = plan.offload_optimizer.has_value();
  const bool reduced = plan.grid.dp > 1;
  if (reduced || offloaded) {
    // Reductions fill buckets across parameters; one rank's offload streams each parameter's gradient
    // alone, in row slices of at most the bucket.
    const double tensors = blocks * 12 + 4;
    const double slices = plan.reduce_bucket_elements > 0 ? std::floor(psi / static_cast<double>(plan.reduce_bucket_elements)) : 0.0;
    const double buckets = reduced ? std::max(slices, 1.0) : tensors + slices;
    const double streams = plan.zero_stage >= 2 || offloaded ? micro_batches : 1.0;
    seconds += streams * buckets * cluster.collective_seconds;
  }
  if (reduced && (plan.zero_stage == 1 || plan.zero_stage == 2)) {
    const double gathers = plan.allgather_bucket_elements > 0 ? ceil_div(psi, static_cast<double>(plan.allgather_bucket_elements)) : 1.0;
    seconds += gathers * cluster.collective_seconds;
  }
  if (plan.kernels == DeviceKind::cpu && plan.precision != DType::f32) {
    // Four weights a block (c_attn 3h x h, c_proj h x h, c_fc 4h x h, mlp c_proj h x 4h), each copied twice a micro-batch.
    const double h = static_cast<double>(model.hidden);
    double slices = 0;
    for (const double elements : {3 * h * h, h * h, 4 * h * h, 4 * h * h}) {
      slices += plan.weight_copy_elements > 0 ? ceil_div(elements, static_cast<double>(plan.weight_copy_elements)) : 1.0;
    }
    seconds += micro_batches * 2 * blocks * slices * cluster.call_seconds;
  }
  return seconds;
}

}  // namespace

double forward_flops_per_token(const GptConfig& model, std::int64_t sequence) {
  return static_cast<double>(model.layers) * (block_matmul_flops(model) + attention_flops(model, sequence)) + head_flops(model);
}

double recompute_flops_per_token(const GptConfig& model, std::int64_t sequence, const RecomputePolicy& policy) {
  double flops = 0;
  for (const BlockRecompute block : policy.plan(model.layers)) {
    if (block == BlockRecompute::full) flops += block_matmul_flops(model) + attention_flops(model, sequence);
    if (block == BlockRecompute::selective) flops += attention_flops(model, sequence);
  }
  return flops;
}

double model_flops_per_step(const TrainingPlan& plan) {
  const double tokens = static_cast<double>(plan.global_batch() * plan.sequence);
  return 3.0 * forward_flops_per_token(plan.model, plan.sequence) * tokens;
}

nlohmann::json StepTimeEstimate::to_json() const {
  return {{"compute", compute}, {"recompute", recompute}, {"bubble", bubble}, {"data_parallel", data_parallel},
          {"zero3_gathers", zero3_gathers}, {"pipeline_transfers", pipeline_transfers}, {"optimizer", optimizer},
          {"parameter_offload", parameter_offload}, {"calls", calls}, {"total", total()}};
}

StepTimeEstimate predict_step_time(const TrainingPlan& plan, const ClusterSpec& cluster) {
  StepTimeEstimate estimate;
  const GptConfig& model = plan.model;
  const int dp = plan.grid.dp, pp = plan.grid.pp;
  const double rate = cluster.peak_flops * cluster.compute_efficiency;
  const double tokens = static_cast<double>(plan.micro_batch * plan.sequence);  // a micro-batch's
  const auto micro_batches = static_cast<double>(plan.micro_batches);
  // The slowest stage: its blocks, and the head on the last (the whole model without a pipeline).
  const double blocks = stage_blocks(plan);
  const double stage_forward = blocks * (block_matmul_flops(model) + attention_flops(model, plan.sequence)) + head_flops(model);
  const double stage_recompute = recompute_flops_per_token(model, plan.sequence, plan.recompute) / std::max(pp, 1);
  const double forward_seconds = tokens * stage_forward / rate;
  const double recompute_seconds = tokens * stage_recompute / rate;
  const double backward_seconds = 2 * forward_seconds;
  const double micro_batch_seconds = forward_seconds + backward_seconds + recompute_seconds;
  estimate.compute = micro_batches * micro_batch_seconds;
  estimate.recompute = micro_batches * recompute_seconds;
  estimate.bubble = (pp - 1) * micro_batch_seconds;  // 1F1B: p - 1 slots of the slowest stage

  // The rank's parameters: its stage's blocks, the tables with the first and the head with the last.
  const double psi = static_cast<double>(model.parameter_count()) / std::max(pp, 1);
  const auto parameter_bytes = static_cast<double>(dtype_size(plan.precision));
  if (dp > 1) {
    const double bandwidth = cluster.group_bandwidth(dp, plan.grid.tp);
    const double share = static_cast<double>(dp - 1) / dp;
    const double bucket = static_cast<double>(default_bucket_elements(model, plan.grid)) * 4 * share / bandwidth;  // the last, never hidden
    const double reduce_scatter = share * 4 * psi / bandwidth;
    const double gather_updates = plan.zero_stage == 1 || plan.zero_stage == 2 ? share * parameter_bytes * psi / bandwidth : 0;
    // A GPU's collectives run beside its kernels, so backward hides them up to its own length; cpu
    // ranks copy the bytes with the cores that compute, so nothing hides.
    const double hides = cluster.kind == DeviceKind::cpu ? 0.0 : backward_seconds;
    const double reductions = plan.zero_stage == 0 ? 2 * reduce_scatter : reduce_scatter;  // ZeRO 0 all-reduces
    if (plan.zero_stage < 2) {  // reduced during the step's last backward
      estimate.data_parallel = std::max(0.0, reductions - hides) + bucket + gather_updates;
    } else {  // 2 and 3 reduce every micro-batch's gradients during its backward
      estimate.data_parallel = micro_batches * std::max(0.0, reductions - hides) + bucket + gather_updates;
    }
    if (plan.zero_stage == 3) {
      // Every layer gathered for forward and again for backward (once when blocks stay gathered); the
      // next layer's gather hides behind this one's compute, the first of each pass does not (nor any
      // without prefetch).
      const double passes = plan.gather.reshard_after_forward ? 2 : 1;
      const double gathers = micro_batches * passes * share * parameter_bytes * psi / bandwidth;
      const double first_layer = micro_batches * 2 * share * parameter_bytes * (psi / std::max(blocks, 1.0)) / bandwidth;
      const double hides_gathers = cluster.kind == DeviceKind::cpu || !plan.gather.prefetch ? 0.0 : estimate.compute;
      estimate.zero3_gathers = std::max(0.0, gathers - hides_gathers) + first_layer;
    }
  }
  if (pp > 1) {
    // An activation forward and its gradient back across each boundary a micro-batch crosses.
    const double bytes = tokens * static_cast<double>(model.hidden) * parameter_bytes;
    estimate.pipeline_transfers = micro_batches * 2 * bytes / cluster.group_bandwidth(2, dp * plan.grid.tp);
  }
  // The optimizer: AdamW reads and writes each element's parameter, gradient, moments (and master copy).
  const double stepped = plan.zero_stage >= 1 && dp > 1 ? psi / dp : psi;
  const double state_bytes = parameter_bytes + 4 + 8 + (parameter_bytes == 4 ? 0 : 4);
  if (plan.offload_optimizer) {
    estimate.optimizer = 2 * stepped * (4 + 8 + 4) / cluster.host_memory_bandwidth + stepped * (4 + parameter_bytes) / cluster.host_link_bandwidth;
    if (*plan.offload_optimizer == offload::OffloadDevice::nvme) {
      // The state (moments, and master weights of 16-bit parameters) read and written back through the
      // node's NVMe, shared by its ranks, while CpuAdam updates the sub-group before: the slower of the two.
      const double nvme_state = stepped * (8 + (parameter_bytes == 4 ? 0 : 4));
      const double per_rank = cluster.nvme_bandwidth / std::max(1, std::min(cluster.devices_per_node, cluster.world()));
      const double host_step = 2 * stepped * (4 + 8 + 4) / cluster.host_memory_bandwidth;
      estimate.optimizer += std::max(0.0, 2 * nvme_state / per_rank - host_step);
    }
  } else {
    estimate.optimizer = 2 * stepped * state_bytes / cluster.device_memory_bandwidth;
  }
  if (plan.offload_param && plan.zero_stage == 3) {
    // Each pass over the layers copies the rank's slice of each from the home, on the compute stream
    // before the layer's gather: nothing hides it.
    const double passes = plan.gather.reshard_after_forward ? 2 : 1;
    estimate.parameter_offload = micro_batches * passes * (psi / dp) * parameter_bytes / cluster.host_link_bandwidth;
  }
  estimate.calls = fixed_call_costs(plan, cluster, psi);
  return estimate;
}

}  // namespace ferry
