#include "engine/comm/mpi_context.h"

namespace ferry {
namespace {

std::unique_ptr<TorchrunRendezvous> rendezvous_for(const RankEnvironment& environment) {
  if (environment.launcher != "torchrun" || environment.world_size < 2) return nullptr;
  return std::make_unique<TorchrunRendezvous>(environment, comm_timeout_from_environment());
}

}  // namespace

MpiContext::MpiContext(const RankEnvironment& environment) : rendezvous(rendezvous_for(environment)) {
  if (rendezvous) world = rendezvous->join_world();
}

MpiContext::~MpiContext() {
  if (world != MPI_COMM_WORLD) MPI_Comm_free(&world);
}

}  // namespace ferry
