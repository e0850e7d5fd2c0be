#include "engine/comm/mpi_pending_operation.h"

#include <algorithm>
#include <thread>

#include "engine/comm/communicator.h"
#include "engine/comm/mpi_check.h"
#include "engine/comm/poll_pause.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

void PendingOperation::add(MPI_Request request, std::optional<std::size_t> expected_receive_bytes) {
  parts_.push_back(Part{request, expected_receive_bytes});
}

bool PendingOperation::in_flight() const {
  return std::any_of(parts_.begin(), parts_.end(), [](const Part& part) { return part.request != MPI_REQUEST_NULL; });
}

std::optional<std::string> PendingOperation::check_completed(const Part& part, std::size_t part_index, int error_code,
                                                             const MPI_Status& status) const {
  const std::string chunk = parts_.size() > 1 ? " (chunk " + std::to_string(part_index) + ")" : "";
  int error_class = MPI_SUCCESS;
  if (error_code != MPI_SUCCESS) MPI_Error_class(error_code, &error_class);
  if (error_class == MPI_ERR_TRUNCATE && part.expected_receive_bytes) {
    return description_ + ": the message" + chunk + " is larger than the " +
           std::to_string(*part.expected_receive_bytes) + " bytes expected (MPI_ERR_TRUNCATE)";
  }
  if (error_code != MPI_SUCCESS) return description_ + chunk + " failed: " + describe_mpi_error(error_code);
  if (part.expected_receive_bytes) {
    int received = 0;
    MPI_Get_count(&status, MPI_BYTE, &received);
    if (static_cast<std::size_t>(received) != *part.expected_receive_bytes) {
      return description_ + ": the message" + chunk + " has " + std::to_string(received) + " bytes, " +
             std::to_string(*part.expected_receive_bytes) + " bytes expected";
    }
  }
  return std::nullopt;
}

bool PendingOperation::test() {
  bool all_done = true;
  for (std::size_t index = 0; index < parts_.size(); ++index) {
    Part& part = parts_[index];
    if (part.request == MPI_REQUEST_NULL) continue;
    int done = 0;
    MPI_Status status{};
    const int error_code = MPI_Test(&part.request, &done, &status);
    if (error_code == MPI_SUCCESS && done == 0) {
      all_done = false;
      continue;
    }
    part.request = MPI_REQUEST_NULL;  // completed: MPI released it, with or without an error
    if (const std::optional<std::string> failure = check_completed(part, index, error_code, status)) {
      withdraw_receives();
      throw CommunicationError(*failure);
    }
  }
  return all_done;
}

void PendingOperation::wait(std::chrono::milliseconds timeout) {
  const Clock::time_point start = Clock::now();
  while (!test()) {
    const Clock::duration waited = Clock::now() - start;
    if (waited >= timeout) {
      withdraw_receives();
      const std::string consequence =
          in_flight() ? " MPI cannot withdraw this operation: the communicator can no longer be used." : "";
      throw CommunicationError(description_ + " did not complete within " + std::to_string(timeout.count()) +
                               " ms: a peer failed, is stuck, or never makes the matching call." + consequence +
                               " If the peer is only slow, raise the limit with " + kCommTimeoutVariable +
                               "=SECONDS (an integer, default " + std::to_string(kDefaultCommTimeout.count()) + ").");
    }
    pause_between_polls(waited);
  }
}

void PendingOperation::withdraw_receives() {
  for (Part& part : parts_) {
    if (part.request != MPI_REQUEST_NULL && part.expected_receive_bytes) MPI_Cancel(&part.request);
  }
  // An unmatched receive completes at once when cancelled; one whose message is arriving completes
  // when it has arrived. Either way the buffer is free afterwards; allow a second for the latter.
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(1);
  for (Part& part : parts_) {
    while (part.request != MPI_REQUEST_NULL && part.expected_receive_bytes && Clock::now() < deadline) {
      int done = 0;
      if (MPI_Test(&part.request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done != 0) {
        part.request = MPI_REQUEST_NULL;
      } else {
        std::this_thread::yield();
      }
    }
  }
}

}  // namespace ferry
