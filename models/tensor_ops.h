// Tensor-level entry points to the kernels: each op reads shapes from its tensors, checks them, takes its
// scratch from the allocator and calls its device's KernelBackend (cpu, cuda; meta allocates the same as
// cpu and computes nothing). bf16/f16 tensors are computed through f32 workspace copies (fp32
// accumulation). Parameter gradients are f32; activation gradients (dout, dinp) may be in the compute
// dtype, as autocast keeps them: each op reads them in f32 and rounds what it writes once.
#pragma once

#include <string_view>
#include <vector>

#include "engine/core/tensor.h"
#include "models/kernels/cpu/counter_random.h"
#include "models/kernels/cpu/matmul.h"

namespace ferry::ops {

using cpu::RandomKey;
using cpu::WeightLayout;

// `tensor` itself when f32, else an f32 workspace copy (tagged `tag`).
Tensor as_f32(const Tensor& tensor, std::string_view tag);
// Where an f32 result for `destination` is computed: itself when f32, else f32 workspace.
Tensor f32_target(const Tensor& destination, std::string_view tag);
// Writes the f32 result into destination (a no-op when they are the same tensor).
void store(const Tensor& destination, const Tensor& result);
// What an accumulating op adds into: destination itself when f32, else an f32 copy of its values.
Tensor f32_accumulator(const Tensor& destination, std::string_view tag);

void fill_zero(const Tensor& tensor);

void encoder_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe);
// dwte may be undefined: only dwpe accumulates.
void encoder_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens);
// Rows [first, first + table_rows.size(0)) of the token table's gradient (f32 [count, C]) accumulate the
// rows of dout ([n, C]) whose token (i32 [n]) is among them, in order: encoder_backward's sums, slice by slice.
void encoder_backward_token_rows(const Tensor& table_rows, const Tensor& dout, const Tensor& tokens, std::int64_t first);

void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias);
// dinp, dweight, dbias accumulate.
void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd);

// bias may be undefined. in_out: weight [in, out]; out_in: weight [out, in]. A 16-bit in_out weight
// of more than weight_copy_elements (> 0) is converted to f32 in row slices of at most that many
// elements, one GEMM each, instead of whole (the workspace a cpu run's bf16/f16 matmuls take).
void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias, WeightLayout layout,
                    std::int64_t weight_copy_elements = 0);
// dinp (may be undefined) is overwritten; dweight and dbias (may be undefined) accumulate.
// inp is read only for dweight, weight only for dinp (in slices as above).
void matmul_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight, WeightLayout layout, std::int64_t weight_copy_elements = 0);

// Rows [first, first + dweight_rows.size(0)) of an in_out weight's gradient: dweight_rows += inp[:, rows]^T x
// dout, with inp [.., in] and dout [.., out] in f32 (convert once with as_f32 before slicing).
void matmul_backward_weight_rows(const Tensor& dweight_rows, const Tensor& dout, const Tensor& inp, std::int64_t first);

// The tied LM head on vocabulary slice [first, first + weight_slice.size(0)) of logits [rows, vocab] (f32;
// inp is [rows, C] f32, weight_slice [count, C] f32). Backward: dinp (+)= and dweight_slice +=.
void lm_head_logits_slice(const Tensor& logits, std::int64_t first, const Tensor& inp, const Tensor& weight_slice);
// Either gradient may be undefined (the other is then computed alone, the same bits).
void lm_head_backward_slice(const Tensor& dinp, bool accumulate_input, const Tensor& dweight_slice, const Tensor& dlogits,
                            std::int64_t first, const Tensor& inp, const Tensor& weight_slice);

// The sum of squares of every value of the f32 tensors, in double on the host (0 on meta), with the
// scratch the device's kernels take allocated on every kind, so a dry run holds it too.
double sum_of_squares(Device& device, const std::vector<const Tensor*>& tensors);

// Whether `device`'s kernels run the LM head on a bf16 table itself (lm_head_*_bf16; cuda): no f32 copy.
bool lm_head_takes_bf16(Device& device);
// logits [rows, vocab] (f32) = inp [rows, C] (bf16) x table [vocab, C] (bf16)^T.
void lm_head_logits_bf16(const Tensor& logits, const Tensor& inp, const Tensor& table);
// Over the table rows [first, first + count) that table_rows views, with dlogits [rows, vocab] in bf16:
// dinp [rows, C] f32 (+)= dlogits[:, slice] x table_rows, dtable_rows [count, C] f32 += dlogits[:, slice]^T x inp
// (either may be undefined).
void lm_head_backward_bf16(const Tensor& dinp, bool accumulate_input, const Tensor& dtable_rows, const Tensor& dlogits, std::int64_t first,
                           const Tensor& inp, const Tensor& table_rows);
// destination (bf16 or f16) = source (f32) rounded to nearest even; the same shape.
void convert_from_f32(const Tensor& destination, const Tensor& source);

// What attention keeps for backward on `device` (its `saved` tensor, category activations): cpu and meta
// the [B, NH, T, T] probabilities in the activation dtype, cuda the [B, NH, T] log-sum-exps of its fused
// kernels in f32 (a rounded log-sum-exp would skew every recomputed probability).
Tensor attention_saved(Device& device, std::int64_t batch, std::int64_t heads, std::int64_t sequence, DType activation_dtype,
                       std::string_view tag);
void attention_forward(const Tensor& out, const Tensor& saved, const Tensor& qkv, std::int64_t heads, float dropout,
                       RandomKey key);
// dqkv is overwritten; out is the forward's output.
void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& out, const Tensor& qkv, const Tensor& saved,
                        std::int64_t heads, float dropout, RandomKey key);

void gelu_forward(const Tensor& out, const Tensor& inp);
void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout);  // dinp accumulates
void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b);
void dropout_forward(const Tensor& out, const Tensor& inp, float probability, RandomKey key);
void dropout_backward(const Tensor& dinp, const Tensor& dout, float probability, RandomKey key);  // accumulates

// Mean cross-entropy of logits [rows, vocab] against targets [rows] (i32); the sum of row losses in
// double. The training variant replaces logits by their gradient scaled by dloss.
double cross_entropy_sum(const Tensor& logits, const Tensor& targets);
// With softmax_rows (f32 [rows, cpu::kSoftmaxRowFloats]), each row's softmax statistics are kept there.
double cross_entropy_sum_and_gradient(const Tensor& logits, const Tensor& targets, float dloss, const Tensor& softmax_rows = Tensor());
// `slice` (f32 [rows, count]) holds logits columns [first, first + count): they become their gradient
// times dloss from the saved softmax_rows, bit for bit what cross_entropy_sum_and_gradient gave them.
void cross_entropy_backward_slice(const Tensor& slice, const Tensor& softmax_rows, const Tensor& targets, std::int64_t first, float dloss);

}  // namespace ferry::ops
