#include "engine/grid/data_parallel_gradients.h"

#include <algorithm>
#include <utility>
#include <chrono>
#include <stdexcept>
#include <string>

#include "allocator/size_rounding.h"
#include "models/tensor_ops.h"

namespace ferry {
namespace {

std::vector<std::int64_t> sizes_of(const std::vector<ParameterSpec>& parameters) {
  std::vector<std::int64_t> sizes;
  for (const ParameterSpec& each : parameters) sizes.push_back(each.numel());
  return sizes;
}

// The layout positions of the model indices in `indices` that this rank's `parameters` hold.
std::vector<std::size_t> positions_of(const std::vector<ParameterSpec>& parameters, const std::vector<std::size_t>& indices) {
  std::vector<std::size_t> positions;
  for (std::size_t position = 0; position < parameters.size(); ++position) {
    if (std::find(indices.begin(), indices.end(), parameters[position].index) != indices.end()) positions.push_back(position);
  }
  return positions;
}

Tensor f32_buffer(Device& device, std::int64_t elements, MemoryCategory category, const char* tag, Stream stream = {}) {
  return Tensor::zeros(device, {std::max<std::int64_t>(elements, 1)}, DType::f32, category, tag, stream);
}

}  // namespace

DataParallelGradients::DataParallelGradients(Device& device, const std::vector<ParameterSpec>& parameters, Communicator& dp,
                                             int zero_stage, std::int64_t bucket_elements, bool overlap, bool partition_off_device,
                                             const BucketCuts& cuts)
    : device_(device), dp_(dp), zero_stage_(zero_stage), layout_(sizes_of(parameters), dp.size(), positions_of(parameters, cuts.unit_starts)),
      buffers_(bucket_elements * static_cast<std::int64_t>(sizeof(float)) > static_cast<std::int64_t>(kSmallSize) ? device.create_stream() : Stream{}),
      overlap_(overlap), partition_off_device_(partition_off_device) {
  if (partition_off_device && zero_stage != 2) {
    throw std::invalid_argument("only ZeRO stage 2 partitions gradients: its partition can leave the device, stage " +
                                std::to_string(zero_stage) + "'s cannot");
  }
  if (zero_stage < 0 || zero_stage > 2) {
    throw std::invalid_argument("gradients are reduced at ZeRO stages 0, 1 and 2 (stage 3's are stage 2's), not " + std::to_string(zero_stage));
  }
  if (layout_.unit_count() > 1 && zero_stage != 2) {
    throw std::invalid_argument("a partition sharded by units is stage 2's (and 3's): stage " + std::to_string(zero_stage) +
                                " keeps flat gradients, whose owned part must be one range");
  }
  if (bucket_elements < 0) throw std::invalid_argument("a gradient bucket of " + std::to_string(bucket_elements) + " elements");
  for (std::size_t position = 0; position < parameters.size(); ++position) {
    const std::size_t index = parameters[position].index;
    if (positions_.size() <= index) positions_.resize(index + 1);
    positions_[index] = position;
  }
  auto position_of_index = [&](std::optional<std::size_t> index) {
    return index && *index < positions_.size() ? positions_[*index] : std::optional<std::size_t>();
  };
  const std::optional<std::size_t> held_position = zero_stage == 2 ? position_of_index(cuts.held) : std::nullopt;
  std::vector<std::size_t> uncut, group_starts;
  if (held_position) uncut.push_back(*held_position);
  for (const std::size_t index : cuts.uncut) {
    if (const auto position = position_of_index(index)) uncut.push_back(*position);
  }
  if (zero_stage == 2) {
    for (const std::size_t index : cuts.stage_starts) {
      if (const auto position = position_of_index(index)) group_starts.push_back(*position);
    }
  }
  buckets_ = layout_.buckets(bucket_elements, group_starts, uncut);
  if (held_position) held_bucket_ = buckets_over(layout_.parameter(*held_position)).first;
  uncut_bucket_.assign(buckets_.size(), 0);
  for (const std::size_t position : uncut) uncut_bucket_[buckets_over(layout_.parameter(position)).first] = 1;
  pipeline_ = cuts.pipeline;
  elements_pending_.resize(buckets_.size());
  complete_upto_.assign(parameters.size(), 0);
  parameter_done_.assign(parameters.size(), 0);
  parameters_pending_.resize(buckets_.size());
  for (const GradientBucket& bucket : buckets_) completed_in_bucket_.emplace_back(bucket.last - bucket.first + 1, 0);
  open_buckets_.resize(buckets_.size());
  owned_ = zero_stage == 0 ? FlatShards(FlatRange{0, layout_.total()}) : layout_.shards(dp.rank());
  if (zero_stage < 2) {
    full_ = f32_buffer(device, layout_.total(), MemoryCategory::gradients, "grad.flat");
  } else if (!partition_off_device) {
    partition_ = f32_buffer(device, owned_.size(), MemoryCategory::gradients, "grad.partition");
  }
  std::size_t owned_count = 0;
  for (std::size_t position = 0; position < parameters.size(); ++position) {
    owned_index_.push_back(owned_count);
    if (!owned_.intersect(layout_.parameter(position)).empty()) ++owned_count;
  }
}

DataParallelGradients::~DataParallelGradients() = default;

DataParallelGradients::MemoryBound DataParallelGradients::memory_bound() const {
  const AllocatorConfig& config = device_.allocator().config();
  const auto f32_bytes = [&](std::int64_t elements) {
    return static_cast<std::int64_t>(round_size(static_cast<std::size_t>(std::max<std::int64_t>(elements, 1)) * sizeof(float), config));
  };
  MemoryBound bound;
  if (zero_stage_ < 2) bound.flat = f32_bytes(layout_.total());
  if (zero_stage_ == 2 && !partition_off_device_) bound.partition = f32_bytes(owned_.size());
  std::int64_t largest_cut = 0, largest_whole = 0, largest_piece = 0;
  for (std::size_t bucket = 0; bucket < buckets_.size(); ++bucket) {
    const std::int64_t size = buckets_[bucket].range.size();
    if (uncut_bucket_[bucket] != 0) {
      largest_whole = std::max(largest_whole, size);
    } else {
      largest_cut = std::max(largest_cut, size);
    }
    largest_piece = std::max(largest_piece, owned_.intersect(buckets_[bucket].range).size());
  }
  if (zero_stage_ == 2) {
    bound.bucket = largest_cut > 0 ? f32_bytes(largest_cut) : 0;
    std::int64_t filling = 4;
    if (pipeline_ && largest_cut > 0) {
      std::int64_t largest_parameter = 0;
      for (std::size_t position = 0; position < layout_.parameter_count(); ++position) {
        const auto [first, end] = buckets_over(layout_.parameter(position));
        if (first < end && uncut_bucket_[first] == 0) largest_parameter = std::max(largest_parameter, layout_.parameter(position).size());
      }
      filling = (largest_parameter + largest_cut - 1) / largest_cut + 2;
    }
    bound.buckets = bound.bucket > 0 ? static_cast<std::int64_t>(kBucketsInFlight) + filling : 0;
    bound.whole = largest_whole > 0 ? f32_bytes(largest_whole) : 0;
  }
  if (zero_stage_ > 0) {
    bound.received_piece = f32_bytes(largest_piece);
    bound.received_pieces = static_cast<std::int64_t>(kBucketsInFlight);
  }
  return bound;
}

std::size_t DataParallelGradients::position_of(std::size_t index) const {
  if (index >= positions_.size() || !positions_[index]) {
    throw std::logic_error("a gradient of parameter " + std::to_string(index) + ", which this rank's model does not hold");
  }
  return *positions_[index];
}

std::pair<std::size_t, std::size_t> DataParallelGradients::buckets_over(const FlatRange& range) const {
  // The first bucket ending after range.begin, through the last one starting before range.end.
  const auto first = std::upper_bound(buckets_.begin(), buckets_.end(), range.begin,
                                      [](std::int64_t element, const GradientBucket& bucket) { return element < bucket.range.end; });
  auto last = first;
  while (last != buckets_.end() && last->range.begin < range.end) ++last;
  return {static_cast<std::size_t>(first - buckets_.begin()), static_cast<std::size_t>(last - buckets_.begin())};
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
  for (std::size_t bucket = 0; bucket < buckets_.size(); ++bucket) elements_pending_[bucket] = buckets_[bucket].range.size();
  std::fill(complete_upto_.begin(), complete_upto_.end(), 0);
  std::fill(parameter_done_.begin(), parameter_done_.end(), 0);
}

void DataParallelGradients::accumulate_whole_step() {
  begin_micro_batch(false);
  reducing_ = zero_stage_ == 2;  // stage 2 reduces as buckets fill; stages 0 and 1 wait for reduce_accumulated()
  for (std::size_t bucket = 0; bucket < buckets_.size(); ++bucket) {
    parameters_pending_[bucket] = completed_in_bucket_[bucket].size();
    std::fill(completed_in_bucket_[bucket].begin(), completed_in_bucket_[bucket].end(), 0);
  }
  whole_step_ = pipeline_step_ = true;
}

void DataParallelGradients::reduce_accumulated() {
  if (!whole_step_) throw std::logic_error("reduce_accumulated() without accumulate_whole_step()");
  whole_step_ = false;
  reducing_ = true;
  for (std::size_t bucket = 0; bucket < buckets_.size(); ++bucket) {
    if (zero_stage_ == 2 && !open_buckets_[bucket].defined()) continue;  // reduced already, nothing since
    launch(bucket);
  }
}

Tensor DataParallelGradients::accumulated_gradient(std::size_t index) {
  if (!whole_step_) throw std::logic_error("a parameter's accumulated gradient is kept only while a whole step accumulates");
  const std::size_t position = position_of(index);
  const FlatRange parameter = layout_.parameter(position);
  if (zero_stage_ < 2) return full_.narrow(0, parameter.begin, parameter.size());
  if (!held_bucket_ || buckets_over(parameter).first != *held_bucket_) {
    throw std::logic_error("at ZeRO stage 2 a pipeline step holds only the tied table's gradient whole, not parameter " + std::to_string(index) + "'s");
  }
  return open_bucket(*held_bucket_).narrow(0, parameter.begin - buckets_[*held_bucket_].range.begin, parameter.size());
}

Tensor& DataParallelGradients::open_bucket(std::size_t bucket) {
  Tensor& buffer = open_buckets_[bucket];
  if (!buffer.defined()) buffer = f32_buffer(device_, buckets_[bucket].range.size(), MemoryCategory::gradients, "grad.bucket", buffers_);
  return buffer;
}

void DataParallelGradients::accumulate(std::size_t index, std::int64_t offset, const Tensor& gradient) {
  const FlatRange parameter = layout_.parameter(position_of(index));
  const std::int64_t count = gradient.numel();
  if (offset < 0 || offset + count > parameter.size()) {
    throw std::out_of_range("gradient elements [" + std::to_string(offset) + ", " + std::to_string(offset + count) + ") of a parameter of " +
                            std::to_string(parameter.size()));
  }
  const FlatRange piece{parameter.begin + offset, parameter.begin + offset + count};
  const Tensor source = gradient.reshape({count});
  auto add = [](const Tensor& destination, const Tensor& values) { ops::residual_forward(destination, destination, values); };
  if (zero_stage_ < 2) {
    add(full_.narrow(0, piece.begin, count), source);
  } else {
    const auto [first, end] = buckets_over(piece);  // a piece may straddle buckets: each takes its part
    for (std::size_t bucket = first; bucket < end; ++bucket) {
      const FlatRange part = piece.intersect(buckets_[bucket].range);
      add(open_bucket(bucket).narrow(0, part.begin - buckets_[bucket].range.begin, part.size()), source.narrow(0, part.begin - piece.begin, part.size()));
    }
  }
  for (InFlight& flight : in_flight_) flight.request->test();  // MPI progresses inside its calls
}

void DataParallelGradients::accumulate_rows(std::size_t index, const Tensor& ids, const Tensor& rows) {
  const FlatRange parameter = layout_.parameter(position_of(index));
  const std::int64_t width = rows.size(1);
  Tensor table;
  if (zero_stage_ < 2) {
    table = full_.narrow(0, parameter.begin, parameter.size());
  } else {
    const auto [first, end] = buckets_over(parameter);
    if (end != first + 1 || buckets_[first].range.begin != parameter.begin || buckets_[first].range.end != parameter.end) {
      throw std::logic_error("parameter " + std::to_string(index) + "'s gradient comes as rows: it must be a bucket of its own (BucketCuts::uncut)");
    }
    table = open_bucket(first);
  }
  ops::encoder_backward_token_rows(table.reshape({parameter.size() / width, width}), rows, ids, 0);
}

void DataParallelGradients::complete_elements(std::size_t position, std::int64_t from, std::int64_t to) {
  complete_upto_[position] = to;
  const FlatRange parameter = layout_.parameter(position);
  const FlatRange done{parameter.begin + from, parameter.begin + to};
  if (done.empty()) return;
  const auto [first, end] = buckets_over(done);
  for (std::size_t bucket = first; bucket < end; ++bucket) {
    elements_pending_[bucket] -= done.intersect(buckets_[bucket].range).size();
    if (elements_pending_[bucket] == 0) launch(bucket);
  }
}

void DataParallelGradients::piece_complete(std::size_t index, std::int64_t offset, std::int64_t count) {
  if (!reducing_ || whole_step_) return;  // a pipeline step counts whole parameters
  const std::size_t position = position_of(index);
  if (offset != complete_upto_[position] || count < 0 || offset + count > layout_.parameter(position).size()) {
    throw std::logic_error("parameter " + std::to_string(index) + "'s elements [" + std::to_string(offset) + ", " +
                           std::to_string(offset + count) + ") completed out of order (its first " + std::to_string(complete_upto_[position]) +
                           " are complete)");
  }
  complete_elements(position, offset, offset + count);
}

void DataParallelGradients::parameter_complete(std::size_t index) {
  if (!reducing_) return;
  const std::size_t position = position_of(index);
  if (whole_step_) {  // stage 2 in a pipeline: a bucket starts once each of its parameters has completed, in any micro-batches
    const auto [first, end] = buckets_over(layout_.parameter(position));
    for (std::size_t bucket = first; bucket < end; ++bucket) {
      if (bucket == held_bucket_) continue;
      char& completed = completed_in_bucket_[bucket][position - buckets_[bucket].first];
      if (completed != 0) continue;
      completed = 1;
      if (--parameters_pending_[bucket] > 0) continue;
      std::fill(completed_in_bucket_[bucket].begin(), completed_in_bucket_[bucket].end(), 0);
      parameters_pending_[bucket] = completed_in_bucket_[bucket].size();
      launch(bucket);
    }
    return;
  }
  if (parameter_done_[position] != 0) throw std::logic_error("parameter " + std::to_string(index) + " completed twice in one micro-batch");
  parameter_done_[position] = 1;
  complete_elements(position, complete_upto_[position], layout_.parameter(position).size());
}

void DataParallelGradients::launch(std::size_t bucket) {
  if (in_flight_.size() >= kBucketsInFlight) land_oldest();
  const FlatRange range = buckets_[bucket].range;
  InFlight flight;
  if (zero_stage_ == 0) {
    flight.request = dp_.all_reduce_async(full_.narrow(0, range.begin, range.size()).data(), static_cast<std::size_t>(range.size()),
                                          CommDataType::f32, ReduceOperation::average);
  } else {
    const Tensor input = zero_stage_ == 1 ? full_.narrow(0, range.begin, range.size()) : open_bucket(bucket);
    flight.piece = owned_.intersect(range);
    flight.received = f32_buffer(device_, flight.piece.size(), MemoryCategory::communication, "grad.reduce_scatter", buffers_);
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
    const Tensor destination = partition_.narrow(0, owned_.offset(flight.piece.begin), flight.piece.size());
    ops::residual_forward(destination, destination, received);
  } else {
    // Parameter by parameter into the sink (ZeRO-Offload's host gradients), offsets within each owned part.
    for (std::size_t position = 0; position < layout_.parameter_count(); ++position) {
      const FlatRange parameter = layout_.parameter(position);
      const FlatRange part = parameter.intersect(flight.piece);
      if (part.empty()) continue;
      const FlatRange owned_part = owned_.intersect(parameter);
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
    if (elements_pending_[bucket] != 0) {
      throw std::logic_error("gradient bucket " + std::to_string(bucket) + " still waits for " + std::to_string(elements_pending_[bucket]) +
                             " elements at the end of backward");
    }
  }
}

Tensor DataParallelGradients::owned_gradients() const {
  if (partition_off_device_) return Tensor();
  // Stages 0 and 1 own one range of the flat gradients (one unit); stage 2 its partition, end to end.
  if (zero_stage_ < 2) return full_.narrow(0, owned_.empty() ? 0 : owned_.ranges().front().begin, owned_.size());
  return partition_.narrow(0, 0, owned_.size());
}

std::optional<DataParallelGradients::OwnedPiece> DataParallelGradients::owned_piece(std::size_t position) const {
  const FlatRange parameter = layout_.parameter(position);
  const FlatRange range = owned_.intersect(parameter);
  if (range.empty()) return std::nullopt;
  const Tensor owned = owned_gradients();
  return OwnedPiece{range, range.begin - parameter.begin, owned.defined() ? owned.narrow(0, owned_.offset(range.begin), range.size()) : Tensor()};
}

}  // namespace ferry
