// comm_failure_probe's three failures over NCCL: rank 1 fails while rank 0 waits for it in an NCCL
// all-reduce of a device buffer. rank_failure_test.sh runs it under mpirun -np 2 (built on the emulated
// CUDA and NCCL, tests/cuda_emulation) and checks that the job ends quickly with an error, never a hang:
//   abort:  rank 1 prints its error and calls abort(3) (NCCL's ncclCommAbort, then the job's end).
//   crash:  rank 1 throws an exception nobody catches (std::terminate, SIGABRT).
//   silent: rank 1 returns without joining; rank 0's all-reduce is not complete after
//           FERRY_COMM_TIMEOUT_SECONDS, its communicator is aborted, and rank 0 prints the
//           CommunicationError and exits 1.
#include <cuda_runtime.h>

#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include "allocator/cuda_check.h"
#include "engine/comm/communicator.h"
#include "engine/comm/nccl_communicator.h"

int main(int argc, char** argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "abort" && mode != "crash" && mode != "silent") {
    std::cerr << "usage: nccl_failure_probe abort|crash|silent (under mpirun -np 2)\n";
    return 2;
  }
  std::unique_ptr<ferry::Communicator> bootstrap = ferry::make_communicator(/*force_mpi=*/true);
  std::unique_ptr<ferry::NcclCommunicator> nccl = ferry::make_nccl_communicator(*bootstrap);
  if (nccl->rank() == 1) {
    if (mode == "abort") {
      std::cerr << "rank 1: simulated failure: ending the job\n";
      nccl->abort(3);
    }
    if (mode == "crash") throw std::runtime_error("rank 1: simulated failure nobody catches");
    return 0;
  }
  constexpr std::size_t kCount = 1024;
  float* values = nullptr;
  FERRY_CUDA_CHECK(cudaMalloc(&values, kCount * sizeof(float)));
  try {
    nccl->all_reduce(values, kCount, ferry::CommDataType::f32, ferry::ReduceOperation::sum);
    std::cout << "rank 0's all-reduce completed with a rank that failed\n";
    return 0;
  } catch (const ferry::CommunicationError& error) {
    std::cerr << std::string("error: ") + error.what() + "\n";  // one write: lines from ranks interleave
    return 1;
  }
}
