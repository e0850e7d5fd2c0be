// What make_nccl_communicator says where it cannot run, on any machine: a build without NCCL says so;
// a build with it, on a machine without a GPU, says there is no CUDA device (after sharing that over the
// bootstrap, here one rank) instead of starting NCCL.
#include <gtest/gtest.h>

#include "engine/comm/communicator.h"
#include "engine/comm/nccl_communicator.h"
#include "tests/comm/comm_test_support.h"

#ifdef FERRY_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace ferry {
namespace {

using testing::contains;
using testing::error_of;

bool gpu_visible() {
#ifdef FERRY_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
#else
  return false;
#endif
}

TEST(NcclBackend, WithoutNcclOrWithoutAGpuTheFactorySaysWhy) {
  const std::unique_ptr<Communicator> bootstrap = make_single_rank_communicator();
  if (nccl_backend_built() && gpu_visible()) GTEST_SKIP() << "a GPU is present: comm.mpi.nccl runs the backend";
  const std::string error = error_of<CommunicationError>([&] { make_nccl_communicator(*bootstrap); });
  if (nccl_backend_built()) {
    EXPECT_TRUE(contains(error, "rank 0 of 1: make_nccl_communicator over 1 ranks: no CUDA device")) << error;
  } else {
    EXPECT_TRUE(contains(error, "this build of ferry has no NCCL backend")) << error;
  }
}

TEST(NcclBackend, ABadDeviceOrdinalIsRefused) {
  if (!nccl_backend_built() || !gpu_visible()) GTEST_SKIP() << "needs the NCCL backend and a GPU";
  const std::unique_ptr<Communicator> bootstrap = make_single_rank_communicator();
  const std::string error = error_of<CommunicationError>([&] { make_nccl_communicator(*bootstrap, 1 << 20); });
  EXPECT_TRUE(contains(error, "device ordinal 1048576 is not one of the")) << error;
}

}  // namespace
}  // namespace ferry
