// The MPI backend's own settings and factory, for callers that need more than make_communicator: a
// second communicator beside a running MPI, or smaller message chunks (tests of the chunking).
// MPI itself stays out of this header.
#pragma once

#include <cstddef>
#include <memory>

#include "engine/comm/communicator.h"
#include "engine/comm/message_chunks.h"

namespace ferry {

struct MpiCommunicatorOptions {
  // The most bytes one MPI call carries (1 to INT_MAX); a larger buffer goes as several calls.
  std::size_t max_message_chunk_bytes = kDefaultMaxChunkBytes;
};

// Initializes MPI unless it already runs (the communicator then leaves it running when it dies),
// duplicates MPI_COMM_WORLD, and checks MPI's rank and size against `environment` when a launcher set
// it (CommunicationError when they differ). Collective over MPI_COMM_WORLD.
std::unique_ptr<Communicator> make_mpi_communicator(const RankEnvironment& environment,
                                                    const MpiCommunicatorOptions& options = {});

}  // namespace ferry
