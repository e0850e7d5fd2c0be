// KernelSizes: what one device kind's kernels need allocated around the math (the attention state kept
// for backward, scratch buffers, the matmul library's workspace) and whether its forward matmuls take
// bf16 as is. Plain C++ for every kind, so a meta device can allocate exactly what a cpu or a cuda run would.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/core/device.h"
#include "engine/core/tensor.h"
#include "models/kernels/cpu/attention.h"

namespace ferry::ops {

using cpu::AttentionShape;

class KernelSizes {
 public:
  virtual ~KernelSizes() = default;
  // What attention keeps from forward for backward: cpu [B, NH, T, T] probabilities; cuda (fused, flash)
  // [B, NH, T] log-sum-exps of the score rows.
  virtual Shape attention_saved_shape(const AttentionShape& shape) const = 0;
  // True when the saved state stays f32 whatever the activations' dtype.
  virtual bool attention_saved_in_f32() const = 0;
  // Scratch floats of the attention kernels (0: none).
  virtual std::int64_t attention_forward_scratch_elements(const AttentionShape& shape, float dropout) const = 0;
  virtual std::int64_t attention_backward_scratch_elements(const AttentionShape& shape) const = 0;
  // Bytes of the matmul library's workspace, taken for each matmul call (0: none).
  virtual std::size_t matmul_workspace_bytes() const = 0;
  // True when forward matmuls with bf16 inputs, weights and outputs need no f32 copies.
  virtual bool matmul_takes_bf16() const = 0;
  // Scratch floats of the LM head on `count` of `vocab` columns: a dense [rows, count] slice where the
  // device's matmul cannot address strided columns (forward, and backward's logit gradients), and a
  // [rows, channels] input gradient where the matmul cannot add into it (accumulate_input).
  virtual std::int64_t lm_head_slice_scratch_elements(std::int64_t rows, std::int64_t count, std::int64_t vocab) const = 0;
  virtual std::int64_t lm_head_input_scratch_elements(std::int64_t rows, std::int64_t channels, bool accumulate_input) const = 0;
  // Scratch floats of a weight gradient's row slice (matmul_backward_weight_rows): a dense [rows, count]
  // copy of the input's columns where the device's matmul cannot address strided ones.
  virtual std::int64_t weight_rows_scratch_elements(std::int64_t rows, std::int64_t count) const = 0;
  // Scratch floats of a row-slice matmul's dense [rows, width] result where the device's matmul can
  // neither add into its output nor write strided columns (forward slices after the first, input gradients).
  virtual std::int64_t matmul_rows_output_scratch_elements(std::int64_t rows, std::int64_t width) const = 0;
  // Scratch floats of cross-entropy: per-row losses left on the device (0: summed as computed).
  virtual std::int64_t cross_entropy_scratch_elements(std::int64_t rows) const = 0;
  // Scratch floats of a sum of squares over tensors of at most `largest` values (the gradient norm): the
  // device's f64 result and per-block partial sums (0: summed on the host as computed).
  virtual std::int64_t sum_of_squares_scratch_elements(std::int64_t largest) const = 0;
  // Bytes of f32 logits in the LM head's automatic chunk (GptModel::loss_chunk). Each chunk also re-reads and
  // re-writes the [vocab, hidden] f32 table gradient once, which on a GPU bounds short chunks by bandwidth.
  virtual std::int64_t logits_chunk_bytes() const = 0;
};

// The sizes of `kind`'s kernels (cpu or cuda; meta has none of its own: it stands in for one of them).
const KernelSizes& kernel_sizes(DeviceKind kind);

}  // namespace ferry::ops
