#include "engine/grid/partitioned_adamw.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/core/op_recorder.h"
#include "models/adamw_optimizer.h"
#include "models/kernel_backend.h"
#include "models/tensor_ops.h"

namespace ferry {
namespace {

Tensor state_buffer(Device& device, std::int64_t elements, const char* tag) {
  return Tensor::zeros(device, {std::max<std::int64_t>(elements, 1)}, DType::f32, MemoryCategory::optimizer_states, tag);
}

}  // namespace

PartitionedAdamW::PartitionedAdamW(Device& device, const std::vector<ParameterSpec>& parameters, DType dtype, std::vector<Tensor> owned_views,
                                   DataParallelGradients& gradients, Communicator& dp, const AdamWHyperparameters& hyperparameters)
    : parameters_(parameters), gradients_(gradients), dp_(dp), hyperparameters_(hyperparameters), dtype_(dtype), owned_(gradients.owned()) {
  if (parameters_.empty()) throw std::invalid_argument("a partitioned optimizer over no parameters");
  if (parameters_.size() != gradients.layout().parameter_count()) {
    throw std::logic_error("the optimizer's " + std::to_string(parameters_.size()) + " parameters do not match the gradients' " +
                           std::to_string(gradients.layout().parameter_count()));
  }
  for (std::size_t position = 0; position < parameters_.size(); ++position) {
    if (const auto piece = gradients.owned_piece(position)) {
      if (segments_.size() >= owned_views.size()) throw std::logic_error("fewer parameter views than the rank owns pieces");
      segments_.push_back({position, piece->range, piece->offset, std::move(owned_views[segments_.size()])});
    }
  }
  if (segments_.size() != owned_views.size()) throw std::logic_error("more parameter views than the rank owns pieces");
  first_moment_ = state_buffer(device, owned_.size(), "exp_avg.partition");
  second_moment_ = state_buffer(device, owned_.size(), "exp_avg_sq.partition");
  if (dtype_ != DType::f32) {
    master_ = state_buffer(device, owned_.size(), "master.partition");
    for (const Segment& segment : segments_) {
      const Tensor master = master_.narrow(0, owned_.offset(segment.range.begin), segment.range.size());
      if (device.has_storage()) {
        ops::kernel_backend(device).convert_to_f32(segment.view.data(), dtype_, master.data_as<float>(), segment.range.size());
      }
    }
  }
}

double PartitionedAdamW::gradient_sum_of_squares(std::optional<std::size_t> excluded) {
  Device& device = gradients_.owned_gradients().device();
  std::vector<Tensor> pieces;  // the owned piece of every parameter but `excluded`
  for (std::size_t position = 0; position < parameters_.size(); ++position) {
    if (excluded && parameters_[position].index == *excluded) continue;
    if (const auto piece = gradients_.owned_piece(position)) pieces.push_back(piece->gradient);
  }
  std::vector<const Tensor*> tensors;
  for (const Tensor& piece : pieces) tensors.push_back(&piece);
  // A dry run takes the kernels' scratch as a run does (0 is its sum), and times nothing.
  std::optional<OpScope> op;
  if (device.has_storage()) op.emplace(device, "optimizer", "gradient_norm");
  double sum = ops::sum_of_squares(device, tensors);
  // Stage 0: every rank holds every averaged gradient; stages 1 and 2 add their partitions' sums.
  if (gradients_.zero_stage() > 0) dp_.all_reduce(&sum, 1, CommDataType::f64, ReduceOperation::sum);
  return sum;
}

void PartitionedAdamW::step(float learning_rate, float gradient_scale) {
  ++steps_;
  Device& device = first_moment_.device();
  if (device.has_storage()) {
    const OpScope op(device, "optimizer", "adamw");
    std::vector<AdamWTensor> decayed, undecayed;
    for (const Segment& segment : segments_) {
      const std::int64_t at = owned_.offset(segment.range.begin);
      const Tensor parameter = segment.view;
      const auto piece = gradients_.owned_piece(segment.position);
      (decays(parameters_[segment.position].shape) ? decayed : undecayed)
          .push_back({dtype_ == DType::f32 ? parameter.data_as<float>() : master_.data_as<float>() + at,
                      dtype_ == DType::bf16 ? parameter.data_as<std::uint16_t>() : nullptr, piece->gradient.data_as<float>(),
                      first_moment_.data_as<float>() + at, second_moment_.data_as<float>() + at, segment.range.size()});
    }
    adamw_update_lists(device, decayed, undecayed, hyperparameters_, learning_rate, steps_, gradient_scale);
    if (dtype_ == DType::f16) {
      for (const Segment& segment : segments_) {
        ops::kernel_backend(device).convert_from_f32(master_.data_as<float>() + owned_.offset(segment.range.begin), segment.view.data(), dtype_,
                                 segment.range.size());
      }
    }
  }
}

void PartitionedAdamW::export_shard(const FlatShards& shard, std::vector<float>& master, std::vector<float>& first_moment,
                                    std::vector<float>& second_moment) {
  const auto count = static_cast<std::size_t>(shard.size());
  master.assign(count, 0.0f);
  first_moment.assign(count, 0.0f);
  second_moment.assign(count, 0.0f);
  export_window(shard, master.data(), first_moment.data(), second_moment.data());
}

void PartitionedAdamW::export_window(const FlatShards& window, float* master, float* first_moment, float* second_moment) const {
  for (const FlatRange& range : window.ranges()) {
    if (!owned_.holds(range)) {
      throw std::invalid_argument("flat elements [" + std::to_string(range.begin) + ", " + std::to_string(range.end) +
                                  ") are not all in one of this rank's " + std::to_string(owned_.ranges().size()) + " shards");
    }
    const std::int64_t out = window.offset(range.begin), at = owned_.offset(range.begin);
    for (const Segment& segment : segments_) {
      const FlatRange piece = segment.range.intersect(range);
      if (piece.empty()) continue;
      float* destination = master + out + (piece.begin - range.begin);
      if (dtype_ == DType::f32) {
        segment.view.narrow(0, piece.begin - segment.range.begin, piece.size()).copy_to_host(destination);
      } else {
        master_.narrow(0, owned_.offset(piece.begin), piece.size()).copy_to_host(destination);
      }
    }
    first_moment_.narrow(0, at, range.size()).copy_to_host(first_moment + out);
    second_moment_.narrow(0, at, range.size()).copy_to_host(second_moment + out);
  }
}

void PartitionedAdamW::import_share(const std::vector<float>& master, const std::vector<float>& first_moment,
                                    const std::vector<float>& second_moment) {
  const auto count = static_cast<std::size_t>(owned_.size());
  if (master.size() != count || first_moment.size() != count || second_moment.size() != count) {
    throw std::invalid_argument("optimizer state of " + std::to_string(master.size()) + " elements for a share of " + std::to_string(count));
  }
  import_window(owned_, master.data(), first_moment.data(), second_moment.data());
}

void PartitionedAdamW::import_window(const FlatShards& window, const float* master, const float* first_moment, const float* second_moment) {
  for (const FlatRange& range : window.ranges()) {
    if (!owned_.holds(range)) {
      throw std::invalid_argument("flat elements [" + std::to_string(range.begin) + ", " + std::to_string(range.end) +
                                  ") are not all in one of this rank's " + std::to_string(owned_.ranges().size()) + " shards");
    }
    const std::int64_t in = window.offset(range.begin), at = owned_.offset(range.begin);
    first_moment_.narrow(0, at, range.size()).copy_from_host(first_moment + in);
    second_moment_.narrow(0, at, range.size()).copy_from_host(second_moment + in);
    if (master_.defined()) master_.narrow(0, at, range.size()).copy_from_host(master + in);
    for (const Segment& segment : segments_) {
      const FlatRange piece = segment.range.intersect(range);
      if (piece.empty()) continue;
      copy_from_host_f32(segment.view.narrow(0, piece.begin - segment.range.begin, piece.size()), master + in + (piece.begin - range.begin));
    }
  }
}

}  // namespace ferry
