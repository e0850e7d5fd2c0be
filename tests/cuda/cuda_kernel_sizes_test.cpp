// The cuda kernels' sizes as models/kernel_sizes.cpp states them for meta, held to the kernels' own
// (runs without a GPU, in every CUDA build), and a meta device standing in for cuda predicting the cuda
// device's peaks exactly under every recompute policy (needs a GPU; skips without one).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "engine/train/training_step.h"
#include "models/gpt_model.h"
#include "models/kernel_sizes.h"
#include "models/tensor_ops.h"
#include "schedule/recompute_policy.h"
#include "tests/models/micro_batch_statistics.h"

#ifdef FERRY_HAVE_CUDA
#include "models/kernels/cuda/adamw.h"
#include "models/kernels/cuda/flash_attention.h"
#include "models/kernels/cuda/matmul.h"
#endif

namespace ferry {
namespace {

#ifdef FERRY_HAVE_CUDA

TEST(CudaKernelSizes, AgreeWithTheKernels) {
  const ops::KernelSizes& sizes = ops::kernel_sizes(DeviceKind::cuda);
  EXPECT_EQ(sizes.matmul_workspace_bytes(), cuda::kMatmulWorkspaceBytes);
  for (const cpu::AttentionShape shape : {cpu::AttentionShape{2, 24, 64, 4}, cpu::AttentionShape{8, 1024, 768, 12}}) {
    EXPECT_EQ(sizes.attention_backward_scratch_elements(shape), cuda::flash_attention_scratch_elements(shape));
    EXPECT_EQ(sizes.attention_forward_scratch_elements(shape, 0.1f), 0);
    EXPECT_EQ(sizes.attention_saved_shape(shape), (Shape{shape.batch, shape.heads, shape.sequence}));
  }
  EXPECT_TRUE(sizes.attention_saved_in_f32());
  EXPECT_TRUE(sizes.matmul_takes_bf16());
  for (const std::int64_t largest : {std::int64_t{0}, std::int64_t{1}, std::int64_t{65536}, std::int64_t{65537}, std::int64_t{124439808}}) {
    // One f64 result and the kernel's partial sums (at least one), in floats.
    EXPECT_EQ(sizes.sum_of_squares_scratch_elements(largest), 2 * (1 + std::max<std::int64_t>(1, cuda::sum_of_squares_scratch_elements(largest))))
        << largest;
  }
}

// The gradient norm's scratch comes from the allocator on every kind: a dry run holds what the GPU does
// (the cuda backend used to allocate it itself, which meta never saw).
TEST(CudaKernelSizes, MetaStandingInForCudaAllocatesTheSumOfSquaresScratch) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU present";
  std::int64_t peaks[2][2] = {};
  int index = 0;
  for (DeviceKind kind : {DeviceKind::cuda, DeviceKind::meta}) {
    auto device = testing::gibibyte_device(kind, DeviceKind::cuda);
    std::vector<Tensor> tensors;
    for (const std::int64_t count : {std::int64_t{100}, std::int64_t{200000}, std::int64_t{3}}) {
      tensors.push_back(Tensor::zeros(*device, {count}, DType::f32, MemoryCategory::gradients, "gradient"));
    }
    const std::vector<const Tensor*> pointers{&tensors[0], &tensors[1], &tensors[2]};
    EXPECT_EQ(ops::sum_of_squares(*device, pointers), 0.0);
    const AllocatorStatistics stats = device->allocator().statistics();
    peaks[index][0] = stats.category_allocated_bytes[category_index(MemoryCategory::workspace)].peak;
    peaks[index][1] = stats.allocated_bytes.all().peak;
    ++index;
  }
  EXPECT_GT(peaks[0][0], 0) << "the cuda kernels' scratch";
  EXPECT_EQ(peaks[1][0], peaks[0][0]) << "meta's workspace peak beside cuda's";
  EXPECT_EQ(peaks[1][1], peaks[0][1]) << "meta's peak allocated beside cuda's";
}

TEST(CudaKernelSizes, MetaStandingInForCudaPredictsItsPeaksUnderEveryPolicy) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU present";
  constexpr std::int64_t B = 2, T = 24;
  const GptConfig config{"cuda-kernel-sizes-test", 2, 64, 4, 97, 32};
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (const char* name : {"none", "full", "selective", "every:2"}) {
      std::int64_t peaks[2][2] = {};
      int index = 0;
      for (DeviceKind kind : {DeviceKind::cuda, DeviceKind::meta}) {
        auto device = testing::gibibyte_device(kind, DeviceKind::cuda);
        // Vocabulary slices of 40 (narrower than the vocabulary) take the LM head's scratch.
        const AllocatorStatistics stats = testing::micro_batch_statistics(*device, config, dtype, GptDropout{0.1f, 0.1f, 0.1f},
                                                                          activation_keeps(RecomputePolicy::parse(name), config.layers), B,
                                                                          T, 40);
        peaks[index][0] = stats.allocated_bytes.all().peak;
        peaks[index][1] = stats.reserved_bytes.all().peak;
        ++index;
      }
      EXPECT_EQ(peaks[1][0], peaks[0][0]) << name << " " << dtype_name(dtype) << ": meta's peak allocated beside cuda's";
      EXPECT_EQ(peaks[1][1], peaks[0][1]) << name << " " << dtype_name(dtype) << ": meta's peak reserved beside cuda's";
    }
  }
}

#else

TEST(CudaKernelSizes, NotBuiltWithoutCuda) { GTEST_SKIP() << "this build has no CUDA"; }

#endif

}  // namespace
}  // namespace ferry
