// GPT-2 with explicit forward and backward per layer (no autograd tape): each block's forward returns
// the activations its backward needs, so what stays alive is visible and under the caller's control.
// Parameters, gradients and activations all come from the device allocator with category and tag.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/gradient_sink.h"
#include "engine/core/parameter_provider.h"
#include "engine/core/tensor.h"
#include "models/gpt_config.h"
#include "models/gpt_parameters.h"
#include "models/kernels/cpu/counter_random.h"
#include "models/kernels/cpu/cross_entropy.h"

namespace ferry {

struct GptDropout {
  float embedding = 0.0f;
  float attention = 0.0f;
  float residual = 0.0f;
};

// What a block's forward keeps for its backward (the recompute mechanism; schedule/ decides per block):
// all; selective (drops the attention probabilities att, the GELU output and both LayerNorm outputs,
// recomputed from qkv, the GELU input, and the LayerNorm inputs with their kept mean and rstd: Megatron's
// selective recompute plus llm.c's GELU and LayerNorm levels); input_only (full recompute: the block's
// forward runs again in backward).
enum class ActivationKeep : std::uint8_t { all, selective, input_only };

// What a block's backward needs from its forward (fields a policy dropped are undefined).
struct BlockActivations {
  Tensor input;                       // [B, T, C], the previous block's output
  Tensor ln_1, ln_1_mean, ln_1_rstd;  // [B, T, C], [B, T], [B, T]
  Tensor qkv;                         // [B, T, 3C]
  Tensor att;                         // attention's saved state: [B, NH, T, T] softmax probabilities
                                      // (cpu), [B, NH, T] log-sum-exps (cuda)
  Tensor attn;                        // [B, T, C] attention output before c_proj
  Tensor residual;                    // [B, T, C] input + attention branch
  Tensor ln_2, ln_2_mean, ln_2_rstd;
  Tensor fc;                          // [B, T, 4C] before GELU
  Tensor gelu;                        // [B, T, 4C]
  Tensor output;                      // [B, T, C]
};

// What a block's weight-gradient pass (Zero Bubble's W) needs from its input-gradient pass (I): each
// projection's input and the gradient of its output. The LayerNorm gradients are done in I. All of it is
// in the activations category: 7 BTC e bytes of inputs and 36 BTC of f32 output gradients per block.
struct BlockWeightGradientInputs {
  Tensor ln_1, qkv_gradient;              // attn.c_attn
  Tensor attn, attention_branch_gradient; // attn.c_proj
  Tensor ln_2, fc_gradient;               // mlp.c_fc
  Tensor gelu, mlp_branch_gradient;       // mlp.c_proj
  bool defined() const { return ln_1.defined(); }
};

// Dropout masks are keyed by (seed, step, micro-batch) and then by layer and purpose.
struct MicroBatchKey {
  std::uint64_t seed = 0;
  std::uint64_t step = 0;
  std::uint64_t micro_batch = 0;
  cpu::RandomKey key() const { return cpu::RandomKey{cpu::mix64(seed)}.derive(step).derive(micro_batch); }
};

// Where parameter gradients live: whole on the device (accumulating over micro-batches), or streamed
// to a GradientSink piece by piece during backward (the device holds one bucket at a time).
enum class GradientStorage : std::uint8_t { whole, streamed };

// When a streamed model hands the tied token table's gradient to its sink: as_computed, the LM head's
// part per loss chunk at the start of backward and the embedding's rows at its end (the sink holds the
// table's whole gradient open in between); or deferred, after the embedding's backward, slice by slice
// with both parts summed, each slice complete when handed over: the head's logits are recomputed from
// the rows' saved softmax statistics (2 x tokens x vocab x hidden more FLOPs, a third of the head's),
// and its input rows, the statistics and the embedding's gradient rows are kept through backward
// instead of a [vocab, hidden] gradient. The gradients are bitwise those of as_computed.
enum class TiedTableGradient : std::uint8_t { as_computed, deferred };

// What a deferred table gradient keeps from the head and the embedding (gpt_tied_table_gradient.cpp).
struct DeferredTableGradient {
  Tensor head_input;    // [rows, C] the final LayerNorm's output, the head's input
  Tensor softmax_rows;  // f32 [rows, cpu::kSoftmaxRowFloats]
  Tensor targets;       // i32 [rows]
  float dloss = 0;      // per token
  std::int64_t chunk = 0;
  Tensor embedding_rows;  // f32 [rows, C]: the embedding output's gradient
  Tensor tokens;          // i32 [rows]
};

// Where a model's parameters live: whole on the device for the model's life, or provided layer by layer
// (ZeRO stage 3: the model allocates none; each layer acquires its parameters from a ParameterProvider
// before it runs and releases them after, so they are held only while used).
enum class ParameterResidence : std::uint8_t { whole, provided };

class GptModel {
 public:
  // activation dtype = parameter dtype (f32, bf16 or f16), and so are the activations' gradients in
  // backward (as autocast keeps them; every op computes in f32); parameter gradients are always f32.
  // `part`: the blocks (and embedding, head) this object holds, for a pipeline stage; the others have
  // no parameters here and their layers throw when called.
  GptModel(Device& device, GptConfig config, DType parameter_dtype, GptDropout dropout = {},
           GradientStorage gradient_storage = GradientStorage::whole, GptModelPart part = {},
           ParameterResidence residence = ParameterResidence::whole);

  const GptConfig& config() const { return config_; }
  Device& device() const { return *device_; }
  DType parameter_dtype() const { return parameter_dtype_; }
  const GptModelPart& part() const { return part_; }
  // The held parameters (ParameterResidence::provided: only those a layer holds at the moment).
  const GptParameters& parameters() const { return parameters_; }
  ParameterResidence parameter_residence() const { return residence_; }
  // The parameters of this model's part by name, shape and index, held or not.
  std::vector<ParameterSpec> parameter_specs() const { return GptParameters::part_specs(config_, part_); }
  // Where provided parameters come from (required before a provided model runs a layer).
  void set_parameter_provider(ParameterProvider* provider) { provider_ = provider; }
  // Undefined tensors when gradients are streamed.
  const GptParameters& gradients() const { return gradients_; }
  void zero_gradients();
  GradientStorage gradient_storage() const { return gradient_storage_; }
  // Where streamed gradients go (required before training with GradientStorage::streamed).
  void set_gradient_sink(GradientSink* sink) { gradient_sink_ = sink; }
  // Tokens per chunk of the LM head and cross-entropy (0: as many as fit the device kind's
  // KernelSizes::logits_chunk_bytes of f32 logits: 32 MiB on cpu, 128 MiB on cuda). Chunks change rounding
  // only: the loss and gradients equal the unchunked ones within f32.
  // A head that reads a bf16 table in place (cuda) rounds the chunk down to a multiple of 8 tokens.
  void set_loss_chunk(std::int64_t tokens);
  std::int64_t loss_chunk(std::int64_t tokens) const;
  // Rows of the tied token table the LM head takes at once: all of them for f32 parameters; for bf16,
  // as many as fit kVocabSliceBytes in f32 (the head's f32 copy of the table, and the streamed
  // table-gradient bucket, are one slice).
  std::int64_t vocab_slice() const;
  // Overrides vocab_slice() (0: automatic). Slices change the input gradient's rounding only.
  void set_vocab_slice(std::int64_t rows);
  // Where the head reads a bf16 table in place (ops::lm_head_takes_bf16), it makes no f32 copy to bound:
  // its gradient comes in slices of a multiple of 8 rows (aligned for cuBLASLt), of the whole vocabulary
  // or where set_vocab_slice asks or gradients are streamed (each slice a bucket, within vocab_slice()).
  std::int64_t table_gradient_slice() const;
  static constexpr std::int64_t kVocabSliceBytes = std::int64_t{8} << 20;
  // Streamed gradients reach the sink one parameter at a time, and a parameter larger than `elements`
  // in row slices of at most that many (DeepSpeed's reduce_bucket_size): the device holds at most one
  // such bucket of f32 gradients (0: whole parameters). The token table's slices are the vocab_slice().
  void set_gradient_bucket_elements(std::int64_t elements);
  std::int64_t gradient_bucket_elements() const { return gradient_bucket_elements_; }
  // Streamed: the largest gradient piece (f32 elements) this model makes before handing it to its sink,
  // and how many it holds at once (two: a LayerNorm's weight and bias; a deferred table slice and its
  // chunk's part). What a sink's memory bound adds for the model.
  struct StreamedPieces {
    std::int64_t largest = 0;
    std::int64_t at_once = 0;
  };
  StreamedPieces streamed_pieces() const;
  // 16-bit weights of more than `elements` are converted to f32 for the matmuls in row slices of at most
  // that many (the cpu kernels' f32 workspace copies; 0: whole weights).
  void set_weight_copy_elements(std::int64_t elements);
  // Streamed gradients of a whole model (one that holds the embedding and the head) in
  // train_micro_batch: see TiedTableGradient. Pipeline stages hand it over as computed.
  void set_tied_table_gradient(TiedTableGradient mode) { tied_table_gradient_ = mode; }
  TiedTableGradient tied_table_gradient() const { return tied_table_gradient_; }

  // Layers, one at a time. tokens and targets are i32 [B, T] on the device.
  Tensor embedding_forward(const Tensor& tokens, cpu::RandomKey key);
  BlockActivations block_forward(std::int64_t layer, const Tensor& input, cpu::RandomKey key,
                                 ActivationKeep keep = ActivationKeep::all);
  // Recomputes what block_forward dropped, with the same key (so the same dropout masks): the
  // activations become exactly those of keep = all.
  void block_recompute(std::int64_t layer, BlockActivations& activations, cpu::RandomKey key);
  // Final LayerNorm, tied LM head and cross-entropy over [B, T]. Returns the sum of token losses; when
  // `input_gradient` is defined ([B, T, C] f32) it receives d(sum loss * dloss)/d input and the head's
  // parameter gradients accumulate. Logits are computed in row chunks and never held whole.
  double head_forward(const Tensor& input, const Tensor& targets, float dloss, const Tensor& input_gradient) {
    return head_forward(input, targets, dloss, input_gradient, nullptr);
  }
  // Consumes the activations; `output_gradient` becomes the gradient of the block's input (returned).
  Tensor block_backward(std::int64_t layer, BlockActivations activations, Tensor output_gradient, cpu::RandomKey key);
  void embedding_backward(const Tensor& tokens, const Tensor& output_gradient, cpu::RandomKey key) {
    embedding_backward(tokens, output_gradient, key, nullptr);
  }
  // Zero Bubble's split of block_backward: the input gradient now (returned), the projections' weight
  // gradients later from `deferred` (filled here). Together they give block_backward's gradients
  // bitwise. Streamed, the input pass hands the sink the LayerNorms' gradients, the weight pass the
  // projections'.
  Tensor block_backward_input(std::int64_t layer, BlockActivations activations, Tensor output_gradient, cpu::RandomKey key,
                              BlockWeightGradientInputs& deferred);
  void block_backward_weight(std::int64_t layer, BlockWeightGradientInputs deferred);

  // A whole micro-batch: forward, loss, backward with gradients scaled by dloss (accumulating).
  // keep[layer] says what each block keeps (empty: all). Returns the mean token loss.
  double train_micro_batch(const Tensor& tokens, const Tensor& targets, const MicroBatchKey& key, float dloss,
                           const std::vector<ActivationKeep>& keep = {});
  // Mean token loss, no gradients, no dropout.
  double evaluate(const Tensor& tokens, const Tensor& targets);
  // The same in parts, for a pipeline stage that holds some of the model: the embedding, blocks
  // [first, end) (nothing kept for a backward) and the head's mean token loss.
  Tensor evaluate_embedding(const Tensor& tokens);
  Tensor evaluate_blocks(Tensor input, std::int64_t first, std::int64_t end);
  double evaluate_head(const Tensor& input, const Tensor& targets);

 private:
  class ParameterUse;  // a layer's hold on its parameters (acquired from the provider where not held)
  // The parameters' indices of the embedding (wte, wpe), a block, the final LayerNorm, the token table.
  static std::vector<std::size_t> embedding_indices();
  static std::vector<std::size_t> block_indices(std::int64_t layer);
  std::vector<std::size_t> ln_f_indices() const;
  static std::vector<std::size_t> table_indices();
  Tensor activation(const Shape& shape, const std::string& tag) const;
  // A gradient of activations in the compute dtype (autocast's), category activation_gradients.
  Tensor activation_gradient(const Shape& shape, const std::string& tag) const;
  Tensor workspace(const Shape& shape, const std::string& tag) const;
  // A zeroed f32 gradient bucket (category gradients) for streamed gradients.
  Tensor gradient_bucket(const Shape& shape, const std::string& tag) const;
  GradientSink& sink() const;
  // With `deferred` (streamed, TiedTableGradient::deferred), the head keeps what the table's gradient
  // needs instead of computing its part, and the embedding keeps its rows; tied_table_backward then
  // hands the table's gradient over slice by slice.
  double head_forward(const Tensor& input, const Tensor& targets, float dloss, const Tensor& input_gradient, DeferredTableGradient* deferred);
  void embedding_backward(const Tensor& tokens, const Tensor& output_gradient, cpu::RandomKey key, DeferredTableGradient* deferred);
  void tied_table_backward(const DeferredTableGradient& deferred);
  // Rows [first, first + count) of the tied table in f32 (a view of the table itself when it is f32).
  Tensor table_rows_f32(std::int64_t first, std::int64_t count) const;
  // Block `layer`'s projection (weights[field], bias after it) parameter gradients from its output
  // gradient and input: added to the whole gradients, or streamed in bounded buckets (gpt_model_gradients.cpp).
  void projection_parameter_gradients(std::int64_t layer, std::size_t field, const Tensor& dout, const Tensor& inp);
  // A block LayerNorm's backward (dinp accumulates) with its weight and bias gradients, whole or streamed.
  void layernorm_backward_with_parameters(std::int64_t layer, std::size_t field, const Tensor& dinp, const Tensor& dout,
                                          const Tensor& inp, const Tensor& mean, const Tensor& rstd);
  const GptBlockParameters& block_parameters(std::int64_t layer) const;
  // block_backward and block_backward_input: with `deferred`, the projections' weight gradients wait.
  Tensor block_backward_impl(std::int64_t layer, BlockActivations activations, Tensor output_gradient, cpu::RandomKey key,
                             BlockWeightGradientInputs* deferred);

  Device* device_;
  GptConfig config_;
  DType parameter_dtype_;
  GptDropout dropout_;
  GptParameters parameters_;
  GptParameters gradients_;
  GradientStorage gradient_storage_;
  GptModelPart part_;
  ParameterResidence residence_;
  ParameterProvider* provider_ = nullptr;
  GradientSink* gradient_sink_ = nullptr;
  std::int64_t loss_chunk_ = 0;
  std::int64_t vocab_slice_ = 0;
  std::int64_t gradient_bucket_elements_ = 0;
  std::int64_t weight_copy_elements_ = 0;
  TiedTableGradient tied_table_gradient_ = TiedTableGradient::as_computed;
  bool training_ = true;
};

}  // namespace ferry
