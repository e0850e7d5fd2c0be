// The communicator of device buffers for ranks that cannot use NCCL: several ranks on one GPU (NCCL
// refuses that: "Duplicate GPU detected"). Each operation on device memory waits for the device's
// queued work, copies its buffers to host memory, runs the bootstrap's MPI operation there and copies
// the result back when the request completes. Exact and slow (no overlap with compute, two copies a
// buffer): for checks on one GPU, chosen by FERRY_CUDA_COLLECTIVES=host, never by default. Over one rank
// (one GPU without a launcher) a collective is a copy on the device, or nothing when in place: the
// single-rank communicator's copies are host memcpys, which a device pointer crashes on a real GPU.
#pragma once

#include <memory>

#include "engine/comm/communicator.h"
#include "engine/comm/nccl_communicator.h"

namespace ferry {

// What carries a cuda job's device buffers: NCCL (the default), or host memory over MPI.
enum class CudaCollectives : std::uint8_t { nccl, host };
inline constexpr char kCudaCollectivesVariable[] = "FERRY_CUDA_COLLECTIVES";
// FERRY_CUDA_COLLECTIVES through `lookup` (std::getenv by default): unset or "nccl", or "host"; any other
// value throws std::invalid_argument naming the variable and both choices.
CudaCollectives cuda_collectives_from_environment(EnvironmentLookup lookup = nullptr);

// Collective over `bootstrap` (an MPI communicator that outlives the result): every rank picks its GPU as
// make_nccl_communicator does (`device_ordinal`, or the local rank modulo the visible devices; one GPU may
// serve several ranks). The result is an NcclCommunicator in interface (device(), order_after, wait_for:
// the host waits for the event) whose backend() is "host-staged"; host buffers go to the bootstrap as
// they are. Throws CommunicationError where this build has no CUDA or this rank sees no GPU.
std::unique_ptr<NcclCommunicator> make_host_staged_communicator(Communicator& bootstrap,
                                                                int device_ordinal = kChooseDeviceByLocalRank);

// The cuda job's communicator over `bootstrap`, by FERRY_CUDA_COLLECTIVES: NCCL's, or the host-staged one.
std::unique_ptr<NcclCommunicator> make_cuda_communicator(Communicator& bootstrap);

}  // namespace ferry
