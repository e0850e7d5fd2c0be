// Joining the processes torchrun started into one MPI world. torchrun starts each rank on its own (an
// MPI singleton), so MPI does not see them as one job. Rank 0 starts Open MPI's ompi-server (the meeting
// point for MPI's dynamic connections) and hands its address to every rank over TCP (MASTER_ADDR, port
// FERRY_RENDEZVOUS_PORT, default MASTER_PORT + 1); each rank gives it to MPI before MPI starts; once
// MPI runs, the ranks connect one by one into a world in torchrun's rank order (MPI_Comm_accept and
// MPI_Comm_connect, merged). Private to the MPI backend: mpi.h stays out of public headers.
#pragma once

#include <mpi.h>
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"

namespace ferry {

class TorchrunRendezvous {
 public:
  // Before MPI starts: rank 0 starts ompi-server and serves its address, the others fetch it; sets
  // OMPI_MCA_pmix_server_uri. Throws CommunicationError naming what failed (no ompi-server, a port in
  // use, a rank that never came within `timeout`).
  TorchrunRendezvous(const RankEnvironment& environment, std::chrono::milliseconds timeout);
  ~TorchrunRendezvous();  // closes the sockets; rank 0 stops ompi-server (after MPI has finalized)
  TorchrunRendezvous(const TorchrunRendezvous&) = delete;
  TorchrunRendezvous& operator=(const TorchrunRendezvous&) = delete;

  // After MPI has started, every rank together: the world of all ranks in torchrun's order (the caller
  // frees it).
  MPI_Comm join_world();

 private:
  void release() noexcept;                          // the sockets, ompi-server and its directory
  void serve_address(const std::string& address);  // rank 0
  std::string fetch_address();                      // the others
  // A connection to rank 0's port, retried until `deadline`.
  int connect_to_rank_zero(std::chrono::steady_clock::time_point deadline) const;
  // Rank 0 whose port is taken: claims RANK 0 from whoever listens there; a ferry rank 0 of the same
  // job refuses it, and this throws that refusal ("two processes claim RANK 0").
  void claim_rank_zero_from_listener();

  RankEnvironment environment_;
  std::chrono::milliseconds timeout_;
  std::string master_address_;
  int port_ = 0;
  pid_t server_ = -1;              // rank 0: ompi-server
  std::string server_directory_;   // rank 0: where ompi-server writes its address
  std::vector<int> sockets_;       // rank 0: [rank] -> its connection (0 unused); the others: [0] -> rank 0
};

}  // namespace ferry
