#include "engine/grid/parameter_gather.h"

#include <stdexcept>
#include <string>

#include "engine/core/op_recorder.h"

namespace ferry {

CommDataType comm_data_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CommDataType::f32;
    case DType::bf16: return CommDataType::bf16;
    case DType::f16: return CommDataType::f16;
    default: throw std::invalid_argument("parameters of dtype " + std::string(dtype_name(dtype)) + " cannot be gathered");
  }
}

Tensor flat_view(const Tensor& parameter, std::int64_t offset, std::int64_t count) {
  return parameter.reshape({parameter.numel()}).narrow(0, offset, count);
}

void gather_parameters(const std::vector<NamedTensor>& parameters, const FlatLayout& layout, const FlatShards& owned, Communicator& dp,
                       std::int64_t bucket_elements) {
  if (parameters.empty()) return;
  Device& device = parameters.front().tensor->device();
  const DType dtype = parameters.front().tensor->dtype();
  const OpScope op(device, "optimizer", "allgather_parameters");
  for (const FlatRange& chunk : layout.chunks(bucket_elements)) {
    const Tensor buffer = Tensor::empty(device, {chunk.size()}, dtype, MemoryCategory::communication, "allgather.parameters");
    // This rank's block of the chunk comes from its parameters; then every block from its owner.
    const FlatRange mine = owned.intersect(chunk);
    for (std::size_t position = 0; position < parameters.size(); ++position) {
      const FlatRange parameter = layout.parameter(position);
      const FlatRange piece = parameter.intersect(mine);
      if (piece.empty()) continue;
      buffer.narrow(0, piece.begin - chunk.begin, piece.size()).copy_from(flat_view(*parameters[position].tensor, piece.begin - parameter.begin, piece.size()));
    }
    const std::int64_t mine_at = mine.empty() ? 0 : mine.begin - chunk.begin;
    const void* input = static_cast<const std::byte*>(buffer.data()) + static_cast<std::size_t>(mine_at) * dtype_size(dtype);
    dp.all_gather_async(input, buffer.data(), layout.owned_counts(chunk), comm_data_type(dtype))->wait();
    // Every piece back into its parameter (this rank's own block returns as it went: a parameter may
    // straddle partitions, so pieces are not split by owner).
    for (std::size_t position = 0; position < parameters.size(); ++position) {
      const FlatRange parameter = layout.parameter(position);
      const FlatRange piece = parameter.intersect(chunk);
      if (piece.empty()) continue;
      flat_view(*parameters[position].tensor, piece.begin - parameter.begin, piece.size()).copy_from(buffer.narrow(0, piece.begin - chunk.begin, piece.size()));
    }
  }
}

}  // namespace ferry
