// PartitionedAdamW: AdamW over one data-parallel rank's share of the flat parameter space (ZeRO stages
// 1 to 3: its partition; stage 0: everything), with f32 master weights (16-bit parameters) and both
// moments for that share only. Stages 1 and 2 then all-gather the updated parameters over the dp group
// into the model's whole tensors, in their dtype, bucket by bucket (DeepSpeed's allgather_bucket_size);
// stage 3 updates its partition of the parameters in place and gathers nothing. The global gradient
// norm and the fp16 overflow check are reduced over the group, so every rank decides alike.
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

// Where a rank's parameter values live: the model's whole tensors (stages 0-2), or a partition of the
// flat space, [owned] elements in the parameters' dtype (stage 3).
struct ParameterValues {
  std::vector<NamedTensor> whole;  // in the layout's order
  Tensor partition;
};

class PartitionedAdamW {
 public:
  // `parameters` in the order `gradients` was built with; `allgather_bucket_elements` 0: one bucket.
  PartitionedAdamW(const std::vector<ParameterSpec>& parameters, ParameterValues values, DataParallelGradients& gradients,
                   Communicator& dp, const AdamWHyperparameters& hyperparameters, std::int64_t allgather_bucket_elements);

  // The sum of squares of the averaged gradients over the whole model (every rank gets the same; inf or
  // NaN when any rank's share overflowed), leaving out model parameter `excluded` (NamedTensor::index: a
  // pipeline stage's duplicate of the tied table) when given. Call after gradients.finish_step().
  double gradient_sum_of_squares(std::optional<std::size_t> excluded = std::nullopt);
  // One AdamW update of this rank's share, then (whole parameters) the others' gathered from every rank.
  void step(float learning_rate, float gradient_scale);
  std::int64_t steps_taken() const { return steps_; }
  void set_steps_taken(std::int64_t steps) { steps_ = steps; }

  // Flat elements `range` (within this rank's share) of the master weights and moments, each
  // [range.size()] f32, without communication: what the rank writes of a checkpoint.
  void export_range(const FlatRange& range, std::vector<float>& master, std::vector<float>& first_moment, std::vector<float>& second_moment);
  // This rank's share (its partition, cut to the parameters; stage 0: everything) from vectors of
  // [share's size] f32; the parameters become the master weights in their dtype, the other ranks'
  // shares all-gathered (stages 1, 2: every rank of the dp group calls it together).
  void import_share(const std::vector<float>& master, const std::vector<float>& first_moment, const std::vector<float>& second_moment);

 private:
  // A parameter's elements inside this rank's share.
  struct Segment {
    std::size_t position;
    FlatRange range;        // flat elements
    std::int64_t offset;    // first element within the parameter
  };
  Tensor parameter_view(const Segment& segment) const;  // the parameter's elements of the segment
  void gather_whole();  // stages 1, 2: the other ranks' shares into the whole tensors

  std::vector<ParameterSpec> parameters_;
  ParameterValues values_;
  DataParallelGradients& gradients_;
  Communicator& dp_;
  AdamWHyperparameters hyperparameters_;
  std::int64_t allgather_bucket_elements_;
  DType dtype_;
  FlatRange owned_;
  std::vector<Segment> segments_;
  Tensor master_;  // f32 [owned] for 16-bit parameters (f32 parameters are stepped in place)
  Tensor first_moment_, second_moment_;
  std::int64_t steps_ = 0;
};

}  // namespace ferry
