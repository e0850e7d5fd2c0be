// The emulated NCCL's operations in flight. An operation (or one ncclGroupStart/End group) is posted to
// MPI as non-blocking calls when it is issued, and completes on its stream later (stream_work.h): an
// event recorded after it is not ready until its peers' parts have arrived, as on a GPU, so a host that
// polls (ferry's communicators, with their timeouts) sees a missing peer instead of hanging inside the
// call. What completes it (a 16-bit reduction, an average, a reduce-scatter's block) runs then; its
// failure is the communicator's asynchronous error (ncclCommGetAsyncError). After ncclCommAbort the
// communicator's operations complete at once, unfinished (their buffers are kept: MPI may still write).
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ferry::cuda_emulation {

// A communicator's state that its operations share (they may outlive the ncclComm).
struct CommState {
  bool aborted = false;
  ncclResult_t async_error = ncclSuccess;
  std::string async_error_text;
};

// Bytes an operation reads or writes: an operation issued later that touches what an unfinished one
// writes (or writes what it reads) waits for it first, as the stream's order would have it.
struct ByteSpan {
  const std::byte* begin = nullptr;
  std::size_t bytes = 0;
  bool overlaps(const ByteSpan& other) const;
};

class PostedOperation;

// One operation to post: what it reads and writes, and how it posts its MPI calls (adding the requests
// and what completes it to `posted`). Returns an error (ncclGetLastError's text set) or ncclSuccess.
struct Posting {
  std::vector<ByteSpan> reads;
  std::vector<ByteSpan> writes;
  std::function<ncclResult_t(PostedOperation& posted)> post;
};

class PostedOperation {
 public:
  explicit PostedOperation(std::shared_ptr<CommState> state) : state_(std::move(state)) {}
  // A request for the posting's next MPI call.
  MPI_Request* add_request();
  // Runs once every request has completed, in the order added.
  void then(std::function<ncclResult_t()> step) { steps_.push_back(std::move(step)); }
  // Complete? With `wait`, blocks until it is.
  bool progress(bool wait);
  bool conflicts_with(const Posting& later) const;
  void add_spans(const Posting& posting);
  const std::shared_ptr<CommState>& state() const { return state_; }

 private:
  void fail(ncclResult_t result, const std::string& text);
  std::shared_ptr<CommState> state_;
  std::vector<MPI_Request> requests_;
  std::vector<std::function<ncclResult_t()>> steps_;
  std::vector<ByteSpan> reads_, writes_;
  bool finished_ = false;
};

// Posts `postings` as one operation of `state`'s communicator on `stream` (after waiting for the
// unfinished operations they conflict with) and defers its completion there.
ncclResult_t issue(cudaStream_t stream, const std::shared_ptr<CommState>& state, std::vector<Posting> postings);

// ncclCommAbort: `state`'s unfinished operations complete at once from now on; their buffers are kept.
void abandon_operations(CommState& state);

}  // namespace ferry::cuda_emulation
