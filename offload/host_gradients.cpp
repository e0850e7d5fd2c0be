#include "offload/host_gradients.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace ferry::offload {
namespace {

constexpr std::size_t kRowsAlignment = 64;  // the rows start on their own cache line after the ids

std::size_t ids_bytes_rounded(std::int64_t count) {
  const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(std::int32_t);
  return (bytes + kRowsAlignment - 1) / kRowsAlignment * kRowsAlignment;
}

}  // namespace

HostGradients::HostGradients(Device& device, const std::vector<std::int64_t>& numels, PinnedHostAllocator* pinned)
    : device_(device), pinned_(pinned), copy_stream_(device.create_stream()) {
  offsets_.reserve(numels.size() + 1);
  for (std::int64_t numel : numels) {
    offsets_.push_back(total_);
    total_ += numel;
  }
  offsets_.push_back(total_);
  if (device.has_storage()) values_ = HostBuffer(pinned_, static_cast<std::size_t>(total_) * sizeof(float), MemoryCategory::gradients);
  zero();
}

HostGradients::~HostGradients() {
  for (StagingSlot& slot : slots_) {
    if (!slot.pending) continue;
    try {
      device_.synchronize_event(slot.pending->copied);  // the copy still writes into the slot's buffer
      device_.release_event(slot.pending->copied);
    } catch (...) {  // a failing device at teardown: nothing left to save
    }
  }
}

std::span<float> HostGradients::region(std::size_t index) const {
  const std::int64_t begin = offsets_.at(index);
  return std::span<float>(values_.as<float>(), static_cast<std::size_t>(total_))
      .subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(offsets_.at(index + 1) - begin));
}

std::span<float> HostGradients::all() {
  complete_all();
  return {values_.as<float>(), static_cast<std::size_t>(total_)};
}

std::span<float> HostGradients::of(std::size_t index) {
  complete_all();
  return region(index);
}

void HostGradients::zero() {
  complete_all();
  if (values_.bytes() > 0) std::memset(values_.data(), 0, values_.bytes());
}

std::size_t HostGradients::buckets_in_flight() const {
  std::size_t count = 0;
  for (const StagingSlot& slot : slots_) count += slot.pending ? 1 : 0;
  return count;
}

HostGradients::StagingSlot& HostGradients::take_slot(std::size_t bytes) {
  StagingSlot& slot = slots_[next_slot_];
  complete(slot);
  if (device_.has_storage() && slot.buffer.bytes() < bytes) {  // meta copies nothing: no staging buffer
    slot.buffer = HostBuffer();  // give the smaller buffer back first
    slot.buffer = HostBuffer(pinned_, bytes, MemoryCategory::staging);
  }
  next_slot_ = (next_slot_ + 1) % kStagingSlots;
  return slot;
}

void HostGradients::copy_into(StagingSlot& slot, std::size_t offset, const Tensor& tensor) {
  const Event produced = device_.record_event(tensor.storage()->stream());
  device_.wait_event(copy_stream_, produced);
  device_.release_event(produced);
  device_.copy(static_cast<std::byte*>(slot.buffer.data()) + offset, tensor.data(), tensor.nbytes(), CopyKind::device_to_host,
               copy_stream_);
  bytes_received_ += static_cast<std::int64_t>(tensor.nbytes());
}

void HostGradients::complete(StagingSlot& slot) {
  if (!slot.pending) {
    slot.device_memory.clear();
    return;
  }
  const PendingBucket bucket = *slot.pending;
  slot.pending.reset();
  device_.synchronize_event(bucket.copied);
  device_.release_event(bucket.copied);
  slot.device_memory.clear();  // the copy has read it
  const std::span<float> target = region(bucket.index);
  if (bucket.rows < 0) {
    const float* source = slot.buffer.as<float>();
    float* destination = target.data() + bucket.offset;
    for (std::int64_t i = 0; i < bucket.count; ++i) destination[i] += source[i];
    return;
  }
  const auto* ids = static_cast<const std::int32_t*>(slot.buffer.data());
  const auto* rows = reinterpret_cast<const float*>(static_cast<const std::byte*>(slot.buffer.data()) + ids_bytes_rounded(bucket.rows));
  const std::int64_t width = bucket.width;
  const auto table_rows = static_cast<std::int64_t>(target.size()) / width;
  for (std::int64_t i = 0; i < bucket.rows; ++i) {  // every id first: a bad bucket adds nothing
    if (ids[i] < 0 || ids[i] >= table_rows) {
      throw std::out_of_range("embedding gradient row id " + std::to_string(ids[i]) + " outside the table of " +
                              std::to_string(table_rows) + " rows (parameter " + std::to_string(bucket.index) + ")");
    }
  }
  for (std::int64_t i = 0; i < bucket.rows; ++i) {
    float* destination = target.data() + static_cast<std::int64_t>(ids[i]) * width;
    const float* row = rows + i * width;
    for (std::int64_t c = 0; c < width; ++c) destination[c] += row[c];
  }
}

void HostGradients::complete_all() {
  // From the oldest bucket on, so the additions happen in the order the buckets came.
  for (std::size_t k = 0; k < kStagingSlots; ++k) complete(slots_[(next_slot_ + k) % kStagingSlots]);
}

void HostGradients::accumulate(std::size_t index, std::int64_t offset, const Tensor& gradient) {
  const std::int64_t count = gradient.numel();
  if (gradient.dtype() != DType::f32 || offset < 0 || offset + count > numel_of(index)) {
    throw std::invalid_argument("gradient piece of " + std::to_string(count) + " elements at " + std::to_string(offset) +
                                " does not fit parameter " + std::to_string(index) + " of " + std::to_string(numel_of(index)));
  }
  StagingSlot& slot = take_slot(gradient.nbytes());
  slot.device_memory = {gradient};
  if (!device_.has_storage()) return;  // meta: nothing to copy, the same device memory held as long
  copy_into(slot, 0, gradient);
  slot.pending = PendingBucket{device_.record_event(copy_stream_), index, offset, count, -1, 0};
}

void HostGradients::accumulate_rows(std::size_t index, const Tensor& ids, const Tensor& rows) {
  const std::int64_t n = rows.size(0), width = rows.size(1);
  if (ids.numel() != n || ids.dtype() != DType::i32 || rows.dtype() != DType::f32 || width <= 0 || numel_of(index) % width != 0) {
    throw std::invalid_argument("embedding gradient rows: " + std::to_string(ids.numel()) + " ids for " + std::to_string(n) +
                                " rows of " + std::to_string(width) + " for parameter " + std::to_string(index) + " of " +
                                std::to_string(numel_of(index)) + " elements");
  }
  StagingSlot& slot = take_slot(ids_bytes_rounded(n) + rows.nbytes());
  slot.device_memory = {ids, rows};
  if (!device_.has_storage()) return;
  copy_into(slot, 0, ids);
  copy_into(slot, ids_bytes_rounded(n), rows);
  slot.pending = PendingBucket{device_.record_event(copy_stream_), index, 0, 0, n, width};
}

}  // namespace ferry::offload
