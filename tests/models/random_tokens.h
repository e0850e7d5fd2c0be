// Test helper: a [batch, sequence] i32 tensor of token ids drawn uniformly below `vocab` from `seed`.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "engine/core/tensor.h"

namespace ferry::testing {

inline Tensor random_tokens(Device& device, std::uint64_t seed, std::int64_t batch, std::int64_t sequence, std::int64_t vocab) {
  std::mt19937_64 generator(seed);
  std::vector<std::int32_t> values(static_cast<std::size_t>(batch * sequence));
  for (auto& value : values) value = static_cast<std::int32_t>(generator() % static_cast<std::uint64_t>(vocab));
  Tensor tensor = Tensor::empty(device, {batch, sequence}, DType::i32, MemoryCategory::activations, "tokens");
  tensor.copy_from_host(values.data());
  return tensor;
}

}  // namespace ferry::testing
