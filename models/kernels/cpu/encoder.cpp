#include "models/kernels/cpu/encoder.h"

#include "engine/core/dtype.h"
#include "models/kernels/cpu/column_blocks.h"

namespace ferry::cpu {

template <typename Real>
void encoder_forward(Real* out, const std::int32_t* tokens, const Real* wte, const Real* wpe, std::int64_t batch,
                     std::int64_t sequence, std::int64_t channels) {
#pragma omp parallel for schedule(static)
  for (std::int64_t position = 0; position < batch * sequence; ++position) {
    const std::int64_t t = position % sequence;
    const Real* token_row = wte + static_cast<std::int64_t>(tokens[position]) * channels;
    const Real* position_row = wpe + t * channels;
    Real* destination = out + position * channels;
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c) destination[c] = token_row[c] + position_row[c];
  }
}

void encoder_forward_bf16_table(float* out, const std::int32_t* tokens, const std::uint16_t* wte, const float* wpe,
                                std::int64_t batch, std::int64_t sequence, std::int64_t channels) {
#pragma omp parallel for schedule(static)
  for (std::int64_t position = 0; position < batch * sequence; ++position) {
    const std::int64_t t = position % sequence;
    const std::uint16_t* token_row = wte + static_cast<std::int64_t>(tokens[position]) * channels;
    const float* position_row = wpe + t * channels;
    float* destination = out + position * channels;
    for (std::int64_t c = 0; c < channels; ++c) destination[c] = bf16_to_float(token_row[c]) + position_row[c];
  }
}

template <typename Real>
void encoder_backward(Real* dwte, Real* dwpe, const Real* dout, const std::int32_t* tokens, std::int64_t batch,
                      std::int64_t sequence, std::int64_t channels) {
  for_each_column_block(channels, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t position = 0; position < batch * sequence; ++position) {
      const std::int64_t t = position % sequence;
      const Real* source = dout + position * channels;
      Real* position_row = dwpe + t * channels;
      for (std::int64_t c = first; c < last; ++c) position_row[c] += source[c];
      if (dwte == nullptr) continue;
      Real* token_row = dwte + static_cast<std::int64_t>(tokens[position]) * channels;
      for (std::int64_t c = first; c < last; ++c) token_row[c] += source[c];
    }
  });
}

void encoder_backward_token_rows(float* table_rows, const float* dout, const std::int32_t* tokens, std::int64_t positions,
                                 std::int64_t channels, std::int64_t first, std::int64_t count) {
  for_each_column_block(channels, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t position = 0; position < positions; ++position) {
      const std::int64_t row = static_cast<std::int64_t>(tokens[position]) - first;
      if (row < 0 || row >= count) continue;
      const float* source = dout + position * channels;
      float* target = table_rows + row * channels;
      for (std::int64_t c = begin; c < end; ++c) target[c] += source[c];
    }
  });
}

template void encoder_forward<float>(float*, const std::int32_t*, const float*, const float*, std::int64_t, std::int64_t, std::int64_t);
template void encoder_forward<double>(double*, const std::int32_t*, const double*, const double*, std::int64_t, std::int64_t, std::int64_t);
template void encoder_backward<float>(float*, float*, const float*, const std::int32_t*, std::int64_t, std::int64_t, std::int64_t);
template void encoder_backward<double>(double*, double*, const double*, const std::int32_t*, std::int64_t, std::int64_t, std::int64_t);

}  // namespace ferry::cpu
