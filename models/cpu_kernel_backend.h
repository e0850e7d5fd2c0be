// The cpu device's kernel backend: models/kernels/cpu (OpenBLAS matmuls, threaded loops) over host
// memory, work done when the call returns. meta uses it for its scratch sizes only.
#pragma once

#include "models/kernel_backend.h"

namespace ferry::ops {

class CpuKernelBackend final : public KernelBackend {
 public:
  // meta passes the sizes of the kind it stands in for; computing, the cpu's.
  explicit CpuKernelBackend(const KernelSizes& sizes) : sizes_(sizes) {}
  const KernelSizes& sizes() const override { return sizes_; }

  void convert_to_f32(const void* source, DType dtype, float* destination, std::int64_t count) override;
  void convert_from_f32(const float* source, void* destination, DType dtype, std::int64_t count) override;

  void encoder_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, std::int64_t batch,
                       std::int64_t sequence, std::int64_t channels) override;
  void encoder_forward_bf16_table(float* out, const std::int32_t* tokens, const std::uint16_t* wte, const float* wpe,
                                  std::int64_t batch, std::int64_t sequence, std::int64_t channels) override;
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, std::int64_t batch,
                        std::int64_t sequence, std::int64_t channels) override;
  void encoder_backward_token_rows(float* table_rows, const float* dout, const std::int32_t* tokens, std::int64_t positions,
                                   std::int64_t channels, std::int64_t first, std::int64_t count) override;

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                         std::int64_t rows, std::int64_t channels) override;
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                          const float* mean, const float* rstd, std::int64_t rows, std::int64_t channels) override;

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, std::int64_t rows,
                      std::int64_t in_features, std::int64_t out_features, WeightLayout layout, void* workspace) override;
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                       std::int64_t rows, std::int64_t in_features, std::int64_t out_features, WeightLayout layout,
                       void* workspace) override;
  void matmul_backward_weight_rows(float* dweight_rows, const float* dout, const float* inp, std::int64_t rows, std::int64_t in_features,
                                   std::int64_t out_features, std::int64_t first, std::int64_t count, float* column_scratch,
                                   void* workspace) override;
  void matmul_forward_rows(float* out, const float* inp, const float* weight_rows, const float* bias, std::int64_t rows,
                           std::int64_t in_features, std::int64_t out_features, std::int64_t first, std::int64_t count, bool accumulate,
                           float* column_scratch, float* output_scratch, void* workspace) override;
  void matmul_backward_input_rows(float* dinp, const float* dout, const float* weight_rows, std::int64_t rows, std::int64_t in_features,
                                  std::int64_t out_features, std::int64_t first, std::int64_t count, float* output_scratch,
                                  void* workspace) override;

  void lm_head_logits_slice(float* logits, std::int64_t vocab, std::int64_t first, const float* inp, const float* weight_slice,
                            std::int64_t rows, std::int64_t channels, std::int64_t count, float* slice_scratch,
                            void* workspace) override;
  void lm_head_backward_slice(float* dinp, bool accumulate_input, float* dweight_slice, const float* dlogits, std::int64_t vocab,
                              std::int64_t first, const float* inp, const float* weight_slice, std::int64_t rows,
                              std::int64_t channels, std::int64_t count, float* slice_scratch, float* input_scratch,
                              void* workspace) override;

  void attention_forward(float* out, float* saved, float* scratch, const float* qkv, const AttentionShape& shape, float dropout,
                         RandomKey key) override;
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* out, const float* qkv, const float* saved,
                          const AttentionShape& shape, float dropout, RandomKey key) override;

  void gelu_forward(float* out, const float* inp, std::int64_t count) override;
  void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t count) override;
  void residual_forward(float* out, const float* a, const float* b, std::int64_t count) override;
  void dropout_forward(float* out, const float* inp, std::int64_t count, float probability, RandomKey key) override;
  void dropout_backward(float* dinp, const float* dout, std::int64_t count, float probability, RandomKey key) override;

  double cross_entropy_sum(const float* logits, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                           std::int64_t row_stride, float* scratch) override;
  double cross_entropy_sum_and_gradient(float* logits, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                                        std::int64_t row_stride, float dloss, float* scratch, SoftmaxRow* softmax_rows) override;
  void cross_entropy_backward_slice(float* slice, const SoftmaxRow* softmax_rows, const std::int32_t* targets, std::int64_t rows,
                                    std::int64_t first, std::int64_t count, float dloss) override;

  void adamw_update(std::span<const AdamWTensor> tensors, const AdamWHyperparameters& hyperparameters, std::int64_t step,
                    float gradient_scale) override;
  double sum_of_squares(std::span<const DeviceValues> values, float* scratch) override;

 private:
  const KernelSizes& sizes_;
};

}  // namespace ferry::ops
