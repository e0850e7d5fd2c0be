// A job whose rank 1 fails while rank 0 waits for it in a receive; rank_failure_test.sh runs it under
// mpirun -np 2 and checks that the job ends quickly with an error instead of hanging. Modes:
//   abort:  rank 1 prints its error and calls Communicator::abort(3), ending the whole job.
//   crash:  rank 1 throws an exception nobody catches (std::terminate, SIGABRT).
//   silent: rank 1 returns without sending; rank 0's receive times out after FERRY_COMM_TIMEOUT_SECONDS,
//           and rank 0 prints the CommunicationError and exits 1.
#include <cstdint>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include "engine/comm/communicator.h"

int main(int argc, char** argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "abort" && mode != "crash" && mode != "silent") {
    std::cerr << "usage: comm_failure_probe abort|crash|silent (under mpirun -np 2)\n";
    return 2;
  }
  std::unique_ptr<ferry::Communicator> communicator = ferry::make_communicator(/*force_mpi=*/true);
  if (communicator->rank() == 1) {
    if (mode == "abort") {
      std::cerr << "rank 1: simulated failure: ending the job\n";
      communicator->abort(3);
    }
    if (mode == "crash") throw std::runtime_error("rank 1: simulated failure nobody catches");
    return 0;
  }
  try {
    std::int64_t value = 0;
    communicator->receive(&value, sizeof value, 1, 11);
    std::cout << "rank 0 received " << value << " from a rank that failed\n";
    return 0;
  } catch (const ferry::CommunicationError& error) {
    std::cerr << std::string("error: ") + error.what() + "\n";  // one write: lines from ranks interleave
    return 1;
  }
}
