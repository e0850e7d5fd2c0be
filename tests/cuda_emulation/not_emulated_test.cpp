// What the host emulation of CUDA cannot check, named in every run's output (and in the test report as
// a property), so that a green emulated suite is not read as more than it is.
#include <gtest/gtest.h>

#include <iostream>
#include <string>

namespace ferry {
namespace {

constexpr const char* kNotEmulated[] = {
    "cuBLASLt: matmul.cu's descriptors, layouts and epilogues run on a host reference GEMM (double accumulation), not NVIDIA's kernels",
    "streams and events: every operation completes when issued, so work on two streams never overlaps and cudaStreamQuery/"
    "cudaEventQuery never say not-ready (the allocator's cross-stream waits are exercised only in their ready path)",
    "cudaMallocAsync and memory pools: not used by ferry, not emulated",
    "the CUDA virtual-memory segment source (cuMemCreate/cuMemMap, expandable segments): its test skips",
    "cudaHostRegister pinning: the CPU build's pinned host allocator is linked (mlock or plain pages)",
    "NCCL: emulated over MPI (src/nccl.cpp), each operation complete when issued: NCCL's own kernels, its overlap with "
    "compute, its timeouts and asynchronous errors (a dead peer blocks inside MPI), and ncclCommInitRank beyond MPI_COMM_WORLD",
    "GPU arithmetic: math functions are the host's (tighter than CUDA's ULP bounds) and no fused multiply-adds are formed",
    "memory-model effects across blocks (blocks run one after another), warp-synchronous code without __syncwarp, timing",
};

TEST(CudaEmulation, NamesWhatItCannotEmulate) {
  std::string all;
  for (const char* item : kNotEmulated) {
    std::cout << "[ NOT EMULATED ] " << item << '\n';
    all += std::string(item) + "; ";
  }
  ::testing::Test::RecordProperty("not_emulated", all);
  EXPECT_EQ(std::size(kNotEmulated), 8u);
}

}  // namespace
}  // namespace ferry
