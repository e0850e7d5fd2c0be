#include "models/tensor_ops.h"

#include <stdexcept>
#include <vector>

#include "models/kernels/cpu/attention.h"
#include "models/kernels/cpu/cross_entropy.h"
#include "models/kernels/cpu/elementwise.h"
#include "models/kernels/cpu/encoder.h"
#include "models/kernels/cpu/gelu.h"
#include "models/kernels/cpu/layernorm.h"
#include "models/kernels/cpu/lm_head.h"

namespace ferry::ops {
namespace {

bool computes(const Tensor& tensor) {
  if (tensor.device().kind() == DeviceKind::cuda) {
    throw std::logic_error("the cuda kernels are not built yet: train on --device cpu, or dry-run on --device meta");
  }
  return tensor.device().has_storage();
}

float* f32(const Tensor& tensor) { return tensor.defined() ? tensor.data_as<float>() : nullptr; }

void require(bool condition, std::string_view op, const std::string& what) {
  if (!condition) throw std::invalid_argument(std::string(op) + ": " + what);
}

std::int64_t last_dimension(const Tensor& tensor) { return tensor.size(tensor.dim() - 1); }

}  // namespace

Tensor as_f32(const Tensor& tensor, std::string_view tag) {
  if (tensor.dtype() == DType::f32) return tensor;
  Tensor copy = Tensor::empty(tensor.device(), tensor.shape(), DType::f32, MemoryCategory::workspace, tag);
  if (computes(tensor)) {
    if (tensor.dtype() != DType::bf16) throw std::invalid_argument("as_f32: unsupported dtype " + std::string(dtype_name(tensor.dtype())));
    convert_bf16_to_f32(tensor.data_as<std::uint16_t>(), copy.data_as<float>(), static_cast<std::size_t>(tensor.numel()));
  }
  return copy;
}

Tensor f32_target(const Tensor& destination, std::string_view tag) {
  if (destination.dtype() == DType::f32) return destination;
  return Tensor::empty(destination.device(), destination.shape(), DType::f32, MemoryCategory::workspace, tag);
}

void store(const Tensor& destination, const Tensor& result) {
  if (destination.storage() == result.storage() && destination.storage_offset() == result.storage_offset()) return;
  if (!computes(destination)) return;
  if (destination.dtype() != DType::bf16) throw std::invalid_argument("store: unsupported dtype " + std::string(dtype_name(destination.dtype())));
  convert_f32_to_bf16(result.data_as<float>(), destination.data_as<std::uint16_t>(), static_cast<std::size_t>(destination.numel()));
}

void fill_zero(const Tensor& tensor) {
  tensor.device().fill_zero(tensor.data(), tensor.nbytes(), tensor.storage()->stream());
}

void encoder_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  const std::int64_t B = tokens.size(0), T = tokens.size(1), C = last_dimension(wte);
  require(T <= wpe.size(0), "encoder_forward", "sequence " + std::to_string(T) + " exceeds the model's positions " + std::to_string(wpe.size(0)));
  const Tensor out32 = f32_target(out, "encoder.out");
  const Tensor wpe32 = as_f32(wpe, "wpe.f32");
  if (wte.dtype() == DType::bf16) {  // converts only the rows the tokens use
    if (computes(out)) {
      cpu::encoder_forward_bf16_table(f32(out32), tokens.data_as<std::int32_t>(), wte.data_as<std::uint16_t>(), f32(wpe32), B, T, C);
    }
  } else if (computes(out)) {
    cpu::encoder_forward(f32(out32), tokens.data_as<std::int32_t>(), f32(wte), f32(wpe32), B, T, C);
  }
  store(out, out32);
}

void encoder_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens) {
  if (computes(dout)) {
    cpu::encoder_backward(f32(dwte), f32(dwpe), f32(dout), tokens.data_as<std::int32_t>(), tokens.size(0), tokens.size(1), last_dimension(dout));
  }
}

void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias) {
  const std::int64_t C = last_dimension(weight);
  require(last_dimension(inp) == C, "layernorm_forward", "input width " + std::to_string(last_dimension(inp)) + " != " + std::to_string(C));
  const Tensor inp32 = as_f32(inp, "layernorm.in.f32");
  const Tensor weight32 = as_f32(weight, "layernorm.weight.f32");
  const Tensor bias32 = as_f32(bias, "layernorm.bias.f32");
  const Tensor out32 = f32_target(out, "layernorm.out.f32");
  if (computes(out)) cpu::layernorm_forward(f32(out32), f32(mean), f32(rstd), f32(inp32), f32(weight32), f32(bias32), inp.numel() / C, C);
  store(out, out32);
}

void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  const std::int64_t C = last_dimension(weight);
  const Tensor inp32 = as_f32(inp, "layernorm.in.f32");
  const Tensor weight32 = as_f32(weight, "layernorm.weight.f32");
  if (computes(dinp)) {
    cpu::layernorm_backward(f32(dinp), f32(dweight), f32(dbias), f32(dout), f32(inp32), f32(weight32), f32(mean), f32(rstd),
                            inp.numel() / C, C);
  }
}

void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias, WeightLayout layout) {
  const std::int64_t in = layout == WeightLayout::in_out ? weight.size(0) : weight.size(1);
  const std::int64_t out_features = layout == WeightLayout::in_out ? weight.size(1) : weight.size(0);
  require(last_dimension(inp) == in && last_dimension(out) == out_features, "matmul_forward",
          "shapes " + shape_to_string(inp.shape()) + " x " + shape_to_string(weight.shape()) + " -> " + shape_to_string(out.shape()) + " do not match");
  const Tensor inp32 = as_f32(inp, "matmul.in.f32");
  const Tensor weight32 = as_f32(weight, "matmul.weight.f32");
  const Tensor bias32 = bias.defined() ? as_f32(bias, "matmul.bias.f32") : Tensor();
  const Tensor out32 = f32_target(out, "matmul.out.f32");
  if (computes(out)) cpu::matmul_forward(f32(out32), f32(inp32), f32(weight32), f32(bias32), inp.numel() / in, in, out_features, layout);
  store(out, out32);
}

void matmul_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight, WeightLayout layout) {
  const std::int64_t in = layout == WeightLayout::in_out ? weight.size(0) : weight.size(1);
  const std::int64_t out_features = layout == WeightLayout::in_out ? weight.size(1) : weight.size(0);
  const Tensor inp32 = dweight.defined() ? as_f32(inp, "matmul.in.f32") : Tensor();
  const Tensor weight32 = dinp.defined() ? as_f32(weight, "matmul.weight.f32") : Tensor();
  if (computes(dout)) {
    cpu::matmul_backward(f32(dinp), f32(dweight), f32(dbias), f32(dout), f32(inp32), f32(weight32), inp.numel() / in, in,
                         out_features, layout);
  }
}

void lm_head_logits_slice(const Tensor& logits, std::int64_t first, const Tensor& inp, const Tensor& weight_slice) {
  const std::int64_t rows = inp.size(0), C = inp.size(1), count = weight_slice.size(0), vocab = logits.size(1);
  require(logits.size(0) == rows && weight_slice.size(1) == C && first >= 0 && first + count <= vocab, "lm_head_logits_slice",
          "shapes " + shape_to_string(inp.shape()) + " x " + shape_to_string(weight_slice.shape()) + " at column " +
              std::to_string(first) + " of " + shape_to_string(logits.shape()) + " do not match");
  if (computes(logits)) cpu::lm_head_logits_slice(f32(logits), vocab, first, f32(inp), f32(weight_slice), rows, C, count);
}

void lm_head_backward_slice(const Tensor& dinp, bool accumulate_input, const Tensor& dweight_slice, const Tensor& dlogits,
                            std::int64_t first, const Tensor& inp, const Tensor& weight_slice) {
  const std::int64_t rows = inp.size(0), C = inp.size(1), count = weight_slice.size(0), vocab = dlogits.size(1);
  require(dweight_slice.shape() == weight_slice.shape() && dinp.shape() == inp.shape() && first + count <= vocab,
          "lm_head_backward_slice", "gradient shapes do not match the slice " + shape_to_string(weight_slice.shape()));
  if (computes(dlogits)) {
    cpu::lm_head_backward_slice(f32(dinp), accumulate_input, f32(dweight_slice), f32(dlogits), vocab, first, f32(inp),
                                f32(weight_slice), rows, C, count);
  }
}

void attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv, std::int64_t heads, float dropout,
                       RandomKey key) {
  const cpu::AttentionShape shape{qkv.size(0), qkv.size(1), qkv.size(2) / 3, heads};
  const Tensor qkv32 = as_f32(qkv, "attention.qkv.f32");
  const Tensor att32 = f32_target(att, "attention.att.f32");
  const Tensor out32 = f32_target(out, "attention.out.f32");
  const Tensor scratch = dropout > 0 ? Tensor::empty(out.device(), att.shape(), DType::f32, MemoryCategory::workspace,
                                                     "attention.dropped")
                                     : Tensor();
  if (computes(out)) cpu::attention_forward(f32(out32), f32(att32), f32(scratch), f32(qkv32), shape, dropout, key);
  store(att, att32);
  store(out, out32);
}

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        std::int64_t heads, float dropout, RandomKey key) {
  const cpu::AttentionShape shape{qkv.size(0), qkv.size(1), qkv.size(2) / 3, heads};
  const Tensor qkv32 = as_f32(qkv, "attention.qkv.f32");
  const Tensor att32 = as_f32(att, "attention.att.f32");
  const Tensor scratch = Tensor::empty(dqkv.device(), att.shape(), DType::f32, MemoryCategory::workspace, "attention.scratch");
  if (computes(dqkv)) cpu::attention_backward(f32(dqkv), f32(scratch), f32(dout), f32(qkv32), f32(att32), shape, dropout, key);
}

void gelu_forward(const Tensor& out, const Tensor& inp) {
  const Tensor inp32 = as_f32(inp, "gelu.in.f32");
  const Tensor out32 = f32_target(out, "gelu.out.f32");
  if (computes(out)) cpu::gelu_forward(f32(out32), f32(inp32), inp.numel());
  store(out, out32);
}

void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  const Tensor inp32 = as_f32(inp, "gelu.in.f32");
  if (computes(dinp)) cpu::gelu_backward(f32(dinp), f32(inp32), f32(dout), inp.numel());
}

void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) {
  const Tensor a32 = as_f32(a, "residual.a.f32");
  const Tensor b32 = as_f32(b, "residual.b.f32");
  const Tensor out32 = f32_target(out, "residual.out.f32");
  if (computes(out)) cpu::residual_forward(f32(out32), f32(a32), f32(b32), out.numel());
  store(out, out32);
}

void dropout_forward(const Tensor& out, const Tensor& inp, float probability, RandomKey key) {
  const Tensor inp32 = as_f32(inp, "dropout.in.f32");
  const Tensor out32 = f32_target(out, "dropout.out.f32");
  if (computes(out)) cpu::dropout_forward(f32(out32), f32(inp32), out.numel(), probability, key);
  store(out, out32);
}

void dropout_backward(const Tensor& dinp, const Tensor& dout, float probability, RandomKey key) {
  if (computes(dinp)) cpu::dropout_backward(f32(dinp), f32(dout), dinp.numel(), probability, key);
}

namespace {

double sum_losses(const std::vector<float>& losses) {
  double total = 0;
  for (float loss : losses) total += loss;
  return total;
}

}  // namespace

double cross_entropy_sum(const Tensor& logits, const Tensor& targets) {
  if (!computes(logits)) return 0.0;
  const std::int64_t V = last_dimension(logits), rows = logits.numel() / V;
  std::vector<float> losses(static_cast<std::size_t>(rows));
  cpu::cross_entropy_forward(losses.data(), f32(logits), targets.data_as<std::int32_t>(), rows, V);
  return sum_losses(losses);
}

double cross_entropy_sum_and_gradient(const Tensor& logits, const Tensor& targets, float dloss) {
  if (!computes(logits)) return 0.0;
  const std::int64_t V = last_dimension(logits), rows = logits.numel() / V;
  std::vector<float> losses(static_cast<std::size_t>(rows));
  cpu::cross_entropy_forward_backward(f32(logits), losses.data(), targets.data_as<std::int32_t>(), rows, V, dloss);
  return sum_losses(losses);
}

}  // namespace ferry::ops
