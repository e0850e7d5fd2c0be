#include "engine/comm/reduction_arithmetic.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "engine/core/dtype.h"

namespace ferry {
namespace {

float to_float(std::uint16_t bits, CommDataType type) {
  return type == CommDataType::bf16 ? bf16_to_float(bits) : f16_to_float(bits);
}
std::uint16_t from_float(float value, CommDataType type) {
  return type == CommDataType::bf16 ? float_to_bf16(value) : float_to_f16(value);
}

template <typename Value, typename Update>
void update_each(void* data, std::size_t count, Update&& update) {
  auto* bytes = static_cast<std::byte*>(data);
  for (std::size_t i = 0; i < count; ++i) {
    Value value{};
    std::memcpy(&value, bytes + i * sizeof(Value), sizeof(Value));
    value = update(value);
    std::memcpy(bytes + i * sizeof(Value), &value, sizeof(Value));
  }
}

}  // namespace

void combine_half_precision(const void* in, void* inout, std::size_t count, CommDataType type,
                            ReduceOperation operation) {
  if (type != CommDataType::bf16 && type != CommDataType::f16) {
    throw std::invalid_argument(std::string("combine_half_precision: ") + comm_data_type_name(type) +
                                " is not a 16-bit float");
  }
  if (operation != ReduceOperation::sum && operation != ReduceOperation::max) {
    throw std::invalid_argument(std::string("combine_half_precision: ") + reduce_operation_name(operation) +
                                " is not a pairwise combine");
  }
  const auto* incoming = static_cast<const std::byte*>(in);
  std::size_t index = 0;
  update_each<std::uint16_t>(inout, count, [&](std::uint16_t accumulated) {
    std::uint16_t other = 0;
    std::memcpy(&other, incoming + index++ * sizeof other, sizeof other);
    const float a = to_float(other, type);
    const float b = to_float(accumulated, type);
    return from_float(operation == ReduceOperation::sum ? a + b : std::max(a, b), type);
  });
}

void divide_by_ranks(void* data, std::size_t count, CommDataType type, int ranks) {
  switch (type) {
    case CommDataType::f32:
      update_each<float>(data, count, [&](float value) { return value / static_cast<float>(ranks); });
      return;
    case CommDataType::f64:
      update_each<double>(data, count, [&](double value) { return value / static_cast<double>(ranks); });
      return;
    case CommDataType::i64:
      update_each<std::int64_t>(data, count, [&](std::int64_t value) { return value / ranks; });
      return;
    case CommDataType::bf16:
    case CommDataType::f16:
      update_each<std::uint16_t>(data, count, [&](std::uint16_t bits) {
        return from_float(to_float(bits, type) / static_cast<float>(ranks), type);
      });
      return;
  }
  throw std::invalid_argument("unknown CommDataType " + std::to_string(static_cast<int>(type)));
}

}  // namespace ferry
