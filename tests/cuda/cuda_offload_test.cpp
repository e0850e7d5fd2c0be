// ZeRO-Offload's gradient path on a real GPU: HostGradients copies each bucket device-to-host on its
// copy stream while the compute stream goes on, the bucket's device memory is not handed out again
// before the host has added it (its staging slot holds it, whatever the copy's speed), and the host sums
// equal the cpu device's. Skips where no GPU is present.
#include <gtest/gtest.h>

#include <vector>

#include "engine/core/device.h"
#include "engine/core/tensor.h"
#include "offload/host_gradients.h"

#ifdef FERRY_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/core/cuda_device.h"
#endif

namespace ferry {
namespace {

#ifdef FERRY_HAVE_CUDA

std::vector<float> pattern(std::size_t count, float scale) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = scale * static_cast<float>(i % 977) - 3.0f;
  return values;
}

TEST(CudaOffload, GradientBucketsCopyOnTheCopyStreamAndKeepTheirMemoryUntilCopied) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU present";
  auto device = create_device(DeviceOptions{DeviceKind::cuda, std::size_t{4} << 30});
  constexpr std::size_t kCount = std::size_t{8} << 20;  // 32 MiB buckets
  PinnedHostAllocator pinned;
  offload::HostGradients host(*device, {static_cast<std::int64_t>(kCount)}, &pinned);

  // Keep the compute stream busy: the bucket's copy waits for it, so the copy is still to come when
  // backward frees the bucket and the next allocation asks for the same size.
  const std::size_t busy_bytes = std::size_t{512} << 20;
  Tensor busy_a = Tensor::zeros(*device, {static_cast<std::int64_t>(busy_bytes / 4)}, DType::f32, MemoryCategory::activations);
  Tensor busy_b = Tensor::empty(*device, {static_cast<std::int64_t>(busy_bytes / 4)}, DType::f32, MemoryCategory::activations);
  const std::vector<float> first = pattern(kCount, 0.5f), second = pattern(kCount, -0.25f);
  void* first_address = nullptr;
  {
    Tensor gradient = Tensor::empty(*device, {static_cast<std::int64_t>(kCount)}, DType::f32, MemoryCategory::gradients);
    copy_from_host_f32(gradient, first.data());
    for (int i = 0; i < 8; ++i) device->copy(busy_b.data(), busy_a.data(), busy_bytes, CopyKind::device_to_device, device->default_stream());
    host.accumulate(0, 0, gradient);
    first_address = gradient.data();
  }  // backward frees the bucket here
  EXPECT_EQ(host.buckets_in_flight(), 1u);
  Tensor next = Tensor::empty(*device, {static_cast<std::int64_t>(kCount)}, DType::f32, MemoryCategory::gradients);
  EXPECT_NE(next.data(), first_address);  // held by its slot: not handed out, however far the copy got
  device->fill_zero(next.data(), next.nbytes(), device->default_stream());  // would clobber a reused bucket
  copy_from_host_f32(next, second.data());
  host.accumulate(0, 0, next);
  next = Tensor();

  const std::span<float> sums = host.all();
  ASSERT_EQ(sums.size(), kCount);
  for (std::size_t i = 0; i < kCount; ++i) ASSERT_EQ(sums[i], first[i] + second[i]) << i;
  EXPECT_EQ(host.buckets_in_flight(), 0u);
  EXPECT_EQ(host.bytes_received(), static_cast<std::int64_t>(2 * kCount * 4));
  device->synchronize();
  device->allocator().check_invariants();
}

#else

TEST(CudaOffload, NotBuiltWithoutCuda) { GTEST_SKIP() << "this build has no CUDA"; }

#endif

}  // namespace
}  // namespace ferry
