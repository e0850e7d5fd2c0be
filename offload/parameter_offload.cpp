#include "offload/parameter_offload.h"

#include <stdexcept>

namespace ferry::offload {

ParameterOffload::ParameterOffload(Device& device, std::int64_t elements, DType dtype, const ParameterOffloadSettings& settings)
    : settings_(settings) {
  if (!device.has_storage()) {
    home_ = make_dry_parameter_home(elements, dtype);
    return;
  }
  if (settings.pin_memory) pinned_ = std::make_unique<PinnedHostAllocator>();
  if (!settings.nvme) {
    home_ = make_host_parameter_home(device, elements, dtype, pinned_.get());
    return;
  }
  if (settings.nvme_path.empty()) throw std::invalid_argument("--offload-param nvme needs --nvme-path DIR (a directory on an NVMe drive)");
  store_ = std::make_unique<NvmeStore>(nvme_store_options(settings.nvme_path, settings.queue_depth, settings.chunk_bytes));
  home_ = make_nvme_parameter_home(device, *store_, elements, dtype, settings.buffer_count, settings.buffer_bytes, pinned_.get());
}

ParameterOffload::~ParameterOffload() = default;

std::int64_t ParameterOffload::host_pinned_peak() const { return pinned_ ? pinned_->statistics().allocated_bytes.peak : 0; }

}  // namespace ferry::offload
