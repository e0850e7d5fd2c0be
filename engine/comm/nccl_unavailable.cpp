// The NCCL backend of a build without it (no CUDA, or no NCCL found when it was configured): callers
// compile the same way and learn at run time, from nccl_backend_built() or the factory's error.
#include "engine/comm/host_staged_communicator.h"
#include "engine/comm/nccl_communicator.h"

namespace ferry {

bool nccl_backend_built() { return false; }

std::string describe_nccl_library() { return "not built (a build without CUDA, or NCCL 2.10+ was not found when it was configured)"; }

std::unique_ptr<NcclCommunicator> make_nccl_communicator(Communicator& bootstrap, int /*device_ordinal*/) {
  throw CommunicationError("rank " + std::to_string(bootstrap.rank()) +
                           ": make_nccl_communicator: this build of ferry has no NCCL backend (it needs CUDA and "
                           "NCCL 2.10 or newer when configured: see CMake's \"ferry: NCCL\" message)");
}

std::unique_ptr<NcclCommunicator> make_host_staged_communicator(Communicator& bootstrap, int /*device_ordinal*/) {
  throw CommunicationError("rank " + std::to_string(bootstrap.rank()) +
                           ": make_host_staged_communicator: this build of ferry has no NCCL backend, and the device-buffer "
                           "communicators are built with it (they need CUDA and NCCL 2.10 or newer when configured)");
}

}  // namespace ferry
