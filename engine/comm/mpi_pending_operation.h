// PendingOperation: the MPI requests of one communicator operation (one per chunk, or per chunk and
// root), polled together until all complete or a deadline passes. Timeouts and MPI errors become
// CommunicationErrors naming the operation; unfinished receives are then withdrawn (MPI_Cancel) so that
// no late message lands in a buffer its owner has given up. Private to engine/comm.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ferry {

class PendingOperation {
 public:
  // `description` names the operation in errors: "rank 0: receive of 4096 bytes from rank 1 with tag 7".
  explicit PendingOperation(std::string description) : description_(std::move(description)) {}

  // One more request; `expected_receive_bytes` marks a receive (withdrawable) and its exact size.
  void add(MPI_Request request, std::optional<std::size_t> expected_receive_bytes = std::nullopt);
  // Keeps a buffer MPI reads or writes alive as long as the operation (a collective's own buffers).
  void keep_alive(std::shared_ptr<const void> buffer) { kept_alive_.push_back(std::move(buffer)); }

  // Polls each unfinished request once; true when all are done. Throws CommunicationError on an MPI
  // error or a message of the wrong size.
  bool test();
  // Polls until done: spins first, then yields, then sleeps briefly between polls. Throws
  // CommunicationError when `timeout` passes first.
  void wait(std::chrono::milliseconds timeout);
  // Requests MPI still holds: after a failure, the ones it could not withdraw (sends, collectives).
  bool in_flight() const;
  const std::string& description() const { return description_; }

 private:
  struct Part {
    MPI_Request request = MPI_REQUEST_NULL;
    std::optional<std::size_t> expected_receive_bytes;
  };

  // The CommunicationError for a request that completed with `status`, or nullopt when it succeeded.
  std::optional<std::string> check_completed(const Part& part, std::size_t part_index, int error_code,
                                             const MPI_Status& status) const;
  void withdraw_receives();

  std::string description_;
  std::vector<Part> parts_;
  std::vector<std::shared_ptr<const void>> kept_alive_;
};

}  // namespace ferry
