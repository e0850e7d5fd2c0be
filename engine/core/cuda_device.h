// The cuda device: a GPU with real streams (non-blocking, one compute stream plus any number of copy
// streams), events, and device memory from cudaMalloc or, with expandable_segments, CUDA virtual
// memory. Built only with CUDA.
#pragma once

#include <cuda_runtime.h>

#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/core/device.h"

namespace ferry {

// Streams by id and events recorded on them; the allocator's EventSource on a GPU.
class CudaStreams final : public EventSource {
 public:
  explicit CudaStreams(int device);
  ~CudaStreams() override;
  CudaStreams(const CudaStreams&) = delete;
  CudaStreams& operator=(const CudaStreams&) = delete;

  StreamId create();
  cudaStream_t stream(StreamId id) const;

  EventId record(StreamId stream) override;
  bool query(EventId event) override;
  void synchronize(EventId event) override;
  void release(EventId event) override;
  cudaEvent_t event(EventId id) const;

 private:
  int device_;
  mutable std::mutex mutex_;
  std::vector<cudaStream_t> streams_;  // index = StreamId
  std::unordered_map<EventId, cudaEvent_t> events_;
  std::vector<cudaEvent_t> spare_events_;
  EventId last_event_ = 0;
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(const DeviceOptions& options);
  ~CudaDevice() override;

  DeviceKind kind() const override { return DeviceKind::cuda; }
  bool has_storage() const override { return true; }
  Stream create_stream() override;
  void wait_event(Stream stream, Event event) override;
  void synchronize(Stream stream) override;
  void synchronize() override;
  void fill_zero(void* destination, std::size_t bytes, Stream stream) override;
  cudaStream_t native_stream(Stream stream) const { return streams_->stream(stream.id); }
  void* native_stream_handle(Stream stream) const override { return native_stream(stream); }
  int ordinal() const { return ordinal_; }

 protected:
  void copy_on_stream(void* destination, const void* source, std::size_t bytes, CopyKind kind, Stream stream) override;

 private:
  int ordinal_;
  CudaStreams* streams_;  // owned by the base class as its event source
};

}  // namespace ferry
