#include "models/kernels/cpu/lm_head.h"

#include "models/kernels/cpu/blas.h"

namespace ferry::cpu {

void lm_head_logits_slice(float* logits, std::int64_t vocab, std::int64_t first, const float* inp, const float* weight_slice,
                          std::int64_t rows, std::int64_t channels, std::int64_t count) {
  gemm(false, true, rows, count, channels, 1.0f, inp, channels, weight_slice, channels, 0.0f, logits + first, vocab);
}

void lm_head_backward_slice(float* dinp, bool accumulate_input, float* dweight_slice, const float* dlogits, std::int64_t vocab,
                            std::int64_t first, const float* inp, const float* weight_slice, std::int64_t rows,
                            std::int64_t channels, std::int64_t count) {
  const float* dlogits_slice = dlogits + first;
  if (dinp != nullptr) {
    gemm(false, false, rows, channels, count, 1.0f, dlogits_slice, vocab, weight_slice, channels, accumulate_input ? 1.0f : 0.0f, dinp,
         channels);
  }
  if (dweight_slice != nullptr) gemm(true, false, count, channels, rows, 1.0f, dlogits_slice, vocab, inp, channels, 1.0f, dweight_slice, channels);
}

}  // namespace ferry::cpu
