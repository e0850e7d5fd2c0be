// Buffers of any CommDataType for the collectives' tests, written and read as doubles: values_of
// encodes (bf16 and f16 rounded to nearest even, i64 truncated), doubles_of decodes. The tests pick
// values every type holds exactly, so expected results are exact numbers.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/dtype.h"

namespace ferry::testing {

inline std::vector<std::byte> values_of(const std::vector<double>& values, CommDataType type) {
  const std::size_t element_bytes = comm_data_type_size(type);
  std::vector<std::byte> bytes(values.size() * element_bytes);
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::byte* at = bytes.data() + i * element_bytes;
    const double value = values[i];
    switch (type) {
      case CommDataType::f32: { const auto v = static_cast<float>(value); std::memcpy(at, &v, 4); break; }
      case CommDataType::f64: std::memcpy(at, &value, 8); break;
      case CommDataType::i64: { const auto v = static_cast<std::int64_t>(value); std::memcpy(at, &v, 8); break; }
      case CommDataType::bf16: { const auto v = float_to_bf16(static_cast<float>(value)); std::memcpy(at, &v, 2); break; }
      case CommDataType::f16: { const auto v = float_to_f16(static_cast<float>(value)); std::memcpy(at, &v, 2); break; }
    }
  }
  return bytes;
}

inline std::vector<double> doubles_of(const std::vector<std::byte>& bytes, CommDataType type) {
  const std::size_t element_bytes = comm_data_type_size(type);
  std::vector<double> values(bytes.size() / element_bytes);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::byte* at = bytes.data() + i * element_bytes;
    switch (type) {
      case CommDataType::f32: { float v = 0; std::memcpy(&v, at, 4); values[i] = v; break; }
      case CommDataType::f64: std::memcpy(&values[i], at, 8); break;
      case CommDataType::i64: { std::int64_t v = 0; std::memcpy(&v, at, 8); values[i] = static_cast<double>(v); break; }
      case CommDataType::bf16: { std::uint16_t v = 0; std::memcpy(&v, at, 2); values[i] = bf16_to_float(v); break; }
      case CommDataType::f16: { std::uint16_t v = 0; std::memcpy(&v, at, 2); values[i] = f16_to_float(v); break; }
    }
  }
  return values;
}

inline constexpr CommDataType kEveryType[] = {CommDataType::f32, CommDataType::f64, CommDataType::bf16,
                                              CommDataType::f16, CommDataType::i64};

}  // namespace ferry::testing
