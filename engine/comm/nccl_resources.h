// The NCCL backend's owned handles, each released exactly once by its destructor (which never
// throws): a CUDA stream, a CUDA event, an NCCL communicator (destroyed, or aborted when its work
// cannot finish), and a guard that makes a device current and restores the caller's. Private to
// engine/comm; built only with NCCL.
#pragma once

#include <utility>

#include "engine/comm/nccl_check.h"

namespace ferry {

// The GPU a rank uses: `device_ordinal` (checked against the visible devices), or, when that is
// kChooseDeviceByLocalRank, `local_rank` modulo the visible devices. Throws CommunicationError when none is visible.
int choose_cuda_device(int local_rank, int device_ordinal);

// Makes `device` current for its lifetime and then restores the device that was current before.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device) {
    FERRY_NCCL_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device_) FERRY_NCCL_CUDA_CHECK(cudaSetDevice(device_));
  }
  ~DeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

// A non-blocking stream of `device` (it does not wait for the legacy default stream).
class CudaStream {
 public:
  explicit CudaStream(int device) {
    const DeviceGuard guard(device);
    FERRY_NCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaStream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);  // work still queued finishes first
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// An event of `device`, without timing (the cheapest kind to record and query) unless `timing`.
class CudaEvent {
 public:
  explicit CudaEvent(int device, bool timing = false) {
    const DeviceGuard guard(device);
    FERRY_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~CudaEvent() {
    if (event_ != nullptr) cudaEventDestroy(event_);  // a pending event is released once it completes
  }
  CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  CudaEvent& operator=(CudaEvent&&) = delete;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// One rank's handle of an NCCL communicator: ncclCommDestroy when it dies, unless aborted before.
class NcclComm {
 public:
  NcclComm() = default;
  explicit NcclComm(ncclComm_t comm) : comm_(comm) {}
  ~NcclComm() {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  NcclComm(NcclComm&& other) noexcept : comm_(std::exchange(other.comm_, nullptr)) {}
  NcclComm& operator=(NcclComm&& other) noexcept {
    if (this != &other) {
      if (comm_ != nullptr) ncclCommDestroy(comm_);
      comm_ = std::exchange(other.comm_, nullptr);
    }
    return *this;
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  explicit operator bool() const { return comm_ != nullptr; }
  // ncclCommAbort: stops the communicator's kernels (pending operations end unfinished) and frees it.
  void abort() noexcept {
    if (comm_ != nullptr) ncclCommAbort(std::exchange(comm_, nullptr));
  }

 private:
  ncclComm_t comm_ = nullptr;
};

}  // namespace ferry
