// The per-SIMD-level kernels behind CpuAdam: the AdamW update of one tile and the sum of squares of
// one tile of scaled gradients. Each level lives in its own file compiled for its instruction set and
// never with fused multiply-add, so every level computes the same bits and CpuAdam only has to
// dispatch to a level the CPU supports.
#pragma once

#include <cstdint>

namespace ferry::offload::kernels {

// Values shared by every element of a step, computed once in f32/f64 exactly as
// models/kernels/cpu/adamw.cpp computes them.
struct AdamWConstants {
  float beta1 = 0;
  float beta2 = 0;
  float one_minus_beta1 = 0;        // 1 - beta1 in f32
  float one_minus_beta2 = 0;        // 1 - beta2 in f32
  float epsilon = 0;
  float decay = 1;                  // 1 - lr * weight_decay in f32 (1 when the span does not decay)
  float negative_step_size = 0;     // -(float)(lr / (1 - beta1^step)), the quotient taken in f64
  float bias_correction2_sqrt = 1;  // (float)sqrt(1 - beta2^step), taken in f64
  float gradient_scale = 1;
};

// What a tile writes besides the f32 state. (Each kernel file switches on this itself: an inline
// helper shared by files compiled for different instruction sets could be linked from the wrong one.)
enum class ParameterOutput : unsigned char { none, f32, bf16, f16 };

// One tile: pointers already offset to its first element. parameter_out receives the updated
// parameters as `output` says; a null parameter_out or ParameterOutput::none writes nothing.
struct AdamWTile {
  float* master = nullptr;
  float* first_moment = nullptr;
  float* second_moment = nullptr;
  const float* gradient = nullptr;
  void* parameter_out = nullptr;
  ParameterOutput output = ParameterOutput::none;
  std::int64_t count = 0;
};

// Per element, in this f32 order (no contraction):
//   g = gradient * gradient_scale;  p = master * decay;
//   m = m * beta1 + one_minus_beta1 * g;  v = v * beta2 + (one_minus_beta2 * g) * g;
//   denominator = sqrt(v) / bias_correction2_sqrt + epsilon;  p = p + negative_step_size * (m / denominator)
// then the parameter output: f32 copy, float_to_bf16 or float_to_f16 of p.
void adamw_tile_scalar(const AdamWTile& tile, const AdamWConstants& constants);
void adamw_tile_avx2(const AdamWTile& tile, const AdamWConstants& constants);
void adamw_tile_avx512(const AdamWTile& tile, const AdamWConstants& constants);

// The sum of squares of x = gradient[i] * unscale (the product in f32, its square and the sums in
// f64), in one order on every level: element i of the tile goes to lane i % kSumLanes, each lane
// sums its elements in index order starting from +0, then the lanes are added in lane order from
// +0. An inf or NaN among the x makes the sum inf or NaN; a sum of finite f32 squares cannot
// overflow f64, so std::isfinite(result) is exactly "every x is finite".
inline constexpr int kSumLanes = 16;
double sum_of_squares_tile_scalar(const float* gradient, std::int64_t count, float unscale);
double sum_of_squares_tile_avx2(const float* gradient, std::int64_t count, float unscale);
double sum_of_squares_tile_avx512(const float* gradient, std::int64_t count, float unscale);

}  // namespace ferry::offload::kernels
