// The allocator on a real GPU: cudaMalloc and virtual-memory (expandable) segment sources, real
// streams and events, and memory written by kernels-free copies. Skips where no GPU is present.
#include <gtest/gtest.h>

#include <vector>

#include "allocator/allocator_errors.h"
#include "engine/core/device.h"
#include "engine/core/tensor.h"

#ifdef FERRY_HAVE_CUDA
#include "allocator/cuda_segment_sources.h"
#include "engine/core/cuda_device.h"
#endif

namespace ferry {
namespace {

#ifdef FERRY_HAVE_CUDA

#define FERRY_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no GPU present"

void round_trip(Device& device, std::size_t bytes) {
  Tensor tensor = Tensor::empty(device, {static_cast<std::int64_t>(bytes / 4)}, DType::f32, MemoryCategory::activations);
  std::vector<float> values(bytes / 4);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1000);
  std::vector<float> back(values.size());
  tensor.copy_from_host(values.data());
  tensor.copy_to_host(back.data());
  device.synchronize();
  EXPECT_EQ(back, values);
}

TEST(CudaAllocator, CudaMallocSourceServesAndCachesDeviceMemory) {
  FERRY_REQUIRE_GPU();
  auto device = create_device(DeviceOptions{DeviceKind::cuda, 1u << 30});
  round_trip(*device, 3u << 20);
  round_trip(*device, 3u << 20);
  const AllocatorStatistics stats = device->allocator().statistics();
  EXPECT_EQ(stats.num_device_alloc, 1);  // the second round trip was a cache hit
  EXPECT_THROW(device->allocator().malloc(2u << 30, 0, MemoryCategory::activations), OutOfMemoryError);
  device->allocator().empty_cache();
  device->allocator().check_invariants();
  EXPECT_EQ(device->allocator().statistics().reserved_bytes.all().current, 0);
}

TEST(CudaAllocator, VirtualMemorySourceMapsAndUnmapsPages) {
  FERRY_REQUIRE_GPU();
#ifdef FERRY_CUDA_EMULATION
  GTEST_SKIP() << "not emulated: CUDA virtual memory (cuMemAddressReserve, cuMemCreate, cuMemMap) behind expandable segments";
#endif
  DeviceOptions options{DeviceKind::cuda, 1u << 30};
  options.allocator_config = AllocatorConfig::parse("expandable_segments:True");
  auto device = create_device(options);
  round_trip(*device, 45u << 20);
  Allocation a = device->allocator().malloc(45u << 20, 0, MemoryCategory::activations);
  Allocation b = device->allocator().malloc(45u << 20, 0, MemoryCategory::activations);
  EXPECT_EQ(static_cast<char*>(b.address), static_cast<char*>(a.address) + (45u << 20));
  device->allocator().free(a);
  device->allocator().free(b);
  device->allocator().empty_cache();
  device->allocator().check_invariants();
  EXPECT_EQ(device->allocator().statistics().reserved_bytes.all().current, 0);
  round_trip(*device, 45u << 20);  // mapped again after the unmap
}

TEST(CudaAllocator, MemoryUsedOnAnotherStreamWaitsForItsEvent) {
  FERRY_REQUIRE_GPU();
  auto device = create_device(DeviceOptions{DeviceKind::cuda, 1u << 30});
  auto& cuda = static_cast<CudaDevice&>(*device);
  const Stream side = device->create_stream();
  Allocation a = device->allocator().malloc(8u << 20, 0, MemoryCategory::activations);
  // Keep the side stream busy long enough that its event is still pending at the next malloc.
  std::vector<char> host(256u << 20);
  Allocation scratch = device->allocator().malloc(host.size(), side.id, MemoryCategory::staging);
  for (int i = 0; i < 4; ++i) device->copy(scratch.address, host.data(), host.size(), CopyKind::host_to_device, side);
  device->allocator().record_stream(a, side.id);
  device->allocator().free(a);
  Allocation b = device->allocator().malloc(8u << 20, 0, MemoryCategory::activations);
  if (cudaStreamQuery(cuda.native_stream(side)) == cudaErrorNotReady) {
    EXPECT_NE(b.address, a.address);  // still in use on the side stream: not handed out
  }
  device->synchronize();
  device->allocator().free(b);
  device->allocator().free(scratch);
  Allocation c = device->allocator().malloc(8u << 20, 0, MemoryCategory::activations);
  EXPECT_EQ(c.address, a.address);  // the event completed: reused
  device->allocator().free(c);
  device->allocator().check_invariants();
}

#else

TEST(CudaAllocator, NotBuiltWithoutCuda) { GTEST_SKIP() << "this build has no CUDA"; }

#endif

}  // namespace
}  // namespace ferry
