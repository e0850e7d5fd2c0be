// The optimizers of data-parallel ranks (ZeRO stages 0-3 over engine/grid's runtime): AdamW on the
// device over the rank's share, or ZeRO-Offload proper, the rank's share stepped by CpuAdam with its
// fp32 state in pinned host memory or on NVMe (a directory per rank). Either way the model streams its
// gradients into DataParallelGradients; stages 1 and 2 gather the updated parameters from every rank,
// stage 3 updates its partition, from which the model's layers gather theirs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "engine/comm/communicator.h"
#include "engine/grid/data_parallel_gradients.h"
#include "engine/grid/gather_policy.h"
#include "engine/optim/training_optimizer.h"
#include "models/gpt_model.h"
#include "offload/parameter_offload.h"
#include "offload/zero_offload_optimizer.h"

namespace ferry {

struct DataParallelSettings {
  int zero_stage = 0;
  std::int64_t reduce_bucket_elements = 0;     // 0: one bucket
  std::int64_t allgather_bucket_elements = 0;  // 0: one bucket
  bool overlap_comm = true;
  // How the rank's buckets are cut: a pipeline rank's tied token table (the stages sum its gradient
  // before the dp group reduces it, so stage 2 holds it whole for the step) and where each of its stages
  // starts; the table as one bucket when the model hands its gradient over as rows.
  DataParallelGradients::BucketCuts cuts;
  // How the model hands over the tied table's gradient (deferred: slice by slice, each complete, cut
  // into buckets like any parameter; as computed: in parts, the table one bucket of its own).
  TiedTableGradient tied_table = TiedTableGradient::as_computed;
  // Stage 3: what stays gathered beyond the running layer (FSDP2's reshard_after_forward, DeepSpeed's
  // stage3_prefetch_bucket_size and stage3_max_live_parameters).
  GatherPolicy gather{};
  // Stage 3 with ZeRO-Infinity's parameter offload: where the rank's partition lives (its nvme_path the
  // rank's own); nothing: on the device.
  std::optional<offload::ParameterOffloadSettings> offload_param;
};

// Over a model built with GradientStorage::streamed (it becomes the model's gradient sink). With
// `offload`, the rank's share of the optimizer state lives where it says (its nvme_path is the rank's own).
// Stage 3: over a model built with ParameterResidence::provided, whose provider it becomes.
std::unique_ptr<TrainingOptimizer> make_data_parallel_optimizer(GptModel& model, const cpu::AdamWHyperparameters& hyperparameters,
                                                                Communicator& dp, const DataParallelSettings& settings,
                                                                const std::optional<offload::ZeroOffloadSettings>& offload = std::nullopt);

}  // namespace ferry
