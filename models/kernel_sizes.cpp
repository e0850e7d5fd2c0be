#include "models/kernel_sizes.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ferry::ops {
namespace {

class CpuKernelSizes final : public KernelSizes {
 public:
  Shape attention_saved_shape(const AttentionShape& shape) const override {
    return {shape.batch, shape.heads, shape.sequence, shape.sequence};
  }
  bool attention_saved_in_f32() const override { return false; }
  std::int64_t attention_forward_scratch_elements(const AttentionShape& shape, float dropout) const override {
    return dropout > 0 ? shape.batch * shape.heads * shape.sequence * shape.sequence : 0;
  }
  std::int64_t attention_backward_scratch_elements(const AttentionShape& shape) const override {
    return shape.batch * shape.heads * shape.sequence * shape.sequence;
  }
  std::size_t matmul_workspace_bytes() const override { return 0; }
  bool matmul_takes_bf16() const override { return false; }
  // OpenBLAS reads and writes strided columns, accumulates with beta = 1, and the losses are summed as computed.
  std::int64_t lm_head_slice_scratch_elements(std::int64_t, std::int64_t, std::int64_t) const override { return 0; }
  std::int64_t lm_head_input_scratch_elements(std::int64_t, std::int64_t, bool) const override { return 0; }
  std::int64_t weight_rows_scratch_elements(std::int64_t, std::int64_t) const override { return 0; }  // BLAS takes strides
  std::int64_t matmul_rows_output_scratch_elements(std::int64_t, std::int64_t) const override { return 0; }
  std::int64_t cross_entropy_scratch_elements(std::int64_t) const override { return 0; }
  std::int64_t sum_of_squares_scratch_elements(std::int64_t) const override { return 0; }
  std::int64_t logits_chunk_bytes() const override { return std::int64_t{32} << 20; }
};

// The cuda kernels' (models/kernels/cuda); tests/cuda/cuda_kernel_sizes_test.cpp holds these to the kernels' own.
class CudaKernelSizes final : public KernelSizes {
 public:
  static constexpr std::size_t kMatmulWorkspaceBytes = std::size_t{32} << 20;  // cuBLASLt's, as PyTorch asks for on Hopper

  Shape attention_saved_shape(const AttentionShape& shape) const override { return {shape.batch, shape.heads, shape.sequence}; }
  bool attention_saved_in_f32() const override { return true; }
  std::int64_t attention_forward_scratch_elements(const AttentionShape&, float) const override { return 0; }
  // One rowsum(dout * out) per query row.
  std::int64_t attention_backward_scratch_elements(const AttentionShape& shape) const override {
    return shape.batch * shape.heads * shape.sequence;
  }
  std::size_t matmul_workspace_bytes() const override { return kMatmulWorkspaceBytes; }
  bool matmul_takes_bf16() const override { return true; }
  std::int64_t lm_head_slice_scratch_elements(std::int64_t rows, std::int64_t count, std::int64_t vocab) const override {
    return count == vocab ? 0 : rows * count;
  }
  std::int64_t lm_head_input_scratch_elements(std::int64_t rows, std::int64_t channels, bool accumulate_input) const override {
    return accumulate_input ? rows * channels : 0;
  }
  std::int64_t weight_rows_scratch_elements(std::int64_t rows, std::int64_t count) const override { return rows * count; }
  std::int64_t matmul_rows_output_scratch_elements(std::int64_t rows, std::int64_t width) const override { return rows * width; }
  std::int64_t cross_entropy_scratch_elements(std::int64_t rows) const override { return rows; }
  // One f64 result, then one f64 partial sum per block of kSumOfSquaresBlockElements values (at least one).
  static constexpr std::int64_t kSumOfSquaresBlockElements = std::int64_t{1} << 16;
  std::int64_t sum_of_squares_scratch_elements(std::int64_t largest) const override {
    const std::int64_t blocks = std::max<std::int64_t>(1, (largest + kSumOfSquaresBlockElements - 1) / kSumOfSquaresBlockElements);
    return 2 * (1 + blocks);
  }
  // An H200 trained gpt2 (batch 16) at 103,846 tok/s with 32 MiB chunks (166 tokens), 121,262 with 128 MiB
  // (664) at the same peaks, 124,669 with 256 MiB and 69 MB more reserved (docs/benchmarks.md).
  std::int64_t logits_chunk_bytes() const override { return std::int64_t{128} << 20; }
};

}  // namespace

const KernelSizes& kernel_sizes(DeviceKind kind) {
  static const CpuKernelSizes cpu_sizes;
  static const CudaKernelSizes cuda_sizes;
  switch (kind) {
    case DeviceKind::cpu: return cpu_sizes;
    case DeviceKind::cuda: return cuda_sizes;
    case DeviceKind::meta: break;
  }
  throw std::invalid_argument("meta has no kernels of its own: it stands in for cpu or cuda (" +
                              std::string(device_kind_name(kind)) + " asked)");
}

}  // namespace ferry::ops
