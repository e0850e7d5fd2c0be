// The parameter homes of ZeRO-Infinity's offload_param (engine/core/parameter_home.h): pinned host memory,
// or an NVMe file read through a fixed set of host buffers. A layer's slice is fetched to the device just
// before its all-gather (the NVMe home may read it ahead, while the layer before computes); the optimizer
// stores the updated partition back, in order, during its step.
#pragma once

#include <cstdint>
#include <memory>

#include "allocator/pinned_host_allocator.h"
#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/parameter_home.h"

namespace ferry::offload {

class NvmeStore;

// The partition in host memory (pinned unless pinned == nullptr), category parameters.
std::unique_ptr<ParameterHome> make_host_parameter_home(Device& device, std::int64_t elements, DType dtype, PinnedHostAllocator* pinned);

// A dry run's (meta): it holds and moves nothing, as meta's kernels compute nothing.
std::unique_ptr<ParameterHome> make_dry_parameter_home(std::int64_t elements, DType dtype);

// The partition in one file of `store` (named parameters.bin, unlinked at once: checkpoints hold the
// durable copy), moved through `buffer_count` host buffers of `buffer_bytes` each (rounded down to whole
// I/O chunks, at least one): the only host memory it holds, whatever the partition's size.
std::unique_ptr<ParameterHome> make_nvme_parameter_home(Device& device, NvmeStore& store, std::int64_t elements, DType dtype, int buffer_count,
                                                        std::size_t buffer_bytes, PinnedHostAllocator* pinned);

}  // namespace ferry::offload
