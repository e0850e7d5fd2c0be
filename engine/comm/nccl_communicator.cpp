// NcclCommunicatorImpl's lifetime, its creation over a bootstrap communicator (the unique id made on
// rank 0 and broadcast; every rank's readiness shared before ncclCommInitRank), groups (ncclCommSplit,
// or a new unique id over the bootstrap's group before NCCL 2.18), waiting for requests under the
// timeout, and failure: ncclCommAbort, after which every operation throws.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <thread>

#include "engine/comm/host_staged_communicator.h"
#include "engine/comm/nccl_check.h"
#include "engine/comm/nccl_communicator_impl.h"
#include "engine/comm/nccl_loader.h"
#include "engine/comm/poll_pause.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

// The device this rank uses: `device_ordinal`, or local_rank modulo the visible devices.
int choose_cuda_device(int local_rank, int device_ordinal) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw CommunicationError(std::string("no CUDA device: cudaGetDeviceCount failed: ") + cudaGetErrorName(status) +
                             " (" + cudaGetErrorString(status) + ")");
  }
  if (count == 0) throw CommunicationError("no CUDA device is visible to this process");
  if (device_ordinal == kChooseDeviceByLocalRank) return local_rank % count;
  if (device_ordinal < 0 || device_ordinal >= count) {
    throw CommunicationError("device ordinal " + std::to_string(device_ordinal) + " is not one of the " +
                             std::to_string(count) + " visible CUDA devices");
  }
  return device_ordinal;
}

bool nccl_backend_built() { return true; }

NcclComm init_nccl_over_bootstrap(Communicator& bootstrap, int device, std::optional<std::string> local_failure,
                                  const std::string& what) {
  ncclUniqueId id{};
  if (bootstrap.rank() == 0 && !local_failure) {
    try {
      const DeviceGuard guard(device);
      FERRY_NCCL_CHECK(ncclGetUniqueId(&id));
    } catch (const CommunicationError& error) {
      local_failure = error.what();
    }
  }
  // Every rank takes part in both bootstrap collectives, failed or not, so that none is left waiting.
  bootstrap.broadcast(&id, sizeof id, 0);
  std::int64_t failed_ranks = local_failure ? 1 : 0;
  bootstrap.all_reduce(&failed_ranks, 1, CommDataType::i64, ReduceOperation::sum);
  const std::string self = "rank " + std::to_string(bootstrap.rank()) + " of " + std::to_string(bootstrap.size());
  if (local_failure) throw CommunicationError(self + ": " + what + ": " + *local_failure);
  if (failed_ranks > 0) {
    throw CommunicationError(self + ": " + what + ": " + std::to_string(failed_ranks) +
                             " other rank(s) could not take part (their own errors say why)");
  }
  const DeviceGuard guard(device);
  ncclComm_t comm = nullptr;
  const ncclResult_t result = ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank());
  if (result == ncclInvalidUsage) {
    // Most often two ranks on one GPU ("Duplicate GPU detected"): say what to do about it.
    throw CommunicationError(self + ": " + what + ": ncclCommInitRank on device " + std::to_string(device) + " failed: " +
                             describe_nccl_error(result) + ". NCCL needs a GPU of its own for every rank: start as many ranks per "
                             "node as it has GPUs (or give each its own with CUDA_VISIBLE_DEVICES), or set " +
                             kCudaCollectivesVariable + "=host to carry device buffers through host memory over MPI (ranks may "
                             "share a GPU; slow)");
  }
  FERRY_NCCL_CHECK(result);
  return NcclComm(comm);
}

std::unique_ptr<NcclCommunicator> make_nccl_communicator(Communicator& bootstrap, int device_ordinal) {
  const std::string what = "make_nccl_communicator over " + std::to_string(bootstrap.size()) + " ranks";
  int device = 0;
  std::optional<std::string> failure;
  try {
    load_nccl_library();
    device = choose_cuda_device(bootstrap.local_rank(), device_ordinal);
  } catch (const CommunicationError& error) {
    failure = error.what();
  }
  NcclComm comm = init_nccl_over_bootstrap(bootstrap, device, std::move(failure), what);
  return std::make_unique<NcclCommunicatorImpl>(&bootstrap, nullptr, device, std::move(comm), bootstrap.timeout());
}

NcclCommunicatorImpl::NcclCommunicatorImpl(Communicator* borrowed, std::unique_ptr<Communicator> owned, int device,
                                           NcclComm comm, std::chrono::milliseconds timeout)
    : owned_bootstrap_(std::move(owned)),
      bootstrap_(owned_bootstrap_ ? owned_bootstrap_.get() : borrowed),
      device_(device),
      stream_(device),
      order_event_(device),
      comm_(std::move(comm)) {
  set_timeout(timeout);
  FERRY_NCCL_CHECK(ncclCommUserRank(comm_.get(), &rank_));
  FERRY_NCCL_CHECK(ncclCommCount(comm_.get(), &size_));
  if (rank_ != bootstrap_->rank() || size_ != bootstrap_->size()) {
    throw CommunicationError("NCCL made rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                             " where the bootstrap communicator has rank " + std::to_string(bootstrap_->rank()) +
                             " of " + std::to_string(bootstrap_->size()));
  }
}

NcclCommunicatorImpl::~NcclCommunicatorImpl() {
  if (!comm_) return;
  // ncclCommDestroy waits for the communicator's work: wait for it here, under the timeout, and abort
  // NCCL instead when it does not finish (a peer that is gone would make the destructor hang).
  try {
    const DeviceGuard guard(device_);
    const Clock::time_point start = Clock::now();
    for (;;) {
      const cudaError_t status = cudaStreamQuery(stream_.get());
      if (status == cudaSuccess) return;  // comm_ is destroyed after this body
      if (status != cudaErrorNotReady) {
        cudaGetLastError();
        break;
      }
      ncclResult_t async_error = ncclSuccess;
      if (ncclCommGetAsyncError(comm_.get(), &async_error) != ncclSuccess || async_error != ncclSuccess) break;
      const Clock::duration waited = Clock::now() - start;
      if (waited >= timeout()) break;
      pause_between_polls(waited);
    }
  } catch (const std::exception&) {
  }
  std::cerr << "ferry: " + self_text() + ": the NCCL communicator's work did not finish; aborting it\n";
  comm_.abort();
}

int NcclCommunicatorImpl::max_tag() const { return std::numeric_limits<int>::max(); }

void NcclCommunicatorImpl::wait_for(CUevent_st* event) {
  const std::string what = "wait_for(event) " + world_text();
  require_usable(what);
  const DeviceGuard guard(device_);
  FERRY_NCCL_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), event, 0));
}

std::unique_ptr<NcclCommunicator> NcclCommunicatorImpl::split_nccl(int color, int key) {
  const std::string what =
      "split (color " + std::to_string(color) + ", key " + std::to_string(key) + ") " + world_text();
  require_usable(what);
  if (color < 0) throw CommunicationError(self_text() + ": " + what + ": a color is 0 or more");
  // The bootstrap's split (under its deadline) also shows that every rank got here.
  std::unique_ptr<Communicator> group_bootstrap = bootstrap_->split(color, key);
  NcclComm group;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
  try {
    const DeviceGuard guard(device_);
    ncclComm_t split_comm = nullptr;
    FERRY_NCCL_CHECK(ncclCommSplit(comm_.get(), color, key, &split_comm, nullptr));
    group = NcclComm(split_comm);
  } catch (const CommunicationError& error) {
    throw fail(what + ": " + error.what());
  }
#else
  group = init_nccl_over_bootstrap(*group_bootstrap, device_, std::nullopt, what);
#endif
  auto made = std::make_unique<NcclCommunicatorImpl>(nullptr, std::move(group_bootstrap), device_, std::move(group), timeout());
  made->order_after(compute_);
  return made;
}

bool NcclCommunicatorImpl::poll(cudaEvent_t event, const std::string& what) {
  require_usable(what);
  const DeviceGuard guard(device_);
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaSuccess) return true;
  if (status != cudaErrorNotReady) {
    cudaGetLastError();
    throw fail(what + " failed: cudaEventQuery: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) +
               ")");
  }
  ncclResult_t async_error = ncclSuccess;
  const ncclResult_t query = ncclCommGetAsyncError(comm_.get(), &async_error);
  if (query != ncclSuccess) {
    throw fail(what + " failed: ncclCommGetAsyncError: " + describe_nccl_error(query));
  }
  if (async_error != ncclSuccess && async_error != ncclInProgress) {
    throw fail(what + " failed: NCCL reports an asynchronous error: " + describe_nccl_error(async_error));
  }
  return false;
}

void NcclCommunicatorImpl::record_operations(OpRecorder* recorder, StreamId stream) {
  recorder_ = nullptr;
  if (recorder == nullptr) return;
  const DeviceGuard guard(device_);
  anchor_.emplace(device_, /*timing=*/true);
  FERRY_NCCL_CUDA_CHECK(cudaEventRecord(anchor_->get(), stream_.get()));
  FERRY_NCCL_CUDA_CHECK(cudaEventSynchronize(anchor_->get()));
  anchor_ns_ = steady_now_ns();
  recorder_ = recorder;
  recorder_stream_ = stream;
}

void NcclCommunicatorImpl::count_stream_time(cudaEvent_t begun, cudaEvent_t done, const std::string& what) {
  const DeviceGuard guard(device_);
  float milliseconds = 0.0f;
  FERRY_NCCL_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, begun, done));
  count_stream_seconds(static_cast<double>(milliseconds) / 1e3);
  if (recorder_ == nullptr || !recorder_->enabled()) return;
  float since_anchor = 0.0f;
  FERRY_NCCL_CUDA_CHECK(cudaEventElapsedTime(&since_anchor, anchor_->get(), begun));
  const auto start_ns = anchor_ns_ + static_cast<std::uint64_t>(std::max(0.0, static_cast<double>(since_anchor) * 1e6));
  recorder_->add(OpMarker{"communication", what, recorder_stream_, start_ns,
                          start_ns + static_cast<std::uint64_t>(std::max(0.0, static_cast<double>(milliseconds) * 1e6)), 0});
}

void NcclCommunicatorImpl::complete(cudaEvent_t event, const std::string& what) {
  const Clock::time_point start = Clock::now();
  while (!poll(event, what)) {
    const Clock::duration waited = Clock::now() - start;
    if (waited >= timeout()) {
      throw fail(what + " did not complete within " + std::to_string(timeout().count()) +
                 " ms: a peer failed, is stuck, or never makes the matching call. The NCCL communicator was "
                 "aborted (ncclCommAbort) and can no longer be used. If the peer is only slow, raise the limit with " +
                 kCommTimeoutVariable + "=SECONDS (an integer, default " +
                 std::to_string(kDefaultCommTimeout.count()) + ").");
    }
    pause_between_polls(waited);
  }
}

void NcclCommunicatorImpl::require_usable(const std::string& what) const {
  if (failure_) {
    throw CommunicationError(self_text() + ": " + what + ": the NCCL communicator was aborted after an earlier failure (" +
                             *failure_ + ")");
  }
}

CommunicationError NcclCommunicatorImpl::fail(const std::string& reason) {
  comm_.abort();
  if (!failure_) failure_ = reason;
  return CommunicationError(self_text() + ": " + reason);
}

void NcclCommunicatorImpl::abort(int exit_code) {
  comm_.abort();
  bootstrap_->abort(exit_code);
  std::_Exit(exit_code);  // the bootstrap's abort does not return; should it, this process still ends
}

std::string NcclCommunicatorImpl::world_text() const {
  return "over " + std::to_string(size_) + " ranks (NCCL, device " + std::to_string(device_) + ")";
}

std::string NcclCommunicatorImpl::self_text() const { return "rank " + std::to_string(rank_); }

}  // namespace ferry
