// MpiContext: what every MPI communicator of a process made from one make_mpi_communicator shares, its
// own and its groups' (split): the MPI session and the bf16/f16 operations. Held by shared_ptr, so MPI
// is finalized (when this context started it) only after the last of those communicators is gone.
#pragma once

#include <mpi.h>

#include <memory>

#include "engine/comm/mpi_half_precision.h"
#include "engine/comm/mpi_session.h"
#include "engine/comm/torchrun_rendezvous.h"

namespace ferry {

struct MpiContext {
  // Under torchrun, the ranks' rendezvous first: MPI needs its address before it starts, and ompi-server
  // must outlive MPI_Finalize.
  explicit MpiContext(const RankEnvironment& environment);
  ~MpiContext();
  MpiContext(const MpiContext&) = delete;
  MpiContext& operator=(const MpiContext&) = delete;

  std::unique_ptr<TorchrunRendezvous> rendezvous;
  MpiSession session;  // initialized before, finalized after, every communicator of the context
  MpiHalfPrecisionOperations half_precision;
  MPI_Comm world = MPI_COMM_WORLD;  // the job's ranks: MPI_COMM_WORLD, or the world torchrun's ranks joined
};

}  // namespace ferry
