#include "engine/core/cpu_device.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

#include "allocator/range_segment_source.h"

namespace ferry {

namespace {
// A dry run without a limit measures: 4 PiB stands for unlimited (every address still fits in 64 bits).
constexpr std::size_t kDefaultMetaMemory = std::size_t{1} << 52;
}

std::size_t physical_memory_bytes() {
  return static_cast<std::size_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

std::size_t peak_resident_bytes() {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<std::size_t>(usage.ru_maxrss) * 1024;  // Linux reports kilobytes
}

HostDevice::HostDevice(const DeviceOptions& options) : kind_(options.kind) {
  std::unique_ptr<SegmentSource> source;
  if (kind_ == DeviceKind::cpu) {
    source = std::make_unique<HostSegmentSource>(options.memory_limit != 0 ? options.memory_limit
                                                                           : physical_memory_bytes());
  } else {
    source = std::make_unique<AddressSpaceSegmentSource>(options.memory_limit != 0 ? options.memory_limit : kDefaultMetaMemory,
                                                         /*cuda_pages=*/options.meta_target == DeviceKind::cuda);
  }
  initialize(std::make_unique<ImmediateEventSource>(), std::move(source), options.allocator_config);
}

HostDevice::HostDevice(DeviceKind kind, std::unique_ptr<SegmentSource> source, const AllocatorConfig& config) : kind_(kind) {
  if (kind != DeviceKind::cpu && kind != DeviceKind::meta) throw std::invalid_argument("a host device is cpu or meta");
  initialize(std::make_unique<ImmediateEventSource>(), std::move(source), config);
}

void HostDevice::copy_on_stream(void* destination, const void* source, std::size_t bytes, CopyKind, Stream) {
  if (kind_ == DeviceKind::meta || bytes == 0) return;
  std::memmove(destination, source, bytes);
}

void HostDevice::fill_zero(void* destination, std::size_t bytes, Stream) {
  if (kind_ == DeviceKind::meta || bytes == 0) return;
  std::memset(destination, 0, bytes);
}

}  // namespace ferry
