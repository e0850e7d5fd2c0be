// NCCL linked into the binary, not loaded (the CUDA emulation's NCCL over MPI, tests/cuda_emulation):
// nothing to open, and --version says so.
#include <nccl.h>

#include "engine/comm/nccl_communicator.h"
#include "engine/comm/nccl_loader.h"

namespace ferry {

void load_nccl_library() {}

std::string describe_nccl_library() {
  int version = 0;
  ncclGetVersion(&version);
  return "linked in (" + std::to_string(version) + ")";
}

}  // namespace ferry
