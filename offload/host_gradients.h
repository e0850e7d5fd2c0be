// HostGradients: the GradientSink of ZeRO-Offload. Each gradient bucket backward hands over is copied
// device-to-host on a copy stream into a staging buffer and added into one flat f32 gradient array in
// host memory (parameters laid end to end), so the device never holds a whole gradient copy.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/gradient_sink.h"
#include "offload/host_buffer.h"

namespace ferry::offload {

class HostGradients : public GradientSink {
 public:
  // numels[i]: the element count of parameter i. pinned == nullptr keeps pageable host memory.
  HostGradients(Device& device, const std::vector<std::int64_t>& numels, PinnedHostAllocator* pinned);

  void accumulate(std::size_t index, std::int64_t offset, const Tensor& gradient) override;
  void accumulate_rows(std::size_t index, const Tensor& ids, const Tensor& rows) override;

  // Zeroes every gradient (the start of an optimizer step).
  void zero();
  std::span<float> all() const { return {values_.as<float>(), static_cast<std::size_t>(total_)}; }
  std::span<float> of(std::size_t index) const;
  std::int64_t offset_of(std::size_t index) const { return offsets_.at(index); }
  std::int64_t total() const { return total_; }
  // Bytes moved device-to-host since construction.
  std::int64_t bytes_received() const { return bytes_received_; }

 private:
  // Copies `bytes` of a device tensor's memory into the staging buffer (grown on demand) and waits.
  const void* receive(const Tensor& tensor);

  Device& device_;
  PinnedHostAllocator* pinned_;
  Stream copy_stream_;
  std::vector<std::int64_t> offsets_;  // offsets_[i]: where parameter i starts; offsets_.back() = total
  std::int64_t total_ = 0;
  HostBuffer values_;
  HostBuffer staging_;
  std::int64_t bytes_received_ = 0;
};

}  // namespace ferry::offload
