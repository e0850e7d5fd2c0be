// The 16-bit floating types of <cuda_fp16.h> and <cuda_bf16.h> for the emulated build: bit patterns with
// the conversions the kernels call, rounding to nearest even like the hardware's cvt.rn. A NaN becomes
// the canonical 0x7fff, as cvt.rn.f16.f32 gives (ferry's tests let NaN payloads differ).
#pragma once

#include <bit>
#include <cstdint>

struct __half {
  unsigned short __x;
};
struct __nv_bfloat16 {
  unsigned short __x;
};

static_assert(sizeof(_Float16) == 2, "the emulated f16 conversions use the compiler's _Float16 (IEEE binary16)");

inline __half __float2half_rn(float value) {
  if (value != value) return __half{0x7fff};
  return __half{std::bit_cast<unsigned short>(static_cast<_Float16>(value))};
}
inline __half __float2half(float value) { return __float2half_rn(value); }
inline float __half2float(__half value) { return static_cast<float>(std::bit_cast<_Float16>(value.__x)); }
inline unsigned short __half_as_ushort(__half value) { return value.__x; }
inline __half __ushort_as_half(unsigned short bits) { return __half{bits}; }

inline float __bfloat162float(__nv_bfloat16 value) { return std::bit_cast<float>(static_cast<std::uint32_t>(value.__x) << 16); }
inline __nv_bfloat16 __float2bfloat16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{0x7fff};
  return __nv_bfloat16{static_cast<unsigned short>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16)};
}
inline __nv_bfloat16 __float2bfloat16_rn(float value) { return __float2bfloat16(value); }
