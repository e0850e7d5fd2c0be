// ParameterHome: where a ZeRO-3 rank's parameter partition lives when it is not on the device
// (ZeRO-Infinity's offload_param; offload/parameter_home.h makes them: pinned host memory, an NVMe file).
// The stage-3 provider fetches a layer's slice from it into the gather buffer; the optimizer stores the
// updated partition back, in order, during its step.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "engine/core/dtype.h"

namespace ferry {

// Elements [begin, begin + count) of a partition.
struct ElementRange {
  std::int64_t begin = 0;
  std::int64_t count = 0;
};

class ParameterHome {
 public:
  virtual ~ParameterHome() = default;
  virtual std::string name() const = 0;  // "cpu" or "nvme"
  std::int64_t elements() const { return elements_; }
  DType dtype() const { return dtype_; }

  // A hint: `ranges` will be fetched next, in this order. An NVMe home reads as many of them, from the
  // first, as its free buffers hold, keeps what it read ahead before that is still asked for, and drops
  // the rest; host memory needs none.
  virtual void read_ahead(std::span<const ElementRange> ranges) { (void)ranges; }
  // Copies `range` to `destination` (device memory) on the device's default stream; returns once the
  // copy is queued and the home's host memory is free again.
  virtual void fetch(ElementRange range, void* destination) = 0;
  // The updated partition, in order: each pass stores [0, elements()) in consecutive ranges (a store at 0
  // starts a pass). Values are in dtype(), in host memory, and may be reused once store() returns.
  virtual void store(ElementRange range, const void* values) = 0;
  // Waits until the pass is written; throws when it did not cover the partition.
  virtual void flush() = 0;
  // Host memory the home holds (pinned unless pin_memory is off): the partition, or the NVMe buffers.
  virtual std::int64_t host_bytes() const = 0;
  virtual std::uint64_t nvme_bytes() const { return 0; }
  // Bytes read from NVMe since construction, and the part of them fetch() read itself (not ahead).
  virtual std::uint64_t bytes_read() const { return 0; }
  virtual std::uint64_t bytes_read_on_fetch() const { return 0; }

 protected:
  ParameterHome(std::int64_t elements, DType dtype) : elements_(elements), dtype_(dtype) {}

 private:
  std::int64_t elements_;
  DType dtype_;
};

}  // namespace ferry
