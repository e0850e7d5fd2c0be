// The AVX-512 level: 16 lanes of f32, tails done with masked loads and stores, the parameter output
// rounded to bf16 with integer ops and to f16 with vcvtps2ph. Compiled with -mavx512f -mavx512bw
// -mavx512vl -mf16c and -ffp-contract=off (AVX-512F has FMA; no multiply-add may be fused), so each
// lane does the scalar level's operations in the scalar level's order.
#include <immintrin.h>

#include <cstdint>

#include "offload/cpu_adam_kernels.h"

namespace ferry::offload::kernels {
namespace {

constexpr std::int64_t kLanes = 16;

// float_to_bf16 on 16 lanes: round to nearest even, NaN -> its top half with the quiet bit set.
__m256i round_to_bf16(__m512 value) {
  const __m512i bits = _mm512_castps_si512(value);
  const __m512i high = _mm512_srli_epi32(bits, 16);
  const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(0x7f800000));
  const __m512i rounding = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(high, _mm512_set1_epi32(1)));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, rounding), 16);
  const __m512i quiet_nan = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, quiet_nan));  // lanes < 2^16
}

template <ParameterOutput kOutput>
void adamw_tile(const AdamWTile& tile, const AdamWConstants& c) {
  const __m512 beta1 = _mm512_set1_ps(c.beta1);
  const __m512 beta2 = _mm512_set1_ps(c.beta2);
  const __m512 one_minus_beta1 = _mm512_set1_ps(c.one_minus_beta1);
  const __m512 one_minus_beta2 = _mm512_set1_ps(c.one_minus_beta2);
  const __m512 epsilon = _mm512_set1_ps(c.epsilon);
  const __m512 decay = _mm512_set1_ps(c.decay);
  const __m512 negative_step_size = _mm512_set1_ps(c.negative_step_size);
  const __m512 bias_correction2_sqrt = _mm512_set1_ps(c.bias_correction2_sqrt);
  const __m512 gradient_scale = _mm512_set1_ps(c.gradient_scale);
  auto* out32 = static_cast<float*>(tile.parameter_out);
  auto* out16 = static_cast<std::uint16_t*>(tile.parameter_out);

  // One vector: full vectors (mask all-ones) load and store whole; the last partial vector masks its
  // loads (zeros, harmless in the arithmetic) and its stores (nothing past the tile is touched). Masked
  // stores are kept to that tail: on some cores (AMD Zen 4) they are far slower than plain ones.
  const auto update = [&](std::int64_t i, __mmask16 mask, auto load, auto store, auto store16) {
    const __m512 g = _mm512_mul_ps(load(mask, tile.gradient + i), gradient_scale);
    __m512 p = _mm512_mul_ps(load(mask, tile.master + i), decay);
    const __m512 m = _mm512_add_ps(_mm512_mul_ps(load(mask, tile.first_moment + i), beta1), _mm512_mul_ps(one_minus_beta1, g));
    const __m512 v = _mm512_add_ps(_mm512_mul_ps(load(mask, tile.second_moment + i), beta2),
                                   _mm512_mul_ps(_mm512_mul_ps(one_minus_beta2, g), g));
    const __m512 denominator = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), bias_correction2_sqrt), epsilon);
    p = _mm512_add_ps(p, _mm512_mul_ps(negative_step_size, _mm512_div_ps(m, denominator)));
    store(tile.first_moment + i, mask, m);
    store(tile.second_moment + i, mask, v);
    store(tile.master + i, mask, p);
    if constexpr (kOutput == ParameterOutput::f32) store(out32 + i, mask, p);
    if constexpr (kOutput == ParameterOutput::bf16) store16(out16 + i, mask, round_to_bf16(p));
    if constexpr (kOutput == ParameterOutput::f16) store16(out16 + i, mask, _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  };
  const auto whole_load = [](__mmask16, const float* at) { return _mm512_loadu_ps(at); };
  const auto whole_store = [](float* at, __mmask16, __m512 value) { _mm512_storeu_ps(at, value); };
  const auto masked_load = [](__mmask16 mask, const float* at) { return _mm512_maskz_loadu_ps(mask, at); };
  const auto masked_store = [](float* at, __mmask16 mask, __m512 value) { _mm512_mask_storeu_ps(at, mask, value); };
  const auto whole_store16 = [](std::uint16_t* at, __mmask16, __m256i value) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(at), value); };
  const auto masked_store16 = [](std::uint16_t* at, __mmask16 mask, __m256i value) { _mm256_mask_storeu_epi16(at, mask, value); };
  const std::int64_t whole = tile.count / kLanes * kLanes;
  for (std::int64_t i = 0; i < whole; i += kLanes) update(i, static_cast<__mmask16>(0xffffu), whole_load, whole_store, whole_store16);
  if (whole < tile.count) {
    update(whole, static_cast<__mmask16>((1u << (tile.count - whole)) - 1u), masked_load, masked_store, masked_store16);
  }
}

}  // namespace

void adamw_tile_avx512(const AdamWTile& tile, const AdamWConstants& constants) {
  switch (tile.parameter_out == nullptr ? ParameterOutput::none : tile.output) {
    case ParameterOutput::none: adamw_tile<ParameterOutput::none>(tile, constants); break;
    case ParameterOutput::f32: adamw_tile<ParameterOutput::f32>(tile, constants); break;
    case ParameterOutput::bf16: adamw_tile<ParameterOutput::bf16>(tile, constants); break;
    case ParameterOutput::f16: adamw_tile<ParameterOutput::f16>(tile, constants); break;
  }
}

double sum_of_squares_tile_avx512(const float* gradient, std::int64_t count, float unscale) {
  static_assert(kSumLanes == 16, "two vectors of eight f64 lanes");
  const __m512 scale = _mm512_set1_ps(unscale);
  __m512d low_lanes = _mm512_setzero_pd();   // lanes 0-7
  __m512d high_lanes = _mm512_setzero_pd();  // lanes 8-15
  // A masked-off element becomes +0 (even when unscale is inf or NaN) and adds +0 * +0 = +0, which
  // leaves its lane unchanged.
  for (std::int64_t i = 0; i < count; i += kSumLanes) {
    const std::int64_t remaining = count - i;
    const auto mask = static_cast<__mmask16>(remaining >= kSumLanes ? 0xffffu : (1u << remaining) - 1u);
    const __m512 x = _mm512_maskz_mul_ps(mask, _mm512_maskz_loadu_ps(mask, gradient + i), scale);
    const __m512d low = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    const __m512d high = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    low_lanes = _mm512_add_pd(low_lanes, _mm512_mul_pd(low, low));
    high_lanes = _mm512_add_pd(high_lanes, _mm512_mul_pd(high, high));
  }
  alignas(64) double sums[kSumLanes];
  _mm512_store_pd(sums, low_lanes);
  _mm512_store_pd(sums + 8, high_lanes);
  double total = 0;
  for (double lane : sums) total += lane;
  return total;
}

}  // namespace ferry::offload::kernels
