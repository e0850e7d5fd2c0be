// What every backend shares: element sizes and names of the communicator's data types and operations.
#include "engine/comm/communicator.h"

namespace ferry {

std::size_t comm_data_type_size(CommDataType type) {
  switch (type) {
    case CommDataType::f32: return 4;
    case CommDataType::f64: return 8;
    case CommDataType::i64: return 8;
  }
  throw std::invalid_argument("unknown CommDataType " + std::to_string(static_cast<int>(type)));
}

const char* comm_data_type_name(CommDataType type) {
  switch (type) {
    case CommDataType::f32: return "f32";
    case CommDataType::f64: return "f64";
    case CommDataType::i64: return "i64";
  }
  throw std::invalid_argument("unknown CommDataType " + std::to_string(static_cast<int>(type)));
}

const char* reduce_operation_name(ReduceOperation operation) {
  switch (operation) {
    case ReduceOperation::sum: return "sum";
    case ReduceOperation::max: return "max";
  }
  throw std::invalid_argument("unknown ReduceOperation " + std::to_string(static_cast<int>(operation)));
}

}  // namespace ferry
