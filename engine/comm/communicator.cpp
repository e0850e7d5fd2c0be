// What every backend shares: element sizes and names of the communicator's data types and operations,
// and the equal-count blocking collectives, which run as the variable-count ones.
#include "engine/comm/communicator.h"

#include <vector>

namespace ferry {

std::size_t comm_data_type_size(CommDataType type) {
  switch (type) {
    case CommDataType::f32: return 4;
    case CommDataType::f64: return 8;
    case CommDataType::i64: return 8;
    case CommDataType::bf16: return 2;
    case CommDataType::f16: return 2;
  }
  throw std::invalid_argument("unknown CommDataType " + std::to_string(static_cast<int>(type)));
}

const char* comm_data_type_name(CommDataType type) {
  switch (type) {
    case CommDataType::f32: return "f32";
    case CommDataType::f64: return "f64";
    case CommDataType::i64: return "i64";
    case CommDataType::bf16: return "bf16";
    case CommDataType::f16: return "f16";
  }
  throw std::invalid_argument("unknown CommDataType " + std::to_string(static_cast<int>(type)));
}

const char* reduce_operation_name(ReduceOperation operation) {
  switch (operation) {
    case ReduceOperation::sum: return "sum";
    case ReduceOperation::max: return "max";
    case ReduceOperation::average: return "average";
  }
  throw std::invalid_argument("unknown ReduceOperation " + std::to_string(static_cast<int>(operation)));
}

void Communicator::reduce_scatter(const void* input, void* output, std::size_t count, CommDataType type,
                                  ReduceOperation operation) {
  const std::vector<std::size_t> counts(static_cast<std::size_t>(size()), count);
  reduce_scatter(input, output, counts, type, operation);
}

void Communicator::all_gather(const void* input, void* output, std::size_t count, CommDataType type) {
  const std::vector<std::size_t> counts(static_cast<std::size_t>(size()), count);
  all_gather(input, output, counts, type);
}

}  // namespace ferry
