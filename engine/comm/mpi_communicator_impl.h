// MpiCommunicator: the Communicator over a duplicate of MPI_COMM_WORLD or a group split from it. Every
// operation starts nonblocking MPI calls (several for buffers above the chunk size) and polls them to
// completion under the communicator's timeout. Private to engine/comm: its lifetime, groups,
// collectives and point-to-point messages live in mpi_communicator.cpp, mpi_split.cpp,
// mpi_collectives.cpp and mpi_point_to_point.cpp.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/mpi_communicator.h"
#include "engine/comm/mpi_pending_operation.h"
#include "engine/comm/mpi_context.h"

namespace ferry {

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(const RankEnvironment& environment, const MpiCommunicatorOptions& options);
  // A group of `parent`: takes over `group` (from MPI_Comm_split), whose rank r is world rank
  // world_ranks[r]; keeps the parent's context, timeout, chunk size and local rank.
  MpiCommunicator(const MpiCommunicator& parent, MPI_Comm group, std::vector<int> world_ranks);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  std::string backend() const override { return "mpi"; }
  int max_tag() const override { return tag_upper_bound_; }

  std::unique_ptr<Communicator> split(int color, int key) override;
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
  void barrier() override;
  [[noreturn]] void abort(int exit_code) override;

  // For requests: poll once, or wait under timeout(). A failure that leaves MPI holding requests makes
  // the communicator refuse every later operation.
  bool test(PendingOperation& operation);
  void complete(PendingOperation& operation);
  // Whether an earlier operation failed with MPI still holding its requests (every later one is refused).
  bool failed() const { return !failed_operations_.empty(); }
  // An operation given up on after such a failure: MPI keeps its requests (they are never freed) while
  // the error that ended the communicator ends the job.
  void abandon(PendingOperation& operation) { retain_if_in_flight(operation); }

 private:
  // A new operation named "rank R: `what`"; throws when called from a thread other than the creator's
  // (MPI_THREAD_FUNNELED) or after a failure that left MPI requests behind.
  PendingOperation begin(const std::string& what) const;
  // Runs `start_requests(operation)` (which adds the MPI requests it starts); a start that fails
  // leaves the communicator failed, since the requests started before it are out of reach.
  template <typename StartRequests>
  void start(PendingOperation& operation, StartRequests&& start_requests) {
    try {
      start_requests(operation);
    } catch (const CommunicationError&) {
      retain_if_in_flight(operation);
      throw;
    }
  }
  template <typename StartRequests>
  void run(const std::string& what, StartRequests&& start_requests) {
    PendingOperation operation = begin(what);
    start(operation, start_requests);
    complete(operation);
  }
  // As run, but returns the request instead of waiting; `finish` runs once the operation completed.
  std::unique_ptr<CommRequest> start_async(const std::string& what,
                                           const std::function<void(PendingOperation&)>& start_requests,
                                           std::function<void()> finish);
  // MPI's datatype and operation for `type` (bf16 and f16: the context's own); average reduces as sum.
  MPI_Datatype mpi_datatype(CommDataType type) const;
  MPI_Op mpi_operation(CommDataType type, ReduceOperation operation) const;
  // One message of `bytes` with `peer`, one MPI call per chunk (`start_chunk(chunk, request)` starts
  // one); each chunk of a receive must bring exactly its bytes.
  template <typename StartChunk>
  std::unique_ptr<CommRequest> start_message(const std::string& what, std::size_t bytes, int peer, int tag,
                                             bool is_receive, StartChunk&& start_chunk);
  void retain_if_in_flight(PendingOperation& operation);
  void require_owner_thread(const std::string& what) const;
  // Throws CommunicationError unless `rank` names a rank of the world (and, for a peer, not this one).
  void require_root(int root, const std::string& what) const;
  void require_peer(int peer, int tag, const std::string& what) const;
  // True when `elements` elements of `element_bytes` fit one MPI call.
  bool fits_one_call(std::size_t elements, std::size_t element_bytes) const {
    return elements * element_bytes <= max_chunk_bytes_;
  }
  // "over 4 ranks" for the world; "over 2 ranks of the group of world ranks 1, 3" for a group.
  std::string world_text() const;
  // "rank 2" for the world; "world rank 3 (rank 1 of the group of world ranks 1, 3)" for a group.
  std::string self_text() const;
  bool is_world() const { return is_world_; }

  std::shared_ptr<MpiContext> context_;  // first: MPI starts before, and ends after, everything below
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int tag_upper_bound_ = 32767;  // MPI guarantees at least this much
  bool is_world_ = true;
  std::vector<int> world_ranks_;  // rank here -> rank in MPI_COMM_WORLD
  std::size_t max_chunk_bytes_;
  std::thread::id owner_thread_;
  // Operations that failed while MPI still held their requests (and buffers): kept, never finalized.
  std::vector<PendingOperation> failed_operations_;
};

}  // namespace ferry
