#include "offload/host_gradients.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace ferry::offload {

HostGradients::HostGradients(Device& device, const std::vector<std::int64_t>& numels, PinnedHostAllocator* pinned)
    : device_(device), pinned_(pinned), copy_stream_(device.create_stream()) {
  offsets_.reserve(numels.size() + 1);
  for (std::int64_t numel : numels) {
    offsets_.push_back(total_);
    total_ += numel;
  }
  offsets_.push_back(total_);
  values_ = HostBuffer(pinned_, static_cast<std::size_t>(total_) * sizeof(float), MemoryCategory::gradients);
  zero();
}

std::span<float> HostGradients::of(std::size_t index) const {
  const std::int64_t begin = offsets_.at(index);
  return all().subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(offsets_.at(index + 1) - begin));
}

void HostGradients::zero() {
  if (total_ > 0) std::memset(values_.data(), 0, values_.bytes());
}

const void* HostGradients::receive(const Tensor& tensor) {
  const std::size_t bytes = tensor.nbytes();
  if (staging_.bytes() < bytes) {
    staging_ = HostBuffer();  // give the smaller buffer back first
    staging_ = HostBuffer(pinned_, bytes, MemoryCategory::staging);
  }
  // The copy stream waits for the compute that produced the bucket, and the host waits for the copy
  // (it adds the values next), so the bucket is free to go when this returns.
  const Event produced = device_.record_event(tensor.storage()->stream());
  device_.wait_event(copy_stream_, produced);
  device_.release_event(produced);
  device_.copy(staging_.data(), tensor.data(), bytes, CopyKind::device_to_host, copy_stream_);
  device_.synchronize(copy_stream_);
  bytes_received_ += static_cast<std::int64_t>(bytes);
  return staging_.data();
}

void HostGradients::accumulate(std::size_t index, std::int64_t offset, const Tensor& gradient) {
  const std::span<float> target = of(index);
  const std::int64_t count = gradient.numel();
  if (gradient.dtype() != DType::f32 || offset < 0 || offset + count > static_cast<std::int64_t>(target.size())) {
    throw std::invalid_argument("gradient piece of " + std::to_string(count) + " elements at " + std::to_string(offset) +
                                " does not fit parameter " + std::to_string(index) + " of " + std::to_string(target.size()));
  }
  if (!device_.has_storage()) return;
  const float* source = static_cast<const float*>(receive(gradient));
  float* destination = target.data() + offset;
  for (std::int64_t i = 0; i < count; ++i) destination[i] += source[i];
}

void HostGradients::accumulate_rows(std::size_t index, const Tensor& ids, const Tensor& rows) {
  const std::span<float> target = of(index);
  const std::int64_t n = rows.size(0), width = rows.size(1);
  if (ids.numel() != n || ids.dtype() != DType::i32 || rows.dtype() != DType::f32) {
    throw std::invalid_argument("embedding gradient rows: " + std::to_string(ids.numel()) + " ids for " + std::to_string(n) + " rows");
  }
  if (!device_.has_storage()) return;
  std::vector<std::int32_t> host_ids(static_cast<std::size_t>(n));
  std::memcpy(host_ids.data(), receive(ids), ids.nbytes());
  const float* source = static_cast<const float*>(receive(rows));
  const auto table_rows = static_cast<std::int64_t>(target.size()) / width;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t id = host_ids[static_cast<std::size_t>(i)];
    if (id < 0 || id >= table_rows) throw std::out_of_range("embedding gradient row id " + std::to_string(id) + " outside the table");
    float* destination = target.data() + static_cast<std::int64_t>(id) * width;
    const float* row = source + i * width;
    for (std::int64_t c = 0; c < width; ++c) destination[c] += row[c];
  }
}

}  // namespace ferry::offload
