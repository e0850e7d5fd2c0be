// Tensors: storage from the device allocator under a category and tag, views share storage, the
// memory returns when the last view goes.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace ferry {
namespace {

TEST(Tensor, AllocatesWithCategoryAndTag) {
  auto device = create_device(DeviceOptions{DeviceKind::cpu, 64u << 20});
  {
    Tensor weights = Tensor::empty(*device, {768, 2304}, DType::bf16, MemoryCategory::parameters, "h.0.attn.c_attn");
    EXPECT_EQ(weights.nbytes(), 768u * 2304u * 2u);
    EXPECT_EQ(weights.category(), MemoryCategory::parameters);
    const AllocatorStatistics stats = device->allocator().statistics();
    EXPECT_EQ(stats.category_requested_bytes[category_index(MemoryCategory::parameters)].current,
              static_cast<std::int64_t>(weights.nbytes()));
    const AllocatorSnapshot snapshot = device->allocator().snapshot();
    EXPECT_EQ(snapshot.segments.at(0).blocks.at(0).tag, "h.0.attn.c_attn");
  }
  EXPECT_EQ(device->allocator().statistics().allocated_bytes.all().current, 0);
}

TEST(Tensor, ViewsShareStorageUntilTheLastOneGoes) {
  auto device = create_device(DeviceOptions{DeviceKind::cpu, 16u << 20});
  Tensor narrowed;
  {
    Tensor matrix = Tensor::empty(*device, {4, 6}, DType::f32, MemoryCategory::activations);
    std::vector<float> values(24);
    std::iota(values.begin(), values.end(), 0.0f);
    matrix.copy_from_host(values.data());
    Tensor flat = matrix.reshape({-1});
    EXPECT_EQ(flat.shape(), Shape{24});
    EXPECT_EQ(flat.data(), matrix.data());
    narrowed = matrix.narrow(0, 1, 2);
    EXPECT_EQ(narrowed.shape(), (Shape{2, 6}));
    EXPECT_EQ(narrowed.data_as<float>()[0], 6.0f);
    EXPECT_TRUE(narrowed.is_contiguous());
    Tensor columns = matrix.narrow(1, 2, 3);
    EXPECT_FALSE(columns.is_contiguous());
    EXPECT_THROW(columns.reshape({6}), std::invalid_argument);
    EXPECT_THROW(matrix.reshape({5, 5}), std::invalid_argument);
    EXPECT_THROW(matrix.narrow(0, 3, 2), std::out_of_range);
    EXPECT_THROW(matrix.data_as<std::uint16_t>(), std::invalid_argument);
  }
  EXPECT_GT(device->allocator().statistics().allocated_bytes.all().current, 0);  // narrowed keeps it
  std::vector<float> row(12);
  narrowed.copy_to_host(row.data());
  EXPECT_EQ(row[11], 17.0f);
  narrowed = Tensor();
  EXPECT_EQ(device->allocator().statistics().allocated_bytes.all().current, 0);
}

TEST(Tensor, ZerosAndDeviceCopies) {
  auto device = create_device(DeviceOptions{DeviceKind::cpu, 16u << 20});
  Tensor a = Tensor::zeros(*device, {3, 5}, DType::i32, MemoryCategory::workspace);
  EXPECT_EQ(a.data_as<std::int32_t>()[14], 0);
  a.data_as<std::int32_t>()[7] = 42;
  Tensor b = Tensor::empty(*device, {3, 5}, DType::i32, MemoryCategory::workspace);
  b.copy_from(a);
  EXPECT_EQ(b.data_as<std::int32_t>()[7], 42);
  Tensor wrong = Tensor::empty(*device, {5, 3}, DType::i32, MemoryCategory::workspace);
  EXPECT_THROW(wrong.copy_from(a), std::invalid_argument);
}

// Destructors never throw: a storage whose memory was already freed behind its back reports the
// allocator's refusal on stderr instead of ending the process.
TEST(Tensor, AFreeRefusedInADestructorIsReportedNotFatal) {
  auto device = create_device(DeviceOptions{DeviceKind::cpu, 64u << 20});
  testing::internal::CaptureStderr();
  {
    Tensor tensor = Tensor::empty(*device, {1024}, DType::f32, MemoryCategory::activations, "freed twice");
    device->allocator().free(tensor.data());
  }
  const std::string reported = testing::internal::GetCapturedStderr();
  EXPECT_NE(reported.find("ferry: error while freeing a tensor's storage (ignored in a destructor): free of an allocation"),
            std::string::npos)
      << reported;
  EXPECT_EQ(device->allocator().statistics().allocated_bytes.all().current, 0);
}

TEST(Tensor, MetaTensorsCountBytesWithoutMemory) {
  // Fixed segments (PyTorch's CUDA default): a 2356 MiB segment; the 208 KiB remainder is under 1 MiB, so
  // the block is not split. Expandable segments (the cpu and meta default): 512-byte rounding, 64 KiB pages.
  for (const bool expandable : {false, true}) {
    auto meta = create_device(DeviceOptions{DeviceKind::meta, std::size_t{1} << 40,
                                            AllocatorConfig::parse(expandable ? "" : "expandable_segments:False")});
    Tensor huge = Tensor::empty(*meta, {50257, 12288}, DType::f32, MemoryCategory::parameters);
    const AllocatorStatistics stats = meta->allocator().statistics();
    EXPECT_EQ(stats.requested_bytes.all().current, static_cast<std::int64_t>(huge.nbytes()));
    EXPECT_EQ(stats.allocated_bytes.all().current, expandable ? static_cast<std::int64_t>(huge.nbytes()) : std::int64_t{2356} << 20);
    EXPECT_EQ(stats.reserved_bytes.all().current, expandable ? (static_cast<std::int64_t>(huge.nbytes()) + 65535) / 65536 * 65536 : std::int64_t{2356} << 20);
  }
}

}  // namespace
}  // namespace ferry
