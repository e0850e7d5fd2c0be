// The tied LM head one vocabulary slice at a time: logits for the slice's columns of a [rows, vocab]
// logits buffer, and the slice's share of the input gradient and of the table's gradient. Slicing
// lets a bf16 model convert a slice of its table to f32 at a time, and lets a gradient sink take the
// table's gradient slice by slice; with one slice the results are those of one matmul.
#pragma once

#include <cstdint>

namespace ferry::cpu {

// logits[r, first + j] = sum_c inp[r, c] * weight_slice[j, c] for j < count (logits rows are
// `vocab` long; weight_slice is rows first .. first + count of the [vocab, channels] table).
void lm_head_logits_slice(float* logits, std::int64_t vocab, std::int64_t first, const float* inp, const float* weight_slice,
                          std::int64_t rows, std::int64_t channels, std::int64_t count);

// With dlogits the gradient of the logits buffer: dinp (+)= dlogits[:, slice] x weight_slice
// (overwritten when accumulate_input is false) and dweight_slice += dlogits[:, slice]^T x inp. Either
// output may be null (the table's gradient alone, or the input's alone); the other is the same bits.
void lm_head_backward_slice(float* dinp, bool accumulate_input, float* dweight_slice, const float* dlogits, std::int64_t vocab,
                            std::int64_t first, const float* inp, const float* weight_slice, std::int64_t rows,
                            std::int64_t channels, std::int64_t count);

}  // namespace ferry::cpu
