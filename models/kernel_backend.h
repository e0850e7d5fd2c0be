// The kernels of one device kind behind one interface over f32 buffers in that device's memory:
// tensor_ops checks shapes and dtypes, takes scratch from the allocator in the sizes the backend's
// KernelSizes ask for, and calls the backend of the tensors' device (cpu; cuda in CUDA builds). meta
// never computes; it takes the sizes of the kind it stands in for (cpu unless told), so a dry run
// allocates exactly what a run on that kind does.
#pragma once

#include <cstdint>
#include <span>

#include "engine/core/adamw_hyperparameters.h"
#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"
#include "models/kernels/cpu/attention.h"
#include "models/kernels/cpu/counter_random.h"
#include "models/kernels/cpu/cross_entropy.h"
#include "models/kernels/cpu/matmul.h"
#include "models/kernel_sizes.h"

namespace ferry::ops {

using cpu::AttentionShape;
using cpu::RandomKey;
using cpu::SoftmaxRow;
using cpu::WeightLayout;

// `count` f32 values in device memory: one term of a sum of squares.
struct DeviceValues {
  const float* values = nullptr;
  std::int64_t count = 0;
};

// How f32 matrix products are computed where the device has a choice: exact fp32 products, or the tensor
// cores' TF32 products (operands rounded to 10 mantissa bits; fp32 accumulation either way). A 16-bit
// model's f32 products take bf16/fp16 values (exact in TF32) and f32 gradients (TF32 keeps 3 more bits
// of them than the bf16 products PyTorch's autocast takes), so GptModel asks for tf32 when its parameters
// are 16-bit. The cpu computes exact products whatever is asked (it has no TF32 unit); cuda honours it.
enum class F32Products : std::uint8_t { exact, tf32 };

class KernelBackend : public DeviceAttachment {
 public:
  // What this kind's kernels need allocated around them (tensor_ops allocates it).
  virtual const KernelSizes& sizes() const = 0;

  void set_f32_products(F32Products products) { f32_products_ = products; }
  F32Products f32_products() const { return f32_products_; }

  // bf16/f16 <-> f32 (round to nearest even); f32 to f32 copies.
  virtual void convert_to_f32(const void* source, DType dtype, float* destination, std::int64_t count) = 0;
  virtual void convert_from_f32(const float* source, void* destination, DType dtype, std::int64_t count) = 0;

  virtual void encoder_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, std::int64_t batch,
                               std::int64_t sequence, std::int64_t channels) = 0;
  virtual void encoder_forward_bf16_table(float* out, const std::int32_t* tokens, const std::uint16_t* wte, const float* wpe,
                                          std::int64_t batch, std::int64_t sequence, std::int64_t channels) = 0;
  virtual void encoder_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, std::int64_t batch,
                                std::int64_t sequence, std::int64_t channels) = 0;
  // The token table's gradient rows [first, first + count) (table_rows holds them) from `positions` rows of dout.
  virtual void encoder_backward_token_rows(float* table_rows, const float* dout, const std::int32_t* tokens, std::int64_t positions,
                                           std::int64_t channels, std::int64_t first, std::int64_t count) = 0;

  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                                 std::int64_t rows, std::int64_t channels) = 0;
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                  const float* weight, const float* mean, const float* rstd, std::int64_t rows,
                                  std::int64_t channels) = 0;

  // workspace: sizes().matmul_workspace_bytes() bytes (null when 0).
  virtual void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, std::int64_t rows,
                              std::int64_t in_features, std::int64_t out_features, WeightLayout layout, void* workspace) = 0;
  virtual void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                               std::int64_t rows, std::int64_t in_features, std::int64_t out_features, WeightLayout layout,
                               void* workspace) = 0;

  // Rows [first, first + count) of an in_out weight's gradient [in, out]: dweight_rows[count, out] +=
  // inp[:, first:first+count]^T x dout (the contiguous piece a gradient bucket of bounded size holds).
  // column_scratch: sizes().weight_rows_scratch_elements(rows, count) floats (null when 0).
  virtual void matmul_backward_weight_rows(float* dweight_rows, const float* dout, const float* inp, std::int64_t rows,
                                           std::int64_t in_features, std::int64_t out_features, std::int64_t first, std::int64_t count,
                                           float* column_scratch, void* workspace) = 0;

  // An in_out matmul over rows [first, first + count) of its weight (cpu/matmul.h): forward into out
  // (accumulating after the first slice; bias with the first), and the input gradient's columns.
  // column_scratch: sizes().weight_rows_scratch_elements(rows, count); output_scratch:
  // sizes().matmul_rows_output_scratch_elements(rows, width) (null when 0).
  virtual void matmul_forward_rows(float* out, const float* inp, const float* weight_rows, const float* bias, std::int64_t rows,
                                   std::int64_t in_features, std::int64_t out_features, std::int64_t first, std::int64_t count,
                                   bool accumulate, float* column_scratch, float* output_scratch, void* workspace) = 0;
  virtual void matmul_backward_input_rows(float* dinp, const float* dout, const float* weight_rows, std::int64_t rows,
                                          std::int64_t in_features, std::int64_t out_features, std::int64_t first, std::int64_t count,
                                          float* output_scratch, void* workspace) = 0;

  // Where sizes().matmul_takes_bf16() (cuda: cuBLASLt on bf16 inputs with fp32 accumulation):
  // matmul_forward on bf16 bit patterns (out, inp, weight, bias; bias may be null), out rounded once.
  virtual void matmul_forward_bf16(void* out, const void* inp, const void* weight, const void* bias, std::int64_t rows,
                                   std::int64_t in_features, std::int64_t out_features, WeightLayout layout, void* workspace);
  // matmul_backward on bf16 dout, inp and weight: dinp (bf16) overwritten, the f32 dweight and dbias added to.
  virtual void matmul_backward_bf16(void* dinp, float* dweight, float* dbias, const void* dout, const void* inp, const void* weight,
                                    std::int64_t rows, std::int64_t in_features, std::int64_t out_features, WeightLayout layout,
                                    void* workspace);

  // Where sizes().matmul_takes_bf16(): the tied LM head on the bf16 table itself (no f32 copy of it);
  // inp, table and dlogits are bf16 bit patterns, logits and the gradients f32 (cuda/matmul.h); the
  // logits' rows lie logits_stride apart, dlogits' dlogits_stride.
  virtual void lm_head_logits_bf16(float* logits, std::int64_t logits_stride, const void* inp, const void* table, std::int64_t rows,
                                   std::int64_t channels, std::int64_t vocab, void* workspace);
  virtual void lm_head_backward_bf16(float* dinp, bool accumulate_input, float* dtable_rows, const void* dlogits, std::int64_t dlogits_stride,
                                     const void* inp,
                                     const void* table_rows, std::int64_t rows, std::int64_t channels, std::int64_t vocab, std::int64_t first,
                                     std::int64_t count, void* workspace);

  // The tied LM head on columns [first, first + count) of logits [rows, vocab]; see tensor_ops.h.
  // slice_scratch, input_scratch: sizes().lm_head_*_scratch_elements floats (null when 0).
  virtual void lm_head_logits_slice(float* logits, std::int64_t vocab, std::int64_t first, const float* inp,
                                    const float* weight_slice, std::int64_t rows, std::int64_t channels, std::int64_t count,
                                    float* slice_scratch, void* workspace) = 0;
  virtual void lm_head_backward_slice(float* dinp, bool accumulate_input, float* dweight_slice, const float* dlogits,
                                      std::int64_t vocab, std::int64_t first, const float* inp, const float* weight_slice,
                                      std::int64_t rows, std::int64_t channels, std::int64_t count, float* slice_scratch,
                                      float* input_scratch, void* workspace) = 0;

  // saved: sizes().attention_saved_shape; scratch: the sizes().attention_*_scratch_elements floats.
  virtual void attention_forward(float* out, float* saved, float* scratch, const float* qkv, const AttentionShape& shape,
                                 float dropout, RandomKey key) = 0;
  // out: the forward's output (the fused kernels recompute the probabilities from it and saved).
  virtual void attention_backward(float* dqkv, float* scratch, const float* dout, const float* out, const float* qkv,
                                  const float* saved, const AttentionShape& shape, float dropout, RandomKey key) = 0;

  virtual void gelu_forward(float* out, const float* inp, std::int64_t count) = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t count) = 0;
  virtual void residual_forward(float* out, const float* a, const float* b, std::int64_t count) = 0;
  virtual void dropout_forward(float* out, const float* inp, std::int64_t count, float probability, RandomKey key) = 0;
  virtual void dropout_backward(float* dinp, const float* dout, std::int64_t count, float probability, RandomKey key) = 0;

  // The sum over rows of softmax cross-entropy losses, in double on the host (the training variant turns
  // logits into their gradient times dloss). scratch: sizes().cross_entropy_scratch_elements floats.
  // Rows lie row_stride floats apart (>= vocab; the columns past vocab are padding, never read).
  virtual double cross_entropy_sum(const float* logits, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                                   std::int64_t row_stride, float* scratch) = 0;
  // softmax_rows (may be null): each row's statistics, for cross_entropy_backward_slice later.
  virtual double cross_entropy_sum_and_gradient(float* logits, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                                                std::int64_t row_stride, float dloss, float* scratch, SoftmaxRow* softmax_rows) = 0;
  // A [rows, count] slice of logits columns [first, first + count) becomes their gradient from the saved statistics.
  virtual void cross_entropy_backward_slice(float* slice, const SoftmaxRow* softmax_rows, const std::int32_t* targets, std::int64_t rows,
                                            std::int64_t first, std::int64_t count, float dloss) = 0;

  // One AdamW step of every tensor with the same hyperparameters; the sum of squares of all values, on the
  // host, repeatable bit for bit (scratch: sizes().sum_of_squares_scratch_elements of the largest count).
  virtual void adamw_update(std::span<const AdamWTensor> tensors, const AdamWHyperparameters& hyperparameters, std::int64_t step,
                            float gradient_scale) = 0;
  virtual double sum_of_squares(std::span<const DeviceValues> values, float* scratch) = 0;

 private:
  F32Products f32_products_ = F32Products::exact;
};

// The backend of `device`'s kind (made on first use and kept with the device; meta's has cpu's sizes
// unless stand_in_for chose otherwise).
KernelBackend& kernel_backend(Device& device);

// Makes the meta device `meta` allocate what `kind`'s kernels would (a dry run of a cuda run on any
// machine). Call before the device's first op; throws std::logic_error for a device that is not meta or
// already stands in for another kind.
void stand_in_for(Device& meta, DeviceKind kind);

}  // namespace ferry::ops
