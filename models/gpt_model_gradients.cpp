// GptModel's parameter gradients: added to the whole gradients on the device, or streamed to the
// gradient sink as they are computed, one parameter at a time and a large weight in row slices of at
// most gradient_bucket_elements(), so the device never holds more than one bounded bucket.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "models/gpt_model.h"
#include "models/tensor_ops.h"

namespace ferry {

using cpu::WeightLayout;

namespace {

// The tag of block `layer`'s parameter `field` (its Hugging Face name).
std::string parameter_name(std::int64_t layer, std::size_t field) {
  return "h." + std::to_string(layer) + "." + GptBlockParameters().fields()[field].first;
}

}  // namespace

void GptModel::set_gradient_bucket_elements(std::int64_t elements) {
  if (elements < 0) throw std::invalid_argument("the gradient bucket must be >= 0 elements (0: whole parameters), got " + std::to_string(elements));
  gradient_bucket_elements_ = elements;
}

void GptModel::set_weight_copy_elements(std::int64_t elements) {
  if (elements < 0) throw std::invalid_argument("the weight copy must be >= 0 elements (0: whole weights), got " + std::to_string(elements));
  weight_copy_elements_ = elements;
}

Tensor GptModel::gradient_bucket(const Shape& shape, const std::string& tag) const {
  return Tensor::zeros(*device_, shape, DType::f32, MemoryCategory::gradients, "grad." + tag);
}

GradientSink& GptModel::sink() const {
  if (gradient_sink_ == nullptr) throw std::logic_error("a GPT model with streamed gradients was trained without a gradient sink");
  return *gradient_sink_;
}

GptModel::StreamedPieces GptModel::streamed_pieces() const {
  if (gradient_storage_ != GradientStorage::streamed) return {};
  const std::int64_t C = config_.hidden;
  std::int64_t largest = 2 * C;  // LayerNorms
  for (const Shape& shape : GptBlockParameters::shapes(C)) {
    if (shape.size() != 2) continue;
    const std::int64_t in = shape[0], out = shape[1];
    const std::int64_t rows = gradient_bucket_elements_ > 0 ? std::clamp<std::int64_t>(gradient_bucket_elements_ / out, 1, in) : in;
    largest = std::max(largest, rows * out);
  }
  if (part_.head) largest = std::max(largest, vocab_slice() * C);
  if (part_.embedding) largest = std::max(largest, config_.max_sequence * C);  // the position table, whole
  return {largest, 2};
}

void GptModel::projection_parameter_gradients(std::int64_t layer, std::size_t field, const Tensor& dout, const Tensor& inp) {
  const GptBlockParameters& p = block_parameters(layer);
  const Tensor& weight = p.field(field);
  if (gradient_storage_ == GradientStorage::whole) {
    const GptBlockParameters& g = gradients_.blocks[static_cast<std::size_t>(layer)];
    ops::matmul_backward(Tensor(), g.field(field), g.field(field + 1), dout, inp, weight, WeightLayout::in_out);
    return;
  }
  const std::size_t index = GptParameters::block_index(layer) + field;
  const std::string name = parameter_name(layer, field);
  const std::int64_t in = weight.size(0), out = weight.size(1);
  const std::int64_t rows_per_bucket =
      gradient_bucket_elements_ > 0 ? std::clamp<std::int64_t>(gradient_bucket_elements_ / out, 1, in) : in;
  if (rows_per_bucket == in) {
    const Tensor dweight = gradient_bucket({in, out}, name);
    ops::matmul_backward(Tensor(), dweight, Tensor(), dout, inp, weight, WeightLayout::in_out);
    sink().accumulate(index, 0, dweight);
  } else {
    const Tensor inp32 = ops::as_f32(inp, name + ".in.f32");  // once for every slice
    const Tensor dout32 = ops::as_f32(dout, name + ".grad.f32");
    for (std::int64_t first = 0; first < in; first += rows_per_bucket) {
      const Tensor slice = gradient_bucket({std::min(rows_per_bucket, in - first), out}, name + ".rows");
      ops::matmul_backward_weight_rows(slice, dout32, inp32, first);
      sink().accumulate(index, first * out, slice);
      sink().piece_complete(index, first * out, slice.numel());
    }
  }
  sink().parameter_complete(index);
  const Tensor dbias = gradient_bucket({out}, name + ".bias");
  ops::matmul_backward(Tensor(), Tensor(), dbias, dout, inp, weight, WeightLayout::in_out);
  sink().accumulate(index + 1, 0, dbias);
  sink().parameter_complete(index + 1);
}

void GptModel::layernorm_backward_with_parameters(std::int64_t layer, std::size_t field, const Tensor& dinp, const Tensor& dout,
                                                  const Tensor& inp, const Tensor& mean, const Tensor& rstd) {
  const GptBlockParameters& p = block_parameters(layer);
  if (gradient_storage_ == GradientStorage::whole) {
    const GptBlockParameters& g = gradients_.blocks[static_cast<std::size_t>(layer)];
    ops::layernorm_backward(dinp, g.field(field), g.field(field + 1), dout, inp, p.field(field), mean, rstd);
    return;
  }
  const std::string name = parameter_name(layer, field);
  const Tensor dweight = gradient_bucket({config_.hidden}, name);
  const Tensor dbias = gradient_bucket({config_.hidden}, name + ".bias");
  ops::layernorm_backward(dinp, dweight, dbias, dout, inp, p.field(field), mean, rstd);
  const std::size_t index = GptParameters::block_index(layer) + field;
  sink().accumulate(index, 0, dweight);
  sink().accumulate(index + 1, 0, dbias);
  sink().parameter_complete(index);
  sink().parameter_complete(index + 1);
}

}  // namespace ferry
