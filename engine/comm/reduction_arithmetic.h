// The arithmetic of reductions that MPI does not do for ferry: pairwise combines of bf16 and f16 values
// (in f32, rounded to nearest even once per combine) and the division that turns a sum into an average.
// Private to engine/comm; used by the MPI backend's user-defined operations and its requests.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/comm/communicator.h"

namespace ferry {

// inout[i] = round(f32(in[i]) + f32(inout[i])) (sum) or the larger of the two (max); `type` is bf16 or
// f16 and `operation` sum or max (std::invalid_argument otherwise). Buffers need no alignment.
void combine_half_precision(const void* in, void* inout, std::size_t count, CommDataType type,
                            ReduceOperation operation);

// data[i] /= ranks: f32 and f64 in their type, bf16 and f16 in f32 rounded once, i64 by integer
// division (toward zero).
void divide_by_ranks(void* data, std::size_t count, CommDataType type, int ranks);

}  // namespace ferry
