// NcclCommunicatorImpl: the NcclCommunicator over one rank's NCCL communicator, its stream and its
// bootstrap (the host communicator of the same ranks). Private to engine/comm: nccl_communicator.cpp
// holds its lifetime, creation, groups and waiting; nccl_collectives.cpp its collectives, messages and
// requests.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "engine/comm/nccl_communicator.h"
#include "engine/comm/nccl_resources.h"

namespace ferry {

class NcclCommunicatorImpl final : public NcclCommunicator {
 public:
  // Takes over `comm` (this rank of an NCCL communicator on `device` whose ranks are the bootstrap's,
  // in the same order: checked). The bootstrap is `owned` when given (a group's), else `borrowed`.
  NcclCommunicatorImpl(Communicator* borrowed, std::unique_ptr<Communicator> owned, int device, NcclComm comm,
                       std::chrono::milliseconds timeout);
  // Waits (up to timeout()) for the work on the stream, then destroys the NCCL communicator; aborts it
  // instead when the work does not finish. Never throws.
  ~NcclCommunicatorImpl() override;
  NcclCommunicatorImpl(const NcclCommunicatorImpl&) = delete;
  NcclCommunicatorImpl& operator=(const NcclCommunicatorImpl&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return bootstrap_->local_rank(); }
  std::string backend() const override { return "nccl"; }
  int max_tag() const override;  // tags are not matched (NCCL has none): any int from 0 up
  int device() const override { return device_; }
  CUstream_st* stream() const override { return stream_.get(); }
  void wait_for(CUevent_st* event) override;
  void order_after(CUstream_st* compute) override { compute_ = compute; }
  void record_operations(OpRecorder* recorder, StreamId stream) override;
  std::unique_ptr<NcclCommunicator> split_nccl(int color, int key) override;

  std::unique_ptr<CommRequest> all_reduce_async(void* data, std::size_t count, CommDataType type,
                                                ReduceOperation operation) override;
  std::unique_ptr<CommRequest> reduce_scatter_async(const void* input, void* output,
                                                    std::span<const std::size_t> counts, CommDataType type,
                                                    ReduceOperation operation) override;
  std::unique_ptr<CommRequest> all_gather_async(const void* input, void* output, std::span<const std::size_t> counts,
                                                CommDataType type) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  std::vector<std::string> gather_strings(const std::string& value, int root) override;
  std::unique_ptr<CommRequest> send_async(const void* data, std::size_t bytes, int peer, int tag) override;
  std::unique_ptr<CommRequest> receive_async(void* data, std::size_t bytes, int peer, int tag) override;
  // Device buffers: one ncclGroupStart/End of every send and receive, one request.
  std::unique_ptr<CommRequest> exchange_async(std::span<const PointToPoint> messages) override;
  void barrier() override;
  [[noreturn]] void abort(int exit_code) override;

  // For requests: true once `event` (recorded after the operation `what`) completed; throws, and
  // fails the communicator, on an asynchronous NCCL error. complete() polls until done or timeout().
  bool poll(cudaEvent_t event, const std::string& what);
  void complete(cudaEvent_t event, const std::string& what);
  // True after a failure aborted NCCL (its pending operations ended with it).
  bool failed() const { return failure_.has_value(); }
  // Adds a completed operation's stream time: from `begun` to `done`, both recorded on the stream with
  // timing; and the operation `what` to the recorder (record_operations), if any.
  void count_stream_time(cudaEvent_t begun, cudaEvent_t done, const std::string& what);

 private:
  // Starts operation `what`: checks the communicator is usable, makes the device current, orders the
  // stream after the legacy default stream and the compute stream (order_after), runs `calls` (the
  // NCCL calls), records the request's event. A failure inside fails the communicator (the ranks no
  // longer agree on what was started).
  template <typename Calls>
  std::unique_ptr<CommRequest> start(const std::string& what, Calls&& calls);
  // An operation on host buffers, run by the bootstrap (MPI); its bytes count here too.
  template <typename Operation>
  std::unique_ptr<CommRequest> on_bootstrap(Operation&& operation);
  // Throws CommunicationError when an earlier failure aborted NCCL.
  void require_usable(const std::string& what) const;
  // Aborts NCCL, remembers why, and returns the error to throw: every later operation throws too.
  CommunicationError fail(const std::string& reason);
  void require_peer(int peer, int tag, const std::string& what) const;
  // "over 4 ranks (NCCL, device 1)"; "rank 2"
  std::string world_text() const;
  std::string self_text() const;

  std::unique_ptr<Communicator> owned_bootstrap_;  // first: outlives the NCCL communicator
  Communicator* bootstrap_;
  int device_;
  int rank_ = 0;
  int size_ = 1;
  CudaStream stream_;
  CudaEvent order_event_;           // recorded on the legacy default stream (and compute_) before each operation
  cudaStream_t compute_ = nullptr;  // order_after()
  // record_operations(): where completed operations go, and the clocks' anchor (an event recorded on
  // the stream and the steady clock's time when it completed).
  OpRecorder* recorder_ = nullptr;
  StreamId recorder_stream_ = 0;
  std::optional<CudaEvent> anchor_;
  std::uint64_t anchor_ns_ = 0;
  NcclComm comm_;                   // last: destroyed before the stream and events
  std::optional<std::string> failure_;
};

// This rank's part of a new NCCL communicator over `bootstrap`'s ranks, on `device`: collective over
// the bootstrap. `local_failure` (why this rank cannot take part, if so) is shared first: when any rank
// has one, every rank throws before NCCL starts.
NcclComm init_nccl_over_bootstrap(Communicator& bootstrap, int device, std::optional<std::string> local_failure,
                                  const std::string& what);

}  // namespace ferry
