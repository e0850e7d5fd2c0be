// Column blocks for reductions over rows: [0, columns) is cut into blocks of kColumnBlock columns,
// the blocks run on OpenMP threads, and each block sums its rows in order, so every sum is the same
// on any thread count and no two threads write the same column.
#pragma once

#include <cstdint>

namespace ferry::cpu {

inline constexpr std::int64_t kColumnBlock = 64;

// fn(first, last) for each block [first, last); include only from .cpp files built with OpenMP.
template <typename Function>
void for_each_column_block(std::int64_t columns, Function&& fn) {
  const std::int64_t blocks = (columns + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (std::int64_t block = 0; block < blocks; ++block) {
    const std::int64_t first = block * kColumnBlock;
    fn(first, first + kColumnBlock < columns ? first + kColumnBlock : columns);
  }
}

}  // namespace ferry::cpu
