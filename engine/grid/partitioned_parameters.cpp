#include "engine/grid/partitioned_parameters.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include "allocator/size_rounding.h"
#include "engine/core/op_recorder.h"
#include "engine/grid/parameter_gather.h"

namespace ferry {
namespace {

bool same(std::span<const std::size_t> a, const std::vector<std::size_t>& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

}  // namespace

PartitionedParameters::PartitionedParameters(Device& device, std::vector<ParameterSpec> parameters, DType dtype, const FlatLayout& layout,
                                             FlatShards owned, Communicator& dp, GatherPolicy policy, ParameterHome* home)
    : device_(device), parameters_(std::move(parameters)), dtype_(dtype), layout_(layout), owned_(std::move(owned)), dp_(dp),
      policy_(policy), home_(home) {
  if (policy_.max_live_elements < 0) throw std::invalid_argument("stage3_max_live_parameters must be 0 or more elements");
  if (parameters_.size() != layout.parameter_count()) {
    throw std::logic_error("a partition of " + std::to_string(parameters_.size()) + " parameters over a layout of " +
                           std::to_string(layout.parameter_count()));
  }
  for (std::size_t position = 0; position < parameters_.size(); ++position) {
    const std::size_t index = parameters_[position].index;
    if (positions_.size() <= index) positions_.resize(index + 1, parameters_.size());
    positions_[index] = position;
  }
  if (home_ != nullptr) {
    if (home_->elements() != owned_.size() || home_->dtype() != dtype) {
      throw std::logic_error("a parameter home of " + std::to_string(home_->elements()) + " elements for a partition of " + std::to_string(owned_.size()));
    }
    return;
  }
  partition_ = Tensor::zeros(device, {std::max<std::int64_t>(owned_.size(), 1)}, dtype, MemoryCategory::parameters, "parameters.partition");
}

const Tensor& PartitionedParameters::partition() const {
  if (home_ != nullptr) throw std::logic_error("the parameter partition lives in its " + home_->name() + " home, not on the device");
  return partition_;
}

std::int64_t PartitionedParameters::partition_bytes() const {
  if (home_ != nullptr) return 0;
  return static_cast<std::int64_t>(round_size(partition_.nbytes(), device_.allocator().config()));
}

std::vector<ElementRange> PartitionedParameters::owned_ranges(std::span<const std::size_t> indices) const {
  std::vector<ElementRange> ranges;
  for (const auto& [first, last] : runs(indices)) {
    const FlatRange mine = owned_.intersect({layout_.parameter(first).begin, layout_.parameter(last).end});
    if (!mine.empty()) ranges.push_back({owned_.offset(mine.begin), mine.size()});
  }
  return ranges;
}

PartitionedParameters::~PartitionedParameters() {
  try {
    release_all();
  } catch (const std::exception& error) {  // destructors never throw
    std::fprintf(stderr, "ferry: waiting for a parameter gather failed: %s\n", error.what());
  }
}

std::vector<std::pair<std::size_t, std::size_t>> PartitionedParameters::runs(std::span<const std::size_t> indices) const {
  std::vector<std::pair<std::size_t, std::size_t>> result;  // [first, last] positions
  for (const std::size_t index : indices) {
    if (index >= positions_.size() || positions_[index] == parameters_.size()) {
      throw std::out_of_range("parameter " + std::to_string(index) + " is not among this rank's partitioned parameters");
    }
    const std::size_t position = positions_[index];
    if (!result.empty() && position == result.back().second + 1 && layout_.unit_of(position) == layout_.unit_of(result.back().second)) {
      result.back().second = position;
    } else {
      if (!result.empty() && position <= result.back().second) throw std::logic_error("parameters to gather must come in increasing order");
      result.emplace_back(position, position);
    }
  }
  return result;
}

PartitionedParameters::Gathered PartitionedParameters::start_gather(std::span<const std::size_t> indices) {
  const OpScope op(device_, "gather", parameters_[positions_.at(indices.front())].name);
  Gathered gathered;
  gathered.indices.assign(indices.begin(), indices.end());
  for (const auto& [first, last] : runs(indices)) {
    const FlatRange run{layout_.parameter(first).begin, layout_.parameter(last).end};
    Tensor buffer = Tensor::empty(device_, {run.size()}, dtype_, MemoryCategory::parameters, "gathered." + parameters_[first].name);
    // This rank's block of the run from its partition; then every block from its owner, in place.
    const FlatRange mine = owned_.intersect(run);
    if (!mine.empty()) {
      Tensor slice = buffer.narrow(0, mine.begin - run.begin, mine.size());
      if (home_ != nullptr) {
        const auto start = std::chrono::steady_clock::now();
        home_->fetch({owned_.offset(mine.begin), mine.size()}, slice.data());
        fetch_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      } else {
        slice.copy_from(partition_.narrow(0, owned_.offset(mine.begin), mine.size()));
      }
    }
    const std::int64_t mine_at = mine.empty() ? 0 : mine.begin - run.begin;
    const void* input = static_cast<const std::byte*>(buffer.data()) + static_cast<std::size_t>(mine_at) * dtype_size(dtype_);
    gathered.requests.push_back(dp_.all_gather_async(input, buffer.data(), layout_.owned_counts(run), comm_data_type(dtype_)));
    for (std::size_t position = first; position <= last; ++position) {
      const FlatRange parameter = layout_.parameter(position);
      gathered.views.push_back(buffer.narrow(0, parameter.begin - run.begin, parameter.size()).reshape(parameters_[position].shape));
    }
    gathered.buffers.push_back(std::move(buffer));
    gathered.elements += run.size();
    ++gathers_;
  }
  return gathered;
}

PartitionedParameters::Gathered* PartitionedParameters::find(std::span<const std::size_t> indices) {
  for (Gathered& each : gathered_) {
    if (same(indices, each.indices)) return &each;
  }
  return nullptr;
}

std::int64_t PartitionedParameters::held_beyond_running() const {
  std::int64_t elements = 0;
  for (const Gathered& each : gathered_) {
    if (each.state != Gathered::State::acquired) elements += each.elements;
  }
  return elements;
}

std::int64_t PartitionedParameters::elements_of(std::span<const std::size_t> indices) const {
  std::int64_t elements = 0;
  for (const auto& [first, last] : runs(indices)) elements += layout_.parameter(last).end - layout_.parameter(first).begin;
  return elements;
}

void PartitionedParameters::erase(std::span<const std::size_t> indices) {
  std::erase_if(gathered_, [&](const Gathered& each) { return same(indices, each.indices); });
}

std::vector<Tensor> PartitionedParameters::acquire(std::span<const std::size_t> indices) {
  Gathered* gathered = find(indices);
  if (gathered == nullptr) {
    gathered_.push_back(start_gather(indices));
    gathered = &gathered_.back();
  }
  const auto start = std::chrono::steady_clock::now();
  for (const std::unique_ptr<CommRequest>& request : gathered->requests) request->wait();
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  gathered->requests.clear();
  gathered->state = Gathered::State::acquired;
  return gathered->views;
}

void PartitionedParameters::begin_step() {
  wait_seconds_ = fetch_seconds_ = 0;
  last_step_prefetched_ = std::move(prefetched_);
  prefetched_.clear();
}

void PartitionedParameters::prefetch(std::span<const std::size_t> indices) {
  const std::size_t position = prefetched_.size();
  prefetched_.emplace_back(indices.begin(), indices.end());
  if (find(indices) != nullptr) return;  // gathered already (kept from the forward, or prefetched)
  // One prefetch at most: a second while the first waits to be acquired is not started.
  if (std::any_of(gathered_.begin(), gathered_.end(), [](const Gathered& each) { return each.state == Gathered::State::prefetched; })) return;
  const bool gathering = policy_.prefetch && held_beyond_running() + elements_of(indices) <= policy_.max_live_elements;
  if (gathering) gathered_.push_back(start_gather(indices));
  read_ahead(position, indices, gathering);
}

void PartitionedParameters::read_ahead(std::size_t position, std::span<const std::size_t> indices, bool gathering) {
  // The home reads the layers after this one, as last step ran them, while this one's gather and the
  // running layer proceed (the first step, or a step that left last step's order, reads nothing ahead).
  if (home_ == nullptr || position >= last_step_prefetched_.size() || !same(indices, last_step_prefetched_[position])) return;
  std::vector<ElementRange> ahead;
  const std::size_t end = std::min(last_step_prefetched_.size(), position + 1 + kReadAheadLayers);
  for (std::size_t next = gathering ? position + 1 : position; next < end; ++next) {
    for (const ElementRange& range : owned_ranges(last_step_prefetched_[next])) ahead.push_back(range);
  }
  home_->read_ahead(ahead);
}

void PartitionedParameters::release(std::span<const std::size_t> indices, bool again) {
  Gathered* gathered = find(indices);
  if (gathered == nullptr || gathered->state != Gathered::State::acquired) {
    throw std::logic_error("parameters released that were not acquired (first index " + std::to_string(indices.empty() ? 0 : indices.front()) + ")");
  }
  // Kept for the backward, which acquires it again, unless that would hold more than the policy allows.
  if (again && !policy_.reshard_after_forward && held_beyond_running() + gathered->elements <= policy_.max_live_elements) {
    gathered->state = Gathered::State::kept;
    return;
  }
  erase(indices);
}

void PartitionedParameters::release_all() {
  for (Gathered& each : gathered_) {
    for (const std::unique_ptr<CommRequest>& request : each.requests) request->wait();
  }
  gathered_.clear();
}

std::int64_t PartitionedParameters::gathered_bytes(std::span<const std::size_t> indices) const {
  const AllocatorConfig& config = device_.allocator().config();
  std::int64_t bytes = 0;
  for (const auto& [first, last] : runs(indices)) {
    const FlatRange run{layout_.parameter(first).begin, layout_.parameter(last).end};
    bytes += static_cast<std::int64_t>(round_size(static_cast<std::size_t>(run.size()) * dtype_size(dtype_), config));
  }
  return bytes;
}

}  // namespace ferry
