// The planner's step-time model: a plan's predicted step time on a cluster, stated by its parts so a
// user can see why one plan beats another: compute (FLOPs over the devices' sustained rate), the
// recompute's extra forward, the pipeline bubble, what of the data-parallel reductions and ZeRO 3's
// gathers backward cannot hide, the pipeline's activation transfers, the optimizer step (on the
// device, or ZeRO-Offload's host step and its transfers), ZeRO-Infinity's parameter copies and the fixed
// cost of each call (kernels per micro-batch, collectives per bucket, the cpu kernels' weight slices).
// The planner ranks plans by it and the out-of-memory advice prices each change by it: one model.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/plan/cluster.h"
#include "engine/train/training_plan.h"

namespace ferry {

// FLOPs of one token's forward through the whole model: the matmuls (2 per weight element: attention's
// 4h^2, the MLP's 8h^2, the tied head's vocab x h) and attention's scores and weighted sum (4 x seq x h
// a block, the causal half not skipped).
double forward_flops_per_token(const GptConfig& model, std::int64_t sequence);
// The same for the blocks' part a policy recomputes in backward: full blocks' forward again, selective
// blocks' attention scores.
double recompute_flops_per_token(const GptConfig& model, std::int64_t sequence, const RecomputePolicy& policy);

struct StepTimeEstimate {
  double compute = 0;         // the slowest rank's forward and backward, recompute included, over its micro-batches
  double recompute = 0;       // of which the recompute
  double bubble = 0;          // the pipeline's idle time (p - 1 micro-batch slots of 1F1B)
  double data_parallel = 0;   // reductions (and stage 1-2 gathers) backward does not hide
  double zero3_gathers = 0;   // ZeRO 3's parameter gathers compute does not hide
  double pipeline_transfers = 0;  // activations and their gradients between stages
  double optimizer = 0;       // the optimizer step (on the device, or offloaded with its transfers and NVMe traffic)
  double parameter_offload = 0;  // ZeRO-Infinity: each layer's slice copied from pinned host memory before its gather
  // Calls' fixed costs: every micro-batch's kernel launches (more micro-batches of fewer tokens cost more
  // at the same FLOPs), each gradient bucket's collective or copy to the host, each row slice of the cpu
  // kernels' f32 weight copies.
  double calls = 0;
  double total() const { return compute + bubble + data_parallel + zero3_gathers + pipeline_transfers + optimizer + parameter_offload + calls; }
  nlohmann::json to_json() const;
};

// Op calls of one micro-batch through one block (its forward makes ten: two LayerNorms, four matmuls,
// attention, GELU, two residual adds; its backward about twice that) and through the embedding, the
// final LayerNorm and the loss. Each costs the cluster's call_seconds whatever its size.
inline constexpr double kOpCallsPerBlock = 30;
inline constexpr double kOpCallsOutsideBlocks = 12;

// The model's FLOPs per step (forward and backward, no recompute: what MFU counts).
double model_flops_per_step(const TrainingPlan& plan);
StepTimeEstimate predict_step_time(const TrainingPlan& plan, const ClusterSpec& cluster);

}  // namespace ferry
