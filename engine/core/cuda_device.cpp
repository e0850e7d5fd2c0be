#include "engine/core/cuda_device.h"

#include <stdexcept>

#include "allocator/cuda_check.h"
#include "allocator/cuda_segment_sources.h"

namespace ferry {

CudaStreams::CudaStreams(int device) : device_(device) {
  FERRY_CUDA_CHECK(cudaSetDevice(device_));
  create();  // stream 0: the compute stream
}

CudaStreams::~CudaStreams() {
  cudaSetDevice(device_);
  for (auto& [id, event] : events_) cudaEventDestroy(event);
  for (cudaEvent_t event : spare_events_) cudaEventDestroy(event);
  for (cudaStream_t stream : streams_) cudaStreamDestroy(stream);
}

StreamId CudaStreams::create() {
  std::lock_guard lock(mutex_);
  cudaStream_t stream = nullptr;
  FERRY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  streams_.push_back(stream);
  return streams_.size() - 1;
}

cudaStream_t CudaStreams::stream(StreamId id) const {
  std::lock_guard lock(mutex_);
  if (id >= streams_.size()) throw std::out_of_range("unknown cuda stream id " + std::to_string(id));
  return streams_[id];
}

EventId CudaStreams::record(StreamId stream_id) {
  cudaStream_t native = stream(stream_id);
  std::lock_guard lock(mutex_);
  cudaEvent_t event = nullptr;
  if (!spare_events_.empty()) {
    event = spare_events_.back();
    spare_events_.pop_back();
  } else {
    FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  FERRY_CUDA_CHECK(cudaEventRecord(event, native));
  events_.emplace(++last_event_, event);
  return last_event_;
}

cudaEvent_t CudaStreams::event(EventId id) const {
  std::lock_guard lock(mutex_);
  auto it = events_.find(id);
  if (it == events_.end()) throw std::out_of_range("unknown cuda event id " + std::to_string(id));
  return it->second;
}

bool CudaStreams::query(EventId id) {
  const cudaError_t status = cudaEventQuery(event(id));
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  FERRY_CUDA_CHECK(status);
  return true;
}

void CudaStreams::synchronize(EventId id) { FERRY_CUDA_CHECK(cudaEventSynchronize(event(id))); }

void CudaStreams::release(EventId id) {
  std::lock_guard lock(mutex_);
  auto it = events_.find(id);
  if (it == events_.end()) return;
  spare_events_.push_back(it->second);
  events_.erase(it);
}

CudaDevice::CudaDevice(const DeviceOptions& options) : ordinal_(options.cuda_device) {
  auto streams = std::make_unique<CudaStreams>(ordinal_);
  streams_ = streams.get();
  std::unique_ptr<SegmentSource> source;
  if (options.allocator_config.expandable_segments) {
    source = std::make_unique<CudaVirtualMemorySource>(ordinal_, options.memory_limit);
  } else {
    source = std::make_unique<CudaMallocSegmentSource>(ordinal_, options.memory_limit);
  }
  initialize(std::move(streams), std::move(source), options.allocator_config);
}

CudaDevice::~CudaDevice() { cudaDeviceSynchronize(); }

Stream CudaDevice::create_stream() { return Stream{streams_->create()}; }

void CudaDevice::wait_event(Stream stream, Event event) {
  FERRY_CUDA_CHECK(cudaStreamWaitEvent(streams_->stream(stream.id), streams_->event(event.id), 0));
}

void CudaDevice::synchronize(Stream stream) { FERRY_CUDA_CHECK(cudaStreamSynchronize(streams_->stream(stream.id))); }

void CudaDevice::synchronize() {
  FERRY_CUDA_CHECK(cudaSetDevice(ordinal_));
  FERRY_CUDA_CHECK(cudaDeviceSynchronize());
}

void CudaDevice::copy_on_stream(void* destination, const void* source, std::size_t bytes, CopyKind kind, Stream stream) {
  if (bytes == 0) return;
  const cudaMemcpyKind native = kind == CopyKind::host_to_device   ? cudaMemcpyHostToDevice
                                : kind == CopyKind::device_to_host ? cudaMemcpyDeviceToHost
                                                                   : cudaMemcpyDeviceToDevice;
  FERRY_CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, native, streams_->stream(stream.id)));
}

void CudaDevice::fill_zero(void* destination, std::size_t bytes, Stream stream) {
  if (bytes == 0) return;
  FERRY_CUDA_CHECK(cudaMemsetAsync(destination, 0, bytes, streams_->stream(stream.id)));
}

}  // namespace ferry
