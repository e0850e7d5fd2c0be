// The host-backed device kinds: cpu (real host memory behind a capacity limit, work runs at once)
// and meta (the same allocations over bare addresses, no memory and no work).
#pragma once

#include "engine/core/device.h"

namespace ferry {

class HostDevice final : public Device {
 public:
  explicit HostDevice(const DeviceOptions& options);
  // A host device over a given segment source (a test's, wrapping the cpu or meta one).
  HostDevice(DeviceKind kind, std::unique_ptr<SegmentSource> source, const AllocatorConfig& config);

  DeviceKind kind() const override { return kind_; }
  bool has_storage() const override { return kind_ == DeviceKind::cpu; }
  Stream create_stream() override { return Stream{++last_stream_}; }
  void wait_event(Stream, Event) override {}
  void synchronize(Stream) override {}
  void synchronize() override {}
  void fill_zero(void* destination, std::size_t bytes, Stream stream) override;

 protected:
  void copy_on_stream(void* destination, const void* source, std::size_t bytes, CopyKind kind, Stream stream) override;

 private:
  DeviceKind kind_;
  StreamId last_stream_ = 0;
};

// Physical memory of this machine in bytes.
std::size_t physical_memory_bytes();
// The most host memory this process has held resident so far (getrusage's ru_maxrss), in bytes: where
// offloaded state and staging live, beside what the allocators count.
std::size_t peak_resident_bytes();

}  // namespace ferry
