#include "engine/comm/mpi_session.h"

#include <iostream>
#include <string>

#include "engine/comm/communicator.h"
#include "engine/comm/mpi_check.h"

namespace ferry {

MpiSession::MpiSession() {
  int finalized = 0;
  FERRY_MPI_CHECK(MPI_Finalized(&finalized));
  if (finalized != 0) {
    throw CommunicationError("MPI was already finalized in this process and cannot start again: make one "
                             "communicator for the whole run");
  }
  int initialized = 0;
  FERRY_MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized != 0) return;  // someone else owns MPI's lifetime

  int provided = MPI_THREAD_SINGLE;
  FERRY_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
  if (provided < MPI_THREAD_FUNNELED) {
    MPI_Finalize();
    throw CommunicationError("MPI provides thread level " + std::to_string(provided) + ", below MPI_THREAD_FUNNELED (" +
                             std::to_string(MPI_THREAD_FUNNELED) + ") that ferry needs");
  }
  initialized_here_ = true;
}

MpiSession::~MpiSession() {
  if (!initialized_here_) return;
  const int error_code = MPI_Finalize();
  if (error_code != MPI_SUCCESS) std::cerr << "ferry: MPI_Finalize failed: " + describe_mpi_error(error_code) + "\n";
}

}  // namespace ferry
