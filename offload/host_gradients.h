// HostGradients: the GradientSink of ZeRO-Offload. Each gradient bucket backward hands over is copied
// device-to-host on a copy stream into one of a few staging slots and added into one flat f32 gradient
// array in host memory (parameters laid end to end), so the device never holds a whole gradient copy.
// The copy overlaps compute: the host adds a bucket only when its slot comes round again or when the
// gradients are read. The slot holds the bucket's device memory until then, on every device kind, so
// what a run holds follows program order, never a copy's speed; on meta (a dry run) it holds the same
// device memory and nothing on the host (seen on an H200: freeing a bucket when its copy ended left
// 32 MiB more reserved than the dry run predicted).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
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
  // Waits for copies still in flight into the staging slots.
  ~HostGradients() override;
  HostGradients(const HostGradients&) = delete;
  HostGradients& operator=(const HostGradients&) = delete;

  void accumulate(std::size_t index, std::int64_t offset, const Tensor& gradient) override;
  void accumulate_rows(std::size_t index, const Tensor& ids, const Tensor& rows) override;

  // Zeroes every gradient (the start of an optimizer step).
  void zero();
  // Waits for the copies in flight, adds their buckets in and lets their device memory go (what reading
  // the gradients does first; a dry run calls it where a run reads them).
  void complete_all();
  // The gradients, every bucket handed over so far added in (waits for the copies in flight).
  std::span<float> all();
  std::span<float> of(std::size_t index);
  std::int64_t offset_of(std::size_t index) const { return offsets_.at(index); }
  std::int64_t total() const { return total_; }
  // Bytes moved device-to-host since construction.
  std::int64_t bytes_received() const { return bytes_received_; }
  // Buckets copied whose host-side addition has not happened yet (at most kStagingSlots).
  std::size_t buckets_in_flight() const;

  // Staging slots: bucket i + kStagingSlots waits for bucket i's copy, so up to this many copies
  // overlap the compute that follows them.
  static constexpr std::size_t kStagingSlots = 2;

 private:
  // A bucket copied into a slot, to be added into the gradients once the copy is done.
  struct PendingBucket {
    Event copied;
    std::size_t index = 0;
    std::int64_t offset = 0;      // a piece: elements [offset, offset + count) of parameter `index`
    std::int64_t count = 0;
    std::int64_t rows = -1;       // >= 0: an embedding's rows ([rows, width], after `rows` i32 ids)
    std::int64_t width = 0;
  };
  struct StagingSlot {
    HostBuffer buffer;
    std::optional<PendingBucket> pending;
    std::vector<Tensor> device_memory;  // the bucket's device tensors, held until the slot completes
  };

  std::span<float> region(std::size_t index) const;
  // The next slot, its previous bucket added in and its buffer at least `bytes` long.
  StagingSlot& take_slot(std::size_t bytes);
  // Queues a copy of `tensor` into `slot` at `offset` bytes, after the compute that produced it.
  void copy_into(StagingSlot& slot, std::size_t offset, const Tensor& tensor);
  // Waits for the slot's copy, lets the bucket's device memory go and adds the bucket into the gradients.
  void complete(StagingSlot& slot);
  std::int64_t numel_of(std::size_t index) const { return offsets_.at(index + 1) - offsets_.at(index); }

  Device& device_;
  PinnedHostAllocator* pinned_;
  Stream copy_stream_;
  std::vector<std::int64_t> offsets_;  // offsets_[i]: where parameter i starts; offsets_.back() = total
  std::int64_t total_ = 0;
  HostBuffer values_;
  std::array<StagingSlot, kStagingSlots> slots_;
  std::size_t next_slot_ = 0;  // the slot the next bucket takes: the oldest pending one
  std::int64_t bytes_received_ = 0;
};

}  // namespace ferry::offload
