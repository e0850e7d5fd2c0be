// MpiContext: what every MPI communicator of a process made from one make_mpi_communicator shares, its
// own and its groups' (split): the MPI session and the bf16/f16 operations. Held by shared_ptr, so MPI
// is finalized (when this context started it) only after the last of those communicators is gone.
#pragma once

#include "engine/comm/mpi_half_precision.h"
#include "engine/comm/mpi_session.h"

namespace ferry {

struct MpiContext {
  MpiSession session;  // first: initialized first, finalized last
  MpiHalfPrecisionOperations half_precision;
};

}  // namespace ferry
