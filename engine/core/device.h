// One device interface, three kinds: cpu (host compute; "device memory" is host memory behind a
// capacity limit), meta (shapes only: no memory, no compute, the same allocations), and cuda (a
// real GPU; built with CUDA). Every device owns its segment source, event source and caching
// allocator; streams and events exist on every kind (immediate on cpu and meta).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <typeindex>

#include "allocator/allocator_config.h"
#include "allocator/caching_allocator.h"
#include "allocator/event_source.h"
#include "allocator/segment_source.h"
#include "engine/core/op_recorder.h"

namespace ferry {

enum class DeviceKind : std::uint8_t { cpu, meta, cuda };

std::string_view device_kind_name(DeviceKind kind);
// Throws std::invalid_argument naming the text and the choices.
DeviceKind parse_device_kind(std::string_view name);

struct Stream {
  StreamId id = 0;  // 0: the device's default compute stream
  bool operator==(const Stream&) const = default;
};
struct Event {
  EventId id = 0;
};

enum class CopyKind : std::uint8_t { host_to_device, device_to_host, device_to_device };

// State a higher module keeps with one device (the cuda kernels' cuBLASLt handle): made on first use,
// destroyed with the device, before its allocator.
class DeviceAttachment {
 public:
  virtual ~DeviceAttachment() = default;
};

struct DeviceOptions {
  DeviceKind kind = DeviceKind::cpu;
  // Device memory the allocator may use. 0: cpu = physical memory, meta = unlimited (4 PiB), cuda = the GPU's.
  std::size_t memory_limit = 0;
  AllocatorConfig allocator_config = {};
  int cuda_device = 0;
  // meta: the kind whose memory it mirrors. cuda: expandable segments map the driver's pages (2 MiB, PyTorch's
  // 20 MiB in the large pool), as the cuda device's virtual-memory source does; cpu: the host's 64 KiB.
  DeviceKind meta_target = DeviceKind::cpu;
};

class Device {
 public:
  virtual ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual DeviceKind kind() const = 0;
  // False on meta: its addresses must never be dereferenced.
  virtual bool has_storage() const = 0;
  std::string name() const;

  CachingAllocator& allocator() { return *allocator_; }
  const CachingAllocator& allocator() const { return *allocator_; }
  std::size_t memory_limit() const { return source_->capacity(); }

  Stream default_stream() const { return Stream{0}; }
  virtual Stream create_stream() = 0;
  Event record_event(Stream stream) { return Event{events_->record(stream.id)}; }
  bool query_event(Event event) { return events_->query(event.id); }
  void synchronize_event(Event event) { events_->synchronize(event.id); }
  void release_event(Event event) { events_->release(event.id); }
  // Work queued on `stream` after this waits for `event`.
  virtual void wait_event(Stream stream, Event event) = 0;
  virtual void synchronize(Stream stream) = 0;
  virtual void synchronize() = 0;
  // The native handle of `stream`, for libraries that queue work of their own (NCCL orders its
  // collectives after the compute stream): a cudaStream_t on cuda; null on host kinds.
  virtual void* native_stream_handle(Stream stream) const {
    (void)stream;
    return nullptr;
  }

  // Copies `bytes` on `stream` (an op in profiles); the host side must stay valid until the stream
  // reaches the copy.
  void copy(void* destination, const void* source, std::size_t bytes, CopyKind kind, Stream stream);
  virtual void fill_zero(void* destination, std::size_t bytes, Stream stream) = 0;

  // The device's one T (a DeviceAttachment), made by make() on the first call.
  template <typename T>
  T& attachment(const std::function<std::unique_ptr<T>()>& make) {
    return static_cast<T&>(attachment(std::type_index(typeid(T)), [&]() -> std::unique_ptr<DeviceAttachment> { return make(); }));
  }

  // Op markers for memory profiles (disabled unless a profile is recording).
  OpRecorder& op_recorder() { return op_recorder_; }
  const OpRecorder& op_recorder() const { return op_recorder_; }

 protected:
  Device() = default;
  virtual void copy_on_stream(void* destination, const void* source, std::size_t bytes, CopyKind kind, Stream stream) = 0;
  // Called by each kind's constructor once its sources exist.
  void initialize(std::unique_ptr<EventSource> events, std::unique_ptr<SegmentSource> source,
                  const AllocatorConfig& config);

 private:
  DeviceAttachment& attachment(std::type_index type, const std::function<std::unique_ptr<DeviceAttachment>()>& make);

  // Declaration order is destruction order in reverse: the allocator goes first.
  std::unique_ptr<EventSource> events_;
  std::unique_ptr<SegmentSource> source_;
  std::unique_ptr<CachingAllocator> allocator_;
  OpRecorder op_recorder_;
  std::mutex attachments_mutex_;
  std::map<std::type_index, std::unique_ptr<DeviceAttachment>> attachments_;
};

std::string_view copy_kind_name(CopyKind kind);

std::unique_ptr<Device> create_device(const DeviceOptions& options);

// The allocator's settings for a device of kind `target`, those FERRY_ALLOC_CONF left unset chosen by
// the kind: expandable segments on cpu and meta (varied-length GPT traces reserve 1.01x their live peak
// with them, 1.16x with fixed segments: docs/benchmarks.md), fixed segments on cuda (PyTorch's
// default; ferry's virtual-memory source has not run on a GPU yet). A meta device standing in for
// another kind gets the plan's settings, resolved for that kind, so its dry run predicts that kind's.
AllocatorConfig with_device_defaults(AllocatorConfig config, DeviceKind target);

// True when this build has the cuda device and a GPU is present.
bool cuda_available();

}  // namespace ferry
