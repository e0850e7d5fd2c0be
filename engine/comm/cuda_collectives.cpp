// FERRY_CUDA_COLLECTIVES and the cuda job's communicator it chooses: NCCL, or device buffers staged
// through host memory over MPI (host_staged_communicator.h).
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "engine/comm/host_staged_communicator.h"

namespace ferry {

CudaCollectives cuda_collectives_from_environment(EnvironmentLookup lookup) {
  const char* value = (lookup != nullptr ? lookup : [](const char* name) -> const char* { return std::getenv(name); })(
      kCudaCollectivesVariable);
  if (value == nullptr || std::strcmp(value, "nccl") == 0) return CudaCollectives::nccl;
  if (std::strcmp(value, "host") == 0) return CudaCollectives::host;
  throw std::invalid_argument(std::string(kCudaCollectivesVariable) + "=" + value +
                              " is not a choice: nccl (the default: device buffers by NCCL, one GPU per rank) or host "
                              "(device buffers copied through host memory over MPI: ranks may share a GPU; slow)");
}

std::unique_ptr<NcclCommunicator> make_cuda_communicator(Communicator& bootstrap) {
  return cuda_collectives_from_environment() == CudaCollectives::host ? make_host_staged_communicator(bootstrap)
                                                                      : make_nccl_communicator(bootstrap);
}

}  // namespace ferry
