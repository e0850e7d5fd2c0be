#include "engine/grid/data_parallel_gradients.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "models/tensor_ops.h"

namespace ferry {
namespace {

std::vector<std::int64_t> sizes_of(const std::vector<NamedTensor>& parameters) {
  std::vector<std::int64_t> sizes;
  for (const NamedTensor& each : parameters) sizes.push_back(each.tensor->numel());
  return sizes;
}

Tensor f32_buffer(Device& device, std::int64_t elements, MemoryCategory category, const char* tag) {
  return Tensor::zeros(device, {std::max<std::int64_t>(elements, 1)}, DType::f32, category, tag);
}

}  // namespace

DataParallelGradients::DataParallelGradients(Device& device, const std::vector<NamedTensor>& parameters, Communicator& dp,
                                             int zero_stage, std::int64_t bucket_elements, bool overlap, bool partition_off_device,
                                             const PipelineBuckets& pipeline)
    : device_(device), dp_(dp), zero_stage_(zero_stage), layout_(sizes_of(parameters), dp.size()), overlap_(overlap),
      partition_off_device_(partition_off_device) {
  if (partition_off_device && zero_stage != 2) {
    throw std::invalid_argument("only ZeRO stage 2 partitions gradients: its partition can leave the device, stage " +
                                std::to_string(zero_stage) + "'s cannot");
  }
  if (zero_stage < 0 || zero_stage > 2) {
    throw std::invalid_argument("data parallelism runs ZeRO stages 0, 1 and 2, not " + std::to_string(zero_stage));
  }
  for (std::size_t position = 0; position < parameters.size(); ++position) {
    const std::size_t index = parameters[position].index;
    if (positions_.size() <= index) positions_.resize(index + 1);
    positions_[index] = position;
  }
  auto position_of_index = [&](std::optional<std::size_t> index) {
    return index && *index < positions_.size() ? positions_[*index] : std::optional<std::size_t>();
  };
  const std::optional<std::size_t> held_position = zero_stage == 2 ? position_of_index(pipeline.held) : std::nullopt;
  std::vector<std::size_t> group_starts;
  if (held_position) group_starts = {*held_position, *held_position + 1};
  if (zero_stage == 2) {
    for (const std::size_t index : pipeline.stage_starts) {
      if (const auto position = position_of_index(index)) group_starts.push_back(*position);
    }
  }
  buckets_ = layout_.buckets(bucket_elements, group_starts);
  bucket_of_.resize(parameters.size());
  for (std::size_t bucket = 0; bucket < buckets_.size(); ++bucket) {
    for (std::size_t position = buckets_[bucket].first; position <= buckets_[bucket].last; ++position) bucket_of_[position] = bucket;
  }
  if (held_position) held_bucket_ = bucket_of_[*held_position];
  completed_.assign(parameters.size(), 0);
  pending_.resize(buckets_.size());
  open_buckets_.resize(buckets_.size());
  owned_ = zero_stage == 0 ? FlatRange{0, layout_.total()} : layout_.partition(dp.rank());
  if (zero_stage < 2) {
    full_ = f32_buffer(device, layout_.total(), MemoryCategory::gradients, "grad.flat");
  } else if (!partition_off_device) {
    partition_ = f32_buffer(device, owned_.size(), MemoryCategory::gradients, "grad.partition");
  }
  std::size_t owned_count = 0;
  for (std::size_t position = 0; position < parameters.size(); ++position) {
    owned_index_.push_back(owned_count);
    if (!layout_.parameter(position).intersect(owned_).empty()) ++owned_count;
  }
}

DataParallelGradients::~DataParallelGradients() = default;

std::size_t DataParallelGradients::position_of(std::size_t index) const {
  if (index >= positions_.size() || !positions_[index]) {
    throw std::logic_error("a gradient of parameter " + std::to_string(index) + ", which this rank's model does not hold");
  }
  return *positions_[index];
}

void DataParallelGradients::begin_step() {
  if (!in_flight_.empty()) throw std::logic_error("a data-parallel step began with reductions still in flight");
  if (!partition_off_device_) ops::fill_zero(zero_stage_ < 2 ? full_ : partition_);
  if (partition_off_device_ && partition_sink_ == nullptr) throw std::logic_error("stage 2 with its partition off the device has no sink");
  wait_seconds_ = 0;
  for (Tensor& bucket : open_buckets_) bucket = Tensor();
  whole_step_ = pipeline_step_ = false;
}

void DataParallelGradients::begin_micro_batch(bool last) {
  reducing_ = zero_stage_ == 2 || last;
  for (std::size_t bucket = 0; bucket < buckets_.size(); ++bucket) pending_[bucket] = buckets_[bucket].last - buckets_[bucket].first + 1;
}

void DataParallelGradients::accumulate_whole_step() {
  begin_micro_batch(false);
  reducing_ = zero_stage_ == 2;  // stage 2 reduces as buckets fill; stages 0 and 1 wait for reduce_accumulated()
  std::fill(completed_.begin(), completed_.end(), 0);
  whole_step_ = pipeline_step_ = true;
}

void DataParallelGradients::reduce_accumulated() {
  if (!whole_step_) throw std::logic_error("reduce_accumulated() without accumulate_whole_step()");
  whole_step_ = false;
  reducing_ = true;
  for (std::size_t bucket = 0; bucket < buckets_.size(); ++bucket) {
    if (zero_stage_ == 2 && !open_buckets_[bucket].defined()) continue;  // reduced already, nothing since
    pending_[bucket] = 0;
    launch(bucket);
  }
}

Tensor DataParallelGradients::accumulated_gradient(std::size_t index) {
  if (!whole_step_) throw std::logic_error("a parameter's accumulated gradient is kept only while a whole step accumulates");
  const std::size_t position = position_of(index);
  if (zero_stage_ < 2) {
    const FlatRange parameter = layout_.parameter(position);
    return full_.narrow(0, parameter.begin, parameter.size());
  }
  if (!held_bucket_ || bucket_of_[position] != *held_bucket_) {
    throw std::logic_error("at ZeRO stage 2 a pipeline step holds only the tied table's gradient whole, not parameter " + std::to_string(index) + "'s");
  }
  return target(position, 0, layout_.parameter(position).size());
}

Tensor DataParallelGradients::target(std::size_t position, std::int64_t offset, std::int64_t count) {
  const FlatRange parameter = layout_.parameter(position);
  if (offset < 0 || count < 0 || offset + count > parameter.size()) {
    throw std::out_of_range("gradient elements [" + std::to_string(offset) + ", " + std::to_string(offset + count) + ") of a parameter of " +
                            std::to_string(parameter.size()));
  }
  const std::int64_t flat = parameter.begin + offset;
  if (zero_stage_ < 2) return full_.narrow(0, flat, count);
  const std::size_t bucket = bucket_of_[position];
  Tensor& buffer = open_buckets_[bucket];
  if (!buffer.defined()) buffer = f32_buffer(device_, buckets_[bucket].range.size(), MemoryCategory::gradients, "grad.bucket");
  return buffer.narrow(0, flat - buckets_[bucket].range.begin, count);
}

void DataParallelGradients::accumulate(std::size_t index, std::int64_t offset, const Tensor& gradient) {
  const Tensor destination = target(position_of(index), offset, gradient.numel());
  ops::residual_forward(destination, destination, gradient.reshape({gradient.numel()}));
  for (InFlight& flight : in_flight_) flight.request->test();  // MPI progresses inside its calls
}

void DataParallelGradients::accumulate_rows(std::size_t index, const Tensor& ids, const Tensor& rows) {
  const std::size_t position = position_of(index);
  const std::int64_t n = rows.size(0), width = rows.size(1);
  const Tensor table = target(position, 0, layout_.parameter(position).size()).reshape({layout_.parameter(position).size() / width, width});
  const Tensor positions_scratch = Tensor::zeros(device_, {1, width}, DType::f32, MemoryCategory::workspace, "rows.scratch");
  ops::encoder_backward(table, positions_scratch, rows.reshape({n, 1, width}), ids.reshape({n, 1}));
}

void DataParallelGradients::parameter_complete(std::size_t index) {
  if (!reducing_) return;
  const std::size_t position = position_of(index);
  const std::size_t bucket = bucket_of_[position];
  if (whole_step_) {  // stage 2 in a pipeline: once every parameter of the bucket has completed, in any micro-batches
    if (bucket == held_bucket_ || completed_[position] != 0) return;
    completed_[position] = 1;
    if (--pending_[bucket] > 0) return;
    for (std::size_t each = buckets_[bucket].first; each <= buckets_[bucket].last; ++each) completed_[each] = 0;
    pending_[bucket] = buckets_[bucket].last - buckets_[bucket].first + 1;
    launch(bucket);
    return;
  }
  if (pending_[bucket] == 0) throw std::logic_error("parameter " + std::to_string(index) + " completed twice in one micro-batch");
  if (--pending_[bucket] == 0) launch(bucket);
}

void DataParallelGradients::launch(std::size_t bucket) {
  if (in_flight_.size() >= kBucketsInFlight) land_oldest();
  const FlatRange range = buckets_[bucket].range;
  InFlight flight;
  if (zero_stage_ == 0) {
    flight.request = dp_.all_reduce_async(full_.narrow(0, range.begin, range.size()).data(), static_cast<std::size_t>(range.size()),
                                          CommDataType::f32, ReduceOperation::average);
  } else {
    const Tensor input = zero_stage_ == 1 ? full_.narrow(0, range.begin, range.size()) : open_buckets_[bucket];
    flight.piece = range.intersect(owned_);
    flight.received = f32_buffer(device_, flight.piece.size(), MemoryCategory::communication, "grad.reduce_scatter");
    const std::vector<std::size_t> counts = layout_.owned_counts(range);
    flight.request = dp_.reduce_scatter_async(input.data(), flight.received.data(), counts, CommDataType::f32, ReduceOperation::average);
    if (zero_stage_ == 2) flight.bucket = std::move(open_buckets_[bucket]);
  }
  in_flight_.push_back(std::move(flight));
  if (!overlap_) land_oldest();
}

void DataParallelGradients::land(InFlight& flight) {
  const auto start = std::chrono::steady_clock::now();
  flight.request->wait();
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (zero_stage_ == 0 || flight.piece.empty()) return;
  const Tensor received = flight.received.narrow(0, 0, flight.piece.size());
  if (zero_stage_ == 1) {
    full_.narrow(0, flight.piece.begin, flight.piece.size()).copy_from(received);
  } else if (!partition_off_device_) {
    const Tensor destination = partition_.narrow(0, flight.piece.begin - owned_.begin, flight.piece.size());
    ops::residual_forward(destination, destination, received);
  } else {
    // Parameter by parameter into the sink (ZeRO-Offload's host gradients), offsets within each owned part.
    for (std::size_t position = 0; position < layout_.parameter_count(); ++position) {
      const FlatRange parameter = layout_.parameter(position);
      const FlatRange part = parameter.intersect(flight.piece);
      if (part.empty()) continue;
      const FlatRange owned_part = parameter.intersect(owned_);
      partition_sink_->accumulate(owned_index_[position], part.begin - owned_part.begin,
                                  received.narrow(0, part.begin - flight.piece.begin, part.size()));
    }
  }
}

void DataParallelGradients::land_oldest() {
  InFlight flight = std::move(in_flight_.front());
  in_flight_.pop_front();
  land(flight);
}

void DataParallelGradients::finish_step() {
  while (!in_flight_.empty()) land_oldest();
  if (!reducing_ || whole_step_) throw std::logic_error("a data-parallel step finished before its last micro-batch");
  if (pipeline_step_) return;  // every bucket was started by the step's end (reduce_accumulated())
  for (std::size_t bucket = 0; bucket < buckets_.size(); ++bucket) {
    if (pending_[bucket] != 0) {
      throw std::logic_error("gradient bucket " + std::to_string(bucket) + " still waits for " + std::to_string(pending_[bucket]) +
                             " parameters at the end of backward");
    }
  }
}

Tensor DataParallelGradients::owned_gradients() const {
  if (partition_off_device_) return Tensor();
  return zero_stage_ < 2 ? full_.narrow(0, owned_.begin, owned_.size()) : partition_.narrow(0, 0, owned_.size());
}

std::optional<DataParallelGradients::OwnedPiece> DataParallelGradients::owned_piece(std::size_t position) const {
  const FlatRange parameter = layout_.parameter(position);
  const FlatRange range = parameter.intersect(owned_);
  if (range.empty()) return std::nullopt;
  const Tensor owned = owned_gradients();
  return OwnedPiece{range, range.begin - parameter.begin, owned.defined() ? owned.narrow(0, range.begin - owned_.begin, range.size()) : Tensor()};
}

}  // namespace ferry
