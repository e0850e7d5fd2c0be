// The AVX2 level: 8 lanes of f32, the parameter output rounded to bf16 with integer ops and to f16
// with F16C. Compiled with -mavx2 -mf16c and without -mfma (-ffp-contract=off) so each lane does the
// scalar level's operations in the scalar level's order; tails go to the scalar level.
#include <immintrin.h>

#include <cstdint>

#include "offload/cpu_adam_kernels.h"

namespace ferry::offload::kernels {
namespace {

constexpr std::int64_t kLanes = 8;

// float_to_bf16 on 8 lanes: round to nearest even, NaN -> its top half with the quiet bit set.
__m128i round_to_bf16(__m256 value) {
  const __m256i bits = _mm256_castps_si256(value);
  const __m256i high = _mm256_srli_epi32(bits, 16);
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i rounding = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(high, _mm256_set1_epi32(1)));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, rounding), 16);
  const __m256i quiet_nan = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  const __m256i result = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
  // Every lane is below 2^16, so the unsigned saturating pack keeps it; packing works per 128-bit half,
  // and the permute gathers halves 0 and 2 (lanes 0-3 and 4-7) into the low 128 bits.
  const __m256i packed = _mm256_packus_epi32(result, result);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

template <ParameterOutput kOutput>
void adamw_tile(const AdamWTile& tile, const AdamWConstants& c) {
  const __m256 beta1 = _mm256_set1_ps(c.beta1);
  const __m256 beta2 = _mm256_set1_ps(c.beta2);
  const __m256 one_minus_beta1 = _mm256_set1_ps(c.one_minus_beta1);
  const __m256 one_minus_beta2 = _mm256_set1_ps(c.one_minus_beta2);
  const __m256 epsilon = _mm256_set1_ps(c.epsilon);
  const __m256 decay = _mm256_set1_ps(c.decay);
  const __m256 negative_step_size = _mm256_set1_ps(c.negative_step_size);
  const __m256 bias_correction2_sqrt = _mm256_set1_ps(c.bias_correction2_sqrt);
  const __m256 gradient_scale = _mm256_set1_ps(c.gradient_scale);
  auto* out32 = static_cast<float*>(tile.parameter_out);
  auto* out16 = static_cast<std::uint16_t*>(tile.parameter_out);

  const std::int64_t vector_end = tile.count - tile.count % kLanes;
  for (std::int64_t i = 0; i < vector_end; i += kLanes) {
    const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(tile.gradient + i), gradient_scale);
    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(tile.master + i), decay);
    const __m256 m = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(tile.first_moment + i), beta1),
                                   _mm256_mul_ps(one_minus_beta1, g));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(tile.second_moment + i), beta2),
                                   _mm256_mul_ps(_mm256_mul_ps(one_minus_beta2, g), g));
    const __m256 denominator = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bias_correction2_sqrt), epsilon);
    p = _mm256_add_ps(p, _mm256_mul_ps(negative_step_size, _mm256_div_ps(m, denominator)));
    _mm256_storeu_ps(tile.first_moment + i, m);
    _mm256_storeu_ps(tile.second_moment + i, v);
    _mm256_storeu_ps(tile.master + i, p);
    if constexpr (kOutput == ParameterOutput::f32) _mm256_storeu_ps(out32 + i, p);
    if constexpr (kOutput == ParameterOutput::bf16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out16 + i), round_to_bf16(p));
    }
    if constexpr (kOutput == ParameterOutput::f16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out16 + i), _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT));
    }
  }
  if (vector_end == tile.count) return;
  AdamWTile tail = tile;
  tail.master += vector_end;
  tail.first_moment += vector_end;
  tail.second_moment += vector_end;
  tail.gradient += vector_end;
  if constexpr (kOutput == ParameterOutput::f32) tail.parameter_out = out32 + vector_end;
  if constexpr (kOutput == ParameterOutput::bf16 || kOutput == ParameterOutput::f16) {
    tail.parameter_out = out16 + vector_end;
  }
  tail.count = tile.count - vector_end;
  adamw_tile_scalar(tail, c);
}

}  // namespace

void adamw_tile_avx2(const AdamWTile& tile, const AdamWConstants& constants) {
  switch (tile.parameter_out == nullptr ? ParameterOutput::none : tile.output) {
    case ParameterOutput::none: adamw_tile<ParameterOutput::none>(tile, constants); break;
    case ParameterOutput::f32: adamw_tile<ParameterOutput::f32>(tile, constants); break;
    case ParameterOutput::bf16: adamw_tile<ParameterOutput::bf16>(tile, constants); break;
    case ParameterOutput::f16: adamw_tile<ParameterOutput::f16>(tile, constants); break;
  }
}

double sum_of_squares_tile_avx2(const float* gradient, std::int64_t count, float unscale) {
  static_assert(kSumLanes == 16, "four vectors of four f64 lanes");
  const __m256 scale = _mm256_set1_ps(unscale);
  __m256d lanes[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  const std::int64_t vector_end = count - count % kSumLanes;
  for (std::int64_t i = 0; i < vector_end; i += kSumLanes) {
    for (int half = 0; half < 2; ++half) {
      const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(gradient + i + 8 * half), scale);
      const __m256d low = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
      const __m256d high = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
      lanes[2 * half] = _mm256_add_pd(lanes[2 * half], _mm256_mul_pd(low, low));
      lanes[2 * half + 1] = _mm256_add_pd(lanes[2 * half + 1], _mm256_mul_pd(high, high));
    }
  }
  alignas(32) double sums[kSumLanes];
  for (int j = 0; j < 4; ++j) _mm256_store_pd(sums + 4 * j, lanes[j]);
  for (std::int64_t i = vector_end; i < count; ++i) {
    const auto x = static_cast<double>(gradient[i] * unscale);
    sums[i - vector_end] += x * x;
  }
  double total = 0;
  for (double lane : sums) total += lane;
  return total;
}

}  // namespace ferry::offload::kernels
