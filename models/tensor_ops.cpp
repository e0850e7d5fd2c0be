#include "models/tensor_ops.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "models/kernel_backend.h"

namespace ferry::ops {
namespace {

// The backend that computes `tensor`'s op, or null on meta (shapes only: allocate, never compute).
KernelBackend* computing(const Tensor& tensor) {
  return tensor.device().has_storage() ? &kernel_backend(tensor.device()) : nullptr;
}

float* f32(const Tensor& tensor) { return tensor.defined() ? tensor.data_as<float>() : nullptr; }

void require(bool condition, std::string_view op, const std::string& what) {
  if (!condition) throw std::invalid_argument(std::string(op) + ": " + what);
}

std::int64_t last_dimension(const Tensor& tensor) { return tensor.size(tensor.dim() - 1); }

void require_floating(const Tensor& tensor, std::string_view op) {
  require(tensor.dtype() == DType::f32 || tensor.dtype() == DType::bf16 || tensor.dtype() == DType::f16, op,
          "unsupported dtype " + std::string(dtype_name(tensor.dtype())));
}

// `elements` f32 scratch (undefined when 0), and the matmul library's workspace (undefined when none).
Tensor scratch(Device& device, std::int64_t elements, std::string_view tag) {
  if (elements == 0) return Tensor();
  return Tensor::empty(device, {elements}, DType::f32, MemoryCategory::workspace, tag);
}
Tensor matmul_workspace(Device& device) {
  const std::size_t bytes = kernel_backend(device).sizes().matmul_workspace_bytes();
  return scratch(device, static_cast<std::int64_t>(bytes / sizeof(float)), "matmul.workspace");
}
void* address(const Tensor& tensor) { return tensor.defined() ? tensor.data() : nullptr; }
Tensor cross_entropy_scratch(const Tensor& logits, std::int64_t rows) {
  return scratch(logits.device(), kernel_backend(logits.device()).sizes().cross_entropy_scratch_elements(rows), "cross_entropy.losses");
}

// Logits [rows, V] whose rows may lie further apart than V (a view of a padded buffer): their row stride.
std::int64_t logits_row_stride(const Tensor& logits, std::string_view op) {
  require(logits.dim() == 2 && logits.dtype() == DType::f32 && logits.strides()[1] == 1 && logits.strides()[0] >= logits.size(1), op,
          "takes f32 logits [rows, vocab] with contiguous rows, not " + shape_to_string(logits.shape()) + " with strides " +
              shape_to_string(logits.strides()));
  return logits.strides()[0];
}

AttentionShape attention_shape(const Tensor& qkv, std::int64_t heads) { return {qkv.size(0), qkv.size(1), qkv.size(2) / 3, heads}; }

}  // namespace

Tensor attention_saved(Device& device, std::int64_t batch, std::int64_t heads, std::int64_t sequence, DType activation_dtype,
                       std::string_view tag) {
  const KernelSizes& sizes = kernel_backend(device).sizes();
  const AttentionShape shape{batch, sequence, 0, heads};
  const DType dtype = sizes.attention_saved_in_f32() ? DType::f32 : activation_dtype;
  return Tensor::empty(device, sizes.attention_saved_shape(shape), dtype, MemoryCategory::activations, tag);
}

Tensor as_f32(const Tensor& tensor, std::string_view tag) {
  if (tensor.dtype() == DType::f32) return tensor;
  require_floating(tensor, "as_f32");
  Tensor copy = Tensor::empty(tensor.device(), tensor.shape(), DType::f32, MemoryCategory::workspace, tag);
  if (KernelBackend* kernels = computing(tensor)) kernels->convert_to_f32(tensor.data(), tensor.dtype(), f32(copy), tensor.numel());
  return copy;
}

Tensor f32_target(const Tensor& destination, std::string_view tag) {
  if (destination.dtype() == DType::f32) return destination;
  return Tensor::empty(destination.device(), destination.shape(), DType::f32, MemoryCategory::workspace, tag);
}

void store(const Tensor& destination, const Tensor& result) {
  if (destination.storage() == result.storage() && destination.storage_offset() == result.storage_offset()) return;
  require_floating(destination, "store");
  if (KernelBackend* kernels = computing(destination)) {
    kernels->convert_from_f32(f32(result), destination.data(), destination.dtype(), destination.numel());
  }
}

Tensor f32_accumulator(const Tensor& destination, std::string_view tag) { return as_f32(destination, tag); }

void fill_zero(const Tensor& tensor) {
  tensor.device().fill_zero(tensor.data(), tensor.nbytes(), tensor.storage()->stream());
}

void encoder_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  const std::int64_t B = tokens.size(0), T = tokens.size(1), C = last_dimension(wte);
  require(T <= wpe.size(0), "encoder_forward", "sequence " + std::to_string(T) + " exceeds the model's positions " + std::to_string(wpe.size(0)));
  const Tensor out32 = f32_target(out, "encoder.out");
  const Tensor wpe32 = as_f32(wpe, "wpe.f32");
  const bool bf16_table = wte.dtype() == DType::bf16;  // converts only the rows the tokens use
  const Tensor wte32 = bf16_table ? Tensor() : as_f32(wte, "wte.f32");
  if (KernelBackend* kernels = computing(out)) {
    if (bf16_table) {
      kernels->encoder_forward_bf16_table(f32(out32), tokens.data_as<std::int32_t>(), wte.data_as<std::uint16_t>(), f32(wpe32), B, T, C);
    } else {
      kernels->encoder_forward(f32(out32), tokens.data_as<std::int32_t>(), f32(wte32), f32(wpe32), B, T, C);
    }
  }
  store(out, out32);
}

void encoder_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens) {
  const Tensor dout32 = as_f32(dout, "encoder.grad.f32");
  if (KernelBackend* kernels = computing(dout)) {
    kernels->encoder_backward(f32(dwte), f32(dwpe), f32(dout32), tokens.data_as<std::int32_t>(), tokens.size(0), tokens.size(1),
                              last_dimension(dout));
  }
}

void encoder_backward_token_rows(const Tensor& table_rows, const Tensor& dout, const Tensor& tokens, std::int64_t first) {
  const std::int64_t C = last_dimension(table_rows), positions = tokens.numel();
  require(table_rows.dtype() == DType::f32 && dout.dtype() == DType::f32 && dout.numel() == positions * C && first >= 0,
          "encoder_backward_token_rows", "takes f32 [count, C] rows and an f32 [n, C] gradient of n tokens");
  if (KernelBackend* kernels = computing(dout)) {
    kernels->encoder_backward_token_rows(f32(table_rows), f32(dout), tokens.data_as<std::int32_t>(), positions, C, first, table_rows.size(0));
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
  if (KernelBackend* kernels = computing(out)) {
    kernels->layernorm_forward(f32(out32), f32(mean), f32(rstd), f32(inp32), f32(weight32), f32(bias32), inp.numel() / C, C);
  }
  store(out, out32);
}

void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  const std::int64_t C = last_dimension(weight);
  const Tensor inp32 = as_f32(inp, "layernorm.in.f32");
  const Tensor weight32 = as_f32(weight, "layernorm.weight.f32");
  const Tensor dout32 = as_f32(dout, "layernorm.grad.f32");
  const Tensor dinp32 = f32_accumulator(dinp, "layernorm.in.grad.f32");
  if (KernelBackend* kernels = computing(dinp)) {
    kernels->layernorm_backward(f32(dinp32), f32(dweight), f32(dbias), f32(dout32), f32(inp32), f32(weight32), f32(mean), f32(rstd),
                                inp.numel() / C, C);
  }
  store(dinp, dinp32);
}

// Rows of weight per f32 slice when a 16-bit in_out weight is converted in slices, else 0 (whole).
std::int64_t weight_rows_per_copy(const Tensor& weight, WeightLayout layout, std::int64_t weight_copy_elements) {
  if (weight.dtype() == DType::f32 || layout != WeightLayout::in_out || weight_copy_elements <= 0 || weight.numel() <= weight_copy_elements) {
    return 0;
  }
  return std::clamp<std::int64_t>(weight_copy_elements / weight.size(1), 1, weight.size(0));
}

void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias, WeightLayout layout,
                    std::int64_t weight_copy_elements) {
  const std::int64_t in = layout == WeightLayout::in_out ? weight.size(0) : weight.size(1);
  const std::int64_t out_features = layout == WeightLayout::in_out ? weight.size(1) : weight.size(0);
  require(last_dimension(inp) == in && last_dimension(out) == out_features, "matmul_forward",
          "shapes " + shape_to_string(inp.shape()) + " x " + shape_to_string(weight.shape()) + " -> " + shape_to_string(out.shape()) + " do not match");
  const Tensor workspace = matmul_workspace(out.device());
  KernelBackend& backend = kernel_backend(out.device());
  const bool all_bf16 = inp.dtype() == DType::bf16 && weight.dtype() == DType::bf16 && out.dtype() == DType::bf16 &&
                        (!bias.defined() || bias.dtype() == DType::bf16);
  if (all_bf16 && backend.sizes().matmul_takes_bf16()) {  // no f32 copies: bf16 in, fp32 accumulation, bf16 out
    if (computing(out)) {
      backend.matmul_forward_bf16(out.data(), inp.data(), weight.data(), address(bias), inp.numel() / in, in, out_features, layout,
                                  address(workspace));
    }
    return;
  }
  const Tensor inp32 = as_f32(inp, "matmul.in.f32");
  const Tensor bias32 = bias.defined() ? as_f32(bias, "matmul.bias.f32") : Tensor();
  const Tensor out32 = f32_target(out, "matmul.out.f32");
  const std::int64_t rows = inp.numel() / in;
  if (const std::int64_t per_copy = weight_rows_per_copy(weight, layout, weight_copy_elements); per_copy > 0) {
    const KernelSizes& sizes = backend.sizes();
    for (std::int64_t first = 0; first < in; first += per_copy) {
      const std::int64_t count = std::min(per_copy, in - first);
      const Tensor slice32 = as_f32(weight.narrow(0, first, count), "matmul.weight.rows.f32");
      const Tensor columns = scratch(out.device(), sizes.weight_rows_scratch_elements(rows, count), "matmul.in.columns");
      const Tensor part = first == 0 ? Tensor() : scratch(out.device(), sizes.matmul_rows_output_scratch_elements(rows, out_features),
                                                           "matmul.out.part");
      if (KernelBackend* kernels = computing(out)) {
        kernels->matmul_forward_rows(f32(out32), f32(inp32), f32(slice32), first == 0 ? f32(bias32) : nullptr, rows, in, out_features, first,
                                     count, first > 0, f32(columns), f32(part), address(workspace));
      }
    }
    store(out, out32);
    return;
  }
  const Tensor weight32 = as_f32(weight, "matmul.weight.f32");
  if (KernelBackend* kernels = computing(out)) {
    kernels->matmul_forward(f32(out32), f32(inp32), f32(weight32), f32(bias32), rows, in, out_features, layout, address(workspace));
  }
  store(out, out32);
}

void matmul_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight, WeightLayout layout, std::int64_t weight_copy_elements) {
  const std::int64_t in = layout == WeightLayout::in_out ? weight.size(0) : weight.size(1);
  const std::int64_t out_features = layout == WeightLayout::in_out ? weight.size(1) : weight.size(0);
  // As the forward: bf16 operands in place where the device takes them (bf16 products are exact in
  // fp32, so the gradients are the f32 path's up to the order of the sums), f32 master gradients.
  const bool bf16_operands = dout.dtype() == DType::bf16 && (!dinp.defined() || (dinp.dtype() == DType::bf16 && weight.dtype() == DType::bf16)) &&
                             (!dweight.defined() || (dweight.dtype() == DType::f32 && inp.dtype() == DType::bf16)) &&
                             (!dbias.defined() || dbias.dtype() == DType::f32);
  if (bf16_operands && kernel_backend(dout.device()).sizes().matmul_takes_bf16()) {
    const Tensor workspace = matmul_workspace(dout.device());
    if (KernelBackend* kernels = computing(dout)) {
      kernels->matmul_backward_bf16(address(dinp), f32(dweight), f32(dbias), dout.data(), address(inp), address(weight), dout.numel() / out_features,
                                    in, out_features, layout, address(workspace));
    }
    return;
  }
  if (const std::int64_t per_copy = weight_rows_per_copy(weight, layout, weight_copy_elements); per_copy > 0 && dinp.defined()) {
    const std::int64_t rows = inp.numel() / in;
    const Tensor workspace = matmul_workspace(dout.device());
    const Tensor dout32 = as_f32(dout, "matmul.grad.f32");
    const Tensor dinp32 = f32_target(dinp, "matmul.in.grad.f32");
    for (std::int64_t first = 0; first < in; first += per_copy) {
      const std::int64_t count = std::min(per_copy, in - first);
      const Tensor slice32 = as_f32(weight.narrow(0, first, count), "matmul.weight.rows.f32");
      const Tensor part = scratch(dout.device(), kernel_backend(dout.device()).sizes().matmul_rows_output_scratch_elements(rows, count),
                                  "matmul.in.grad.part");
      if (KernelBackend* kernels = computing(dout)) {
        kernels->matmul_backward_input_rows(f32(dinp32), f32(dout32), f32(slice32), rows, in, out_features, first, count, f32(part),
                                            address(workspace));
      }
    }
    store(dinp, dinp32);
    if (dweight.defined() || dbias.defined()) matmul_backward(Tensor(), dweight, dbias, dout32, inp, weight, layout);
    return;
  }
  const Tensor inp32 = dweight.defined() ? as_f32(inp, "matmul.in.f32") : Tensor();
  const Tensor weight32 = dinp.defined() ? as_f32(weight, "matmul.weight.f32") : Tensor();
  const Tensor dout32 = as_f32(dout, "matmul.grad.f32");
  const Tensor dinp32 = dinp.defined() ? f32_target(dinp, "matmul.in.grad.f32") : Tensor();
  const Tensor workspace = matmul_workspace(dout.device());
  if (KernelBackend* kernels = computing(dout)) {
    kernels->matmul_backward(f32(dinp32), f32(dweight), f32(dbias), f32(dout32), f32(inp32), f32(weight32), inp.numel() / in, in,
                             out_features, layout, address(workspace));
  }
  if (dinp.defined()) store(dinp, dinp32);
}

void matmul_backward_weight_rows(const Tensor& dweight_rows, const Tensor& dout, const Tensor& inp, std::int64_t first) {
  const std::int64_t in = last_dimension(inp), out_features = last_dimension(dout), count = dweight_rows.size(0);
  const std::int64_t rows = inp.numel() / in;
  require(inp.dtype() == DType::f32 && dout.dtype() == DType::f32 && dweight_rows.dtype() == DType::f32, "matmul_backward_weight_rows",
          "takes f32 tensors (convert the input once with as_f32)");
  require(dweight_rows.size(1) == out_features && dout.numel() / out_features == rows && first >= 0 && first + count <= in,
          "matmul_backward_weight_rows",
          "rows [" + std::to_string(first) + ", " + std::to_string(first + count) + ") of a [" + std::to_string(in) + ", " +
              std::to_string(out_features) + "] weight gradient do not fit " + shape_to_string(dweight_rows.shape()));
  const Tensor workspace = matmul_workspace(dout.device());
  const Tensor columns = scratch(dout.device(), kernel_backend(dout.device()).sizes().weight_rows_scratch_elements(rows, count),
                                 "matmul.weight_rows.columns");
  if (KernelBackend* kernels = computing(dout)) {
    kernels->matmul_backward_weight_rows(f32(dweight_rows), f32(dout), f32(inp), rows, in, out_features, first, count, f32(columns),
                                         address(workspace));
  }
}

void lm_head_logits_slice(const Tensor& logits, std::int64_t first, const Tensor& inp, const Tensor& weight_slice) {
  const std::int64_t rows = inp.size(0), C = inp.size(1), count = weight_slice.size(0), vocab = logits.size(1);
  require(logits.size(0) == rows && weight_slice.size(1) == C && first >= 0 && first + count <= vocab, "lm_head_logits_slice",
          "shapes " + shape_to_string(inp.shape()) + " x " + shape_to_string(weight_slice.shape()) + " at column " +
              std::to_string(first) + " of " + shape_to_string(logits.shape()) + " do not match");
  const Tensor workspace = matmul_workspace(logits.device());
  const KernelSizes& sizes = kernel_backend(logits.device()).sizes();
  const Tensor slice = scratch(logits.device(), sizes.lm_head_slice_scratch_elements(rows, count, vocab), "lm_head.logits.slice");
  if (KernelBackend* kernels = computing(logits)) {
    kernels->lm_head_logits_slice(f32(logits), vocab, first, f32(inp), f32(weight_slice), rows, C, count, f32(slice), address(workspace));
  }
}

void lm_head_backward_slice(const Tensor& dinp, bool accumulate_input, const Tensor& dweight_slice, const Tensor& dlogits,
                            std::int64_t first, const Tensor& inp, const Tensor& weight_slice) {
  const std::int64_t rows = inp.size(0), C = inp.size(1), count = weight_slice.size(0), vocab = dlogits.size(1);
  require((!dweight_slice.defined() || dweight_slice.shape() == weight_slice.shape()) && (!dinp.defined() || dinp.shape() == inp.shape()) &&
              first + count <= vocab,
          "lm_head_backward_slice", "gradient shapes do not match the slice " + shape_to_string(weight_slice.shape()));
  const Tensor workspace = matmul_workspace(dlogits.device());
  const KernelSizes& sizes = kernel_backend(dlogits.device()).sizes();
  const Tensor slice = scratch(dlogits.device(), sizes.lm_head_slice_scratch_elements(rows, count, vocab), "lm_head.logits.grad.slice");
  const Tensor input_part = scratch(dlogits.device(), sizes.lm_head_input_scratch_elements(rows, C, accumulate_input), "lm_head.in.grad.slice");
  if (KernelBackend* kernels = computing(dlogits)) {
    kernels->lm_head_backward_slice(f32(dinp), accumulate_input, f32(dweight_slice), f32(dlogits), vocab, first, f32(inp),
                                    f32(weight_slice), rows, C, count, f32(slice), f32(input_part), address(workspace));
  }
}

double sum_of_squares(Device& device, const std::vector<const Tensor*>& tensors) {
  std::int64_t largest = 0;
  std::vector<DeviceValues> values;
  for (const Tensor* tensor : tensors) {
    require(tensor->dtype() == DType::f32 && &tensor->device() == &device, "sum_of_squares", "takes f32 tensors on the device asked");
    largest = std::max(largest, tensor->numel());
    values.push_back({f32(*tensor), tensor->numel()});
  }
  const Tensor work = scratch(device, kernel_backend(device).sizes().sum_of_squares_scratch_elements(largest), "sum_of_squares.scratch");
  if (!device.has_storage()) return 0.0;
  return kernel_backend(device).sum_of_squares(values, f32(work));
}

bool lm_head_takes_bf16(Device& device) { return kernel_backend(device).sizes().matmul_takes_bf16(); }

void lm_head_logits_bf16(const Tensor& logits, const Tensor& inp, const Tensor& table) {
  const std::int64_t rows = inp.size(0), C = inp.size(1), vocab = table.size(0);
  require(inp.dtype() == DType::bf16 && table.dtype() == DType::bf16 && logits.dtype() == DType::f32, "lm_head_logits_bf16",
          "takes bf16 inputs and f32 logits");
  require(inp.dim() == 2 && table.dim() == 2 && table.size(1) == C && logits.shape() == Shape{rows, vocab}, "lm_head_logits_bf16",
          "shapes " + shape_to_string(inp.shape()) + " x " + shape_to_string(table.shape()) + "^T -> " + shape_to_string(logits.shape()) +
              " do not match");
  const std::int64_t logits_stride = logits_row_stride(logits, "lm_head_logits_bf16");
  const Tensor workspace = matmul_workspace(logits.device());
  if (KernelBackend* kernels = computing(logits)) {
    kernels->lm_head_logits_bf16(f32(logits), logits_stride, inp.data(), table.data(), rows, C, vocab, address(workspace));
  }
}

void lm_head_backward_bf16(const Tensor& dinp, bool accumulate_input, const Tensor& dtable_rows, const Tensor& dlogits, std::int64_t first,
                           const Tensor& inp, const Tensor& table_rows) {
  const std::int64_t rows = inp.size(0), C = inp.size(1), count = table_rows.size(0), vocab = dlogits.size(1);
  require(inp.dtype() == DType::bf16 && table_rows.dtype() == DType::bf16 && dlogits.dtype() == DType::bf16 &&
              (!dinp.defined() || dinp.dtype() == DType::f32) && (!dtable_rows.defined() || dtable_rows.dtype() == DType::f32),
          "lm_head_backward_bf16", "takes bf16 inputs and f32 gradients");
  require(dlogits.dim() == 2 && dlogits.strides()[1] == 1 && dlogits.size(0) == rows && table_rows.size(1) == C && first >= 0 &&
              first + count <= vocab &&
              (!dinp.defined() || dinp.shape() == inp.shape()) && (!dtable_rows.defined() || dtable_rows.shape() == table_rows.shape()),
          "lm_head_backward_bf16",
          "gradient shapes do not match the slice [" + std::to_string(first) + ", " + std::to_string(first + count) + ") of " +
              shape_to_string(dlogits.shape()));
  const Tensor workspace = matmul_workspace(dlogits.device());
  if (KernelBackend* kernels = computing(dlogits)) {
    kernels->lm_head_backward_bf16(f32(dinp), accumulate_input, f32(dtable_rows), dlogits.data(), dlogits.strides()[0], inp.data(),
                                   table_rows.data(), rows, C,
                                   vocab, first,
                                   count, address(workspace));
  }
}

void convert_from_f32(const Tensor& destination, const Tensor& source) {
  require(source.dtype() == DType::f32 && destination.shape() == source.shape() && destination.dtype() != DType::f32, "convert_from_f32",
          "converts f32 " + shape_to_string(source.shape()) + " into a 16-bit tensor of the same shape, not " +
              std::string(dtype_name(destination.dtype())) + " " + shape_to_string(destination.shape()));
  store(destination, source);
}

void attention_forward(const Tensor& out, const Tensor& saved, const Tensor& qkv, std::int64_t heads, float dropout,
                       RandomKey key) {
  const AttentionShape shape = attention_shape(qkv, heads);
  const KernelSizes& sizes = kernel_backend(out.device()).sizes();
  require(saved.shape() == sizes.attention_saved_shape(shape), "attention_forward",
          "saved state " + shape_to_string(saved.shape()) + " is not the " + shape_to_string(sizes.attention_saved_shape(shape)) +
              " this device keeps");
  const Tensor qkv32 = as_f32(qkv, "attention.qkv.f32");
  const Tensor saved32 = f32_target(saved, "attention.saved.f32");
  const Tensor out32 = f32_target(out, "attention.out.f32");
  const Tensor dropped = scratch(out.device(), sizes.attention_forward_scratch_elements(shape, dropout), "attention.dropped");
  if (KernelBackend* kernels = computing(out)) kernels->attention_forward(f32(out32), f32(saved32), f32(dropped), f32(qkv32), shape, dropout, key);
  store(saved, saved32);
  store(out, out32);
}

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& out, const Tensor& qkv, const Tensor& saved,
                        std::int64_t heads, float dropout, RandomKey key) {
  const AttentionShape shape = attention_shape(qkv, heads);
  const KernelSizes& sizes = kernel_backend(dqkv.device()).sizes();
  const Tensor qkv32 = as_f32(qkv, "attention.qkv.f32");
  const Tensor saved32 = as_f32(saved, "attention.saved.f32");
  const Tensor out32 = as_f32(out, "attention.out.f32");
  const Tensor dout32 = as_f32(dout, "attention.grad.f32");
  const Tensor dqkv32 = f32_target(dqkv, "attention.qkv.grad.f32");
  const Tensor work = scratch(dqkv.device(), sizes.attention_backward_scratch_elements(shape), "attention.scratch");
  if (KernelBackend* kernels = computing(dqkv)) {
    kernels->attention_backward(f32(dqkv32), f32(work), f32(dout32), f32(out32), f32(qkv32), f32(saved32), shape, dropout, key);
  }
  store(dqkv, dqkv32);
}

void gelu_forward(const Tensor& out, const Tensor& inp) {
  const Tensor inp32 = as_f32(inp, "gelu.in.f32");
  const Tensor out32 = f32_target(out, "gelu.out.f32");
  if (KernelBackend* kernels = computing(out)) kernels->gelu_forward(f32(out32), f32(inp32), inp.numel());
  store(out, out32);
}

void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  const Tensor inp32 = as_f32(inp, "gelu.in.f32");
  const Tensor dout32 = as_f32(dout, "gelu.grad.f32");
  const Tensor dinp32 = f32_accumulator(dinp, "gelu.in.grad.f32");
  if (KernelBackend* kernels = computing(dinp)) kernels->gelu_backward(f32(dinp32), f32(inp32), f32(dout32), inp.numel());
  store(dinp, dinp32);
}

void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) {
  const Tensor a32 = as_f32(a, "residual.a.f32");
  const Tensor b32 = as_f32(b, "residual.b.f32");
  const Tensor out32 = f32_target(out, "residual.out.f32");
  if (KernelBackend* kernels = computing(out)) kernels->residual_forward(f32(out32), f32(a32), f32(b32), out.numel());
  store(out, out32);
}

void dropout_forward(const Tensor& out, const Tensor& inp, float probability, RandomKey key) {
  const Tensor inp32 = as_f32(inp, "dropout.in.f32");
  const Tensor out32 = f32_target(out, "dropout.out.f32");
  if (KernelBackend* kernels = computing(out)) kernels->dropout_forward(f32(out32), f32(inp32), out.numel(), probability, key);
  store(out, out32);
}

void dropout_backward(const Tensor& dinp, const Tensor& dout, float probability, RandomKey key) {
  const Tensor dout32 = as_f32(dout, "dropout.grad.f32");
  const Tensor dinp32 = f32_accumulator(dinp, "dropout.in.grad.f32");
  if (KernelBackend* kernels = computing(dinp)) kernels->dropout_backward(f32(dinp32), f32(dout32), dinp.numel(), probability, key);
  store(dinp, dinp32);
}

double cross_entropy_sum(const Tensor& logits, const Tensor& targets) {
  const std::int64_t row_stride = logits_row_stride(logits, "cross_entropy_sum");
  const std::int64_t V = logits.size(1), rows = logits.size(0);
  const Tensor losses = cross_entropy_scratch(logits, rows);
  KernelBackend* kernels = computing(logits);
  if (kernels == nullptr) return 0.0;
  return kernels->cross_entropy_sum(f32(logits), targets.data_as<std::int32_t>(), rows, V, row_stride, f32(losses));
}

double cross_entropy_sum_and_gradient(const Tensor& logits, const Tensor& targets, float dloss, const Tensor& softmax_rows) {
  const std::int64_t row_stride = logits_row_stride(logits, "cross_entropy_sum_and_gradient");
  const std::int64_t V = logits.size(1), rows = logits.size(0);
  require(!softmax_rows.defined() || (softmax_rows.dtype() == DType::f32 && softmax_rows.numel() == rows * cpu::kSoftmaxRowFloats),
          "cross_entropy_sum_and_gradient", "softmax rows take f32 [rows, " + std::to_string(cpu::kSoftmaxRowFloats) + "]");
  const Tensor losses = cross_entropy_scratch(logits, rows);
  KernelBackend* kernels = computing(logits);
  if (kernels == nullptr) return 0.0;
  auto* rows_out = softmax_rows.defined() ? reinterpret_cast<SoftmaxRow*>(softmax_rows.data()) : nullptr;
  return kernels->cross_entropy_sum_and_gradient(f32(logits), targets.data_as<std::int32_t>(), rows, V, row_stride, dloss, f32(losses),
                                                 rows_out);
}

void cross_entropy_backward_slice(const Tensor& slice, const Tensor& softmax_rows, const Tensor& targets, std::int64_t first, float dloss) {
  const std::int64_t rows = slice.size(0), count = slice.size(1);
  require(slice.dtype() == DType::f32 && softmax_rows.dtype() == DType::f32 && softmax_rows.numel() == rows * cpu::kSoftmaxRowFloats &&
              targets.numel() == rows && first >= 0,
          "cross_entropy_backward_slice", "takes an f32 [rows, count] slice, f32 [rows, " + std::to_string(cpu::kSoftmaxRowFloats) +
                                              "] softmax rows and [rows] targets");
  if (KernelBackend* kernels = computing(slice)) {
    kernels->cross_entropy_backward_slice(f32(slice), reinterpret_cast<const SoftmaxRow*>(softmax_rows.data()), targets.data_as<std::int32_t>(),
                                          rows, first, count, dloss);
  }
}

}  // namespace ferry::ops
