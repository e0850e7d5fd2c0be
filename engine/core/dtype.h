// Element types of tensors and the conversions between f32 and the 16-bit floats (bf16, f16), both
// rounding to nearest, ties to even, as the hardware does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ferry {

enum class DType : std::uint8_t { f32, bf16, f16, i32, u16 };

constexpr std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
    case DType::i32: return 4;
    case DType::bf16:
    case DType::f16:
    case DType::u16: return 2;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::u16: return "u16";
  }
  return "unknown";
}

std::optional<DType> parse_dtype(std::string_view name);

// bf16 and f16 values are carried as their bit patterns.
std::uint16_t float_to_bf16(float value);
float bf16_to_float(std::uint16_t bits);
std::uint16_t float_to_f16(float value);
float f16_to_float(std::uint16_t bits);

// Element-wise conversions over arrays (count elements).
void convert_f32_to_bf16(const float* source, std::uint16_t* destination, std::size_t count);
void convert_bf16_to_f32(const std::uint16_t* source, float* destination, std::size_t count);
void convert_f32_to_f16(const float* source, std::uint16_t* destination, std::size_t count);
void convert_f16_to_f32(const std::uint16_t* source, float* destination, std::size_t count);
// f32 values into elements of a floating dtype (f32: a copy; bf16, f16: rounded) and back; throws
// std::invalid_argument for the other dtypes.
void convert_from_f32(const float* source, void* destination, DType dtype, std::size_t count);
void convert_to_f32(const void* source, float* destination, DType dtype, std::size_t count);

}  // namespace ferry
