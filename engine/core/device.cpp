#include "engine/core/device.h"

#include <stdexcept>

#include "allocator/byte_size.h"

#include "engine/core/cpu_device.h"
#ifdef FERRY_HAVE_CUDA
#include "allocator/cuda_check.h"
#include "engine/core/cuda_device.h"
#endif

namespace ferry {

std::string_view device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::meta: return "meta";
    case DeviceKind::cuda: return "cuda";
  }
  return "unknown";
}

DeviceKind parse_device_kind(std::string_view name) {
  if (name == "cpu") return DeviceKind::cpu;
  if (name == "meta") return DeviceKind::meta;
  if (name == "cuda") return DeviceKind::cuda;
  throw std::invalid_argument("unknown device '" + std::string(name) + "' (choose cpu, meta or cuda)");
}

Device::~Device() = default;

std::string_view copy_kind_name(CopyKind kind) {
  switch (kind) {
    case CopyKind::host_to_device: return "host_to_device";
    case CopyKind::device_to_host: return "device_to_host";
    case CopyKind::device_to_device: return "device_to_device";
  }
  return "unknown";
}

void Device::copy(void* destination, const void* source, std::size_t bytes, CopyKind kind, Stream stream) {
  const OpScope op(*this, "copy", op_recorder_.enabled() ? "copy " + std::string(copy_kind_name(kind)) + " " + format_bytes(bytes) : std::string(),
                   stream.id);
  copy_on_stream(destination, source, bytes, kind, stream);
}

DeviceAttachment& Device::attachment(std::type_index type, const std::function<std::unique_ptr<DeviceAttachment>()>& make) {
  const std::lock_guard lock(attachments_mutex_);
  std::unique_ptr<DeviceAttachment>& slot = attachments_[type];
  if (!slot) slot = make();
  return *slot;
}

std::string Device::name() const { return std::string(device_kind_name(kind())); }

void Device::initialize(std::unique_ptr<EventSource> events, std::unique_ptr<SegmentSource> source,
                        const AllocatorConfig& config) {
  events_ = std::move(events);
  source_ = std::move(source);
  allocator_ = std::make_unique<CachingAllocator>(*source_, *events_, with_device_defaults(config, kind()));
}

AllocatorConfig with_device_defaults(AllocatorConfig config, DeviceKind target) {
  if (config.expandable_segments_set) return config;
  config.expandable_segments = target != DeviceKind::cuda;
  config.expandable_segments_set = true;
  return config;
}

bool cuda_available() {
#ifdef FERRY_HAVE_CUDA
  return cuda_device_available();
#else
  return false;
#endif
}

std::unique_ptr<Device> create_device(const DeviceOptions& options) {
  switch (options.kind) {
    case DeviceKind::cpu:
    case DeviceKind::meta:
      return std::make_unique<HostDevice>(options);
    case DeviceKind::cuda:
#ifdef FERRY_HAVE_CUDA
      if (!cuda_device_available()) {
        throw std::runtime_error("--device cuda: no GPU is visible (cudaGetDeviceCount found none); use --device cpu");
      }
      return std::make_unique<CudaDevice>(options);
#else
      throw std::runtime_error("--device cuda: this ferry was built without CUDA; rebuild where nvcc is found, "
                               "or use --device cpu");
#endif
  }
  throw std::invalid_argument("unknown device kind");
}

}  // namespace ferry
