#include "models/cpu_kernel_backend.h"

#include <cstring>
#include <vector>

#include "models/kernels/cpu/adamw.h"
#include "models/kernels/cpu/cross_entropy.h"
#include "models/kernels/cpu/elementwise.h"
#include "models/kernels/cpu/encoder.h"
#include "models/kernels/cpu/gelu.h"
#include "models/kernels/cpu/layernorm.h"
#include "models/kernels/cpu/lm_head.h"

namespace ferry::ops {
namespace {

std::size_t size(std::int64_t count) { return static_cast<std::size_t>(count); }

double sum_in_order(const std::vector<float>& losses) {
  double total = 0;
  for (float loss : losses) total += loss;
  return total;
}

}  // namespace

void CpuKernelBackend::convert_to_f32(const void* source, DType dtype, float* destination, std::int64_t count) {
  ferry::convert_to_f32(source, destination, dtype, size(count));
}

void CpuKernelBackend::convert_from_f32(const float* source, void* destination, DType dtype, std::int64_t count) {
  ferry::convert_from_f32(source, destination, dtype, size(count));
}

void CpuKernelBackend::encoder_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, std::int64_t batch,
                                       std::int64_t sequence, std::int64_t channels) {
  cpu::encoder_forward(out, tokens, wte, wpe, batch, sequence, channels);
}

void CpuKernelBackend::encoder_forward_bf16_table(float* out, const std::int32_t* tokens, const std::uint16_t* wte, const float* wpe,
                                                  std::int64_t batch, std::int64_t sequence, std::int64_t channels) {
  cpu::encoder_forward_bf16_table(out, tokens, wte, wpe, batch, sequence, channels);
}

void CpuKernelBackend::encoder_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, std::int64_t batch,
                                        std::int64_t sequence, std::int64_t channels) {
  cpu::encoder_backward(dwte, dwpe, dout, tokens, batch, sequence, channels);
}

void CpuKernelBackend::encoder_backward_token_rows(float* table_rows, const float* dout, const std::int32_t* tokens, std::int64_t positions,
                                                   std::int64_t channels, std::int64_t first, std::int64_t count) {
  cpu::encoder_backward_token_rows(table_rows, dout, tokens, positions, channels, first, count);
}

void CpuKernelBackend::layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                                         std::int64_t rows, std::int64_t channels) {
  cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, rows, channels);
}

void CpuKernelBackend::layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                          const float* weight, const float* mean, const float* rstd, std::int64_t rows,
                                          std::int64_t channels) {
  cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, channels);
}

void CpuKernelBackend::matmul_forward(float* out, const float* inp, const float* weight, const float* bias, std::int64_t rows,
                                      std::int64_t in_features, std::int64_t out_features, WeightLayout layout, void*) {
  cpu::matmul_forward(out, inp, weight, bias, rows, in_features, out_features, layout);
}

void CpuKernelBackend::matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                       const float* weight, std::int64_t rows, std::int64_t in_features, std::int64_t out_features,
                                       WeightLayout layout, void*) {
  cpu::matmul_backward(dinp, dweight, dbias, dout, inp, weight, rows, in_features, out_features, layout);
}

void CpuKernelBackend::matmul_backward_weight_rows(float* dweight_rows, const float* dout, const float* inp, std::int64_t rows,
                                                   std::int64_t in_features, std::int64_t out_features, std::int64_t first,
                                                   std::int64_t count, float*, void*) {
  cpu::matmul_backward_weight_rows(dweight_rows, dout, inp, rows, in_features, out_features, first, count);
}

void CpuKernelBackend::matmul_forward_rows(float* out, const float* inp, const float* weight_rows, const float* bias, std::int64_t rows,
                                           std::int64_t in_features, std::int64_t out_features, std::int64_t first, std::int64_t count,
                                           bool accumulate, float*, float*, void*) {
  cpu::matmul_forward_rows(out, inp, weight_rows, bias, rows, in_features, out_features, first, count, accumulate);
}

void CpuKernelBackend::matmul_backward_input_rows(float* dinp, const float* dout, const float* weight_rows, std::int64_t rows,
                                                  std::int64_t in_features, std::int64_t out_features, std::int64_t first,
                                                  std::int64_t count, float*, void*) {
  cpu::matmul_backward_input_rows(dinp, dout, weight_rows, rows, in_features, out_features, first, count);
}

void CpuKernelBackend::lm_head_logits_slice(float* logits, std::int64_t vocab, std::int64_t first, const float* inp,
                                            const float* weight_slice, std::int64_t rows, std::int64_t channels, std::int64_t count,
                                            float*, void*) {
  cpu::lm_head_logits_slice(logits, vocab, first, inp, weight_slice, rows, channels, count);
}

void CpuKernelBackend::lm_head_backward_slice(float* dinp, bool accumulate_input, float* dweight_slice, const float* dlogits,
                                              std::int64_t vocab, std::int64_t first, const float* inp, const float* weight_slice,
                                              std::int64_t rows, std::int64_t channels, std::int64_t count, float*, float*,
                                              void*) {
  cpu::lm_head_backward_slice(dinp, accumulate_input, dweight_slice, dlogits, vocab, first, inp, weight_slice, rows, channels, count);
}

void CpuKernelBackend::attention_forward(float* out, float* saved, float* scratch, const float* qkv, const AttentionShape& shape,
                                         float dropout, RandomKey key) {
  cpu::attention_forward(out, saved, scratch, qkv, shape, dropout, key);
}

void CpuKernelBackend::attention_backward(float* dqkv, float* scratch, const float* dout, const float*, const float* qkv,
                                          const float* saved, const AttentionShape& shape, float dropout, RandomKey key) {
  cpu::attention_backward(dqkv, scratch, dout, qkv, saved, shape, dropout, key);
}

void CpuKernelBackend::gelu_forward(float* out, const float* inp, std::int64_t count) { cpu::gelu_forward(out, inp, count); }

void CpuKernelBackend::gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t count) {
  cpu::gelu_backward(dinp, inp, dout, count);
}

void CpuKernelBackend::residual_forward(float* out, const float* a, const float* b, std::int64_t count) {
  cpu::residual_forward(out, a, b, count);
}

void CpuKernelBackend::dropout_forward(float* out, const float* inp, std::int64_t count, float probability, RandomKey key) {
  cpu::dropout_forward(out, inp, count, probability, key);
}

void CpuKernelBackend::dropout_backward(float* dinp, const float* dout, std::int64_t count, float probability, RandomKey key) {
  cpu::dropout_backward(dinp, dout, count, probability, key);
}

double CpuKernelBackend::cross_entropy_sum(const float* logits, const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                                           std::int64_t row_stride, float*) {
  std::vector<float> losses(size(rows));
  cpu::cross_entropy_forward(losses.data(), logits, targets, rows, vocab, row_stride);
  return sum_in_order(losses);
}

double CpuKernelBackend::cross_entropy_sum_and_gradient(float* logits, const std::int32_t* targets, std::int64_t rows,
                                                        std::int64_t vocab, std::int64_t row_stride, float dloss, float*,
                                                        SoftmaxRow* softmax_rows) {
  std::vector<float> losses(size(rows));
  cpu::cross_entropy_forward_backward(logits, losses.data(), targets, rows, vocab, dloss, softmax_rows, row_stride);
  return sum_in_order(losses);
}

void CpuKernelBackend::cross_entropy_backward_slice(float* slice, const SoftmaxRow* softmax_rows, const std::int32_t* targets,
                                                    std::int64_t rows, std::int64_t first, std::int64_t count, float dloss) {
  cpu::cross_entropy_backward_slice(slice, softmax_rows, targets, rows, first, count, dloss);
}

void CpuKernelBackend::adamw_update(std::span<const AdamWTensor> tensors, const AdamWHyperparameters& hyperparameters,
                                    std::int64_t step, float gradient_scale) {
  for (const AdamWTensor& t : tensors) {
    cpu::adamw_update(t.parameter, t.parameter_bf16, t.gradient, t.first_moment, t.second_moment, t.count, hyperparameters, step,
                      gradient_scale);
  }
}

double CpuKernelBackend::sum_of_squares(std::span<const DeviceValues> values, float*) {
  double sum = 0;
  for (const DeviceValues& each : values) sum += cpu::sum_of_squares(each.values, each.count);
  return sum;
}

}  // namespace ferry::ops
