// The scalar level: plain C++ in the documented operation order (compiled with -ffp-contract=off),
// the fallback on every CPU and the code the AVX2 kernel runs its tails with.
#include <cmath>
#include <cstdint>

#include "engine/core/dtype.h"
#include "offload/cpu_adam_kernels.h"

namespace ferry::offload::kernels {
namespace {

template <ParameterOutput kOutput>
void adamw_tile(const AdamWTile& tile, const AdamWConstants& c) {
  auto* out32 = static_cast<float*>(tile.parameter_out);
  auto* out16 = static_cast<std::uint16_t*>(tile.parameter_out);
  for (std::int64_t i = 0; i < tile.count; ++i) {
    const float g = tile.gradient[i] * c.gradient_scale;
    float p = tile.master[i] * c.decay;
    const float m = tile.first_moment[i] * c.beta1 + c.one_minus_beta1 * g;
    const float v = tile.second_moment[i] * c.beta2 + (c.one_minus_beta2 * g) * g;
    const float denominator = std::sqrt(v) / c.bias_correction2_sqrt + c.epsilon;
    p = p + c.negative_step_size * (m / denominator);
    tile.first_moment[i] = m;
    tile.second_moment[i] = v;
    tile.master[i] = p;
    if constexpr (kOutput == ParameterOutput::f32) out32[i] = p;
    if constexpr (kOutput == ParameterOutput::bf16) out16[i] = float_to_bf16(p);
    if constexpr (kOutput == ParameterOutput::f16) out16[i] = float_to_f16(p);
  }
}

}  // namespace

void adamw_tile_scalar(const AdamWTile& tile, const AdamWConstants& constants) {
  switch (tile.parameter_out == nullptr ? ParameterOutput::none : tile.output) {
    case ParameterOutput::none: adamw_tile<ParameterOutput::none>(tile, constants); break;
    case ParameterOutput::f32: adamw_tile<ParameterOutput::f32>(tile, constants); break;
    case ParameterOutput::bf16: adamw_tile<ParameterOutput::bf16>(tile, constants); break;
    case ParameterOutput::f16: adamw_tile<ParameterOutput::f16>(tile, constants); break;
  }
}

double sum_of_squares_tile_scalar(const float* gradient, std::int64_t count, float unscale) {
  double lanes[kSumLanes] = {};
  for (std::int64_t i = 0; i < count; ++i) {
    const auto x = static_cast<double>(gradient[i] * unscale);
    lanes[i % kSumLanes] += x * x;
  }
  double total = 0;
  for (double lane : lanes) total += lane;
  return total;
}

}  // namespace ferry::offload::kernels
