#include "models/cuda_kernel_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "allocator/cuda_check.h"
#include "engine/core/cuda_device.h"
#include "models/kernels/cuda/adamw.h"
#include "models/kernels/cuda/cross_entropy.h"
#include "models/kernels/cuda/elementwise.h"
#include "models/kernels/cuda/encoder.h"
#include "models/kernels/cuda/flash_attention.h"
#include "models/kernels/cuda/layernorm.h"
#include "models/kernels/cuda/matmul.h"

namespace ferry::ops {
namespace {

class CudaKernelBackend final : public KernelBackend {
 public:
  explicit CudaKernelBackend(CudaDevice& device) : device_(device), stream_(device.native_stream(device.default_stream())) {}

  const KernelSizes& sizes() const override { return kernel_sizes(DeviceKind::cuda); }

  void convert_to_f32(const void* source, DType dtype, float* destination, std::int64_t count) override {
    switch (dtype) {
      case DType::f32: copy_on_device(destination, source, count * 4); return;
      case DType::bf16: cuda::convert_bf16_to_f32(static_cast<const std::uint16_t*>(source), destination, count, stream_); return;
      case DType::f16: cuda::convert_f16_to_f32(static_cast<const std::uint16_t*>(source), destination, count, stream_); return;
      default: throw std::invalid_argument("cannot convert " + std::string(dtype_name(dtype)) + " to f32: not a floating dtype");
    }
  }
  void convert_from_f32(const float* source, void* destination, DType dtype, std::int64_t count) override {
    switch (dtype) {
      case DType::f32: copy_on_device(destination, source, count * 4); return;
      case DType::bf16: cuda::convert_f32_to_bf16(source, static_cast<std::uint16_t*>(destination), count, stream_); return;
      case DType::f16: cuda::convert_f32_to_f16(source, static_cast<std::uint16_t*>(destination), count, stream_); return;
      default: throw std::invalid_argument("cannot convert f32 to " + std::string(dtype_name(dtype)) + ": not a floating dtype");
    }
  }

  void encoder_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, std::int64_t batch,
                       std::int64_t sequence, std::int64_t channels) override {
    cuda::encoder_forward(out, tokens, wte, wpe, batch, sequence, channels, stream_);
  }
  void encoder_forward_bf16_table(float* out, const std::int32_t* tokens, const std::uint16_t* wte, const float* wpe,
                                  std::int64_t batch, std::int64_t sequence, std::int64_t channels) override {
    cuda::encoder_forward_bf16_table(out, tokens, wte, wpe, batch, sequence, channels, stream_);
  }
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, std::int64_t batch,
                        std::int64_t sequence, std::int64_t channels) override {
    cuda::encoder_backward(dwte, dwpe, dout, tokens, batch, sequence, channels, stream_);
  }
  void encoder_backward_token_rows(float* table_rows, const float* dout, const std::int32_t* tokens, std::int64_t positions,
                                   std::int64_t channels, std::int64_t first, std::int64_t count) override {
    cuda::encoder_backward_token_rows(table_rows, dout, tokens, positions, channels, first, count, stream_);
  }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                         std::int64_t rows, std::int64_t channels) override {
    cuda::layernorm_forward(out, mean, rstd, inp, weight, bias, rows, channels, stream_);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                          const float* mean, const float* rstd, std::int64_t rows, std::int64_t channels) override {
    cuda::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, channels, stream_);
  }

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, std::int64_t rows, std::int64_t in_features,
                      std::int64_t out_features, WeightLayout layout, void* workspace) override {
    cuda::matmul_forward(cublas_, workspace_of(workspace), f32_type(), out, inp, weight, bias, rows, in_features,
                         out_features, layout, stream_);
  }
  void matmul_forward_bf16(void* out, const void* inp, const void* weight, const void* bias, std::int64_t rows,
                           std::int64_t in_features, std::int64_t out_features, WeightLayout layout, void* workspace) override {
    cuda::matmul_forward(cublas_, workspace_of(workspace), cuda::MatmulType::bf16, out, inp, weight, bias, rows, in_features,
                         out_features, layout, stream_);
  }
  void matmul_backward_bf16(void* dinp, float* dweight, float* dbias, const void* dout, const void* inp, const void* weight, std::int64_t rows,
                            std::int64_t in_features, std::int64_t out_features, WeightLayout layout, void* workspace) override {
    cuda::matmul_backward(cublas_, workspace_of(workspace), cuda::MatmulType::bf16, dinp, dweight, dbias, dout, inp, weight, rows,
                          in_features, out_features, layout, stream_);
  }
  void lm_head_logits_bf16(float* logits, std::int64_t logits_stride, const void* inp, const void* table, std::int64_t rows,
                           std::int64_t channels, std::int64_t vocab, void* workspace) override {
    cuda::lm_head_logits_bf16(cublas_, workspace_of(workspace), logits, logits_stride, inp, table, rows, channels, vocab, stream_);
  }
  void lm_head_backward_bf16(float* dinp, bool accumulate_input, float* dtable_rows, const void* dlogits, std::int64_t dlogits_stride,
                             const void* inp, const void* table_rows,
                             std::int64_t rows, std::int64_t channels, std::int64_t vocab, std::int64_t first, std::int64_t count,
                             void* workspace) override {
    cuda::lm_head_backward_bf16(cublas_, workspace_of(workspace), dinp, accumulate_input, dtable_rows, dlogits, dlogits_stride, inp, table_rows, rows, channels,
                                vocab, first, count, stream_);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                       std::int64_t rows, std::int64_t in_features, std::int64_t out_features, WeightLayout layout,
                       void* workspace) override {
    cuda::matmul_backward(cublas_, workspace_of(workspace), f32_type(), dinp, dweight, dbias, dout, inp, weight, rows,
                          in_features, out_features, layout, stream_);
  }

  // The input's columns [first, first + count) are copied dense first (cuBLASLt reads the slice densely).
  void matmul_backward_weight_rows(float* dweight_rows, const float* dout, const float* inp, std::int64_t rows, std::int64_t in_features,
                                   std::int64_t out_features, std::int64_t first, std::int64_t count, float* column_scratch,
                                   void* workspace) override {
    copy_columns(required(column_scratch, "weight-gradient rows"), count, inp + first, in_features, rows, count);
    matmul_backward(nullptr, dweight_rows, nullptr, dout, column_scratch, nullptr, rows, count, out_features, WeightLayout::in_out, workspace);
  }

  // Row slices of a weight: the input's columns dense first; a slice after the first is computed apart
  // and added, and an input gradient's columns are computed dense and copied into place.
  void matmul_forward_rows(float* out, const float* inp, const float* weight_rows, const float* bias, std::int64_t rows,
                           std::int64_t in_features, std::int64_t out_features, std::int64_t first, std::int64_t count, bool accumulate,
                           float* column_scratch, float* output_scratch, void* workspace) override {
    copy_columns(required(column_scratch, "matmul input columns"), count, inp + first, in_features, rows, count);
    if (!accumulate) {
      matmul_forward(out, column_scratch, weight_rows, bias, rows, count, out_features, WeightLayout::in_out, workspace);
      return;
    }
    float* part = required(output_scratch, "matmul slice output");
    matmul_forward(part, column_scratch, weight_rows, nullptr, rows, count, out_features, WeightLayout::in_out, workspace);
    residual_forward(out, out, part, rows * out_features);
  }
  void matmul_backward_input_rows(float* dinp, const float* dout, const float* weight_rows, std::int64_t rows, std::int64_t in_features,
                                  std::int64_t out_features, std::int64_t first, std::int64_t count, float* output_scratch,
                                  void* workspace) override {
    float* part = required(output_scratch, "matmul input-gradient slice");
    matmul_backward(part, nullptr, nullptr, dout, nullptr, weight_rows, rows, count, out_features, WeightLayout::in_out, workspace);
    copy_columns(dinp + first, in_features, part, count, rows, count);
  }

  // A slice narrower than the vocabulary goes through a contiguous [rows, count] buffer (cuBLASLt writes
  // and reads it densely) copied into or out of its columns of the logits; an input gradient to add to
  // is computed apart and added (cuBLASLt's backward overwrites it).
  void lm_head_logits_slice(float* logits, std::int64_t vocab, std::int64_t first, const float* inp, const float* weight_slice,
                            std::int64_t rows, std::int64_t channels, std::int64_t count, float* slice_scratch,
                            void* workspace) override {
    if (count == vocab) {
      matmul_forward(logits, inp, weight_slice, nullptr, rows, channels, count, WeightLayout::out_in, workspace);
      return;
    }
    matmul_forward(required(slice_scratch, "lm_head slice"), inp, weight_slice, nullptr, rows, channels, count, WeightLayout::out_in,
                   workspace);
    copy_columns(logits + first, vocab, slice_scratch, count, rows, count);
  }
  void lm_head_backward_slice(float* dinp, bool accumulate_input, float* dweight_slice, const float* dlogits, std::int64_t vocab,
                              std::int64_t first, const float* inp, const float* weight_slice, std::int64_t rows,
                              std::int64_t channels, std::int64_t count, float* slice_scratch, float* input_scratch,
                              void* workspace) override {
    const float* dout = dlogits;
    if (count != vocab) {
      copy_columns(required(slice_scratch, "lm_head gradient slice"), count, dlogits + first, vocab, rows, count);
      dout = slice_scratch;
    }
    float* dinp_target = accumulate_input ? required(input_scratch, "lm_head input gradient") : dinp;
    matmul_backward(dinp_target, dweight_slice, nullptr, dout, inp, weight_slice, rows, channels, count, WeightLayout::out_in,
                    workspace);
    if (accumulate_input) residual_forward(dinp, dinp, dinp_target, rows * channels);
  }

  void attention_forward(float* out, float* saved, float*, const float* qkv, const AttentionShape& shape, float dropout,
                         RandomKey key) override {
    cuda::flash_attention_forward(out, saved, qkv, shape, dropout, key, attention_products(), stream_);
  }
  void attention_backward(float* dqkv, float* scratch_values, const float* dout, const float* out, const float* qkv, const float* saved,
                          const AttentionShape& shape, float dropout, RandomKey key) override {
    cuda::flash_attention_backward(dqkv, scratch_values, dout, out, qkv, saved, shape, dropout, key, attention_products(), stream_);
  }

  void gelu_forward(float* out, const float* inp, std::int64_t count) override { cuda::gelu_forward(out, inp, count, stream_); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t count) override {
    cuda::gelu_backward(dinp, inp, dout, count, stream_);
  }
  void residual_forward(float* out, const float* a, const float* b, std::int64_t count) override {
    cuda::residual_forward(out, a, b, count, stream_);
  }
  void dropout_forward(float* out, const float* inp, std::int64_t count, float probability, RandomKey key) override {
    cuda::dropout_forward(out, inp, count, probability, key, stream_);
  }
  void dropout_backward(float* dinp, const float* dout, std::int64_t count, float probability, RandomKey key) override {
    cuda::dropout_backward(dinp, dout, count, probability, key, stream_);
  }

  double cross_entropy_sum(const float* logits, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab, std::int64_t row_stride,
                           float* scratch) override {
    cuda::cross_entropy_forward(required(scratch, "cross_entropy losses"), logits, targets, rows, vocab, stream_, row_stride);
    return sum_on_host(scratch, rows);
  }
  double cross_entropy_sum_and_gradient(float* logits, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                                        std::int64_t row_stride, float dloss, float* scratch, SoftmaxRow* softmax_rows) override {
    cuda::cross_entropy_forward_backward(logits, required(scratch, "cross_entropy losses"), targets, rows, vocab, dloss, stream_, softmax_rows,
                                         row_stride);
    return sum_on_host(scratch, rows);
  }
  void cross_entropy_backward_slice(float* slice, const SoftmaxRow* softmax_rows, const std::int32_t* targets, std::int64_t rows,
                                    std::int64_t first, std::int64_t count, float dloss) override {
    cuda::cross_entropy_backward_slice(slice, softmax_rows, targets, rows, first, count, dloss, stream_);
  }

  void adamw_update(std::span<const AdamWTensor> tensors, const AdamWHyperparameters& hyperparameters, std::int64_t step,
                    float gradient_scale) override {
    cuda::adamw_update(tensors, hyperparameters, step, gradient_scale, stream_);
  }
  // Every tensor's sum accumulates into one f64 on the device (scratch's first), in list order; one copy to
  // the host. The per-block partial sums follow it.
  double sum_of_squares(std::span<const DeviceValues> values, float* scratch) override {
    auto* result = reinterpret_cast<double*>(required(scratch, "sum of squares"));
    device_.fill_zero(result, sizeof(double), device_.default_stream());
    for (const DeviceValues& each : values) cuda::sum_of_squares(result, true, each.values, each.count, result + 1, stream_);
    double sum = 0;
    device_.copy(&sum, result, sizeof(double), CopyKind::device_to_host, device_.default_stream());
    device_.synchronize(device_.default_stream());
    return sum;
  }

 private:
  static cuda::MatmulWorkspace workspace_of(void* data) { return {data, data ? cuda::kMatmulWorkspaceBytes : 0}; }
  // Scratch tensor_ops was to allocate from sizes(): null here is a sizing bug, not a user error.
  static float* required(float* scratch, const char* what) {
    if (scratch == nullptr) throw std::logic_error(std::string("cuda kernels: no scratch for the ") + what + " (sizes() asked for none)");
    return scratch;
  }


  void copy_on_device(void* destination, const void* source, std::int64_t bytes) {
    device_.copy(destination, source, static_cast<std::size_t>(bytes), CopyKind::device_to_device, device_.default_stream());
  }
  // rows x width floats from source (row pitch source_stride floats) to destination (destination_stride).
  void copy_columns(float* destination, std::int64_t destination_stride, const float* source, std::int64_t source_stride,
                    std::int64_t rows, std::int64_t width) {
    FERRY_CUDA_CHECK(cudaMemcpy2DAsync(destination, static_cast<std::size_t>(destination_stride) * sizeof(float), source,
                                       static_cast<std::size_t>(source_stride) * sizeof(float),
                                       static_cast<std::size_t>(width) * sizeof(float), static_cast<std::size_t>(rows),
                                       cudaMemcpyDeviceToDevice, stream_));
  }
  // The losses' sum in row order, as the cpu backend adds them.
  double sum_on_host(const float* losses, std::int64_t rows) {
    std::vector<float> values(static_cast<std::size_t>(rows));
    device_.copy(values.data(), losses, values.size() * sizeof(float), CopyKind::device_to_host, device_.default_stream());
    device_.synchronize(device_.default_stream());
    double total = 0;
    for (float loss : values) total += loss;
    return total;
  }

  // A 16-bit model (F32Products::tf32) multiplies in attention with bf16 operands, as autocast's
  // scaled_dot_product_attention does (its q, k and v are bf16 products' results already); an f32 model exactly.
  cuda::AttentionProducts attention_products() const {
    return f32_products() == F32Products::tf32 ? cuda::AttentionProducts::bf16 : cuda::AttentionProducts::f32;
  }
  cuda::MatmulType f32_type() const { return f32_products() == F32Products::tf32 ? cuda::MatmulType::tf32 : cuda::MatmulType::f32; }

  CudaDevice& device_;
  cudaStream_t stream_;
  cuda::CublasLtHandle cublas_;
};

}  // namespace

std::unique_ptr<KernelBackend> make_cuda_kernel_backend(Device& device) {
  auto* cuda_device = dynamic_cast<CudaDevice*>(&device);
  if (cuda_device == nullptr) throw std::logic_error("make_cuda_kernel_backend: " + device.name() + " is not a cuda device");
  FERRY_CUDA_CHECK(cudaSetDevice(cuda_device->ordinal()));
  return std::make_unique<CudaKernelBackend>(*cuda_device);
}

}  // namespace ferry::ops
