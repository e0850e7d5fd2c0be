#include "engine/comm/mpi_half_precision.h"

#include <stdexcept>
#include <string>

#include "engine/comm/mpi_check.h"
#include "engine/comm/reduction_arithmetic.h"

namespace ferry {
namespace {

template <CommDataType kType, ReduceOperation kOperation>
void combine(void* in, void* inout, int* length, MPI_Datatype*) {
  combine_half_precision(in, inout, static_cast<std::size_t>(*length), kType, kOperation);
}

void free_operation(MPI_Op& operation) {
  if (operation != MPI_OP_NULL) MPI_Op_free(&operation);
}

}  // namespace

MpiHalfPrecisionOperations::MpiHalfPrecisionOperations() {
  try {
    FERRY_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &two_bytes_));
    FERRY_MPI_CHECK(MPI_Type_commit(&two_bytes_));
    FERRY_MPI_CHECK(MPI_Op_create(&combine<CommDataType::bf16, ReduceOperation::sum>, 1, &bf16_sum_));
    FERRY_MPI_CHECK(MPI_Op_create(&combine<CommDataType::bf16, ReduceOperation::max>, 1, &bf16_max_));
    FERRY_MPI_CHECK(MPI_Op_create(&combine<CommDataType::f16, ReduceOperation::sum>, 1, &f16_sum_));
    FERRY_MPI_CHECK(MPI_Op_create(&combine<CommDataType::f16, ReduceOperation::max>, 1, &f16_max_));
  } catch (...) {
    release();
    throw;
  }
}

MpiHalfPrecisionOperations::~MpiHalfPrecisionOperations() { release(); }

void MpiHalfPrecisionOperations::release() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0) return;  // whoever owned MPI finalized it first: nothing is left to free
  for (MPI_Op* operation : {&bf16_sum_, &bf16_max_, &f16_sum_, &f16_max_}) free_operation(*operation);
  if (two_bytes_ != MPI_DATATYPE_NULL) MPI_Type_free(&two_bytes_);
}

MPI_Op MpiHalfPrecisionOperations::operation(CommDataType type, ReduceOperation operation) const {
  const bool bf16 = type == CommDataType::bf16;
  if (!bf16 && type != CommDataType::f16) {
    throw std::invalid_argument(std::string(comm_data_type_name(type)) + " is not a 16-bit float");
  }
  switch (operation) {
    case ReduceOperation::sum:
    case ReduceOperation::average: return bf16 ? bf16_sum_ : f16_sum_;
    case ReduceOperation::max: return bf16 ? bf16_max_ : f16_max_;
  }
  throw std::invalid_argument("unknown ReduceOperation " + std::to_string(static_cast<int>(operation)));
}

}  // namespace ferry
