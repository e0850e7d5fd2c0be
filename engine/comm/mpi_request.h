// MpiRequest: the CommRequest of an MPI operation (a message or an asynchronous collective): polls its
// PendingOperation through the communicator under its timeout, then runs the operation's finishing
// step once (an average's division). Private to engine/comm.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "engine/comm/mpi_communicator_impl.h"

namespace ferry {

class MpiRequest final : public CommRequest {
 public:
  // `finish` (may be empty) runs once, after every MPI request of `operation` completed.
  MpiRequest(MpiCommunicator& communicator, PendingOperation operation, std::function<void()> finish = {})
      : communicator_(communicator), operation_(std::move(operation)), finish_(std::move(finish)) {}
  MpiRequest(const MpiRequest&) = delete;
  MpiRequest& operator=(const MpiRequest&) = delete;
  // Waits for a pending operation; ends the job when that fails (a destructor cannot throw, and the
  // buffer's owner is about to free it). After another operation of the communicator failed, it gives
  // the operation up instead (the first failure ends the job).
  ~MpiRequest() override;

  bool test() override;
  void wait() override;

 private:
  // Runs a poll or a wait unless the request is settled; a failure is kept and thrown again by every
  // later test() or wait(), so a failed request never looks complete.
  template <typename Poll>
  bool settle(Poll&& poll);
  void run_finish();

  MpiCommunicator& communicator_;
  PendingOperation operation_;
  std::function<void()> finish_;
  std::optional<std::string> failure_;
};

}  // namespace ferry
