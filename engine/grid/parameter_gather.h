// After each rank stepped its share of the flat parameter space, every rank gathers the others' updated
// parameters over the dp group in their dtype, bucket by bucket (DeepSpeed's allgather_bucket_size), so
// the buffer on the device is one bucket (category communication), never the whole model.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/tensor.h"
#include "engine/grid/flat_layout.h"
#include "models/gpt_parameters.h"

namespace ferry {

// `parameters` in the layout's order; `owned` this rank's share (whose values are current here).
void gather_parameters(const std::vector<NamedTensor>& parameters, const FlatLayout& layout, const FlatShards& owned, Communicator& dp,
                       std::int64_t bucket_elements);

// The communicator's element type for parameters of `dtype` (f32, bf16, f16; others are refused).
CommDataType comm_data_type(DType dtype);

// Elements [offset, offset + count) of a parameter as a flat view of its storage.
Tensor flat_view(const Tensor& parameter, std::int64_t offset, std::int64_t count);

}  // namespace ferry
