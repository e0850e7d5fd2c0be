// make_communicator: the backend the launcher's environment calls for (MPI for several ranks, those of
// mpirun, srun or torchrun; one rank otherwise), with FERRY_COMM_TIMEOUT_SECONDS applied.
#include "engine/comm/communicator.h"
#include "engine/comm/mpi_communicator.h"

namespace ferry {

std::unique_ptr<Communicator> make_communicator(bool force_mpi) {
  const RankEnvironment environment = detect_rank_environment();
  const std::chrono::milliseconds timeout = comm_timeout_from_environment();
  std::unique_ptr<Communicator> communicator = environment.world_size > 1 || force_mpi
                                                   ? make_mpi_communicator(environment)
                                                   : make_single_rank_communicator();
  communicator->set_timeout(timeout);
  return communicator;
}

}  // namespace ferry
