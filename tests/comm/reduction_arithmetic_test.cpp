// The arithmetic MPI does not do for ferry: bf16 and f16 pairs combined in f32 and rounded once (ties
// to even), and the division that makes an average of a sum, in every type.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "engine/comm/reduction_arithmetic.h"
#include "engine/core/dtype.h"
#include "tests/comm/comm_values.h"

namespace ferry {
namespace {

using testing::doubles_of;
using testing::values_of;

TEST(ReductionArithmetic, HalfPrecisionPairsRoundOnceToNearestEven) {
  const std::vector<std::byte> in = values_of({1, 3, -2, 0.5}, CommDataType::bf16);
  std::vector<std::byte> inout = values_of({256, 256, 3.5, -0.25}, CommDataType::bf16);
  combine_half_precision(in.data(), inout.data(), 4, CommDataType::bf16, ReduceOperation::sum);
  EXPECT_EQ(doubles_of(inout, CommDataType::bf16), (std::vector<double>{256, 260, 1.5, 0.25}));
  const std::vector<std::byte> f16_in = values_of({1, 3, 7}, CommDataType::f16);
  std::vector<std::byte> f16_inout = values_of({2048, 2048, -9}, CommDataType::f16);
  combine_half_precision(f16_in.data(), f16_inout.data(), 3, CommDataType::f16, ReduceOperation::sum);
  EXPECT_EQ(doubles_of(f16_inout, CommDataType::f16), (std::vector<double>{2048, 2052, -2}));
  combine_half_precision(f16_in.data(), f16_inout.data(), 3, CommDataType::f16, ReduceOperation::max);
  EXPECT_EQ(doubles_of(f16_inout, CommDataType::f16), (std::vector<double>{2048, 2052, 7}));
  EXPECT_THROW(combine_half_precision(in.data(), inout.data(), 1, CommDataType::f32, ReduceOperation::sum),
               std::invalid_argument);
  EXPECT_THROW(combine_half_precision(in.data(), inout.data(), 1, CommDataType::bf16, ReduceOperation::average),
               std::invalid_argument);
}

TEST(ReductionArithmetic, AveragesDivideBySizeInEachType) {
  for (const CommDataType type : testing::kEveryType) {
    std::vector<std::byte> data = values_of({10, -6, 1}, type);
    divide_by_ranks(data.data(), 3, type, 4);
    const double last = type == CommDataType::i64 ? 0 : 0.25;  // i64 divides toward zero
    const double first = type == CommDataType::i64 ? 2 : 2.5;
    const double second = type == CommDataType::i64 ? -1 : -1.5;
    EXPECT_EQ(doubles_of(data, type), (std::vector<double>{first, second, last})) << comm_data_type_name(type);
  }
  // bf16 divides in f32 and rounds the quotient once: 255 / 3 = 85 exactly, 7 / 3 -> 2.328125.
  std::vector<std::byte> bf16 = values_of({255, 7}, CommDataType::bf16);
  divide_by_ranks(bf16.data(), 2, CommDataType::bf16, 3);
  EXPECT_EQ(doubles_of(bf16, CommDataType::bf16), (std::vector<double>{85, 2.328125}));
}

}  // namespace
}  // namespace ferry
