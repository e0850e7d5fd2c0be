// The kernels of one device kind behind one interface over f32 buffers in that device's memory:
// tensor_ops checks shapes and dtypes, takes scratch from the allocator in the sizes asked here, and
// calls the backend of the tensors' device (cpu; cuda in CUDA builds). meta uses the cpu backend's sizes
// and never computes, so a dry run allocates exactly what a cpu run does.
#pragma once

#include <cstdint>
#include <span>

#include "engine/core/adamw_hyperparameters.h"
#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"
#include "models/kernels/cpu/attention.h"
#include "models/kernels/cpu/counter_random.h"
#include "models/kernels/cpu/matmul.h"

namespace ferry::ops {

using cpu::AttentionShape;
using cpu::RandomKey;
using cpu::WeightLayout;

// `count` f32 values in device memory: one term of a sum of squares.
struct DeviceValues {
  const float* values = nullptr;
  std::int64_t count = 0;
};

class KernelBackend : public DeviceAttachment {
 public:
  // What attention keeps from forward for backward: cpu [B, NH, T, T] probabilities; cuda (fused, flash)
  // [B, NH, T] log-sum-exps of the score rows.
  virtual Shape attention_saved_shape(const AttentionShape& shape) const = 0;
  // True when the saved state stays f32 whatever the activations' dtype.
  virtual bool attention_saved_in_f32() const = 0;
  // Scratch floats the attention kernels need (0: none), and bytes of a matmul's library workspace.
  virtual std::int64_t attention_forward_scratch_elements(const AttentionShape& shape, float dropout) const = 0;
  virtual std::int64_t attention_backward_scratch_elements(const AttentionShape& shape) const = 0;
  virtual std::size_t matmul_workspace_bytes() const = 0;

  // bf16/f16 <-> f32 (round to nearest even); f32 to f32 copies.
  virtual void convert_to_f32(const void* source, DType dtype, float* destination, std::int64_t count) = 0;
  virtual void convert_from_f32(const float* source, void* destination, DType dtype, std::int64_t count) = 0;

  virtual void encoder_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, std::int64_t batch,
                               std::int64_t sequence, std::int64_t channels) = 0;
  virtual void encoder_forward_bf16_table(float* out, const std::int32_t* tokens, const std::uint16_t* wte, const float* wpe,
                                          std::int64_t batch, std::int64_t sequence, std::int64_t channels) = 0;
  virtual void encoder_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, std::int64_t batch,
                                std::int64_t sequence, std::int64_t channels) = 0;

  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                                 std::int64_t rows, std::int64_t channels) = 0;
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                  const float* weight, const float* mean, const float* rstd, std::int64_t rows,
                                  std::int64_t channels) = 0;

  // workspace: matmul_workspace_bytes() bytes (null when 0).
  virtual void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, std::int64_t rows,
                              std::int64_t in_features, std::int64_t out_features, WeightLayout layout, void* workspace) = 0;
  virtual void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                               std::int64_t rows, std::int64_t in_features, std::int64_t out_features, WeightLayout layout,
                               void* workspace) = 0;

  // True when matmul_forward_bf16 exists (cuda: cuBLASLt on bf16 inputs with fp32 accumulation).
  virtual bool matmul_takes_bf16() const { return false; }
  // matmul_forward on bf16 bit patterns (out, inp, weight, bias; bias may be null), out rounded once.
  virtual void matmul_forward_bf16(void* out, const void* inp, const void* weight, const void* bias, std::int64_t rows,
                                   std::int64_t in_features, std::int64_t out_features, WeightLayout layout, void* workspace);

  // The tied LM head on columns [first, first + count) of logits [rows, vocab]; see tensor_ops.h.
  virtual void lm_head_logits_slice(float* logits, std::int64_t vocab, std::int64_t first, const float* inp,
                                    const float* weight_slice, std::int64_t rows, std::int64_t channels, std::int64_t count,
                                    void* workspace) = 0;
  virtual void lm_head_backward_slice(float* dinp, bool accumulate_input, float* dweight_slice, const float* dlogits,
                                      std::int64_t vocab, std::int64_t first, const float* inp, const float* weight_slice,
                                      std::int64_t rows, std::int64_t channels, std::int64_t count, void* workspace) = 0;

  // saved: attention_saved_shape; scratch: the *_scratch_elements floats.
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
  // logits into their gradient times dloss).
  virtual double cross_entropy_sum(const float* logits, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab) = 0;
  virtual double cross_entropy_sum_and_gradient(float* logits, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                                                float dloss) = 0;

  // One AdamW step of every tensor with the same hyperparameters; the sum of squares of all values, on the
  // host, repeatable bit for bit.
  virtual void adamw_update(std::span<const AdamWTensor> tensors, const AdamWHyperparameters& hyperparameters, std::int64_t step,
                            float gradient_scale) = 0;
  virtual double sum_of_squares(std::span<const DeviceValues> values) = 0;
};

// The backend of `device`'s kind (made on first use and kept with the device).
KernelBackend& kernel_backend(Device& device);

}  // namespace ferry::ops
