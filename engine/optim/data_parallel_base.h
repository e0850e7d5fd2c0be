// DataParallelBase: what the optimizers of data-parallel ranks share (data_parallel_optimizer.cpp): the
// gradient runtime as the model's sink, stage 3's parameter provider over the same partition, the rank's
// views of its share of the parameters, the gather of updated parameters (stages 1, 2), and each stage's
// gradient, communication and parameter bytes as a formula of the plan.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/grid/data_parallel_gradients.h"
#include "engine/grid/partitioned_parameters.h"
#include "engine/optim/data_parallel_optimizer.h"
#include "engine/optim/training_optimizer.h"
#include "models/gpt_model.h"
#include "offload/parameter_offload.h"

namespace ferry {

class DataParallelBase : public TrainingOptimizer {
 public:
  // `partition_off_device`: stage 2's (and 3's) averaged partition goes to a sink (set by the subclass), not the device.
  DataParallelBase(GptModel& model, Communicator& dp, const DataParallelSettings& settings, bool partition_off_device = false);
  ~DataParallelBase() override;
  DataParallelBase(const DataParallelBase&) = delete;
  DataParallelBase& operator=(const DataParallelBase&) = delete;

  void begin_micro_batch(bool last) override { gradients_.begin_micro_batch(last); }
  void accumulate_whole_step() override {
    gradients_.accumulate_whole_step();
    whole_step_ = true;
  }
  // A pipeline stage's accumulated gradient, before the step's reductions (the tied table's sum).
  void read_gradient(std::size_t index, std::size_t start, std::span<float> values) override;
  void write_gradient(std::size_t index, std::size_t start, std::span<const float> values) override;
  nlohmann::json describe() const override;

 protected:
  Tensor accumulated_gradient(std::size_t index);
  // The most gradient, communication and (stage 3) parameter bytes this rank holds at once, as a formula
  // of its plan: the runtime's (DataParallelGradients::MemoryBound), the model's streamed pieces, the
  // all-gather's bucket of updated parameters (after the reductions, so the larger of the two
  // communication terms), and stage 3's partition + gathered working set.
  nlohmann::json memory_bound() const;
  nlohmann::json parameter_bound() const;
  // The rank's share of the state (partitions are cut to the parameters: empty where padding only).
  FlatShards state_range() const override { return gradients_.owned(); }
  // The flat elements this rank writes of a checkpoint: its share (ZeRO 0: the partition it would own).
  FlatShards shard_range() const { return settings_.zero_stage > 0 ? gradients_.owned() : gradients_.layout().shards(dp_.rank()); }
  // Before a step's first micro-batch: the gradients zeroed, the step's waits counted from here.
  void begin_runtime_step();
  // The step's reductions: those a pipeline step held back start now; then every one is waited for.
  void finish_reductions();
  // The rank's share of each parameter (in layout order, those it owns a piece of) as flat views of the
  // model's whole tensors, or of the stage-3 partition: where an update of the share is written. None
  // where the partition lives in a parameter home (parameter offload).
  std::vector<Tensor> owned_parameter_views() const;
  // The element counts of those shares.
  std::vector<std::int64_t> owned_numels() const;
  // Stage 3 with parameter offload: where the partition lives (null: on the device).
  ParameterHome* parameter_home() const { return parameter_offload_ ? &parameter_offload_->home() : nullptr; }
  // Before the share is updated: stage 3's gathered parameters (a prefetch left over) would be stale.
  void drop_gathered();
  // After the share was updated: stages 1 and 2 gather the other ranks' shares into the whole tensors;
  // stage 3 holds only its share and gathers nothing.
  void gather_updated_parameters();

  GptModel& model_;
  Communicator& dp_;
  DataParallelSettings settings_;
  DataParallelGradients gradients_;
  std::unique_ptr<offload::ParameterOffload> parameter_offload_;  // stage 3 with --offload-param
  std::unique_ptr<PartitionedParameters> provided_;  // stage 3: the model's parameter provider
  // Received pieces the partition's sink (ZeRO-Offload's host gradients) holds on the device beyond
  // those in flight, until it has copied them (its staging slots).
  std::int64_t sink_held_pieces_ = 0;
  bool whole_step_ = false;  // a pipeline step: the micro-batches accumulate, reductions wait for end_backward
};

// After backward at ZeRO 0 and 1: the rank's owned pieces of the averaged gradients to its host gradients.
void hand_owned_pieces(const DataParallelGradients& gradients, GradientSink& host);

}  // namespace ferry
