#include "engine/core/dtype.h"

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>

namespace ferry {

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::u16}) {
    if (dtype_name(dtype) == name) return dtype;
  }
  if (name == "fp32" || name == "float32") return DType::f32;
  if (name == "fp16" || name == "float16") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  return std::nullopt;
}

std::uint16_t float_to_bf16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // NaN stays NaN (quiet)
  }
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

float bf16_to_float(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

std::uint16_t float_to_f16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // infinity or NaN
    const std::uint32_t payload = magnitude > 0x7f800000u ? 0x200u | ((magnitude >> 13) & 0x3ffu) : 0u;
    return static_cast<std::uint16_t>(sign | 0x7c00u | payload);
  }
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (magnitude < 0x38800000u) {  // below 2^-14: an f16 subnormal or zero
    const std::uint32_t exponent = magnitude >> 23;
    const std::uint32_t shift = 126u - exponent;  // value / 2^-24 = mantissa >> shift
    if (exponent == 0 || shift > 24) return sign;
    const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    std::uint32_t result = mantissa >> shift;
    const std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (remainder > half || (remainder == half && (result & 1u))) ++result;
    return static_cast<std::uint16_t>(sign | result);
  }
  const std::uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

float f16_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // mantissa * 2^-24
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) {  // infinity, or NaN made quiet as the hardware conversion does
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa != 0 ? 0x400000u : 0u) | (mantissa << 13));
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

void convert_f32_to_bf16(const float* source, std::uint16_t* destination, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) destination[i] = float_to_bf16(source[i]);
}
void convert_bf16_to_f32(const std::uint16_t* source, float* destination, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) destination[i] = bf16_to_float(source[i]);
}
void convert_f32_to_f16(const float* source, std::uint16_t* destination, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) destination[i] = float_to_f16(source[i]);
}
void convert_f16_to_f32(const std::uint16_t* source, float* destination, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) destination[i] = f16_to_float(source[i]);
}

void convert_from_f32(const float* source, void* destination, DType dtype, std::size_t count) {
  switch (dtype) {
    case DType::f32: std::copy_n(source, count, static_cast<float*>(destination)); return;
    case DType::bf16: convert_f32_to_bf16(source, static_cast<std::uint16_t*>(destination), count); return;
    case DType::f16: convert_f32_to_f16(source, static_cast<std::uint16_t*>(destination), count); return;
    default: throw std::invalid_argument("cannot convert f32 to " + std::string(dtype_name(dtype)) + ": not a floating dtype");
  }
}

void convert_to_f32(const void* source, float* destination, DType dtype, std::size_t count) {
  switch (dtype) {
    case DType::f32: std::copy_n(static_cast<const float*>(source), count, destination); return;
    case DType::bf16: convert_bf16_to_f32(static_cast<const std::uint16_t*>(source), destination, count); return;
    case DType::f16: convert_f16_to_f32(static_cast<const std::uint16_t*>(source), destination, count); return;
    default: throw std::invalid_argument("cannot convert " + std::string(dtype_name(dtype)) + " to f32: not a floating dtype");
  }
}

}  // namespace ferry
