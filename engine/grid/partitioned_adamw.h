// PartitionedAdamW: AdamW over one data-parallel rank's share of the flat parameter space (ZeRO stages
// 1 to 3: its partition; stage 0: everything), with f32 master weights (16-bit parameters) and both
// moments for that share only. It updates the share's parameter values where the caller keeps them (views
// of the model's whole tensors, or stage 3's partition); gathering the other ranks' shares is the
// caller's. The global gradient norm and the fp16 overflow check are reduced over the group, so every
// rank decides alike.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/adamw_hyperparameters.h"
#include "engine/core/tensor.h"
#include "engine/grid/data_parallel_gradients.h"
#include "models/gpt_parameters.h"

namespace ferry {

class PartitionedAdamW {
 public:
  // `parameters` in the order `gradients` was built with, of `dtype`; `owned_views`: the rank's elements of
  // each parameter it owns a piece of, in that order (flat views on `device`).
  PartitionedAdamW(Device& device, const std::vector<ParameterSpec>& parameters, DType dtype, std::vector<Tensor> owned_views,
                   DataParallelGradients& gradients, Communicator& dp, const AdamWHyperparameters& hyperparameters);

  // The sum of squares of the averaged gradients over the whole model (every rank gets the same; inf or
  // NaN when any rank's share overflowed), leaving out model parameter `excluded` (NamedTensor::index: a
  // pipeline stage's duplicate of the tied table) when given. Call after gradients.finish_step().
  double gradient_sum_of_squares(std::optional<std::size_t> excluded = std::nullopt);
  // One AdamW update of this rank's share.
  void step(float learning_rate, float gradient_scale);
  std::int64_t steps_taken() const { return steps_; }
  void set_steps_taken(std::int64_t steps) { steps_ = steps; }

  // Flat elements `shard` (within this rank's share) of the master weights and moments, each
  // [shard.size()] f32 end to end, without communication: what the rank writes of a checkpoint.
  void export_shard(const FlatShards& shard, std::vector<float>& master, std::vector<float>& first_moment, std::vector<float>& second_moment);
  // The same into buffers of [window.size()] f32 each.
  void export_window(const FlatShards& window, float* master, float* first_moment, float* second_moment) const;
  // This rank's share (its shards, cut to the parameters; stage 0: everything) from vectors of
  // [share's size] f32, end to end; the share's parameters become the master weights in their dtype.
  void import_share(const std::vector<float>& master, const std::vector<float>& first_moment, const std::vector<float>& second_moment);
  // Flat elements `window` of the share from buffers of [window.size()] f32 each, end to end; their
  // parameters' elements become the master weights in their dtype.
  void import_window(const FlatShards& window, const float* master, const float* first_moment, const float* second_moment);

 private:
  // A parameter's elements inside this rank's share.
  struct Segment {
    std::size_t position;
    FlatRange range;        // flat elements
    std::int64_t offset;    // first element within the parameter
    Tensor view;            // the parameter's elements of the segment, where the caller keeps them
  };

  std::vector<ParameterSpec> parameters_;
  DataParallelGradients& gradients_;
  Communicator& dp_;
  AdamWHyperparameters hyperparameters_;
  DType dtype_;
  FlatShards owned_;
  std::vector<Segment> segments_;
  Tensor master_;  // f32 [owned] for 16-bit parameters (f32 parameters are stepped in place)
  Tensor first_moment_, second_moment_;
  std::int64_t steps_ = 0;
};

}  // namespace ferry
