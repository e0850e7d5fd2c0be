// ParameterOffload: a ZeRO-3 rank's parameter partition off the device (ZeRO-Infinity's offload_param)
// with what holds it: a pinned allocator of its own (its bytes counted apart from the optimizer's) and,
// on nvme, a store in the rank's directory. On meta (a dry run) the partition is nowhere: the device's
// memory is all a dry run predicts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "allocator/pinned_host_allocator.h"
#include "engine/core/device.h"
#include "offload/nvme_store.h"
#include "offload/parameter_home.h"

namespace ferry::offload {

struct ParameterOffloadSettings {
  bool nvme = false;                  // false: pinned host memory
  std::string nvme_path;              // nvme: the rank's directory (the optimizer's file beside it)
  bool pin_memory = true;
  int buffer_count = 5;               // nvme: host buffers (DeepSpeed's buffer_count)
  std::size_t buffer_bytes = std::size_t{16} << 20;  // nvme: each buffer
  unsigned queue_depth = 32;
  std::size_t chunk_bytes = std::size_t{1} << 20;
};

class ParameterOffload {
 public:
  ParameterOffload(Device& device, std::int64_t elements, DType dtype, const ParameterOffloadSettings& settings);
  ~ParameterOffload();
  ParameterOffload(const ParameterOffload&) = delete;
  ParameterOffload& operator=(const ParameterOffload&) = delete;

  ParameterHome& home() { return *home_; }
  const ParameterHome& home() const { return *home_; }
  const ParameterOffloadSettings& settings() const { return settings_; }
  // The most pinned host memory the partition's home held (0 with pin_memory off or on meta).
  std::int64_t host_pinned_peak() const;

 private:
  ParameterOffloadSettings settings_;
  std::unique_ptr<PinnedHostAllocator> pinned_;
  std::unique_ptr<NvmeStore> store_;
  std::unique_ptr<ParameterHome> home_;
};

}  // namespace ferry::offload
