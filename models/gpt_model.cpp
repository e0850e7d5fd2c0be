#include "models/gpt_model.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "engine/core/op_recorder.h"
#include "models/gpt_parameter_use.h"
#include "models/kernel_backend.h"
#include "models/tensor_ops.h"

namespace ferry {
namespace {

using ops::WeightLayout;

constexpr std::uint64_t kAttentionDropout = 1;
constexpr std::uint64_t kAttentionResidualDropout = 2;
constexpr std::uint64_t kMlpResidualDropout = 3;
constexpr std::uint64_t kEmbeddingDropout = 4;

std::string layer_name(std::int64_t layer) { return "h." + std::to_string(layer); }
std::string layer_tag(std::int64_t layer, const char* what) { return layer_name(layer) + "." + what; }

cpu::RandomKey layer_key(cpu::RandomKey key, std::int64_t layer) { return key.derive(static_cast<std::uint64_t>(layer) + 1); }

// Restores a flag on scope exit.
class ScopedFlag {
 public:
  ScopedFlag(bool& flag, bool value) : flag_(flag), saved_(flag) { flag_ = value; }
  ~ScopedFlag() { flag_ = saved_; }
  ScopedFlag(const ScopedFlag&) = delete;
  ScopedFlag& operator=(const ScopedFlag&) = delete;

 private:
  bool& flag_;
  bool saved_;
};

}  // namespace

std::vector<std::size_t> GptModel::embedding_indices() { return {GptParameters::kWteIndex, GptParameters::kWpeIndex}; }

std::vector<std::size_t> GptModel::block_indices(std::int64_t layer) {
  std::vector<std::size_t> indices(GptBlockParameters::kCount);
  for (std::size_t i = 0; i < indices.size(); ++i) indices[i] = GptParameters::block_index(layer) + i;
  return indices;
}

std::vector<std::size_t> GptModel::ln_f_indices() const {
  const std::size_t first = GptParameters::block_index(config_.layers);
  return {first, first + 1};
}

std::vector<std::size_t> GptModel::table_indices() { return {GptParameters::kWteIndex}; }

GptModel::GptModel(Device& device, GptConfig config, DType parameter_dtype, GptDropout dropout, GradientStorage gradient_storage,
                   GptModelPart part, ParameterResidence residence)
    : device_(&device), config_(std::move(config)), parameter_dtype_(parameter_dtype), dropout_(dropout),
      gradient_storage_(gradient_storage), part_(std::move(part)), residence_(residence) {
  config_.validate();
  if (parameter_dtype != DType::f32 && parameter_dtype != DType::bf16 && parameter_dtype != DType::f16) {
    throw std::invalid_argument("GPT parameters must be f32, bf16 or f16, not " + std::string(dtype_name(parameter_dtype)));
  }
  for (float p : {dropout.embedding, dropout.attention, dropout.residual}) {
    if (!(p >= 0.0f && p < 1.0f)) throw std::invalid_argument("dropout probabilities must be in [0, 1), got " + std::to_string(p));
  }
  // A 16-bit model's f32 products (backward, the LM head) run on the tensor cores' TF32 (F32Products).
  if (device.has_storage()) {
    ops::kernel_backend(device).set_f32_products(parameter_dtype == DType::f32 ? ops::F32Products::exact : ops::F32Products::tf32);
  }
  if (residence_ == ParameterResidence::whole) {
    parameters_ = GptParameters::allocate(device, config_, parameter_dtype, MemoryCategory::parameters, "", part_);
  } else {
    if (gradient_storage_ != GradientStorage::streamed) {
      throw std::invalid_argument("provided parameters (ZeRO stage 3) need gradients streamed to a sink: no whole gradient sits beside them");
    }
    parameters_.blocks.resize(static_cast<std::size_t>(config_.layers));  // every tensor undefined until a layer acquires it
  }
  if (gradient_storage_ == GradientStorage::whole) {
    gradients_ = GptParameters::allocate(device, config_, DType::f32, MemoryCategory::gradients, "grad.", part_);
  }
}

void GptModel::zero_gradients() {
  if (gradient_storage_ == GradientStorage::streamed) return;
  for (const NamedTensor& each : gradients_.named()) ops::fill_zero(*each.tensor);
}

void GptModel::set_loss_chunk(std::int64_t tokens) {
  if (tokens < 0) throw std::invalid_argument("the loss chunk must be >= 0 tokens (0: automatic), got " + std::to_string(tokens));
  loss_chunk_ = tokens;
}

std::int64_t GptModel::loss_chunk(std::int64_t tokens) const {
  const std::int64_t automatic =
      ops::kernel_backend(*device_).sizes().logits_chunk_bytes() / static_cast<std::int64_t>(sizeof(float)) / config_.vocab;
  return std::clamp<std::int64_t>(loss_chunk_ > 0 ? loss_chunk_ : automatic, 1, std::max<std::int64_t>(tokens, 1));
}

Tensor GptModel::activation(const Shape& shape, const std::string& tag) const {
  return Tensor::empty(*device_, shape, parameter_dtype_, MemoryCategory::activations, tag);
}

Tensor GptModel::activation_gradient(const Shape& shape, const std::string& tag) const {
  return Tensor::empty(*device_, shape, parameter_dtype_, MemoryCategory::activation_gradients, tag);
}

Tensor GptModel::workspace(const Shape& shape, const std::string& tag) const {
  return Tensor::empty(*device_, shape, DType::f32, MemoryCategory::workspace, tag);
}

const GptBlockParameters& GptModel::block_parameters(std::int64_t layer) const {
  if (layer < 0 || layer >= config_.layers || !part_.has_block(layer)) {
    throw std::out_of_range("block " + std::to_string(layer) + " is not held by this model (a pipeline stage holds only its own blocks)");
  }
  return parameters_.blocks[static_cast<std::size_t>(layer)];
}

void GptModel::set_vocab_slice(std::int64_t rows) {
  if (rows < 0) throw std::invalid_argument("the vocabulary slice must be >= 0 rows (0: automatic), got " + std::to_string(rows));
  vocab_slice_ = rows;
}

std::int64_t GptModel::vocab_slice() const {
  if (vocab_slice_ > 0) return std::min(vocab_slice_, config_.vocab);
  std::int64_t rows = config_.vocab;
  if (parameter_dtype_ != DType::f32) rows = kVocabSliceBytes / (config_.hidden * static_cast<std::int64_t>(sizeof(float)));
  if (gradient_storage_ == GradientStorage::streamed && gradient_bucket_elements_ > 0) {
    rows = std::min(rows, gradient_bucket_elements_ / config_.hidden);  // the table's gradient bucket is one slice
  }
  return std::clamp<std::int64_t>(rows, 1, config_.vocab);
}

std::int64_t GptModel::table_gradient_slice() const {
  // Streamed, each slice's gradient is a bucket of its own, bounded as vocab_slice() bounds it.
  const std::int64_t rows = gradient_storage_ == GradientStorage::streamed ? vocab_slice()
                            : vocab_slice_ > 0                              ? std::min(vocab_slice_, config_.vocab)
                                                                            : config_.vocab;
  // Slices of a multiple of 8 rows (GPT-2's 50257: 50256, then 1) keep every product's vocabulary extent
  // and offset aligned, which cuBLASLt's aligned kernels need (an odd extent took SM75 align1 kernels).
  return rows >= 8 ? rows / 8 * 8 : rows;
}

Tensor GptModel::embedding_forward(const Tensor& tokens, cpu::RandomKey key) {
  const std::int64_t B = tokens.size(0), T = tokens.size(1), C = config_.hidden;
  if (T > config_.max_sequence) {
    throw std::invalid_argument("sequence length " + std::to_string(T) + " exceeds the model's " +
                                std::to_string(config_.max_sequence) + " positions; lower --seq");
  }
  if (!part_.embedding) throw std::logic_error("the embedding runs on the first pipeline stage, which this model is not");
  const ParameterUse held(*this, embedding_indices(), false, part_.has_block(0) ? block_indices(0) : std::vector<std::size_t>{});
  const OpScope op(*device_, "forward", "embedding");
  Tensor out = activation({B, T, C}, "embedding");
  ops::encoder_forward(out, tokens, parameters_.wte, parameters_.wpe);
  const float p = training_ ? dropout_.embedding : 0.0f;
  if (p > 0) ops::dropout_forward(out, out, p, key.derive(kEmbeddingDropout));
  return out;
}

BlockActivations GptModel::block_forward(std::int64_t layer, const Tensor& input, cpu::RandomKey key, ActivationKeep keep) {
  block_parameters(layer);  // held here, or an error naming the block
  // The next block's parameters, or the token table the head reads after the last one.
  const std::vector<std::size_t> next = layer + 1 < config_.layers ? (part_.has_block(layer + 1) ? block_indices(layer + 1) : std::vector<std::size_t>{})
                                        : part_.head                 ? table_indices()
                                                                     : std::vector<std::size_t>{};
  const ParameterUse held(*this, block_indices(layer), training_, next);
  const GptBlockParameters& p = block_parameters(layer);
  const std::int64_t B = input.size(0), T = input.size(1), C = config_.hidden, NH = config_.heads;
  const cpu::RandomKey keys = layer_key(key, layer);
  const float attention_dropout = training_ ? dropout_.attention : 0.0f;
  const float residual_dropout = training_ ? dropout_.residual : 0.0f;
  const OpScope op(*device_, "forward", layer_name(layer));
  BlockActivations a;
  a.input = input;
  a.ln_1 = activation({B, T, C}, layer_tag(layer, "ln_1"));
  a.ln_1_mean = Tensor::empty(*device_, {B, T}, DType::f32, MemoryCategory::activations, layer_tag(layer, "ln_1.mean"));
  a.ln_1_rstd = Tensor::empty(*device_, {B, T}, DType::f32, MemoryCategory::activations, layer_tag(layer, "ln_1.rstd"));
  ops::layernorm_forward(a.ln_1, a.ln_1_mean, a.ln_1_rstd, input, p.ln_1_weight, p.ln_1_bias);
  a.qkv = activation({B, T, 3 * C}, layer_tag(layer, "attn.qkv"));
  ops::matmul_forward(a.qkv, a.ln_1, p.attn_c_attn_weight, p.attn_c_attn_bias, WeightLayout::in_out, weight_copy_elements_);
  a.att = ops::attention_saved(*device_, B, NH, T, parameter_dtype_, layer_tag(layer, "attn.att"));
  a.attn = activation({B, T, C}, layer_tag(layer, "attn.out"));
  ops::attention_forward(a.attn, a.att, a.qkv, NH, attention_dropout, keys.derive(kAttentionDropout));
  {
    const Tensor projection = activation({B, T, C}, layer_tag(layer, "attn.c_proj"));
    ops::matmul_forward(projection, a.attn, p.attn_c_proj_weight, p.attn_c_proj_bias, WeightLayout::in_out, weight_copy_elements_);
    if (residual_dropout > 0) ops::dropout_forward(projection, projection, residual_dropout, keys.derive(kAttentionResidualDropout));
    a.residual = activation({B, T, C}, layer_tag(layer, "residual"));
    ops::residual_forward(a.residual, input, projection);
  }
  a.ln_2 = activation({B, T, C}, layer_tag(layer, "ln_2"));
  a.ln_2_mean = Tensor::empty(*device_, {B, T}, DType::f32, MemoryCategory::activations, layer_tag(layer, "ln_2.mean"));
  a.ln_2_rstd = Tensor::empty(*device_, {B, T}, DType::f32, MemoryCategory::activations, layer_tag(layer, "ln_2.rstd"));
  ops::layernorm_forward(a.ln_2, a.ln_2_mean, a.ln_2_rstd, a.residual, p.ln_2_weight, p.ln_2_bias);
  a.fc = activation({B, T, 4 * C}, layer_tag(layer, "mlp.c_fc"));
  ops::matmul_forward(a.fc, a.ln_2, p.mlp_c_fc_weight, p.mlp_c_fc_bias, WeightLayout::in_out, weight_copy_elements_);
  a.gelu = activation({B, T, 4 * C}, layer_tag(layer, "mlp.gelu"));
  ops::gelu_forward(a.gelu, a.fc);
  {
    const Tensor projection = activation({B, T, C}, layer_tag(layer, "mlp.c_proj"));
    ops::matmul_forward(projection, a.gelu, p.mlp_c_proj_weight, p.mlp_c_proj_bias, WeightLayout::in_out, weight_copy_elements_);
    if (residual_dropout > 0) ops::dropout_forward(projection, projection, residual_dropout, keys.derive(kMlpResidualDropout));
    a.output = activation({B, T, C}, layer_tag(layer, "output"));
    ops::residual_forward(a.output, a.residual, projection);
  }
  if (keep == ActivationKeep::input_only) {
    BlockActivations kept;
    kept.input = std::move(a.input);
    kept.output = std::move(a.output);
    return kept;
  }
  if (keep == ActivationKeep::selective) {
    a.att = Tensor();
    a.gelu = Tensor();
    a.ln_1 = Tensor();
    a.ln_2 = Tensor();
  }
  return a;
}

void GptModel::block_recompute(std::int64_t layer, BlockActivations& a, cpu::RandomKey key) {
  if (a.ln_1.defined() && a.att.defined() && a.gelu.defined()) return;  // kept everything
  const ParameterUse held(*this, block_indices(layer), true);
  const OpScope op(*device_, "recompute", layer_name(layer));
  if (!a.qkv.defined()) {  // kept its input only: the whole forward again
    const Tensor input = a.input;
    a = block_forward(layer, input, key, ActivationKeep::all);
    a.output = Tensor();  // the next block's input, not needed by this backward
    return;
  }
  const std::int64_t B = a.input.size(0), T = a.input.size(1), C = config_.hidden, NH = config_.heads;
  const GptBlockParameters& p = block_parameters(layer);
  // LayerNorm outputs from their inputs; the kept mean and rstd are written again with the same values.
  if (!a.ln_1.defined()) {
    a.ln_1 = activation({B, T, C}, layer_tag(layer, "ln_1"));
    ops::layernorm_forward(a.ln_1, a.ln_1_mean, a.ln_1_rstd, a.input, p.ln_1_weight, p.ln_1_bias);
  }
  if (!a.ln_2.defined()) {
    a.ln_2 = activation({B, T, C}, layer_tag(layer, "ln_2"));
    ops::layernorm_forward(a.ln_2, a.ln_2_mean, a.ln_2_rstd, a.residual, p.ln_2_weight, p.ln_2_bias);
  }
  if (!a.att.defined()) {
    a.att = ops::attention_saved(*device_, B, NH, T, parameter_dtype_, layer_tag(layer, "attn.att"));
    const Tensor discarded = activation({B, T, C}, layer_tag(layer, "attn.out.recompute"));
    const float attention_dropout = training_ ? dropout_.attention : 0.0f;
    ops::attention_forward(discarded, a.att, a.qkv, NH, attention_dropout, layer_key(key, layer).derive(kAttentionDropout));
  }
  if (!a.gelu.defined()) {
    a.gelu = activation({B, T, 4 * C}, layer_tag(layer, "mlp.gelu"));
    ops::gelu_forward(a.gelu, a.fc);
  }
}

Tensor GptModel::table_rows_f32(std::int64_t first, std::int64_t count) const {
  return ops::as_f32(parameters_.wte.narrow(0, first, count), "lm_head.wte.f32");
}

double GptModel::head_forward(const Tensor& input, const Tensor& targets, float dloss, const Tensor& input_gradient,
                              DeferredTableGradient* deferred) {
  const std::int64_t B = input.size(0), T = input.size(1), C = config_.hidden, V = config_.vocab;
  const std::int64_t rows = B * T;
  const bool training = input_gradient.defined();
  if (!part_.head) throw std::logic_error("the LM head runs on the last pipeline stage, which this model is not");
  // A deferred table gradient reads the table again after the embedding's backward; training, the last
  // block's backward comes next.
  const ParameterUse norm(*this, ln_f_indices(), false);
  const std::int64_t last = config_.layers - 1;
  const ParameterUse table(*this, table_indices(), training && deferred != nullptr,
                           training && part_.has_block(last) ? block_indices(last) : std::vector<std::size_t>{});
  const OpScope op(*device_, "loss", "lm_head");
  // Deferred: the head's input and the rows' statistics live from before the forward (allocated there,
  // beneath its activations, so keeping them past the head leaves no hole among those).
  const Tensor ln_f = deferred != nullptr && deferred->head_input.defined() ? deferred->head_input.reshape({B, T, C}) : activation({B, T, C}, "ln_f");
  const Tensor mean = Tensor::empty(*device_, {B, T}, DType::f32, MemoryCategory::activations, "ln_f.mean");
  const Tensor rstd = Tensor::empty(*device_, {B, T}, DType::f32, MemoryCategory::activations, "ln_f.rstd");
  ops::layernorm_forward(ln_f, mean, rstd, input, parameters_.ln_f_weight, parameters_.ln_f_bias);

  const bool streamed = gradient_storage_ == GradientStorage::streamed;
  const Tensor ln_f_rows = ln_f.reshape({rows, C});
  const Tensor target_rows = targets.reshape({rows});
  const Tensor ln_f_gradient = training ? workspace({rows, C}, "ln_f.grad") : Tensor();
  // A bf16 table on a device whose matmuls take bf16 is read in place: one product over the whole
  // vocabulary, the gradients in slices only where a gradient bucket bounds them. Otherwise the table
  // is copied to f32 a slice at a time.
  const bool bf16_head = parameters_.wte.dtype() == DType::bf16 && ops::lm_head_takes_bf16(*device_);
  // bf16: chunks of a multiple of 8 rows, the table gradient's inner extent (aligned, as the slices).
  const std::int64_t tokens_per_chunk = loss_chunk(rows);
  const std::int64_t chunk = bf16_head && tokens_per_chunk >= 8 ? tokens_per_chunk / 8 * 8 : tokens_per_chunk;
  const std::int64_t slice = bf16_head ? table_gradient_slice() : vocab_slice();
  const std::int64_t padded_vocab = (V + 7) / 8 * 8;
  // Deferred: the rows' softmax statistics are kept; the table's gradient waits (tied_table_backward).
  const Tensor softmax_rows = deferred != nullptr && training ? deferred->softmax_rows : Tensor();
  double loss_sum = 0;
  for (std::int64_t start = 0; start < rows; start += chunk) {
    const std::int64_t length = std::min(chunk, rows - start);
    const Tensor x = bf16_head ? ln_f_rows.narrow(0, start, length) : ops::as_f32(ln_f_rows.narrow(0, start, length), "lm_head.in.f32");
    // bf16: rows padded to a multiple of 8 elements (32 bytes of f32, 16 of bf16), which cuBLASLt's
    // aligned kernels need (GPT-2's 50257 would leave every row misaligned); no product or loss reads the
    // padding (only the bf16 conversion below copies it along, unused).
    const Tensor logits_rows = workspace({length, bf16_head ? padded_vocab : V}, "lm_head.logits");
    const Tensor logits = bf16_head ? logits_rows.narrow(1, 0, V) : logits_rows;
    if (bf16_head) {
      ops::lm_head_logits_bf16(logits, x, parameters_.wte);
    } else {
      for (std::int64_t first = 0; first < V; first += slice) {
        const std::int64_t count = std::min(slice, V - first);
        ops::lm_head_logits_slice(logits, first, x, table_rows_f32(first, count));
      }
    }
    const Tensor chunk_targets = target_rows.narrow(0, start, length);
    if (!training) {
      loss_sum += ops::cross_entropy_sum(logits, chunk_targets);
      continue;
    }
    loss_sum += ops::cross_entropy_sum_and_gradient(logits, chunk_targets, dloss,
                                                    softmax_rows.defined() ? softmax_rows.narrow(0, start, length) : Tensor());
    const Tensor dx = ln_f_gradient.narrow(0, start, length);
    // bf16 products take the logits' gradient rounded to bf16, as PyTorch's autocast does.
    Tensor dlogits16;
    if (bf16_head) {
      const Tensor dlogits16_rows = Tensor::empty(*device_, {length, padded_vocab}, DType::bf16, MemoryCategory::workspace,
                                                  "lm_head.logits.grad.bf16");
      ops::convert_from_f32(dlogits16_rows, logits_rows);
      dlogits16 = dlogits16_rows.narrow(1, 0, V);
    }
    for (std::int64_t first = 0; first < V; first += slice) {
      const std::int64_t count = std::min(slice, V - first);
      const Tensor dweight = softmax_rows.defined() ? Tensor()
                             : streamed             ? gradient_bucket({count, C}, "wte.weight.slice")
                                                    : gradients_.wte.narrow(0, first, count);
      if (bf16_head) {
        ops::lm_head_backward_bf16(dx, first > 0, dweight, dlogits16, first, x, parameters_.wte.narrow(0, first, count));
      } else {
        ops::lm_head_backward_slice(dx, first > 0, dweight, logits, first, x, table_rows_f32(first, count));
      }
      if (streamed && dweight.defined()) sink().accumulate(GptParameters::kWteIndex, first * C, dweight);
    }
  }
  if (softmax_rows.defined()) *deferred = {ln_f_rows, softmax_rows, target_rows, dloss, chunk, Tensor(), Tensor()};
  if (training) {
    ops::fill_zero(input_gradient);
    const std::size_t ln_f_index = GptParameters::block_index(config_.layers);
    const Tensor dweight = streamed ? gradient_bucket({C}, "ln_f.weight") : gradients_.ln_f_weight;
    const Tensor dbias = streamed ? gradient_bucket({C}, "ln_f.bias") : gradients_.ln_f_bias;
    ops::layernorm_backward(input_gradient, dweight, dbias, ln_f_gradient.reshape({B, T, C}), input, parameters_.ln_f_weight, mean, rstd);
    if (streamed) {
      sink().accumulate(ln_f_index, 0, dweight);
      sink().accumulate(ln_f_index + 1, 0, dbias);
      sink().parameter_complete(ln_f_index);
      sink().parameter_complete(ln_f_index + 1);
      // A stage without the embedding holds the tied table for the head alone: its part is complete.
      if (!part_.embedding) sink().parameter_complete(GptParameters::kWteIndex);
    }
  }
  return loss_sum;
}

Tensor GptModel::block_backward(std::int64_t layer, BlockActivations a, Tensor output_gradient, cpu::RandomKey key) {
  return block_backward_impl(layer, std::move(a), std::move(output_gradient), key, nullptr);
}

Tensor GptModel::block_backward_input(std::int64_t layer, BlockActivations a, Tensor output_gradient, cpu::RandomKey key,
                                      BlockWeightGradientInputs& deferred) {
  deferred = BlockWeightGradientInputs();
  return block_backward_impl(layer, std::move(a), std::move(output_gradient), key, &deferred);
}

void GptModel::block_backward_weight(std::int64_t layer, BlockWeightGradientInputs d) {
  if (!d.defined()) throw std::logic_error("block " + std::to_string(layer) + ": a weight-gradient pass without its input-gradient pass");
  const OpScope op(*device_, "backward_weight", layer_name(layer));
  block_parameters(layer);  // held here, or an error naming the block
  // Streamed, each projection's gradients go to the sink as they are computed (the input pass handed
  // over the LayerNorms').
  projection_parameter_gradients(layer, GptBlockParameters::kMlpCProj, d.mlp_branch_gradient, d.gelu);
  projection_parameter_gradients(layer, GptBlockParameters::kMlpCFc, d.fc_gradient, d.ln_2);
  projection_parameter_gradients(layer, GptBlockParameters::kAttnCProj, d.attention_branch_gradient, d.attn);
  projection_parameter_gradients(layer, GptBlockParameters::kAttnCAttn, d.qkv_gradient, d.ln_1);
}

Tensor GptModel::block_backward_impl(std::int64_t layer, BlockActivations a, Tensor output_gradient, cpu::RandomKey key,
                                     BlockWeightGradientInputs* deferred) {
  block_parameters(layer);  // held here, or an error naming the block
  const ParameterUse held(*this, block_indices(layer), false,
                          layer > 0 && part_.has_block(layer - 1) ? block_indices(layer - 1) : std::vector<std::size_t>{});
  block_recompute(layer, a, key);
  const OpScope op(*device_, deferred != nullptr ? "backward_input" : "backward", layer_name(layer));
  const GptBlockParameters& p = block_parameters(layer);
  const std::int64_t B = a.input.size(0), T = a.input.size(1), C = config_.hidden, NH = config_.heads;
  // Streamed, each parameter's gradient goes to the sink as soon as it is computed (the projections'
  // in the weight pass when it is deferred).
  const cpu::RandomKey keys = layer_key(key, layer);
  const float attention_dropout = training_ ? dropout_.attention : 0.0f;
  const float residual_dropout = training_ ? dropout_.residual : 0.0f;
  Tensor& dresidual = output_gradient;  // d output = d residual through the skip connection
  a.output = Tensor();
  // The output gradients the weight pass keeps from I to W are activations (held between passes, as the
  // copies below are), not workspace; the whole backward uses them at once.
  const MemoryCategory kept_for_weight = deferred != nullptr ? MemoryCategory::activations : MemoryCategory::activation_gradients;
  // A projection's gradients: all now, or the input gradient now and (input, output gradient) kept for
  // the weight pass. An output gradient that LayerNorm's backward overwrites later (the residual
  // gradient itself, when there is no dropout) is kept as a copy.
  auto projection_backward = [&](const Tensor& dinp, std::size_t field, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                 Tensor& kept_input, Tensor& kept_gradient, bool overwritten_later, const char* what) {
    if (deferred == nullptr && gradient_storage_ == GradientStorage::whole) {  // one call: the input and parameter gradients
      const GptBlockParameters& g = gradients_.blocks[static_cast<std::size_t>(layer)];
      ops::matmul_backward(dinp, g.field(field), g.field(field + 1), dout, inp, weight, WeightLayout::in_out, weight_copy_elements_);
      return;
    }
    if (deferred == nullptr) {
      ops::matmul_backward(dinp, Tensor(), Tensor(), dout, inp, weight, WeightLayout::in_out, weight_copy_elements_);
      projection_parameter_gradients(layer, field, dout, inp);
      return;
    }
    ops::matmul_backward(dinp, Tensor(), Tensor(), dout, inp, weight, WeightLayout::in_out, weight_copy_elements_);
    kept_input = inp;
    if (overwritten_later) {
      kept_gradient = Tensor::empty(*device_, dout.shape(), dout.dtype(), MemoryCategory::activations, layer_tag(layer, what));
      kept_gradient.copy_from(dout);
    } else {
      kept_gradient = dout;
    }
  };
  BlockWeightGradientInputs unused;
  BlockWeightGradientInputs& d = deferred != nullptr ? *deferred : unused;

  // MLP branch.
  Tensor dbranch = dresidual;
  if (residual_dropout > 0) {
    dbranch = Tensor::zeros(*device_, {B, T, C}, parameter_dtype_, kept_for_weight, layer_tag(layer, "mlp.c_proj.grad"));
    ops::dropout_backward(dbranch, dresidual, residual_dropout, keys.derive(kMlpResidualDropout));
  }
  Tensor dgelu = activation_gradient({B, T, 4 * C}, layer_tag(layer, "mlp.gelu.grad"));
  projection_backward(dgelu, GptBlockParameters::kMlpCProj, dbranch, a.gelu, p.mlp_c_proj_weight, d.gelu, d.mlp_branch_gradient,
                      residual_dropout == 0, "mlp.c_proj.grad.kept");
  a.gelu = Tensor();
  Tensor dfc = Tensor::zeros(*device_, {B, T, 4 * C}, parameter_dtype_, kept_for_weight, layer_tag(layer, "mlp.c_fc.grad"));
  ops::gelu_backward(dfc, a.fc, dgelu);
  dgelu = Tensor();
  a.fc = Tensor();
  Tensor dln = activation_gradient({B, T, C}, layer_tag(layer, "ln_2.grad"));
  projection_backward(dln, GptBlockParameters::kMlpCFc, dfc, a.ln_2, p.mlp_c_fc_weight, d.ln_2, d.fc_gradient, false,
                      "mlp.c_fc.grad.kept");
  dfc = Tensor();
  a.ln_2 = Tensor();
  layernorm_backward_with_parameters(layer, GptBlockParameters::kLn2, dresidual, dln, a.residual, a.ln_2_mean, a.ln_2_rstd);
  a.residual = Tensor();

  // Attention branch.
  dbranch = dresidual;
  if (residual_dropout > 0) {
    dbranch = Tensor::zeros(*device_, {B, T, C}, parameter_dtype_, kept_for_weight, layer_tag(layer, "attn.c_proj.grad"));
    ops::dropout_backward(dbranch, dresidual, residual_dropout, keys.derive(kAttentionResidualDropout));
  }
  Tensor dattn = activation_gradient({B, T, C}, layer_tag(layer, "attn.out.grad"));
  projection_backward(dattn, GptBlockParameters::kAttnCProj, dbranch, a.attn, p.attn_c_proj_weight, d.attn,
                      d.attention_branch_gradient, residual_dropout == 0, "attn.c_proj.grad.kept");
  dbranch = Tensor();
  Tensor dqkv = Tensor::empty(*device_, {B, T, 3 * C}, parameter_dtype_, kept_for_weight, layer_tag(layer, "attn.qkv.grad"));
  ops::attention_backward(dqkv, dattn, a.attn, a.qkv, a.att, NH, attention_dropout, keys.derive(kAttentionDropout));
  dattn = Tensor();
  a.attn = Tensor();
  a.att = Tensor();
  projection_backward(dln, GptBlockParameters::kAttnCAttn, dqkv, a.ln_1, p.attn_c_attn_weight, d.ln_1, d.qkv_gradient, false,
                      "attn.qkv.grad.kept");
  dqkv = Tensor();
  a.qkv = Tensor();
  layernorm_backward_with_parameters(layer, GptBlockParameters::kLn1, dresidual, dln, a.input, a.ln_1_mean, a.ln_1_rstd);
  return dresidual;
}

void GptModel::embedding_backward(const Tensor& tokens, const Tensor& output_gradient, cpu::RandomKey key, DeferredTableGradient* deferred) {
  if (!part_.embedding) throw std::logic_error("the embedding runs on the first pipeline stage, which this model is not");
  const OpScope op(*device_, "backward", "embedding");
  Tensor gradient = output_gradient;
  if (training_ && dropout_.embedding > 0) {
    gradient = Tensor::zeros(*device_, output_gradient.shape(), parameter_dtype_, MemoryCategory::activation_gradients, "embedding.grad");
    ops::dropout_backward(gradient, output_gradient, dropout_.embedding, key.derive(kEmbeddingDropout));
  }
  if (gradient_storage_ == GradientStorage::whole) {
    ops::encoder_backward(gradients_.wte, gradients_.wpe, gradient, tokens);
    return;
  }
  // Positions on the device; the token rows go to the sink, which adds them in the kernel's order.
  const std::int64_t B = tokens.size(0), T = tokens.size(1), C = config_.hidden;
  const Tensor dwpe = gradient_bucket({T, C}, "wpe.weight");
  ops::encoder_backward(Tensor(), dwpe, gradient, tokens);
  sink().accumulate(GptParameters::kWpeIndex, 0, dwpe);
  sink().parameter_complete(GptParameters::kWpeIndex);
  const Tensor rows = ops::as_f32(gradient, "embedding.grad.f32").reshape({B * T, C});
  if (deferred != nullptr) {  // the table's gradient follows, slice by slice, with the head's part
    deferred->embedding_rows = rows;
    deferred->tokens = tokens.reshape({B * T});
    return;
  }
  sink().accumulate_rows(GptParameters::kWteIndex, tokens.reshape({B * T}), rows);
  sink().parameter_complete(GptParameters::kWteIndex);
}

double GptModel::train_micro_batch(const Tensor& tokens, const Tensor& targets, const MicroBatchKey& micro_batch, float dloss,
                                   const std::vector<ActivationKeep>& keep) {
  if (!keep.empty() && static_cast<std::int64_t>(keep.size()) != config_.layers) {
    throw std::invalid_argument("a recompute policy for " + std::to_string(keep.size()) + " blocks given to a model of " +
                                std::to_string(config_.layers));
  }
  const cpu::RandomKey key = micro_batch.key();
  const std::int64_t tokens_count = tokens.numel();
  std::vector<BlockActivations> saved;
  saved.reserve(static_cast<std::size_t>(config_.layers));
  // A deferred table gradient keeps the head's input and softmax statistics through backward: they are
  // allocated first, beneath the activations, so keeping them past the head leaves no hole among those.
  const bool defer = tied_table_gradient_ == TiedTableGradient::deferred && gradient_storage_ == GradientStorage::streamed;
  DeferredTableGradient deferred;
  if (defer) {
    deferred.head_input = activation({tokens_count, config_.hidden}, "ln_f");
    deferred.softmax_rows = Tensor::empty(*device_, {tokens_count, cpu::kSoftmaxRowFloats}, DType::f32, MemoryCategory::activations, "lm_head.softmax_rows");
  }
  Tensor x = embedding_forward(tokens, key);
  for (std::int64_t layer = 0; layer < config_.layers; ++layer) {
    saved.push_back(block_forward(layer, x, key, keep.empty() ? ActivationKeep::all : keep[static_cast<std::size_t>(layer)]));
    x = saved.back().output;
  }
  Tensor gradient = activation_gradient(x.shape(), "residual.grad");
  const double loss_sum = head_forward(x, targets, dloss / static_cast<float>(tokens_count), gradient, defer ? &deferred : nullptr);
  x = Tensor();
  for (std::int64_t layer = config_.layers - 1; layer >= 0; --layer) {
    BlockActivations activations = std::move(saved.back());
    saved.pop_back();
    gradient = block_backward(layer, std::move(activations), std::move(gradient), key);
  }
  embedding_backward(tokens, gradient, key, defer ? &deferred : nullptr);
  gradient = Tensor();
  if (defer) tied_table_backward(deferred);
  return loss_sum / static_cast<double>(tokens_count);
}

double GptModel::evaluate(const Tensor& tokens, const Tensor& targets) {
  return evaluate_head(evaluate_blocks(evaluate_embedding(tokens), 0, config_.layers), targets);
}

Tensor GptModel::evaluate_embedding(const Tensor& tokens) {
  const ScopedFlag evaluation(training_, false);
  return embedding_forward(tokens, cpu::RandomKey{});
}

Tensor GptModel::evaluate_blocks(Tensor input, std::int64_t first, std::int64_t end) {
  const ScopedFlag evaluation(training_, false);
  for (std::int64_t layer = first; layer < end; ++layer) input = block_forward(layer, input, cpu::RandomKey{}).output;
  return input;
}

double GptModel::evaluate_head(const Tensor& input, const Tensor& targets) {
  const ScopedFlag evaluation(training_, false);
  return head_forward(input, targets, 0.0f, Tensor()) / static_cast<double>(targets.numel());
}

}  // namespace ferry
